//! The `section!` macro: one declaration of a TOML table's keys makes the struct the daemon
//! reads, the table as one layer writes it, laying one layer over another, and finishing the
//! merged layers into the struct, so that a key is written once (in `keys`) besides its
//! documented default in `config/ptyhub.toml`.
//!
//! ```text
//! section! {
//!     /// Docs of the struct.
//!     #[derive(Debug, Clone)]
//!     pub struct SessionConfig, written as RawSession in "session" {
//!         /// Docs of the field.
//!         rows: u16 = Int<1, 500>,          // the field, its type, the check it passes
//!         #[key = "keep_days"]              // the key, when it is not the field's name
//!         keep: Duration = Days<1, 36_500>,
//!         #[unset = default_dir()]          // its value when no layer sets it
//!         dir: PathBuf = PathBuf,
//!     }
//! }
//! ```
//!
//! The check is a type from `values` that deserialises only valid values, so the TOML parser
//! places a bad one at its line and column; [`Checked`] turns it into the field's type. In a
//! layer every key is optional and kept with its position (for checks across keys made after
//! parsing); unknown keys are refused. A key without `#[unset]` must be set by the embedded
//! default.

use toml::Spanned;

use super::values::Checked;
use super::{ConfigError, DEFAULT_ORIGIN};

/// Declares a section; see the module's documentation.
macro_rules! section {
    (
        $(#[$attr:meta])*
        pub struct $name:ident, written as $raw:ident in $table:literal {
            $(
                $(#[doc = $doc:literal])*
                $(#[key = $key:literal])?
                $(#[unset = $unset:expr])?
                $field:ident : $ty:ty = $check:ty
            ),* $(,)?
        }
    ) => {
        $(#[$attr])*
        pub struct $name {
            $(
                $(#[doc = $doc])*
                pub $field: $ty,
            )*
        }

        #[doc = concat!("`[", $table, "]` as one layer writes it: every key optional.")]
        #[derive(serde::Deserialize, Default)]
        #[serde(deny_unknown_fields)]
        pub(super) struct $raw {
            $(
                $(#[serde(rename = $key)])?
                pub(super) $field: Option<toml::Spanned<$check>>,
            )*
        }

        impl $raw {
            /// `over` laid on `self`, key by key.
            pub(super) fn merge(self, over: Self) -> Self {
                Self {
                    $($field: over.$field.or(self.$field),)*
                }
            }

            /// The section as the daemon reads it, once every layer is merged.
            pub(super) fn finish(self) -> Result<$name, $crate::config::ConfigError> {
                Ok($name {
                    $(
                        $field: section!(
                            @finish self.$field,
                            section!(@key $table, $field $(, $key)?)
                            $(, $unset)?
                        ),
                    )*
                })
            }
        }
    };
    (@key $table:literal, $field:ident) => {
        concat!($table, ".", stringify!($field))
    };
    (@key $table:literal, $field:ident, $key:literal) => {
        concat!($table, ".", $key)
    };
    (@finish $raw:expr, $key:expr) => {
        $crate::config::section::required($raw, $key)?
    };
    (@finish $raw:expr, $key:expr, $unset:expr) => {
        $crate::config::section::or_unset($raw, || $unset)
    };
}
pub(super) use section;

/// A key every configuration has: set by the embedded default if by no other layer. Missing,
/// it is the embedded default that lacks it.
pub(super) fn required<C: Checked<T>, T>(
    value: Option<Spanned<C>>,
    key: &str,
) -> Result<T, ConfigError> {
    value
        .map(|v| v.into_inner().into_value())
        .ok_or_else(|| ConfigError::Unplaced {
            origin: DEFAULT_ORIGIN.to_owned(),
            reason: format!("`{key}` is missing (the embedded default must set every key)"),
        })
}

/// A key that may be unset everywhere: `unset` says what that means.
pub(super) fn or_unset<C: Checked<T>, T>(
    value: Option<Spanned<C>>,
    unset: impl FnOnce() -> T,
) -> T {
    value.map_or_else(unset, |v| v.into_inner().into_value())
}

#[cfg(test)]
mod tests {
    use super::super::layers::parse;
    use super::super::values::{Int, Token};
    use super::*;

    section! {
        /// A section only this test has: its keys are written here and nowhere else.
        #[derive(Debug)]
        pub struct WidgetConfig, written as RawWidget in "widget" {
            /// How many.
            count: u16 = Int<1, 9>,
            /// Its name, if it has one.
            #[key = "label_text"]
            #[unset = None]
            label: Option<String> = Token,
        }
    }

    fn layer(text: &str) -> Result<RawWidget, ConfigError> {
        parse::<RawWidget>(text, "widget.toml")
    }

    /// Why `text` is refused, as start-up would say it.
    fn refused(text: &str) -> String {
        match layer(text) {
            Ok(_) => panic!("{text:?} was accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_key_declared_once_is_parsed_layered_and_checked() {
        let default = layer("count = 3\n").unwrap();

        let c = default.merge(layer("").unwrap()).finish().unwrap();
        assert_eq!((c.count, c.label), (3, None), "the default, and unset");

        let default = layer("count = 3\n").unwrap();
        let over = layer("label_text = \"a-widget-with-a-name\"\n").unwrap();
        let c = default.merge(over).finish().unwrap();
        assert_eq!(c.count, 3, "kept from the layer below");
        assert_eq!(c.label.as_deref(), Some("a-widget-with-a-name"));

        let default = layer("count = 3\n").unwrap();
        let c = default
            .merge(layer("count = 9\n").unwrap())
            .finish()
            .unwrap();
        assert_eq!(c.count, 9, "the layer above wins");

        let e = refused("\ncount = 10\n");
        assert_eq!(
            e,
            "widget.toml:2:9: 10 is out of range: expected an integer from 1 to 9"
        );
        let e = refused("label_text = \"short\"\n");
        assert!(e.starts_with("widget.toml:1:14: token must be"), "{e}");
        let e = refused("label = \"x\"\n");
        assert!(
            e.starts_with(
                "widget.toml:1:1: unknown field `label`, expected `count` or `label_text`"
            ),
            "{e}"
        );

        let e = layer("").unwrap().finish().unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{DEFAULT_ORIGIN}: `widget.count` is missing (the embedded default must set every key)"
            )
        );
    }
}
