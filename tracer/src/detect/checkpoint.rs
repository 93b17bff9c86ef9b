//! `checkpoint-stall`: every so often the loop stops while the model and optimizer state are
//! copied to the host and written out (`torch.save` in the loop). Seen as periodic bursts of
//! bulk device-to-host copies (`evidence::bursts`); the cost is the bursts' time, during which
//! the GPU has nothing queued.

use super::{
    rules::{diagnosis, pct},
    Account,
};
use crate::{evidence::Evidence, report::model::{Diagnosis, Steps}};

/// A burst this large is a checkpoint's worth of state, not a batch of outputs.
const CHECKPOINT_BYTES: u64 = 16 << 20;
/// Periodic: at least this many bursts in the window.
const MIN_BURSTS: usize = 2;

pub(super) fn checkpoint_stall(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let bursts: Vec<_> = ev.d2h_bursts.all().into_iter().filter(|b| b.bytes >= CHECKPOINT_BYTES).collect();
    if bursts.len() < MIN_BURSTS || a.window_s <= 0.0 {
        return None;
    }
    let span_s: f64 = bursts.iter().map(|b| (b.end_ns - b.start_ns) as f64 / 1e9).sum();
    let share = span_s / a.window_s;
    let impact = share.min(a.gpu_idle_cap());
    let n = bursts.len();
    let mean_bytes = bursts.iter().map(|b| b.bytes).sum::<u64>() / n as u64;
    let first = bursts.first().map_or(0, |b| b.start_ns);
    let last = bursts.last().map_or(0, |b| b.start_ns);
    let every_s = (last - first) as f64 / 1e9 / (n - 1) as f64;
    Some(diagnosis(
        "checkpoint-stall",
        "in_copies",
        impact,
        format!("the loop stops every {every_s:.1} s for {:.2} s while ~{} MiB of device state is copied to the host and written out", span_s / n as f64, mean_bytes >> 20),
        vec![
            format!("{n} bursts of bulk device-to-host copies ({} MiB each on average), every {every_s:.1} s", mean_bytes >> 20),
            format!("they took {span_s:.2} s in all, {} of the time, with the GPU left without work", pct(share)),
        ],
        "checkpoint asynchronously (torch.distributed.checkpoint.async_save, or copy the state into pinned memory and write it on a background thread) and less often",
    ))
}

/// With the steps known: how many steps apart the checkpoints are, and how many steps each
/// costs.
pub(super) fn describe_in_steps(d: &mut Diagnosis, ev: &Evidence, steps: &Steps) {
    let bursts: Vec<_> = ev.d2h_bursts.all().into_iter().filter(|b| b.bytes >= CHECKPOINT_BYTES).collect();
    let (Some(first), Some(last)) = (bursts.first(), bursts.last()) else { return };
    if bursts.len() < MIN_BURSTS || steps.step_time_s.p50 <= 0.0 {
        return;
    }
    let every_s = (last.start_ns - first.start_ns) as f64 / 1e9 / (bursts.len() - 1) as f64;
    let each_s = bursts.iter().map(|b| (b.end_ns - b.start_ns) as f64 / 1e9).sum::<f64>() / bursts.len() as f64;
    d.evidence.push(format!(
        "about every {:.0} steps, one step takes {:.1}× the median step ({:.1} ms)",
        every_s * steps.per_second,
        (each_s + steps.step_time_s.p50) / steps.step_time_s.p50,
        steps.step_time_s.p50 * 1e3
    ));
}

/// The pageable copies of a checkpoint are the checkpoint's: when most pageable bytes were
/// copied in its bursts, `pageable-copy` (whose fix is pinned input) is not the problem.
pub(super) fn drop_pageable_of_checkpoints(found: &mut Vec<Diagnosis>, ev: &Evidence) {
    if !found.iter().any(|d| d.id == "checkpoint-stall") {
        return;
    }
    let in_bursts: u64 = ev.d2h_bursts.all().iter().filter(|b| b.bytes >= CHECKPOINT_BYTES).map(|b| b.pageable_bytes).sum();
    let pageable = ev.copies.h2d.pageable_bytes + ev.copies.d2h.pageable_bytes;
    if pageable > 0 && in_bursts * 2 >= pageable {
        found.retain(|d| d.id != "pageable-copy");
    }
}
