//! `--max-overhead PCT`: keep what tracing costs the job under a budget by taking probes off
//! part of the time, and scaling what they counted to the window.
//!
//! Why launches first: every other probe fires a few thousand times a second in most jobs,
//! but a launch-bound job launches 100,000 kernels a second, each paying a uprobe trap on the
//! launching thread (~1.4 µs on the H200: 14 % of that thread, docs/facts.md). A trap's cost
//! cannot be lowered from inside the probe, so the probes come off: multi-uprobe links go in
//! a millisecond and come off off the job's threads, so a period of a second can be split
//! finely.
//!
//! Why calls next: a loop that reads a scalar every step (`.item()`: a copy and a sync, four
//! traps) pays more for its calls than any budget of a percent or two holds, with launches
//! off or on. Where launches alone cannot meet the budget, the copy, memset and sync probes
//! go with them (`gputrace_common::Shed`); allocation and context probes never do.
//!
//! How: the busiest traced thread's trap time is measured from the kernel's per-thread hit
//! counters and the trap costs measured at the start, first over `WATCH_NS` with everything
//! on; past the budget, each period of `PERIOD_NS` has the probes on for a duty cycle
//! `d = (budget − kept) / shed` of it (shed: the share of the thread the probes taken off
//! cost while on; kept: the rest of the probes' share), re-measured at the end of every on
//! phase, and shortened while the window so far has spent more than its budget. Counts of
//! what was taken off are then estimates (`Evidence::scale_sampled_launches`,
//! `Evidence::scale_sampled_calls`), and so are the spells of empty GPU queue (seen only
//! while launches are); every other count is exact.

use std::collections::BTreeMap;

use gputrace_common::{Shed, ThreadCounters, PROBES, PROBE_SLOTS};

/// One on phase plus one off phase.
pub const PERIOD_NS: u64 = 1_000_000_000;
/// How long everything stays on between measurements while the budget holds without
/// shedding, the first included: short, since a job that starts launching meanwhile pays it
/// in full. A launch-bound job still launches ~10,000 kernels in it, enough to measure its
/// rate; at 0.2 s the first watch alone spent 1.05 % of a 4 s window on a machine whose
/// launch trap costs 1.05 µs (the CI machine of 2026-12-02), more than a 1 % budget holds.
pub const WATCH_NS: u64 = 50_000_000;
/// The shortest on phase: below this the rate seen while on is too noisy to scale from
/// (20 ms of a launch-bound job still holds ~2,000 launches).
pub const MIN_DUTY: f64 = 0.02;
/// The longest on phase short of staying on: an off phase shorter than 50 ms is not worth
/// a detach, whose link closes in the background over a grace period.
pub const MAX_DUTY: f64 = 0.95;

/// How many on phases the plan for the next remembers (`Budget::planning_shed`).
pub const RECENT_ON_PHASES: usize = 3;

/// Where launches alone cannot keep the budget and neither can launches and calls together,
/// the calls still go if they are at least this share of what could go: they cost the job
/// as much as that, and the window's cost comes closer to the budget.
pub const CALLS_WORTH_SHEDDING: f64 = 0.25;

/// What the controller asks of the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing to change.
    None,
    /// Take these probes off.
    Shed(Shed),
    /// Put them back.
    Restore,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Everything on, watching the cost.
    Watching,
    /// Duty cycling: the probes the budget takes off are on, or off.
    On,
    Off,
}

/// The cost split of the busiest thread over a phase, as fractions of the phase's time, and
/// what its traps have cost it since the start, ns: launches, the calls that may go with
/// them (`gputrace_common::Shed::LaunchesAndCalls`), and the rest.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Split {
    /// Launch probes' traps, a fraction of the phase's time.
    pub launches: f64,
    /// The traps of the calls that may go with launches, a fraction of the phase's time.
    pub calls: f64,
    /// Every other probe's traps, a fraction of the phase's time.
    pub others: f64,
    /// What all its traps have cost it since its counters began, ns.
    pub spent_ns: f64,
}

impl Split {
    fn total(&self) -> f64 {
        self.launches + self.calls + self.others
    }

    /// The share `level` takes off, and the share it keeps.
    fn at(&self, level: Shed) -> (f64, f64) {
        match level {
            Shed::Launches => (self.launches, self.calls + self.others),
            Shed::LaunchesAndCalls => (self.launches + self.calls, self.others),
        }
    }
}

/// The budget's controller: pure over the counters and instants it is given.
#[derive(Debug)]
pub struct Budget {
    /// The budget, a fraction of the busiest thread's time.
    limit: f64,
    start_ns: u64,
    phase: Phase,
    phase_start_ns: u64,
    /// Hit counters at the phase's start, per thread.
    at_phase_start: BTreeMap<u32, [u64; PROBE_SLOTS]>,
    /// The on share of a period.
    duty: f64,
    /// What an off phase takes off: launches, and calls too once launches alone cannot meet
    /// the budget (for the rest of the session: its calls' rate is the job's loop's).
    pub level: Shed,
    /// Whether calls may go (false: launches only, as where calls must stay exact).
    calls_may_go: bool,
    /// Off phases begun.
    pub cycles: u64,
    /// Whether the budget cannot be met by taking probes off (the probes kept alone, or
    /// the others at the shortest duty cycle, cost more).
    pub unmet: bool,
    /// The estimated cost with the present duty cycle, a fraction of the busiest thread.
    pub estimate: f64,
    /// The share of the busiest thread the probes taken off cost while last on.
    on_shed: f64,
    /// That share over the last on phases at the present level, newest last
    /// (`planning_shed`).
    recent_shed: Vec<f64>,
    recent_level: Shed,
    /// The busiest thread's trap time and the time, over the on phases (what the traps
    /// slowed it by then: `on_share`).
    on_trap_ns: f64,
    on_ns: f64,
    /// How long the probes taken off went on firing after the last shed, ns: closing a link
    /// returns at once, but the kernel takes its probes out over a grace period or more,
    /// and the traps of that time cost the job as any other. Measured from the hits of the
    /// off phase against their rate while on; the next on phase is shortened by it.
    lingering_ns: f64,
}

impl Budget {
    /// A budget of `limit` (a fraction) from `now_ns`, when the threads' counters read
    /// `counters` (hits before it are not the first measurement's). `calls_may_go`: whether
    /// the call probes may be taken off as well as the launch probes.
    #[must_use]
    pub fn new(limit: f64, now_ns: u64, counters: &[(u32, ThreadCounters)], calls_may_go: bool) -> Self {
        Self {
            limit,
            start_ns: now_ns,
            phase: Phase::Watching,
            phase_start_ns: now_ns,
            at_phase_start: counters.iter().map(|(tid, c)| (*tid, c.hits)).collect(),
            duty: 1.0,
            level: Shed::Launches,
            calls_may_go,
            cycles: 0,
            unmet: false,
            estimate: 0.0,
            on_shed: 0.0,
            recent_shed: Vec::new(),
            recent_level: Shed::Launches,
            on_trap_ns: 0.0,
            on_ns: 0.0,
            lingering_ns: 0.0,
        }
    }

    /// The budget: the largest fraction of the busiest thread's time the traps may take.
    #[must_use]
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// The share of the busiest thread's time the traps took in the on phases.
    #[must_use]
    pub fn on_share(&self) -> f64 {
        if self.on_ns > 0.0 {
            self.on_trap_ns / self.on_ns
        } else {
            0.0
        }
    }

    /// When the next step is due.
    #[must_use]
    pub fn next_step_ns(&self) -> u64 {
        let length = match self.phase {
            Phase::Watching => WATCH_NS,
            Phase::On => (self.duty * PERIOD_NS as f64 - self.lingering_ns).max(MIN_DUTY * PERIOD_NS as f64) as u64,
            Phase::Off => ((1.0 - self.duty) * PERIOD_NS as f64) as u64,
        };
        self.phase_start_ns + length.max(1_000_000)
    }

    /// The busiest thread's trap time since the phase began, split, as fractions of it.
    /// `cost_ns[id]`: what one hit of probe `id` costs (entry and return traps).
    fn split(&self, now_ns: u64, counters: &[(u32, ThreadCounters)], cost_ns: &[f64; PROBE_SLOTS]) -> Split {
        let span = now_ns.saturating_sub(self.phase_start_ns).max(1) as f64;
        let kinds = probe_kinds();
        counters
            .iter()
            .map(|(tid, c)| {
                let before = self.at_phase_start.get(tid);
                let mut split = Split::default();
                for (id, &n) in c.hits.iter().enumerate() {
                    split.spent_ns += n as f64 * cost_ns[id];
                    let delta = n.saturating_sub(before.map_or(0, |b| b[id])) as f64 * cost_ns[id] / span;
                    match kinds[id] {
                        Kind::Launch => split.launches += delta,
                        Kind::Call => split.calls += delta,
                        Kind::Other => split.others += delta,
                    }
                }
                split
            })
            .max_by(|a, b| a.total().total_cmp(&b.total()))
            .unwrap_or_default()
    }

    /// The duty cycle for the next period: the steady one (`steady_duty`), or less while the
    /// window has spent more than its budget so far (the watch before the first measurement
    /// is paid in full), so that the whole window's cost comes back under the budget.
    fn duty_for(&mut self, on: Split, now_ns: u64) -> f64 {
        let steady = self.steady_duty(on);
        let (shed, kept) = on.at(self.level);
        if shed <= 0.0 {
            return steady;
        }
        let shed = self.planning_shed(shed);
        let steady = if steady < 1.0 { steady.min(((self.limit - kept) / shed).clamp(MIN_DUTY, 1.0)) } else { steady };
        let period = PERIOD_NS as f64;
        let allowance = self.limit * (now_ns.saturating_sub(self.start_ns) as f64 + period) - on.spent_ns;
        let catch_up = ((allowance - kept * period) / (shed * period)).clamp(MIN_DUTY, 1.0);
        let duty = steady.min(catch_up);
        if duty > MAX_DUTY {
            1.0
        } else {
            duty
        }
    }

    /// What the probes taken off are planned to cost while on: the dearest of the last
    /// `RECENT_ON_PHASES` on phases. The rate an on phase sees is the job's then: on the
    /// 2-core machine one on phase of the launch-heavy fake job read its launches at 0.10 of
    /// the thread against 0.17-0.20 in the phases around it (the job slowed, sharing its
    /// core), and planning the next on phase from it alone doubled that phase, which spent
    /// its period's budget twice. A ceiling is kept by planning for the dearer rate; a job
    /// whose rate falls for good is planned by its new rate within a few periods.
    fn planning_shed(&mut self, shed: f64) -> f64 {
        if self.recent_level != self.level {
            self.recent_shed.clear();
            self.recent_level = self.level;
        }
        if self.recent_shed.len() == RECENT_ON_PHASES {
            self.recent_shed.remove(0);
        }
        self.recent_shed.push(shed);
        self.recent_shed.iter().copied().fold(shed, f64::max)
    }

    /// The duty cycle that meets the budget at `on`'s rates (1: no shedding needed). Where
    /// launches alone cannot meet it, the calls go too, from here on.
    fn steady_duty(&mut self, on: Split) -> f64 {
        let wanted_at = |level: Shed| {
            let (shed, kept) = on.at(level);
            (shed > 0.0).then(|| (self.limit - kept) / shed)
        };
        if on.total() <= self.limit {
            self.unmet = false;
            return 1.0;
        }
        if self.level == Shed::Launches && self.calls_may_go && on.calls > 0.0 && wanted_at(Shed::Launches).is_none_or(|w| w < MIN_DUTY) {
            // Only where it pays: taking the calls off too makes their figures estimates, so
            // it must make the budget keepable, or the calls must be a good part of what
            // could go (a tiny budget against a launch storm is unmet either way).
            let keepable = wanted_at(Shed::LaunchesAndCalls).is_some_and(|w| w >= MIN_DUTY);
            if keepable || on.calls >= CALLS_WORTH_SHEDDING * (on.launches + on.calls) {
                self.level = Shed::LaunchesAndCalls;
            }
        }
        let Some(wanted) = wanted_at(self.level) else {
            self.unmet = true;
            return 1.0;
        };
        self.unmet = wanted < MIN_DUTY;
        wanted.clamp(MIN_DUTY, 1.0)
    }

    /// The probes taken off are back at `now_ns`, when the threads' counters read `counters`:
    /// the on phase is measured from here. Putting them back waits for the links still
    /// closing and attaches anew (7 ms here, more on a busy machine); measured from the step
    /// that asked for it, that time read as launches without traps, which made the shed probes
    /// look 25 % cheaper than they were and the next on phase longer by as much.
    pub fn probes_back(&mut self, now_ns: u64, counters: &[(u32, ThreadCounters)]) {
        if self.phase == Phase::On {
            self.phase_start_ns = now_ns.max(self.phase_start_ns);
            self.at_phase_start = counters.iter().map(|(tid, c)| (*tid, c.hits)).collect();
        }
    }

    /// Advance at `now_ns` (at or after [`Self::next_step_ns`]) with the kernel's counters.
    pub fn step(&mut self, now_ns: u64, counters: &[(u32, ThreadCounters)], cost_ns: &[f64; PROBE_SLOTS]) -> Action {
        if now_ns < self.next_step_ns() {
            return Action::None;
        }
        let split = self.split(now_ns, counters, cost_ns);
        let (phase, action) = match self.phase {
            Phase::Watching | Phase::On => {
                self.duty = self.duty_for(split, now_ns);
                let (shed, kept) = split.at(self.level);
                if shed > 0.0 {
                    self.on_shed = shed;
                }
                // What the traps slowed the job by where it was sampled: the on phases only
                // (a watch may hold seconds of start-up, when nothing was launched).
                if self.phase == Phase::On {
                    let span = now_ns.saturating_sub(self.phase_start_ns) as f64;
                    self.on_trap_ns += split.total() * span;
                    self.on_ns += span;
                }
                self.estimate = self.duty * shed + kept;
                log::debug!(
                    "budget step at {now_ns}: {:?} over {} ms: shed {shed:.4} kept {kept:.4} spent {:.1} ms; duty {:.4}; lingering {:.1} ms",
                    self.phase,
                    now_ns.saturating_sub(self.phase_start_ns) / 1_000_000,
                    split.spent_ns / 1e6,
                    self.duty,
                    self.lingering_ns / 1e6
                );
                if self.duty < 1.0 {
                    self.cycles += 1;
                    (Phase::Off, Action::Shed(self.level))
                } else {
                    (Phase::Watching, Action::None)
                }
            }
            // Off: what was taken off was not counted, but for the probes the kernel had not
            // taken out yet; what the others cost is seen again while on.
            Phase::Off => {
                let off_ns = now_ns.saturating_sub(self.phase_start_ns) as f64;
                let (shed, _) = split.at(self.level);
                let still_on = if self.on_shed > 0.0 { (shed / self.on_shed).clamp(0.0, 1.0) } else { 0.0 };
                self.lingering_ns = still_on * off_ns;
                (Phase::On, Action::Restore)
            }
        };
        self.phase = phase;
        self.phase_start_ns = now_ns;
        self.at_phase_start = counters.iter().map(|(tid, c)| (*tid, c.hits)).collect();
        action
    }
}

/// What a probe is to the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Launch,
    /// A call the budget may take off with the launches.
    Call,
    Other,
}

/// Each probe id's kind.
fn probe_kinds() -> [Kind; PROBE_SLOTS] {
    let mut out = [Kind::Other; PROBE_SLOTS];
    for p in PROBES {
        out[p.id as usize] = if Shed::Launches.takes(p) {
            Kind::Launch
        } else if Shed::LaunchesAndCalls.takes(p) {
            Kind::Call
        } else {
            Kind::Other
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;


    fn id_of(kind: Kind) -> usize {
        probe_kinds().iter().position(|&k| k == kind).expect("a probe of each kind")
    }

    /// A thread's counters: launches, calls the budget may take off, and other calls.
    fn counters_of(launches: u64, calls: u64, others: u64) -> Vec<(u32, ThreadCounters)> {
        let mut c = ThreadCounters { tgid: 1, drained_at_ns: 0, ..ThreadCounters::ZERO };
        c.hits[id_of(Kind::Launch)] = launches;
        c.hits[id_of(Kind::Call)] = calls;
        c.hits[id_of(Kind::Other)] = others;
        vec![(10, c)]
    }

    fn counters(launches: u64, others: u64) -> Vec<(u32, ThreadCounters)> {
        counters_of(launches, 0, others)
    }

    fn costs() -> [f64; PROBE_SLOTS] {
        [1_000.0; PROBE_SLOTS]
    }

    #[test]
    fn a_cheap_job_is_never_shed() {
        let mut b = Budget::new(0.01, 0, &[], true);
        // 1,000 launches a second at 1 µs: 0.1 % of the thread.
        assert_eq!(b.next_step_ns(), WATCH_NS);
        assert_eq!(b.step(WATCH_NS, &counters(WATCH_NS / 1_000_000, 0), &costs()), Action::None);
        assert_eq!(b.next_step_ns(), WATCH_NS + WATCH_NS);
        assert_eq!(b.cycles, 0);
        assert!((b.estimate - 0.001).abs() < 1e-9);
    }

    #[test]
    fn a_launch_bound_job_is_duty_cycled_to_the_budget_over_the_window() {
        let mut b = Budget::new(0.01, 0, &[], true);
        // 100,000 launches a second at 1 µs: 10 % of the thread; 1,000 other calls: 0.1 %.
        let (mut launches, mut others) = (0u64, 0u64);
        let mut now = 0;
        let mut run = |b: &mut Budget, until: u64, on: bool| {
            let secs = (until - now) as f64 / 1e9;
            if on {
                launches += (100_000.0 * secs) as u64;
            }
            others += (1_000.0 * secs) as u64;
            now = until;
            b.step(now, &counters(launches, others), &costs())
        };
        // The watch, paid in full (5 ms of traps in 0.05 s), then shedding at once, on for
        // less than the steady duty cycle until the window is back under its budget.
        assert_eq!(run(&mut b, WATCH_NS, true), Action::Shed(Shed::Launches));
        assert!(b.duty >= MIN_DUTY && b.duty < 0.09, "{}", b.duty);
        for _ in 0..20 {
            let off_end = b.next_step_ns();
            assert_eq!(run(&mut b, off_end, false), Action::Restore);
            let on_end = b.next_step_ns();
            assert_eq!(run(&mut b, on_end, true), Action::Shed(Shed::Launches));
        }
        // Steady: (1 % − 0.1 %) / 10 % = 9 % of each period on, and the window's cost at the budget.
        assert!((b.duty - 0.09).abs() < 1e-3, "{}", b.duty);
        let spent_s = (launches + others) as f64 * 1e-6;
        let cost = spent_s / (now as f64 / 1e9);
        assert!(cost <= 0.0102, "the window's cost {:.3}%", cost * 100.0);
        assert_eq!(b.cycles, 21);
        assert!(!b.unmet);
    }

    #[test]
    fn probes_that_linger_after_a_shed_are_paid_for_by_a_shorter_on_phase() {
        // As above, but the launch probes go on firing for the first 50 ms of each off
        // phase, as while the kernel takes them out.
        const LINGER_NS: u64 = 50_000_000;
        let mut b = Budget::new(0.01, 0, &[], true);
        let (mut launches, mut others, mut now) = (0u64, 0u64, 0u64);
        // Advance to `until`, the launch probes firing for the first `on_ns` of it.
        let mut advance = |b: &mut Budget, now: &mut u64, until: u64, on_ns: u64| {
            launches += (100_000.0 * on_ns.min(until - *now) as f64 / 1e9) as u64;
            others += (1_000.0 * (until - *now) as f64 / 1e9) as u64;
            *now = until;
            (b.step(until, &counters(launches, others), &costs()), launches + others)
        };
        assert_eq!(advance(&mut b, &mut now, WATCH_NS, WATCH_NS).0, Action::Shed(Shed::Launches));
        let mut on_lengths = Vec::new();
        for period in 0..30 {
            let off_end = b.next_step_ns();
            // A window could end here, after an off phase's lingering traps: once the watch
            // is paid back (20 ms of traps, 2 s of the budget), every period keeps it.
            let (action, spent) = advance(&mut b, &mut now, off_end, LINGER_NS);
            assert_eq!(action, Action::Restore);
            let cost = spent as f64 * 1e-6 / (now as f64 / 1e9);
            assert!(period < 12 || cost <= 0.0101, "period {period}: the window's cost {:.3}%: the lingering traps were not paid for", cost * 100.0);
            let on_end = b.next_step_ns();
            on_lengths.push(on_end - now);
            assert_eq!(advance(&mut b, &mut now, on_end, u64::MAX).0, Action::Shed(Shed::Launches));
        }
        // Steady: 9 % of a period's worth of launch traps, 5 % of it lingering: on ~40 ms.
        let last = *on_lengths.last().expect("on phases");
        assert!((30_000_000..=50_000_000).contains(&last), "the last on phase: {} ms", last / 1_000_000);
        assert!(on_lengths.iter().all(|&l| l >= (MIN_DUTY * PERIOD_NS as f64) as u64 - 1));
    }

    #[test]
    fn an_on_phase_is_measured_from_when_the_probes_are_back() {
        // As the launch-bound job above, but putting the probes back takes 30 ms after the
        // step that asks for it: the launches of that time fire no probe.
        const RESTORE_NS: u64 = 30_000_000;
        let mut b = Budget::new(0.01, 0, &[], true);
        let (mut launches, mut others, mut now) = (0u64, 0u64, 0u64);
        let mut advance = |now: &mut u64, until: u64, on: bool| {
            let secs = (until - *now) as f64 / 1e9;
            if on {
                launches += (100_000.0 * secs) as u64;
            }
            others += (1_000.0 * secs) as u64;
            *now = until;
            counters(launches, others)
        };
        let c = advance(&mut now, WATCH_NS, true);
        assert_eq!(b.step(now, &c, &costs()), Action::Shed(Shed::Launches));
        for _ in 0..20 {
            let c = advance(&mut now, b.next_step_ns(), false);
            assert_eq!(b.step(now, &c, &costs()), Action::Restore);
            let back = now + RESTORE_NS;
            let c = advance(&mut now, back, false);
            b.probes_back(now, &c);
            let c = advance(&mut now, b.next_step_ns(), true);
            assert_eq!(b.step(now, &c, &costs()), Action::Shed(Shed::Launches));
            // Each on phase saw the launches' true cost, 10 % of the thread.
            assert!((b.on_shed - 0.1).abs() < 1e-3, "the shed probes measured at {:.4}", b.on_shed);
        }
        assert!((b.duty - 0.09).abs() < 1e-3, "{}", b.duty);
        let cost = (launches + others) as f64 * 1e-6 / (now as f64 / 1e9);
        assert!(cost <= 0.0101, "the window's cost {:.3}%", cost * 100.0);
    }

    #[test]
    fn an_on_phase_that_saw_the_job_slow_does_not_lengthen_the_next() {
        // The launch-bound job, launching at half its rate in every third on phase (as when
        // it shares its core): the phases after those are planned at the full rate, and the
        // window keeps its budget at the end of every period.
        let mut b = Budget::new(0.01, 0, &[], true);
        let (mut launches, mut others, mut now) = (0u64, 0u64, 0u64);
        let mut advance = |now: &mut u64, until: u64, rate: f64| {
            let secs = (until - *now) as f64 / 1e9;
            launches += (rate * secs) as u64;
            others += (1_000.0 * secs) as u64;
            *now = until;
            (counters(launches, others), launches + others)
        };
        let (c, _) = advance(&mut now, WATCH_NS, 100_000.0);
        assert_eq!(b.step(now, &c, &costs()), Action::Shed(Shed::Launches));
        for period in 0..30 {
            let (c, _) = advance(&mut now, b.next_step_ns(), 0.0);
            assert_eq!(b.step(now, &c, &costs()), Action::Restore);
            let rate = if period % 3 == 2 { 50_000.0 } else { 100_000.0 };
            let (c, spent) = advance(&mut now, b.next_step_ns(), rate);
            assert_eq!(b.step(now, &c, &costs()), Action::Shed(Shed::Launches));
            let cost = spent as f64 * 1e-6 / (now as f64 / 1e9);
            assert!(period < 2 || cost <= 0.0101, "period {period}: the window's cost {:.3}%", cost * 100.0);
            assert!(b.duty <= 0.091, "period {period}: planned from the slow phase: duty {:.4}", b.duty);
        }
    }

    #[test]
    fn a_job_that_calms_down_gets_its_probes_back_for_good_once_the_window_is_paid_for() {
        let mut b = Budget::new(0.01, 0, &[], true);
        assert_eq!(b.step(WATCH_NS, &counters(100_000, 0), &costs()), Action::Shed(Shed::Launches));
        // Quiet from here: one launch a phase. The burst's 100 ms of traps are paid back at
        // the shortest duty cycle first (10 s at 1 %), then everything stays on.
        let mut launches = 100_000;
        let mut back_for_good = None;
        for _ in 0..30 {
            let off_end = b.next_step_ns();
            assert_eq!(b.step(off_end, &counters(launches, 0), &costs()), Action::Restore);
            launches += 1;
            let on_end = b.next_step_ns();
            if b.step(on_end, &counters(launches, 0), &costs()) == Action::None {
                back_for_good = Some(on_end);
                break;
            }
        }
        let at = back_for_good.expect("the probes come back once the window is under budget");
        assert!((9_000_000_000..=12_000_000_000).contains(&at), "back at {} s", at as f64 / 1e9);
        assert_eq!(b.next_step_ns(), at + WATCH_NS);
    }

    #[test]
    fn a_budget_the_other_probes_alone_exceed_is_said_to_be_unmet() {
        let mut b = Budget::new(0.01, 0, &[], true);
        // 20,000 other calls a second at 1 µs: 2 %, over the budget whatever launches do.
        assert_eq!(b.step(WATCH_NS, &counters(100_000, 20_000), &costs()), Action::Shed(Shed::Launches));
        assert!((b.duty - MIN_DUTY).abs() < 1e-12);
        assert!(b.unmet);
    }

    /// A loop of `.item()`: 100,000 launches and 100,000 copy-or-sync calls a second at
    /// 1 µs a hit (10 % each), and 100 allocations (0.01 %), simulated for 20 periods.
    /// Returns the controller, the last action of an on phase and the window's cost.
    fn scalar_read_loop(calls_may_go: bool) -> (Budget, Action, f64) {
        let mut b = Budget::new(0.01, 0, &[], calls_may_go);
        let (mut launches, mut calls, mut others, mut now) = (0u64, 0u64, 0u64, 0u64);
        // `off`: what is off until `until`.
        let mut run = |b: &mut Budget, until: u64, off: Option<Shed>| {
            let secs = (until - now) as f64 / 1e9;
            let counted = |off: bool| if off { 0.0 } else { 100_000.0 * secs };
            launches += counted(off.is_some()) as u64;
            calls += counted(off == Some(Shed::LaunchesAndCalls)) as u64;
            others += (100.0 * secs) as u64;
            now = until;
            b.step(now, &counters_of(launches, calls, others), &costs())
        };
        let mut last = run(&mut b, WATCH_NS, None);
        for _ in 0..20 {
            let Action::Shed(level) = last else { break };
            let off_end = b.next_step_ns();
            assert_eq!(run(&mut b, off_end, Some(level)), Action::Restore);
            let on_end = b.next_step_ns();
            last = run(&mut b, on_end, None);
        }
        let cost = (launches + calls + others) as f64 * 1e-6 / (now as f64 / 1e9);
        (b, last, cost)
    }

    #[test]
    fn a_loop_whose_calls_alone_exceed_the_budget_has_its_calls_taken_off_too() {
        let (b, last, cost) = scalar_read_loop(true);
        assert_eq!(last, Action::Shed(Shed::LaunchesAndCalls));
        // Steady: 1 % / 20 % = 5 % of each period on.
        assert!((b.duty - 0.05).abs() < 1e-3, "{}", b.duty);
        assert!(cost <= 0.0102, "the window's cost {:.3}%", cost * 100.0);
        assert!(!b.unmet);
    }

    #[test]
    fn where_calls_may_not_go_the_budget_is_said_to_be_unmet() {
        let (b, last, _) = scalar_read_loop(false);
        assert_eq!(last, Action::Shed(Shed::Launches));
        assert_eq!(b.level, Shed::Launches);
        assert!(b.unmet);
    }

    #[test]
    fn calls_too_few_to_matter_stay_on_under_a_budget_nothing_keeps() {
        // Launches 10 % of the thread, calls 0.05 %, a budget of 0.1 %: launches at the
        // shortest duty cycle already spend 0.2 %; taking the calls off too would keep
        // nothing, and their figures would become estimates.
        let mut b = Budget::new(0.001, 0, &[], true);
        let action = b.step(WATCH_NS, &counters_of(5_000, 25, 0), &costs());
        assert_eq!(action, Action::Shed(Shed::Launches));
        assert!(b.unmet);
    }

    #[test]
    fn probes_that_never_go_over_the_budget_make_it_unmet_whatever_is_taken_off() {
        let mut b = Budget::new(0.01, 0, &[], true);
        // Over the watch: launches and calls 10 % each, allocations 2 %.
        let action = b.step(WATCH_NS, &counters_of(5_000, 5_000, 1_000), &costs());
        assert_eq!(action, Action::Shed(Shed::LaunchesAndCalls));
        assert!((b.duty - MIN_DUTY).abs() < 1e-12);
        assert!(b.unmet);
    }

    #[test]
    fn steps_before_their_time_do_nothing() {
        let mut b = Budget::new(0.01, 0, &[], true);
        assert_eq!(b.step(WATCH_NS / 2, &counters(1_000_000, 0), &costs()), Action::None);
        assert_eq!(b.cycles, 0);
    }
}
