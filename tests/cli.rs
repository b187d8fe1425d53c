//! The command-line client in a real terminal: tmux runs `ptyhub attach` in a pane,
//! `send-keys` types, `capture-pane` reads the screen; the other subcommands run as plain
//! processes against a real daemon.

use crate::common;

use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Daemon, TIMEOUT};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};

pub(crate) const TOKEN: &str = "cli-test-token-0123456789";
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_ptyhub");

/// Runs `ptyhub ARGS` against `server` with the test token; waits for it.
fn cli(server: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("PTYHUB_URL", server)
        .env("PTYHUB_TOKEN", TOKEN)
        .output()
        .expect("ptyhub runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A tmux server of the test's own (its own socket), one window of a quiet bash.
pub(crate) struct Tmux {
    socket: String,
}

impl Tmux {
    pub(crate) fn new(server: &str, cols: u16, rows: u16) -> Tmux {
        let socket = format!("ptyhub-cli-{}", uuid::Uuid::new_v4());
        let shell = format!(
            "env -i PATH=\"$PATH\" HOME=\"$HOME\" TERM=xterm-256color PTYHUB_URL={server} \
             PTYHUB_TOKEN={TOKEN} PS1='local> ' bash --norc --noprofile"
        );
        let t = Tmux { socket };
        let (x, y) = (cols.to_string(), rows.to_string());
        t.run(&["new-session", "-d", "-s", "t", "-x", &x, "-y", &y, &shell]);
        t.wait_for("the local prompt", |s| s.contains("local>"));
        t
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `text` then Enter.
    pub(crate) fn line(&self, text: &str) {
        self.run(&["send-keys", "-t", "t", "-l", text]);
        self.run(&["send-keys", "-t", "t", "Enter"]);
    }

    fn keys(&self, key: &str) {
        self.run(&["send-keys", "-t", "t", key]);
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "t"])
    }

    /// Waits (bounded) until the pane's screen satisfies `cond`.
    pub(crate) fn wait_for(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if cond(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "timed out waiting for {what}; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid of the program the pane's shell runs (the client).
    fn client_pid(&self) -> i32 {
        let shell = self.run(&["display-message", "-p", "-t", "t", "#{pane_pid}"]);
        let start = Instant::now();
        loop {
            let out = Command::new("pgrep")
                .args(["-P", shell.trim()])
                .output()
                .expect("pgrep runs");
            if let Some(pid) = String::from_utf8_lossy(&out.stdout).lines().next() {
                return pid.trim().parse().expect("a pid");
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "no client under the pane's shell"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the pane's terminal is back in cooked mode: asks `stty` there.
    fn assert_cooked(&self) {
        self.line(
            "clear; stty -a | tr ' ' '\\n' | grep -E '^-?(icanon|echo)$' | tr '\\n' ' '; echo $((40+2))END",
        );
        // The marker is computed, so the typed command itself never matches it.
        let screen = self.wait_for("stty's answer", |s| s.contains("42END"));
        assert!(
            screen.contains("icanon echo 42END"),
            "the terminal was left in raw mode:\n{screen}"
        );
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}

/// Whether the remote shell's prompt (`$ `, its space trimmed by tmux) is on the screen.
fn remote_prompt(screen: &str) -> bool {
    screen.lines().any(|l| l == "$" || l.starts_with("$ "))
}

fn server_of(d: &Daemon) -> String {
    format!("http://{}", d.addr)
}

/// A session made through the CLI: its number.
fn new_session(server: &str, name: &str) -> String {
    let out = cli(server, &["new", "--name", name]);
    assert!(out.status.success(), "{}", stderr(&out));
    let line = stdout(&out);
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "number, uuid, URL: {line:?}");
    assert!(
        fields[2].contains(&format!("/session/{}", fields[1])),
        "{line:?}"
    );
    fields[0].to_owned()
}

/// `GET /api/sessions/{id}` as JSON.
async fn session_info(server: &str, id: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{server}/api/sessions/{id}"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json")
}

#[tokio::test]
async fn attach_types_follows_the_size_detaches_and_restores_the_terminal() {
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));
    let server = server_of(&d);
    let num = new_session(&server, "pair");
    let t = Tmux::new(&server, 100, 30);
    t.line(&format!("{BIN} attach pair; echo STATUS=$?"));
    t.wait_for("the remote prompt", remote_prompt);
    t.line("echo hi-$((6*7))");
    t.wait_for("the remote output", |s| s.contains("hi-42"));
    t.line("stty size");
    t.wait_for("the size at start", |s| s.contains("30 100"));
    assert_eq!(session_info(&server, &num).await["cols"], 100);

    t.run(&["resize-window", "-t", "t", "-x", "120", "-y", "40"]);
    common::eventually_async("the session follows the resize", || {
        let server = server.clone();
        let num = num.clone();
        async move { session_info(&server, &num).await["cols"] == 120 }
    })
    .await;
    t.line("stty size");
    t.wait_for("the size after SIGWINCH", |s| s.contains("40 120"));

    t.keys("C-]");
    let screen = t.wait_for("the detach", |s| s.contains("STATUS=0"));
    assert!(screen.contains("[detached from session"), "{screen}");
    assert_eq!(
        session_info(&server, &num).await["alive"],
        true,
        "the session keeps running"
    );
    t.assert_cooked();
}

#[tokio::test]
async fn the_remote_exit_code_is_the_client_status() {
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));
    let server = server_of(&d);
    let num = new_session(&server, "exits");
    let t = Tmux::new(&server, 80, 24);
    t.line(&format!("{BIN} attach {num}; echo STATUS=$?"));
    t.wait_for("the remote prompt", remote_prompt);
    t.line("exit 7");
    t.wait_for("the exit status", |s| s.contains("STATUS=7"));
    t.assert_cooked();
}

#[tokio::test]
async fn sigterm_to_the_client_restores_the_terminal() {
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));
    let server = server_of(&d);
    let num = new_session(&server, "term");
    let t = Tmux::new(&server, 80, 24);
    t.line(&format!("{BIN} attach {num}; echo STATUS=$?"));
    t.wait_for("the remote prompt", remote_prompt);
    let pid = t.client_pid();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("signal");
    t.wait_for("the client's status", |s| s.contains("STATUS=143"));
    assert_eq!(session_info(&server, &num).await["alive"], true);
    t.assert_cooked();
}

#[tokio::test]
async fn a_killed_server_leaves_the_terminal_restored_and_says_so_in_one_line() {
    let mut d = Daemon::start_args(&common::config(""), &["--token", TOKEN]);
    let server = server_of(&d);
    let num = new_session(&server, "doomed");
    let t = Tmux::new(&server, 80, 24);
    t.line(&format!("{BIN} attach {num} --retry-for 1; echo STATUS=$?"));
    t.wait_for("the remote prompt", remote_prompt);
    d.kill();
    let screen = t.wait_for("the client to give up", |s| s.contains("STATUS=1"));
    assert!(screen.contains("[connection lost"), "{screen}");
    assert!(
        screen.contains("ptyhub: cannot reach ptyhub at"),
        "{screen}"
    );
    t.assert_cooked();
}

/// A TCP relay the test can cut: every connection through it drops at once, and new ones
/// are held (accepted, not forwarded) until it is resumed.
struct Relay {
    addr: std::net::SocketAddr,
    /// Connections accepted so far.
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    live: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
    /// Whether new connections wait before they are forwarded.
    held: tokio::sync::watch::Sender<bool>,
}

impl Relay {
    async fn to(target: std::net::SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let live: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let accepted: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let (tasks, count) = (live.clone(), accepted.clone());
        let (held, hold) = tokio::sync::watch::channel(false);
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut hold = hold.clone();
                let task = tokio::spawn(async move {
                    if hold.wait_for(|held| !held).await.is_err() {
                        return;
                    }
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().expect("lock").push(task);
            }
        });
        Relay {
            addr,
            accepted,
            live,
            accept,
            held,
        }
    }

    /// Drops every connection open through the relay, and holds new ones until [`resume`].
    fn cut(&self) {
        self.held.send_replace(true);
        for task in self.live.lock().expect("lock").drain(..) {
            task.abort();
        }
    }

    /// Forwards the connections held since [`cut`], and new ones.
    fn resume(&self) {
        self.held.send_replace(false);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

// The relay runs on the test's runtime while the test waits on tmux: it needs threads of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_reconnects_and_the_replay_restores_the_screen_once() {
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));
    let num = new_session(&server_of(&d), "flaky");
    let relay = Relay::to(d.addr).await;
    let server = format!("http://{}", relay.addr);
    let t = Tmux::new(&server, 80, 24);
    t.line(&format!("{BIN} attach {num}; echo STATUS=$?"));
    t.wait_for("the remote prompt", remote_prompt);
    t.line("echo before-$((2+3))");
    t.wait_for("the first output", |s| s.contains("before-5"));
    let before = relay.accepted.load(std::sync::atomic::Ordering::SeqCst);
    relay.cut();
    // The client has seen the loss once it connects again; the relay holds that connection,
    // so what is typed now is typed while the connection is coming back (typed before the
    // client saw the loss, it could go into the dead socket: TCP gives no better).
    common::eventually("a new connection through the relay", || {
        relay.accepted.load(std::sync::atomic::Ordering::SeqCst) > before
    })
    .await;
    t.line("echo after-$((3+4))");
    relay.resume();
    let screen = t.wait_for("the keys typed across the reconnect", |s| {
        s.contains("after-7")
    });
    let shown = screen.lines().filter(|l| l.trim() == "before-5").count();
    assert_eq!(
        shown, 1,
        "the replay redraws the screen once, nothing doubled:\n{screen}"
    );
    t.keys("C-]");
    t.wait_for("the detach", |s| s.contains("STATUS=0"));
}

#[tokio::test]
async fn ls_new_kill_and_share() {
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));
    let server = server_of(&d);
    let one = new_session(&server, "alpha");
    new_session(&server, "beta");

    let out = cli(&server, &["ls"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("NUM  NAME"), "{table}");
    assert!(
        lines[0].contains("ASSISTANT") && lines[0].contains("STATE") && lines[0].contains("AGE")
    );
    assert!(
        lines
            .iter()
            // The state and how long it has been in it: "working 0s", "idle 2s".
            .any(|l| l.contains("alpha")
                && (l.contains("working ") || l.contains("idle "))
                && l.contains("80x24")),
        "{table}"
    );
    assert_eq!(lines.len(), 3, "{table}");

    let out = cli(&server, &["ls", "--json"]);
    let list: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(list.as_array().map(Vec::len), Some(2));

    let out = cli(&server, &["share", "alpha", "--ttl", "600"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let link = stdout(&out).trim().to_owned();
    let share_token = link
        .split("token=")
        .nth(1)
        .expect("a token in the link")
        .to_owned();
    // The link reaches its session, read-only: it may not type through the CLI either.
    let resp = reqwest::Client::new()
        .get(format!("{server}/api/sessions/{one}"))
        .bearer_auth(&share_token)
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), 200);

    let out = cli(&server, &["kill", "beta"]);
    assert!(out.status.success(), "{}", stderr(&out));
    common::eventually_async("beta gone", || {
        let server = server.clone();
        async move {
            let out = cli(&server, &["ls", "--json"]);
            let list: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            list.as_array().map(Vec::len) == Some(1)
        }
    })
    .await;
}

#[tokio::test]
async fn errors_are_one_line_with_a_failing_status() {
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));
    let server = server_of(&d);
    new_session(&server, "same");
    new_session(&server, "same");
    let check = |out: Output, want: &str| {
        let err = stderr(&out);
        assert!(!out.status.success(), "{want}: should fail");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
        assert!(
            err.starts_with("ptyhub: ") && err.contains(want),
            "{want} in {err:?}"
        );
    };
    let bad_token = Command::new(BIN)
        .args([
            "ls",
            "--server",
            &server,
            "--token",
            "wrong-token-wrong-token",
        ])
        .output()
        .expect("runs");
    check(bad_token, "refused the token");
    check(cli(&server, &["attach", "nope"]), "no session \"nope\"");
    check(cli(&server, &["attach", "same"]), "names 2 sessions");
    check(cli("not a url", &["ls"]), "bad server URL");
    check(
        cli("http://127.0.0.1:1", &["attach", "1"]),
        "cannot reach ptyhub",
    );
}

#[test]
fn completions_and_the_man_page_come_from_the_same_definitions() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .expect("runs");
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        for sub in ["attach", "exec", "ls", "new", "kill", "share"] {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    let out = Command::new(BIN).arg("man").output().expect("runs");
    let page = stdout(&out);
    assert!(
        out.status.success() && page.contains(".TH ptyhub"),
        "{page:.200}"
    );
    assert!(
        page.contains("attach"),
        "the man page lists the subcommands"
    );
}

/// A TLS-terminating relay (as a reverse proxy would be) in front of `target`, with a
/// certificate for 127.0.0.1 from a CA of the test's own; returns its address and the CA's
/// PEM file (given to the client as `SSL_CERT_FILE`, which the system's roots honour).
async fn tls_relay(
    target: std::net::SocketAddr,
    dir: &std::path::Path,
) -> (
    std::net::SocketAddr,
    std::path::PathBuf,
    tokio::task::JoinHandle<()>,
) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA");
    let key = KeyPair::generate().expect("key");
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let cert = params.signed_by(&key, &issuer).expect("cert");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("write CA");

    let config = tokio_rustls::rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            tokio_rustls::rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .expect("TLS config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Ok(mut plain) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                }
            });
        }
    });
    (addr, ca_file, task)
}

// The relay runs on the test's runtime while the test waits on tmux.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_wss_work_behind_a_tls_proxy() {
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));
    let num = new_session(&server_of(&d), "secure");
    let (addr, ca_file, relay) = tls_relay(d.addr, d.dir.path()).await;
    let server = format!("https://{addr}");

    let ls = Command::new(BIN)
        .args(["ls", "--server", &server, "--token", TOKEN])
        .env("SSL_CERT_FILE", &ca_file)
        .output()
        .expect("runs");
    assert!(ls.status.success(), "{}", stderr(&ls));
    assert!(stdout(&ls).contains("secure"), "{}", stdout(&ls));
    // Without the CA the certificate is refused, in one line.
    let untrusted = Command::new(BIN)
        .args(["ls", "--server", &server, "--token", TOKEN])
        .env("SSL_CERT_FILE", d.dir.path().join("no-such-file.pem"))
        .output()
        .expect("runs");
    assert!(!untrusted.status.success());
    assert_eq!(
        stderr(&untrusted).trim_end().lines().count(),
        1,
        "{}",
        stderr(&untrusted)
    );

    let t = Tmux::new(&server, 80, 24);
    let ca = ca_file.display();
    t.line(&format!(
        "SSL_CERT_FILE={ca} {BIN} attach {num}; echo STATUS=$?"
    ));
    t.wait_for("the remote prompt over wss", remote_prompt);
    t.line("echo tls-$((20+1))");
    t.wait_for("output over wss", |s| s.contains("tls-21"));
    t.keys("C-]");
    t.wait_for("the detach", |s| s.contains("STATUS=0"));
    relay.abort();
}

/// `--read-only` joins as a viewer (`role=viewer`): its keys never reach the session, its size
/// does not count, and the server refuses input on such a socket even from a full token.
#[tokio::test]
async fn read_only_attach_watches_without_typing_or_sizing() {
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));
    let server = server_of(&d);
    let num = new_session(&server, "watched");
    let uuid = session_info(&server, &num).await["id"]
        .as_str()
        .expect("uuid")
        .to_owned();
    let mut writer = common::Client::connect_raw(&format!(
        "ws://{}/ws/{uuid}/raw?cols=90&rows=30&token={TOKEN}",
        d.addr
    ))
    .await;
    writer
        .until("ready", |c| c.messages.iter().any(|m| m["type"] == "ready"))
        .await;

    let t = Tmux::new(&server, 70, 20);
    t.line(&format!("{BIN} attach --read-only {num}; echo STATUS=$?"));
    t.wait_for("the remote prompt", remote_prompt);
    assert_eq!(
        session_info(&server, &num).await["cols"],
        90,
        "a viewer's size does not count"
    );
    t.line("echo ro-$((1+1))");
    writer.type_str("echo w-$((2+2))\r").await;
    let screen = t.wait_for("the writer's output on the viewer's screen", |s| {
        s.contains("w-4")
    });
    assert!(
        !screen.contains("ro-2"),
        "a viewer's keys reached the session:\n{screen}"
    );
    t.keys("C-]");
    t.wait_for("the detach", |s| s.contains("STATUS=0"));

    // The socket itself refuses input, whatever a client sends.
    let mut viewer = common::Client::connect_raw(&format!(
        "ws://{}/ws/{uuid}/raw?role=viewer&token={TOKEN}",
        d.addr
    ))
    .await;
    viewer
        .until("ready", |c| c.messages.iter().any(|m| m["type"] == "ready"))
        .await;
    viewer.send_binary(b"echo sneaky\r".to_vec()).await;
    viewer
        .until("a read-only refusal", |c| {
            c.messages
                .iter()
                .any(|m| m["type"] == "error" && m["code"] == "read_only")
        })
        .await;
    let bad = reqwest::Client::new()
        .get(format!(
            "http://{}/ws/{uuid}/raw?role=owner&token={TOKEN}",
            d.addr
        ))
        .header("connection", "upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .expect("request");
    assert_eq!(bad.status(), 400, "an unknown role is a bad request");
}

/// `ptyhub exec`: stdout and stderr apart, stdin with its end of file, the environment and
/// directory asked for, the exit status passed through, 127 for a program that cannot start.
#[tokio::test]
async fn exec_runs_as_if_local() {
    use std::io::Write;
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));
    let server = server_of(&d);
    let dir = d.dir.path().display().to_string();
    let mut child = Command::new(BIN)
        .args(["exec", "--cwd", &dir, "--env", "GREETING=hello there", "--"])
        .args([
            "sh",
            "-c",
            "echo \"$GREETING from $(pwd)\"; echo oops >&2; wc -c; exit 3",
        ])
        .env("PTYHUB_URL", &server)
        .env("PTYHUB_TOKEN", TOKEN)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let input = vec![b'x'; 300_000];
    let mut stdin = child.stdin.take().expect("stdin");
    std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
        // Dropped: the end of file reaches the program, and wc answers.
    });
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("joined")
        .expect("waited");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("hello there from {dir}\n300000\n"));
    assert_eq!(stderr(&out), "oops\n");

    let missing = cli(&server, &["exec", "--", "/no/such/program"]);
    assert_eq!(missing.status.code(), Some(127), "{}", stderr(&missing));
    assert!(
        stderr(&missing).contains("ptyhub exec:"),
        "{}",
        stderr(&missing)
    );
}

/// Ctrl+C (SIGINT to the client) reaches the remote program, whose death by it is the
/// client's status (128 + 2).
#[tokio::test]
async fn exec_forwards_signals() {
    let d = Daemon::in_process_auth(&common::config(""), Some(TOKEN));
    let server = server_of(&d);
    let mut child = Command::new(BIN)
        .args(["exec", "--", "sh", "-c", "echo started; exec sleep 60"])
        .env("PTYHUB_URL", &server)
        .env("PTYHUB_TOKEN", TOKEN)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let mut out = child.stdout.take().expect("stdout");
    let started = tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut buf = [0u8; 64];
        let n = out.read(&mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    });
    let first = tokio::time::timeout(TIMEOUT, started)
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(first, "started\n");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("signal");
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("joined")
        .expect("waited");
    assert_eq!(status.code(), Some(130));
}

#[tokio::test]
async fn attach_rides_through_a_live_upgrade_and_the_upgrade_command_reports_it() {
    let d = Daemon::start_args(&common::config(""), &["--token", TOKEN]);
    let server = server_of(&d);
    new_session(&server, "ride");
    let t = Tmux::new(&server, 100, 30);
    t.line(&format!("{BIN} attach ride; echo STATUS=$?"));
    t.wait_for("the remote prompt", remote_prompt);
    t.line("echo before-$((6*7))");
    t.wait_for("the remote output", |s| s.contains("before-42"));

    let out = cli(&server, &["upgrade"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("upgraded ptyhub "),
        "{}",
        stdout(&out)
    );
    // The client was told the daemon restarts and is back by itself (the replay redraws the
    // same screen over its notices), typing into the same shell.
    t.line("echo after-$((7*7))");
    let screen = t.wait_for("output after the upgrade", |s| s.contains("after-49"));
    assert!(screen.contains("before-42"), "{screen}");
    t.keys("C-]");
    t.wait_for("the detach", |s| s.contains("STATUS=0"));
}
