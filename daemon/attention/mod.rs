//! Attention: whether each session works, waits for its user, is done, or has ended
//! (README, "Attention"; docs/protocol.md). The words (`state`), reading a screen for it
//! (`screen`, on the screen thread), what agents report (`report`, through the capability
//! token and rate limit of `gate`), wiring agents' hooks as they start (`wiring`), and the one
//! place a change of state is told to the rest of the daemon (`transitions`). The session part
//! that decides, from these, is `session/attention.rs`.

pub mod gate;
pub mod report;
pub mod screen;
pub mod state;
pub mod transitions;
pub mod wiring;

pub use state::{Choice, SessionState, Source, State, Transition};
pub use transitions::Transitions;
