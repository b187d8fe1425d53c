//! The session image a live upgrade hands to the next image of the daemon: a versioned,
//! documented format (serde), plus the raw byte areas (screens, log tails, queued input) kept
//! out of the JSON so that writing and reading it costs a copy, not an encoding.
//!
//! # Format, version 1
//!
//! ```text
//! "ptyhub image\n"        13 bytes, the magic
//! format                  u32, little-endian: 1
//! json_len                u64, little-endian
//! json                    json_len bytes: one `Image` object (the types below, serde's names)
//! blobs                   the rest: byte areas, each named in the JSON by a `Blob`
//!                         {"at": offset from the start of this area, "len": bytes}
//! ```
//!
//! File descriptors are passed by number (the descriptor stays open across `execve`, with
//! close-on-exec cleared on exactly those): the listening socket, and each running session's
//! PTY master. The reader checks every number is distinct, open, and of the right kind.
//! A new binary refuses a format it does not know (`--check-config` prints the ones it reads),
//! so the old image stays as it is rather than hand over what cannot be read.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The image format this binary writes.
pub const FORMAT: u32 = 1;

/// The image formats this binary reads.
pub const READS: &[u32] = &[1];

const MAGIC: &[u8] = b"ptyhub image\n";

/// Largest image read (16 GiB would be absurd; this bounds a corrupt length).
const MAX_JSON: u64 = 256 << 20;

/// A byte area of the image.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blob {
    /// Offset from the start of the blob area.
    pub at: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Everything the daemon hands over.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Image {
    /// The version of the binary that wrote it.
    pub version: String,
    /// How many upgrades came before this one (0: the first).
    pub upgrades: u64,
    /// The daemon token in use (`None`: authentication off). A generated token survives the
    /// upgrade, so open tabs and links stay signed in.
    pub token: Option<String>,
    /// Whether `token` was generated (rather than configured).
    pub token_generated: bool,
    /// The listening socket's descriptor.
    pub listener_fd: i32,
    /// Every session that had not ended.
    pub sessions: Vec<SessionImage>,
    /// Live share links.
    pub shares: Vec<ShareImage>,
    /// The lifecycle events, so `Last-Event-ID` resumes across the upgrade.
    pub journal: JournalImage,
}

/// One session.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SessionImage {
    /// Its uuid.
    pub id: Uuid,
    /// Its number (1–255), if it has one.
    pub num: Option<u8>,
    /// Its name.
    pub name: String,
    /// The assistant's key.
    pub assistant_key: String,
    /// The assistant as it runs (a session's own command makes one of its own).
    pub assistant: AssistantImage,
    /// Whether it runs its creator's own command.
    pub own_command: bool,
    /// The program and arguments run last.
    pub command: Vec<String>,
    /// Working directory.
    pub cwd: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// YOLO mode.
    pub yolo_mode: bool,
    /// Size, rows.
    pub rows: u16,
    /// Size, columns.
    pub cols: u16,
    /// Chat history, oldest first.
    pub chat: Vec<ChatImage>,
    /// The running program (`None` once it has exited).
    pub process: Option<ProcessImage>,
    /// The pid of the latest program (its leftovers are found through it).
    pub last_pid: i32,
    /// How the program ended, once it has.
    pub exit: Option<ExitImage>,
    /// Whether the session keeps a screen model.
    pub screen: bool,
    /// Whether the program has drawn anything.
    pub drawn: bool,
    /// The screen as ANSI (scrollback, both grids, modes) at `snapshot_offset`.
    pub snapshot: Option<Blob>,
    /// The log offset the snapshot belongs to.
    pub snapshot_offset: u64,
    /// Where the log tail starts (at or before `snapshot_offset`).
    pub log_start: u64,
    /// The log's newest bytes, from `log_start` to its head.
    pub log: Blob,
    /// Input accepted but not yet written to the PTY, in order.
    pub input: Blob,
    /// Its attention: state, reason, capability token (absent in an image from before them:
    /// the session starts over as `working`).
    #[serde(default)]
    pub attention: Option<AttentionImage>,
    /// Who created it (absent in an image from before names: not known).
    #[serde(default)]
    pub created_by: Option<String>,
}

/// A session's attention (see `session/attention.rs`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AttentionImage {
    /// `working`, `waiting`, `idle` or `exited`.
    pub state: crate::attention::State,
    /// When it entered it, milliseconds since the Unix epoch.
    pub since_unix_ms: u64,
    /// Why.
    pub reason: String,
    /// `hook`, `screen`, `terminal` or `exit`.
    pub source: crate::attention::Source,
    /// Quick replies.
    pub choices: Vec<crate::attention::Choice>,
    /// The session's capability token (its program has it in its environment).
    pub token: String,
    /// The agent's report that held, if one did: (state, reason).
    pub hook: Option<(crate::attention::State, String)>,
}

/// An assistant (see `config::Assistant`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AssistantImage {
    /// Display name.
    pub name: String,
    /// Start command.
    pub command: Vec<String>,
    /// Resume command.
    pub resume: Option<Vec<String>>,
    /// YOLO command.
    pub yolo: Option<Vec<String>>,
    /// Environment for every run.
    pub env: BTreeMap<String, String>,
    /// Environment in YOLO mode.
    pub yolo_env: BTreeMap<String, String>,
    /// `state_hooks` as the config spells it (absent before attention: none).
    #[serde(default)]
    pub state_hooks: String,
}

/// A chat line.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChatImage {
    /// Who.
    pub user_name: String,
    /// What.
    pub text: String,
    /// When, RFC 3339.
    pub timestamp: String,
    /// Whether a guest (a share link's holder) wrote it: `user_name` is only what it calls
    /// itself (absent in an image from before names: not a guest).
    #[serde(default)]
    pub guest: bool,
}

/// A running program.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProcessImage {
    /// Its pid (still a child of this process: `execve` keeps the pid).
    pub pid: i32,
    /// Its PTY master's descriptor (`None` if the PTY already read EOF).
    pub pty_fd: Option<i32>,
}

/// How a program ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExitImage {
    /// Exit status, or 128 + signal.
    pub code: i32,
    /// The signal's name.
    pub signal: Option<String>,
}

/// A share link.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ShareImage {
    /// Short id.
    pub id: String,
    /// Its session.
    pub session: Uuid,
    /// Whether it may type.
    pub writer: bool,
    /// Whether it may download the recording.
    pub record: bool,
    /// Its token.
    pub token: String,
    /// Milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// Milliseconds since the Unix epoch.
    pub expires_unix_ms: Option<u64>,
    /// The user who made it (empty from an image older than named users).
    #[serde(default)]
    pub created_by: String,
}

/// The lifecycle events.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JournalImage {
    /// The next event's id.
    pub next: u64,
    /// The events kept, oldest first.
    pub events: Vec<EventImage>,
}

/// One lifecycle event.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EventImage {
    /// Its id.
    pub id: u64,
    /// Its kind.
    pub kind: String,
    /// Its session.
    pub session: Option<Uuid>,
    /// Its JSON.
    pub data: serde_json::Value,
}

/// Why an image cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// Not an image at all.
    #[error("not a ptyhub image (bad magic)")]
    Magic,
    /// Written by a binary with a format this one does not read.
    #[error("image format {0} is not one this binary reads ({READS:?})")]
    Format(u32),
    /// Cut short or inconsistent.
    #[error("the image is damaged: {0}")]
    Damaged(String),
    /// The JSON does not parse.
    #[error("the image's description does not parse: {0}")]
    Json(#[from] serde_json::Error),
}

/// Blobs gathered while an image is written.
#[derive(Debug, Default)]
pub struct Blobs(Vec<u8>);

impl Blobs {
    /// Adds a byte area; returns its reference.
    pub fn add(&mut self, bytes: &[u8]) -> Blob {
        let at = self.0.len() as u64;
        self.0.extend_from_slice(bytes);
        Blob {
            at,
            len: bytes.len() as u64,
        }
    }

    /// Takes over a byte area read back with its image.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// The bytes of `blob`; a reference outside the area is damage.
    pub fn get(&self, blob: Blob) -> Result<&[u8], ImageError> {
        let end = blob.at.checked_add(blob.len);
        end.filter(|&end| end <= self.0.len() as u64)
            .map(|end| &self.0[blob.at as usize..end as usize])
            .ok_or_else(|| ImageError::Damaged(format!("blob {blob:?} is outside the image")))
    }
}

/// Writes `image` and its blobs in the format above.
pub fn encode(image: &Image, blobs: &Blobs) -> Result<Vec<u8>, serde_json::Error> {
    let json = serde_json::to_vec(image)?;
    let mut out = Vec::with_capacity(MAGIC.len() + 12 + json.len() + blobs.0.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&blobs.0);
    Ok(out)
}

/// Reads an image written by [`encode`], checking what can be checked without the
/// descriptors: the format, the lengths, every blob reference, distinct descriptor numbers.
pub fn decode(bytes: &[u8]) -> Result<(Image, Blobs), ImageError> {
    let rest = bytes.strip_prefix(MAGIC).ok_or(ImageError::Magic)?;
    let damaged = || ImageError::Damaged("cut short".into());
    let (format, rest) = rest.split_first_chunk::<4>().ok_or_else(damaged)?;
    let format = u32::from_le_bytes(*format);
    if !READS.contains(&format) {
        return Err(ImageError::Format(format));
    }
    let (len, rest) = rest.split_first_chunk::<8>().ok_or_else(damaged)?;
    let len = u64::from_le_bytes(*len);
    if len > MAX_JSON || len > rest.len() as u64 {
        return Err(damaged());
    }
    let (json, blobs) = rest.split_at(len as usize);
    let image: Image = serde_json::from_slice(json)?;
    let blobs = Blobs::from_bytes(blobs.to_vec());
    let mut fds = HashSet::new();
    fds.insert(image.listener_fd);
    let mut ids = HashSet::new();
    for s in &image.sessions {
        if !ids.insert(s.id) {
            return Err(ImageError::Damaged(format!("session {} twice", s.id)));
        }
        for blob in [s.log, s.input].into_iter().chain(s.snapshot) {
            blobs.get(blob)?;
        }
        if s.snapshot_offset < s.log_start
            || s.snapshot_offset > s.log_start.saturating_add(s.log.len)
        {
            return Err(ImageError::Damaged(format!(
                "session {}: the snapshot's offset is outside its log",
                s.id
            )));
        }
        if let Some(fd) = s.process.as_ref().and_then(|p| p.pty_fd) {
            if fd < 0 || !fds.insert(fd) {
                return Err(ImageError::Damaged(format!(
                    "descriptor {fd} is named twice or invalid"
                )));
            }
        }
    }
    if image.listener_fd < 0 {
        return Err(ImageError::Damaged("no listening socket".into()));
    }
    Ok((image, blobs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Image, Blobs) {
        let mut blobs = Blobs::default();
        let log = blobs.add(b"hello\r\n");
        let snapshot = blobs.add(b"\x1bc");
        let image = Image {
            version: "0.1.0".into(),
            listener_fd: 3,
            sessions: vec![SessionImage {
                id: Uuid::new_v4(),
                num: Some(1),
                process: Some(ProcessImage {
                    pid: 42,
                    pty_fd: Some(4),
                }),
                snapshot: Some(snapshot),
                snapshot_offset: 100,
                log_start: 95,
                log,
                ..Default::default()
            }],
            ..Default::default()
        };
        (image, blobs)
    }

    #[test]
    fn an_image_reads_back_as_written() {
        let (image, blobs) = sample();
        let bytes = encode(&image, &blobs).expect("encodes");
        let (back, back_blobs) = decode(&bytes).expect("decodes");
        assert_eq!(back.sessions.len(), 1);
        let s = &back.sessions[0];
        assert_eq!(s.id, image.sessions[0].id);
        assert_eq!(back_blobs.get(s.log).expect("log"), b"hello\r\n");
        assert_eq!(
            back_blobs.get(s.snapshot.expect("snapshot")).expect("snap"),
            b"\x1bc"
        );
    }

    #[test]
    fn damage_and_unknown_formats_are_refused() {
        let (image, blobs) = sample();
        let bytes = encode(&image, &blobs).expect("encodes");
        assert!(matches!(decode(b"nonsense"), Err(ImageError::Magic)));
        let mut future = bytes.clone();
        future[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&99u32.to_le_bytes());
        assert!(matches!(decode(&future), Err(ImageError::Format(99))));
        for cut in [MAGIC.len() + 2, MAGIC.len() + 10, bytes.len() - 3] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let (mut twice, blobs) = sample();
        twice.listener_fd = 4;
        let bytes = encode(&twice, &blobs).expect("encodes");
        assert!(matches!(decode(&bytes), Err(ImageError::Damaged(_))));
    }
}
