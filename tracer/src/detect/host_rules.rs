//! Detectors over the host-side evidence: scheduler states of the CUDA threads and of the
//! other processes of the tree (DataLoader workers), block I/O, cgroup throttling.

use super::{
    diagnosis::{diagnosis, gpu_line, pct},
    Account, MEDIUM,
};
use crate::{
    evidence::{waits::WaitKind, Evidence},
    model::{Diagnosis, DiagnosisId, TimeBucket},
};

/// A CUDA thread waiting for a CPU this much of the window is starved (it is runnable: the
/// work is there, the CPU is not). 10 % is where the text report starts calling it medium.
pub(crate) const RUNQUEUE_STARVED: f64 = MEDIUM;
/// A CUDA thread blocked in uninterruptible sleep (`D`, I/O) this much of the window stalls.
pub(crate) const BLOCKED_STALL: f64 = MEDIUM;
/// A CUDA thread sleeping outside CUDA calls this much of the window waits for its input.
pub(crate) const SLEEP_STARVED: f64 = 0.25;
/// GPU activity (GPM SM, else utilization) below which the GPU is waiting, not working.
pub(crate) const GPU_WAITING: f64 = 0.5;
/// A worker on a CPU this much of the window is CPU-bound (decoding, augmenting).
pub(crate) const WORKER_BUSY: f64 = 0.7;
/// A worker blocked this much of the window waits on the disk.
pub(crate) const WORKER_BLOCKED: f64 = 0.3;

fn top_preemptors(ev: &Evidence) -> Option<String> {
    let mut by_command: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for p in &ev.preempted_by {
        *by_command.entry(if p.command.is_empty() { "(exited)" } else { p.command.as_str() }).or_default() += p.count;
    }
    let mut v: Vec<(&str, u64)> = by_command.into_iter().collect();
    v.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    (!v.is_empty()).then(|| v.iter().take(4).map(|(c, n)| format!("{c} ({n}×)")).collect::<Vec<_>>().join(", "))
}

pub(super) fn cpu_starved(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    a.host.as_ref()?;
    let runqueue = a.share(|t| t.waiting_for_cpu_ns);
    if runqueue < RUNQUEUE_STARVED {
        return None;
    }
    let mut evidence = vec![format!("the launching threads were runnable but not running {} of the window", pct(runqueue))];
    if let Some(who) = top_preemptors(ev) {
        evidence.push(format!("the CPU went to: {who}"));
    }
    for (file, s) in ev.cgroups.iter().filter(|(_, s)| s.nr_throttled > 0) {
        evidence.push(format!(
            "cgroup {file}: throttled in {} of {} periods, {:.3} s",
            s.nr_throttled,
            s.nr_periods,
            s.throttled_usec as f64 / 1e6
        ));
    }
    Some(diagnosis(
        DiagnosisId::CpuStarved,
        TimeBucket::WaitingForCpu,
        runqueue,
        format!("the threads feeding the GPU wait for a CPU {} of the time", pct(runqueue)),
        evidence,
        "give the job its CPUs: stop or move competing processes, raise the cgroup/container CPU limit, and keep DataLoader workers + training threads within the cores you have",
    ))
}

pub(super) fn io_stall(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    a.host.as_ref()?;
    let blocked = a.share(|t| t.io_wait_ns);
    if blocked < BLOCKED_STALL {
        return None;
    }
    let io = &ev.io.total;
    let mut evidence = vec![format!("the launching threads were blocked in uninterruptible I/O wait {} of the window", pct(blocked))];
    if io.counts.reads + io.counts.writes > 0 {
        evidence.push(format!(
            "block I/O of the job: {} reads ({} bytes), {} writes ({} bytes), p95 latency {} µs",
            io.counts.reads,
            io.counts.read_bytes,
            io.counts.writes,
            io.counts.write_bytes,
            ev.io.latency_quantile_us(0.95).unwrap_or(0)
        ));
    }
    let writes = io.counts.write_bytes > io.counts.read_bytes;
    Some(diagnosis(
        DiagnosisId::IoStall,
        TimeBucket::IoWait,
        blocked,
        format!("the training thread itself waits on the disk {} of the time", pct(blocked)),
        evidence,
        if writes {
            "write checkpoints and logs asynchronously (a background thread or process), less often, or to faster local storage"
        } else {
            "read data in DataLoader workers instead of the training thread, prefetch, keep the dataset in memory or on faster storage"
        },
    ))
}

/// The `sleeping` bucket split by what woke the threads (`evidence::waits`): the share of
/// the window asleep on a timer, and the share asleep waiting for something else. Without
/// waker evidence (an older kernel or recording) all of it is the latter.
fn sleep_shares(a: &Account) -> (f64, f64) {
    let sleeping = a.share(|t| t.sleeping_ns);
    let timer = a.time.as_ref().and_then(crate::evidence::time_account::TimeAccount::sleep_split).map_or(0.0, |s| s[TIMER]);
    (sleeping * timer, sleeping * (1.0 - timer))
}

/// Index of the timer in `WaitKind::ALL`.
const TIMER: usize = 2;
const _: () = assert!(matches!(WaitKind::ALL[TIMER], WaitKind::Timer));

/// What woke the launching threads most, outside CUDA calls and timers: (kind, who, site).
fn top_waker(a: &Account) -> Option<(WaitKind, String, String)> {
    let t = a.time.as_ref()?;
    let w = t.wakers.iter().find(|w| !w.in_cuda && w.kind != WaitKind::Timer && w.kind != WaitKind::Gpu)?;
    Some((w.kind, w.who(), w.site.clone()))
}

pub(super) fn input_starved(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let h = a.host.as_ref()?;
    // Sleeping in the time account is time when none of the threads on the critical path
    // was doing anything (threads that take turns are added up, `evidence::time_account`), so it
    // is unambiguous: nobody was launching, the GPU was not being fed. A sleep that a timer
    // ended is the program's own pause, not a wait for input (`host_sleep`).
    let (_, sleeping) = sleep_shares(a);
    if sleeping < SLEEP_STARVED || a.gpu_time_busy().is_some_and(|g| g >= GPU_WAITING) {
        return None;
    }
    let waker = top_waker(a);
    let (cause, fix) = if h.workers_blocked >= WORKER_BLOCKED && h.workers > 0 {
        ("its data-loading workers wait on the disk".to_owned(), "read faster: keep the data in memory or on local SSD, use a packed format (WebDataset, TFRecord-like shards), more workers to overlap reads, pin_memory=True")
    } else if h.workers_on_cpu >= WORKER_BUSY && h.workers > 0 {
        ("its data-loading workers are busy on the CPU (decoding, augmenting) and cannot keep up".to_owned(), "raise num_workers (up to the free cores), prefetch_factor, persistent_workers=True, pin_memory=True; make decoding cheaper or move augmentation to the GPU")
    } else if h.workers_runqueue >= RUNQUEUE_STARVED && h.workers > 0 {
        ("its data-loading workers wait for a CPU".to_owned(), "free CPUs for the workers, or lower their number to the cores available")
    } else {
        match &waker {
            Some((WaitKind::InputWorker, who, _)) => (
                format!("the training thread waits for worker process {who}, which hands it the input"),
                "raise num_workers and prefetch_factor, set persistent_workers=True and pin_memory=True",
            ),
            Some((WaitKind::Thread, who, site)) => (
                format!("the training thread waits on another thread of the job, {who} ({site}): a queue or a lock"),
                "find what that thread produces late (a prefetch queue, a lock held across work); make it run ahead, or hold the lock for less",
            ),
            Some((WaitKind::Network, _, _)) => (
                "the training thread waits on the network (a remote data source or parameter server)".to_owned(),
                "prefetch remote data ahead of the step, cache it locally, or overlap the fetch with compute",
            ),
            _ if h.workers == 0 => (
                "the training thread sleeps outside CUDA calls while the GPU has nothing to do".to_owned(),
                "find what the training loop waits for between steps (a queue, a lock); for a DataLoader use num_workers > 0 with persistent_workers=True",
            ),
            _ => ("the training thread waits on its data loader".to_owned(), "raise num_workers and prefetch_factor, set persistent_workers=True and pin_memory=True"),
        }
    };
    let mut evidence = vec![format!("the launching threads all slept outside CUDA calls, waiting, {} of the active time", pct(sleeping))];
    if let Some((kind, who, site)) = &waker {
        let how = if site.is_empty() { String::new() } else { format!(" through {site}") };
        evidence.push(format!("most often woken by {who}{how} ({})", kind.name()));
    }
    if h.workers > 0 {
        evidence.push(format!(
            "{} worker processes: on CPU {} of the time on average, blocked on I/O up to {}, waiting for a CPU up to {}",
            h.workers,
            pct(h.workers_on_cpu),
            pct(h.workers_blocked),
            pct(h.workers_runqueue)
        ));
    }
    if ev.io.total.counts.reads > 0 {
        evidence.push(format!("the job read {} bytes in {} requests", ev.io.total.counts.read_bytes, ev.io.total.counts.reads));
    }
    evidence.extend(gpu_line(a));
    Some(diagnosis(DiagnosisId::InputStarved, TimeBucket::Sleeping, sleeping, format!("the GPU waits for input: {cause}"), evidence, fix))
}

/// The training loop sleeps on a timer between steps (`time.sleep`, a polling loop) while
/// the GPU has nothing to do. Pauses of a second or more are not counted: they are phases
/// of the window, left out of the account.
/// Timed sleeps in the window below which they are one-off spells, not the loop's rhythm.
const MIN_RECURRING_SLEEPS: u64 = 3;

pub(super) fn host_sleep(_ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    a.host.as_ref()?;
    let (timer, _) = sleep_shares(a);
    if timer < SLEEP_STARVED || a.gpu_time_busy().is_some_and(|g| g >= GPU_WAITING) {
        return None;
    }
    let mut evidence = vec![format!("the launching threads slept {} of the active time in spells a timer ended", pct(timer))];
    if let Some(t) = a.time.as_ref() {
        let n: u64 = t.wakers.iter().filter(|w| w.kind == WaitKind::Timer && !w.in_cuda).map(|w| w.count).sum();
        // A sleep is the loop's only where it recurs: one or two long spells (a start-up's
        // wait, a one-off pause) are no per-step cost, and "remove the sleep from the loop"
        // was told to a job that slept once for 0.6 s and then launched 150 000 kernels.
        if n < MIN_RECURRING_SLEEPS {
            return None;
        }
        evidence.push(format!("{n} timed sleeps, {:.1} ms each on average", timer * a.window_s * 1e3 / n.max(1) as f64));
    }
    evidence.extend(gpu_line(a));
    Some(diagnosis(
        DiagnosisId::HostSleep,
        TimeBucket::Sleeping,
        timer,
        format!("the training loop sleeps on a timer {} of the time while the GPU waits", pct(timer)),
        evidence,
        "remove the sleep from the loop, or wait on the data itself (a blocking queue get) instead of polling with sleeps",
    ))
}
