//! Training steps from the job's own rhythm. A training loop repeats the same CUDA calls every
//! step: the batch copied in, a loss read back, a synchronize. Each thread keeps the times of
//! its recurring calls (synchronizes and copies) by kind; a kind that recurs at a steady
//! period is a step marker. Memory is bounded: a few kinds per thread, the last few
//! thousand times per kind.

use std::collections::{BTreeMap, VecDeque};

/// Times kept per marker kind: the most recent ones. 4096 steps is minutes of a fast loop;
/// the period of the recent past is the one the report is about.
pub const MAX_TIMES: usize = 4096;
/// Marker kinds kept per thread. A training step makes a handful of distinct synchronizing
/// and copy calls; a thread making more kinds than this is not a simple loop, and later kinds
/// are ignored.
pub const MAX_KINDS: usize = 16;
/// Fewest repetitions of a marker that make a rhythm (intervals = repetitions − 1).
pub const MIN_REPEATS: usize = 8;
/// An interval within this relative distance of the median counts as "on the beat".
pub const TOLERANCE: f64 = 0.25;
/// Share of intervals that must be on the beat: a loader hiccup or a checkpoint every so
/// often does not break a rhythm, a marker made several times per step at uneven spacing does.
pub const ON_BEAT: f64 = 0.8;
/// The rhythm must span this share of the window, or it is a burst (warm-up, an evaluation
/// pass) rather than the job's loop.
pub const MIN_SPAN: f64 = 0.5;

/// What kind of call a marker is: the probe, and for copies the size class (log2 of the
/// bytes), so that the inputs and the labels of a batch are told apart; for synchronizes,
/// what was copied just before (0: nothing, else the direction's number and scalar-ness).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MarkerKind {
    /// The probe id of the call.
    pub probe: u32,
    /// For copies, log2 of the bytes; for synchronizes, 0 after no copy, 1 after a scalar
    /// read, else 2 plus the bulk copy's `Direction` as a number.
    pub class: u32,
}

/// One thread's recurring calls: the latest times each kind returned (monotonic ns).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Markers {
    by_kind: BTreeMap<MarkerKind, VecDeque<u64>>,
}

impl Markers {
    /// Remember that a call of `kind` returned at `ts_ns`.
    pub fn record(&mut self, kind: MarkerKind, ts_ns: u64) {
        if !self.by_kind.contains_key(&kind) && self.by_kind.len() >= MAX_KINDS {
            return;
        }
        let times = self.by_kind.entry(kind).or_default();
        if times.len() == MAX_TIMES {
            times.pop_front();
        }
        times.push_back(ts_ns);
    }

    /// Each marker kind with its times, oldest first.
    pub fn kinds(&self) -> impl Iterator<Item = (&MarkerKind, &VecDeque<u64>)> {
        self.by_kind.iter()
    }
}

/// A steady rhythm found in a marker's times.
#[derive(Clone, Debug, PartialEq)]
pub struct Rhythm {
    /// Step times (intervals between markers), sorted, in ns.
    pub intervals: Vec<u64>,
    /// The median interval in ns.
    pub median_ns: u64,
    /// Share of intervals within `TOLERANCE` of the median.
    pub on_beat: f64,
}

impl Rhythm {
    /// Mean of the intervals in ns.
    #[must_use]
    pub fn mean_ns(&self) -> f64 {
        self.intervals.iter().sum::<u64>() as f64 / self.intervals.len().max(1) as f64
    }

    /// Quantile `q` (0..1) of the intervals, nearest rank.
    #[must_use]
    pub fn quantile_ns(&self, q: f64) -> u64 {
        let n = self.intervals.len();
        let rank = ((n as f64 * q).ceil() as usize).clamp(1, n.max(1));
        self.intervals.get(rank - 1).copied().unwrap_or(0)
    }
}

/// The rhythm of `times` (ascending), if it is one: enough repetitions, most intervals near
/// the median, spanning enough of a window of `window_ns`. An interval that overlaps one of
/// `unseen` (spans when the markers' probes were off: `Evidence::calls_off`) is no step.
#[must_use]
pub fn rhythm(times: &VecDeque<u64>, window_ns: u64, unseen: &[(u64, u64)]) -> Option<Rhythm> {
    if times.len() < MIN_REPEATS || window_ns == 0 {
        return None;
    }
    let seen = |a: u64, b: u64| !unseen.iter().any(|&(off, on)| a < on && off < b);
    let mut intervals: Vec<u64> = times.iter().zip(times.iter().skip(1)).filter(|&(a, b)| seen(*a, *b)).map(|(a, b)| b.saturating_sub(*a)).collect();
    if intervals.len() + 1 < MIN_REPEATS {
        return None;
    }
    intervals.sort_unstable();
    let median_ns = intervals[intervals.len() / 2];
    if median_ns == 0 {
        return None;
    }
    let near = |d: u64| (d as f64 - median_ns as f64).abs() <= TOLERANCE * median_ns as f64;
    let on_beat = intervals.iter().filter(|&&d| near(d)).count() as f64 / intervals.len() as f64;
    let span = times.back().copied().unwrap_or(0).saturating_sub(times.front().copied().unwrap_or(0));
    (on_beat >= ON_BEAT && span as f64 >= MIN_SPAN * window_ns as f64).then_some(Rhythm { intervals, median_ns, on_beat })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(intervals: &[u64]) -> VecDeque<u64> {
        let mut t = 1_000;
        let mut out = VecDeque::from([t]);
        for d in intervals {
            t += d;
            out.push_back(t);
        }
        out
    }

    #[test]
    fn a_steady_beat_with_one_hiccup_is_a_rhythm() {
        let mut d = vec![100; 20];
        d[7] = 400; // a loader hiccup
        let r = rhythm(&times(&d), 2_500, &[]).expect("rhythm");
        assert_eq!(r.median_ns, 100);
        assert_eq!(r.quantile_ns(0.5), 100);
        assert_eq!(r.quantile_ns(1.0), 400);
        assert!((r.mean_ns() - 115.0).abs() < 1e-9);
    }

    #[test]
    fn two_markers_per_step_at_uneven_spacing_are_no_rhythm() {
        let d: Vec<u64> = (0..20).map(|i| if i % 2 == 0 { 10 } else { 190 }).collect();
        assert_eq!(rhythm(&times(&d), 2_000, &[]), None);
    }

    #[test]
    fn too_few_repeats_or_a_short_burst_are_no_rhythm() {
        assert_eq!(rhythm(&times(&[100; 6]), 600, &[]), None, "7 markers");
        assert_eq!(rhythm(&times(&[100; 20]), 10_000, &[]), None, "2000 ns of a 10000 ns window");
        assert!(rhythm(&times(&[100; 20]), 3_000, &[]).is_some());
    }

    #[test]
    fn intervals_across_a_span_the_probes_were_off_are_no_steps() {
        // Ten beats of 100, the probes off from 2_050 to 2_950 (nine beats unseen), ten more.
        let mut d = vec![100; 10];
        d.push(1_000);
        d.extend([100; 10]);
        let unseen = [(2_050, 2_950)];
        let r = rhythm(&times(&d), 3_100, &unseen).expect("rhythm");
        assert_eq!((r.intervals.len(), r.median_ns, r.quantile_ns(1.0)), (20, 100, 100));
        assert!((r.on_beat - 1.0).abs() < 1e-12);
        let all = rhythm(&times(&d), 3_100, &[]).expect("rhythm");
        assert_eq!(all.quantile_ns(1.0), 1_000, "seen as one long step without the span");
    }

    #[test]
    fn memory_is_bounded() {
        let mut m = Markers::default();
        for k in 0..(MAX_KINDS as u32 + 5) {
            for t in 0..(MAX_TIMES as u64 + 10) {
                m.record(MarkerKind { probe: k, class: 0 }, t);
            }
        }
        assert_eq!(m.kinds().count(), MAX_KINDS);
        assert!(m.kinds().all(|(_, t)| t.len() == MAX_TIMES && t.front() == Some(&10)));
    }
}
