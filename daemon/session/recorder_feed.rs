//! The session's feed to its recorder: a copy of what it tells every viewer (sizes, names,
//! chat, restarts, the exit), markers of who joined or started typing, and, when asked, its input, for a reader that is not a viewer.
//! Output is not carried here: the reader follows the output log from its own offset. The
//! actor's side ([`RecorderFeed`]) also owns why the recording stopped, once it has.
//!
//! The actor never waits on the feed: the queue is bounded in items and bytes, and what does
//! not fit is counted as lost, for the reader to say so. It carries the recorder's pace too
//! (`recorder_pace.rs`): how far behind the output the recorder is, which the PTY waits for.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::events::{StatusInfo, ViewerEvent};
use super::recorder_pace::{self, Pace, PaceReport};
use super::refusal::Refusal;

/// Items queued before further ones are lost.
const FEED_ITEMS: usize = 1024;
/// Input bytes queued before further input is lost (1 MiB, the session's own input bound).
const FEED_INPUT_BYTES: usize = 1 << 20;

/// What the feed carries.
#[derive(Debug)]
pub enum FeedItem {
    /// An event every viewer was sent.
    Event(ViewerEvent),
    /// Input written to the program, after output up to `offset`.
    Input {
        /// The bytes.
        data: Bytes,
        /// The log's head when it was written.
        offset: u64,
    },
    /// A marker for the recording ("alice joined", "alice is typing"), after output up to
    /// `offset`.
    Marker {
        /// What it says.
        label: String,
        /// The log's head when it happened.
        offset: u64,
    },
    /// The session was frozen for a live upgrade: the next image of the daemon goes on with
    /// the recording, so it is not ended.
    Suspended,
}

/// The session's end.
#[derive(Debug)]
pub struct FeedSender {
    /// Items travel boxed: the queue reserves room for 32 at the session's start, and
    /// most are small beside the largest (an event every viewer was sent).
    tx: mpsc::Sender<Box<FeedItem>>,
    shared: Arc<Shared>,
    /// Whether input is copied.
    input: bool,
    /// The recorder's pace, for the actor.
    pace: Pace,
}

/// The reader's end.
#[derive(Debug)]
pub struct FeedReceiver {
    rx: mpsc::Receiver<Box<FeedItem>>,
    shared: Arc<Shared>,
    pace: PaceReport,
}

#[derive(Debug, Default)]
struct Shared {
    input_bytes: AtomicUsize,
    lost: AtomicU64,
}

/// A feed; `input`: whether input is copied too.
pub(super) fn channel(input: bool) -> (FeedSender, FeedReceiver) {
    let (tx, rx) = mpsc::channel(FEED_ITEMS);
    let shared = Arc::new(Shared::default());
    let (pace, report) = recorder_pace::pair();
    (
        FeedSender {
            tx,
            shared: shared.clone(),
            input,
            pace,
        },
        FeedReceiver {
            rx,
            shared,
            pace: report,
        },
    )
}

impl FeedSender {
    /// Copies an event, without waiting; whether it was queued (else it is counted as lost).
    fn event(&self, event: &ViewerEvent) -> bool {
        self.offer(FeedItem::Event(event.clone())).is_none()
    }

    /// Sends a marker, without waiting.
    fn marker(&self, label: String, offset: u64) {
        self.offer(FeedItem::Marker { label, offset });
    }

    /// The session is handed over in a live upgrade (the last item).
    fn suspend(&self) {
        self.offer(FeedItem::Suspended);
    }

    /// Queues `item` without waiting; a full queue loses it, counted in `lost`. The item back
    /// when it was lost.
    fn offer(&self, item: FeedItem) -> Option<FeedItem> {
        let lost = self.tx.try_send(Box::new(item)).err()?;
        self.shared.lost.fetch_add(1, Ordering::Relaxed);
        Some(*lost.into_inner())
    }

    /// Copies input, when asked to, without waiting.
    fn input(&self, data: &Bytes, offset: u64) {
        if !self.input {
            return;
        }
        let queued = self.shared.input_bytes.load(Ordering::Relaxed);
        if queued + data.len() > FEED_INPUT_BYTES {
            self.shared.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.shared
            .input_bytes
            .fetch_add(data.len(), Ordering::Relaxed);
        let item = FeedItem::Input {
            data: data.clone(),
            offset,
        };
        if let Some(FeedItem::Input { data, .. }) = self.offer(item) {
            self.shared
                .input_bytes
                .fetch_sub(data.len(), Ordering::Relaxed);
        }
    }
}

impl FeedReceiver {
    /// The next item; `None` once the session has ended and everything was read.
    /// Cancel-safe.
    pub async fn recv(&mut self) -> Option<FeedItem> {
        let item = *self.rx.recv().await?;
        if let FeedItem::Input { data, .. } = &item {
            self.shared
                .input_bytes
                .fetch_sub(data.len(), Ordering::Relaxed);
        }
        Some(item)
    }

    /// How many items were lost since the last call (the queue was full).
    pub fn take_lost(&self) -> u64 {
        self.shared.lost.swap(0, Ordering::Relaxed)
    }

    /// Where the reader reports how far it has taken the output (the session's PTY waits
    /// for it when it is far behind), and learns whether the session let it go.
    pub fn pace(&self) -> &PaceReport {
        &self.pace
    }
}

/// The actor's side: the feed once a recorder is connected, and why the recording stopped.
#[derive(Default)]
pub(super) struct RecorderFeed {
    sender: Option<FeedSender>,
    /// What of the session's status the recording keeps, as last sent: a status that changes
    /// none of it (a viewer joining or leaving) is not sent, and so wakes no recorder.
    recorded: Option<Recorded>,
    /// Told to each writer once: those connected when it failed, and those who join later.
    failed: Option<Refusal>,
}

/// The part of a status a recording keeps (`record/writer.rs`): the size (a resize event),
/// the name (a marker), and a restart with its YOLO mode (a marker).
struct Recorded {
    size: (u16, u16),
    name: String,
    restarting: bool,
    yolo: bool,
}

impl Recorded {
    fn of(info: &StatusInfo) -> Self {
        Self {
            size: (info.cols, info.rows),
            name: info.session_name.clone(),
            restarting: info.restarting,
            yolo: info.yolo_mode,
        }
    }

    /// Whether `info` says the same (without copying its name).
    fn same(&self, info: &StatusInfo) -> bool {
        self.size == (info.cols, info.rows)
            && self.name == info.session_name
            && self.restarting == info.restarting
            && self.yolo == info.yolo_mode
    }
}

impl RecorderFeed {
    /// Connects a recorder; `status` (the session as it stands, the log at `head`, which
    /// keeps `window` bytes) is its first item.
    pub(super) fn connect(
        &mut self,
        mut sender: FeedSender,
        status: &ViewerEvent,
        head: u64,
        window: usize,
    ) {
        sender.pace.start(head, window);
        let sent = sender.event(status);
        self.recorded = match status {
            ViewerEvent::Status { info, .. } if sent => Some(Recorded::of(info)),
            _ => None,
        };
        self.sender = Some(sender);
    }

    /// `None` while the PTY may be read; else the recorder is too far behind the log's `head`
    /// and this is when the session stops waiting for it (see `recorder_pace.rs`).
    pub(super) fn behind(&mut self, head: u64) -> Option<tokio::time::Instant> {
        self.sender.as_mut()?.pace.behind(head)
    }

    /// The log offset the recorder has taken output up to (`u64::MAX` without one: it needs
    /// nothing kept).
    pub(super) fn taken(&self) -> u64 {
        self.sender.as_ref().map_or(u64::MAX, |s| s.pace.taken())
    }

    /// Resolves when the recorder may have taken more (pending without one).
    pub(super) async fn took(&self) {
        match &self.sender {
            Some(sender) => sender.pace.took().await,
            None => std::future::pending().await,
        }
    }

    /// The session waits for the recorder no longer: it stops when it next looks, and sees
    /// the end of its feed.
    pub(super) fn let_go(&mut self) {
        if let Some(sender) = self.sender.take() {
            sender.pace.let_go();
        }
    }

    /// Copies an event every viewer is told, when the recording keeps something of it.
    pub(super) fn event(&mut self, event: &ViewerEvent) {
        let Some(sender) = &self.sender else {
            return;
        };
        match event {
            ViewerEvent::Status { info, .. } => {
                if self.recorded.as_ref().is_some_and(|r| r.same(info)) {
                    return;
                }
                // One lost (the queue full) is sent again with the next status.
                self.recorded = sender.event(event).then(|| Recorded::of(info));
            }
            ViewerEvent::Chat(_) | ViewerEvent::Exit { .. } => {
                sender.event(event);
            }
            // Who is here, states, refusals and closes are no part of a recording.
            ViewerEvent::Presence(_)
            | ViewerEvent::State(_)
            | ViewerEvent::Refused(_)
            | ViewerEvent::Close(_) => {}
        }
    }

    /// Marks the recording (someone joined, or started typing) after output up to `offset`.
    pub(super) fn marker(&self, label: String, offset: u64) {
        if let Some(sender) = &self.sender {
            sender.marker(label, offset);
        }
    }

    /// Copies input written to the program after output up to `offset`.
    pub(super) fn input(&self, data: &Bytes, offset: u64) {
        if let Some(sender) = &self.sender {
            sender.input(data, offset);
        }
    }

    /// The session ended: the reader sees the end once it has read what was queued.
    pub(super) fn end(&mut self) {
        self.sender = None;
    }

    /// The session is handed over in a live upgrade: the next image of the daemon goes on
    /// with the recording.
    pub(super) fn suspend(&mut self) {
        if let Some(sender) = self.sender.take() {
            sender.suspend();
        }
    }

    /// The recording stopped: `refusal` says why.
    pub(super) fn set_failure(&mut self, refusal: Refusal) {
        self.failed = Some(refusal);
    }

    /// Why the recording stopped, once it has.
    pub(super) fn failure(&self) -> Option<&Refusal> {
        self.failed.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::{channel, FeedItem, RecorderFeed, FEED_INPUT_BYTES, FEED_ITEMS};
    use crate::session::events::{test_status, EndReason, PresenceInfo, ViewerEvent};

    #[tokio::test]
    async fn copies_input_only_when_asked_and_counts_what_does_not_fit() {
        let (without_input, mut rx) = channel(false);
        without_input.input(&Bytes::from_static(b"secret"), 0);
        without_input.event(&ViewerEvent::Close(EndReason::Deleted));
        drop(without_input);
        assert!(matches!(rx.recv().await, Some(FeedItem::Event(_))));
        assert!(rx.recv().await.is_none());

        let (feed, mut rx) = channel(true);
        let big = Bytes::from(vec![b'x'; FEED_INPUT_BYTES]);
        feed.input(&big, 5);
        feed.input(&Bytes::from_static(b"y"), 6);
        assert_eq!(rx.take_lost(), 1, "past the byte bound");
        assert!(matches!(
            rx.recv().await,
            Some(FeedItem::Input { offset: 5, .. })
        ));
        feed.input(&Bytes::from_static(b"y"), 6);
        assert!(matches!(
            rx.recv().await,
            Some(FeedItem::Input { offset: 6, .. })
        ));
        for _ in 0..FEED_ITEMS + 3 {
            feed.event(&ViewerEvent::Close(EndReason::Deleted));
        }
        assert_eq!(rx.take_lost(), 3);
        assert_eq!(rx.take_lost(), 0);
    }

    /// The recorder is sent what the recording keeps: a viewer joining or leaving (its
    /// status with only the count changed, its presence) wakes no recorder.
    #[tokio::test]
    async fn sends_only_what_the_recording_keeps() {
        let (sender, mut rx) = channel(false);
        let mut feed = RecorderFeed::default();
        feed.connect(sender, &test_status(0, 24, 0), 0, 1024);
        assert!(matches!(rx.recv().await, Some(FeedItem::Event(_))));
        feed.event(&test_status(1, 24, 10));
        let nobody = PresenceInfo {
            people: Vec::new(),
            typing: None,
        };
        feed.event(&ViewerEvent::Presence(std::sync::Arc::new(nobody)));
        feed.event(&ViewerEvent::Close(EndReason::Deleted));
        feed.event(&test_status(1, 30, 20));
        match rx.recv().await {
            Some(FeedItem::Event(ViewerEvent::Status { info, offset })) => {
                assert_eq!((info.rows, offset), (30, 20));
            }
            other => panic!("the resize, not {other:?}"),
        }
        // A status lost to a full queue is sent with the next one, though that changes nothing.
        for _ in 0..FEED_ITEMS {
            feed.marker("someone joined".to_owned(), 20);
        }
        feed.event(&test_status(1, 40, 30));
        assert_eq!(rx.take_lost(), 1);
        for _ in 0..FEED_ITEMS {
            assert!(matches!(rx.recv().await, Some(FeedItem::Marker { .. })));
        }
        feed.event(&test_status(2, 40, 40));
        match rx.recv().await {
            Some(FeedItem::Event(ViewerEvent::Status { info, offset })) => {
                assert_eq!((info.rows, offset), (40, 40));
            }
            other => panic!("the lost resize again, not {other:?}"),
        }
        feed.end();
        assert!(rx.recv().await.is_none(), "nothing else was sent");
    }
}
