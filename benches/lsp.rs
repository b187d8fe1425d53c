//! The language server bridge's cost (docs/protocol.md section 13a): the round trip of a
//! request through `/ws/lsp/{lang}` against the same server's own stdio in the same run (two
//! instances of it, one per path, asked in turn), p50 and p99 and their difference; and a 10 MB
//! `didOpen` through each path (to `cat`, which echoes it back: the bridge both ways, against a
//! pipe both ways; and to the real server, until it answers the next hover).
//!
//! Run: `cargo bench --bench lsp [-- --samples 500 --server gopls]` (any server that hovers Go;
//! gopls is Debian's package, installed by tests/lsp/install.sh). Everything is on 127.0.0.1.

#[path = "../tests/common/launcher.rs"]
mod launcher;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use ptyhub::lsp::framing::{header, Decoder};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

const MAIN_GO: &str = "package main\n\nimport \"fmt\"\n\nfunc greet(name string) string { return \"hello \" + name }\n\nfunc main() {\n\tfmt.Println(greet(\"x\"))\n}\n";
const BIG: usize = 10 * 1024 * 1024;
const STEP: Duration = Duration::from_secs(120);

fn main() -> Result<()> {
    let arg = |name: &str| std::env::args().skip_while(|a| a != name).nth(1);
    let samples: usize = arg("--samples").map_or(Ok(300), |n| n.parse())?;
    let server = arg("--server").unwrap_or_else(|| "gopls".to_owned());
    let dir = tempfile::tempdir()?;
    let work = dir.path().join("work");
    std::fs::create_dir(&work)?;
    std::fs::write(work.join("go.mod"), "module example.com/m\n\ngo 1.19\n")?;
    std::fs::write(work.join("main.go"), MAIN_GO)?;
    let config = dir.path().join("ptyhub.toml");
    std::fs::write(
        &config,
        format!(
            "[recording]\nenabled = false\n[limits]\nlsp_message_bytes = 33554432\n\
             [lsp.go]\ncommand = [{server:?}]\n[lsp.echo]\ncommand = [\"cat\"]\n"
        ),
    )?;
    let log = dir.path().join("daemon.log");
    let daemon = launcher::Launch::new(launcher::CARGO_BIN, &config, dir.path(), &log)
        .args(["--no-auth"])
        .env("XDG_STATE_HOME", dir.path())
        .spawn()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(measure(daemon.addr(), &server, &work, samples))
}

/// One way to a server: its stdio, or the bridge's WebSocket.
// Two of each per run: their size does not matter.
#[allow(clippy::large_enum_variant)]
enum Way {
    Stdio {
        _child: tokio::process::Child,
        stdin: tokio::process::ChildStdin,
        stdout: tokio::process::ChildStdout,
        decoder: Decoder,
        buf: Vec<u8>,
    },
    Bridge(
        Box<
            tokio_tungstenite::WebSocketStream<
                tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
            >,
        >,
    ),
}

impl Way {
    fn stdio(argv: &[&str], cwd: &Path) -> Result<Way> {
        let mut child = tokio::process::Command::new(argv[0])
            .args(&argv[1..])
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", argv[0]))?;
        Ok(Way::Stdio {
            stdin: child.stdin.take().context("stdin")?,
            stdout: child.stdout.take().context("stdout")?,
            _child: child,
            decoder: Decoder::new(64 << 20),
            buf: vec![0; 256 * 1024],
        })
    }

    async fn bridge(url: &str) -> Result<Way> {
        let (ws, _) = tokio_tungstenite::connect_async(url).await?;
        Ok(Way::Bridge(Box::new(ws)))
    }

    async fn send(&mut self, msg: &str) -> Result<()> {
        match self {
            Way::Stdio { stdin, .. } => {
                stdin.write_all(header(msg.len()).as_bytes()).await?;
                stdin.write_all(msg.as_bytes()).await?;
            }
            Way::Bridge(ws) => ws.send(Message::Text(msg.to_owned())).await?,
        }
        Ok(())
    }

    async fn recv(&mut self) -> Result<String> {
        match self {
            Way::Stdio {
                stdout,
                decoder,
                buf,
                ..
            } => loop {
                if let Some(m) = decoder.next_message()? {
                    return Ok(m);
                }
                let n = stdout.read(buf).await?;
                if n == 0 {
                    bail!("the server's stdout ended");
                }
                decoder.feed(&buf[..n]);
            },
            Way::Bridge(ws) => loop {
                match ws.next().await {
                    Some(Ok(Message::Text(t))) => return Ok(t.to_string()),
                    Some(Ok(Message::Close(c))) => bail!("closed: {c:?}"),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e.into()),
                    None => bail!("the socket ended"),
                }
            },
        }
    }

    /// Reads until `done` says a message is the one awaited, answering the server's requests
    /// (settings: none; anything else: null) on the way.
    async fn until(&mut self, done: impl Fn(&Value) -> bool) -> Result<Value> {
        tokio::time::timeout(STEP, async {
            loop {
                let text = self.recv().await?;
                let v: Value = serde_json::from_str(&text)?;
                if done(&v) {
                    return Ok(v);
                }
                if let (Some(id), Some(method)) = (v.get("id"), v["method"].as_str()) {
                    let result = if method == "workspace/configuration" {
                        let n = v["params"]["items"].as_array().map_or(0, Vec::len);
                        Value::Array(vec![Value::Null; n])
                    } else {
                        Value::Null
                    };
                    let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
                    self.send(&reply.to_string()).await?;
                }
            }
        })
        .await
        .context("a step took too long")?
    }

    async fn request(&mut self, id: u64, method: &str, params: Value) -> Result<Value> {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(&msg.to_string()).await?;
        self.until(|v| v["id"] == id && v.get("method").is_none())
            .await
    }
}

/// `msg` framed through a fresh `cat`'s stdin and read back from its stdout, concurrently.
async fn cat_direct(msg: &str, work: &Path) -> Result<()> {
    let Way::Stdio {
        _child,
        mut stdin,
        mut stdout,
        mut decoder,
        mut buf,
    } = Way::stdio(&["cat"], work)?
    else {
        bail!("not a pipe");
    };
    let framed = [header(msg.len()).into_bytes(), msg.as_bytes().to_vec()].concat();
    let writer = tokio::spawn(async move { stdin.write_all(&framed).await });
    let back = loop {
        if let Some(m) = decoder.next_message()? {
            break m;
        }
        let n = stdout.read(&mut buf).await?;
        if n == 0 {
            bail!("cat's stdout ended");
        }
        decoder.feed(&buf[..n]);
    };
    writer.await??;
    if back.len() != msg.len() {
        bail!("cat echoed {} bytes, not {}", back.len(), msg.len());
    }
    Ok(())
}

fn uri(p: &Path) -> String {
    format!("file://{}", p.display())
}

async fn open_go(p: &mut Way, work: &Path) -> Result<()> {
    let init = json!({"processId": null, "rootUri": uri(work), "capabilities": {
        "workspace": {"configuration": true}, "window": {"workDoneProgress": true}}});
    p.request(1, "initialize", init).await?;
    p.send(&json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}).to_string())
        .await?;
    let doc = json!({"textDocument": {"uri": uri(&work.join("main.go")), "languageId": "go", "version": 1, "text": MAIN_GO}});
    p.send(&json!({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": doc}).to_string())
        .await?;
    Ok(())
}

fn hover(work: &Path) -> Value {
    json!({"textDocument": {"uri": uri(&work.join("main.go"))}, "position": {"line": 4, "character": 6}})
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

async fn measure(
    addr: std::net::SocketAddr,
    server: &str,
    work: &Path,
    samples: usize,
) -> Result<()> {
    let q = |lang: &str| format!("ws://{addr}/ws/lsp/{lang}?cwd={}", work.display());
    // A language server, direct and bridged, asked in turn.
    let mut direct = Way::stdio(&[server], work)?;
    let mut bridged = Way::bridge(&q("go")).await?;
    open_go(&mut direct, work).await?;
    open_go(&mut bridged, work).await?;
    let mut id = 10;
    for _ in 0..20 {
        for p in [&mut direct, &mut bridged] {
            id += 1;
            let r = p.request(id, "textDocument/hover", hover(work)).await?;
            if r["result"].is_null() {
                bail!("no hover: {r}");
            }
        }
    }
    let (mut d, mut b) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        for (p, times) in [(&mut direct, &mut d), (&mut bridged, &mut b)] {
            id += 1;
            let t = Instant::now();
            p.request(id, "textDocument/hover", hover(work)).await?;
            times.push(t.elapsed());
        }
    }
    d.sort();
    b.sort();
    println!("{server} hover round trip, {samples} each, asked in turn:");
    println!(
        "  stdio   p50 {:8.1} µs  p99 {:8.1} µs",
        pct(&d, 0.5),
        pct(&d, 0.99)
    );
    println!(
        "  bridge  p50 {:8.1} µs  p99 {:8.1} µs",
        pct(&b, 0.5),
        pct(&b, 0.99)
    );
    println!(
        "  added   p50 {:8.1} µs  p99 {:8.1} µs",
        pct(&b, 0.5) - pct(&d, 0.5),
        pct(&b, 0.99) - pct(&d, 0.99)
    );

    // 10 MB didOpen: a Go file of comment lines, then the next hover's answer.
    let line = "// ".to_owned() + &"x".repeat(96) + "\n";
    let big_text = "package main\n".to_owned() + &line.repeat(BIG / line.len());
    let big_doc =
        json!({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri(&work.join("big.go")), "languageId": "go", "version": 1, "text": big_text}}})
        .to_string();
    for (name, p) in [("stdio", &mut direct), ("bridge", &mut bridged)] {
        id += 1;
        let t = Instant::now();
        p.send(&big_doc).await?;
        p.request(id, "textDocument/hover", hover(work)).await?;
        println!(
            "  10 MB didOpen ({} bytes) then a hover, {name}: {:.1} ms",
            big_doc.len(),
            t.elapsed().as_secs_f64() * 1e3
        );
    }

    // The same 10 MB message to `cat` and back: the bridge both ways against a pipe both ways
    // (written by a task of its own, as the bridge does: one writer would fill cat's stdout).
    let mut bridged = Way::bridge(&q("echo")).await?;
    for round in 0..3 {
        let t = Instant::now();
        cat_direct(&big_doc, work).await?;
        let direct_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        bridged.send(&big_doc).await?;
        let back = tokio::time::timeout(STEP, bridged.recv()).await??;
        if back.len() != big_doc.len() {
            bail!("the echo is {} bytes, not {}", back.len(), big_doc.len());
        }
        println!(
            "  10 MB didOpen to cat and back, round {}: stdio {direct_ms:.1} ms, bridge {:.1} ms",
            round + 1,
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(())
}
