//! The job's start-up, left out of the time account. Under `gputrace run` the window holds
//! what the job does between its first CUDA call and its training loop: libraries read from
//! disk as they load, a dataset opened, a helper process answering once, the first steps'
//! compilation and autotuning. Charged to the loop, such one-off waits read as a step's
//! bottleneck (on the H200, Lightning's start-up made an `io-stall` the first fix: 537 MB read
//! once; docs/validation.md). The step rhythm says where the loop begins: the first of
//! `MIN_REPEATS` markers in a row on the beat. The account then counts from the last mark of
//! the timeline a step before it (`evidence::timeline`, every 50 ms live): never later than
//! the loop's start, so a start-up shorter than the marks' spacing stays in, and no step is
//! left out.

use crate::evidence::{
    steps::{MAX_TIMES, MIN_REPEATS, TOLERANCE},
    time_account::TimeAccount,
    timeline::Mark,
    Evidence,
};

/// The job's account over the window, from the end of its start-up where one was found.
#[must_use]
pub fn account(ev: &Evidence, start_ns: u64, end_ns: u64) -> Option<TimeAccount> {
    let whole = TimeAccount::critical_path(ev, start_ns, end_ns)?;
    match loop_start(ev, &whole) {
        Some(mark) => TimeAccount::critical_path_since(ev, start_ns, end_ns, Some(mark)).or(Some(whole)),
        None => Some(whole),
    }
}

/// The last mark before the first step on the beat, where it lies inside the stretch
/// accounted (`whole.span`).
fn loop_start<'a>(ev: &'a Evidence, whole: &TimeAccount) -> Option<&'a Mark> {
    // Counts scaled from the overhead budget's on phases cannot be split at a moment.
    if !ev.launches_off.is_empty() || !ev.calls_off.is_empty() {
        return None;
    }
    // A marker's rhythm is judged from its first time to the end of the stretch (a long
    // start-up would otherwise leave too little of the stretch to the steps for them to
    // count as the job's): the steps must span half of that. The loop need not last to the
    // end: a job winds down after it (Lightning's teardown makes CUDA calls of its own).
    let end = whole.span.1;
    let (_, times, rhythm) = super::rhythm::best_marker_over(ev, whole, None, |times| end.saturating_sub(times.front().copied().unwrap_or(end)))?;
    // The first markers were forgotten: where the loop began is not known.
    if times.len() >= MAX_TIMES {
        return None;
    }
    let period = rhythm.median_ns as f64;
    let on_beat = |a: u64, b: u64| ((b.saturating_sub(a)) as f64 - period).abs() <= TOLERANCE * period;
    // The loop has begun where MIN_REPEATS steps in a row keep the beat: a start-up may hold
    // a few markers at the loop's pace (a sanity check's batches, a warm-up step or two).
    let beats: Vec<bool> = times.iter().zip(times.iter().skip(1)).map(|(&a, &b)| on_beat(a, b)).collect();
    const { assert!(MIN_REPEATS >= 2, "a run of intervals") };
    let run = MIN_REPEATS - 1;
    let first = (0..beats.len().saturating_sub(run - 1)).find(|&i| beats[i..i + run].iter().all(|&b| b)).and_then(|i| times.get(i).copied())?;
    // The marker may end a step rather than begin one: a period earlier is the latest the
    // loop can have begun.
    let loop_from = first.saturating_sub(rhythm.median_ns);
    // Within a step of the stretch's start the job may be in its first step already: a
    // start-up is at least a period long.
    ev.timeline.at_or_before(loop_from).filter(|m| m.at_ns > whole.span.0.saturating_add(rhythm.median_ns))
}

#[cfg(test)]
mod tests {
    use gputrace_common::ThreadCounters;

    use super::*;
    use crate::evidence::{
        sched_io::SchedStats,
        steps::MarkerKind,
        timeline::{Mark, ThreadMark},
    };

    const MS: u64 = 1_000_000;

    fn sync_kind() -> MarkerKind {
        let probe = gputrace_common::PROBES.iter().find(|p| p.symbol == "cuStreamSynchronize").expect("probed").id;
        MarkerKind { probe, class: 0 }
    }

    /// One thread over 10 s: blocked on the disk from 0.5 s to 2 s, a sanity check's three
    /// steps at the loop's pace at 0.1–0.3 s, and the loop's 100 ms steps from 3 s to the
    /// end; the timeline marked every 500 ms.
    fn job(marked: bool) -> Evidence {
        let mut ev = Evidence::default();
        let mut c = ThreadCounters { tgid: 1, drained_at_ns: 0, ..ThreadCounters::ZERO };
        c.hits[1] = 7_000;
        ev.add_counters(1, &c);
        let t = ev.threads.get_mut(&1).expect("thread");
        t.syncs = 73;
        for at in [100, 200, 300].into_iter().chain((0..=70).map(|k| 3_000 + 100 * k)) {
            t.markers.record(sync_kind(), at * MS);
        }
        let blocked = |at: u64| at.saturating_sub(500 * MS).min(1_500 * MS);
        ev.sched.insert(1, SchedStats { pid: 1, on_cpu_ns: 8_500 * MS, blocked_ns: 1_500 * MS, ..SchedStats::default() });
        for at in (1..20).map(|k| k * 500 * MS).filter(|_| marked) {
            let sched = SchedStats { pid: 1, on_cpu_ns: at - blocked(at), blocked_ns: blocked(at), ..SchedStats::default() };
            let kernels = at.saturating_sub(3_000 * MS) / MS;
            let thread = ThreadMark { tid: 1, sched: Some(sched), kernels, syncs: 3 + kernels / 100, ..ThreadMark::default() };
            ev.timeline.push(Mark { at_ns: at, threads: vec![thread], ..Mark::default() });
        }
        ev
    }

    #[test]
    fn a_start_up_ends_where_the_steps_keep_their_beat_and_its_waits_leave_the_account() {
        let a = account(&job(true), 0, 10_000 * MS).expect("an account");
        let s = a.startup.as_ref().expect("a start-up");
        // The last mark a step before the loop's first step (3 s): 2.5 s. The sanity check's
        // three steps on the beat were not the loop.
        assert_eq!((s.from_ns, s.mark.at_ns), (0, 2_500 * MS));
        assert_eq!(a.window_ns, 7_500 * MS);
        assert_eq!(a.io_wait_ns, 0, "{a:?}");
        assert_eq!(a.launching_and_host_ns, 7_500 * MS);
        assert_eq!(s.launches_before(1), 0);
        // Without marks, the read is a sixth of the window's time.
        let whole = account(&job(false), 0, 10_000 * MS).expect("an account");
        assert!(whole.startup.is_none());
        assert_eq!(whole.io_wait_ns, 1_500 * MS);
    }

    #[test]
    fn a_loop_on_the_beat_from_the_start_has_no_start_up() {
        let mut ev = job(true);
        let t = ev.threads.get_mut(&1).expect("thread");
        t.markers = crate::evidence::steps::Markers::default();
        for k in 0..100 {
            t.markers.record(sync_kind(), (50 + 100 * k) * MS);
        }
        assert!(account(&ev, 0, 10_000 * MS).expect("an account").startup.is_none());
    }

    /// On the H200, Lightning's teardown made CUDA calls after its last step; a rule that
    /// wanted the loop to last to the stretch's end found no start-up in any of its runs.
    #[test]
    fn a_wind_down_after_the_loop_stays_and_the_start_up_still_goes() {
        let mut ev = job(true);
        let t = ev.threads.get_mut(&1).expect("thread");
        t.markers = crate::evidence::steps::Markers::default();
        for at in [100, 200, 300].into_iter().chain((0..=60).map(|k| 3_000 + 100 * k)) {
            t.markers.record(sync_kind(), at * MS);
        }
        let a = account(&ev, 0, 10_000 * MS).expect("an account");
        assert_eq!(a.startup.as_ref().map(|s| s.mark.at_ns), Some(2_500 * MS));
        assert_eq!(a.window_ns, 7_500 * MS, "the wind-down (9–10 s) is still the job's");
    }

    #[test]
    fn steps_in_a_burst_early_in_a_long_stretch_are_no_loop() {
        let mut ev = job(true);
        let t = ev.threads.get_mut(&1).expect("thread");
        t.markers = crate::evidence::steps::Markers::default();
        for k in 0..=20 {
            t.markers.record(sync_kind(), (1_000 + 100 * k) * MS);
        }
        assert!(account(&ev, 0, 10_000 * MS).expect("an account").startup.is_none());
    }
}
