//! Live upgrade: SIGUSR2 (or `ptyhub upgrade`) re-executes the daemon in place and every
//! session goes on: same programs (same pids), the same screens cell by cell (colours, the
//! alternate screen, the cursor, modes, scrollback), chat, names, numbers, share links and the
//! recording; viewers are told 1012 and reconnect; nobody connecting is refused; a refused
//! upgrade (bad config, missing binary) leaves the daemon as it was; nothing leaks.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{assert_same_screen, eventually, eventually_async, Client, Daemon};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use uuid::Uuid;

const TOKEN: &str = "upgrade-test-token-0123456789";

/// A full-screen program: the alternate screen, input modes, colours, a cursor left mid-screen.
const FULLSCREEN: &str = r#"
printf 'main screen under it\n'
printf '\e[?1049h\e[?1h\e=\e[?2004h\e[?1002h\e[?1006h\e[2J'
for ((i = 1; i <= 120; i++)); do
  printf '\e[%d;%dH\e[48;5;%dm\e[1m c%d \e[0m' $(((i % 20) + 1)) $(((i * 7) % 60 + 1)) $((i % 256)) "$i"
done
printf '\e[22;3H\e[33mFULL-%s-DRAWN\e[0m\e[5;10H' SCREEN
read -r line
printf '\e[?1002l\e[?1006l\e[?2004l\e[?1l\e>\e[?1049l'
printf 'LEFT-%s-ALT %s\n' THE "$line"
"#;

async fn sized(d: &Daemon, id: Uuid, query: &str) -> Client {
    let mut c = Client::connect(&d.ws(id, query)).await;
    c.resize(24, 80).await;
    c
}

async fn joined(d: &Daemon, id: Uuid, query: &str) -> Client {
    let mut c = sized(d, id, query).await;
    c.wait_json("ready").await;
    c
}

async fn version(d: &Daemon) -> Option<Value> {
    let resp = reqwest::get(d.http("/api/version")).await.ok()?;
    resp.json().await.ok()
}

async fn upgrades(d: &Daemon) -> u64 {
    version(d).await.expect("version")["upgrades"]
        .as_u64()
        .expect("upgrades")
}

/// Sends SIGUSR2 and waits until the new image answers.
async fn upgrade(d: &Daemon) {
    let before = upgrades(d).await;
    kill(Pid::from_raw(d.pid() as i32), Signal::SIGUSR2).expect("signal");
    wait_upgraded(d, before + 1).await;
}

async fn wait_upgraded(d: &Daemon, n: u64) {
    eventually_async(&format!("upgrade {n} done"), || async {
        version(d)
            .await
            .is_some_and(|v| v["upgrades"].as_u64() == Some(n))
    })
    .await;
}

/// The daemon's children (the sessions' programs).
fn children(pid: u32) -> BTreeSet<i32> {
    let own = pid.to_string();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = s[s.rfind(')')? + 1..].to_owned();
                    rest.split_whitespace().nth(1).map(|pp| pp == own)
                })
                .unwrap_or(false)
        })
        .collect()
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// What each open descriptor is, for a failure message.
fn fd_targets(pid: u32) -> Vec<String> {
    let mut all: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let to = std::fs::read_link(e.path()).ok()?;
            Some(format!(
                "{}={}",
                e.file_name().to_string_lossy(),
                to.display()
            ))
        })
        .collect();
    all.sort();
    all
}

/// Every scrollback line the client's terminal holds, formatted.
fn scrollback(c: &mut Client) -> Vec<u8> {
    let screen = c.term.screen_mut();
    screen.set_scrollback(usize::MAX);
    let n = screen.scrollback();
    let mut out = Vec::new();
    for offset in (1..=n).rev() {
        screen.set_scrollback(offset);
        out.extend(
            screen
                .rows_formatted(0, 80)
                .next()
                .unwrap_or_default()
                .into_bytes(),
        );
        out.push(b'\n');
    }
    screen.set_scrollback(0);
    out
}

fn rest() -> reqwest::Client {
    reqwest::Client::new()
}

#[tokio::test]
async fn sessions_survive_an_upgrade_exactly() {
    let d = Daemon::start_args(&common::config(""), &["--token", TOKEN]);
    common::write_file(d.dir.path(), "full.sh", FULLSCREEN.as_bytes());
    let auth = format!("&token={TOKEN}");
    let (a_id, b_id, c_id) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());

    // A: a shell with coloured history; a chat line; renamed.
    let mut a = sized(&d, a_id, &format!("?assistant=shell&name=alpha{auth}")).await;
    a.wait_screen("$ ").await;
    a.run(
        r"for i in $(seq 1 60); do printf '\e[3%dm\e[1mline-%d\e[0m\n' $((i % 8)) $i; done; printf 'DONE-%s\n' A",
        "DONE-A",
    )
    .await;
    a.send_json(json!({"type": "chat", "userName": "Ann", "text": "before the upgrade"}))
        .await;
    a.wait_json("chat").await;
    let renamed = rest()
        .patch(d.http(&format!("/api/sessions/{a_id}")))
        .bearer_auth(TOKEN)
        .json(&json!({"name": "renamed"}))
        .send()
        .await
        .expect("rename");
    assert_eq!(renamed.status(), 200);
    // B: a full-screen program in the alternate screen, with input modes.
    let mut b = sized(&d, b_id, &format!("?assistant=shell{auth}")).await;
    b.wait_screen("$ ").await;
    b.run("bash full.sh", "FULL-SCREEN-DRAWN").await;
    // C: a program that dies while the daemon changes images.
    let mut c = sized(&d, c_id, &format!("?assistant=shell{auth}")).await;
    c.wait_screen("$ ").await;
    let share = common::share_token(&d, TOKEN, &a_id.to_string(), "viewer").await;

    let pid = d.pid();
    let programs = children(pid);
    assert_eq!(programs.len(), 3, "one program per session: {programs:?}");
    let c_pid = common::processes_of(c_id)
        .into_iter()
        .find(|p| programs.contains(p))
        .expect("c's program");
    let nums_before = numbers(&d).await;
    let mut ja = joined(&d, a_id, &format!("?{}", &auth[1..])).await;
    let mut jb = joined(&d, b_id, &format!("?{}", &auth[1..])).await;

    // The upgrade, through the CLI; C's program is killed meanwhile.
    let cli = tokio::process::Command::new(env!("CARGO_BIN_EXE_ptyhub"))
        .args(["upgrade", "--server", &d.http("/")])
        .env("PTYHUB_TOKEN", TOKEN)
        .output();
    let killer = async {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _ = kill(Pid::from_raw(c_pid), Signal::SIGKILL);
    };
    let (out, ()) = tokio::join!(cli, killer);
    let out = out.expect("ptyhub upgrade runs");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && printed.contains("upgraded ptyhub"),
        "ptyhub upgrade: {printed} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (viewer, what) in [
        (&mut a, "a"),
        (&mut b, "b"),
        (&mut ja, "ja"),
        (&mut jb, "jb"),
    ] {
        let (code, reason) = viewer.until_closed().await;
        assert_eq!(code, 1012, "{what} told the daemon restarts: {reason}");
    }
    assert_eq!(d.pid(), pid, "same process");

    // Same programs, same numbers, names, chat, screens.
    let after = children(pid);
    assert!(
        programs
            .iter()
            .filter(|&&p| p != c_pid)
            .all(|p| after.contains(p)),
        "the programs are the same processes: {programs:?} then {after:?}"
    );
    let nums_after = numbers(&d).await;
    assert_eq!(nums_before, nums_after, "uuids and numbers kept");
    let mut ja2 = joined(&d, a_id, &format!("?{}", &auth[1..])).await;
    let mut jb2 = joined(&d, b_id, &format!("?{}", &auth[1..])).await;
    assert_same_screen(&ja, &ja2, "a shell's screen across the upgrade");
    assert_same_screen(&jb, &jb2, "a full-screen program across the upgrade");
    assert!(jb2.term.screen().alternate_screen());
    assert_eq!(
        scrollback(&mut ja),
        scrollback(&mut ja2),
        "the scrollback across the upgrade"
    );
    assert!(
        ja2.messages
            .iter()
            .any(|m| m["type"] == "chat" && m["text"] == "before the upgrade"),
        "chat history kept"
    );
    let status = ja2.wait_json("status").await;
    assert_eq!(status["sessionName"], "renamed");

    // Input right after works, in both sessions; the share link still opens A.
    ja2.run("echo after-$((40+2))", "after-42").await;
    jb2.type_str("typed-after\r").await;
    jb2.wait_screen("LEFT-THE-ALT typed-after").await;
    let mut shared = joined(&d, a_id, &format!("?token={share}")).await;
    shared.wait_screen("after-42").await;

    // C ended while the images changed hands, and is reported so.
    eventually_async("c reported exited", || async {
        list(&d)
            .await
            .iter()
            .any(|s| s["id"] == c_id.to_string().as_str() && s["alive"] == false)
    })
    .await;

    // The recording goes on in the same file: before and after, in order, nothing twice.
    let recording = || async {
        rest()
            .get(d.http(&format!("/api/sessions/{a_id}/recording")))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("recording")
            .text()
            .await
            .expect("text")
    };
    eventually_async("output after the upgrade recorded", || async {
        recording().await.contains("after-42")
    })
    .await;
    let cast = recording().await;
    let mut output = String::new();
    let mut last = 0.0;
    for line in cast.lines().skip(1) {
        let (t, code, data): (f64, String, String) = serde_json::from_str(line).expect("event");
        assert!(t >= last, "times never go back: {t} after {last}");
        last = t;
        if code == "o" {
            output.push_str(&data);
        }
    }
    assert_eq!(output.matches("line-60").count(), 1, "recorded once");
    assert!(
        output.contains("after-42"),
        "output after the upgrade recorded"
    );
    assert!(d.log_text().contains("took over from the previous image"));
}

/// Every session's uuid and number.
async fn numbers(d: &Daemon) -> Vec<(String, u64)> {
    list(d)
        .await
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["num"].as_u64().unwrap(),
            )
        })
        .collect()
}

async fn list(d: &Daemon) -> Vec<Value> {
    rest()
        .get(d.http("/api/sessions"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json")
}

#[tokio::test]
async fn nobody_connecting_during_an_upgrade_is_refused() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut a = sized(&d, id, "?assistant=shell").await;
    a.wait_screen("$ ").await;
    let stop = tokio_util::sync::CancellationToken::new();
    // New connections in a tight loop (no keep-alive: each request is a fresh connection).
    let hammer = {
        let (url, stop) = (d.http("/healthz"), stop.clone());
        tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .expect("client");
            let (mut ok, mut failed) = (0, Vec::new());
            while !stop.is_cancelled() {
                match client.get(&url).send().await {
                    Ok(r) if r.status() == 200 => ok += 1,
                    Ok(r) => failed.push(format!("HTTP {}", r.status())),
                    Err(e) => failed.push(format!("{e:?}")),
                }
            }
            (ok, failed)
        })
    };
    for n in 1..=3 {
        upgrade(&d).await;
        assert_eq!(upgrades(&d).await, n);
    }
    stop.cancel();
    let (ok, failed) = hammer.await.expect("hammer");
    assert!(failed.is_empty(), "refused during upgrades: {failed:?}");
    assert!(ok > 0);
    let mut b = joined(&d, id, "").await;
    b.run("echo still-$((6*7))", "still-42").await;
}

#[tokio::test]
async fn a_refused_upgrade_leaves_the_daemon_as_it_was() {
    // A bad configuration: the new image's --check-config refuses it.
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut a = sized(&d, id, "?assistant=shell").await;
    a.wait_screen("$ ").await;
    let cfg = d.dir.path().join("ptyhub.toml");
    let good = std::fs::read_to_string(&cfg).expect("config");
    std::fs::write(&cfg, "[session]\ncols = \"wide\"\n").expect("break the config");
    kill(Pid::from_raw(d.pid() as i32), Signal::SIGUSR2).expect("signal");
    eventually_async("the refusal reported", || async {
        version(&d)
            .await
            .is_some_and(|v| !v["lastUpgradeError"].is_null())
    })
    .await;
    let v = version(&d).await.expect("version");
    assert_eq!(v["upgrades"], 0);
    let why = v["lastUpgradeError"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("configuration"), "{why}");
    assert!(d.log_text().contains("live upgrade refused"));
    // Untouched: the viewer is still connected and typing works.
    a.run("echo kept-$((2+3))", "kept-5").await;
    assert!(a.closed.is_none());
    // Fixed, the same daemon upgrades.
    std::fs::write(&cfg, good).expect("restore the config");
    upgrade(&d).await;
    let mut b = joined(&d, id, "").await;
    b.run("echo upgraded-$((3+4))", "upgraded-7").await;

    // A missing binary: the daemon runs from a copy that is then deleted.
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("ptyhub");
    std::fs::copy(common::launcher::CARGO_BIN, &bin).expect("copy the binary");
    let log = dir.path().join("daemon.log");
    std::fs::write(dir.path().join("ptyhub.toml"), common::config("")).expect("config");
    let p = common::launcher::Launch::new(&bin, dir.path().join("ptyhub.toml"), dir.path(), &log)
        .args(["--no-auth"])
        .spawn()
        .expect("starts");
    std::fs::remove_file(&bin).expect("delete the binary");
    p.signal(Signal::SIGUSR2);
    let url = format!("http://{}/api/version", p.addr());
    eventually_async("the missing binary reported", || async {
        let v: Option<Value> = match reqwest::get(&url).await {
            Ok(r) => r.json().await.ok(),
            Err(_) => None,
        };
        v.is_some_and(|v| !v["lastUpgradeError"].is_null())
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains("cannot run the new binary"), "{text}");
}

#[tokio::test]
async fn twenty_upgrades_leak_no_descriptor_and_no_memory() {
    let d = Daemon::start();
    let ids: Vec<Uuid> = (0..10).map(|_| Uuid::new_v4()).collect();
    for id in &ids {
        let mut c = sized(&d, *id, "?assistant=shell").await;
        c.run("printf 'ready-%s\\n' $$", "ready-").await;
    }
    // One upgrade first, so the image is in its steady state: adopted, and every recording
    // open again (each recorder reopens its file in a task of its own, a moment later).
    upgrade(&d).await;
    let recordings_open = || {
        fd_targets(d.pid())
            .iter()
            .filter(|t| t.ends_with(".cast"))
            .count()
            == ids.len()
    };
    eventually("every recording open", recordings_open).await;
    let (fds, rss) = (fd_targets(d.pid()), d.rss_kib());
    for _ in 0..20 {
        upgrade(&d).await;
    }
    // Connections of the polling above close by themselves; a leak stays.
    let start = std::time::Instant::now();
    while fd_count(d.pid()) > fds.len() {
        if start.elapsed() > common::TIMEOUT {
            panic!(
                "descriptors grew: before {fds:?}\nafter {:?}",
                fd_targets(d.pid())
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let rss_after = d.rss_kib();
    assert!(
        rss_after < rss * 3 / 2 + 8192,
        "memory grew from {rss} KiB to {rss_after} KiB"
    );
    assert_eq!(children(d.pid()).len(), 10, "every program still there");
    let mut c = joined(&d, ids[9], "").await;
    c.run("echo last-$((9*9))", "last-81").await;
}

#[test]
fn check_config_reports_the_image_formats_or_what_is_wrong() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("good.toml");
    std::fs::write(&good, common::config("")).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ptyhub"))
        .args(["--check-config", "--config"])
        .arg(&good)
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("image formats: 1"), "{text}");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[session]\ncols = 0\n").expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ptyhub"))
        .args(["--check-config", "--config"])
        .arg(&bad)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml:2") && err.contains("out of range"),
        "{err}"
    );
}

#[tokio::test]
async fn event_and_log_streams_resume_across_an_upgrade() {
    use common::sse::Sse;
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut a = sized(&d, id, "?assistant=shell").await;
    a.wait_screen("$ ").await;
    a.run("printf 'one-%s\\n' before", "one-before").await;
    let mut events = Sse::open(&d.http("/api/events?follow=1"), None).await;
    events
        .until("the session's creation", |e| {
            e.iter().any(|e| e.data.contains("created"))
        })
        .await;
    let mut log = Sse::open(&d.http(&format!("/api/sessions/{id}/log?follow=1")), None).await;
    log.until("the line before", |e| {
        e.iter().any(|e| e.data == "one-before")
    })
    .await;

    upgrade(&d).await;
    // Both streams end with the old image; clients resume with Last-Event-ID.
    events.until_end().await;
    log.until_end().await;
    let last_event = events.events.last().and_then(|e| e.id.clone()).expect("id");
    let last_line = log.events.last().and_then(|e| e.id.clone()).expect("id");
    let mut b = joined(&d, id, "").await;
    b.run("printf 'two-%s\\n' after", "two-after").await;
    let renamed = rest()
        .patch(d.http(&format!("/api/sessions/{id}")))
        .json(&json!({"name": "after-upgrade"}))
        .send()
        .await
        .expect("rename");
    assert_eq!(renamed.status(), 200);
    let mut events = Sse::open(&d.http("/api/events?follow=1"), Some(&last_event)).await;
    events
        .until("the rename after the upgrade", |e| {
            e.iter().any(|e| e.event == "rename")
        })
        .await;
    assert!(
        events.events.iter().all(|e| e.event != "reset"),
        "ids go on across the upgrade: {:?}",
        events.events
    );
    let first: u64 = events.events[0]
        .id
        .as_deref()
        .expect("id")
        .parse()
        .expect("n");
    assert_eq!(
        first,
        last_event.parse::<u64>().expect("n") + 1,
        "no id skipped or reused"
    );
    assert!(
        !events
            .events
            .iter()
            .any(|e| e.data.contains("\"ended\"") || e.data.contains("\"created\"")),
        "the upgrade neither ends nor creates sessions: {:?}",
        events.events
    );
    let mut log = Sse::open(
        &d.http(&format!("/api/sessions/{id}/log?follow=1")),
        Some(&last_line),
    )
    .await;
    log.until("the line after", |e| {
        e.iter().any(|e| e.data == "two-after")
    })
    .await;
    assert!(
        !log.texts().contains(&"one-before") && log.events.iter().all(|e| e.event != "reset"),
        "the log resumes exactly: {:?}",
        log.texts()
    );
}

/// The fallback when `execve` itself fails (after the new binary passed its check): the old
/// image adopts its own handoff, the path the daemon takes in `main`. Driven in-process, since
/// a real `execve` cannot be made to fail on cue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_execve_fails_the_old_image_takes_its_sessions_back() {
    use ptyhub::daemon::Daemon as Core;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ptyhub.toml");
    let toml = format!(
        "{}\n[recording]\ndir = {:?}\n",
        common::config(""),
        dir.path().join("recordings")
    );
    std::fs::write(&path, toml).expect("config");
    let cfg = std::sync::Arc::new(
        ptyhub::config::load(Some(&path), Some("127.0.0.1:0")).expect("config loads"),
    );
    let mut daemon = Core::new(cfg.clone(), None);
    let addr = daemon
        .serve(Core::bind(&cfg).await.expect("bind"))
        .expect("serve");
    let id = Uuid::new_v4();
    let url = |q: &str| format!("ws://{addr}/ws/{id}{q}");
    let mut a = Client::connect(&url("?assistant=shell")).await;
    a.resize(24, 80).await;
    a.wait_screen("$ ").await;
    a.run("echo kept-$((5*5))", "kept-25").await;
    let before = common::processes_of(id);

    let mut handoff = daemon.hand_over().await.expect("hand over");
    assert_eq!(a.until_closed().await.0, 1012);
    let failed = handoff.exec(std::path::Path::new("/nonexistent/ptyhub"), &[]);
    assert!(
        matches!(failed, ptyhub::upgrade::UpgradeError::Exec { .. }),
        "{failed}"
    );
    let daemon = Core::adopt(cfg, None, handoff).expect("adopts its own sessions");
    assert_eq!(daemon.addr(), Some(addr), "the same listening socket");
    let mut b = Client::connect(&url("")).await;
    b.resize(24, 80).await;
    b.wait_json("ready").await;
    b.wait_screen("kept-25").await;
    b.run("echo back-$((6*6))", "back-36").await;
    assert!(
        before.iter().all(|p| common::processes_of(id).contains(p)),
        "the same program"
    );
    daemon.end().await;
    eventually("the session's programs gone", || {
        common::processes_of(id).is_empty()
    })
    .await;
}

/// What a new image does with sessions it cannot adopt (an unreadable image, a configuration
/// that broke after the check): every process of each is ended and the programs are reaped.
#[test]
// The child is reaped by `abandon`, which is what is under test, not by `Child::wait`.
#[allow(clippy::zombie_processes)]
fn sessions_that_cannot_be_adopted_are_ended_not_orphaned() {
    use ptyhub::upgrade::image::{Image, ProcessImage, SessionImage};
    // A session leader with a background job that ignores SIGHUP, like a program's leftovers.
    let child = std::process::Command::new("setsid")
        .args(["bash", "-c", "trap '' HUP; sleep 300 & echo $! ; wait"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("setsid bash");
    let pid = child.id() as i32;
    let mut out = std::io::BufReader::new(child.stdout.expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).expect("the job's pid");
    let job: i32 = line.trim().parse().expect("the job's pid");
    let image = Image {
        sessions: vec![SessionImage {
            id: Uuid::new_v4(),
            process: Some(ProcessImage { pid, pty_fd: None }),
            ..SessionImage::default()
        }],
        ..Image::default()
    };
    ptyhub::upgrade::abandon(&image, Duration::from_secs(2));
    let gone = |p: i32| !std::path::Path::new(&format!("/proc/{p}")).exists();
    assert!(gone(pid), "the program was reaped");
    let start = std::time::Instant::now();
    while !gone(job) && start.elapsed() < common::TIMEOUT {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gone(job), "its background job was ended too");
}

/// Signals sent while an upgrade's `execve` runs (before the new image has its handlers) are
/// held and handled, never the default action that would end the daemon and every session.
#[tokio::test]
async fn signals_during_an_upgrade_are_held_not_fatal() {
    let mut d = Daemon::start();
    let id = Uuid::new_v4();
    let mut c = sized(&d, id, "?assistant=shell").await;
    c.run("printf 'ready-%s\\n' $$", "ready-").await;
    let pid = Pid::from_raw(d.pid() as i32);
    // A burst of upgrade requests: some land in the exec window of the one before.
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_millis(1500) {
        kill(pid, Signal::SIGUSR2).expect("signal");
        assert!(
            !d.has_exited(),
            "the daemon died of a signal during an upgrade"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    // The last one held is handled once the new image is ready: the count settles.
    let mut last = None;
    let settling = std::time::Instant::now();
    loop {
        let n = version(&d).await.and_then(|v| v["upgrades"].as_u64());
        if n.is_some_and(|n| n > 0) && n == last {
            break;
        }
        last = n;
        assert!(
            settling.elapsed() < common::TIMEOUT,
            "the upgrades never settled"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert!(
        !d.has_exited(),
        "the daemon died of a signal during an upgrade"
    );
    let mut again = joined(&d, id, "").await;
    again.run("echo still-$((6*7))", "still-42").await;
    // The program's signal mask is its own: nothing held leaks into the session.
    let shell = children(d.pid()).into_iter().next().expect("the shell");
    let status = std::fs::read_to_string(format!("/proc/{shell}/status")).expect("status");
    let blocked = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .expect("SigBlk");
    assert_eq!(
        u64::from_str_radix(blocked.trim(), 16).ok(),
        Some(0),
        "{status}"
    );
}
