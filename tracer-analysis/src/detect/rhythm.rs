//! Training steps from the job's own rhythm (`evidence::steps`): among the recurring
//! synchronizes and copies of the threads on the critical path, the steady marker made most
//! often is taken as one per step, and the window's figures are divided by the steps.

use std::{borrow::Cow, collections::VecDeque};

use gputrace_common::spec_of;

use crate::{
    evidence::{
        time_account::TimeAccount,
        steps::{rhythm, MarkerKind, Rhythm},
        Evidence,
    },
    model::{PerStep, StepTime, Steps},
};

/// The step marker: among the launching threads' recurring calls with a rhythm, the one
/// made most often (a marker made once per step beats one made every tenth step), then the
/// steadier, bulk device-to-host copies last; with its times (ascending) and rhythm. Where
/// the account left a start-up out, only the times after it count: the loop's steps.
#[must_use]
pub fn best_marker<'a>(ev: &'a Evidence, time: &TimeAccount) -> Option<(&'a MarkerKind, Cow<'a, VecDeque<u64>>, Rhythm)> {
    let from = time.startup.as_ref().map(|s| s.mark.at_ns);
    best_marker_over(ev, time, from, |_| time.window_ns)
}

/// As [`best_marker`], with the times from `from_ns` on (all of them for None), each
/// marker's rhythm judged over the window `window_ns` gives for its times (a rhythm must
/// span half of it).
#[must_use]
pub fn best_marker_over<'a>(
    ev: &'a Evidence,
    time: &TimeAccount,
    from_ns: Option<u64>,
    window_ns: impl Fn(&VecDeque<u64>) -> u64,
) -> Option<(&'a MarkerKind, Cow<'a, VecDeque<u64>>, Rhythm)> {
    // Bulk D2H copies that come in clusters (a checkpoint copying tensor after tensor) keep a
    // beat of their own that is no step.
    let clustered = {
        let bursts = ev.d2h_bursts.all();
        !bursts.is_empty() && bursts.iter().map(|b| b.copies).sum::<u64>() >= 2 * bursts.len() as u64
    };
    let since = |times: &'a VecDeque<u64>| -> Cow<'a, VecDeque<u64>> {
        match from_ns {
            Some(from) => Cow::Owned(times.iter().copied().filter(|&t| t >= from).collect()),
            None => Cow::Borrowed(times),
        }
    };
    time.threads
        .iter()
        .filter_map(|tid| ev.threads.get(tid))
        .flat_map(|t| t.markers.kinds())
        .filter(|(kind, _)| !(clustered && bulk_d2h(**kind)))
        .map(|(kind, times)| (kind, since(times)))
        .filter_map(|(kind, times)| rhythm(&times, window_ns(&times), &ev.calls_off).map(|r| (kind, times, r)))
        .max_by(|a, b| {
            (!bulk_d2h(*a.0), a.1.len()).cmp(&(!bulk_d2h(*b.0), b.1.len())).then(a.2.on_beat.total_cmp(&b.2.on_beat))
        })
}

/// A bulk device-to-host copy: a step marker only as a last resort, since a checkpoint's
/// copies recur at a steady pace of their own (one tensor after another) and would pass for
/// steps.
fn bulk_d2h(kind: MarkerKind) -> bool {
    let bulk = 1u64 << kind.class >= crate::evidence::bursts::BULK_BYTES;
    bulk && spec_of(kind.probe).is_some_and(|s| s.family == gputrace_common::Family::Copy && s.copy == gputrace_common::CopyDir::DeviceToHost)
}

/// The job's steps, if its critical path keeps a steady rhythm; None otherwise.
#[must_use]
pub fn find(ev: &Evidence, time: &TimeAccount) -> Option<Steps> {
    let window_ns = time.window_ns;
    let (kind, times, r) = best_marker(ev, time)?;
    let markers = times.len();
    let mean_ns = r.mean_ns();
    let steps = window_ns as f64 / mean_ns;
    // Counted from the end of the start-up, where the account left one out.
    let startup = time.startup.as_ref();
    let on_path = |f: fn(&crate::evidence::ThreadStats) -> u64, before: fn(&crate::evidence::time_account::SkippedStartUp, u32) -> u64| -> f64 {
        time.threads
            .iter()
            .filter_map(|tid| ev.threads.get(tid).map(|t| f(t).saturating_sub(startup.map_or(0, |s| before(s, *tid)))))
            .sum::<u64>() as f64
    };
    let bytes = |total: u64, before: fn(&crate::evidence::timeline::Mark) -> u64| total.saturating_sub(startup.map_or(0, |s| before(&s.mark))) as f64;
    let symbol = spec_of(kind.probe).map_or("?", |s| s.symbol);
    let what = match (spec_of(kind.probe).map(|s| s.family), kind.class) {
        (Some(gputrace_common::Family::Sync), 0) => symbol.to_owned(),
        (Some(gputrace_common::Family::Sync), 1) => format!("{symbol} after a scalar read"),
        (Some(gputrace_common::Family::Sync), _) => format!("{symbol} after a bulk copy"),
        _ => format!("{symbol} of {}–{} bytes", 1u64 << kind.class, u64::MAX >> 63u32.saturating_sub(kind.class)),
    };
    Some(Steps {
        marker: what,
        markers,
        on_beat: r.on_beat,
        per_second: 1e9 / mean_ns,
        step_time_s: StepTime { mean: mean_ns / 1e9, p50: r.quantile_ns(0.5) as f64 / 1e9, p95: r.quantile_ns(0.95) as f64 / 1e9 },
        per_step: PerStep {
            launches: on_path(|t| t.kernel_launches() + t.graph_launches(), crate::evidence::time_account::SkippedStartUp::launches_before) / steps,
            syncs: on_path(|t| t.syncs, crate::evidence::time_account::SkippedStartUp::syncs_before) / steps,
            h2d_bytes: bytes(ev.copies.h2d.bytes, |m| m.h2d_bytes) / steps,
            d2h_bytes: bytes(ev.copies.d2h.bytes, |m| m.d2h_bytes) / steps,
            input_wait_s: time.sleeping_ns as f64 / 1e9 / steps,
            gpu_wait_s: time.waiting_on_gpu_ns as f64 / 1e9 / steps,
        },
    })
}
