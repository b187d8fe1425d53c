//! Debian's nginx in front of daemons, shared by the integration tests (`tests/proxy.rs`,
//! `tests/cluster.rs`, `tests/sso.rs`) and the load generator (`benches/load/deploy.rs`, as a `#[path]`
//! module): a file shipped in `config/nginx/` with only its addresses, ports and certificate
//! paths substituted (so the shipped file is what is tested), inside a main config of its own
//! (prefix, pid, logs, temp dirs), on a loopback port; stopped when dropped.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// How long nginx gets to listen, and to exit after SIGTERM.
const WAIT: Duration = Duration::from_secs(10);

/// The nginx binary, if installed (tests/run installs Debian's package).
pub fn binary() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// A file of `config/nginx/`, as shipped.
pub fn shipped(name: &str) -> Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/nginx")
        .join(name);
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// `ptyhub.conf` (one host, TLS) in front of `upstream` on loopback `port`, with `cert`/`key`.
pub fn single_host_site(
    upstream: SocketAddr,
    port: u16,
    cert: &Path,
    key: &Path,
) -> Result<String> {
    let site = shipped("ptyhub.conf")?
        .replace("server 127.0.0.1:1977;", &format!("server {upstream};"))
        .replace("listen 443 ssl;", &format!("listen 127.0.0.1:{port} ssl;"))
        .replace("listen [::]:443 ssl;\n", "")
        .replace(
            "/etc/letsencrypt/live/dev.example.com/fullchain.pem",
            &cert.display().to_string(),
        )
        .replace(
            "/etc/letsencrypt/live/dev.example.com/privkey.pem",
            &key.display().to_string(),
        );
    if !site.contains(&format!("server {upstream};")) || !site.contains(&format!(":{port} ssl;")) {
        bail!("config/nginx/ptyhub.conf no longer has the lines the tests substitute");
    }
    Ok(site)
}

/// `ptyhub-cluster.conf` (many hosts, plain HTTP) with its example upstreams replaced by
/// `upstreams`, in order, and its listen by loopback `port`.
pub fn cluster_site(upstreams: &[SocketAddr], port: u16) -> Result<String> {
    let mut next = upstreams.iter();
    let mut listens = 0;
    let mut site = String::new();
    for line in shipped("ptyhub-cluster.conf")?.lines() {
        let t = line.trim();
        if t.starts_with("server 10.0.0.") && t.ends_with(":1977;") {
            let Some(addr) = next.next() else {
                bail!("ptyhub-cluster.conf has more upstreams than the test");
            };
            site.push_str(&format!("    server {addr};\n"));
        } else if t == "listen 80;" {
            listens += 1;
            site.push_str(&format!("    listen 127.0.0.1:{port};\n"));
        } else {
            site.push_str(line);
            site.push('\n');
        }
    }
    if next.next().is_some() || listens != 1 {
        bail!("ptyhub-cluster.conf no longer has the lines the tests substitute");
    }
    Ok(site)
}

/// `ptyhub-sso.conf` (nginx asking oauth2-proxy, plain HTTP) in front of `upstream`, with
/// `auth` in oauth2-proxy's place, on loopback `port`.
pub fn sso_site(upstream: SocketAddr, auth: SocketAddr, port: u16) -> Result<String> {
    let site = shipped("ptyhub-sso.conf")?
        .replace("server 127.0.0.1:1977;", &format!("server {upstream};"))
        .replace("server 127.0.0.1:4180;", &format!("server {auth};"))
        .replace("listen 80;", &format!("listen 127.0.0.1:{port};"));
    let substituted = [
        format!("server {upstream};"),
        format!("server {auth};"),
        format!("listen 127.0.0.1:{port};"),
    ];
    if !substituted.iter().all(|line| site.contains(line.as_str())) {
        bail!("config/nginx/ptyhub-sso.conf no longer has the lines the tests substitute");
    }
    Ok(site)
}

/// nginx running one site; SIGTERM (a fast stop: open WebSockets and streams are closed, not
/// waited for) when dropped.
pub struct Nginx {
    child: Child,
    /// The loopback port it listens on.
    pub port: u16,
    /// Its prefix: config, logs, temp files.
    pub dir: tempfile::TempDir,
}

impl Nginx {
    /// `scheme://127.0.0.1:PORT` and `path`.
    pub fn url(&self, scheme: &str, path: &str) -> String {
        format!("{scheme}://127.0.0.1:{}{path}", self.port)
    }

    /// Starts nginx with the site `site(port)` makes for a free loopback port; a few tries, as
    /// a port free a moment ago may be taken by the time nginx binds it.
    pub fn start(bin: &Path, site: impl Fn(u16) -> Result<String>) -> Result<Nginx> {
        let mut last = String::new();
        for _ in 0..5 {
            let dir = tempfile::tempdir().context("a temp dir for nginx")?;
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            std::fs::write(dir.path().join("site.conf"), site(port)?)?;
            let conf = dir.path().join("nginx.conf");
            std::fs::write(&conf, main_conf(dir.path()))?;
            let mut child = Command::new(bin)
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(&conf)
                .args(["-e", "stderr"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting nginx")?;
            let deadline = Instant::now() + WAIT;
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    last = format!(
                        "exited ({status}): {}",
                        std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
                    );
                    break;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Ok(Nginx { child, port, dir });
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("nginx did not listen within {WAIT:?}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        bail!("nginx did not start: {last}")
    }
}

/// The main config: one process (no master, so stopping it leaves nothing behind), its own
/// pid, logs and temp dirs in `dir`, the site included.
fn main_conf(dir: &Path) -> String {
    let d = dir.display();
    // Root runs the process as root so it can use the test's private temp dir.
    let user = if rustix::process::geteuid().is_root() {
        "user root;"
    } else {
        ""
    };
    format!(
        "{user}
daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 512; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    include {d}/site.conf;
}}
"
    )
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
