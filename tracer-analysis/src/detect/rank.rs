//! Which fix first: each diagnosis's fix simulated on the step model (`whatif`), its impact
//! made the share of the time that fix gives back, and the diagnoses ranked by it; equal gains
//! rank the simpler fix first. Then the pair of fixes that buys the most together.

use super::{
    diagnoses, severity,
    whatif::{describe, speedup, BestPair, Fix, StepModel},
};
use crate::model::{Diagnosis, DiagnosisId, Saving, SavingVariant};

/// Two speed-ups within this share of each other are the same promise.
const EQUAL_GAIN: f64 = 0.02;

/// Fill in each diagnosis's `saving` from the model, make its impact the share of the time
/// its fix gives back (so ranking by impact is ranking by what the fix buys), and sort.
/// `sm_over_util`: GPM's SM activity over NVML's utilization (for `small-kernels`).
/// Returns the best pair of fixes.
pub fn apply(found: &mut [Diagnosis], m: &StepModel, steps_per_s: Option<f64>, window_s: f64, sm_over_util: Option<f64>) -> Option<BestPair> {
    let mut fixes: Vec<(DiagnosisId, Fix)> = Vec::new();
    for d in found.iter_mut() {
        let definition = diagnoses::of(d.id);
        let Some((mut fix, mut why)) = definition.fix.and_then(|fix| fix(d, m, sm_over_util)) else { continue };
        // A fix with several forms is ranked by its last (`Definition::forms`), each reported.
        let forms = definition.forms.map(|forms| forms(d, m)).unwrap_or_default();
        let variants: Vec<SavingVariant> = forms
            .iter()
            .map(|(name, f, basis)| {
                let s = speedup(m, f);
                SavingVariant { name: (*name).to_owned(), speedup: s.point, range: [s.lo, s.hi], basis: basis.clone() }
            })
            .collect();
        if let Some((_, ranked, basis)) = forms.into_iter().last() {
            (fix, why) = (ranked, basis);
        }
        let s = speedup(m, &fix);
        let fraction = 1.0 - 1.0 / s.point;
        d.impact = fraction;
        d.severity = severity(fraction);
        let why = match s.workers {
            // The promise is for this many workers: fewer buy less, more buy nothing.
            Some(w) => {
                d.fix = format!("{} (num_workers={w})", d.fix.trim_end_matches('.'));
                format!("{why}, with num_workers={w} (the fewest that reach the next bound, at most one per free core; fewer buy less)")
            }
            None => why,
        };
        d.saving = Some(Saving {
            fraction,
            seconds: fraction * window_s,
            // Today's traced rate over the fixed step, a share of today's traced window.
            steps_per_s_after: steps_per_s.map(|r| if s.base > 0.0 { r * s.point / s.base } else { r * s.point }),
            basis: format!("{why}; simulated on the step model, the step is then bounded by {}", describe(s.bound)),
            speedup: Some(s.point),
            range: Some([s.lo, s.hi]),
            bound: Some(s.bound.as_str().to_owned()),
            workers: s.workers,
            variants,
        });
        fixes.push((d.id, fix));
    }
    // Equal gains (two fixes that meet the same bound): the simpler fix first.
    let effort = |d: &Diagnosis| diagnoses::effort(d.id);
    found.sort_by(|a, b| b.impact.total_cmp(&a.impact).then_with(|| effort(a).cmp(&effort(b))));
    // Gains a hair apart are one promise: the model cannot tell them apart (NVML's busy time
    // alone is known within 5 points), so the simpler fix goes first there too.
    let same_gain = |a: &Diagnosis, b: &Diagnosis| a.saving.is_some() && b.saving.is_some() && (a.impact - b.impact).abs() <= EQUAL_GAIN * (1.0 - a.impact.max(b.impact));
    let mut moved = true;
    while moved {
        moved = false;
        for i in 1..found.len() {
            if same_gain(&found[i - 1], &found[i]) && effort(&found[i]) < effort(&found[i - 1]) {
                found.swap(i - 1, i);
                moved = true;
            }
        }
    }
    let mut best: Option<BestPair> = None;
    for (i, (a, fa)) in fixes.iter().enumerate() {
        for (b, fb) in &fixes[i + 1..] {
            let s = speedup(m, &fa.and(fb));
            if best.as_ref().is_none_or(|p| s.point > p.speedup.point) {
                best = Some(BestPair { ids: [*a, *b], speedup: s });
            }
        }
    }
    // The pair in the order of the ranking: the fix to make first, first.
    let rank = |id: DiagnosisId| found.iter().position(|d| d.id == id);
    if let Some(p) = best.as_mut().filter(|p| rank(p.ids[1]) < rank(p.ids[0])) {
        p.ids.swap(0, 1);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        detect::whatif::{
            dispatch,
            model::{self, Range, Segments},
        },
        severity::Severity,
    };

    fn diagnosis(id: DiagnosisId) -> Diagnosis {
        Diagnosis { id, severity: Severity::Medium, impact: 0.2, summary: String::new(), evidence: Vec::new(), fix: String::new(), bucket: None, saving: None, sites: Vec::new() }
    }

    #[test]
    fn the_best_pair_names_its_fixes_in_the_order_of_the_ranking() {
        // Found in this order: the copies first, then the loader, whose fix buys more.
        let m = StepModel {
            idle: Segments { input_wait: 0.5, ..Segments::default() },
            serial: Segments { staging: 0.2, ..Segments::default() },
            drains: model::Drains { pageable_copies: 1.0, ..model::Drains::default() },
            gpu: Range::exact(0.2),
            dispatch: dispatch::Dispatch { share: Range::exact(0.2), ..Default::default() },
            cpus: Some(16.0),
            job_cpu: 2.0,
            workers: 1,
            workers_cpu: 1.0,
            residual: 0.1,
            ..StepModel::default()
        };
        let mut found = vec![diagnosis(DiagnosisId::PageableCopy), diagnosis(DiagnosisId::InputStarved)];
        let pair = apply(&mut found, &m, Some(10.0), 1.0, None).expect("a pair");
        assert_eq!(found[0].id, DiagnosisId::InputStarved, "{found:#?}");
        assert_eq!(pair.ids, [DiagnosisId::InputStarved, DiagnosisId::PageableCopy]);
    }

    #[test]
    fn the_loaders_fix_pins_its_batches_too() {
        // A starved loader whose batches are pageable: its fix (more workers, pin_memory=True)
        // also removes the copies' staging and the drain each pageable copy makes, and says so.
        let m = StepModel {
            idle: Segments { user: 0.1, input_wait: 0.4, ..Segments::default() },
            overlap: Segments { launch: 0.1, ..Segments::default() },
            serial: Segments { staging: 0.1, ..Segments::default() },
            drains: model::Drains { syncs: 1.0, pageable_copies: 1.0, ..model::Drains::default() },
            gpu: Range::exact(0.2),
            dispatch: dispatch::Dispatch { share: Range::exact(0.5), ..Default::default() },
            cpus: Some(16.0),
            job_cpu: 3.0,
            workers: 2,
            workers_cpu: 2.0,
            residual: 0.1,
            ..StepModel::default()
        };
        let mut found = vec![diagnosis(DiagnosisId::InputStarved)];
        let _ = apply(&mut found, &m, Some(10.0), 1.0, None);
        let s = found[0].saving.clone().expect("a saving");
        let refill_alone = speedup(&m, &Fix { refill_input: true, ..Fix::NONE }).point;
        assert!(s.speedup.expect("a speed-up") > refill_alone * 1.1, "{s:?} against {refill_alone}");
        assert!(s.basis.contains("pin_memory=True"), "{}", s.basis);
        assert!(s.workers.is_some_and(|w| w > 2), "{s:?}");
        assert!(found[0].fix.contains("num_workers="), "{}", found[0].fix);
    }

    #[test]
    fn a_churning_allocators_fixes_take_its_device_work_with_it() {
        // Launching holds half the step, allocation calls 0.45; NVML says the GPU is busy
        // 0.8 of it, GPM's SM activity 0.45 (0.5625 of the utilization): the geometric middle
        // of the two, 0.6, is the floor once the allocator stops churning. A graph's replay
        // allocates nothing, so its fix removes the calls and their device work too.
        let m = StepModel {
            overlap: Segments { launch: 0.5, alloc: 0.45, ..Segments::default() },
            gpu: Range { lo: 0.45, point: 0.8, hi: 0.85 },
            dispatch: dispatch::Dispatch { share: Range::exact(1.0), ..Default::default() },
            launches_per_step: Some(100.0),
            launch_host_s: Some(20e-6),
            alloc_calls_per_s: 1000.0,
            caching_allocator: true,
            cpus: Some(8.0),
            job_cpu: 1.0,
            ..StepModel::default()
        };
        let mut found = vec![diagnosis(DiagnosisId::AllocChurn), diagnosis(DiagnosisId::LaunchBound)];
        let _ = apply(&mut found, &m, None, 1.0, Some(0.5625));
        let speedup = |id| found.iter().find(|d| d.id == id).and_then(|d| d.saving.as_ref()?.speedup).expect("a speed-up");
        assert!((speedup(DiagnosisId::AllocChurn) - 0.95 / 0.6).abs() < 1e-9, "{found:#?}");
        assert!((speedup(DiagnosisId::LaunchBound) - 0.95 / 0.6).abs() < 1e-9, "{found:#?}");
        // Plain allocation calls (no caching allocator in the stacks) cannot be captured:
        // the graph leaves them and their device work.
        let plain = StepModel { caching_allocator: false, ..m.clone() };
        let mut found = vec![diagnosis(DiagnosisId::LaunchBound)];
        let _ = apply(&mut found, &plain, None, 1.0, Some(0.5625));
        assert!((found[0].saving.as_ref().and_then(|s| s.speedup).expect("a speed-up") - 0.95 / 0.8).abs() < 1e-9, "the GPU's 0.8: {found:#?}");
        // Without GPM the device work cannot be told apart: the floor stays NVML's.
        let mut found = vec![diagnosis(DiagnosisId::AllocChurn)];
        let _ = apply(&mut found, &m, None, 1.0, None);
        assert!((found[0].saving.as_ref().and_then(|s| s.speedup).expect("a speed-up") - 0.95 / 0.8).abs() < 1e-9, "{found:#?}");
    }

    #[test]
    fn two_fixes_that_meet_the_same_bound_rank_the_simpler_first() {
        // Launching and allocating each hold half the host's step, and the GPU is busy 75 %
        // of it: either fix alone leaves the GPU's time, so both buy the same (cache_flush on
        // the H200, docs/validation.md). Dropping the empty_cache() comes before graphs.
        let m = StepModel {
            overlap: Segments { launch: 0.5, alloc: 0.45, ..Segments::default() },
            gpu: Range::exact(0.75),
            dispatch: dispatch::Dispatch { share: Range::exact(1.0), ..Default::default() },
            launches_per_step: Some(100.0),
            launch_host_s: Some(20e-6),
            cpus: Some(8.0),
            job_cpu: 1.0,
            ..StepModel::default()
        };
        let mut found = vec![diagnosis(DiagnosisId::LaunchBound), diagnosis(DiagnosisId::AllocChurn)];
        let _ = apply(&mut found, &m, None, 1.0, None);
        assert!((found[0].impact - found[1].impact).abs() < 1e-9, "{found:#?}");
        assert_eq!(found[0].id, DiagnosisId::AllocChurn, "{found:#?}");
        // A graph also takes the host's 0.01 left in the idle phase: 1.3 % more, a hair the
        // model cannot resolve (cache_flush on the H200: 1.6196 against 1.6173).
        let mut m = m;
        m.overlap.launch = 0.49;
        m.idle.launch = 0.01;
        m.gpu = Range::exact(0.74);
        let mut found = vec![diagnosis(DiagnosisId::LaunchBound), diagnosis(DiagnosisId::AllocChurn)];
        let _ = apply(&mut found, &m, None, 1.0, None);
        let gain = |d: &Diagnosis| d.saving.as_ref().and_then(|s| s.speedup).expect("a speed-up");
        assert!(gain(&found[1]) > gain(&found[0]) && gain(&found[1]) < gain(&found[0]) * 1.02, "{found:#?}");
        assert_eq!(found[0].id, DiagnosisId::AllocChurn, "{found:#?}");
    }
}
