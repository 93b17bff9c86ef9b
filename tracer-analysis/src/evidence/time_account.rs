//! Where the job's launching wall time went: one partition of the window into buckets that
//! never overlap, so fractions add up to exactly 1. The detectors take their impacts from
//! disjoint parts of it, so the impacts of the problems found add up to at most 1.
//!
//! Per thread, the sources overlap — a thread inside a synchronize may be spinning on a CPU,
//! sleeping, or preempted — so CUDA call time is taken first (what the thread was doing),
//! scheduler time outside those calls next, and the rest is launching and other host work.
//! Where the sources add up to more than the thread's life (a preempted thread inside a sync
//! is counted by both), the scheduler buckets are trimmed to fit.
//!
//! **Which threads.** PyTorch spreads one training step over two threads of one process: the
//! Python thread launches the forward pass, the optimizer step and synchronizes; autograd's
//! device thread launches the backward pass, and each sleeps while the other works
//! (docs/validation.md). Neither thread alone is the job's critical path; the two together
//! are. So the account covers the main thread (most launches) and the threads of its process
//! that launched or synchronized a fair share as much (`CRITICAL_PATH_SHARE`): their active
//! buckets (everything but sleeping outside CUDA calls) add up, and the window's rest is
//! time when none of them was doing anything — sleeping. Threads that truly run at once (one
//! training loop per thread) add up to more than the window; then every active bucket is
//! scaled down alike, which makes the account that of the average thread.

use crate::model::TimeBucket;
use super::{
    sched_io::SchedStats,
    timeline::{CudaTimes, Mark},
    waits::{self, WaitKind},
    Evidence, ThreadStats,
};

/// A thread of the main thread's process joins the account if it made at least this share
/// of the main thread's launches, or of the most synchronizes any thread of the process made
/// (the Python thread of a PyTorch job may launch less than autograd's but make every sync).
/// Helper threads that launch once in a while (a logger, a memset at start) stay out.
pub const CRITICAL_PATH_SHARE: f64 = 0.05;

/// Where the accounted threads' time went: a partition into buckets that never overlap,
/// in ns. In a job's account (`critical_path`) the seven buckets, `waiting_on_gpu_ns` to
/// `launching_and_host_ns`, add up to `window_ns`; in one thread's (`of`) they cover the part
/// of the window it lived. The other figures are parts of buckets, or lie beside them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimeAccount {
    /// The time accounted for, ns: in a job's account, the stretch its threads worked in, less
    /// pauses and any start-up left out (`whole_ns` adds them back).
    pub window_ns: u64,
    /// The threads accounted for, the main thread first.
    pub threads: Vec<u32>,
    /// Blocked in synchronize calls: the host waits for the GPU.
    pub waiting_on_gpu_ns: u64,
    /// Inside copy calls (staging pageable memory, synchronous copies).
    pub in_copies_ns: u64,
    /// Inside device allocation, free and mapping calls.
    pub allocating_ns: u64,
    /// Runnable, not running: waiting for a CPU.
    pub waiting_for_cpu_ns: u64,
    /// Uninterruptible sleep, mostly disk.
    pub io_wait_ns: u64,
    /// Interruptible sleep outside CUDA calls: a queue, a lock, a timer (a data loader).
    pub sleeping_ns: u64,
    /// Everything else: on a CPU, launching kernels and running the program's own code.
    pub launching_and_host_ns: u64,
    /// Parts of buckets, each inside the bucket named. `waiting_on_gpu`: the transfer part of
    /// the waits that followed async bulk copies (the rest was the GPU finishing the work
    /// queued before them).
    pub copy_transfer_waits_ns: u64,
    /// `in_copies`: the staging of pageable copies.
    pub pageable_staging_ns: u64,
    /// `in_copies`: the transfer of synchronous copies from or to pinned memory.
    pub sync_copy_transfer_ns: u64,
    /// `launching_and_host`: host work while the GPU queue was known to be empty (after a
    /// synchronize, before the next launch), not explained by another bucket.
    pub host_while_queue_empty_ns: u64,
    /// Not a bucket (it overlaps them): time the GPU queue was known to be empty, from a
    /// queue-draining call's return to the next launch. A lower bound on GPU idle time.
    pub queue_empty_ns: u64,
    /// Whether the threads' active time exceeded the window (they ran at once) and was scaled.
    pub concurrent: bool,
    /// Stretches when the job was paused (`waits::pauses`): asleep on a timer for a second or
    /// more with nothing launched. They are left out: `window_ns` is the active time, and
    /// every bucket and share is of it.
    pub pauses: Vec<(u64, u64)>,
    /// The pauses' total, ns.
    pub paused_ns: u64,
    /// The stretch the accounted threads lived in and worked for the job (`span_of`), and
    /// the window's time outside it (before the first of them began, after the last ended):
    /// left out like pauses.
    pub span: (u64, u64),
    /// The window's time outside `span`, ns.
    pub outside_ns: u64,
    /// The job's start-up, left out like pauses where it was found (`detect::startup`): from
    /// the stretch's start to the timeline's mark where the account begins, whose figures
    /// the account's are counted from.
    pub startup: Option<SkippedStartUp>,
    /// Off-CPU time of the accounted threads by what woke them, indexed like
    /// `WaitKind::ALL`, pauses excluded; and of it, outside CUDA calls and not in `D` state:
    /// what the `sleeping` bucket is made of.
    pub waits_ns: [u64; 7],
    /// Of `waits_ns`, outside CUDA calls and not in `D` state, ns.
    pub sleep_by_kind_ns: [u64; 7],
    /// The wakeups behind those figures, most time first.
    pub wakers: Vec<waits::Wake>,
}

/// A start-up left out of the account: from `from_ns` (where the stretch began) to the mark.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SkippedStartUp {
    /// Where the stretch began (monotonic ns).
    pub from_ns: u64,
    /// The timeline's mark where the account begins: its figures are those the account's
    /// are counted from.
    pub mark: Mark,
}

impl SkippedStartUp {
    /// The start-up's length, ns.
    #[must_use]
    pub const fn ns(&self) -> u64 {
        self.mark.at_ns.saturating_sub(self.from_ns)
    }

    /// Kernel and graph launches of `tid` before the account began.
    #[must_use]
    pub fn launches_before(&self, tid: u32) -> u64 {
        self.mark.thread(tid).map_or(0, |t| t.kernels + t.graphs)
    }

    /// Device allocations and frees before the account began.
    #[must_use]
    pub const fn allocs_before(&self) -> (u64, u64) {
        (self.mark.allocs, self.mark.frees)
    }

    /// Bytes copied either way before the account began.
    #[must_use]
    pub const fn bytes_before(&self) -> u64 {
        self.mark.h2d_bytes + self.mark.d2h_bytes
    }

    /// Synchronizes of `tid` before the account began.
    #[must_use]
    pub fn syncs_before(&self, tid: u32) -> u64 {
        self.mark.thread(tid).map_or(0, |t| t.syncs)
    }
}

impl TimeAccount {
    /// The account of one thread over a window of `window_ns`; `sched` is None without
    /// scheduler evidence (then all non-CUDA time is "launching and host"). A thread is
    /// accounted over its own life only: the scheduler's figures cover the part of the
    /// window it lived, and the rest of the window is no time of its (`combine` calls what
    /// no accounted thread covers sleeping).
    #[must_use]
    pub fn of(t: &ThreadStats, sched: Option<&SchedStats>, window_ns: u64) -> Self {
        Self::of_measured(&CudaTimes::of(t), sched, window_ns, None, 0)
    }

    /// As [`Self::of`]; `asleep_outside_cuda_ns` is the thread's interruptible sleep outside
    /// CUDA calls as its wakeups measured it (`evidence::waits`), where they were traced.
    /// Without it, sleep outside CUDA calls is taken as all sleep less the time in CUDA
    /// calls — which assumes those calls sleep while they wait, and they need not: a
    /// synchronize may spin on the CPU, and then every sleep is outside it.
    ///
    /// `trimmed_ns` of the thread's life lie outside its span (`span_of`: a process's start-up
    /// before its first CUDA call, its wind-down after the last). The scheduler's figures
    /// are totals, not timed, so that time is taken off what is left last: host work first
    /// (start-up is mostly imports and building the model, on a CPU), then sleep.
    #[must_use]
    pub fn of_measured(t: &CudaTimes, sched: Option<&SchedStats>, window_ns: u64, asleep_outside_cuda_ns: Option<u64>, trimmed_ns: u64) -> Self {
        let life = sched.map_or(window_ns, |s| s.total_ns().saturating_sub(trimmed_ns).min(window_ns));
        let mut left = life;
        let mut take = |ns: u64| {
            let got = ns.min(left);
            left -= got;
            got
        };
        let waiting_on_gpu_ns = take(t.sync_wait_ns);
        let in_copies_ns = take(t.copy_ns);
        let allocating_ns = take(t.alloc_ns);
        let cuda_ns = t.sync_wait_ns + t.copy_ns + t.alloc_ns;
        let (waiting_for_cpu_ns, io_wait_ns, sleeping_ns) = match sched {
            // A CUDA call's own waiting shows as sleep or blocked time too; only what is left
            // after the CUDA buckets counts.
            Some(s) => {
                let by_subtraction = s.sleep_ns.saturating_sub(cuda_ns);
                let outside = asleep_outside_cuda_ns.map_or(by_subtraction, |m| m.max(by_subtraction).min(s.sleep_ns));
                (take(s.runqueue_ns), take(s.blocked_ns), take(outside))
            }
            None => (0, 0, 0),
        };
        let pageable_staging_ns = t.pageable_copy_cost_ns.min(in_copies_ns);
        Self {
            window_ns,
            threads: Vec::new(),
            waiting_on_gpu_ns,
            in_copies_ns,
            allocating_ns,
            waiting_for_cpu_ns,
            io_wait_ns,
            sleeping_ns,
            launching_and_host_ns: left,
            copy_transfer_waits_ns: t.copy_wait_transfer_ns.min(waiting_on_gpu_ns),
            pageable_staging_ns,
            sync_copy_transfer_ns: t.sync_copy_cost_ns.min(in_copies_ns - pageable_staging_ns),
            host_while_queue_empty_ns: 0,
            queue_empty_ns: t.queue_idle_ns.min(window_ns),
            concurrent: false,
            pauses: Vec::new(),
            paused_ns: 0,
            span: (0, window_ns),
            outside_ns: 0,
            startup: None,
            waits_ns: [0; 7],
            sleep_by_kind_ns: [0; 7],
            wakers: Vec::new(),
        }
    }

    /// The job's account over the window `[start_ns, end_ns]`: the main thread and the
    /// threads of its process on its critical path (module docs), each over its own span.
    /// None when no thread launched kernels.
    #[must_use]
    pub fn critical_path(ev: &Evidence, start_ns: u64, end_ns: u64) -> Option<Self> {
        Self::critical_path_since(ev, start_ns, end_ns, None)
    }

    /// As [`Self::critical_path`], beginning at `since` (a mark of `ev.timeline` inside the
    /// stretch: the end of the job's start-up) rather than where the stretch begins: every
    /// thread's scheduler and CUDA figures are counted from the mark's, and the time before
    /// it is left out like a pause (`startup`).
    #[must_use]
    pub fn critical_path_since(ev: &Evidence, start_ns: u64, end_ns: u64, since: Option<&Mark>) -> Option<Self> {
        Self::around(ev, ev.main_thread(), start_ns, end_ns, since)
    }

    /// As [`Self::critical_path`], for process `pid` alone: one rank of a multi-process job,
    /// its own main thread and the threads of its critical path.
    #[must_use]
    pub fn critical_path_of(ev: &Evidence, pid: u32, start_ns: u64, end_ns: u64) -> Option<Self> {
        Self::around(ev, ev.main_thread_of(pid), start_ns, end_ns, None)
    }

    /// The account around the main thread `main` (module docs).
    fn around(ev: &Evidence, main: Option<(u32, &ThreadStats)>, start_ns: u64, end_ns: u64, since: Option<&Mark>) -> Option<Self> {
        let window_ns = end_ns.saturating_sub(start_ns);
        let launches = |t: &ThreadStats| t.kernel_launches() + t.graph_launches();
        let (main_tid, main) = main.filter(|(_, t)| launches(t) > 0)?;
        let mut threads = vec![main_tid];
        // Without scheduler evidence a thread's sleep is unknown, so threads that take turns
        // cannot be told from threads that run at once: the main thread stands alone.
        if ev.sched.contains_key(&main_tid) {
            let most_syncs = ev.threads.values().filter(|t| t.pid == main.pid).map(|t| t.syncs).max().unwrap_or(0);
            let share = |n: u64, of: u64| of > 0 && n as f64 >= CRITICAL_PATH_SHARE * of as f64;
            threads.extend(ev.threads.iter().filter_map(|(&tid, t)| {
                let joins = tid != main_tid
                    && t.pid == main.pid
                    && ev.sched.contains_key(&tid)
                    && launches(t) > 0
                    && (share(launches(t), launches(main)) || share(t.syncs, most_syncs));
                joins.then_some(tid)
            }));
        }
        // Pauses leave the account: each thread's share of them comes off its sleep, and the
        // window is the active time.
        let kind_of = |l: &waits::LongSleep| {
            ev.wakes.iter().find(|w| w.matches(l.tid, l.waker_pid, l.stack_id, l.in_cuda)).map_or(WaitKind::Other, |w| w.kind)
        };
        // Each thread over its own span; the account over the stretch they cover together
        // (threads that take turns live through one another's spans: the first start to
        // the last end stands for the union). The window's rest is no time of the job's.
        let spans: Vec<(u64, u64)> = threads.iter().map(|tid| span_of(ev, *tid, &ev.threads[tid], start_ns, end_ns)).collect();
        let whole = (
            spans.iter().map(|s| s.0).min().unwrap_or(start_ns),
            spans.iter().map(|s| s.1).max().unwrap_or(end_ns),
        );
        // A start-up is left out only where the mark lies inside the stretch.
        let since = since.filter(|m| m.at_ns > whole.0 && m.at_ns < whole.1);
        let begin = since.map_or(0, |m| m.at_ns);
        let spans: Vec<(u64, u64)> = spans.iter().map(|&(a, b)| (a.max(begin), b.max(a.max(begin)))).collect();
        let span = (whole.0.max(begin), whole.1);
        let span_ns = span.1.saturating_sub(span.0);
        let all_pauses = waits::pauses(&ev.long_sleeps, main.pid, &threads, |t| ev.births.get(&t).copied(), kind_of);
        let pauses = waits::clip(&all_pauses, span);
        // The wakeups behind the sleep split are totals over the whole stretch, start-up
        // included: so are the pauses taken off their timer's share.
        let paused_in_whole_ns = waits::clip(&all_pauses, whole).iter().map(|(a, b)| b - a).sum::<u64>();
        let paused_ns = pauses.iter().map(|(a, b)| b - a).sum::<u64>().min(span_ns);
        let active_ns = span_ns - paused_ns;
        let parts: Vec<Self> = threads
            .iter()
            .zip(&spans)
            .map(|(tid, own)| {
                let mine: Vec<(u64, u64)> = ev.long_sleeps.iter().filter(|l| l.tid == *tid).map(|l| (l.start_ns, l.end_ns)).collect();
                let overlap = waits::overlap_ns(&mine, &pauses);
                let marked = since.and_then(|m| m.thread(*tid));
                let sched = ev.sched.get(tid).map(|s| {
                    let s = marked.and_then(|m| m.sched.as_ref()).map_or_else(|| s.clone(), |before| s.since(before));
                    SchedStats { sleep_ns: s.sleep_ns.saturating_sub(overlap), ..s }
                });
                // The part of the thread's life in the window that lies outside its span. A
                // thread the mark did not hold (its first CUDA call came later) has its
                // figures from its whole life: its life before the mark is trimmed off.
                let counted_from = if marked.is_some_and(|m| m.sched.is_some()) { start_ns.max(begin) } else { start_ns };
                let lived = span_of_life(ev, *tid, counted_from, end_ns);
                let trimmed = (lived.1.saturating_sub(lived.0)).saturating_sub(own.1.saturating_sub(own.0));
                let woken: Vec<&waits::Wake> = ev.wakes.iter().filter(|w| w.tid == *tid).collect();
                // The wakeups are totals over the whole stretch: with a start-up left out,
                // the sleep outside CUDA calls is the scheduler's less the CUDA calls'.
                let outside = (!woken.is_empty() && since.is_none())
                    .then(|| woken.iter().filter(|w| !w.in_cuda).map(|w| w.ns.saturating_sub(w.blocked_ns)).sum::<u64>().saturating_sub(overlap));
                let cuda = CudaTimes::of(&ev.threads[tid]);
                let cuda = marked.map_or(cuda, |m| cuda.since(&m.cuda));
                Self::of_measured(&cuda, sched.as_ref(), active_ns, outside, trimmed)
            })
            .collect();
        let mut a = Self::combine(&parts, active_ns);
        a.threads = threads;
        a.waits(ev, if since.is_some() { paused_in_whole_ns } else { paused_ns });
        a.pauses = pauses;
        a.paused_ns = paused_ns;
        a.span = span;
        a.outside_ns = window_ns.saturating_sub(whole.1.saturating_sub(whole.0));
        a.startup = since.map(|m| SkippedStartUp { from_ns: whole.0, mark: m.clone() });
        Some(a)
    }

    /// Split the accounted threads' off-CPU time by what woke them; the pauses' time comes
    /// off the timer's share. The `sleeping` bucket's split leaves out hand-offs (`handoff`):
    /// a spell in which every thread of the path sleeps ends when the first of them wakes,
    /// and the others' waits for it say nothing of why.
    fn waits(&mut self, ev: &Evidence, paused_ns: u64) {
        let index = |k: WaitKind| WaitKind::ALL.iter().position(|x| *x == k).unwrap_or(6);
        let mut wakers: Vec<waits::Wake> = ev.wakes.iter().filter(|w| self.threads.contains(&w.tid)).cloned().collect();
        for w in &wakers {
            self.waits_ns[index(w.kind)] += w.ns;
            if !w.in_cuda && !self.handoff(w) {
                self.sleep_by_kind_ns[index(w.kind)] += w.ns.saturating_sub(w.blocked_ns);
            }
        }
        let timer = index(WaitKind::Timer);
        self.waits_ns[timer] = self.waits_ns[timer].saturating_sub(paused_ns);
        self.sleep_by_kind_ns[timer] = self.sleep_by_kind_ns[timer].saturating_sub(paused_ns);
        wakers.sort_by_key(|w| std::cmp::Reverse(w.ns));
        self.wakers = wakers;
    }

    /// Whether `w` is a hand-off inside the critical path: a thread of the path woken by
    /// another thread of the path (PyTorch's autograd thread woken by the Python thread that
    /// called `backward()`). While the waker ran, the path was not idle; while it slept too,
    /// what woke it is the idle's cause, and is counted where it woke it. (The waker is the
    /// one of the first wakeup of `w`'s kind, `Wake::waker_tid`.)
    #[must_use]
    pub fn handoff(&self, w: &waits::Wake) -> bool {
        w.waker_tid != w.tid && w.waker_tid != 0 && self.threads.contains(&w.waker_tid)
    }

    /// Of the `sleeping` bucket, the share woken by each kind (None without waker evidence).
    #[must_use]
    pub fn sleep_split(&self) -> Option<[f64; 7]> {
        let total: u64 = self.sleep_by_kind_ns.iter().sum();
        (total > 0).then(|| self.sleep_by_kind_ns.map(|ns| ns as f64 / total as f64))
    }

    /// Add up the active buckets of `parts`; the window's rest is sleeping. Scaled down alike
    /// where they exceed the window.
    fn combine(parts: &[Self], window_ns: u64) -> Self {
        let sum = |f: fn(&Self) -> u64| parts.iter().map(f).sum::<u64>();
        let active = sum(Self::active_ns);
        let concurrent = active > window_ns;
        let scale = |ns: u64| if concurrent { (ns as f64 * window_ns as f64 / active as f64) as u64 } else { ns };
        let mut a = Self {
            window_ns,
            threads: Vec::new(),
            waiting_on_gpu_ns: scale(sum(|p| p.waiting_on_gpu_ns)),
            in_copies_ns: scale(sum(|p| p.in_copies_ns)),
            allocating_ns: scale(sum(|p| p.allocating_ns)),
            waiting_for_cpu_ns: scale(sum(|p| p.waiting_for_cpu_ns)),
            io_wait_ns: scale(sum(|p| p.io_wait_ns)),
            sleeping_ns: 0,
            launching_and_host_ns: scale(sum(|p| p.launching_and_host_ns)),
            copy_transfer_waits_ns: scale(sum(|p| p.copy_transfer_waits_ns)),
            pageable_staging_ns: scale(sum(|p| p.pageable_staging_ns)),
            sync_copy_transfer_ns: scale(sum(|p| p.sync_copy_transfer_ns)),
            host_while_queue_empty_ns: 0,
            pauses: Vec::new(),
            paused_ns: 0,
            span: (0, window_ns),
            outside_ns: 0,
            startup: None,
            waits_ns: [0; 7],
            sleep_by_kind_ns: [0; 7],
            wakers: Vec::new(),
            // Threads that take turns empty the queue at different times: their empty spells
            // add up. Threads running at once share one queue: one thread's empty spell may
            // be another's busy one, so only the longest counts.
            queue_empty_ns: if concurrent {
                parts.iter().map(|p| p.queue_empty_ns).max().unwrap_or(0)
            } else {
                sum(|p| p.queue_empty_ns).min(window_ns)
            },
            concurrent,
        };
        a.sleeping_ns = window_ns.saturating_sub(a.active_ns());
        // The queue's empty spells are host time between a sync and the next launch. Other
        // buckets in those spells (staging the next batch, waiting for input or a CPU) have
        // their own diagnoses; only host work in them is host-sync's. The spells are not timed
        // against the buckets, so the host's share of them is taken to be its share of the
        // time they can hold: everything but GPU waits. (Assuming every other stall fell inside
        // the spells instead let a little run-queue noise erase the finding on a busy machine.)
        // Copy calls count only for their own transfer: the rest of their time they waited for
        // queued GPU work, so the queue was not empty then (a pageable `.item()` waits for the
        // step inside the copy call).
        let others =
            a.pageable_staging_ns + a.sync_copy_transfer_ns + a.allocating_ns + a.waiting_for_cpu_ns + a.io_wait_ns + a.sleeping_ns;
        let host = a.launching_and_host_ns;
        a.host_while_queue_empty_ns =
            if host == 0 { 0 } else { ((a.queue_empty_ns as f64 * host as f64 / (host + others) as f64) as u64).min(host) };
        a
    }

    /// Device allocations and frees in the account's time: from the start-up's end where
    /// one was left out.
    #[must_use]
    pub fn allocs_in(&self, ev: &Evidence) -> (u64, u64) {
        let (count, frees) = self.startup.as_ref().map_or((0, 0), SkippedStartUp::allocs_before);
        (ev.allocs.count.saturating_sub(count), ev.allocs.frees.saturating_sub(frees))
    }

    /// Bytes copied either way in the account's time.
    #[must_use]
    pub fn bytes_copied_in(&self, ev: &Evidence) -> u64 {
        (ev.copies.h2d.bytes + ev.copies.d2h.bytes).saturating_sub(self.startup.as_ref().map_or(0, SkippedStartUp::bytes_before))
    }

    /// The whole window: the active time, the pauses, the start-up and the time outside
    /// the stretch.
    #[must_use]
    pub fn whole_ns(&self) -> u64 {
        self.window_ns + self.paused_ns + self.outside_ns + self.startup.as_ref().map_or(0, SkippedStartUp::ns)
    }

    fn active_ns(&self) -> u64 {
        self.waiting_on_gpu_ns
            + self.in_copies_ns
            + self.allocating_ns
            + self.waiting_for_cpu_ns
            + self.io_wait_ns
            + self.launching_and_host_ns
    }

    /// The buckets in report order, with their names.
    #[must_use]
    pub fn buckets(&self) -> [(TimeBucket, u64); 7] {
        [
            (TimeBucket::LaunchingAndHost, self.launching_and_host_ns),
            (TimeBucket::WaitingOnGpu, self.waiting_on_gpu_ns),
            (TimeBucket::InCopies, self.in_copies_ns),
            (TimeBucket::Allocating, self.allocating_ns),
            (TimeBucket::WaitingForCpu, self.waiting_for_cpu_ns),
            (TimeBucket::IoWait, self.io_wait_ns),
            (TimeBucket::Sleeping, self.sleeping_ns),
        ]
    }

    /// The parts of buckets, with their names and the bucket each lies in.
    #[must_use]
    pub fn parts(&self) -> [(&'static str, TimeBucket, u64); 4] {
        [
            ("host_while_queue_empty", TimeBucket::LaunchingAndHost, self.host_while_queue_empty_ns),
            ("copy_transfer_waits", TimeBucket::WaitingOnGpu, self.copy_transfer_waits_ns),
            ("pageable_staging", TimeBucket::InCopies, self.pageable_staging_ns),
            ("sync_copy_transfer", TimeBucket::InCopies, self.sync_copy_transfer_ns),
        ]
    }

    /// A share of the window.
    #[must_use]
    pub fn fraction(&self, ns: u64) -> f64 {
        if self.window_ns == 0 {
            0.0
        } else {
            (ns as f64 / self.window_ns as f64).clamp(0.0, 1.0)
        }
    }
}

/// Where thread `tid` lived in the window: from its creation (or the window's start) to its
/// exit (or the window's end).
fn span_of_life(ev: &Evidence, tid: u32, start_ns: u64, end_ns: u64) -> (u64, u64) {
    let clamp = |ns: u64| ns.clamp(start_ns, end_ns);
    let from = ev.births.get(&tid).map_or(start_ns, |&b| clamp(b));
    let to = ev.deaths.get(&tid).map_or(end_ns, |&d| clamp(d));
    (from, to.max(from))
}

/// The stretch a launching thread is accounted over: its life in the window, less its
/// process's start-up and wind-down where the trace saw them. A process started in the
/// window (`gputrace run`) imports and builds its model on the main thread before its first
/// CUDA call, and a main thread that exits in the window may write results after its last:
/// neither is the training loop, and charged to it they read as host work or sleep that no
/// fix of the loop gives back. A thread created in the window begins at its creation.
fn span_of(ev: &Evidence, tid: u32, t: &ThreadStats, start_ns: u64, end_ns: u64) -> (u64, u64) {
    let (mut from, mut to) = span_of_life(ev, tid, start_ns, end_ns);
    let main_thread = tid == t.pid;
    let started_here = ev.processes.get(&t.pid).is_some_and(|p| p.execs > 0) || ev.births.contains_key(&t.pid);
    if main_thread && started_here && t.first_ns > 0 {
        from = from.max(t.first_ns.clamp(start_ns, end_ns));
    }
    if main_thread && ev.deaths.contains_key(&tid) && t.last_ns > 0 {
        to = to.min(t.last_ns.clamp(start_ns, end_ns));
    }
    (from, to.max(from))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(sync: u64, copy: u64, alloc: u64) -> ThreadStats {
        let mut t = ThreadStats::new(1);
        t.sync_wait_ns = sync;
        t.copy_ns = copy;
        t.alloc_ns = alloc;
        t
    }

    #[test]
    fn the_buckets_partition_the_window() {
        let s = SchedStats { pid: 1, on_cpu_ns: 500, runqueue_ns: 100, blocked_ns: 50, sleep_ns: 350, ..SchedStats::default() };
        let a = TimeAccount::of(&thread(200, 100, 0), Some(&s), 1000);
        assert_eq!(a.waiting_on_gpu_ns, 200);
        assert_eq!(a.in_copies_ns, 100);
        assert_eq!(a.waiting_for_cpu_ns, 100);
        assert_eq!(a.io_wait_ns, 50);
        assert_eq!(a.sleeping_ns, 50, "350 asleep of which 300 inside CUDA calls");
        assert_eq!(a.launching_and_host_ns, 500);
        assert_eq!(a.buckets().iter().map(|(_, ns)| ns).sum::<u64>(), 1000);
    }

    #[test]
    fn overlapping_sources_are_trimmed_to_the_window() {
        let s = SchedStats { pid: 1, runqueue_ns: 900, blocked_ns: 900, sleep_ns: 900, ..SchedStats::default() };
        let a = TimeAccount::of(&thread(600, 300, 300), Some(&s), 1000);
        assert_eq!(a.buckets().iter().map(|(_, ns)| ns).sum::<u64>(), 1000);
        assert_eq!((a.waiting_on_gpu_ns, a.in_copies_ns, a.allocating_ns, a.launching_and_host_ns), (600, 300, 100, 0));
    }

    #[test]
    fn without_scheduler_evidence_the_rest_is_host_work() {
        let a = TimeAccount::of(&thread(100, 0, 0), None, 1000);
        assert_eq!((a.waiting_on_gpu_ns, a.launching_and_host_ns), (100, 900));
    }

    #[test]
    fn a_thread_is_accounted_over_its_own_life() {
        let s = SchedStats { pid: 1, on_cpu_ns: 400, ..SchedStats::default() };
        let a = TimeAccount::of(&thread(0, 0, 0), Some(&s), 1000);
        assert_eq!((a.launching_and_host_ns, a.sleeping_ns), (400, 0), "no sleep before it was born or after it exited");
    }

    #[test]
    fn time_trimmed_off_a_thread_comes_from_host_work_first_then_sleep() {
        let s = SchedStats { pid: 1, on_cpu_ns: 300, sleep_ns: 500, ..SchedStats::default() };
        let a = TimeAccount::of_measured(&CudaTimes::of(&thread(100, 0, 0)), Some(&s), 1000, Some(500), 250);
        assert_eq!((a.waiting_on_gpu_ns, a.sleeping_ns, a.launching_and_host_ns), (100, 450, 0));
    }

    fn combined(parts: &[TimeAccount]) -> TimeAccount {
        TimeAccount::combine(parts, 1000)
    }

    #[test]
    fn threads_taking_turns_add_up_and_the_rest_is_sleep() {
        // Python thread 400 on a CPU, autograd's 500: together 900 of 1000 active.
        let sleepy = |on: u64| SchedStats { pid: 1, on_cpu_ns: on, sleep_ns: 1000 - on, ..SchedStats::default() };
        let a = combined(&[
            TimeAccount::of(&thread(0, 0, 0), Some(&sleepy(400)), 1000),
            TimeAccount::of(&thread(0, 0, 0), Some(&sleepy(500)), 1000),
        ]);
        assert_eq!((a.launching_and_host_ns, a.sleeping_ns, a.concurrent), (900, 100, false));
    }

    #[test]
    fn threads_running_at_once_are_scaled_to_the_window() {
        let busy = SchedStats { pid: 1, on_cpu_ns: 800, runqueue_ns: 200, ..SchedStats::default() };
        let a = combined(&[TimeAccount::of(&thread(0, 0, 0), Some(&busy), 1000), TimeAccount::of(&thread(0, 0, 0), Some(&busy), 1000)]);
        assert!(a.concurrent);
        assert_eq!((a.launching_and_host_ns, a.waiting_for_cpu_ns), (800, 200));
        assert_eq!(a.buckets().iter().map(|(_, ns)| ns).sum::<u64>(), 1000);
    }

    #[test]
    fn host_work_gets_its_share_of_the_queue_idle() {
        let s = SchedStats { pid: 1, on_cpu_ns: 700, sleep_ns: 300, ..SchedStats::default() };
        let mut t = thread(0, 0, 0);
        t.queue_idle_ns = 500;
        let a = combined(&[TimeAccount::of(&t, Some(&s), 1000)]);
        assert_eq!(a.queue_empty_ns, 500);
        assert_eq!(a.host_while_queue_empty_ns, 350, "the host's 700 of the 1000 the spells can hold");
    }
}
