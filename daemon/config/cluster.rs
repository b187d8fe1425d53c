//! `[cluster]`: this host's name (the `X-Ptyhub-Host` header) and the peers whose session
//! lists the home page and `GET /api/sessions?all=1` merge: what each may be, and which peers
//! are asked in the clear. The keys are in `keys`.

use serde::de::{self, Deserializer};
use serde::Deserialize;

use super::values::Checked;
use super::ClusterConfig;

impl ClusterConfig {
    /// The peers asked over plain `http://` beyond this machine: the daemon's token goes to
    /// them in the clear, so the start and `--check-config` warn about each.
    pub fn cleartext_peers(&self) -> Vec<&str> {
        self.peers
            .iter()
            .map(String::as_str)
            .filter(|p| cleartext(p))
            .collect()
    }
}

/// Whether a peer at `url` is asked in the clear beyond this machine.
fn cleartext(url: &str) -> bool {
    url.starts_with("http://") && !loopback_host(url)
}

/// Whether `url`'s host is `localhost` or a loopback address.
fn loopback_host(url: &str) -> bool {
    let Some(host) = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
    else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| super::canonical(ip).is_loopback())
}

/// Whether `name` may be a host name here: it goes into a response header and the page, so
/// letters, digits, `.`, `-` and `_` only, 1 to 253 of them.
fn valid_host(name: &str) -> bool {
    (1..=253).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// The machine's hostname, or `localhost` when it has none fit for a header.
pub(super) fn machine_hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| valid_host(h))
        .unwrap_or_else(|| "localhost".to_owned())
}

/// `cluster.host`.
pub(super) struct HostName(String);

impl<'de> Deserialize<'de> for HostName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if !valid_host(&name) {
            return Err(de::Error::custom(format!(
                "host {name:?} must be 1 to 253 letters, digits, '.', '-' or '_'"
            )));
        }
        Ok(HostName(name))
    }
}

impl Checked<String> for HostName {
    fn into_value(self) -> String {
        self.0
    }
}

/// One of `cluster.peers`: an `http://` or `https://` base URL with a host and nothing after
/// the path.
pub(super) struct PeerUrl(String);

impl<'de> Deserialize<'de> for PeerUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let bad = |why: &str| {
            de::Error::custom(format!(
                "peer {text:?} {why} (expected a base URL such as \"http://10.0.0.2:1977\")"
            ))
        };
        let url = reqwest::Url::parse(&text).map_err(|e| bad(&format!("is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad("must start with http:// or https://"));
        }
        if url.host().is_none() {
            return Err(bad("has no host"));
        }
        if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
            return Err(bad("must have no query, fragment or user"));
        }
        Ok(PeerUrl(url.as_str().trim_end_matches('/').to_owned()))
    }
}

impl PeerUrl {
    /// The URL when it is plain `http://` beyond this machine.
    pub(super) fn cleartext(&self) -> Option<&str> {
        cleartext(&self.0).then_some(self.0.as_str())
    }
}

impl Checked<String> for PeerUrl {
    fn into_value(self) -> String {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use crate::config::from_toml_str;

    #[test]
    fn host_and_peers_are_read_and_checked() {
        let c = from_toml_str("", "t").unwrap();
        assert!(!c.cluster.host.is_empty());
        assert!(c.cluster.peers.is_empty());

        let c = from_toml_str(
            "[cluster]\nhost = \"a-1.example\"\npeers = [\"http://127.0.0.1:2000/\", \"https://b.example/ptyhub\"]\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.cluster.host, "a-1.example");
        assert_eq!(
            c.cluster.peers,
            ["http://127.0.0.1:2000", "https://b.example/ptyhub"]
        );

        for (text, want) in [
            ("[cluster]\nhost = \"a b\"\n", "t:2:8: host \"a b\" must be"),
            ("[cluster]\nhost = \"\"\n", "t:2:8: host \"\" must be"),
            (
                "[cluster]\npeers = [\"ftp://x\"]\n",
                "must start with http://",
            ),
            ("[cluster]\npeers = [\"nope\"]\n", "is not a URL"),
            ("[cluster]\npeers = [\"http://x/?a=1\"]\n", "no query"),
            ("[cluster]\nbogus = 1\n", "unknown field `bogus`"),
        ] {
            let e = from_toml_str(text, "t").unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn plain_http_beyond_this_machine_is_cleartext() {
        let peers = "peers = [\"http://10.1.2.3:1977\", \"http://127.0.0.2:1\", \"http://[::1]:1\", \"http://LocalHost:1\", \"https://10.1.2.4\", \"http://b.example/p\"]\n";
        let c = from_toml_str(
            &format!("[cluster]\nallow_cleartext_peers = true\n{peers}"),
            "t",
        )
        .unwrap();
        assert_eq!(
            c.cluster.cleartext_peers(),
            ["http://10.1.2.3:1977", "http://b.example/p"]
        );
        // Refused unless allowed: the token would cross the network in the clear.
        let e = from_toml_str(&format!("[cluster]\n{peers}"), "t")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("t:2:9: peer \"http://10.1.2.3:1977\" is plain http"),
            "{e}"
        );
        assert!(e.contains("allow_cleartext_peers = true"), "{e}");
        // Loopback and https peers need nothing.
        let c = from_toml_str(
            "[cluster]\npeers = [\"http://127.0.0.1:1\", \"https://b.example\"]\n",
            "t",
        )
        .unwrap();
        assert!(!c.cluster.allow_cleartext_peers);
    }
}
