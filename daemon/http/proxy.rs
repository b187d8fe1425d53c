//! Who a request is from, as far as it can be believed: the peer, or behind a trusted reverse
//! proxy the client it names (`X-Forwarded-For`, `-Proto`, `-Host`); and the `[server]
//! base_path` every route lives under.

use std::net::{IpAddr, SocketAddr};

use hyper::header::{HeaderMap, HOST};

use crate::config::{canonical, ProxyConfig};

/// The request's client as the daemon believes it.
#[derive(Debug, Clone)]
pub struct Client {
    /// The client's address: the peer's, or the forwarded one (port 0: the proxy does not
    /// say). Limits, rate limits and logs are keyed by it.
    pub addr: SocketAddr,
    /// Whether the client reached us over https (our own TLS, or the trusted proxy's).
    pub https: bool,
    /// The host the client asked for: `X-Forwarded-Host` from a trusted proxy, else `Host`.
    pub host: Option<String>,
    /// `[server] base_path`: empty or `/name`.
    pub base: String,
    /// Whether the socket's peer is a trusted proxy (`[proxy] trusted`): only then are its
    /// forwarded headers, and the signed-in user's (`[auth] user_header`), believed.
    pub trusted: bool,
}

impl Client {
    /// `https://host` or `http://host` as the client sees us, if the host is known.
    pub fn origin(&self) -> Option<String> {
        let scheme = if self.https { "https" } else { "http" };
        self.host.as_ref().map(|h| format!("{scheme}://{h}"))
    }
}

/// The client of a request from `peer` (over our own TLS when `tls`).
pub fn client(headers: &HeaderMap, peer: SocketAddr, tls: bool, proxy: &ProxyConfig) -> Client {
    let host = header(headers, HOST.as_str()).map(str::to_owned);
    if !proxy.trusts(peer.ip()) {
        return Client {
            addr: peer,
            https: tls,
            host,
            base: String::new(),
            trusted: false,
        };
    }
    let addr = forwarded_for(headers, peer.ip(), proxy).map_or(peer, |ip| SocketAddr::new(ip, 0));
    // The last value of the last header: the one the trusted peer itself set or appended.
    // An earlier value may be the client's own (a proxy that appends instead of replacing).
    let nearest = |name| {
        headers
            .get_all(name)
            .iter()
            .next_back()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let https = match nearest("x-forwarded-proto") {
        Some(proto) => proto.eq_ignore_ascii_case("https"),
        None => tls,
    };
    let host = nearest("x-forwarded-host")
        .filter(|h| h.chars().all(|c| c.is_ascii_graphic()))
        .map(str::to_owned)
        .or(host);
    Client {
        addr,
        https,
        host,
        base: String::new(),
        trusted: true,
    }
}

/// The client named by `X-Forwarded-For` (every such header, in order, as one list): walking
/// from the right, each trusted address is a proxy hop and the first untrusted one is the
/// client. A list of trusted hops only gives its left-most; an entry that is not an address
/// stops the walk at the hop that added it (nothing left of it can be believed).
fn forwarded_for(headers: &HeaderMap, peer: IpAddr, proxy: &ProxyConfig) -> Option<IpAddr> {
    let mut hops: Vec<&str> = Vec::new();
    for value in headers.get_all("x-forwarded-for") {
        let value = value.to_str().ok()?;
        hops.extend(value.split(',').map(str::trim).filter(|h| !h.is_empty()));
    }
    if hops.is_empty() {
        return None;
    }
    let mut last = canonical(peer);
    for hop in hops.iter().rev() {
        let Some(ip) = parse_hop(hop) else {
            return Some(last);
        };
        let ip = canonical(ip);
        if !proxy.trusts(ip) {
            return Some(ip);
        }
        last = ip;
    }
    Some(last)
}

/// An address as proxies write it: `1.2.3.4`, `2001:db8::1`, `[2001:db8::1]:443`, `1.2.3.4:80`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>()
        .ok()
        .or_else(|| hop.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            hop.strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .and_then(|h| h.parse().ok())
        })
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Where a request's path stands against the base path.
#[derive(Debug, PartialEq, Eq)]
pub enum Mount<'a> {
    /// Under it: the path with the base taken off (always starting with `/`).
    Inside(&'a str),
    /// The base itself without its slash: redirect to `base/`.
    Bare,
    /// Not under it.
    Outside,
}

/// `path` against `base` (empty or `/name`).
pub fn mount<'a>(base: &str, path: &'a str) -> Mount<'a> {
    if base.is_empty() {
        return Mount::Inside(path);
    }
    match path.strip_prefix(base) {
        Some("") => Mount::Bare,
        Some(rest) if rest.starts_with('/') => Mount::Inside(rest),
        _ => Mount::Outside,
    }
}

/// The redirect from the bare base (`/ptyhub`) to its root (`/ptyhub/`), query kept.
pub(super) fn to_base(
    req: &hyper::Request<hyper::body::Incoming>,
    base: &str,
) -> hyper::Response<super::Body> {
    let location = match req.uri().query() {
        Some(q) => format!("{base}/?{q}"),
        None => format!("{base}/"),
    };
    let mut resp = hyper::Response::new(super::full(Vec::new()));
    *resp.status_mut() = hyper::StatusCode::MOVED_PERMANENTLY;
    if let Ok(v) = hyper::header::HeaderValue::from_str(&location) {
        resp.headers_mut().insert(hyper::header::LOCATION, v);
    }
    resp
}

/// The request's client, as `route` recorded it.
pub(super) fn of<B>(req: &hyper::Request<B>) -> Option<&Client> {
    req.extensions().get::<Client>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn proxy(nets: &[&str]) -> ProxyConfig {
        ProxyConfig {
            trusted: nets.iter().map(|n| n.parse().unwrap()).collect(),
            ..ProxyConfig::default()
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn peer(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 5555)
    }

    #[test]
    fn forwarded_for_is_believed_from_trusted_peers_only() {
        let p = proxy(&["127.0.0.1/32", "10.0.0.0/8"]);
        let h = headers(&[
            ("x-forwarded-for", "6.6.6.6, 1.2.3.4"),
            ("x-forwarded-for", "10.1.1.1"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "dev.example.com"),
            ("host", "127.0.0.1:9"),
        ]);
        // Right to left: 10.1.1.1 is a trusted hop, 1.2.3.4 the client; 6.6.6.6 was written
        // by the client itself and is not believed.
        let c = client(&h, peer("127.0.0.1"), false, &p);
        assert_eq!(c.addr.ip(), "1.2.3.4".parse::<IpAddr>().unwrap());
        assert!(c.https && c.trusted);
        assert_eq!(c.origin().as_deref(), Some("https://dev.example.com"));
        // The same headers from an untrusted peer: ignored.
        let c = client(&h, peer("192.0.2.7"), false, &p);
        assert_eq!(c.addr, peer("192.0.2.7"));
        assert!(!c.https && !c.trusted);
        assert_eq!(c.host.as_deref(), Some("127.0.0.1:9"));
    }

    #[test]
    fn forwarded_for_edge_cases() {
        let p = proxy(&["127.0.0.1/32"]);
        let ip =
            |h: &[(&'static str, &'static str)]| client(&headers(h), peer("127.0.0.1"), true, &p);
        // No header: the peer itself; our own TLS decides the scheme.
        let c = ip(&[]);
        assert_eq!(c.addr, peer("127.0.0.1"));
        assert!(c.https);
        // Only trusted hops: the left-most.
        assert_eq!(
            ip(&[("x-forwarded-for", "127.0.0.1")]).addr.ip(),
            peer("127.0.0.1").ip()
        );
        // Garbage stops the walk at the hop that wrote it.
        assert_eq!(
            ip(&[("x-forwarded-for", "1.1.1.1, junk")]).addr.ip(),
            peer("127.0.0.1").ip()
        );
        assert_eq!(
            ip(&[("x-forwarded-for", "junk, [2001:db8::1]:443")])
                .addr
                .ip(),
            "2001:db8::1".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            ip(&[("x-forwarded-for", "::ffff:9.9.9.9")]).addr.ip(),
            "9.9.9.9".parse::<IpAddr>().unwrap()
        );
        assert!(!ip(&[("x-forwarded-proto", "http")]).https);
        // A proxy that appends: the client's own value comes first and is not believed.
        assert!(!ip(&[("x-forwarded-proto", "https, http")]).https);
        assert!(
            ip(&[
                ("x-forwarded-proto", "http"),
                ("x-forwarded-proto", "https")
            ])
            .https
        );
    }

    #[test]
    fn mounts() {
        assert_eq!(mount("", "/x"), Mount::Inside("/x"));
        assert_eq!(mount("/p", "/p/x"), Mount::Inside("/x"));
        assert_eq!(mount("/p", "/p/"), Mount::Inside("/"));
        assert_eq!(mount("/p", "/p"), Mount::Bare);
        assert_eq!(mount("/p", "/px"), Mount::Outside);
        assert_eq!(mount("/p", "/x"), Mount::Outside);
    }
}
