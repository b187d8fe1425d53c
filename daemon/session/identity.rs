//! What a session is and how it is set: its uuid and number, its name, the assistant and the
//! command it runs, its working directory, when it was made and by whom, and YOLO mode. From these come
//! the status its viewers see and the metadata the session list shows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::info;
use uuid::Uuid;

use super::events::{CreateSpec, SessionInfo, StatusInfo};
use super::process::ExitInfo;
use super::refusal::Refusal;
use super::timestamp::rfc3339;
use crate::attention::wiring::Wiring;
use crate::attention::SessionState;
use crate::config::{Assistant, ScreenPatterns, StateHooks};
use crate::upgrade::image::{AssistantImage, SessionImage};

/// The session's identity and settings.
pub(super) struct Identity {
    id: Uuid,
    /// The session's number (see `SessionInfo::num`).
    num: Option<u8>,
    name: String,
    assistant_key: String,
    assistant: Assistant,
    /// Whether the program is the creator's own command rather than the assistant's: such a
    /// session has no YOLO mode whatever its assistant has.
    own_command: bool,
    /// The program and arguments run last.
    command: Vec<String>,
    cwd: PathBuf,
    created_at: SystemTime,
    yolo_mode: bool,
    /// How its programs are started to report their state (the environment, the agent's hooks).
    wiring: Wiring,
    /// Who created it (a user's name), when known.
    created_by: Option<String>,
}

impl Identity {
    /// A session created now from `spec`, numbered `num`, named `name` (validated), running
    /// `command` as `assistant` in `cwd` (checked), its programs started as `wiring` says.
    pub(super) fn created(
        spec: &CreateSpec,
        num: Option<u8>,
        name: String,
        assistant: Assistant,
        command: Vec<String>,
        cwd: PathBuf,
        wiring: Wiring,
    ) -> Self {
        Self {
            id: spec.id,
            num,
            name,
            assistant_key: spec.assistant.clone(),
            yolo_mode: assistant.starts_in_yolo(),
            assistant,
            own_command: spec.command.is_some(),
            command,
            cwd,
            created_at: SystemTime::now(),
            wiring,
            created_by: spec.created_by.clone(),
        }
    }

    /// A session as a live upgrade's image describes it, its programs started as `wiring` says
    /// (made from the image's `state_hooks`: see [`Identity::image_hooks`]).
    pub(super) fn from_image(image: &SessionImage, wiring: Wiring) -> Self {
        let a = &image.assistant;
        Self {
            id: image.id,
            num: image.num,
            name: image.name.clone(),
            assistant_key: image.assistant_key.clone(),
            assistant: Assistant {
                name: a.name.clone(),
                command: a.command.clone(),
                resume: a.resume.clone(),
                yolo: a.yolo.clone(),
                env: a.env.clone(),
                yolo_env: a.yolo_env.clone(),
                state_hooks: Self::image_hooks(image),
                // Read by the screen thread, which has them from the config.
                state: ScreenPatterns::default(),
            },
            own_command: image.own_command,
            command: image.command.clone(),
            cwd: image.cwd.clone().into(),
            created_at: UNIX_EPOCH + Duration::from_millis(image.created_unix_ms),
            yolo_mode: image.yolo_mode,
            wiring,
            created_by: image.created_by.clone(),
        }
    }

    /// The `state_hooks` an image's session starts its programs with.
    pub(super) fn image_hooks(image: &SessionImage) -> StateHooks {
        match image.own_command {
            true => StateHooks::None,
            false => StateHooks::parse(&image.assistant.state_hooks).unwrap_or_default(),
        }
    }

    /// Its part of a live upgrade's image.
    pub(super) fn write_image(&self, image: &mut SessionImage) {
        image.id = self.id;
        image.num = self.num;
        image.name = self.name.clone();
        image.assistant_key = self.assistant_key.clone();
        image.assistant = AssistantImage {
            name: self.assistant.name.clone(),
            command: self.assistant.command.clone(),
            resume: self.assistant.resume.clone(),
            yolo: self.assistant.yolo.clone(),
            env: self.assistant.env.clone(),
            yolo_env: self.assistant.yolo_env.clone(),
            state_hooks: self.assistant.state_hooks.as_str().to_owned(),
        };
        image.own_command = self.own_command;
        image.command = self.command.clone();
        image.cwd = self.cwd.display().to_string();
        image.created_unix_ms = self
            .created_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        image.yolo_mode = self.yolo_mode;
        image.created_by = self.created_by.clone();
    }

    /// The session id.
    pub(super) fn id(&self) -> Uuid {
        self.id
    }

    /// The working directory.
    pub(super) fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// Whether YOLO mode is on.
    pub(super) fn yolo_mode(&self) -> bool {
        self.yolo_mode
    }

    /// Renames the session to `name` (validated); whether that changed it.
    pub(super) fn rename(&mut self, name: String) -> bool {
        if name == self.name {
            return false;
        }
        info!(session = %self.id, %name, "session renamed");
        self.name = name;
        true
    }

    /// Why YOLO mode cannot be toggled, whatever the program's state, if it cannot.
    pub(super) fn yolo_refusal(&self) -> Option<Refusal> {
        if self.own_command {
            let message = "this session runs its own command, which has no YOLO mode".to_owned();
            return Some(Refusal::YoloUnsupported(message));
        }
        if !self.assistant.yolo_supported() {
            let message = format!("{} has no YOLO mode", self.assistant.name);
            return Some(Refusal::YoloUnsupported(message));
        }
        None
    }

    /// Turns YOLO mode over; whether it is on now.
    pub(super) fn toggle_yolo(&mut self) -> bool {
        self.yolo_mode = !self.yolo_mode;
        self.yolo_mode
    }

    /// The command and environment that start the assistant again: its YOLO command or
    /// not, as the mode is now, else its resume command.
    pub(super) fn restart_command(&self) -> (Vec<String>, BTreeMap<String, String>) {
        let argv = self
            .assistant
            .restart_argv(self.yolo_mode)
            .unwrap_or_else(|| self.assistant.resume_argv());
        (argv, self.assistant.env_for(self.yolo_mode))
    }

    /// The program now running is `command`.
    pub(super) fn set_command(&mut self, command: Vec<String>) {
        self.command = command;
    }

    /// How its programs are started to report their state.
    pub(super) fn wiring(&self) -> &Wiring {
        &self.wiring
    }

    /// The argument array and environment that start `argv` with `env` so that the program
    /// can report its state (see [`Wiring::launch`]).
    pub(super) fn launch(
        &self,
        argv: &[String],
        env: &BTreeMap<String, String>,
    ) -> (Vec<String>, BTreeMap<String, String>) {
        self.wiring.launch(argv, env)
    }

    /// The status every viewer sees, with the session's `viewers`, `size` (rows, cols), the
    /// writers whose windows size it (`sized_by`), whether a restart is under way, and its
    /// `state`.
    pub(super) fn status(
        &self,
        viewers: usize,
        size: (u16, u16),
        sized_by: Vec<u32>,
        restarting: bool,
        state: &SessionState,
    ) -> StatusInfo {
        StatusInfo {
            viewers,
            rows: size.0,
            cols: size.1,
            assistant: self.assistant.name.clone(),
            session_name: self.name.clone(),
            session_uuid: self.id,
            work_dir: self.cwd.display().to_string(),
            yolo_mode: self.yolo_mode,
            yolo_supported: self.assistant.yolo_supported(),
            restarting,
            state: state.clone(),
            sized_by,
        }
    }

    /// The metadata the session list shows, with the session's `viewers`, `size`, `exit`,
    /// `people`, `output_bytes` and `state`.
    pub(super) fn info(
        &self,
        viewers: usize,
        size: (u16, u16),
        exit: Option<&ExitInfo>,
        people: Vec<String>,
        output_bytes: u64,
        state: &SessionState,
    ) -> SessionInfo {
        SessionInfo {
            id: self.id,
            num: self.num,
            name: self.name.clone(),
            assistant: self.assistant_key.clone(),
            assistant_name: self.assistant.name.clone(),
            viewers,
            cols: size.1,
            rows: size.0,
            alive: exit.is_none(),
            exit_code: exit.map(|e| e.code),
            exit_signal: exit.and_then(|e| e.signal.clone()),
            created_at: rfc3339(self.created_at),
            created_by: self.created_by.clone(),
            work_dir: self.cwd.display().to_string(),
            yolo_mode: self.yolo_mode,
            command: self.command.clone(),
            people,
            output_bytes,
            state: state.state,
            state_since: rfc3339(state.since),
            state_since_ms: state.since_ms(),
            reason: state.reason.clone(),
            state_source: state.source,
            choices: state.choices.clone(),
        }
    }
}

/// The metadata published before the session's own: nobody reads it (the session publishes
/// its own before its handle is given out).
pub(super) fn placeholder_info(id: Uuid) -> SessionInfo {
    SessionInfo {
        id,
        num: None,
        name: String::new(),
        assistant: String::new(),
        assistant_name: String::new(),
        viewers: 0,
        cols: 0,
        rows: 0,
        alive: true,
        exit_code: None,
        exit_signal: None,
        created_at: String::new(),
        created_by: None,
        work_dir: String::new(),
        yolo_mode: false,
        command: Vec::new(),
        people: Vec::new(),
        output_bytes: 0,
        state: Default::default(),
        state_since: String::new(),
        state_since_ms: 0,
        reason: String::new(),
        state_source: Default::default(),
        choices: Vec::new(),
    }
}
