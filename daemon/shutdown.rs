//! The daemon-wide shutdown signal, handed to every long-lived task.

pub use tokio_util::sync::CancellationToken as Shutdown;
