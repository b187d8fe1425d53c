//! The daemon in the test's own process: [`ptyhub::daemon::Daemon`] served on 127.0.0.1:0 by a
//! runtime on a thread of its own, with the config the binary would load. It starts in
//! milliseconds instead of spawning a process, for tests of the REST API and the protocol;
//! tests of signals, process lifetime, logs and faults keep the real binary (`launcher`).
//!
//! Ending it (`stop`, or dropping it) runs `Daemon::end` as SIGTERM does in the binary: every
//! session's programs are signalled and reaped, open connections get their close frames.

use std::fs::File;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use tokio::sync::oneshot;

/// A daemon served by a runtime on a thread of its own; ended when dropped.
pub struct InProcess {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl InProcess {
    /// Loads `config` as `ptyhub --listen 127.0.0.1:0 --config CONFIG` would, serves it
    /// (`token: None`: authentication off), and logs what `RUST_LOG=ptyhub=debug` shows to `log`
    /// (what the runtime's threads log; a session's own threads log nowhere).
    pub fn start(
        config: &Path,
        token: Option<String>,
        log: &Path,
        ready_timeout: Duration,
    ) -> Result<InProcess> {
        let cfg =
            ptyhub::config::load(Some(config), Some("127.0.0.1:0")).map_err(|e| anyhow!("{e}"))?;
        let file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let dispatch = tracing::Dispatch::new(
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new("ptyhub=debug"))
                .with_ansi(false)
                .with_writer(Mutex::new(file))
                .finish(),
        );
        let on_worker = dispatch.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ptyhub-in-process")
            .on_thread_start(move || {
                // For the thread's life (the guard would restore the previous default).
                std::mem::forget(tracing::dispatcher::set_default(&on_worker));
            })
            .enable_all()
            .build()
            .context("starting the daemon's runtime")?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("ptyhub-daemon".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    runtime.block_on(async move {
                        let cfg = Arc::new(cfg);
                        let listener = match ptyhub::daemon::Daemon::bind(&cfg).await {
                            Ok(listener) => listener,
                            Err(e) => {
                                let _ = ready_tx.send(Err(e));
                                return;
                            }
                        };
                        let mut daemon = ptyhub::daemon::Daemon::new(cfg, token);
                        let served = daemon.serve(listener);
                        let ok = served.is_ok();
                        let _ = ready_tx.send(served);
                        if ok {
                            // A send or the sender dropped: either way, the end.
                            let _ = stop_rx.await;
                        }
                        daemon.end().await;
                    });
                });
                // Whatever `end` left running (connections past their drain time) goes now.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
            .context("starting the daemon's thread")?;
        let addr = match ready_rx.recv_timeout(ready_timeout) {
            Ok(Ok(addr)) => addr,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(anyhow!("cannot listen on 127.0.0.1:0: {e}"));
            }
            Err(_) => {
                drop(stop_tx);
                return Err(anyhow!(
                    "the daemon did not listen within {ready_timeout:?}"
                ));
            }
        };
        Ok(InProcess {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Ends it (as SIGTERM ends the binary) and waits until it has: its sessions ended, their
    /// programs gone. Panics if its thread did.
    pub fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() && !std::thread::panicking() {
                panic!("the in-process daemon's thread panicked");
            }
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.stop();
    }
}
