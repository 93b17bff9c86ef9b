//! `--max-overhead` inside the live loop: measure the trap costs at the start, step the
//! controller (`budget_controller`) on its schedule, take probes off and put them back, and
//! say at the end what the budget did.

use std::time::Duration;

use super::{budget_controller, Live};
use gputrace_common::Shed;

use crate::clock;

/// A budget as a percentage again, as it was given: the fraction times 100 is not always
/// the number typed (0.0001 came back 0.00009999999999999999).
fn percent_of(limit: f64) -> f64 {
    (limit * 100.0 * 1e9).round() / 1e9
}

/// The report's view of what the budget did.
pub(super) fn budget_report(controller: &budget_controller::Budget, taken_off: &[&str], on_fraction: f64, spells_unseen: u64) -> crate::model::Sampling {
    crate::model::Sampling {
        max_overhead_pct: percent_of(controller.limit()),
        probes: taken_off.iter().map(|s| (*s).to_owned()).collect(),
        on_fraction,
        cycles: controller.cycles,
        estimated_overhead_pct: controller.estimate * 100.0,
        // Set by the report, from the window's estimate.
        met: !controller.unmet,
        achievable: !controller.unmet,
        spells_unseen,
    }
}

/// The overhead budget while it runs.
pub(super) struct Budgeting {
    pub(super) controller: budget_controller::Budget,
    /// Trap costs measured at the start (reused for the report's estimate).
    pub(super) costs: Option<crate::probes::trap_cost::TrapCosts>,
    /// Threads closing launch links taken off (a grace period each, off the loop).
    pub(super) closing: Vec<std::thread::JoinHandle<()>>,
    /// When `costs.program_ns` was last read.
    programs_read_ns: u64,
    /// The wakeups of the off phases where calls went off too (`evidence::sampled_calls`).
    wakes_off: crate::evidence::sampled_calls::WakesOff,
}

/// Whether some thread hit a caching-allocator probe and the busiest thread's traps since the
/// start (`elapsed_ns`) cost more than `limit` of it.
fn over_budget_with_blocks(counters: &[(u32, gputrace_common::ThreadCounters)], cost_ns: &[f64; gputrace_common::PROBE_SLOTS], elapsed_ns: u64, limit: f64) -> bool {
    let is_block = |id: usize| gputrace_common::spec_of(id as u32).is_some_and(|s| s.family == gputrace_common::Family::Block);
    let blocks = counters.iter().any(|(_, c)| c.hits.iter().enumerate().any(|(id, &n)| n > 0 && is_block(id)));
    let busiest = counters.iter().map(|(_, c)| c.hits.iter().zip(cost_ns).map(|(&n, &ns)| n as f64 * ns).sum::<f64>()).fold(0.0, f64::max);
    blocks && elapsed_ns > 0 && busiest > limit * elapsed_ns as f64
}

/// How often the budget re-reads what our programs cost per run (a system call a program).
const PROGRAM_COSTS_EVERY_NS: u64 = 1_000_000_000;

impl Live {
    /// Start the overhead budget: the trap costs are measured now (the controller needs
    /// them), where the launch probes can be taken off cheaply.
    pub(super) fn start_budget(&mut self, limit: f64) {
        if !self.kernel.can_shed() {
            self.notes.push(format!(
                "--max-overhead {}: not applied: taking the launch probes off and on needs multi-uprobe links (Linux ≥ 6.6), \
                 which this session does not use (tracer.uprobe_links)",
                percent_of(limit)
            ));
            return;
        }
        let costs = self.kernel.measure_trap_costs().map_err(|why| log::warn!("trap costs for the budget: {why}; 1 µs a trap assumed")).ok();
        // Calls go only in entry-and-return mode: entry-only calls cost one trap each and
        // their counts are all that mode reports, so they stay exact.
        let calls_may_go = !self.kernel.entry_only;
        let controller = budget_controller::Budget::new(limit, clock::monotonic_ns(), &self.kernel.thread_counters(), calls_may_go);
        let wakes_off = crate::evidence::sampled_calls::WakesOff::default();
        self.budget = Some(Budgeting { controller, costs, closing: Vec::new(), programs_read_ns: 0, wakes_off });
    }

    pub(super) fn budget_due(&self) -> Option<tokio::time::Instant> {
        let b = self.budget.as_ref()?;
        let wait = b.controller.next_step_ns().saturating_sub(clock::monotonic_ns());
        Some(tokio::time::Instant::now() + Duration::from_nanos(wait))
    }

    /// Measure what the probes cost since the last step; take the launch probes off or put
    /// them back as the controller says.
    pub(super) fn budget_step(&mut self) {
        let Some(b) = self.budget.as_mut() else { return };
        let now = clock::monotonic_ns();
        if let Some(c) = b.costs.as_mut().filter(|_| now.saturating_sub(b.programs_read_ns) >= PROGRAM_COSTS_EVERY_NS) {
            // The trap alone understates a call: our programs' own work is charged too.
            c.program_ns = self.kernel.program_costs();
            b.programs_read_ns = now;
        }
        let costs = crate::probes::trap_cost::hit_ns(&self.kernel.attached_libraries(), b.costs.as_ref(), self.kernel.entry_only);
        let counters = self.kernel.thread_counters();
        // The caching allocator's probes go first, and for good, once the busiest thread has
        // paid more than the budget since the start: they cost traps per tensor, and their
        // view needs every give-back, so they are not cycled with the launches.
        if !self.evidence.blocks.stopped() && over_budget_with_blocks(&counters, &costs, now.saturating_sub(self.start_ns), b.controller.limit()) {
            let links = self.kernel.take_allocators_off();
            log::info!("overhead budget: {} caching-allocator links off for good at {now} ns", links.len());
            b.closing.push(std::thread::spawn(move || crate::probes::uprobes::drop_all(links)));
            self.evidence.blocks.stop(now);
        }
        match b.controller.step(now, &counters, &costs) {
            budget_controller::Action::None => {}
            budget_controller::Action::Shed(level) => {
                // What fired since the start: a probe that never did costs nothing on.
                let mut hot = [false; gputrace_common::PROBE_SLOTS];
                for (_, c) in &counters {
                    for (h, &n) in hot.iter_mut().zip(&c.hits) {
                        *h |= n > 0;
                    }
                }
                let links = self.kernel.shed(level, &hot);
                // The monotonic clock, to lay beside a benchmark's own timeline.
                log::info!("overhead budget: {} links off at {now} ns ({level:?})", links.len());
                // Closing first: the kernel fires a link's probes until it is closed.
                b.closing.push(std::thread::spawn(move || crate::probes::uprobes::drop_all(links)));
                self.evidence.launch_probes_off(now, &counters);
                if level == Shed::LaunchesAndCalls {
                    self.evidence.call_probes_off(now);
                    b.wakes_off.off(self.kernel.wakes());
                }
            }
            budget_controller::Action::Restore => {
                // The links taken off are closed first: an old link still closing beside its
                // new one would count the same launches twice.
                for t in b.closing.drain(..) {
                    let _ = t.join();
                }
                let level = self.kernel.shed_now();
                let had_sites = self.kernel.has_off_sites();
                // Nothing went back (every file gone): launches stay unseen, and the time
                // stays off.
                if self.kernel.restore() > 0 || !had_sites {
                    // The on phase begins once the links are back, for the launches and the
                    // calls that anchor their scale alike: launches hit while the links went
                    // in were counted from the counters read before, while the syncs beside
                    // them fell in the off phase, which read 5–9 % too many launches on a
                    // machine where attaching takes a few milliseconds.
                    let back = self.kernel.thread_counters();
                    let at = clock::monotonic_ns();
                    log::info!("overhead budget: probes back at {at} ns");
                    b.controller.probes_back(at, &back);
                    self.evidence.launch_probes_on(at, &back);
                    if level == Some(Shed::LaunchesAndCalls) {
                        self.evidence.call_probes_on(at);
                        b.wakes_off.on(&self.kernel.wakes());
                    }
                }
            }
        }
    }

    /// What the budget did, once the last counters are in: launches scaled to the window.
    pub(super) fn conclude_budget(&mut self, end_ns: u64) -> Option<crate::model::Sampling> {
        let b = self.budget.as_mut()?;
        for t in b.closing.drain(..) {
            let _ = t.join();
        }
        if b.wakes_off.is_off() {
            b.wakes_off.on(&self.kernel.wakes());
        }
        let calls_on = self.evidence.scale_sampled_calls(self.start_ns, end_ns, &b.wakes_off);
        let on_fraction = self.evidence.scale_sampled_launches(self.start_ns, end_ns).unwrap_or(1.0);
        let s = budget_report(&b.controller, &self.kernel.ever_off(), on_fraction, self.evidence.spells_unseen);
        if let Some(at) = self.evidence.blocks.stopped_at_ns {
            self.notes.push(format!(
                "--max-overhead {}: the caching allocator's probes (a trap per tensor) were taken off for good {:.1} s into the window: memory.tensors and the live-memory sites cover the window up to then",
                s.max_overhead_pct,
                at.saturating_sub(self.start_ns) as f64 / 1e9
            ));
        }
        if let Some(on) = calls_on {
            // Under 400 characters, as every note (docs/cli.md says the rest).
            self.notes.push(format!(
                "--max-overhead {}: the launch, copy, memset and sync probes were on {:.1}% of the window ({} periods): their counts, \
                 bytes, times and wakeups are scaled by time from then; counts read low, as the traps (an estimated {:.0}% of the \
                 busiest thread) slowed the job then; allocation and scheduler figures are exact",
                s.max_overhead_pct,
                on * 100.0,
                s.cycles,
                b.controller.on_share() * 100.0
            ));
        } else if s.on_fraction < 1.0 {
            self.notes.push(format!(
                "--max-overhead {}: the launch probes were on {:.1}% of the window ({} periods); launch counts, launch rates and \
                 empty-queue spells are estimates scaled from then, every other count is exact",
                s.max_overhead_pct,
                s.on_fraction * 100.0,
                s.cycles
            ));
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use gputrace_common::{Family, ThreadCounters, PROBES, PROBE_SLOTS};

    use super::over_budget_with_blocks;

    #[test]
    fn the_allocators_probes_go_only_when_they_fired_and_the_busiest_thread_is_over() {
        let block = PROBES.iter().find(|p| p.family == Family::Block).expect("an allocator probe").id as usize;
        let mut costs = [0.0; PROBE_SLOTS];
        costs[block] = 1_000.0;
        costs[1] = 1_000.0;
        let mut c = ThreadCounters::ZERO;
        c.hits[1] = 20_000;
        // 20 ms of launch traps in 1 s: over a 1 % budget, but no block fired.
        assert!(!over_budget_with_blocks(&[(1, c)], &costs, 1_000_000_000, 0.01));
        c.hits[block] = 1;
        assert!(over_budget_with_blocks(&[(1, c)], &costs, 1_000_000_000, 0.01));
        assert!(!over_budget_with_blocks(&[(1, c)], &costs, 1_000_000_000, 0.05));
    }
}
