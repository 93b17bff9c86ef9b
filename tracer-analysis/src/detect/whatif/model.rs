//! The step model: the critical path's time as serial host segments, in the phase after a
//! queue-draining call (the GPU has nothing to run) and in the phase the GPU may overlap,
//! and the GPU's own busy time, the floor no host-side fix can beat. Shares of the active
//! window: with steps found they are the same shares of a step (the step count cancels).

pub use super::range::Range;
use super::dispatch::{self, Dispatch};
use crate::{
    detect::Account,
    evidence::{cost, Evidence},
};

/// Host time on the critical path, by what it is (shares of the active window).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Segments {
    /// Launching kernels and the framework's dispatch around it (what graphs remove).
    pub launch: f64,
    /// The program's own host code (bookkeeping, tokenizing, loading in the main thread).
    pub user: f64,
    /// Pageable copies staged by the host.
    pub staging: f64,
    /// Copies' own transfer the host waited for (synchronous copy calls, waits after bulk
    /// copies).
    pub transfer: f64,
    /// Inside device allocation, free and mapping calls.
    pub alloc: f64,
    /// Runnable, waiting for a CPU.
    pub cpu_wait: f64,
    /// Blocked on the disk.
    pub io_wait: f64,
    /// Asleep waiting for input, another thread or the network.
    pub input_wait: f64,
    /// Asleep on a timer.
    pub timer: f64,
}

impl Segments {
    /// All the segments together: the host time on the critical path (a share of the active
    /// window).
    #[must_use]
    pub fn total(&self) -> f64 {
        self.launch + self.user + self.staging + self.transfer + self.alloc + self.cpu_wait + self.io_wait + self.input_wait + self.timer
    }

    /// The segments by name, in report order.
    #[must_use]
    pub fn named(&self) -> [(&'static str, f64); 9] {
        [
            ("launch", self.launch),
            ("user", self.user),
            ("staging", self.staging),
            ("transfer", self.transfer),
            ("alloc", self.alloc),
            ("cpu_wait", self.cpu_wait),
            ("io_wait", self.io_wait),
            ("input_wait", self.input_wait),
            ("timer", self.timer),
        ]
    }

    fn scale_others(&mut self, k: f64) {
        self.staging *= k;
        self.transfer *= k;
        self.alloc *= k;
        self.cpu_wait *= k;
        self.io_wait *= k;
        self.input_wait *= k;
        self.timer *= k;
    }
}

/// Where the GPU's busy time came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuSource {
    /// NVML's `utilization.gpu` (time a kernel ran), checked against the structure.
    Nvml,
    /// The host's evidence alone: at least the time it waited for the GPU, at most the time
    /// the queue was not known to be empty.
    Structure,
}

impl GpuSource {
    /// The name the report uses (`gpu_source`): `nvml` or `structure`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Nvml => "nvml",
            Self::Structure => "structure",
        }
    }
}

/// Queue-draining calls on the critical path, by kind: each leaves the GPU idle until the
/// host launches again.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Drains {
    /// Synchronizes that followed no bulk copy: scalar reads (`.item()`) and plain syncs.
    pub syncs: f64,
    /// Synchronizes after an async bulk copy (`non_blocking=False`, `.cpu()`).
    pub after_bulk_copy: f64,
    /// Pageable copies: the driver drains the stream before staging them.
    pub pageable_copies: f64,
}

impl Drains {
    /// All the queue-draining calls, counted over the window.
    #[must_use]
    pub fn total(&self) -> f64 {
        self.syncs + self.after_bulk_copy + self.pageable_copies
    }

    /// The share of all drains that `n` of them are (1 where there are none: nothing then
    /// holds the host back once they go).
    #[must_use]
    pub fn share(&self, n: f64) -> f64 {
        let all = self.total();
        if all <= 0.0 {
            1.0
        } else {
            (n / all).clamp(0.0, 1.0)
        }
    }
}

/// The whole model (module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepModel {
    /// After a queue-draining call, until the next launch: the GPU has nothing to run.
    pub idle: Segments,
    /// The rest of the host's time: the GPU may work meanwhile.
    pub overlap: Segments,
    /// Copy work after a drain (staging pageable memory, waiting for a transfer): the GPU's
    /// queue holds only the copy, so it runs after the GPU's work, not beside it.
    pub serial: Segments,
    /// Time the model does not explain at its point estimate (the GPU's last kernel after
    /// the final launch, a sync's own latency): it stays with the drains.
    pub residual: f64,
    /// Blocked waiting for queued GPU work (syncs and the waits inside copy calls).
    pub gpu_wait: f64,
    /// The queue-draining calls on the critical path, by kind.
    pub drains: Drains,
    /// The GPU's busy time (share of the active window).
    pub gpu: Range,
    /// Where `gpu` came from; None in a model not made by `build` (the report then says
    /// `structure`).
    pub gpu_source: Option<GpuSource>,
    /// The share of host time that is launching and dispatch (`dispatch`).
    pub dispatch: Dispatch,
    /// Cores the job may use (affinity, cgroup quota), if known, and how many its threads
    /// kept busy on average.
    pub cpus: Option<f64>,
    /// Cores the traced tree's threads kept busy on average over the window.
    pub job_cpu: f64,
    /// Cores the loader workers kept busy on average, and how many there were.
    pub workers_cpu: f64,
    /// How many loader workers there were.
    pub workers: usize,
    /// Kernel and graph launches per step, where steps were found.
    pub launches_per_step: Option<f64>,
    /// The host's launching and dispatch time per launch, in seconds (none without launches):
    /// ~20 µs for an eager PyTorch op, milliseconds for a jitted call's whole dispatch.
    pub launch_host_s: Option<f64>,
    /// Of the main threads' host time, the share in data loading: by the stacks' frames, or
    /// the framework's CPU kernels working apart from the launches (`StepModel::build`).
    pub loading_share: f64,
    /// The share of the window the copies need on the bus at pinned speed.
    pub bus: f64,
    /// A caching allocator made the allocations (`dispatch::caching_allocator`).
    pub caching_allocator: bool,
    /// Kernel launches a second on the critical path's threads.
    pub launches_per_s: f64,
    /// Device allocations and frees a second, those that pair up (as `alloc-churn` counts).
    pub alloc_calls_per_s: f64,
    /// In a multi-GPU job, how much longer the slowest other rank's host phase is than this
    /// rank's, a share of the window (0 where none is longer, or there are no ranks): ranks
    /// run in lockstep, so that rank paces every fix but its own (`simulate`).
    pub rank_lag: f64,
    /// Host time the probes added and the model took out (a share of the window): the step
    /// it simulates is the untraced one (`without_tracer`).
    pub tracer: f64,
    /// What makes the model uncertain, in sentences.
    pub notes: Vec<String>,
}

/// NVML's utilization is a mean over sample periods of 1/6 s to 1 s that do not line up with
/// the window: ±5 points of it are no evidence either way.
const NVML_SLACK: f64 = 0.05;
impl StepModel {
    /// The model of the account's critical path. `cpus`: cores the job may use, if known.
    #[must_use]
    pub fn build(ev: &Evidence, a: &Account, launches_per_step: Option<f64>, cpus: Option<f64>, tracer_ns: Option<&std::collections::HashMap<u32, f64>>) -> Option<Self> {
        let t = a.time.as_ref()?;
        let share = |ns: u64| t.fraction(ns);
        let mut m = Self { cpus, launches_per_step, ..Self::default() };
        // The waits for queued GPU work, and what the copies cost by their own doing.
        m.gpu_wait = a.waiting_for_gpu_work();
        let host = share(t.launching_and_host_ns);
        let host_idle = share(t.host_while_queue_empty_ns).min(host);
        m.dispatch = dispatch::share(ev, &t.threads, host * a.window_s, a.launch_rate * a.window_s);
        // The caching allocator's slow path is churn's host time, not dispatch: it joins the
        // allocation calls (`dispatch::allocator_share`). The program's own share stays.
        let allocator_cpu = (dispatch::allocator_share(ev, &t.threads) * host).min(m.dispatch.share.point * host);
        let launch = m.dispatch.share.point * host - allocator_cpu;
        let host = host - allocator_cpu;
        let host_idle = host_idle.min(host);
        let (count, frees) = t.allocs_in(ev);
        m.alloc_calls_per_s = if a.window_s > 0.0 { 2.0 * count.min(frees) as f64 / a.window_s } else { 0.0 };
        m.launch_host_s = (a.launch_rate > 0.0).then(|| launch / a.launch_rate);
        m.launches_per_s = a.launch_rate;
        m.caching_allocator = dispatch::caching_allocator(ev);
        let user = host - launch;
        // After a drain the program's own code runs first (bookkeeping, the next batch);
        // the first launch ends the spell.
        let user_idle = user.min(host_idle);
        m.idle.user = user_idle;
        m.idle.launch = host_idle - user_idle;
        m.overlap.user = user - user_idle;
        m.overlap.launch = launch - m.idle.launch;
        let sleeping = share(t.sleeping_ns);
        // Asleep until the GPU woke the thread (a launch blocked on a full queue, a
        // blocking sync outside the probed calls): a wait for the GPU, not host work.
        let (timer, gpu_woken) = t.sleep_split().map_or((0.0, 0.0), |s| (s[2], s[5]));
        m.gpu_wait += sleeping * gpu_woken;
        m.serial = Segments { staging: share(t.pageable_staging_ns), transfer: share(t.copy_transfer_waits_ns + t.sync_copy_transfer_ns), ..Segments::default() };
        let others = Segments {
            alloc: share(t.allocating_ns) + allocator_cpu,
            cpu_wait: share(t.waiting_for_cpu_ns),
            io_wait: share(t.io_wait_ns),
            input_wait: sleeping * (1.0 - timer - gpu_woken).max(0.0),
            timer: sleeping * timer,
            ..Segments::default()
        };
        // The queue's empty spells hold the other segments too; as in the time account,
        // each is taken to lie in them in proportion (`TimeAccount::combine`).
        let others_total = others.total();
        let in_idle = if others_total > 0.0 { ((share(t.queue_empty_ns) - host_idle).max(0.0) / others_total).min(1.0) } else { 0.0 };
        let (mut idle_others, mut overlap_others) = (others, others);
        idle_others.scale_others(in_idle);
        overlap_others.scale_others(1.0 - in_idle);
        m.idle = Segments { launch: m.idle.launch, user: m.idle.user, ..idle_others };
        m.overlap = Segments { launch: m.overlap.launch, user: m.overlap.user, ..overlap_others };
        m.drains = drains(ev, &t.threads);
        let (gpu, source, notes) = gpu_range(a, &m);
        m.gpu = gpu;
        m.gpu_source = Some(source);
        m.notes.extend(notes);
        m.calibrate();
        if let Some(traced) = tracer_ns {
            let added: f64 = t.threads.iter().filter_map(|tid| traced.get(tid)).sum();
            m.without_tracer(share(added as u64));
        }
        m.job_cpu = job_cpu(ev, t.whole_ns());
        if let Some(h) = &a.host {
            m.workers = h.workers;
            m.workers_cpu = h.workers_on_cpu * h.workers as f64;
        }
        // Loading by its frames (a dataset's `__getitem__`, a collate), or the framework's CPU
        // kernels working apart from the launches (a batch made through `torch` by the
        // program's own function, `dispatch::framework_work_apart_share`): whichever says
        // more, as the two may be one (a `__getitem__` that stacks tensors).
        let apart = dispatch::apart_after_ns(ev, &t.threads, host * a.window_s, a.launch_rate * a.window_s);
        m.loading_share = crate::stacks::sites::loading_share(&ev.stacks, &t.threads).max(dispatch::framework_work_apart_share(ev, &t.threads, apart));
        // The bus time of the copies: their bytes at the link's pinned speed (NVML's link;
        // without it a gen4 x16 link's), or the transfers the host waited for where those say
        // more. A floor no host fix can beat, so the faster link where known: the slow
        // default would promise too little on a gen5 link (x0.73 on the H200).
        let bytes = t.bytes_copied_in(ev);
        let rate = a.bus_bytes_per_s.unwrap_or(cost::PINNED_BYTES_PER_S);
        let by_bytes = if a.window_s > 0.0 { cost::transfer_ns(bytes, rate) as f64 / 1e9 / a.window_s } else { 0.0 };
        m.bus = by_bytes.max(m.serial.transfer + m.overlap.transfer);
        let importing = importing_share(ev, &t.threads);
        if importing >= IMPORTING_NOTE {
            m.notes.push(format!(
                "{:.0}% of the launching threads' host time was spent importing modules (a one-time cost, such as a library imported at the first optimizer step): it names no site and counts as neither launching nor the program's work; a longer trace dilutes it",
                importing * 100.0
            ));
        }
        if cpus.is_none() {
            m.notes.push("the cores the job may use are unknown: work moved to other cores is not bounded by them".into());
        }
        Some(m)
    }

    /// Take out the host time the probes added (`added`, a share of the window): it sits in
    /// the calls they trap, launches first, then allocations. The step the model then makes
    /// at its point (`simulate`'s base) is the job's untraced one, so that a fix is promised
    /// against what a run without gputrace measures. On the fake GPU the launch fix's
    /// promise was x2.60 where its untraced twin measured x2.04: 300 traced launches a step
    /// cost 1.2 µs each on top of the driver's 2 µs (tests/tests/nvml.rs).
    /// `launch_host_s` stays the traced figure: NVML's busy time was measured with the traced
    /// launches' pace, and a graph's saving (`fixes::back_to_back`) is read against it.
    fn without_tracer(&mut self, added: f64) {
        let mut left = added.max(0.0);
        for (phase_a, phase_b) in [(&mut self.overlap.launch, &mut self.idle.launch), (&mut self.overlap.alloc, &mut self.idle.alloc)] {
            let total = *phase_a + *phase_b;
            if total <= 0.0 || left <= 0.0 {
                continue;
            }
            let take = left.min(total);
            *phase_a -= take * *phase_a / total;
            *phase_b -= take * *phase_b / total;
            left -= take;
        }
        self.tracer = added.max(0.0) - left;
    }

    /// The host's serial time (everything but the waits for the GPU).
    #[must_use]
    pub fn host(&self) -> f64 {
        self.idle.total() + self.overlap.total() + self.serial.total()
    }

    /// Make the model reproduce the measured step at its point estimate: `idle + max(overlap,
    /// gpu) + serial + residual = 1`. Where NVML's busy time leaves no room for the copies
    /// to have run after the GPU's work, they overlapped it (another stream); what is left
    /// unexplained is the residual.
    fn calibrate(&mut self) {
        let room = (1.0 - self.idle.total() - self.overlap.total().max(self.gpu.point)).max(0.0);
        let serial = self.serial.total();
        if serial > room && serial > 0.0 {
            let keep = room / serial;
            for (from, to) in [(&mut self.serial.staging, &mut self.overlap.staging), (&mut self.serial.transfer, &mut self.overlap.transfer)] {
                *to += *from * (1.0 - keep);
                *from *= keep;
            }
        }
        // The idle phase and the copies leave the GPU nothing to run.
        let cap = (1.0 - self.idle.total() - self.serial.total()).max(0.0);
        self.gpu = Range { lo: self.gpu.lo.min(cap), point: self.gpu.point.min(cap), hi: self.gpu.hi.min(cap) };
        let modelled = self.idle.total() + self.overlap.total().max(self.gpu.point) + self.serial.total();
        self.residual = (1.0 - modelled).max(0.0);
    }

    /// Cores neither the job's threads nor its workers use, for work moved off the training
    /// thread; None where the cores are unknown.
    #[must_use]
    pub fn cores_free(&self) -> Option<f64> {
        self.cpus.map(|c| (c - self.job_cpu).max(0.0))
    }
}

/// The GPU's busy time. The structure bounds it whatever NVML says: the GPU worked while the
/// host waited for it, and did nothing while its queue was known to be empty. NVML's
/// utilization, where present, is the measurement (rescaled to the active time: outside the
/// launching threads' span and in pauses no kernel was launched).
fn gpu_range(a: &Account, m: &StepModel) -> (Range, GpuSource, Vec<String>) {
    let t = a.time.as_ref().map_or(0.0, |t| t.fraction(t.queue_empty_ns));
    let lo_s = m.gpu_wait.clamp(0.0, 1.0);
    let hi_s = (1.0 - t).clamp(lo_s, 1.0);
    // Without NVML, the copies the host waited for ran after the GPU's work (one stream).
    let hi_structure = (hi_s - m.serial.total()).clamp(lo_s, 1.0);
    let mut notes = Vec::new();
    if let Some(util) = a.gpu_util {
        let whole = a.time.as_ref().map_or(1.0, |t| {
            let all = t.whole_ns();
            if t.window_ns == 0 {
                1.0
            } else {
                all as f64 / t.window_ns as f64
            }
        });
        let u = (util * whole).clamp(0.0, 1.0);
        if u > hi_s + NVML_SLACK {
            notes.push(format!(
                "NVML says a kernel ran {:.0}% of the time, more than the {:.0}% the GPU queue was not seen empty: another process's kernels, or launches not traced",
                u * 100.0,
                hi_s * 100.0
            ));
        }
        // The waits are a floor of the busy time only up to the wake-up: a thread blocked in
        // a sync returns some time after the GPU's last kernel (the interrupt, the timer, the
        // scheduler), and a wait inside a copy call may be the copy engine's, which is no
        // kernel. NVML measures the kernels: where it reads below the waits, it is the point,
        // and the waits' excess stays with the drains (`residual`), which a fix removes with
        // them. The fake GPU's syncs on the CI machine woke ~0.4 ms late in 3.4 ms waits, and
        // the floor made the no-sync step 15 % too slow (tests/tests/nvml.rs).
        let point = u.min(hi_s);
        if u + NVML_SLACK < lo_s {
            notes.push(format!(
                "NVML says a kernel ran {:.0}% of the time, less than the {:.0}% the host waited for the GPU: the waits include the wake-up after the GPU's last kernel (or copies, which are no kernel), and that time goes with the waits when they go",
                u * 100.0,
                lo_s * 100.0
            ));
        }
        // GPM's SM activity is a floor of the kernels' time (a kernel counts in it only for
        // the SMs it keeps busy), and utilization its ceiling: where they part, the busy time
        // could be as low as SM activity. On the H200 an allocator emptied every step read
        // 75 % utilization against 45 % SM activity, and its fixed twin ran at 1.74x; SM
        // activity had scaled with the work (x1.78), utilization had not (docs/validation.md).
        let mut lo = u - NVML_SLACK;
        if let Some(sm) = a.sm_active.map(|sm| (sm * whole).clamp(0.0, 1.0)).filter(|sm| *sm < lo) {
            notes.push(format!(
                "GPM's SM activity ({:.0}%) is well below NVML's utilization ({:.0}%): small kernels, or device work that is no kernel (an allocator releasing memory); the GPU's floor may lie that low, and the ranges allow it",
                sm * 100.0,
                u * 100.0
            ));
            lo = sm;
        }
        let range = Range { lo: lo.clamp(lo_s.min(u - NVML_SLACK).max(0.0), point), point, hi: (u + NVML_SLACK).max(lo_s).clamp(point, hi_s) };
        return (range, GpuSource::Nvml, notes);
    }
    notes.push(format!(
        "no NVML: the GPU's busy time is known only to lie between {:.0}% and {:.0}% of the time (the waits for it, and the time its queue was not seen empty)",
        lo_s * 100.0,
        hi_structure * 100.0
    ));
    let hi_s = hi_structure;
    // Nothing says where in the range it lies: the geometric middle, neutral to its scale
    // (a floor of 1 % keeps a wait of nothing from making it zero).
    let point = (lo_s.max(0.01) * hi_s).sqrt().clamp(lo_s, hi_s);
    (Range { lo: lo_s, point, hi: hi_s }, GpuSource::Structure, notes)
}

/// Queue-draining calls of the critical path's threads, by kind.
fn drains(ev: &Evidence, threads: &[u32]) -> Drains {
    let syncs: u64 = threads.iter().filter_map(|tid| ev.threads.get(tid)).map(|t| t.syncs).sum();
    let c = &ev.copies;
    let after_bulk = c.h2d.then_synced + c.d2h.then_synced;
    Drains {
        syncs: syncs.saturating_sub(after_bulk) as f64,
        after_bulk_copy: after_bulk as f64,
        // A scalar read (`.item()`) from pageable memory drains the queue inside its copy call;
        // it is the sync's (`host-sync`): pinning four bytes is no fix.
        pageable_copies: (c.h2d.pageable + c.d2h.pageable.saturating_sub(c.d2h.scalar_reads)) as f64,
    }
}

/// A share of host time spent importing modules worth a note.
const IMPORTING_NOTE: f64 = 0.05;

/// Of the `threads`' on-CPU Python stack time, the share that was importing modules.
fn importing_share(ev: &Evidence, threads: &[u32]) -> f64 {
    let (mut importing, mut all) = (0u64, 0u64);
    for s in ev.stacks.iter().filter(|s| s.on_cpu && s.origin == crate::stacks::Origin::Python && threads.contains(&s.tid)) {
        all += s.ns;
        if crate::stacks::sites::is_importing(&s.frames) {
            importing += s.ns;
        }
    }
    if all == 0 {
        0.0
    } else {
        importing as f64 / all as f64
    }
}

/// Cores the traced tree's threads kept busy on average over the window.
fn job_cpu(ev: &Evidence, window_ns: u64) -> f64 {
    if window_ns == 0 {
        return 0.0;
    }
    ev.sched.values().map(|s| s.on_cpu_ns).sum::<u64>() as f64 / window_ns as f64
}
