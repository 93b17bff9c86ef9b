//! `checkpoint-stall`: every so often the loop stops while the model and optimizer state are
//! copied to the host and written out (`torch.save` in the loop). Seen as bursts of bulk
//! device-to-host copies with no launch between them (`evidence::bursts`); each costs the
//! time from its first copy to the next launch, during which the GPU has nothing queued. Its
//! fix checkpoints asynchronously and less often.

use crate::{
    detect::{
        definition::{Bearing, Definition, FoundBy, Words},
        diagnosis::{diagnosis, pct},
        rhythm::best_marker,
        whatif::Fix,
        Account,
    },
    evidence::{bursts::Burst, Evidence},
    model::{Diagnosis, DiagnosisId, Framework, TimeBucket},
    stacks::Activity,
};

/// A burst this large is a checkpoint's worth of state, not a batch of outputs.
const CHECKPOINT_BYTES: u64 = 16 << 20;
/// Periodic: at least this many checkpoints in the window.
const MIN_CHECKPOINTS: usize = 2;
/// A checkpoint is rarer than a step: bursts in at most this share of the steps (a job that
/// copies its outputs back every step is not checkpointing).
const MAX_STEP_SHARE: f64 = 0.34;

fn checkpoints(ev: &Evidence) -> Vec<Burst> {
    ev.d2h_bursts.all().into_iter().filter(|b| b.bytes >= CHECKPOINT_BYTES).collect()
}

fn detect(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let list = checkpoints(ev);
    let n = list.len();
    if n < MIN_CHECKPOINTS || a.window_s <= 0.0 {
        return None;
    }
    let cost_s = list.iter().map(|b| (b.end_ns - b.start_ns) as f64 / 1e9).sum::<f64>();
    let share = cost_s / a.window_s;
    let each_s = cost_s / n as f64;
    let mean_mib = (list.iter().map(|b| b.bytes).sum::<u64>() / n as u64) >> 20;
    let every_s = (list[n - 1].start_ns - list[0].start_ns) as f64 / 1e9 / (n - 1) as f64;
    let mut evidence = vec![
        format!("{n} bursts of bulk device-to-host copies (~{mean_mib} MiB each) with no kernel launched until each was over"),
        format!("each stopped the loop {each_s:.2} s, every {every_s:.1} s: {cost_s:.2} s in all, {} of the time, with the GPU left without work", pct(share)),
    ];
    if let Some((_, times, rhythm)) = a.time.as_ref().and_then(|t| best_marker(ev, t)) {
        let steps = times.len() as f64;
        if n as f64 > MAX_STEP_SHARE * steps {
            return None;
        }
        let median_s = rhythm.median_ns as f64 / 1e9;
        evidence.push(format!(
            "about one step in {:.0} checkpoints, and that step takes ~{:.0}× the median step of {:.1} ms",
            steps / n as f64,
            (each_s + median_s) / median_s.max(1e-9),
            median_s * 1e3
        ));
    }
    Some(diagnosis(
        DiagnosisId::CheckpointStall,
        TimeBucket::InCopies,
        share.min(a.gpu_idle_cap()),
        format!("the loop stops every {every_s:.1} s for {each_s:.2} s while ~{mean_mib} MiB of device state is copied to the host and written out"),
        evidence,
        "checkpoint asynchronously (torch.distributed.checkpoint.async_save, or copy the state into pinned memory and write it on a background thread) and less often",
    ))
}

/// The pageable copies of a checkpoint are the checkpoint's: when most pageable bytes were
/// copied by checkpoints, `pageable-copy` (whose fix is pinned input) is not the problem.
pub(crate) fn drop_pageable_of_checkpoints(found: &mut Vec<Diagnosis>, ev: &Evidence) {
    if !found.iter().any(|d| d.id == DiagnosisId::CheckpointStall) {
        return;
    }
    let in_checkpoints: u64 = checkpoints(ev).iter().map(|b| b.pageable_bytes).sum();
    let pageable = ev.copies.h2d.pageable_bytes + ev.copies.d2h.pageable_bytes;
    if pageable > 0 && in_checkpoints * 2 >= pageable {
        found.retain(|d| d.id != DiagnosisId::PageableCopy);
    }
}

fn fix(d: &Diagnosis) -> (Fix, String) {
    (Fix { cut: d.impact, ..Fix::NONE }, "an asynchronous checkpoint overlaps the training".into())
}

/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Jax, Words::Fix(
        "checkpoint asynchronously and less often (orbax.checkpoint's AsyncCheckpointer, or a CheckpointManager with async saves)",
    )),
    (Framework::Tensorflow, Words::Fix(
        "checkpoint less often and off the step: tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True)",
    )),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::CheckpointStall,
    found_by: FoundBy::Time(detect),
    stacks: Some((&[Activity::Copy], None)),
    effort: 0,
    fix: Some(|d, _, _| Some(fix(d))),
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::PcieLink],
};
