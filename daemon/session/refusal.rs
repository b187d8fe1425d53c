//! Why a session refused what a viewer asked, in domain words; each dialect's codec turns a
//! [`Refusal`] into its own wire form (the browser dialect: an `error` message's code and text).

/// Something a viewer may ask of a session that its role or the session's state can refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Keystrokes or a paste.
    Input,
    /// A terminal size.
    Resize,
    /// A new session name.
    Rename,
    /// A file into the working directory.
    Upload,
    /// A restart with or without YOLO flags.
    ToggleYolo,
    /// A signal to the program.
    Signal,
}

impl Action {
    /// The action as people name it.
    pub fn noun(self) -> &'static str {
        match self {
            Action::Input => "input",
            Action::Resize => "resize",
            Action::Rename => "rename",
            Action::Upload => "upload",
            Action::ToggleYolo => "YOLO toggle",
            Action::Signal => "signal",
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The viewer joined read-only.
    ReadOnly(Action),
    /// The program has exited: there is nothing to act on.
    NotRunning(Action),
    /// A chat line broke the rules (length, empty); says which.
    InvalidChat(String),
    /// The assistant has no YOLO mode; says why.
    YoloUnsupported(String),
    /// A restart is already under way.
    RestartInProgress,
    /// Not a signal a viewer may send; says why.
    BadSignal(String),
    /// Sending the signal failed; says why.
    SignalFailed(String),
    /// Not a refusal of something asked: the session's recording stopped; says why.
    RecordingFailed(String),
}

impl Refusal {
    /// A sentence for people, the same in every dialect.
    pub fn message(&self) -> String {
        match self {
            Refusal::ReadOnly(Action::Upload) => {
                "this link is read-only: uploads are refused".to_owned()
            }
            Refusal::ReadOnly(action) => {
                format!("this link is read-only: {} ignored", action.noun())
            }
            Refusal::NotRunning(Action::Input) => {
                "the program has exited: input ignored".to_owned()
            }
            Refusal::NotRunning(Action::Signal) => {
                "the program has exited: no one to signal".to_owned()
            }
            Refusal::NotRunning(_) => "the program has exited: nothing to restart".to_owned(),
            Refusal::InvalidChat(why)
            | Refusal::YoloUnsupported(why)
            | Refusal::BadSignal(why)
            | Refusal::SignalFailed(why)
            | Refusal::RecordingFailed(why) => why.clone(),
            Refusal::RestartInProgress => "the agent is already restarting".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Action, Refusal};

    #[test]
    fn messages_name_the_action() {
        assert_eq!(
            Refusal::ReadOnly(Action::Resize).message(),
            "this link is read-only: resize ignored"
        );
        assert_eq!(
            Refusal::ReadOnly(Action::ToggleYolo).message(),
            "this link is read-only: YOLO toggle ignored"
        );
        assert_eq!(
            Refusal::NotRunning(Action::ToggleYolo).message(),
            "the program has exited: nothing to restart"
        );
    }
}
