//! The session size policy: the minimum rows and cols over the viewers that may write.

/// Largest session height, rows.
pub const MAX_ROWS: u16 = 500;
/// Largest session width, columns.
pub const MAX_COLS: u16 = 1000;

/// A viewer's part in the size policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ViewerSize {
    /// Read-only viewers never shape the session.
    pub read_only: bool,
    /// `(rows, cols)` as last sent, clamped; `None` until the viewer sends one.
    pub size: Option<(u16, u16)>,
}

/// Clamps a requested size into the supported range.
pub fn clamp(rows: u16, cols: u16) -> (u16, u16) {
    (rows.clamp(1, MAX_ROWS), cols.clamp(1, MAX_COLS))
}

/// The size the session should have: rows and cols minimised separately over writers that
/// sent a size; `current` when there is none.
pub fn session_size<'a>(
    viewers: impl IntoIterator<Item = &'a ViewerSize>,
    current: (u16, u16),
) -> (u16, u16) {
    viewers
        .into_iter()
        .filter(|v| !v.read_only)
        .filter_map(|v| v.size)
        .reduce(|(r1, c1), (r2, c2)| (r1.min(r2), c1.min(c2)))
        .unwrap_or(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(rows: u16, cols: u16) -> ViewerSize {
        ViewerSize {
            read_only: false,
            size: Some((rows, cols)),
        }
    }

    #[test]
    fn minimum_taken_separately() {
        let v = [writer(40, 100), writer(30, 200)];
        assert_eq!(session_size(&v, (24, 80)), (30, 100));
    }

    #[test]
    fn unsized_and_read_only_viewers_do_not_count() {
        let v = [
            writer(40, 100),
            ViewerSize {
                read_only: false,
                size: None,
            },
            ViewerSize {
                read_only: true,
                size: Some((5, 5)),
            },
        ];
        assert_eq!(session_size(&v, (24, 80)), (40, 100));
    }

    #[test]
    fn no_sized_writer_keeps_current() {
        assert_eq!(session_size(&[], (33, 99)), (33, 99));
    }

    #[test]
    fn clamps() {
        assert_eq!(clamp(0, 0), (1, 1));
        assert_eq!(clamp(9999, 9999), (MAX_ROWS, MAX_COLS));
        assert_eq!(clamp(24, 80), (24, 80));
    }
}
