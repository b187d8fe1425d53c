//! Deployment settings: `[tls]` as written and as the daemon reads it, and the values of
//! `[server] base_path` and `[proxy] trusted` (whose keys are in `keys`), with what the daemon
//! asks of a proxy address.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use serde::de::{self, Deserializer};
use serde::Deserialize;

use super::values::Checked;
use super::ProxyConfig;

/// `[tls]`: the daemon's own certificate, re-read on SIGHUP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM certificate chain, the server's certificate first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl ProxyConfig {
    /// Whether `ip` is one of the trusted proxies.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.trusted.iter().any(|net| net.contains(&ip))
    }
}

/// An IPv4 address that arrived mapped into IPv6 (a dual-stack listener) as the IPv4 address,
/// so that `127.0.0.1/32` matches it.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

// ---- as written ---------------------------------------------------------------------------

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

impl RawTls {
    /// `over` laid on `self`: cert and key go together, so a layer that sets either replaces
    /// the whole table.
    pub(super) fn merge(self, over: RawTls) -> RawTls {
        if over.cert.is_some() || over.key.is_some() {
            over
        } else {
            self
        }
    }

    /// `[tls]` finished: both files or neither.
    pub(super) fn finish(self) -> Result<Option<TlsConfig>, String> {
        match (self.cert, self.key) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => Ok(Some(TlsConfig { cert, key })),
            (Some(_), None) => Err("[tls] cert is set but key is not: set both or neither".into()),
            (None, Some(_)) => Err("[tls] key is set but cert is not: set both or neither".into()),
        }
    }
}

/// A checked `base_path`.
pub(super) struct BasePath(String);

impl<'de> Deserialize<'de> for BasePath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let p = String::deserialize(d)?;
        base_path_problem(&p).map_or(Ok(BasePath(p)), |why| Err(de::Error::custom(why)))
    }
}

impl Checked<String> for BasePath {
    fn into_value(self) -> String {
        self.0
    }
}

/// Why `p` cannot be a base path, if it cannot: it is pasted into URLs, cookies and the pages'
/// `<base>`, so only plain path segments are allowed.
fn base_path_problem(p: &str) -> Option<String> {
    if p.is_empty() {
        return None;
    }
    let Some(rest) = p.strip_prefix('/') else {
        return Some(format!(
            "base_path {p:?} must start with /, e.g. \"/ptyhub\""
        ));
    };
    if rest.is_empty() || rest.ends_with('/') {
        return Some(format!(
            "base_path {p:?} must not end with / (write \"\" for the root, \"/ptyhub\" for a prefix)"
        ));
    }
    for seg in rest.split('/') {
        let plain = seg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._~".contains(c));
        if seg.is_empty() || seg == "." || seg == ".." || !plain {
            return Some(format!(
                "base_path {p:?}: each segment must be letters, digits, - . _ or ~ (not empty, . or ..)"
            ));
        }
    }
    None
}

/// One trusted network: a CIDR (`10.0.0.0/8`) or a single address.
pub(super) struct Trusted(IpNet);

impl<'de> Deserialize<'de> for Trusted {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let s = s.trim();
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(Trusted(net.trunc()));
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Trusted(IpNet::from(ip)));
        }
        Err(de::Error::custom(format!(
            "{s:?} is not a network: write a CIDR such as \"127.0.0.1/32\" or \"10.0.0.0/8\""
        )))
    }
}

impl Checked<IpNet> for Trusted {
    fn into_value(self) -> IpNet {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_paths() {
        for ok in ["", "/ptyhub", "/a/b-c_d.e~"] {
            assert!(base_path_problem(ok).is_none(), "{ok}");
        }
        for bad in [
            "ptyhub", "/", "/ptyhub/", "//x", "/a//b", "/a/../b", "/a b", "/a?b", "/\"",
        ] {
            assert!(base_path_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn a_trusted_proxy_s_connection_cap_is_read_and_checked() {
        let read = |text: &str| crate::config::from_toml_str(text, "t").map(|c| c.proxy);
        assert_eq!(read("").unwrap().max_connections, 1024, "the default");
        let c = read("[proxy]\nmax_connections = 7\n").unwrap();
        assert_eq!(c.max_connections, 7);
        for bad in ["0", "1000001", "-1", "\"many\""] {
            let e = read(&format!("[proxy]\nmax_connections = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("t:2:"), "{bad}: {e}");
        }
    }

    #[test]
    fn trusted_networks_match_mapped_addresses() {
        let proxy = ProxyConfig {
            trusted: vec!["127.0.0.1/32".parse().unwrap(), "fd00::/8".parse().unwrap()],
            ..ProxyConfig::default()
        };
        assert!(proxy.trusts("127.0.0.1".parse().unwrap()));
        assert!(proxy.trusts("::ffff:127.0.0.1".parse().unwrap()));
        assert!(proxy.trusts("fd12::1".parse().unwrap()));
        assert!(!proxy.trusts("127.0.0.2".parse().unwrap()));
        assert!(!proxy.trusts("::1".parse().unwrap()));
    }
}
