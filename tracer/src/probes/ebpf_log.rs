//! The kernel programs' own messages (aya-log), for what a counter cannot say: why a probe's
//! argument read failed and at which address (`tracer-ebpf/src/probes/call.rs`). Rare events
//! stay counted in `LOSS` whatever this says (docs/report.md, `tracer.loss`).
//!
//! Off unless gputrace logs at debug level (`-vv`, or `RUST_LOG`): the level is a constant of
//! the object set before it loads (`AYA_LOG_LEVEL`, read-only to the programs), so with the
//! messages off the verifier drops their code and the probes pay nothing for them. When on,
//! a thread of its own copies them to gputrace's log as they come, and once more at the end.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use aya::{Ebpf, EbpfLoader};
use aya_log::EbpfLogger;

/// The log target of the messages: aya-log names each after the module of the eBPF object
/// that wrote it (the object is the `gputrace` binary of `tracer-ebpf`).
pub const TARGET: &str = "gputrace::probes";

/// The global of the object that holds the level of the messages it writes.
const LEVEL_GLOBAL: &str = "AYA_LOG_LEVEL";

/// How often the reader looks for messages while the session runs.
const POLL: Duration = Duration::from_millis(100);

/// Whether gputrace's log shows the programs' messages (debug level for their target).
#[must_use]
pub fn wanted() -> bool {
    log::log_enabled!(target: TARGET, log::Level::Debug)
}

/// Set the level of the programs' messages in the object about to be loaded: debug where
/// [`wanted`], else none at all.
pub fn configure(loader: &mut EbpfLoader<'_>, on: bool) {
    /// No level at all: every message's code is dead.
    static OFF: u8 = 0;
    static DEBUG: u8 = aya_log::Level::Debug as u8;
    loader.override_global(LEVEL_GLOBAL, if on { &DEBUG } else { &OFF }, true);
}

/// Copies the programs' messages to gputrace's log until dropped (then once more, so that
/// none written before the probes came off is lost).
#[derive(Debug)]
pub struct Reader {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Reader {
    /// Start reading the messages of `ebpf` (loaded with them on); None, with a warning,
    /// where their ring is missing or the thread cannot start.
    pub fn start(ebpf: &mut Ebpf) -> Option<Self> {
        let mut logger = EbpfLogger::init(ebpf).map_err(|e| log::warn!("the eBPF programs' messages cannot be read: {e}")).ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("gputrace-ebpf-log".into())
            .spawn(move || loop {
                let last = stopping.load(Ordering::Acquire);
                if !last {
                    let mut fds = [rustix::event::PollFd::new(&logger, rustix::event::PollFlags::IN)];
                    let timeout = rustix::event::Timespec::try_from(POLL).ok();
                    // A failed poll (interrupted) only means reading a little early.
                    let _ = rustix::event::poll(&mut fds, timeout.as_ref());
                }
                logger.flush();
                if last {
                    break;
                }
            })
            .map_err(|e| log::warn!("the eBPF programs' messages cannot be read: {e}"))
            .ok()?;
        Some(Self { stop, thread: Some(thread) })
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
