//! Screen equality: a viewer that joins in the middle of a flood ends on exactly the screen of
//! the viewers that saw everything, and of the daemon's own model (what a fresh joiner's
//! snapshot shows). Also the slow-viewer rules: a stalled socket and the flow=ack budget.

use crate::common;

use common::{assert_same_screen, Client, Daemon, TIMEOUT};
use uuid::Uuid;

/// A script that prints `lines` coloured lines (16, 256 and true colour, bold, italic,
/// underline, inverse, wide characters), then a marker.
const COLOUR_FLOOD: &str = r#"
n=${1:-3000}
for ((i = 1; i <= n; i++)); do
  printf '\e[3%dm%05d \e[1;4%dmbold\e[0m \e[3;4mit-ul\e[0m \e[7minv\e[0m \e[38;5;%dm256\e[0m \e[38;2;%d;%d;200mrgb\e[0m 日本 🚀 %s\n' \
    $((i % 8)) "$i" $(((i + 3) % 8)) $((i % 256)) $((i % 256)) $(((i * 7) % 256)) "$(printf '%*s' $((i % 40)) '' | tr ' ' '=')"
done
printf 'FLOOD-%s-END\n' DONE
"#;

/// A full-screen program: enters the alternate screen, sets input modes, draws, waits for a
/// line, then leaves.
const FULLSCREEN: &str = r#"
printf 'before-alt main screen line\n'
printf '\e[?1049h\e[?1h\e=\e[?2004h\e[?1002h\e[?1006h\e[2J'
for ((i = 1; i <= 400; i++)); do
  printf '\e[%d;%dH\e[48;5;%dm\e[1m cell-%d \e[0m' $(((i % 20) + 1)) $(((i * 7) % 60 + 1)) $((i % 256)) "$i"
done
printf '\e[22;3H\e[33mFULL-%s-DRAWN\e[0m\e[5;10H' SCREEN
read -r line
printf '\e[?1002l\e[?1006l\e[?2004l\e[?1l\e>\e[?1049l'
printf 'LEFT-%s-ALT\n' THE
"#;

/// Waits until `c` shows FULLSCREEN's whole first frame: its last line, and the cursor where
/// the script then puts it (the move can come in a later read of the PTY than the line, so
/// the line alone can leave a client a chunk short of the screen).
async fn wait_drawn(c: &mut Client) {
    c.until("the full screen drawn, the cursor moved", |c| {
        c.screen_text().contains("FULL-SCREEN-DRAWN") && c.term.screen().cursor_position() == (4, 9)
    })
    .await;
}

async fn sized(d: &Daemon, id: Uuid, query: &str) -> Client {
    let mut c = Client::connect(&d.ws(id, query)).await;
    c.resize(24, 80).await;
    c
}

#[tokio::test]
async fn a_viewer_joining_mid_flood_ends_on_the_same_screen() {
    let d = Daemon::start();
    common::write_file(d.dir.path(), "flood.sh", COLOUR_FLOOD.as_bytes());
    let id = Uuid::new_v4();
    let mut a = sized(&d, id, "?assistant=shell").await;
    a.wait_screen("$ ").await;
    a.type_str("bash flood.sh 4000\r").await;
    a.wait_screen("01000 ").await;
    let mut b = sized(&d, id, "").await;
    assert_eq!(b.snapshots.len(), 0);
    b.wait_json("ready").await;
    assert_eq!(b.snapshots.len(), 1, "joined with a snapshot");
    // A busy two-core host takes well over the usual 30 s for this flood (4000 coloured
    // lines parsed by the daemon and by both clients' terminals).
    for c in [&mut a, &mut b] {
        c.until_within("flood end and prompt", 4 * TIMEOUT, |c| {
            c.screen_text().contains("FLOOD-DONE-END\n$ ")
        })
        .await;
    }
    for c in [&mut a, &mut b] {
        c.with_history().await;
    }
    let mut fresh = sized(&d, id, "").await;
    fresh.wait_json("ready").await;
    assert_same_screen(&a, &b, "mid-flood joiner vs. full-stream viewer");
    assert_same_screen(&a, &fresh, "full-stream viewer vs. daemon model");
    // Scrollback too: the joiner's history ends with the same lines.
    for c in [&mut a, &mut b] {
        c.term.screen_mut().set_scrollback(50);
    }
    assert_eq!(
        a.term.screen().contents_formatted(),
        b.term.screen().contents_formatted(),
        "scrollback differs"
    );
}

#[tokio::test]
async fn a_viewer_joining_a_full_screen_program_gets_both_screens() {
    let d = Daemon::start();
    common::write_file(d.dir.path(), "full.sh", FULLSCREEN.as_bytes());
    let id = Uuid::new_v4();
    let mut a = sized(&d, id, "?assistant=shell").await;
    a.wait_screen("$ ").await;
    a.type_str("bash full.sh\r").await;
    wait_drawn(&mut a).await;
    let mut b = sized(&d, id, "").await;
    wait_drawn(&mut b).await;
    assert!(b.term.screen().alternate_screen());
    assert_same_screen(&a, &b, "on the alternate screen");

    a.type_str("\r").await;
    for c in [&mut a, &mut b] {
        c.until("left the alternate screen", |c| {
            c.screen_text().contains("LEFT-THE-ALT\n$ ")
        })
        .await;
    }
    assert!(
        b.screen_text().contains("before-alt main screen line"),
        "main screen kept under the alternate one"
    );
    assert_same_screen(&a, &b, "back on the main screen");
}

const FLOOD_MB: usize = 24;

async fn flood_file(d: &Daemon) {
    let status = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "head -c {}M /dev/urandom | base64 > big.txt",
            FLOOD_MB * 3 / 4
        ))
        .current_dir(d.dir.path())
        .status()
        .unwrap();
    assert!(status.success());
}

/// A coloured flood as `ls --color` and compilers print it (SGRs around words, 256 colours,
/// erases in the line) ends on exactly the screen of a viewer that read it all, in a fresh
/// joiner's snapshot too, scrollback included, though the model skipped most of it unparsed.
#[tokio::test]
async fn a_coloured_flood_skipped_unparsed_ends_on_the_exact_screen() {
    // A run keeps its last `2 × rows + scrollback` lines parsed, and a slow machine's runs are
    // short (output is gathered for 10 ms at most): with the default 1000 lines of scrollback
    // a busy CI host's runs of ~150 KB skipped only a fifth of the flood.
    const SCROLLBACK: usize = 100;
    let d = Daemon::start_with(&common::config("").replace(
        "[session]\n",
        &format!("[session]\nscrollback_lines = {SCROLLBACK}\n"),
    ));
    let status = std::process::Command::new("bash")
        .arg("-c")
        .arg(
            "head -c 3M /dev/urandom | base64 | sed -E \
             's/^(.{19})(.{19})(.{19})/\\x1b[01;34m\\1\\x1b[0m \\x1b[38;5;200m\\x1b[K\\2\\x1b[m\\x1b[4;41m\\3/' \
             > colour.txt",
        )
        .current_dir(d.dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let id = Uuid::new_v4();
    let mut viewer = sized(&d, id, "?assistant=shell").await;
    viewer.wait_screen("$ ").await;
    let before = d.metric("ptyhub_parse_skipped_bytes_total").await;
    viewer
        .type_str("cat colour.txt; printf '\\e[mCOLOUR-%s-OVER\\n' FLOOD\r")
        .await;
    viewer
        .until("flood end", |c| {
            c.screen_text().contains("COLOUR-FLOOD-OVER\n$ ")
        })
        .await;
    viewer.with_history().await;
    let mut fresh = sized(&d, id, "").await;
    fresh.wait_json("ready").await;
    assert_same_screen(&viewer, &fresh, "viewer vs. the daemon's model");
    let skipped = d.metric("ptyhub_parse_skipped_bytes_total").await - before;
    // How much is skipped depends on how long the runs are, so on the host's load (a busy
    // 2-core host skipped 0.4 of 4 MB): that some was skipped is what makes the check above
    // mean something.
    assert!(
        skipped > 1 << 16,
        "skipped only {skipped} bytes of the flood"
    );
    // The joiner gets all the scrollback the daemon keeps; the viewer's own terminal keeps
    // more, so both are compared at the oldest line the daemon has.
    fresh.term.screen_mut().set_scrollback(usize::MAX);
    assert_eq!(
        fresh.term.screen().scrollback(),
        SCROLLBACK,
        "scrollback length differs"
    );
    viewer.term.screen_mut().set_scrollback(SCROLLBACK);
    let (seen, joined) = (viewer.term.screen(), fresh.term.screen());
    assert!(
        seen.contents_formatted() == joined.contents_formatted(),
        "oldest scrollback differs (colours included) at {}",
        common::first_difference(seen, joined)
    );
}

#[tokio::test]
async fn a_stalled_viewer_costs_nothing_and_recovers_on_the_right_screen() {
    let d = Daemon::start();
    flood_file(&d).await;
    let id = Uuid::new_v4();
    let mut healthy = sized(&d, id, "?assistant=shell").await;
    healthy.wait_screen("$ ").await;
    // The same flood with no stalled viewer first: what the flood itself costs (the parser's
    // backlog, the log, the allocator's retained pages) is then in the figure to compare with.
    healthy
        .type_str("cat big.txt; echo FLOOD-$((6*7))-ALONE\r")
        .await;
    healthy
        .until("flood alone", |c| {
            c.screen_text().contains("FLOOD-42-ALONE\n$ ")
        })
        .await;
    let rss_before = d.rss_kib();
    // Never read from this one until the flood is over.
    let mut stalled = sized(&d, id, "").await;
    healthy
        .until("2 viewers", |c| {
            c.last("status").is_some_and(|s| s["viewers"] == 2)
        })
        .await;

    // The flood twice while it is stalled: a daemon that kept it for that viewer would hold 48
    // MiB more, clear of what a busy machine adds anyway (see below).
    healthy
        .type_str("cat big.txt big.txt; echo FLOOD-$((6*7))-OVER\r")
        .await;
    healthy
        .until("flood end", |c| {
            c.screen_text().contains("FLOOD-42-OVER\n$ ")
        })
        .await;
    // The stalled viewer must not make the daemon keep the floods for it (48 MiB more): the
    // output window is 4 MiB. What the floods use for a moment (the parser's backlog, up to 16
    // MiB, runs fuller on a loaded machine than in the first flood) is given back once parsed,
    // by the allocator's background thread about 10 s later; a daemon holding the floods for
    // the stalled viewer never gets back under the bound.
    let settle_by = std::time::Instant::now() + std::time::Duration::from_secs(45);
    let rss_after = loop {
        let rss = d.rss_kib();
        if rss < rss_before + 20 * 1024 || std::time::Instant::now() > settle_by {
            break rss;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(
        rss_after < rss_before + 20 * 1024,
        "daemon RSS grew from {rss_before} KiB to {rss_after} KiB and stayed there for 45 s"
    );

    stalled
        .until("stalled viewer catches up", |c| {
            c.screen_text().contains("FLOOD-42-OVER\n$ ")
        })
        .await;
    for c in [&mut healthy, &mut stalled] {
        c.with_history().await;
    }
    assert!(
        stalled.snapshots.len() >= 2,
        "the stalled viewer was resynced with a snapshot"
    );
    assert_same_screen(&healthy, &stalled, "stalled viewer after it reads again");
    let mut fresh = sized(&d, id, "").await;
    fresh.wait_json("ready").await;
    assert_same_screen(&healthy, &fresh, "healthy viewer vs. the daemon's model");
    // The model skipped most of the plain flood unparsed, and still has the same history.
    let skipped = d.metric("ptyhub_parse_skipped_bytes_total").await;
    // How much is skipped depends on how long the runs are, so on the host's load (a busy
    // 2-core host skipped 0.4 of 4 MB): that some was skipped is what makes the check above
    // mean something.
    assert!(
        skipped > 1 << 16,
        "skipped only {skipped} bytes of the flood"
    );
    for c in [&mut healthy, &mut fresh] {
        c.term.screen_mut().set_scrollback(usize::MAX);
    }
    assert_eq!(
        healthy.term.screen().scrollback(),
        fresh.term.screen().scrollback(),
        "scrollback length differs"
    );
    assert_eq!(
        healthy.term.screen().contents(),
        fresh.term.screen().contents(),
        "oldest scrollback differs"
    );
    assert!(
        d.log_text().contains("resyncing viewer"),
        "the resync is logged"
    );
}

#[tokio::test]
async fn flow_ack_bounds_unacknowledged_output_and_resyncs() {
    let d = Daemon::start_with(&common::config("[viewer]\nflow_budget_bytes = 524288\n"));
    flood_file(&d).await;
    let id = Uuid::new_v4();
    let mut writer = sized(&d, id, "?assistant=shell").await;
    writer.wait_screen("$ ").await;
    let mut acker = sized(&d, id, "?flow=ack").await;
    acker.wait_json("ready").await;
    writer
        .type_str("cat big.txt; echo FLOOD-$((6*7))-OVER\r")
        .await;
    writer
        .until("flood end", |c| {
            c.screen_text().contains("FLOOD-42-OVER\n$ ")
        })
        .await;
    // Without acks, the acker has received at most its budget of live output.
    acker.drain_for(std::time::Duration::from_millis(500)).await;
    assert!(
        acker.output.len() <= 524_288,
        "got {} unacknowledged bytes",
        acker.output.len()
    );
    // Acknowledging lets it continue: it is resynced and ends on the right screen.
    acker.auto_ack = true;
    acker
        .until("acker catches up", |c| {
            c.screen_text().contains("FLOOD-42-OVER\n$ ")
        })
        .await;
    assert!(
        !acker.snapshots.is_empty(),
        "resynced with a snapshot instead of the backlog"
    );
    assert_same_screen(&writer, &acker, "flow=ack viewer after acknowledging");
}

#[tokio::test]
async fn tiny_writes_do_not_grow_memory() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut a = sized(&d, id, "?assistant=shell").await;
    a.wait_screen("$ ").await;
    let before = d.rss_kib();
    // 20 000 one-byte writes, spaced so that each is its own PTY read and log chunk.
    a.type_str(
        "python3 -c 'import os,time\nfor i in range(20000): os.write(1, b\"x\"); time.sleep(0.0002)'; echo; echo TINY-$((7*6))-DONE\r",
    )
    .await;
    // 20 000 sleeps take 4 s on a quiet machine and much longer on a loaded one.
    a.until_within(
        "tiny writes done",
        std::time::Duration::from_secs(240),
        |c| c.screen_text().contains("TINY-42-DONE\n$ "),
    )
    .await;
    let after = d.rss_kib();
    // The log keeps 4 MiB of output; each chunk must cost its size, not a whole read buffer.
    assert!(
        after < before + 32 * 1024,
        "daemon RSS grew from {before} KiB to {after} KiB"
    );
}

/// An idle session's screen model is put away as a snapshot (a few KB instead of 32 bytes a
/// cell of grid and scrollback) and brought back by the next join or output: the joiner gets
/// exactly the screen of a viewer that saw everything, on the alternate screen with its modes
/// and with the main screen's scrollback under it, and the model goes on exactly after.
#[tokio::test]
async fn an_idle_sessions_parked_screen_comes_back_exactly() {
    let d = Daemon::start();
    common::write_file(d.dir.path(), "flood.sh", COLOUR_FLOOD.as_bytes());
    common::write_file(d.dir.path(), "full.sh", FULLSCREEN.as_bytes());
    let id = Uuid::new_v4();
    let mut a = sized(&d, id, "?assistant=shell").await;
    a.wait_screen("$ ").await;
    a.run("bash flood.sh 300", "FLOOD-DONE-END").await;
    a.type_str("bash full.sh\r").await;
    wait_drawn(&mut a).await;
    // Quiet now: the screen thread ends after a second and parks the model.
    common::eventually_async("the idle model parked", || async {
        d.metric("ptyhub_screens_parked").await >= 1
    })
    .await;
    assert!(d.metric("ptyhub_screens_parked_bytes").await > 0);

    let mut b = sized(&d, id, "").await;
    b.wait_json("ready").await;
    wait_drawn(&mut b).await;
    assert!(b.term.screen().alternate_screen());
    assert_same_screen(&a, &b, "joined a parked model, on the alternate screen");

    // The program goes on: it leaves the alternate screen, and the main screen under it
    // (scrollback included) is the one the first viewer has.
    a.type_str("\r").await;
    for c in [&mut a, &mut b] {
        c.until("left the alternate screen", |c| {
            c.screen_text().contains("LEFT-THE-ALT\n$ ")
        })
        .await;
    }
    assert_same_screen(&a, &b, "back on the main screen");
    for c in [&mut a, &mut b] {
        c.with_history().await;
    }
    let mut fresh = sized(&d, id, "").await;
    fresh.wait_json("ready").await;
    assert_same_screen(&a, &fresh, "the model after it was brought back");
    for c in [&mut a, &mut b, &mut fresh] {
        c.term.screen_mut().set_scrollback(120);
    }
    let want = a.term.screen().contents_formatted();
    assert_eq!(
        want,
        b.term.screen().contents_formatted(),
        "joiner's scrollback"
    );
    assert_eq!(
        want,
        fresh.term.screen().contents_formatted(),
        "model's scrollback"
    );
}

/// A viewer slower than a flood is sent the screen alone while the flood goes on (a few KB,
/// where the screen with a flood's scrollback is tens), and the scrollback once it has caught
/// up: it ends with what a joiner gets.
#[tokio::test]
async fn a_viewer_behind_a_flood_is_sent_screens_alone_then_the_scrollback() {
    let d = Daemon::start();
    let id = Uuid::new_v4();
    let mut owner = Client::connect(&d.ws(id, "?assistant=shell")).await;
    owner.wait_screen("$ ").await;
    let mut slow = Client::connect(&d.ws(id, "")).await;
    slow.wait_json("ready").await;
    let joined = slow.snapshots.len();
    owner
        .type_str("seq 1 4000000; echo FLOOD-$((6*7))-DONE\r")
        .await;
    // A message every 2 ms: at most 4 MB/s in the daemon's 8 KiB messages, a fraction of
    // what seq prints (its last resync is the screen with the scrollback).
    slow.until_within(
        "the flood's end with its scrollback",
        std::time::Duration::from_secs(120),
        |c| {
            std::thread::sleep(std::time::Duration::from_millis(2));
            c.screen_text().contains("FLOOD-42-DONE")
                && c.snapshots.len() > joined
                && c.snapshots
                    .last()
                    .is_some_and(|last| c.scrollback_drawn_by(last) > 0)
        },
    )
    .await;
    let during: Vec<usize> = slow.snapshots[joined..]
        .iter()
        .map(|ansi| slow.scrollback_drawn_by(ansi))
        .collect();
    assert!(
        during.contains(&0),
        "no resync sent the screen alone (scrollback lines of each: {during:?})"
    );
    let mut fresh = Client::connect(&d.ws(id, "")).await;
    fresh.wait_json("ready").await;
    let theirs = fresh.scrollback_drawn_by(fresh.snapshots.last().expect("a joiner's snapshot"));
    let last = *during.last().expect("a resync");
    assert!(theirs > 900, "the joiner's scrollback: {theirs} lines");
    assert_eq!(
        last, theirs,
        "the slow viewer's last snapshot lacks scrollback: {during:?}"
    );
    owner.run("echo after-$((6*7))", "after-42").await;
    let prompt_after = |c: &Client| c.screen_text().trim_end().ends_with("after-42\n$");
    slow.until("the prompt after the marker", prompt_after)
        .await;
    fresh
        .until("the prompt after the marker", prompt_after)
        .await;
    assert_eq!(slow.screen_text(), fresh.screen_text());
}
