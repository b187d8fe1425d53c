//! Session recordings on the real daemon with real bash: the `.cast` file is valid asciicast v2
//! whose output events are what viewers received, with resizes and markers and no input; it is
//! served after a daemon restart, pruned by age, stopped at its size cap, by a directory it
//! cannot write, by a full disk and by a file made read-only midway (those two as root),
//! without touching the session; share links reach it only when made to; and
//! the asciinema CLI reads it.

use crate::common;

use std::path::Path;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use common::{eventually, eventually_async, Client, Daemon, TIMEOUT};
use serde_json::{json, Value};
use uuid::Uuid;

/// One event of a recording.
#[derive(Debug, Clone)]
struct Ev {
    time: f64,
    code: String,
    data: String,
}

/// A recording parsed strictly: its header and events, times never going back.
fn parse(text: &str) -> (Value, Vec<Ev>) {
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().expect("a header")).expect("JSON");
    assert_eq!(header["version"], 2, "{header}");
    for key in ["width", "height", "timestamp"] {
        assert!(header[key].as_u64().is_some(), "header {key}: {header}");
    }
    assert!(header["title"].is_string(), "{header}");
    assert_eq!(header["env"]["TERM"], "xterm-256color");
    let mut events: Vec<Ev> = Vec::new();
    for line in lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let a = v
            .as_array()
            .unwrap_or_else(|| panic!("not an array: {line}"));
        assert_eq!(a.len(), 3, "{line}");
        let time = a[0].as_f64().expect("a time");
        let code = a[1].as_str().expect("a code").to_owned();
        let data = a[2].as_str().expect("data").to_owned();
        assert!(["o", "i", "r", "m"].contains(&code.as_str()), "{line}");
        if let Some(prev) = events.last() {
            assert!(time >= prev.time, "time went back at {line}");
        }
        events.push(Ev { time, code, data });
    }
    (header, events)
}

fn output(events: &[Ev]) -> String {
    events
        .iter()
        .filter(|e| e.code == "o")
        .map(|e| e.data.as_str())
        .collect()
}

fn data_of<'a>(events: &'a [Ev], code: &str) -> Vec<&'a str> {
    events
        .iter()
        .filter(|e| e.code == code)
        .map(|e| e.data.as_str())
        .collect()
}

async fn get(url: &str) -> reqwest::Response {
    reqwest::get(url).await.expect("GET")
}

async fn recording(d: &Daemon, id: Uuid) -> String {
    let resp = get(&d.http(&format!("/api/sessions/{id}/recording"))).await;
    assert_eq!(resp.status(), 200);
    resp.text().await.expect("body")
}

/// Waits until the recording holds `needle` in its output events; returns it.
async fn recorded(d: &Daemon, id: Uuid, needle: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        let resp = get(&d.http(&format!("/api/sessions/{id}/recording"))).await;
        if resp.status() == 200 {
            let text = resp.text().await.unwrap_or_default();
            if output(&parse(&text).1).contains(needle) {
                return text;
            }
        }
        assert!(start.elapsed() < TIMEOUT, "{needle:?} never recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A browser viewer that created session `id` and saw its prompt.
async fn shell(d: &Daemon, id: Uuid) -> Client {
    let mut c = Client::connect(&d.ws(id, "?assistant=shell")).await;
    c.wait_screen("$ ").await;
    c
}

async fn scrollback(d: &Daemon, id: Uuid) -> Vec<u8> {
    let v: Value = get(&d.http(&format!("/api/sessions/{id}/scrollback")))
        .await
        .json()
        .await
        .expect("JSON");
    base64::engine::general_purpose::STANDARD
        .decode(v["scrollback"].as_str().expect("scrollback"))
        .expect("base64")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_is_asciicast_with_the_output_resizes_and_markers() {
    let d = Daemon::in_process();
    let id = Uuid::new_v4();
    let mut c = shell(&d, id).await;
    c.resize(30, 100).await;
    c.run("stty size; echo SIZE-$((40+2))", "SIZE-42").await;
    // Characters of two to four bytes, which PTY reads may cut anywhere.
    c.run(
        "for i in $(seq 300); do printf 'é€🦀%d ' $i; done; echo; echo UTF-$((1+1))",
        "UTF-2",
    )
    .await;
    c.send_json(json!({"type":"chat","userName":"Ann","text":"look here"}))
        .await;
    c.wait_json("chat").await;
    let renamed = reqwest::Client::new()
        .patch(d.http(&format!("/api/sessions/{id}")))
        .json(&json!({"name": "build"}))
        .send()
        .await
        .expect("PATCH");
    assert_eq!(renamed.status(), 200);
    c.run("echo END-$((3*3))", "END-9").await;

    let text = recorded(&d, id, "END-9").await;
    let (header, events) = parse(&text);
    assert_eq!(
        (header["width"].as_u64(), header["height"].as_u64()),
        (Some(80), Some(24))
    );
    assert!(
        data_of(&events, "r").contains(&"100x30"),
        "{:?}",
        data_of(&events, "r")
    );
    let markers = data_of(&events, "m");
    // Under the owner's name (authentication is off: every caller is the owner).
    let chat = format!("{}: look here", ptyhub::auth::owner_name());
    assert!(markers.contains(&chat.as_str()), "{markers:?}");
    assert!(markers.contains(&"renamed: build"), "{markers:?}");
    assert!(data_of(&events, "i").is_empty(), "no input by default");
    assert!(output(&events).contains("é€🦀300 "));

    // Byte for byte what a viewer received: all output so far (the scrollback endpoint holds
    // it whole: less than its 64 KiB), and the viewer's stream a suffix of it.
    eventually_async("the recording caught up with the log", || async {
        let text = recording(&d, id).await;
        output(&parse(&text).1).as_bytes() == scrollback(&d, id).await
    })
    .await;
    let text = recording(&d, id).await;
    let joined = output(&parse(&text).1);
    // The viewer reads on until it has what was recorded (its stream ends the same way).
    c.until("the viewer's stream is the end of the recording", |c| {
        joined.as_bytes().ends_with(&c.output) && joined.as_bytes().ends_with(b"$ ")
    })
    .await;

    let resp = get(&d.http(&format!("/api/sessions/{id}/recording"))).await;
    assert_eq!(resp.headers()["content-type"], "application/x-asciicast");
    let disposition = resp.headers()["content-disposition"].to_str().unwrap();
    assert!(
        disposition.contains("filename=\"build.cast\""),
        "{disposition}"
    );

    let list: Value = get(&d.http("/api/recordings")).await.json().await.unwrap();
    let mine = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.to_string())
        .cloned()
        .expect("listed");
    assert_eq!(mine["assistant"], "shell");
    assert_eq!(mine["name"], "build", "renamed while recording");
    assert!(mine["ended"].is_null(), "running: {mine}");
    assert!(mine["bytes"].as_u64().unwrap() > 1000);
    let one = get(&d.http(&format!("/api/recordings/{id}"))).await;
    assert_eq!(one.status(), 200);

    // Errors: JSON, with the right status.
    let missing = Uuid::new_v4();
    let resp = get(&d.http(&format!("/api/sessions/{missing}/recording"))).await;
    assert_eq!(resp.status(), 404);
    assert!(resp.json::<Value>().await.unwrap()["error"].is_string());
    let http = reqwest::Client::new();
    let resp = http.post(d.http("/api/recordings")).send().await.unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "GET");
    let resp = http
        .put(d.http(&format!("/api/recordings/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (resp.status().as_u16(), &resp.headers()["allow"]),
        (405, &"GET, DELETE".parse().unwrap())
    );
    let resp = http
        .delete(d.http(&format!("/api/recordings/{missing}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let resp = get(&d.http("/api/recordings/nope")).await;
    assert_eq!(resp.status(), 400);

    // The asciinema CLI reads it.
    let file = d.dir.path().join("recording.cast");
    std::fs::write(&file, &text).unwrap();
    let cat = std::process::Command::new("asciinema")
        .arg("cat")
        .arg(&file)
        .output()
        .expect("asciinema 2.4.0 is installed (tests/run installs it)");
    assert!(
        cat.status.success(),
        "{}",
        String::from_utf8_lossy(&cat.stderr)
    );
    assert!(String::from_utf8_lossy(&cat.stdout).contains("END-9"));

    let resp = http
        .delete(d.http(&format!("/api/recordings/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(
        get(&d.http(&format!("/api/recordings/{id}")))
            .await
            .status(),
        404
    );
}

/// The status of a GET with a bearer token.
async fn status_as(d: &Daemon, path: &str, token: &str) -> u16 {
    reqwest::Client::new()
        .get(d.http(path))
        .bearer_auth(token)
        .send()
        .await
        .expect("GET")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_links_reach_their_own_recording_only_when_made_to() {
    let token = "recording-test-token-0123456789";
    let d = Daemon::in_process_auth(&common::config(""), Some(token));
    let (id, other) = (Uuid::new_v4(), Uuid::new_v4());
    let mut c = Client::connect(&format!("{}&token={token}", d.ws(id, "?assistant=shell"))).await;
    c.wait_screen("$ ").await;
    let mut o = Client::connect(&format!(
        "{}&token={token}",
        d.ws(other, "?assistant=shell")
    ))
    .await;
    o.wait_screen("$ ").await;
    let make = |record: Option<bool>| {
        let url = d.http(&format!("/api/sessions/{id}/share"));
        let mut body = json!({"role": "viewer"});
        if let Some(r) = record {
            body["record"] = json!(r);
        }
        async move {
            let v: Value = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .expect("POST")
                .json()
                .await
                .expect("JSON");
            assert_eq!(v["record"], record.unwrap_or(false), "{v}");
            v["token"].as_str().expect("a token").to_owned()
        }
    };
    let (plain, recorder) = (make(None).await, make(Some(true)).await);
    let mine = format!("/api/sessions/{id}/recording");
    eventually_async("the recording exists", || async {
        status_as(&d, &mine, token).await == 200
    })
    .await;
    assert_eq!(
        status_as(&d, &mine, &plain).await,
        403,
        "default: no recording"
    );
    assert_eq!(status_as(&d, &mine, &recorder).await, 200);
    let listing = format!("/api/recordings/{id}");
    assert_eq!(status_as(&d, &listing, &recorder).await, 200);
    assert_eq!(status_as(&d, &listing, &plain).await, 403);
    let theirs = format!("/api/sessions/{other}/recording");
    assert_eq!(status_as(&d, &theirs, &recorder).await, 403);
    let theirs = format!("/api/recordings/{other}");
    assert_eq!(status_as(&d, &theirs, &recorder).await, 403);
    assert_eq!(status_as(&d, "/api/recordings", &recorder).await, 403);
    // The replay page follows the same rule as the file it plays.
    let page = format!("/replay/{id}");
    assert_eq!(status_as(&d, &page, token).await, 200);
    assert_eq!(status_as(&d, &page, &recorder).await, 200);
    assert_eq!(status_as(&d, &page, &plain).await, 403);
    assert_eq!(
        status_as(&d, &format!("/replay/{other}"), &recorder).await,
        403
    );
    assert_eq!(status_as(&d, "/replay/not-a-uuid", token).await, 400);
    let delete = reqwest::Client::new()
        .delete(d.http(&listing))
        .bearer_auth(&recorder)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(delete.status(), 403);
}

/// A config whose recordings go to `dir`, with `extra` lines in `[recording]`.
fn config_in(dir: &Path, extra: &str) -> String {
    common::config(&format!("[recording]\ndir = {dir:?}\n{extra}\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_sessions_recording_is_served_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_in(&dir.path().join("recordings"), "input = true");
    let id = Uuid::new_v4();
    {
        let mut d = Daemon::start_with(&cfg);
        let mut c = shell(&d, id).await;
        c.run("echo BEFORE-$((6*7))", "BEFORE-42").await;
        let resp = reqwest::Client::new()
            .delete(d.http(&format!("/api/sessions/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 204);
        c.until_closed().await;
        assert!(d.terminate().success());
    }
    let d = Daemon::start_with(&cfg);
    let text = recording(&d, id).await;
    let (_, events) = parse(&text);
    assert!(output(&events).contains("BEFORE-42"));
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let file = dir.path().join("recordings").join(format!("{id}.cast"));
    assert_eq!(mode(&file), 0o600, "the daemon's user only");
    assert_eq!(mode(&dir.path().join("recordings")), 0o700);
    // With `input = true` the keystrokes are there too.
    let typed: String = data_of(&events, "i").concat();
    assert!(typed.contains("echo BEFORE-$((6*7))"), "{typed:?}");
    let one: Value = get(&d.http(&format!("/api/recordings/{id}")))
        .await
        .json()
        .await
        .unwrap();
    assert!(one["ended"].is_string(), "{one}");
    assert!(one["duration"].as_f64().unwrap() > 0.0, "{one}");
    let list: Value = get(&d.http("/api/recordings")).await.json().await.unwrap();
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["id"] == id.to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_recordings_are_pruned_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let (old, fresh) = (Uuid::new_v4(), Uuid::new_v4());
    for id in [old, fresh] {
        let header = "{\"version\":2,\"width\":80,\"height\":24,\"timestamp\":0}\n";
        std::fs::write(dir.path().join(format!("{id}.cast")), header).unwrap();
    }
    let f = std::fs::File::options()
        .write(true)
        .open(dir.path().join(format!("{old}.cast")))
        .unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3 * 86_400))
        .unwrap();
    drop(f);
    let d = Daemon::in_process_with(&config_in(dir.path(), "keep_days = 2"));
    let old_path = dir.path().join(format!("{old}.cast"));
    eventually("the old recording pruned", || !old_path.exists()).await;
    assert!(dir.path().join(format!("{fresh}.cast")).exists());
    assert_eq!(
        get(&d.http(&format!("/api/recordings/{fresh}")))
            .await
            .status(),
        200
    );
}

/// The first error message the client got (it may have come already).
async fn told(c: &mut Client) -> Value {
    c.until("an error message", |c| c.last("error").is_some())
        .await;
    c.last("error").cloned().unwrap_or_default()
}

/// The `ptyhub_recording_failures_total` counter.
async fn failures(d: &Daemon) -> u64 {
    let text = get(&d.http("/metrics")).await.text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("ptyhub_recording_failures_total "))
        .and_then(|n| n.parse().ok())
        .expect("the counter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_size_cap_stops_the_recording_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_with(&config_in(dir.path(), "max_bytes_per_session = 4096"));
    let before = failures(&d).await;
    let id = Uuid::new_v4();
    let mut c = shell(&d, id).await;
    c.run(
        "head -c 20000 /dev/zero | tr '\\0' x; echo; echo BIG-$((5+5))",
        "BIG-10",
    )
    .await;
    let error = told(&mut c).await;
    assert_eq!(error["code"], "recording_failed", "{error}");
    let text = recording(&d, id).await;
    assert!(text.len() <= 4096, "{} bytes", text.len());
    let (_, events) = parse(&text);
    let markers = data_of(&events, "m");
    assert!(
        markers.iter().any(|m| m.contains("size limit")),
        "{markers:?}"
    );
    assert!(failures(&d).await > before);
    // The session is untouched.
    c.run("echo STILL-$((1+2))", "STILL-3").await;
    assert_eq!(c.count("error"), 1, "told once");
    assert!(d.log_text().contains("recording stopped at its size limit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_directory_leaves_the_session_running_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    // A directory under a regular file cannot be made, even by root.
    std::fs::write(dir.path().join("file"), b"").unwrap();
    let d = Daemon::start_with(&config_in(&dir.path().join("file/recordings"), ""));
    let id = Uuid::new_v4();
    let mut c = shell(&d, id).await;
    let error = told(&mut c).await;
    assert_eq!(error["code"], "recording_failed", "{error}");
    c.run("echo RUNNING-$((4+4))", "RUNNING-8").await;
    assert!(failures(&d).await >= 1);
    eventually("the failure logged", || {
        d.log_text().contains("recording failed")
    })
    .await;
    let resp = get(&d.http(&format!("/api/sessions/{id}/recording"))).await;
    assert_eq!(resp.status(), 404);
    // A writer joining later is told too.
    let mut late = Client::connect(&d.ws(id, "")).await;
    let error = told(&mut late).await;
    assert_eq!(error["code"], "recording_failed");
}

/// Whether this process may mount file systems and set attributes (root). When not, says the
/// test was skipped and why, so a run as another user does not pass silently.
fn root_or_skip(test: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    eprintln!("SKIPPED {test}: needs root (mount -t tmpfs, chattr +i); run as root to cover it");
    false
}

/// A small tmpfs on a fresh directory: a disk that fills up. Unmounted when dropped.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(test: &str, size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("ptyhub-test")
            .arg(dir.path())
            .status();
        match status {
            Ok(s) if s.success() => Some(Tmpfs(dir)),
            other => {
                eprintln!(
                    "SKIPPED {test}: mount -t tmpfs failed ({other:?}): no CAP_SYS_ADMIN here?"
                );
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a daemon that has not quite let go of its files yet must not leave it mounted.
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

/// Runs `chattr flag path`; whether it worked.
fn chattr(flag: &str, path: &Path) -> bool {
    std::process::Command::new("chattr")
        .arg(flag)
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_recording_and_the_session_goes_on() {
    let test = "a_full_disk_stops_the_recording_and_the_session_goes_on";
    if !root_or_skip(test) {
        return;
    }
    let Some(disk) = Tmpfs::mount(test, "64k") else {
        return;
    };
    let d = Daemon::start_with(&config_in(disk.path(), ""));
    let before = failures(&d).await;
    let id = Uuid::new_v4();
    let mut c = shell(&d, id).await;
    // Four times what the file system holds.
    c.run(
        "head -c 262144 /dev/zero | tr '\\0' y; echo; echo FULL-$((3*3))",
        "FULL-9",
    )
    .await;
    let error = told(&mut c).await;
    assert_eq!(error["code"], "recording_failed", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("No space left"), "{error}");
    assert!(failures(&d).await > before);
    eventually("the failure logged", || {
        let log = d.log_text();
        log.contains("recording failed") && log.contains("No space left")
    })
    .await;
    // The session is untouched, and writers are told once.
    c.run("echo STILL-$((1+2))", "STILL-3").await;
    assert_eq!(c.count("error"), 1, "told once");
    // What fitted is still served.
    let text = recording(&d, id).await;
    assert!(
        text.starts_with("{\"version\":2"),
        "{:?}",
        &text[..text.len().min(80)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_made_read_only_midway_stops_and_the_session_goes_on() {
    let test = "a_recording_made_read_only_midway_stops_and_the_session_goes_on";
    if !root_or_skip(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_with(&config_in(dir.path(), ""));
    let id = Uuid::new_v4();
    let mut c = shell(&d, id).await;
    c.run("echo BEFORE-$((2*3))", "BEFORE-6").await;
    recorded(&d, id, "BEFORE-6").await;
    let file = dir.path().join(format!("{id}.cast"));
    // Immutable: even root's writes to the open file fail (EPERM), as on a disk remounted
    // read-only. Not every file system has the attribute.
    if !chattr("+i", &file) {
        eprintln!("SKIPPED {test}: chattr +i failed on {}", file.display());
        return;
    }
    struct Mutable<'a>(&'a Path);
    impl Drop for Mutable<'_> {
        fn drop(&mut self) {
            chattr("-i", self.0);
        }
    }
    let _undo = Mutable(&file);
    c.run("echo AFTER-$((3*3))", "AFTER-9").await;
    let error = told(&mut c).await;
    assert_eq!(error["code"], "recording_failed", "{error}");
    assert!(failures(&d).await >= 1);
    eventually("the failure logged", || {
        d.log_text().contains("recording failed")
    })
    .await;
    c.run("echo STILL-$((2+2))", "STILL-4").await;
    assert_eq!(c.count("error"), 1, "told once");
    // The recording up to the failure is intact and served.
    let (_, events) = parse(&recording(&d, id).await);
    assert!(output(&events).contains("BEFORE-6"));
}

/// A process that keeps one core busy until it is dropped (and at most five CPU minutes, so a
/// test killed outright leaves nothing spinning for long).
struct Spinner {
    _child: common::KillOnDrop,
}

impl Spinner {
    fn start() -> Spinner {
        let child = std::process::Command::new("sh")
            .args(["-c", "ulimit -t 300; while :; do :; done"])
            .spawn()
            .expect("sh");
        Spinner {
            _child: common::KillOnDrop(child),
        }
    }
}

/// The last `n` bytes of a file (empty when it is missing).
fn file_tail(path: &Path, n: u64) -> Vec<u8> {
    use std::io::{Read as _, Seek as _};
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let _ = file.seek(std::io::SeekFrom::Start(len.saturating_sub(n)));
    let mut tail = Vec::new();
    let _ = file.read_to_end(&mut tail);
    tail
}

/// Lines `seq 1 N` printed, all of them, in order, once: the recorder kept pace with a flood
/// on a machine whose every core is busy (the PTY waited for it), and marked nothing as lost.
/// The log's window is the smallest allowed (64 KiB): a debug build reads the PTY several
/// times slower than a release one, and the window scales the time the recorder has, so the
/// recorder without pacing fell out of it here as it did out of 4 MiB in a release build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_on_a_busy_machine_is_recorded_whole() {
    const LINES: u64 = 2_000_000;
    let dir = tempfile::tempdir().unwrap();
    let cfg =
        config_in(dir.path(), "").replace("[session]\n", "[session]\noutput_log_bytes = 65536\n");
    assert!(cfg.contains("output_log_bytes"), "{cfg}");
    let d = Daemon::start_with(&cfg);
    let _busy = [Spinner::start(), Spinner::start()];
    let id = d
        .create_session(
            "unused",
            json!({"cmd": ["sh", "-c", format!("seq 1 {LINES}; echo SEQ-DONE-$((6*7))")]}),
        )
        .await;
    let file = dir.path().join(format!("{id}.cast"));
    // A long flood on a busy debug build: its own deadline, checked on the file's tail only.
    let start = std::time::Instant::now();
    while !String::from_utf8_lossy(&file_tail(&file, 4096)).contains("SEQ-DONE-42") {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the flood never finished recording"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let flood = start.elapsed();
    drop(_busy);
    let text = std::fs::read_to_string(&file).unwrap();
    let (_, events) = parse(&text);
    let lost: Vec<&str> = data_of(&events, "m")
        .into_iter()
        .filter(|m| m.contains("lost"))
        .collect();
    let joined = output(&events);
    let lines: Vec<&str> = joined.split("\r\n").collect();
    // Lines kept in order; output lost mid-line leaves pieces that are counted as garbled.
    let (mut kept, mut garbled, mut expected) = (0u64, 0u64, 1u64);
    for line in &lines {
        if *line == "SEQ-DONE-42" {
            break;
        }
        match line.parse::<u64>() {
            Ok(n) if n == expected => {
                kept += 1;
                expected += 1;
            }
            Ok(n) if n > expected && n <= LINES => expected = n + 1,
            _ => garbled += 1,
        }
    }
    let missing = LINES - kept;
    eprintln!(
        "recorded in {flood:?}: {missing} of {LINES} lines missing, {garbled} garbled, {} \
         markers of loss, the first {:?}",
        lost.len(),
        lost.first()
    );
    assert_eq!((missing, garbled), (0, 0), "lines missing");
    assert!(lost.is_empty(), "{lost:?}");
}

/// The cap counts what is written: escapes as JSON escapes them (an ESC is six bytes), so a
/// coloured flood whose output is under the cap, but not once encoded, stops at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coloured_flood_stops_at_the_cap_as_written() {
    const CAP: usize = 16384;
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_with(&config_in(
        dir.path(),
        &format!("max_bytes_per_session = {CAP}"),
    ));
    let id = Uuid::new_v4();
    let mut c = shell(&d, id).await;
    // 1400 × 10 bytes of output (under the cap), 28 KB once encoded (over it).
    c.run(
        "for i in $(seq 1400); do printf '\\033[31mX\\033[0m'; done; echo; echo HUE-$((2*4))",
        "HUE-8",
    )
    .await;
    let error = told(&mut c).await;
    assert_eq!(error["code"], "recording_failed", "{error}");
    let text = recording(&d, id).await;
    assert!(text.len() <= CAP, "{} bytes written, cap {CAP}", text.len());
    let (_, events) = parse(&text);
    let markers = data_of(&events, "m");
    assert!(
        markers.iter().any(|m| m.contains("size limit")),
        "{markers:?}"
    );
    c.run("echo STILL-$((1+4))", "STILL-5").await;
}

/// A recording whose file is deleted while its session runs stops at its next write (the
/// file has no link left) and says so, instead of writing on into an inode nobody can reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_deleted_midway_stops_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_with(&config_in(dir.path(), ""));
    let before = failures(&d).await;
    let id = Uuid::new_v4();
    let mut c = shell(&d, id).await;
    c.run("echo BEFORE-$((2*5))", "BEFORE-10").await;
    recorded(&d, id, "BEFORE-10").await;
    std::fs::remove_file(dir.path().join(format!("{id}.cast"))).unwrap();
    c.run("echo AFTER-$((3*5))", "AFTER-15").await;
    let error = told(&mut c).await;
    assert_eq!(error["code"], "recording_failed", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("deleted"), "{error}");
    assert!(failures(&d).await > before);
    c.run("echo STILL-$((2+5))", "STILL-7").await;
    assert_eq!(c.count("error"), 1, "told once");
    let resp = get(&d.http(&format!("/api/sessions/{id}/recording"))).await;
    assert_eq!(resp.status(), 404, "not brought back");
}

/// A recorder that takes nothing at all (its file is a FIFO nobody reads, so opening it
/// hangs, as on a hung disk) holds the session's flood for `recorder_pace::STALL` (10 s) at
/// most: then the session lets it go, says the recording failed, and reads on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_recorder_is_let_go_and_the_session_reads_on() {
    let dir = tempfile::tempdir().unwrap();
    let id = Uuid::new_v4();
    let fifo = dir.path().join(format!("{id}.cast"));
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    // The smallest window (64 KiB): the recorder is half of it behind after 32 KiB.
    let cfg =
        config_in(dir.path(), "").replace("[session]\n", "[session]\noutput_log_bytes = 65536\n");
    let d = Daemon::start_with(&cfg);
    let mut c = shell(&d, id).await;
    let start = std::time::Instant::now();
    c.send_binary(b"seq 1 40000; echo FLOOD-$((7*7))\r".to_vec())
        .await;
    c.until_within("the flood's end", Duration::from_secs(60), |c| {
        c.screen_text().contains("FLOOD-49")
    })
    .await;
    let held = start.elapsed();
    let error = told(&mut c).await;
    assert_eq!(error["code"], "recording_failed", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("took no output"), "{error}");
    assert!(
        held >= Duration::from_secs(9),
        "held {held:?}: the session waited"
    );
    eventually("the failure logged", || {
        d.log_text().contains("the recorder took no output")
    })
    .await;
    c.run("echo STILL-$((3+5))", "STILL-8").await;
    // Unblocks the recorder's open (it then sees it was let go and stops); non-blocking, so
    // this never waits itself.
    use std::os::unix::fs::OpenOptionsExt as _;
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&fifo);
    drop(reader);
}
