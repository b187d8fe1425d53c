//! The session's side of its screen model: the model's thread (none for a pipe-mode stream),
//! the answers it computes to terminal queries, its readings of the screen for attention and
//! the slot holding the screen's text, the scan that finds queries in the output before anyone
//! sees it, and whether the program has drawn anything yet.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::oneshot;
use tracing::warn;
use uuid::Uuid;

use super::output_log::SharedLog;
use super::screen_thread::{Answers, Readings, ScreenFailed, ScreenReader, ScreenThread};
use crate::attention::screen::{Reading, ScreenSlot};
use crate::metrics::Metrics;
use crate::term::model::ScreenModel;
use crate::term::queries::{Query, QueryScan};
use crate::term::snapshot::{EncodedSnapshot, SnapshotForm};

/// Output bytes waiting for the screen thread before the actor stops reading the PTY (16 MiB:
/// several seconds of a flood; chunks still in the output log cost nothing extra).
const PARSE_BACKLOG: usize = 16 << 20;

/// Answers the model computed, each to the query it answers (see [`Answers`]).
type QueryAnswers = Vec<(Query, Vec<u8>)>;

/// The screen model as the actor sees it.
pub(super) struct ScreenBridge {
    /// The model, on its own thread (none for a pipe-mode stream).
    thread: Option<ScreenThread>,
    /// The model's answers to terminal queries, for the program.
    answers: Option<Answers>,
    /// The model's readings of the screen, for the session's attention.
    readings: Option<Readings>,
    /// Finds queries in the output before it is published, so replies are expected in time.
    scan: QueryScan,
    /// Whether the program has drawn anything yet.
    drawn: bool,
}

impl ScreenBridge {
    /// A model of `rows` × `cols` with `scrollback` lines for session `id`, or none, read for
    /// attention as `reader` says; its thread counts into `metrics`.
    pub(super) fn new(
        with_model: bool,
        (rows, cols): (u16, u16),
        scrollback: usize,
        id: Uuid,
        reader: ScreenReader,
        metrics: Arc<Metrics>,
    ) -> Self {
        let model = with_model.then(|| ScreenModel::new(rows, cols, scrollback));
        Self::start(model, scrollback, id, false, reader, metrics)
    }

    /// The model a live upgrade left: `snapshot` (the screen as ANSI) then `after` (the log
    /// from the snapshot on), replayed on a fresh one; or none. `drawn` as it was.
    pub(super) fn rebuilt(
        screen: Option<(Option<&[u8]>, &[u8])>,
        (rows, cols): (u16, u16),
        scrollback: usize,
        (id, drawn): (Uuid, bool),
        reader: ScreenReader,
        metrics: Arc<Metrics>,
    ) -> Self {
        let model = screen.map(|(snapshot, after)| {
            let mut model = ScreenModel::new(rows, cols, scrollback);
            if let Some(snapshot) = snapshot {
                model.process(snapshot);
            }
            model.process(after);
            // Queries in there were answered by the previous image.
            let _ = model.take_queries();
            model
        });
        Self::start(model, scrollback, id, drawn, reader, metrics)
    }

    fn start(
        model: Option<ScreenModel>,
        scrollback: usize,
        id: Uuid,
        drawn: bool,
        reader: ScreenReader,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (thread, answers, readings) = match model {
            Some(model) => {
                let name = format!("screen-{}", &id.simple().to_string()[..8]);
                let (thread, answers, readings) = ScreenThread::start_reading(
                    model,
                    scrollback,
                    PARSE_BACKLOG,
                    name,
                    metrics,
                    Some(reader),
                );
                (Some(thread), Some(answers), Some(readings))
            }
            None => (None, None, None),
        };
        Self {
            thread,
            answers,
            readings,
            scan: QueryScan::default(),
            drawn,
        }
    }

    /// The screen's latest text, for whoever shows a miniature of it (none without a model).
    pub(super) fn slot(&self) -> Option<Arc<ScreenSlot>> {
        self.thread.as_ref().map(|t| t.slot().clone())
    }

    /// Whether there is a model (and so snapshots).
    pub(super) fn has_model(&self) -> bool {
        self.thread.is_some()
    }

    /// Whether the program has drawn anything yet.
    pub(super) fn drawn(&self) -> bool {
        self.drawn
    }

    /// Output about to be published: the queries in it, whose replies its viewers will owe.
    pub(super) fn scan(&mut self, chunk: &[u8]) -> Vec<Query> {
        self.drawn = true;
        self.scan.scan(chunk)
    }

    /// Output published, for the model.
    pub(super) fn output(&self, chunk: &Bytes) {
        if let Some(thread) = &self.thread {
            thread.output(chunk.clone());
        }
    }

    /// The session's new size, after the output queued so far.
    pub(super) fn resize(&self, rows: u16, cols: u16) {
        if let Some(thread) = &self.thread {
            thread.resize(rows, cols);
        }
    }

    /// Whether the model can take more output now (always, without one).
    pub(super) fn has_room(&self) -> bool {
        self.thread.as_ref().is_none_or(ScreenThread::has_room)
    }

    /// What the actor waits for from the model: room in its backlog, its next answers, and its
    /// next reading of the screen. Each is pending while there is none to wait for.
    pub(super) fn waits(
        &mut self,
    ) -> (
        impl Future<Output = ()> + '_,
        impl Future<Output = Option<QueryAnswers>> + '_,
        impl Future<Output = Option<Reading>> + '_,
    ) {
        (
            room(&self.thread),
            recv_answers(&mut self.answers),
            recv_reading(&mut self.readings),
        )
    }

    /// Renders a snapshot of the screen as it stands after the output published so far to
    /// `log`, off the actor (on the screen thread; or takes the one it rendered already, when
    /// nothing changed since), and hands it to `done` with the exact log
    /// offset it belongs to: the model has consumed every byte before it (bytes it holds
    /// back, an incomplete escape sequence, are streamed instead). `done` is always called,
    /// with [`ScreenFailed`] when the screen thread could not render it; without a model,
    /// with no snapshot at the log's oldest byte. A `patient` request (a resync) may be
    /// served a moment later at a later offset ([`ScreenThread::snapshot`]).
    pub(super) fn snapshot_then(
        &self,
        log: &SharedLog,
        form: SnapshotForm,
        patient: bool,
        done: impl FnOnce(Result<(Option<EncodedSnapshot>, u64), ScreenFailed>) + Send + 'static,
    ) {
        match &self.thread {
            // Rendered already, and nothing changed since: no job, no thread woken.
            Some(thread) => match thread.served(form) {
                Some((snapshot, offset)) => done(Ok((Some(snapshot), offset))),
                None => thread.snapshot(
                    log.head(),
                    form,
                    patient,
                    Box::new(move |drawn| {
                        done(drawn.map(|(snapshot, offset)| (Some(snapshot), offset)))
                    }),
                ),
            },
            None => done(Ok((None, log.start()))),
        }
    }

    /// For a live upgrade: the whole screen as plain ANSI at the log's `head` and the offset
    /// it belongs to; nothing (at `head`) when nothing was drawn, and nothing at the log's
    /// oldest byte when it could not be drawn.
    pub(super) async fn handoff_snapshot(
        &self,
        log: &SharedLog,
        head: u64,
        id: Uuid,
    ) -> (Option<Vec<u8>>, u64) {
        let Some(thread) = self.thread.as_ref().filter(|_| self.drawn) else {
            return (None, head);
        };
        let (tx, rx) = oneshot::channel();
        // Unlimited and plain: the whole scrollback, exactly.
        thread.snapshot(
            head,
            SnapshotForm::plain(usize::MAX),
            false,
            Box::new(move |drawn| {
                let _ = tx.send(drawn.map(|(snapshot, offset)| (snapshot.bytes.to_vec(), offset)));
            }),
        );
        match rx.await {
            Ok(Ok((bytes, offset))) => (Some(bytes), offset),
            Ok(Err(_)) | Err(_) => {
                warn!(session = %id, "screen could not be drawn: frozen without a screen");
                (None, log.start())
            }
        }
    }
}

async fn room(thread: &Option<ScreenThread>) {
    match thread {
        Some(thread) => thread.room().await,
        None => std::future::pending().await,
    }
}

async fn recv_reading(readings: &mut Option<Readings>) -> Option<Reading> {
    match readings {
        Some(rx) => rx.recv().await.map(|r| *r),
        None => std::future::pending().await,
    }
}

async fn recv_answers(answers: &mut Option<Answers>) -> Option<QueryAnswers> {
    match answers {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
