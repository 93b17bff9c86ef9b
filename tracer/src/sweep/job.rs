//! Each GPU job's judgement in a sweep (pure; unit-tested): where its launching threads' time
//! went over the last windows, and what that costs the GPU.
//!
//! `attach` builds this from scheduler tracepoints, wakers and stacks; a host-wide sweep has
//! none of them (`probes::Scope::AllCuda`), so the same partition is made from what the
//! kernel keeps for every thread anyway (`sched`) and what the probes time:
//! - inside synchronizing calls and synchronous copies: waiting on the GPU (the call records);
//! - inside asynchronous copies: staging pageable memory (the call records);
//! - on a run queue: waiting for a CPU (`schedstat`);
//! - on a CPU outside those waits: host work, launching included (`schedstat`);
//! - the rest: asleep outside CUDA calls, split by what the threads slept in at the polls.
//!
//! The launching threads take turns on the critical path (PyTorch's Python thread runs the
//! forward pass and waits while the autograd thread runs the backward one), so their busy
//! times add up and the job slept when none of them was busy, as in `attach`'s account
//! (`evidence::time_account`). The rules are `attach`'s, with its thresholds (`detect`), on
//! this coarser evidence: the sweep says which bottleneck and how much of the time it takes;
//! `gputrace attach --pid N` adds the call sites, the wakers and the predicted speed-up.

use super::{
    model::{JobDiagnosis, JobTime, Judgement, SleepSplit},
    sched::{SchedStat, Wait},
};
use crate::detect::{account as gpu, thresholds as rules, LOW, MEDIUM};

/// How much recent time a judgement covers: the windows of the last 30 s at least, so that
/// `top`'s one-second windows are judged over enough steps and polls, and one window where
/// windows are longer (`serve`'s 15 s).
pub const ROLLING_NS: u64 = 30_000_000_000;

/// Polls needed before they say how long a job slept (`judge`): 2 s of them.
const MIN_POLLS: u32 = 10;
/// The share of polls that must find new CUDA calls for a sleeping job to be a loop waiting
/// for something rather than a pause (`Facts::looping`).
const LOOPING: f64 = 0.5;

/// Polls of a job's launching threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitSamples {
    /// Polls at which one of them was on a CPU, runnable, or inside a probed CUDA call.
    pub busy: u32,
    /// Polls at which all of them slept outside CUDA calls, by what they waited for, in
    /// `Wait::ALL` order.
    pub asleep: [u32; 5],
}

impl WaitSamples {
    /// One poll: each launching thread's wait (None: busy).
    pub fn add(&mut self, threads: &[Option<Wait>]) {
        match threads.iter().copied().collect::<Option<Vec<Wait>>>().and_then(|w| w.into_iter().min()) {
            Some(wait) => self.asleep[Wait::ALL.iter().position(|w| *w == wait).unwrap_or(4)] += 1,
            None => self.busy += 1,
        }
    }
}

/// One launching thread over a window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadWindow {
    pub sched: SchedStat,
    /// Wall time inside synchronizing calls and synchronous copies.
    pub gpu_wait_ns: u64,
    /// Wall time inside asynchronous copies.
    pub copy_ns: u64,
}

/// One job's figures over a window, or over several added up.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobWindow {
    pub span_ns: u64,
    /// Launching threads (most seen in one window).
    pub threads: usize,
    pub host_ns: u64,
    pub runqueue_ns: u64,
    pub gpu_wait_ns: u64,
    pub copy_ns: u64,
    pub samples: WaitSamples,
    /// Polls of the window, and those at which the job had called CUDA since the one before.
    pub polls: u32,
    pub polls_calling: u32,
    pub launches: u64,
    pub syncs: u64,
    /// Its loader workers (most seen in one window), their on-CPU time added up, and their
    /// run-queue time added up.
    pub workers: usize,
    pub worker_span_ns: u64,
    pub workers_on_cpu_ns: u64,
    pub workers_runqueue_ns: u64,
    /// Its children looked at over the polls, and those found in uninterruptible sleep.
    pub worker_polls: u32,
    pub worker_polls_disk: u32,
    /// NVML over the windows that had it: utilization and SM activity (0..1) times the span,
    /// and those spans.
    pub gpu_util_ns: f64,
    pub gpu_util_span_ns: u64,
    pub sm_ns: f64,
    pub sm_span_ns: u64,
}

impl JobWindow {
    /// A window of `span_ns` from its launching threads. Each thread's wait inside calls is
    /// off the CPU where it can be (a blocking sync) and comes out of its CPU time where it
    /// cannot (a spinning one); its time inside asynchronous copies comes out of its CPU time
    /// first (staging is a memcpy). The threads' busy times add up, capped at the span.
    #[must_use]
    pub fn new(span_ns: u64, threads: &[ThreadWindow]) -> Self {
        let (mut host, mut runqueue, mut wait, mut copies) = (0u64, 0u64, 0u64, 0u64);
        for t in threads {
            let on_cpu = t.sched.on_cpu_ns.min(span_ns);
            let runq = t.sched.runqueue_ns.min(span_ns - on_cpu);
            let off_cpu = span_ns - on_cpu - runq;
            let in_waits = t.gpu_wait_ns.min(span_ns);
            let in_copies = t.copy_ns.min(span_ns - in_waits);
            // A wait is off the CPU where it can be; staging a copy is CPU work.
            let wait_on_cpu = in_waits.saturating_sub(off_cpu).min(on_cpu);
            let copy_on_cpu = in_copies.min(on_cpu - wait_on_cpu);
            host += on_cpu - wait_on_cpu - copy_on_cpu;
            runqueue += runq;
            wait += in_waits;
            copies += in_copies;
        }
        let busy = host + runqueue + wait + copies;
        if busy > span_ns {
            // Threads that did not take turns: shares of the span, in proportion.
            let scale = |v: u64| (v as f64 * span_ns as f64 / busy as f64) as u64;
            (host, runqueue, copies) = (scale(host), scale(runqueue), scale(copies));
            wait = span_ns - host - runqueue - copies;
        }
        Self { span_ns, threads: threads.len(), host_ns: host, runqueue_ns: runqueue, gpu_wait_ns: wait, copy_ns: copies, ..Self::default() }
    }

    /// Fold a later window in.
    pub fn add(&mut self, o: &Self) {
        self.span_ns += o.span_ns;
        self.threads = self.threads.max(o.threads);
        self.host_ns += o.host_ns;
        self.runqueue_ns += o.runqueue_ns;
        self.gpu_wait_ns += o.gpu_wait_ns;
        self.copy_ns += o.copy_ns;
        self.samples.busy += o.samples.busy;
        for (a, b) in self.samples.asleep.iter_mut().zip(o.samples.asleep) {
            *a += b;
        }
        self.polls += o.polls;
        self.polls_calling += o.polls_calling;
        self.launches += o.launches;
        self.syncs += o.syncs;
        self.workers = self.workers.max(o.workers);
        self.worker_span_ns += o.worker_span_ns;
        self.workers_on_cpu_ns += o.workers_on_cpu_ns;
        self.workers_runqueue_ns += o.workers_runqueue_ns;
        self.worker_polls += o.worker_polls;
        self.worker_polls_disk += o.worker_polls_disk;
        self.gpu_util_ns += o.gpu_util_ns;
        self.gpu_util_span_ns += o.gpu_util_span_ns;
        self.sm_ns += o.sm_ns;
        self.sm_span_ns += o.sm_span_ns;
    }

    /// NVML's figures for the window (0..1), where it had them.
    pub fn set_gpu(&mut self, utilization: Option<f64>, sm_activity: Option<f64>) {
        if let Some(u) = utilization {
            self.gpu_util_ns += u * self.span_ns as f64;
            self.gpu_util_span_ns += self.span_ns;
        }
        if let Some(s) = sm_activity {
            self.sm_ns += s * self.span_ns as f64;
            self.sm_span_ns += self.span_ns;
        }
    }
}

fn pct(share: f64) -> String {
    format!("{:.0} %", share * 100.0)
}

/// What the rules read, from a job's windows added up.
struct Facts {
    time: JobTime,
    /// What its threads slept in (all "other" where no poll saw them asleep).
    sleep: SleepSplit,
    /// NVML: whether the GPU was busy, and the share of time a kernel ran.
    busy_gpu: Option<bool>,
    time_busy: Option<f64>,
    launches_per_s: f64,
    syncs_per_s: f64,
    workers: usize,
    workers_on_cpu: f64,
    workers_runqueue: f64,
    /// The share of its children's polls that found them on the disk.
    workers_blocked: f64,
    /// The share of the polls at which it had called CUDA since the one before; None with
    /// too few polls to say.
    calling: Option<f64>,
}

impl Facts {
    /// Nothing is gained beyond the time the GPU had nothing to run.
    fn idle_cap(&self) -> f64 {
        self.time_busy.map_or(1.0, |b| (1.0 - b).max(0.0))
    }

    /// Its CUDA calls ran all through the time judged (a loop), not in a burst followed by a
    /// pause: a notebook that ran a cell and now waits for its user, or a job that loaded a
    /// model and waits for requests, sleeps outside CUDA calls as a starved loop does.
    fn looping(&self) -> bool {
        self.calling.is_none_or(|c| c >= LOOPING)
    }

    /// The GPU does not bound the job: NVML says it was not busy, or without NVML the host
    /// waited for it less than half the time.
    fn gpu_not_bounding(&self) -> bool {
        self.busy_gpu.map_or(self.time.waiting_on_gpu < rules::HOST_WAIT_HIGH, |busy| !busy)
    }
}

/// The judgement of a job's recent windows added up; None if they span no time or it had no
/// launching thread.
#[must_use]
pub fn judge(w: &JobWindow) -> Option<Judgement> {
    if w.span_ns == 0 || w.threads == 0 {
        return None;
    }
    let span = w.span_ns as f64;
    let seconds = span / 1e9;
    let share = |ns: u64| ns as f64 / span;
    let (mut host, waiting_on_gpu, in_copies, waiting_for_cpu) = (share(w.host_ns), share(w.gpu_wait_ns), share(w.copy_ns), share(w.runqueue_ns));
    let mut sleeping = (1.0 - host - waiting_on_gpu - in_copies - waiting_for_cpu).max(0.0);
    let asleep: u32 = w.samples.asleep.iter().sum();
    // The partition took waits inside calls to be off the CPU where they could be. A sync that
    // spins while the thread sleeps elsewhere (`time.sleep` after it) made that sleep look
    // like the wait's, and the spin like host work: the polls, which saw the threads asleep
    // outside calls, say how long they slept (enough polls only: 2 s of them).
    let polls = asleep + w.samples.busy;
    if polls >= MIN_POLLS {
        let sampled = f64::from(asleep) / f64::from(polls);
        let moved = (sampled - sleeping).clamp(0.0, host);
        host -= moved;
        sleeping += moved;
    }
    let split = (asleep > 0).then(|| {
        let of = |wait: Wait| f64::from(w.samples.asleep[Wait::ALL.iter().position(|x| *x == wait).unwrap_or(4)]) / f64::from(asleep);
        SleepSplit { disk: of(Wait::Disk), input: of(Wait::Input), timer: of(Wait::Timer), thread: of(Wait::Thread), other: of(Wait::Other) }
    });
    let utilization = (w.gpu_util_span_ns > 0).then(|| w.gpu_util_ns / w.gpu_util_span_ns as f64);
    let sm_activity = (w.sm_span_ns > 0).then(|| w.sm_ns / w.sm_span_ns as f64);
    let worker_share = |ns: u64| if w.worker_span_ns > 0 { ns as f64 / w.worker_span_ns as f64 } else { 0.0 };
    let facts = Facts {
        time: JobTime { host, waiting_on_gpu, in_copies, waiting_for_cpu, sleeping },
        // Without samples of its sleep (a window shorter than a poll), what it slept in is unknown.
        sleep: split.clone().unwrap_or(SleepSplit { disk: 0.0, input: 0.0, timer: 0.0, thread: 0.0, other: 1.0 }),
        busy_gpu: match (sm_activity, utilization) {
            (Some(sm), _) => Some(sm >= gpu::SM_BUSY),
            (None, Some(u)) => Some(u >= gpu::UTIL_BUSY),
            (None, None) => None,
        },
        time_busy: utilization.or(sm_activity),
        launches_per_s: w.launches as f64 / seconds,
        syncs_per_s: w.syncs as f64 / seconds,
        workers: w.workers,
        workers_on_cpu: worker_share(w.workers_on_cpu_ns),
        workers_runqueue: worker_share(w.workers_runqueue_ns),
        workers_blocked: if w.worker_polls > 0 { f64::from(w.worker_polls_disk) / f64::from(w.worker_polls) } else { 0.0 },
        calling: (w.polls >= MIN_POLLS).then(|| f64::from(w.polls_calling) / f64::from(w.polls)),
    };
    let mut found = diagnoses(&facts);
    found.retain(|d| d.ratio >= LOW);
    found.sort_by(|a, b| b.ratio.total_cmp(&a.ratio));
    let verdict = match found.first() {
        Some(d) if d.ratio >= MEDIUM => d.id.clone(),
        _ if facts.busy_gpu == Some(true) || waiting_on_gpu >= rules::HOST_WAIT_HIGH => "gpu-bound".to_owned(),
        _ if !facts.looping() && facts.time.sleeping >= 0.5 => "paused".to_owned(),
        _ => "no-bottleneck-found".to_owned(),
    };
    Some(Judgement {
        window_s: seconds,
        verdict,
        time: facts.time,
        sleep: split,
        launches_per_s: facts.launches_per_s,
        syncs_per_s: facts.syncs_per_s,
        threads: w.threads,
        workers: w.workers,
        workers_on_cpu: facts.workers_on_cpu,
        workers_on_disk: facts.workers_blocked,
        gpu_utilization: utilization,
        sm_activity,
        diagnoses: found,
    })
}

/// Every rule that holds, `attach`'s (their thresholds: `detect::thresholds`) on this evidence.
fn diagnoses(f: &Facts) -> Vec<JobDiagnosis> {
    let t = &f.time;
    let s = &f.sleep;
    let gpu_waiting = f.time_busy.is_none_or(|g| g < rules::GPU_WAITING);
    let mut found: Vec<JobDiagnosis> = Vec::new();
    let mut add = |id: &str, ratio: f64, summary: String, fix: &str| {
        found.push(JobDiagnosis { id: id.to_owned(), ratio, summary, fix: fix.to_owned() });
    };
    if t.waiting_for_cpu >= rules::RUNQUEUE_STARVED {
        add("cpu-starved", t.waiting_for_cpu, format!("its launching threads wait for a CPU {} of the time", pct(t.waiting_for_cpu)), "give the job its CPUs: stop or move competing processes, raise the cgroup/container CPU limit, keep workers and threads within the cores you have");
    }
    let disk = t.sleeping * s.disk;
    if disk >= rules::BLOCKED_STALL {
        add("io-stall", disk, format!("its launching threads wait on the disk {} of the time", pct(disk)), "read and write in DataLoader workers or a background thread, not the training thread; prefetch; faster or local storage");
    }
    let waiting_input = t.sleeping * (s.input + s.thread + s.other);
    // A job that waits for its loader has workers, or calls CUDA all through the window.
    if waiting_input >= rules::SLEEP_STARVED && gpu_waiting && (f.workers > 0 || f.looping()) {
        let workers = if f.workers == 1 { "its data-loading worker is".to_owned() } else { format!("its {} data-loading workers are", f.workers) };
        let cause = if f.workers > 0 && f.workers_blocked >= rules::WORKER_BLOCKED {
            format!("{workers} waiting on the disk {} of the time", pct(f.workers_blocked))
        } else if f.workers > 0 && f.workers_on_cpu >= rules::WORKER_BUSY {
            format!("{workers} on a CPU {} of the time and cannot keep up", pct(f.workers_on_cpu))
        } else if f.workers > 0 && f.workers_runqueue >= rules::RUNQUEUE_STARVED {
            format!("{workers} waiting for a CPU")
        } else if s.input >= s.thread.max(s.other) {
            "it waits on a pipe or socket (a DataLoader worker or the network hands it input)".to_owned()
        } else if s.thread >= s.other {
            "it waits on another thread of the job (a queue or a lock)".to_owned()
        } else {
            "it sleeps outside CUDA calls".to_owned()
        };
        let ratio = waiting_input.min(f.idle_cap());
        add("input-starved", ratio, format!("the GPU waits for input {}: {cause}", pct(ratio)), "more DataLoader workers (up to the free cores), prefetch_factor, persistent_workers=True, pin_memory=True; cheaper decoding");
    }
    let timer = t.sleeping * s.timer;
    // Waiting for the GPU at every step, then working or pausing while it idles: overlapping
    // the two saves the shorter. The host work pays for it first, then the pause.
    let overlap = if f.syncs_per_s >= rules::SYNCS_PER_S && t.waiting_on_gpu >= rules::HOST_WAIT_NONE && f.gpu_not_bounding() {
        t.waiting_on_gpu.min(t.host + timer).min(f.idle_cap())
    } else {
        0.0
    };
    let timer_left = timer - (overlap - t.host).clamp(0.0, timer);
    if timer_left >= rules::SLEEP_STARVED && gpu_waiting && f.looping() {
        let ratio = timer_left.min(f.idle_cap());
        add("host-sleep", ratio, format!("the loop sleeps on a timer {} of the time while the GPU waits", pct(ratio)), "remove the sleep from the loop, or wait on the data itself instead of polling");
    }
    if overlap >= MEDIUM {
        add("host-sync", overlap, format!("it waits for the GPU {:.0} times a second and the GPU idles while it works or pauses between waits: {} to gain", f.syncs_per_s, pct(overlap)), "drop per-step .item(), .cpu() and synchronize calls (keep values on the GPU, read them every N steps); non_blocking copies from pinned memory");
    }
    // An asynchronous copy the host waits in is staged: its memory is not pinned.
    if t.in_copies >= MEDIUM && f.gpu_not_bounding() {
        let ratio = t.in_copies.min(f.idle_cap());
        add("pageable-copy", ratio, format!("its asynchronous copies hold the host {} of the time: host memory that is not pinned is staged first", pct(t.in_copies)), "pin the host buffers: DataLoader(pin_memory=True) or tensor.pin_memory(), then .to(device, non_blocking=True)");
    }
    let host_left = (t.host - overlap).max(0.0);
    if f.launches_per_s >= rules::LAUNCH_BOUND_RATE && t.waiting_on_gpu < rules::HOST_WAIT_LOW && f.busy_gpu != Some(true) && host_left >= MEDIUM {
        let ratio = host_left.min(f.idle_cap());
        add("launch-bound", ratio, format!("it launches {:.0} times a second (kernels and graph replays) and the GPU waits for the launches", f.launches_per_s), "launch fewer, larger kernels: a larger batch, CUDA graphs (torch.compile mode=\"reduce-overhead\"), fused ops");
    } else if f.launches_per_s < rules::LAUNCH_BOUND_RATE && host_left >= MEDIUM {
        let idle = match f.time_busy {
            Some(u) => u < rules::GPU_IDLE_UTIL,
            None => f.syncs_per_s > 0.0 && t.waiting_on_gpu < rules::HOST_WAIT_NONE,
        };
        if idle {
            let ratio = host_left.min(f.idle_cap());
            add("host-bound", ratio, format!("it computes on the CPU {} of the time while the GPU has nothing to do", pct(ratio)), "take the host work off the step: loading and decoding into DataLoader workers, vectorized Python, less frequent logging (py-spy shows where)");
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn thread(on_cpu: f64, runqueue: f64, gpu_wait: f64) -> ThreadWindow {
        let ns = |f: f64| (f * S as f64) as u64;
        ThreadWindow { sched: SchedStat { on_cpu_ns: ns(on_cpu), runqueue_ns: ns(runqueue) }, gpu_wait_ns: ns(gpu_wait), copy_ns: 0 }
    }

    fn window(threads: &[ThreadWindow], launches: u64, syncs: u64, asleep: [u32; 5], gpu: (Option<f64>, Option<f64>)) -> JobWindow {
        let mut w = JobWindow::new(10 * S, threads);
        w.launches = launches;
        w.syncs = syncs;
        w.samples = WaitSamples { busy: 10, asleep };
        w.set_gpu(gpu.0, gpu.1);
        w
    }

    fn ids(j: &Judgement) -> Vec<&str> {
        j.diagnoses.iter().map(|d| d.id.as_str()).collect()
    }

    #[test]
    fn the_shares_partition_the_window_whether_syncs_sleep_or_spin() {
        // A blocking sync: 4 s inside calls, off the CPU; 3 s of host work.
        let w = JobWindow::new(10 * S, &[thread(3.0, 0.5, 4.0)]);
        assert_eq!((w.host_ns, w.runqueue_ns, w.gpu_wait_ns), (3 * S, S / 2, 4 * S));
        // A spinning sync: the 4 s inside calls were on the CPU too (it never left it).
        let w = JobWindow::new(10 * S, &[thread(10.0, 0.0, 4.0)]);
        assert_eq!((w.host_ns, w.gpu_wait_ns), (6 * S, 4 * S));
        // Partly: 3 s off the CPU, all inside calls, so 1 s of the 4 spun.
        let w = JobWindow::new(10 * S, &[thread(7.0, 0.0, 4.0)]);
        assert_eq!((w.host_ns, w.gpu_wait_ns), (6 * S, 4 * S));
        // Two threads taking turns add up; two that overlapped are scaled into the span.
        let w = JobWindow::new(10 * S, &[thread(3.0, 0.0, 0.0), thread(4.0, 0.0, 0.0)]);
        assert_eq!(w.host_ns, 7 * S);
        let w = JobWindow::new(10 * S, &[thread(9.0, 0.0, 0.0), thread(9.0, 0.0, 2.0)]);
        assert_eq!(w.host_ns + w.runqueue_ns + w.gpu_wait_ns, 10 * S);
        let j = judge(&w).expect("judged");
        assert!(j.time.sleeping.abs() < 1e-9, "{j:?}");
    }

    #[test]
    fn a_job_waiting_on_its_loader_is_input_starved_and_says_why() {
        // 1 s of host work, 0.5 s waiting on the GPU, the rest asleep on a pipe; its four
        // workers are on a CPU 90 % of the time; the GPU runs 12 % of the time.
        let mut w = window(&[thread(1.0, 0.0, 0.5)], 2_000, 100, [0, 40, 0, 5, 0], (Some(0.12), Some(0.08)));
        w.workers = 4;
        w.worker_span_ns = 4 * w.span_ns;
        w.workers_on_cpu_ns = (3.6 * w.span_ns as f64) as u64;
        let j = judge(&w).expect("judged");
        assert_eq!(j.verdict, "input-starved", "{j:#?}");
        let d = &j.diagnoses[0];
        assert!((d.ratio - 0.85).abs() < 0.01, "{d:?}");
        assert!(d.summary.contains("4 data-loading workers are on a CPU 90 %"), "{d:?}");
        // Workers found on the disk at most polls wait for it, whatever their CPU.
        w.worker_polls = 40;
        w.worker_polls_disk = 30;
        let j = judge(&w).expect("judged");
        assert!(j.diagnoses[0].summary.contains("workers are waiting on the disk 75 %"), "{j:#?}");
        let split = j.sleep.expect("sampled");
        assert!((split.input - 40.0 / 45.0).abs() < 1e-9);
    }

    #[test]
    fn a_busy_gpu_is_gpu_bound_and_no_host_rule_fires() {
        // The host waits in syncs 80 % of the time; the GPU is busy.
        let j = judge(&window(&[thread(1.5, 0.0, 8.0)], 3_000, 500, [0, 0, 0, 3, 0], (Some(0.97), Some(0.85)))).expect("judged");
        assert_eq!(j.verdict, "gpu-bound", "{j:#?}");
        assert!(j.diagnoses.is_empty(), "{j:#?}");
        // The same waits without NVML: the waits alone say the GPU bounds it.
        let j = judge(&window(&[thread(1.5, 0.0, 8.0)], 3_000, 500, [0; 5], (None, None))).expect("judged");
        assert_eq!(j.verdict, "gpu-bound", "{j:#?}");
    }

    #[test]
    fn many_launches_with_an_idle_gpu_are_launch_bound() {
        let j = judge(&window(&[thread(8.5, 0.0, 0.5), thread(1.0, 0.0, 0.0)], 200_000, 20, [0; 5], (Some(0.3), Some(0.05)))).expect("judged");
        assert_eq!(j.verdict, "launch-bound", "{j:#?}");
        // Capped by the time the GPU had nothing to run.
        assert!((j.diagnoses[0].ratio - 0.7).abs() < 1e-9, "{j:#?}");
    }

    #[test]
    fn a_sync_every_step_with_host_work_between_is_host_sync_and_the_rest_host_bound() {
        // 100 syncs/s; 3 s waiting, 7 s of host work at a low launch rate, GPU 30 % busy.
        let j = judge(&window(&[thread(7.0, 0.0, 3.0)], 4_000, 1_000, [0; 5], (Some(0.3), None))).expect("judged");
        assert_eq!(ids(&j), ["host-bound", "host-sync"], "{j:#?}");
        let ratio = |id: &str| j.diagnoses.iter().find(|d| d.id == id).expect(id).ratio;
        assert!((ratio("host-sync") - 0.3).abs() < 1e-9);
        assert!((ratio("host-bound") - 0.4).abs() < 1e-9, "7 s of host work less the 3 s an overlap hides: {j:#?}");
        assert_eq!(j.verdict, "host-bound");
    }

    #[test]
    fn sleeping_on_a_timer_is_host_sleep_and_a_run_queue_is_cpu_starved() {
        let j = judge(&window(&[thread(1.0, 0.0, 0.5)], 1_000, 100, [0, 0, 30, 2, 0], (Some(0.1), None))).expect("judged");
        assert_eq!(j.verdict, "host-sleep", "{j:#?}");
        assert!(!ids(&j).contains(&"input-starved"), "{j:#?}");
        let j = judge(&window(&[thread(4.0, 4.0, 1.0)], 1_000, 100, [0; 5], (Some(0.2), None))).expect("judged");
        assert_eq!(j.verdict, "cpu-starved", "{j:#?}");
        let j = judge(&window(&[thread(1.0, 0.0, 0.5)], 1_000, 100, [30, 0, 0, 0, 0], (Some(0.1), None))).expect("judged");
        assert_eq!(j.verdict, "io-stall", "{j:#?}");
    }

    #[test]
    fn a_spinning_sync_then_a_sleep_is_a_sync_the_sleep_follows() {
        // On the H200 (`sleepy`, d31): a GEMM step, a sync that spins 5 ms, then time.sleep(5 ms).
        // The thread was on a CPU half the window, all of it inside the sync; the polls saw
        // it asleep on a timer the other half. GPU 51 % busy.
        let w = window(&[thread(5.0, 0.0, 5.0)], 600, 200, [0, 0, 10, 0, 0], (Some(0.51), None));
        let j = judge(&w).expect("judged");
        assert!(j.time.host < 1e-9 && (j.time.sleeping - 0.5).abs() < 1e-9, "the sleep is a sleep, not host work: {j:#?}");
        // Overlapping the sync with the pause saves what the GPU idled: attach's host-sync 0.49.
        assert_eq!(j.verdict, "host-sync", "{j:#?}");
        assert!((j.diagnoses[0].ratio - 0.49).abs() < 1e-9, "{j:#?}");
        assert!(!ids(&j).contains(&"host-bound"), "{j:#?}");
    }

    #[test]
    fn a_burst_of_calls_then_a_wait_is_a_pause_unless_workers_feed_it() {
        // A notebook ran a cell (calls at 3 polls of 20) and waits for its user on a socket.
        let mut w = window(&[thread(0.3, 0.0, 0.1)], 500, 5, [0, 17, 0, 0, 0], (Some(0.02), None));
        (w.polls, w.polls_calling) = (20, 3);
        let j = judge(&w).expect("judged");
        assert_eq!(j.verdict, "paused", "{j:#?}");
        assert!(j.diagnoses.is_empty(), "{j:#?}");
        // The same with loader workers behind it: a starved loop whose batches come seldom.
        w.workers = 2;
        w.worker_span_ns = 2 * w.span_ns;
        w.workers_on_cpu_ns = 2 * w.span_ns;
        assert_eq!(judge(&w).expect("judged").verdict, "input-starved");
        // A loop that sleeps on a timer every step calls at every poll.
        let mut w = window(&[thread(1.0, 0.0, 0.5)], 1_000, 100, [0, 0, 30, 2, 0], (Some(0.1), None));
        (w.polls, w.polls_calling) = (50, 50);
        assert_eq!(judge(&w).expect("judged").verdict, "host-sleep");
    }

    #[test]
    fn asynchronous_copies_the_host_waits_in_are_pageable() {
        // 6 s on the CPU, 4.5 of them inside asynchronous copies (staging is CPU work).
        let mut t = thread(6.0, 0.0, 0.0);
        t.copy_ns = 4_500_000_000;
        let j = judge(&window(&[t], 2_000, 0, [0; 5], (Some(0.25), None))).expect("judged");
        assert_eq!(j.verdict, "pageable-copy", "{j:#?}");
        assert!((j.time.in_copies - 0.45).abs() < 1e-9 && (j.time.host - 0.15).abs() < 1e-9, "{j:#?}");
    }

    #[test]
    fn windows_add_up_and_an_empty_one_is_not_judged() {
        let mut a = window(&[thread(1.0, 0.0, 8.0)], 100, 10, [0; 5], (Some(1.0), None));
        let b = window(&[thread(1.0, 0.0, 0.5)], 100, 10, [0, 80, 0, 0, 0], (Some(0.0), None));
        a.add(&b);
        assert_eq!(a.span_ns, 20 * S);
        let j = judge(&a).expect("judged");
        assert!((j.gpu_utilization.expect("nvml") - 0.5).abs() < 1e-9);
        assert!((j.time.waiting_on_gpu - 0.425).abs() < 1e-9, "{j:#?}");
        assert!(judge(&JobWindow::default()).is_none());
        let mut samples = WaitSamples::default();
        samples.add(&[Some(Wait::Thread), Some(Wait::Input)]);
        samples.add(&[Some(Wait::Thread), None]);
        assert_eq!(samples, WaitSamples { busy: 1, asleep: [0, 1, 0, 0, 0] });
    }
}
