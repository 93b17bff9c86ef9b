//! `checkpoint-stall`: every so often the loop stops while the model and optimizer state are
//! copied to the host and written out (`torch.save` in the loop). Seen as bursts of bulk
//! device-to-host copies (`evidence::bursts`), grouped by step where the steps are known; the
//! cost of each is how much longer its step took than the median step (the file writes
//! included), or the burst's own time where there are no steps.

use super::{
    rules::{diagnosis, pct},
    steps::best_marker,
    Account,
};
use crate::{evidence::Evidence, report::model::Diagnosis};

/// A burst this large is a checkpoint's worth of state, not a batch of outputs.
const CHECKPOINT_BYTES: u64 = 16 << 20;
/// Periodic: at least this many checkpoints in the window.
const MIN_CHECKPOINTS: usize = 2;
/// Without steps, bulk copies this close together are one checkpoint.
const NO_STEPS_GAP_NS: u64 = 50_000_000;

/// One checkpoint: when, how much, what it cost, and in which step.
struct Stall {
    start_ns: u64,
    bytes: u64,
    pageable_bytes: u64,
    cost_ns: u64,
    /// The step's index among the markers kept, and the step's length.
    step: Option<(usize, u64)>,
}

/// The checkpoints of the window, and the median step where the steps are known.
fn stalls(ev: &Evidence, a: &Account) -> (Vec<Stall>, Option<u64>) {
    let marker = a.time.as_ref().and_then(|t| best_marker(ev, t));
    let breaks: Vec<u64> = marker.as_ref().map(|(_, times, _)| times.iter().copied().collect()).unwrap_or_default();
    let gap = if marker.is_some() { u64::MAX } else { NO_STEPS_GAP_NS };
    let median = marker.as_ref().map(|(_, _, r)| r.median_ns);
    let stalls = ev
        .bulk_d2h
        .bursts(&breaks, gap)
        .into_iter()
        .filter(|b| b.bytes >= CHECKPOINT_BYTES)
        .map(|b| {
            let span = b.end_ns - b.start_ns;
            let before = breaks.partition_point(|&t| t <= b.start_ns);
            let after = breaks.partition_point(|&t| t < b.end_ns);
            let step = match (before.checked_sub(1).and_then(|i| breaks.get(i)), breaks.get(after)) {
                (Some(&from), Some(&to)) => Some((before, to - from)),
                _ => None,
            };
            let cost_ns = match (step, median) {
                (Some((_, len)), Some(m)) => len.saturating_sub(m).max(span),
                _ => span,
            };
            Stall { start_ns: b.start_ns, bytes: b.bytes, pageable_bytes: b.pageable_bytes, cost_ns, step }
        })
        .collect();
    (stalls, median)
}

pub(super) fn checkpoint_stall(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let (stalls, median) = stalls(ev, a);
    let n = stalls.len();
    if n < MIN_CHECKPOINTS || a.window_s <= 0.0 {
        return None;
    }
    let cost_s = stalls.iter().map(|s| s.cost_ns as f64 / 1e9).sum::<f64>();
    let share = cost_s / a.window_s;
    let mean_mib = stalls.iter().map(|s| s.bytes).sum::<u64>() / n as u64 >> 20;
    let (first, last) = (stalls[0].start_ns, stalls[n - 1].start_ns);
    let every_s = (last - first) as f64 / 1e9 / (n - 1) as f64;
    let mut evidence = vec![format!("{n} checkpoints of ~{mean_mib} MiB copied from the device, every {every_s:.1} s, costing {cost_s:.2} s ({} of the time) with the GPU left without work", pct(share))];
    let in_steps: Vec<(usize, u64)> = stalls.iter().filter_map(|s| s.step).collect();
    if let (Some(m), false) = (median, in_steps.is_empty()) {
        let steps: Vec<String> = in_steps.iter().take(5).map(|(i, _)| i.to_string()).collect();
        let longest = in_steps.iter().map(|&(_, len)| len).max().unwrap_or(0);
        let apart = in_steps.windows(2).map(|w| (w[1].0 - w[0].0) as f64).sum::<f64>() / (in_steps.len().max(2) - 1) as f64;
        evidence.push(format!(
            "steps {}{} (every ~{apart:.0} steps) took up to {:.0}× the median step of {:.1} ms",
            steps.join(", "),
            if in_steps.len() > 5 { ", …" } else { "" },
            longest as f64 / m.max(1) as f64,
            m as f64 / 1e6
        ));
    }
    Some(diagnosis(
        "checkpoint-stall",
        "in_copies",
        share.min(a.gpu_idle_cap()),
        format!("the loop stops every {every_s:.1} s for {:.2} s while ~{mean_mib} MiB of device state is copied to the host and written out", cost_s / n as f64),
        evidence,
        "checkpoint asynchronously (torch.distributed.checkpoint.async_save, or copy the state into pinned memory and write it on a background thread) and less often",
    ))
}

/// The pageable copies of a checkpoint are the checkpoint's: when most pageable bytes were
/// copied by checkpoints, `pageable-copy` (whose fix is pinned input) is not the problem.
pub(super) fn drop_pageable_of_checkpoints(found: &mut Vec<Diagnosis>, ev: &Evidence, a: &Account) {
    if !found.iter().any(|d| d.id == "checkpoint-stall") {
        return;
    }
    let in_checkpoints: u64 = stalls(ev, a).0.iter().map(|s| s.pageable_bytes).sum();
    let pageable = ev.copies.h2d.pageable_bytes + ev.copies.d2h.pageable_bytes;
    if pageable > 0 && in_checkpoints * 2 >= pageable {
        found.retain(|d| d.id != "pageable-copy");
    }
}
