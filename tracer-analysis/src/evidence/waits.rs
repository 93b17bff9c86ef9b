//! Who woke the job's threads, and so what they waited for.
//!
//! Off-CPU time alone does not say why a thread was idle: a training loop asleep on a timer
//! is paused, not starved; one woken by a data-loading worker process waited for its input;
//! one woken by another thread of its own process waited on a queue or a lock. The kernel
//! side counts every wakeup of a traced thread under who woke it (`sched_waking`, in the
//! waker's context), the waker's kernel stack, and whether the thread was inside a CUDA call
//! (`tracer-ebpf/src/probes/sched.rs`). Here each kind of wakeup is classified from those
//! facts — the stack first, since in interrupt context the "waker" is merely the task that
//! was interrupted — and long spells become the pauses of the window (`window.phases`).

use serde::{Deserialize, Serialize};

/// What a thread waited for, as its wakeup shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// Woken by another process of the traced tree (a DataLoader worker through its pipe).
    InputWorker,
    /// Woken by another thread of the same process (a queue, a lock, a condition).
    Thread,
    /// Woken by a timer (a sleep, or a wait that timed out).
    Timer,
    /// Woken by a block I/O completion.
    Disk,
    /// Woken by network traffic.
    Network,
    /// Waiting inside a CUDA call (a synchronize or copy), or woken by the GPU driver.
    Gpu,
    /// Anything else: another process, or a path not recognised.
    #[default]
    Other,
}

impl WaitKind {
    /// Every kind, in the order of the time account's per-kind arrays (`TimeAccount::waits_ns`).
    pub const ALL: [Self; 7] = [Self::InputWorker, Self::Thread, Self::Timer, Self::Disk, Self::Network, Self::Gpu, Self::Other];

    /// The kind's name in the report (as serde writes it).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::InputWorker => "input_worker",
            Self::Thread => "thread",
            Self::Timer => "timer",
            Self::Disk => "disk",
            Self::Network => "network",
            Self::Gpu => "gpu",
            Self::Other => "other",
        }
    }
}

/// How the waker stands to the woken thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// A thread of the woken thread's own process.
    SameProcess,
    /// Another process of the traced tree.
    TreeProcess,
    /// The idle task: an interrupt on an idle CPU.
    Idle,
    /// A process outside the traced tree.
    OtherProcess,
}

/// One kind of wakeup of one thread, classified (carried by snapshots and recordings).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wake {
    /// The woken thread and its process.
    pub tid: u32,
    /// The woken thread's process (0 where it was not known).
    pub pid: u32,
    /// The waker's process: the task current at the wakeup, only the one interrupted in
    /// interrupt context (0: the idle task).
    pub waker_pid: u32,
    /// The waker thread at the first such wakeup.
    pub waker_tid: u32,
    /// That thread's command name then.
    pub waker_comm: String,
    /// The waker's kernel stack in the kernel's stack map; negative where it could not be taken.
    pub stack_id: i64,
    /// Whether the woken thread was inside a probed CUDA call.
    pub in_cuda: bool,
    /// What the thread waited for, as classified.
    pub kind: WaitKind,
    /// The telling kernel function on the waker's path (`pipe_write`, `futex_wake`,
    /// `hrtimer_wakeup`), where symbols were readable.
    pub site: String,
    /// How many such wakeups.
    pub count: u64,
    /// Off-CPU time these wakeups ended; of it, uninterruptible.
    pub ns: u64,
    /// Of `ns`, uninterruptible (`D`) time, ns.
    pub blocked_ns: u64,
}

impl Wake {
    /// Who woke the thread, for people. Where the kernel path was a timer, a disk or the
    /// network, the task current at the wakeup was only the one interrupted, so it is not
    /// named. The one naming of a waker, for the report's table and the diagnoses' evidence.
    #[must_use]
    pub fn who(&self) -> String {
        match self.kind {
            WaitKind::Gpu if self.in_cuda => "the GPU (the thread was inside a CUDA call)".into(),
            WaitKind::Timer => "a timer".into(),
            WaitKind::Disk => "a disk completion".into(),
            WaitKind::Network => "the network".into(),
            _ if self.waker_pid == 0 => "an interrupt".into(),
            _ => format!("pid {} ({})", self.waker_pid, crate::printable::clean(&self.waker_comm)),
        }
    }

    /// Whether this is the wakeup a long spell ended with.
    #[must_use]
    pub fn matches(&self, tid: u32, waker_pid: u32, stack_id: i64, in_cuda: bool) -> bool {
        self.tid == tid && self.waker_pid == waker_pid && self.stack_id == stack_id && self.in_cuda == in_cuda
    }
}

/// Frames that are the wakeup's own machinery (and the tracing of it), not its cause.
fn plumbing(frame: &str) -> bool {
    frame == "try_to_wake_up"
        || frame.contains("wake_up")
        || frame.contains("wake_function")
        || frame.starts_with("ttwu")
        || frame.starts_with("bpf_")
        || frame.starts_with("__bpf")
        || frame.starts_with("__traceiter")
        || frame.starts_with("perf_trace")
        || frame.starts_with("trace_event")
        || frame == "pollwake"
        || frame == "ep_poll_callback"
        || frame.starts_with("__wake")
        || frame.starts_with("wake_q")
}

fn any(frames: &[&str], f: impl Fn(&str) -> bool) -> Option<String> {
    frames.iter().find(|fr| f(fr)).map(|fr| (*fr).to_owned())
}

/// Classify a wakeup from its waker's kernel frames (innermost first; empty where symbols
/// were not readable), how the waker stands to the thread, and whether the thread was inside
/// a CUDA call. Returns the kind and the telling frame.
#[must_use]
pub fn classify(frames: &[&str], relation: Relation, in_cuda: bool) -> (WaitKind, String) {
    let site = || frames.iter().copied().find(|f| !plumbing(f)).unwrap_or_default().to_owned();
    if in_cuda {
        return (WaitKind::Gpu, site());
    }
    if let Some(f) = any(frames, |f| matches!(f, "hrtimer_wakeup" | "process_timeout" | "timerfd_tmrproc" | "it_real_fn")) {
        return (WaitKind::Timer, f);
    }
    if let Some(f) = any(frames, |f| f.starts_with("nv_") || f.starts_with("nvidia") || f.starts_with("uvm_") || f.contains("_nvidia")) {
        return (WaitKind::Gpu, f);
    }
    let disk = |f: &str| {
        f.starts_with("blk_mq_end_request")
            || f.starts_with("blk_update_request")
            || f == "bio_endio"
            || f.starts_with("end_bio")
            || f.starts_with("folio_end_")
            || f.starts_with("end_page_")
            || f.starts_with("end_buffer_")
            || f.starts_with("iomap_") && f.contains("end")
            || f.starts_with("ext4_end_")
            || f.starts_with("xfs_end_")
            || f == "blkdev_bio_end_io"
    };
    if let Some(f) = any(frames, disk) {
        return (WaitKind::Disk, f);
    }
    let net = |f: &str| {
        f == "net_rx_action"
            || f.starts_with("__netif_receive")
            || f.starts_with("tcp_")
            || f.starts_with("udp_")
            || f.starts_with("ip_rcv")
            || f.starts_with("ip6_rcv")
            || f == "sock_def_readable"
            || f.starts_with("inet_")
    };
    let interrupt = frames.iter().any(|f| f.starts_with("__sysvec_") || f.starts_with("asm_sysvec") || f.contains("irq") || f.contains("softirq"));
    match relation {
        // A task that was merely interrupted is no waker: only the stack says what woke us.
        _ if interrupt => (any(frames, net).map_or(WaitKind::Other, |_| WaitKind::Network), site()),
        Relation::SameProcess => (WaitKind::Thread, site()),
        Relation::TreeProcess => (WaitKind::InputWorker, site()),
        _ if frames.iter().any(|f| net(f)) => (WaitKind::Network, site()),
        _ => (WaitKind::Other, site()),
    }
}

/// Wakeups a process must have handed a thread through a pipe or socket to count as feeding
/// it input: a loader worker does once a batch; a library's helper process (MPI's launcher
/// answering `MPI_Init` as Lightning starts, on the H200) does once or twice.
pub const MIN_INPUT_WAKES: u64 = 10;

/// The processes that woke the threads `woken` admits with their input, often enough to be
/// loader workers ([`MIN_INPUT_WAKES`]).
pub fn input_wakers(wakes: &[Wake], woken: impl Fn(&Wake) -> bool) -> std::collections::BTreeSet<u32> {
    let mut counts: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
    for w in wakes.iter().filter(|w| w.kind == WaitKind::InputWorker && woken(w)) {
        *counts.entry(w.waker_pid).or_default() += w.count;
    }
    counts.into_iter().filter(|(_, n)| *n >= MIN_INPUT_WAKES).map(|(pid, _)| pid).collect()
}

/// An off-CPU spell of at least `gputrace_common::host::LONG_SLEEP_NS`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LongSleep {
    /// The thread that slept.
    pub tid: u32,
    /// Its process.
    pub pid: u32,
    /// When it went off the CPU (monotonic ns).
    pub start_ns: u64,
    /// When it was woken (monotonic ns).
    pub end_ns: u64,
    /// The waker's process, as in [`Wake::waker_pid`] (0: the idle task).
    pub waker_pid: u32,
    /// The waker's kernel stack id; negative where it could not be taken.
    pub stack_id: i64,
    /// Whether the thread was inside a probed CUDA call.
    pub in_cuda: bool,
}

/// A pause: at least this long asleep on a timer, with the job's launching threads idle.
pub const PAUSE_MIN_NS: u64 = 1_000_000_000;

/// The paused stretches of the window: where a thread of the main process slept on a timer
/// for at least [`PAUSE_MIN_NS`] while every launching thread was idle too — not yet created,
/// or itself in a long spell off the CPU. `kind_of` classifies a long spell (from the wake
/// it ended with); `born` gives a launching thread's creation time where it was seen.
#[must_use]
pub fn pauses(
    sleeps: &[LongSleep],
    main_pid: u32,
    launching: &[u32],
    born: impl Fn(u32) -> Option<u64>,
    kind_of: impl Fn(&LongSleep) -> WaitKind,
) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for s in sleeps.iter().filter(|s| s.pid == main_pid && kind_of(s) == WaitKind::Timer && s.end_ns - s.start_ns >= PAUSE_MIN_NS) {
        let mut span = vec![(s.start_ns, s.end_ns)];
        for &t in launching.iter().filter(|&&t| t != s.tid) {
            // Where thread t was idle: before it was created, and its own long spells.
            let mut idle: Vec<(u64, u64)> = sleeps.iter().filter(|o| o.tid == t).map(|o| (o.start_ns, o.end_ns)).collect();
            if let Some(b) = born(t) {
                idle.push((0, b));
            }
            span = intersect(&span, &idle);
        }
        out.extend(span.into_iter().filter(|(a, b)| b - a >= PAUSE_MIN_NS));
    }
    merge(out)
}

/// The parts of `intervals` inside `within`.
#[must_use]
pub fn clip(intervals: &[(u64, u64)], within: (u64, u64)) -> Vec<(u64, u64)> {
    intersect(intervals, &[within])
}

/// Time two sets of intervals share.
#[must_use]
pub fn overlap_ns(a: &[(u64, u64)], b: &[(u64, u64)]) -> u64 {
    intersect(&merge(a.to_vec()), b).iter().map(|(s, e)| e - s).sum()
}

/// The intersection of two sets of intervals.
fn intersect(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(a0, a1) in a {
        for &(b0, b1) in b {
            let (s, e) = (a0.max(b0), a1.min(b1));
            if s < e {
                out.push((s, e));
            }
        }
    }
    merge(out)
}

fn merge(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_feeds_input_only_if_it_wakes_the_thread_again_and_again() {
        let wake = |waker_pid: u32, kind: WaitKind, count: u64| Wake { tid: 1, pid: 1, waker_pid, kind, count, ..Wake::default() };
        // A DataLoader worker, once a batch (two stacks of it add up); an MPI helper that
        // answered once as the job started; a thread of the job's own.
        let wakes = [
            wake(20, WaitKind::InputWorker, 6),
            wake(20, WaitKind::InputWorker, 6),
            wake(30, WaitKind::InputWorker, 1),
            wake(40, WaitKind::Thread, 500),
        ];
        assert_eq!(input_wakers(&wakes, |_| true).into_iter().collect::<Vec<_>>(), vec![20]);
        assert!(input_wakers(&wakes, |w| w.tid != 1).is_empty(), "only the threads asked about");
    }

    #[test]
    fn the_stack_says_what_woke_the_thread() {
        let timer = ["bpf_trace_run2", "__traceiter_sched_waking", "try_to_wake_up", "hrtimer_wakeup", "__hrtimer_run_queues", "hrtimer_interrupt"];
        // Whichever task the timer interrupted, the sleep ended on a timer.
        assert_eq!(classify(&timer, Relation::SameProcess, false), (WaitKind::Timer, "hrtimer_wakeup".into()));
        let pipe = ["bpf_trace_run2", "try_to_wake_up", "autoremove_wake_function", "__wake_up_common", "__wake_up_sync_key", "pipe_write", "vfs_write"];
        assert_eq!(classify(&pipe, Relation::TreeProcess, false), (WaitKind::InputWorker, "pipe_write".into()));
        let futex = ["try_to_wake_up", "wake_up_q", "futex_wake", "do_futex", "__x64_sys_futex"];
        assert_eq!(classify(&futex, Relation::SameProcess, false), (WaitKind::Thread, "futex_wake".into()));
        let disk = ["try_to_wake_up", "wake_page_function", "folio_wake_bit", "folio_end_read", "blk_mq_end_request", "__irq_exit_rcu"];
        assert_eq!(classify(&disk, Relation::OtherProcess, false).0, WaitKind::Disk);
        let net = ["try_to_wake_up", "__wake_up_common", "sock_def_readable", "tcp_data_queue", "tcp_rcv_established", "net_rx_action", "handle_softirqs"];
        assert_eq!(classify(&net, Relation::SameProcess, false).0, WaitKind::Network, "an interrupted thread of our own is not the waker");
        let gpu = ["try_to_wake_up", "nvidia_isr", "__handle_irq_event_percpu"];
        assert_eq!(classify(&gpu, Relation::Idle, false).0, WaitKind::Gpu);
        assert_eq!(classify(&futex, Relation::SameProcess, true).0, WaitKind::Gpu, "inside a CUDA call");
        // Without symbols, who woke the thread still tells a worker from a thread.
        assert_eq!(classify(&[], Relation::TreeProcess, false).0, WaitKind::InputWorker);
        assert_eq!(classify(&[], Relation::SameProcess, false).0, WaitKind::Thread);
        assert_eq!(classify(&[], Relation::Idle, false).0, WaitKind::Other);
    }

    fn sleep(tid: u32, start_s: u64, end_s: u64) -> LongSleep {
        LongSleep { tid, pid: 1, start_ns: start_s * 1_000_000_000, end_ns: end_s * 1_000_000_000, ..LongSleep::default() }
    }

    #[test]
    fn a_timer_sleep_is_a_pause_only_while_the_launching_threads_are_idle() {
        let s = 1_000_000_000;
        // The main thread sleeps 2–5 s on a timer; the launching thread is created at 4 s.
        let sleeps = [sleep(1, 2, 5)];
        let p = pauses(&sleeps, 1, &[1, 7], |t| (t == 7).then_some(4 * s), |_| WaitKind::Timer);
        assert_eq!(p, vec![(2 * s, 4 * s)]);
        // The launching thread itself sleeps on the timer: the whole spell.
        assert_eq!(pauses(&sleeps, 1, &[1], |_| None, |_| WaitKind::Timer), vec![(2 * s, 5 * s)]);
        // A launching thread that was busy all along: no pause.
        assert!(pauses(&sleeps, 1, &[1, 7], |_| None, |_| WaitKind::Timer).is_empty());
        // Autograd's thread asleep on its queue across the pause: still a pause.
        let both = [sleep(1, 2, 5), sleep(9, 1, 6)];
        assert_eq!(pauses(&both, 1, &[1, 9], |_| None, |l| if l.tid == 1 { WaitKind::Timer } else { WaitKind::Thread }), vec![(2 * s, 5 * s)]);
        // Not a timer, or too short: no pause.
        assert!(pauses(&sleeps, 1, &[1], |_| None, |_| WaitKind::InputWorker).is_empty());
        assert!(pauses(&[sleep(1, 2, 2)], 1, &[1], |_| None, |_| WaitKind::Timer).is_empty());
    }
}
