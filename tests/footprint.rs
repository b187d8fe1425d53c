//! The daemon's memory at rest: once quiet it lets go of the code pages it mapped, and runs on
//! as before (`daemon/idle_pages.rs`); after a flood it gives back what the flood took, in the
//! session and in each viewer.

use crate::common;

use common::{Client, Daemon};
use uuid::Uuid;

/// KiB of the daemon's own executable mapped from its file (the file-backed part of its
/// mappings' RSS: code, read-only data; not the relocated data, which is anonymous).
fn mapped_code_kib(pid: u32) -> u64 {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("the daemon's executable");
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let (mut ours, mut kib) = (false, 0);
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.first() {
            // A mapping's head: "start-end perms offset dev inode [path]".
            Some(first) if first.contains('-') && fields.len() >= 5 => {
                ours = fields
                    .get(5)
                    .is_some_and(|p| std::path::Path::new(p) == exe);
            }
            Some(&"Rss:") if ours => kib += fields[1].parse::<u64>().unwrap_or(0),
            Some(&"Anonymous:") if ours => kib -= fields[1].parse::<u64>().unwrap_or(0),
            _ => {}
        }
    }
    kib
}

/// A session and a viewer map much of the daemon's code; quiet, it lets go of nearly all of
/// it, and what comes next (typing, a new viewer) works as before, mapping back what it runs.
#[tokio::test]
async fn a_quiet_daemon_lets_go_of_its_code_and_runs_on() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut owner = Client::connect(&d.ws(id, "?assistant=shell")).await;
    owner.wait_json("ready").await;
    owner.run("echo mapped-$((6*7))", "mapped-42").await;
    let working = mapped_code_kib(d.pid());
    assert!(
        working > 1024,
        "only {working} KiB of code mapped after a session's start"
    );

    // Nothing asks the daemon anything meanwhile: /proc is read, not the daemon.
    let mut at_rest = working;
    common::eventually("the quiet daemon's code let go of", || {
        at_rest = mapped_code_kib(d.pid());
        at_rest < working / 3
    })
    .await;
    assert!(d.metric("ptyhub_idle_page_releases_total").await >= 1);

    // Up to the prompt after it, so that the two screens are compared at rest.
    owner.run("echo after-$((6*7))", "after-42\n$").await;
    let mut joiner = Client::connect(&d.ws(id, "")).await;
    joiner.wait_screen("after-42\n$").await;
    common::assert_same_screen(&owner, &joiner, "a viewer joining after the release");
    eprintln!("code mapped: {working} KiB working, {at_rest} KiB at rest");
}

/// The daemon's anonymous memory (heap, stacks), KiB.
fn anon_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The daemon's anonymous memory once at rest: two readings half a second apart agree.
async fn settled_anon_kib(pid: u32) -> u64 {
    let (mut idle, deadline) = (anon_kib(pid), std::time::Instant::now() + common::TIMEOUT);
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let now = anon_kib(pid);
        let settled = now.abs_diff(idle) < 128;
        idle = now;
        if settled {
            return idle;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon's memory never settled"
        );
    }
}

/// The daemon's anonymous memory once it is at most `bound` KiB, or when the wait's time is
/// up: the last reading either way, for the caller's assertion to report.
async fn anon_falls_to(pid: u32, bound: u64) -> u64 {
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    loop {
        let now = anon_kib(pid);
        if now <= bound || std::time::Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// A flood of tens of megabytes through a recorded session takes memory (the output log's
/// window, the recorder's buffers, the viewer's writes); once the session is quiet the daemon
/// gives it back: the recorder's buffers shrink, the log lets go of its window, the allocator
/// returns the freed pages.
#[tokio::test]
async fn after_a_flood_the_daemon_gives_its_memory_back() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut owner = Client::connect(&d.ws(id, "?assistant=shell")).await;
    owner.wait_json("ready").await;
    owner.run("echo warm-$((6*7))", "warm-42").await;
    let idle = settled_anon_kib(d.pid()).await;

    owner
        .type_str("head -c 30000000 /dev/zero | base64; echo FLOOD-$((6*7))-DONE\r")
        .await;
    owner.wait_screen("FLOOD-42-DONE").await;
    let peak = anon_kib(d.pid());
    let after = anon_falls_to(d.pid(), idle + 2 * 1024).await;
    assert!(
        after <= idle + 2 * 1024,
        "the daemon still holds {} KiB more than at rest ({idle} KiB; {peak} KiB at the \
         flood's end)",
        after - idle
    );
    eprintln!(
        "anonymous memory: {idle} KiB at rest, {peak} KiB after the flood, {after} KiB later"
    );
    owner.run("echo still-$((6*7))", "still-42").await;
}

/// Each viewer of a flood grows buffers for it (a batch read from the output log and its
/// frames, 128 KiB; the session's frame buffer for it): once the viewer is quiet it gives
/// them back, so viewers that saw a flood cost what idle ones do.
#[tokio::test]
async fn viewers_give_back_what_a_flood_grew() {
    use futures_util::StreamExt;
    const VIEWERS: usize = 24;
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut owner = Client::connect(&d.ws(id, "?assistant=shell")).await;
    owner.wait_json("ready").await;
    // Raw-dialect viewers that read everything and keep nothing.
    let mut readers = Vec::new();
    for _ in 0..VIEWERS {
        let (mut ws, _) = tokio_tungstenite::connect_async(d.ws_raw(id, ""))
            .await
            .expect("a raw viewer connects");
        readers.push(tokio::spawn(async move {
            while let Some(Ok(_)) = ws.next().await {}
        }));
    }
    owner.run("echo warm-$((6*7))", "warm-42").await;
    let idle = settled_anon_kib(d.pid()).await;

    owner
        .type_str("head -c 6000000 /dev/zero | base64; echo FLOOD-$((6*7))-DONE\r")
        .await;
    owner.wait_screen("FLOOD-42-DONE").await;
    let peak = anon_kib(d.pid());
    // Kept, the viewers' buffers would be 64 KiB or more each (about 2.8 MiB in all here);
    // given back, what is left is the session's (its parked screen, the log's window).
    let bound = idle + 1536;
    let after = anon_falls_to(d.pid(), bound).await;
    assert!(
        after <= bound,
        "with {VIEWERS} viewers the daemon still holds {} KiB more than at rest ({idle} KiB; \
         {peak} KiB at the flood's end)",
        after - idle
    );
    eprintln!(
        "anonymous memory with {VIEWERS} viewers: {idle} KiB at rest, {peak} KiB after the flood, {after} KiB later"
    );
    assert!(
        readers.iter().all(|r| !r.is_finished()),
        "a viewer was dropped"
    );
    for r in readers {
        r.abort();
    }
}
