//! A fix as a transformation of the step model, and the step time it leads to. Pure: the
//! model and the fix in, the predicted time (a share of today's) and what bounds it out.
//!
//! With a queue-draining call every step, the step is serial around it: the host works in
//! the idle phase while the GPU has nothing, then launches in the overlap phase while the
//! GPU runs, then waits until the GPU is done: `idle + max(overlap, gpu)`. Without one the
//! host runs ahead and the two overlap wholly: `max(idle + overlap, gpu)`. A fix that
//! removes a share `d` of the drains is taken to move that share of the steps from the first
//! form to the second. Work moved to other cores (a loader's workers) must fit on the cores
//! that are free, and copies made asynchronous still take their time on the bus: those are
//! floors of their own.

use super::model::{Segments, StepModel};

/// What a fix changes. [`Fix::NONE`] changes nothing.
#[derive(Clone, Copy, Debug, PartialEq)]
#[expect(clippy::struct_excessive_bools, reason = "each flag is one effect or floor of a fix, combined one by one in `and`")]
pub struct Fix {
    /// Share of the queue-draining calls removed (0..1).
    pub drop_drains: f64,
    /// Launching time is multiplied by this (a graph replay per step: 1 / launches a step).
    pub launch_scale: f64,
    /// Share of the program's own host work moved to other cores.
    pub offload_user: f64,
    /// Share of the program's own host work in the idle phase (after a drain, before the next
    /// launch: the bookkeeping that consumes a synced value) removed outright, as logging
    /// every N steps removes it.
    pub drop_idle_user: f64,
    /// Share of the timed sleeps in the idle phase removed outright with that work: a
    /// bookkeeping that sleeps (a rate limit, a logger's flush) goes with its sync as well.
    pub drop_idle_timer: f64,
    /// Multipliers of the other segments (1 keeps, 0 removes); `launch` and `user` unused.
    pub keep: Segments,
    /// The GPU's busy time is multiplied by this.
    pub gpu_scale: f64,
    /// The input waits go because more workers produce batches in time, on the free cores.
    pub refill_input: bool,
    /// Today's loader workers still make the batches, at today's pace: a floor (every fix
    /// but the loader's own, `refill_input`, or moving the loading into workers).
    pub loader_paces: bool,
    /// Copies moved off the host's path still need the bus: its time is a floor.
    pub bus_floor: bool,
    /// Serial time removed outright (a checkpoint made asynchronous), as a share.
    pub cut: f64,
    /// The slowest other rank of a lockstep job still keeps its longer host phase, so the
    /// step cannot come sooner than this rank's host time plus that lag
    /// (`StepModel::rank_lag`): every fix but the straggler's own.
    pub ranks_pace: bool,
}

impl Fix {
    /// The fix that changes nothing: the model as it is.
    pub const NONE: Self = Self {
        drop_drains: 0.0,
        launch_scale: 1.0,
        offload_user: 0.0,
        drop_idle_user: 0.0,
        drop_idle_timer: 0.0,
        keep: Segments { launch: 1.0, user: 1.0, staging: 1.0, transfer: 1.0, alloc: 1.0, cpu_wait: 1.0, io_wait: 1.0, input_wait: 1.0, timer: 1.0 },
        gpu_scale: 1.0,
        refill_input: false,
        loader_paces: true,
        bus_floor: false,
        cut: 0.0,
        ranks_pace: true,
    };

    /// Two fixes applied together.
    #[must_use]
    pub fn and(&self, o: &Self) -> Self {
        let k = |a: f64, b: f64| a.min(b);
        Self {
            // They remove different drains (each fix names its own kind).
            drop_drains: (self.drop_drains + o.drop_drains).min(1.0),
            launch_scale: self.launch_scale * o.launch_scale,
            offload_user: self.offload_user.max(o.offload_user),
            drop_idle_user: self.drop_idle_user.max(o.drop_idle_user),
            drop_idle_timer: self.drop_idle_timer.max(o.drop_idle_timer),
            keep: Segments {
                launch: 1.0,
                user: 1.0,
                staging: k(self.keep.staging, o.keep.staging),
                transfer: k(self.keep.transfer, o.keep.transfer),
                alloc: k(self.keep.alloc, o.keep.alloc),
                cpu_wait: k(self.keep.cpu_wait, o.keep.cpu_wait),
                io_wait: k(self.keep.io_wait, o.keep.io_wait),
                input_wait: k(self.keep.input_wait, o.keep.input_wait),
                timer: k(self.keep.timer, o.keep.timer),
            },
            gpu_scale: self.gpu_scale * o.gpu_scale,
            refill_input: self.refill_input || o.refill_input,
            loader_paces: self.loader_paces && o.loader_paces,
            bus_floor: self.bus_floor || o.bus_floor,
            cut: self.cut + o.cut,
            ranks_pace: self.ranks_pace && o.ranks_pace,
        }
    }
}

/// What limits the step after a fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The GPU's own busy time.
    Gpu,
    /// The free cores, for work moved off the training thread.
    Cores,
    /// Launching and dispatch left on the host.
    LaunchRate,
    /// The workers producing the input.
    Input,
    /// The program's own host work and the host's other waits.
    Host,
    /// Copies on the bus.
    Bus,
    /// The slowest rank of a multi-GPU job, which every collective waits for.
    Rank,
}

impl Bound {
    /// The name the report uses (`bound`): `gpu`, `cores`, `launch-rate`, `input`, `host` or `bus`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Gpu => "gpu",
            Self::Cores => "cores",
            Self::LaunchRate => "launch-rate",
            Self::Input => "input",
            Self::Host => "host",
            Self::Bus => "bus",
            Self::Rank => "rank",
        }
    }
}

/// Cores taken as free at least, where the job keeps them all busy: moving work there then
/// buys close to nothing rather than a division by zero.
const MIN_FREE_CORES: f64 = 0.1;

/// The step time after `fix`, as a share of the window, with the GPU busy `gpu` and the
/// launching share of host time `dispatch` (both from the model's ranges).
#[must_use]
pub fn step_time(m: &StepModel, fix: &Fix, gpu: f64, dispatch: f64) -> (f64, Bound) {
    let s = simulate(m, fix, gpu, dispatch);
    (s.t, s.bound)
}

/// A simulated step: its time (a share of today's window), what bounds it, and for a fix
/// that moves work to other processes, the workers it takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Simulated {
    /// The step time after the fix, a share of today's window.
    pub t: f64,
    /// What limits the step after the fix.
    pub bound: Bound,
    /// The fewest workers that reach the step's other bound, or as many as there are free
    /// cores where none do (a fix that moves no work: None).
    pub workers: Option<u32>,
}

/// How much longer a batch takes a process for each other busy process of the job: clocks
/// drop as more cores run, caches and memory are shared, and a DataLoader hands batches over
/// in order. Measured on the H200's host (16 cores, docs/validation.md): a Python decoder ran
/// 1.74x slower per batch in 15 workers than on the idle machine's training thread, numpy
/// augmentation 1.3x slower in 7 workers than in 1; a bare CPU loop alone lost 8-20 % at 16
/// processes (`validation/gpu/cpu_scaling.py`), the rest is the loader's.
const CONTENTION_PER_PROCESS: f64 = 0.05;

/// A process's speed with `busy` processes of the job on the CPU, against its speed alone.
fn speed(busy: f64) -> f64 {
    1.0 / (1.0 + CONTENTION_PER_PROCESS * (busy - 1.0).max(0.0))
}

/// The busiest the workers are planned to be: a DataLoader hands batches over in order and
/// batches differ in cost, so workers that need the whole step for their batches leave the
/// loop waiting whenever one runs late (a queue's wait grows as 1 / (1 - load)). On the H200
/// a tokenizer moved into 2 workers (planned 89 % busy) ran at 0.85 of the step it was
/// planned for, in 4 or 6 workers at 0.90-0.94 (docs/validation.md).
const WORKER_LOAD: f64 = 0.75;

/// Work spread over workers: the fewest (from `least`, at most `most`) whose share of `work`
/// (core-shares of the window at full speed) fits in a step of `t` beside `busy` other busy
/// processes with [`WORKER_LOAD`] to spare, else the fewest that fit it at all, and the time
/// it then takes.
fn spread(work: f64, busy: f64, t: f64, least: u32, most: u32) -> (u32, f64) {
    let time = |w: u32| work / (f64::from(w) * speed(busy + f64::from(w)));
    let most = most.max(1);
    let fits = |load: f64| (least.clamp(1, most)..=most).find(|&w| time(w) <= t * load * (1.0 + 1e-9));
    let w = fits(WORKER_LOAD).or_else(|| fits(1.0)).unwrap_or(most);
    (w, time(w))
}

/// [`step_time`] with the workers a fix takes (see [`Simulated`]).
#[must_use]
#[expect(clippy::many_single_char_names, reason = "the step formula's terms: idle, overlap, copies, gpu, drains, time")]
pub fn simulate(m: &StepModel, fix: &Fix, gpu: f64, dispatch: f64) -> Simulated {
    let apply = |s: &Segments, host_total: f64| -> Segments {
        // Re-split this phase's host time at `dispatch` where it differs from the model's
        // point (the idle phase keeps its user-first split: `StepModel::build`).
        // Segments are differences of shares: a sum a rounding error below zero is none.
        let host = (s.launch + s.user).max(0.0);
        let launch = if host_total > 0.0 { (s.launch + (dispatch - m.dispatch.share.point) * host).clamp(0.0, host) } else { s.launch };
        let k = &fix.keep;
        Segments {
            launch: launch * fix.launch_scale,
            user: (host - launch) * (1.0 - fix.offload_user),
            staging: s.staging * k.staging,
            transfer: s.transfer * k.transfer,
            alloc: s.alloc * k.alloc,
            cpu_wait: s.cpu_wait * k.cpu_wait,
            io_wait: s.io_wait * k.io_wait,
            input_wait: if fix.refill_input { 0.0 } else { s.input_wait * k.input_wait },
            timer: s.timer * k.timer,
        }
    };
    let host_total = m.idle.launch + m.idle.user + m.overlap.launch + m.overlap.user;
    let mut idle = apply(&m.idle, 0.0);
    idle.user *= 1.0 - fix.drop_idle_user.clamp(0.0, 1.0);
    idle.timer *= 1.0 - fix.drop_idle_timer.clamp(0.0, 1.0);
    let overlap = apply(&m.overlap, host_total);
    let serial = apply(&m.serial, 0.0);
    let g = gpu * fix.gpu_scale;
    let (i, o, c) = (idle.total(), overlap.total(), serial.total());
    // What the model leaves unexplained in a synced step is mostly the GPU's work trailing
    // the last launch: where launching paces the GPU its kernels wait on their launches, and
    // the sync waits for the ones still queued. It shrinks with the overlap phase's
    // launching: a graph's replay hands the GPU the whole step at once.
    let synced = i + o.max(g) + c + m.residual * fix.launch_scale.min(1.0);
    let ahead = (i + o + c).max(g);
    let d = fix.drop_drains.clamp(0.0, 1.0);
    // A cut is a share of today's step.
    let cut = if fix.cut > 0.0 { fix.cut * step_time(m, &Fix::NONE, gpu, dispatch).0 } else { 0.0 };
    let mut t = ((1.0 - d) * synced + d * ahead - cut).max(0.0);
    let launching = idle.launch + overlap.launch;
    let mut bound = if g >= o && (d >= 1.0 || g >= i + o + c) {
        Bound::Gpu
    } else if launching > (i + o + c) - launching {
        Bound::LaunchRate
    } else {
        Bound::Host
    };
    if fix.ranks_pace && m.rank_lag > 0.0 {
        // Every rank waits for the slowest at each collective. A fix done on every rank (the
        // same program) shortens its host phase as it shortens this rank's, but leaves the
        // work that makes it longer: the step is at least this rank's host time after the
        // fix plus that lag.
        let paced = i + o + c + m.rank_lag;
        if paced > t {
            t = paced;
            bound = Bound::Rank;
        }
    }
    // Copies made asynchronous join the GPU's queue: on the stream the job copies on (the
    // current one, as `non_blocking=True` and a DataLoader's pinned batches use it) they run
    // between its kernels, not beside them, so the GPU's floor becomes its kernels plus their
    // bus time. On the fake GPU, 8 MiB pinned beside 106 µs of kernels ran at 445 µs a step;
    // a floor of the bus time alone promised x3.6 where the twin measured x2.7
    // (tests/tests/diagnosis.rs). A job that copies on a side stream can do better.
    if fix.bus_floor && g + m.bus > t {
        t = g + m.bus;
        bound = Bound::Bus;
    }
    let waits_for_input = m.idle.input_wait + m.overlap.input_wait + m.serial.input_wait > 0.0;
    if fix.loader_paces && !fix.refill_input && m.workers > 0 && waits_for_input {
        // The loader's workers produce the batches: a step cannot come sooner than they make
        // its batch. Each is busy its share of the window now; where the loop waits for input
        // they are already the pace, and a faster loop waits longer instead. Only where the
        // loop does wait for input: a busy process of the tree that feeds no loop (a
        // compiler's pool, taken for a worker without stacks to say otherwise) bounds nothing.
        let loader = m.workers_cpu / m.workers as f64;
        if loader > t {
            t = loader;
            bound = Bound::Input;
        }
    }
    let mut workers = None;
    let free = m.cores_free().map(|c| c.max(MIN_FREE_CORES));
    let offloaded = (m.idle.user + m.overlap.user) * fix.offload_user;
    if let (Some(free), true) = (free, offloaded > 0.0) {
        // The moved work over the workers the free cores hold, each slowed by the others
        // (`speed`); measured on the training thread at today's load.
        let (w, took) = if free >= 1.0 { spread(offloaded * speed(m.job_cpu), m.job_cpu, t, 1, free.floor() as u32) } else { (1, offloaded / free) };
        workers = Some(w);
        if took > t {
            t = took;
            bound = Bound::Cores;
        }
    }
    if fix.refill_input {
        // The workers' work of a step spread over more of them, on the cores left to them.
        let others = (m.job_cpu - m.workers_cpu).max(0.0);
        if let Some(cores) = m.cpus.map(|c| (c - others).max(MIN_FREE_CORES)) {
            let most = cores.floor().max(1.0) as u32;
            // More workers than there are now: the ones there are do not keep up.
            let least = u32::try_from(m.workers + 1).unwrap_or(u32::MAX);
            let (w, took) = spread(m.workers_cpu * speed(m.job_cpu), others, t, least, most);
            workers = Some(w);
            if took > t {
                t = took;
                bound = Bound::Input;
            }
        }
    }
    Simulated { t, bound, workers }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::whatif::model::{Drains, Range};

    /// A synced step of 10 ms: 3 ms of bookkeeping after the sync (GPU idle), 2 ms launching
    /// 20 kernels, then a 5 ms wait for the GPU's 7 ms of work.
    fn synced() -> StepModel {
        StepModel {
            idle: Segments { user: 0.3, ..Segments::default() },
            overlap: Segments { launch: 0.2, ..Segments::default() },
            gpu_wait: 0.5,
            drains: Drains { syncs: 1.0, ..Drains::default() },
            gpu: Range::exact(0.7),
            dispatch: super::super::dispatch::Dispatch { share: Range::exact(0.4), ..Default::default() },
            cpus: Some(8.0),
            job_cpu: 1.0,
            ..StepModel::default()
        }
    }

    fn time(m: &StepModel, f: &Fix) -> f64 {
        step_time(m, f, m.gpu.point, m.dispatch.share.point).0
    }

    #[test]
    fn the_model_reproduces_the_step_it_was_built_from() {
        assert!((time(&synced(), &Fix::NONE) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn without_the_sync_the_host_runs_ahead_until_the_gpu_bounds_it() {
        let m = synced();
        let (t, bound) = step_time(&m, &Fix { drop_drains: 1.0, ..Fix::NONE }, 0.7, 0.4);
        assert!((t - 0.7).abs() < 1e-9, "max(0.3 + 0.2, 0.7): {t}");
        assert_eq!(bound, Bound::Gpu);
    }

    #[test]
    fn a_lagging_rank_paces_every_fix_but_the_stragglers() {
        // This rank: 0.3 + 0.2 of host, waiting 0.5 (for its GPU's 0.2 and for the other
        // rank, whose host phase is 0.4 of the window longer: 0.9).
        let m = StepModel { gpu: Range::exact(0.2), residual: 0.5, rank_lag: 0.4, ..synced() };
        assert!((time(&m, &Fix::NONE) - 1.0).abs() < 1e-9, "today's step is untouched: the lag is inside it");
        let (t, bound) = step_time(&m, &Fix { drop_drains: 1.0, ..Fix::NONE }, 0.2, 0.4);
        assert!((t - 0.9).abs() < 1e-9, "without its sync this rank would take 0.5, the other still takes 0.9: {t}");
        assert_eq!(bound, Bound::Rank);
        let straggler = Fix { cut: 0.4, ranks_pace: false, ..Fix::NONE };
        assert!((time(&m, &straggler) - 0.6).abs() < 1e-9, "the straggler's own fix removes the lag");
        let both = straggler.and(&Fix { drop_drains: 1.0, ..Fix::NONE });
        assert!(!both.ranks_pace, "with the straggler fixed, no rank lags");
        let alone = StepModel { rank_lag: 0.0, ..m };
        assert!((time(&alone, &Fix { drop_drains: 1.0, ..Fix::NONE }) - 0.5).abs() < 1e-9, "no lag, no floor");
    }

    /// `.item()`, then bookkeeping that sleeps 60 % of the step (a logger's flush, a rate
    /// limit) and computes 10 %: logging every N steps drops both, as its text says. Kept
    /// asleep, corpus seeds 15 and 18 were promised x1.0–1.4 where that twin measured x3.2–3.4.
    #[test]
    fn bookkeeping_asleep_after_the_sync_goes_with_it_where_the_fix_drops_it() {
        let m = StepModel { idle: Segments { user: 0.1, timer: 0.6, ..Segments::default() }, gpu_wait: 0.1, gpu: Range::exact(0.3), ..synced() };
        assert!((time(&m, &Fix::NONE) - 1.0).abs() < 1e-9, "the step as traced");
        let asleep_kept = time(&m, &Fix { drop_drains: 1.0, drop_idle_user: 1.0, ..Fix::NONE });
        let dropped = time(&m, &Fix { drop_drains: 1.0, drop_idle_user: 1.0, drop_idle_timer: 1.0, ..Fix::NONE });
        assert!((asleep_kept - 0.8).abs() < 1e-9, "the sleep and the launching, run ahead: {asleep_kept}");
        assert!((dropped - 0.3).abs() < 1e-9, "the GPU's own time: {dropped}");
    }

    #[test]
    fn graphs_remove_launching_but_the_sync_keeps_the_bookkeeping_serial() {
        let t = time(&synced(), &Fix { launch_scale: 0.05, ..Fix::NONE });
        assert!((t - 1.0).abs() < 1e-9, "0.3 + max(0.01, 0.7): the GPU was the rest of the step already: {t}");
    }

    #[test]
    fn the_gpus_work_trailing_the_launches_goes_with_them() {
        // metrics_sync on the H200: launching paces the GPU (0.70 of host against its 0.75
        // busy) and the sync then waits 0.15 for the kernels still queued. A graph hands the
        // GPU the whole step at once: the wait shrinks with the launching. Measured: 1.30x.
        let m = StepModel {
            idle: Segments { user: 0.1, ..Segments::default() },
            overlap: Segments { launch: 0.7, ..Segments::default() },
            residual: 0.15,
            drains: Drains { syncs: 1.0, ..Drains::default() },
            gpu: Range::exact(0.75),
            dispatch: super::super::dispatch::Dispatch { share: Range::exact(0.875), ..Default::default() },
            ..StepModel::default()
        };
        assert!((time(&m, &Fix::NONE) - 1.0).abs() < 1e-9);
        let t = time(&m, &Fix { launch_scale: 0.01, ..Fix::NONE });
        assert!((t - (0.1 + 0.75 + 0.15 * 0.007 / 0.7)).abs() < 1e-9, "{t}");
        // A fix that leaves the launching leaves the wait.
        let t = time(&m, &Fix { offload_user: 1.0, ..Fix::NONE });
        assert!((t - (0.75 + 0.15)).abs() < 1e-9, "the idle phase's 0.1 goes, the GPU's 0.75 and the wait stay: {t}");
    }

    #[test]
    fn work_moved_to_other_cores_is_bounded_by_the_free_cores() {
        let mut m = synced();
        m.idle.user = 3.0;
        m.cpus = Some(2.0);
        m.job_cpu = 1.5;
        let (t, bound) = step_time(&m, &Fix { offload_user: 1.0, ..Fix::NONE }, 0.7, 0.4);
        assert!((t - 6.0).abs() < 1e-9, "3.0 of work on half a free core: {t}");
        assert_eq!(bound, Bound::Cores);
    }

    #[test]
    fn work_moved_to_workers_takes_the_fewest_that_reach_the_next_bound() {
        // 3.0 of loading moved off a thread whose step would otherwise be bound by the GPU's
        // 0.7: six workers would fit it (3.0 / (6 / 1.3) = 0.65, each slowed beside the
        // training thread), but they would be 93 % busy; eight (3.0 / (8 / 1.4) = 0.525) keep
        // a quarter to spare.
        let mut m = synced();
        m.idle.user = 3.0;
        m.cpus = Some(9.0);
        let s = simulate(&m, &Fix { offload_user: 1.0, drop_drains: 1.0, ..Fix::NONE }, 0.7, 0.4);
        assert_eq!((s.workers, s.bound), (Some(8), Bound::Gpu), "{s:?}");
        // Where no count leaves the quarter spare, the fewest that fit at all.
        m.cpus = Some(7.0);
        let s = simulate(&m, &Fix { offload_user: 1.0, drop_drains: 1.0, ..Fix::NONE }, 0.7, 0.4);
        assert_eq!((s.workers, s.bound), (Some(6), Bound::Gpu), "{s:?}");
        // With three free cores the cores bound it, and all three are taken.
        m.cpus = Some(4.0);
        let s = simulate(&m, &Fix { offload_user: 1.0, drop_drains: 1.0, ..Fix::NONE }, 0.7, 0.4);
        assert_eq!((s.workers, s.bound), (Some(3), Bound::Cores), "{s:?}");
        assert!((s.t - 3.0 * 1.15 / 3.0).abs() < 1e-9, "3.0 over 3 cores, each at 1 / 1.15: {s:?}");
    }

    #[test]
    fn a_starved_loader_gets_more_workers_than_it_has() {
        // Two workers busy the whole window beside a training thread busy 1.0 (at 1 / 1.1 of
        // their speed alone): the step after is the GPU's 0.7; three would fit it (2.0 / 1.1 /
        // (3 / 1.15) = 0.70) wholly busy, five leave a quarter spare (0.45 of 0.7).
        let mut m = synced();
        m.overlap.input_wait = 0.5;
        m.workers = 2;
        m.workers_cpu = 2.0;
        m.job_cpu = 3.0;
        m.cpus = Some(16.0);
        let s = simulate(&m, &Fix { refill_input: true, drop_drains: 1.0, ..Fix::NONE }, 0.7, 0.4);
        assert_eq!(s.workers, Some(5), "{s:?}");
        assert_eq!(s.bound, Bound::Gpu, "{s:?}");
        // Idle workers that still starve the loop (a disk): at least one more than now.
        m.workers_cpu = 0.1;
        assert_eq!(simulate(&m, &Fix { refill_input: true, ..Fix::NONE }, 0.7, 0.4).workers, Some(3));
    }

    #[test]
    fn the_loaders_pace_bounds_every_fix_but_its_own() {
        // Two workers busy 0.94 of the window each feed a loop that waits 0.5 for them: a
        // fix of the loop's own time (its sync) makes it wait longer for its batches instead.
        let mut m = synced();
        m.overlap.input_wait = 0.5;
        m.idle.user = 0.0;
        m.residual = 0.3;
        m.workers = 2;
        m.workers_cpu = 1.88;
        m.job_cpu = 2.88;
        m.cpus = Some(16.0);
        assert!((time(&m, &Fix::NONE) - 1.0).abs() < 1e-9);
        let (t, bound) = step_time(&m, &Fix { drop_drains: 1.0, ..Fix::NONE }, 0.7, 0.4);
        assert!((t - 0.94).abs() < 1e-9, "the workers' 0.94, not the host's 0.7: {t}");
        assert_eq!(bound, Bound::Input);
        // More workers lift it.
        let s = simulate(&m, &Fix { refill_input: true, drop_drains: 1.0, ..Fix::NONE }, 0.7, 0.4);
        assert!(s.t < 0.94 && s.bound != Bound::Input, "{s:?}");
        // A loop that never waits for input is not paced by busy processes beside it.
        m.overlap.input_wait = 0.0;
        assert!((time(&m, &Fix::NONE) - 1.0).abs() < 1e-9);
        assert_eq!(step_time(&m, &Fix { drop_drains: 1.0, ..Fix::NONE }, 0.7, 0.4).1, Bound::Gpu);
    }

    #[test]
    fn fixes_combine() {
        let m = synced();
        let both = Fix { drop_drains: 1.0, ..Fix::NONE }.and(&Fix { offload_user: 1.0, ..Fix::NONE });
        let t = time(&m, &both);
        assert!((t - 0.7).abs() < 1e-9, "{t}");
        assert!((time(&m, &Fix { gpu_scale: 0.5, ..Fix::NONE }.and(&Fix { drop_drains: 1.0, ..Fix::NONE })) - 0.5).abs() < 1e-9);
    }
}
