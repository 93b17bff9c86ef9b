//! `gputrace diff BEFORE AFTER`: two runs of one job, before and after a change. It says how
//! much faster (or slower) the job ran, where the main thread's time moved, which diagnoses
//! went away or appeared, and checks each prediction BEFORE made against what AFTER measured
//! ("host-sync promised ×1.50; measured ×1.42"). `--fail-below X` makes it a gate for a
//! user's CI.
//!
//! Data flows one way: `input` makes a report of each argument (a recording, replayed, or a
//! `--json` report), `compare` judges the pair (pure: unit-tested on built reports), `text`
//! renders the judgement for a person; `--json` prints it as it is.

pub mod input;
pub mod diff_text;

use serde::Serialize;

use crate::model::{severity::Severity, DiagnosisId, Report, SCHEMA};

/// The value of `schema` in every diff.
pub const DIFF_SCHEMA: &str = "gputrace.diff/1";

/// Two reports judged side by side (`gputrace.diff/1`, docs/cli.md).
#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    /// Always `gputrace.diff/1`.
    pub schema: &'static str,
    /// The run before the change.
    pub before: Side,
    /// The run after it.
    pub after: Side,
    /// What the speed-up compares: `steps` (steps per second, where both runs have steps) or
    /// `launch-rate` (kernel and graph launches per second, where either has none).
    pub basis: &'static str,
    /// After's rate over before's: above 1, the change made the job faster.
    pub speedup: f64,
    /// Each fix BEFORE promised whose diagnosis AFTER no longer has, against the speed-up
    /// measured; where two went away together, their pair as the step model simulated it.
    pub predictions: Vec<Prediction>,
    /// Diagnoses BEFORE had (`low` or worse) that AFTER has not.
    pub gone: Vec<DiagnosisId>,
    /// Diagnoses AFTER has (`low` or worse) that BEFORE had not.
    pub new: Vec<DiagnosisId>,
    /// Diagnoses both have (`low` or worse).
    pub kept: Vec<DiagnosisId>,
    /// The main thread's time account side by side, bucket by bucket.
    pub time_account: Vec<AccountRow>,
    /// What the reader should know to weigh the comparison (a changed step marker, a run with
    /// no steps, a short window).
    pub notes: Vec<String>,
}

/// One run's figures (`before`, `after`).
#[derive(Clone, Debug, Serialize)]
pub struct Side {
    /// The file the report came from.
    pub source: String,
    /// The traced command.
    pub command: String,
    /// The report's verdict.
    pub verdict: DiagnosisId,
    /// Steps per second, where the run's steps were found.
    pub steps_per_s: Option<f64>,
    /// Seconds per step, where steps were found.
    pub step_s: Option<f64>,
    /// Kernel and graph launches per second of active time.
    pub launches_per_s: f64,
    /// Kernel launches per second of active time.
    pub kernels_per_s: f64,
    /// Graph replays per second of active time.
    pub graphs_per_s: f64,
    /// Host↔device copies per second (all directions).
    pub copies_per_s: f64,
    /// The traced window's active time, seconds.
    pub active_s: f64,
}

impl Side {
    /// Its rate in words, on the diff's `basis`: steps per second (and the step's length), or
    /// launches and copies per second.
    #[must_use]
    pub fn rate(&self, basis: &str) -> String {
        match (basis, self.steps_per_s) {
            ("steps", Some(x)) => format!("{x:.1} steps/s ({:.2} ms a step)", 1e3 / x),
            _ => format!("{:.0} launches/s, {:.0} copies/s", self.launches_per_s, self.copies_per_s),
        }
    }
}

/// Diagnosis ids as a list for a person: `host-sync, launch-bound`, or `none`.
#[must_use]
pub fn ids_text(ids: &[DiagnosisId]) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

impl Prediction {
    /// Whether it held, in words.
    #[must_use]
    pub const fn verdict(&self) -> &'static str {
        match self.held {
            Some(true) => "held (within ±20 %)",
            Some(false) => "missed (off by more than 20 %)",
            None => "not checked (see the notes)",
        }
    }
}

/// A promise of BEFORE checked against AFTER.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    /// The diagnosis whose fix it was (`a+b` for a pair).
    pub id: String,
    /// The speed-up BEFORE promised for it (`saving.speedup`, or the best pair's).
    pub predicted: f64,
    /// `[low, high]` the evidence allowed, where the report gave one.
    pub range: Option<[f64; 2]>,
    /// The speed-up measured: `speedup` of the diff.
    pub measured: f64,
    /// Whether the promise is within ±20 % of the measured speed-up; null where it cannot
    /// be checked (several diagnoses went together, or the runs have no comparable steps).
    pub held: Option<bool>,
}

/// One time-account bucket in both runs.
#[derive(Clone, Debug, Serialize)]
pub struct AccountRow {
    /// The bucket (`time_account.buckets[].name`).
    pub bucket: String,
    /// Its share of the main thread's window before, 0..1.
    pub before: f64,
    /// Its share after.
    pub after: f64,
    /// Its milliseconds per step before, where the run's steps were found.
    pub before_ms_per_step: Option<f64>,
    /// Its milliseconds per step after.
    pub after_ms_per_step: Option<f64>,
}

/// Why two reports are not compared.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The reports are of versions whose fields differ in meaning.
    #[error("{which} is a `{found}` report; this gputrace compares `{SCHEMA}` reports only")]
    Schema {
        /// `BEFORE` or `AFTER`.
        which: &'static str,
        /// Its `schema`.
        found: String,
    },
    /// The runs are of two different programs.
    #[error("the runs are of two different programs ({before} before, {after} after): a diff compares one job before and after a change (pass --allow-different to compare them anyway)")]
    DifferentPrograms {
        /// Before's program.
        before: String,
        /// After's program.
        after: String,
    },
    /// Neither comparable steps nor launches of one kind: one run replays CUDA graphs and the
    /// other does not, and a step rate is missing.
    #[error("the runs have no comparable steps, and one replays CUDA graphs where the other does not: their launch rates measure different things, so there is nothing to compare them by")]
    NoCommonMeasure,
    /// A run made no CUDA calls at all: there is nothing to compare it by.
    #[error("{which} ({file}) holds no kernel launches: there is nothing of the GPU to compare")]
    NoLaunches {
        /// `BEFORE` or `AFTER`.
        which: &'static str,
        /// Its file.
        file: String,
    },
}

/// A ±20 % band: how close a promise must come to the measured speed-up to hold (the accuracy
/// corpus judges promises by the same band, docs/accuracy.md).
const HELD_WITHIN: f64 = 0.2;

/// Compare BEFORE and AFTER; `allow_different` compares runs of two programs too.
pub fn compare(before: (&Report, &str), after: (&Report, &str), allow_different: bool) -> Result<Diff, Refusal> {
    for (which, r) in [("BEFORE", before.0), ("AFTER", after.0)] {
        if r.schema != SCHEMA {
            return Err(Refusal::Schema { which, found: r.schema.clone() });
        }
    }
    let (b, a) = (before.0, after.0);
    let (pb, pa) = (program(&b.target.command), program(&a.target.command));
    if pb != pa && !allow_different {
        return Err(Refusal::DifferentPrograms { before: pb, after: pa });
    }
    let (sb, sa) = (side(b, before.1), side(a, after.1));
    for (which, s) in [("BEFORE", &sb), ("AFTER", &sa)] {
        if s.launches_per_s <= 0.0 {
            return Err(Refusal::NoLaunches { which, file: s.source.clone() });
        }
    }
    let mut notes = Vec::new();
    let (basis, speedup) = basis(&sb, &sa, &mut notes)?;
    if let (Some(mb), Some(ma)) = (b.steps.as_ref(), a.steps.as_ref()) {
        if mb.marker != ma.marker {
            notes.push(format!(
                "the steps were found by different calls ({} before, {} after): a change that moves the call the steps are found by changes what a step is",
                mb.marker, ma.marker
            ));
        }
    }
    for (which, s) in [("BEFORE", &sb), ("AFTER", &sa)] {
        if s.active_s < 2.0 {
            notes.push(format!("{which} traced only {:.1} s of activity: rates over a short window vary from run to run", s.active_s));
        }
    }
    let problems = |r: &Report| -> Vec<DiagnosisId> {
        let mut ids: Vec<DiagnosisId> = r.diagnoses.iter().filter(|d| is_problem(d.id, d.severity)).map(|d| d.id).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    };
    let (had, has) = (problems(b), problems(a));
    let gone: Vec<DiagnosisId> = had.iter().copied().filter(|id| !has.contains(id)).collect();
    let new: Vec<DiagnosisId> = has.iter().copied().filter(|id| !had.contains(id)).collect();
    let kept: Vec<DiagnosisId> = had.iter().copied().filter(|id| has.contains(id)).collect();
    let predictions = predictions(b, &gone, speedup, basis == "steps", &mut notes);
    Ok(Diff { schema: DIFF_SCHEMA, time_account: account(b, a, &sb, &sa), before: sb, after: sa, basis, speedup, predictions, gone, new, kept, notes })
}

/// A diagnosis that names a problem: `low` or worse, and not the healthy verdict.
fn is_problem(id: DiagnosisId, severity: Severity) -> bool {
    severity <= Severity::Low && !matches!(id, DiagnosisId::GpuBound | DiagnosisId::NoBottleneckFound | DiagnosisId::NoCudaWork)
}

/// Each promise of `b` whose diagnosis went away, and the best pair where both of its went.
/// A promise is checked (`held`) only against a step rate, and only where its diagnosis went
/// alone: where several went, the speed-up is theirs together, and only the step model's pair
/// is checked against it.
fn predictions(b: &Report, gone: &[DiagnosisId], measured: f64, steps: bool, notes: &mut Vec<String>) -> Vec<Prediction> {
    let mut out: Vec<Prediction> = b
        .diagnoses
        .iter()
        .filter(|d| gone.contains(&d.id))
        .filter_map(|d| {
            let s = d.saving.as_ref()?;
            let predicted = s.speedup?;
            Some(Prediction { id: d.id.to_string(), predicted, range: s.range, measured, held: Some(held(predicted, measured)) })
        })
        .collect();
    if out.len() > 1 {
        notes.push(format!(
            "{} promises went away together: the measured speed-up is theirs together, so none of them alone is checked against it",
            out.len()
        ));
        for p in &mut out {
            p.held = None;
        }
    }
    if let Some(pair) = b.step_model.as_ref().and_then(|m| m.best_pair.as_ref()) {
        if pair.ids.iter().all(|id| gone.contains(id)) {
            out.push(Prediction {
                id: format!("{}+{}", pair.ids[0], pair.ids[1]),
                predicted: pair.speedup,
                range: Some(pair.range),
                measured,
                held: Some(held(pair.speedup, measured)),
            });
        }
    }
    if !steps && !out.is_empty() {
        notes.push("the promises are speed-ups of the step; without comparable steps they are not checked".into());
        for p in &mut out {
            p.held = None;
        }
    }
    out
}

/// Whether a promise held: within ±20 % of the measured speed-up, `|predicted / measured − 1|
/// ≤ 0.2`, the band the accuracy corpus judges promises by (`xtask/src/score.rs`).
fn held(predicted: f64, measured: f64) -> bool {
    measured > 0.0 && (predicted / measured - 1.0).abs() <= HELD_WITHIN
}

/// A step rate whose launches a step moved further than this from the other run's (with no
/// graphs replayed in either) counts something else as a step: a sync read every 100 steps
/// instead of every step is still found as the step.
const STEP_LAUNCHES_APART: f64 = 2.0;

/// What the runs are compared by, and after's rate over before's.
fn basis(sb: &Side, sa: &Side, notes: &mut Vec<String>) -> Result<(&'static str, f64), Refusal> {
    let graphs = |s: &Side| s.graphs_per_s > 0.0;
    if let (Some(x), Some(y)) = (sb.steps_per_s, sa.steps_per_s) {
        let (kb, ka) = (sb.kernels_per_s / x, sa.kernels_per_s / y);
        let apart = kb.max(ka) / kb.min(ka).max(f64::MIN_POSITIVE);
        if graphs(sb) || graphs(sa) || apart <= STEP_LAUNCHES_APART {
            return Ok(("steps", y / x));
        }
        notes.push(format!(
            "the steps found hold different work ({kb:.0} kernel launches a step before, {ka:.0} after: the call they are found by now comes at another rhythm), so the runs are compared by their launch rate"
        ));
    } else {
        let which = match (sb.steps_per_s, sa.steps_per_s) {
            (None, None) => "neither run has steps",
            (None, _) => "BEFORE has no steps",
            _ => "AFTER has no steps",
        };
        notes.push(format!(
            "{which}: the runs are compared by their launch rate ({:.0} → {:.0} launches/s; copies {:.0} → {:.0}/s), which follows the step rate only while the work per step is the same",
            sb.launches_per_s, sa.launches_per_s, sb.copies_per_s, sa.copies_per_s
        ));
    }
    if graphs(sb) != graphs(sa) {
        // A graph replays many kernels in one launch: launch rates of the two kinds of run
        // measure different things.
        return Err(Refusal::NoCommonMeasure);
    }
    Ok(("launch-rate", sa.launches_per_s / sb.launches_per_s))
}

fn side(r: &Report, source: &str) -> Side {
    let active = if r.window.active_s > 0.0 { r.window.active_s } else { r.window.duration_s };
    let c = &r.cuda.copies;
    let copies = [&c.h2d, &c.d2h, &c.d2d, &c.peer].iter().map(|d| d.count).sum::<u64>();
    let steps_per_s = r.steps.as_ref().map(|s| s.per_second).filter(|&x| x > 0.0 && x.is_finite());
    // Over the active time, as the steps are: a `run` recording's start-up is not the loop's.
    let per_s = |n: f64| if active > 0.0 { n / active } else { 0.0 };
    Side {
        source: source.to_owned(),
        command: r.target.command.clone(),
        verdict: r.verdict,
        steps_per_s,
        step_s: steps_per_s.map(|x| 1.0 / x),
        launches_per_s: per_s((r.cuda.launches.kernels + r.cuda.launches.graphs) as f64),
        kernels_per_s: per_s(r.cuda.launches.kernels as f64),
        graphs_per_s: per_s(r.cuda.launches.graphs as f64),
        copies_per_s: per_s(copies as f64),
        active_s: active,
    }
}

/// The buckets of either account, in the order of before's (then after's new ones).
fn account(b: &Report, a: &Report, sb: &Side, sa: &Side) -> Vec<AccountRow> {
    let (Some(tb), Some(ta)) = (b.time_account.as_ref(), a.time_account.as_ref()) else { return Vec::new() };
    let mut names: Vec<String> = tb.buckets.iter().map(|x| x.name.to_string()).collect();
    for x in &ta.buckets {
        if !names.contains(&x.name.to_string()) {
            names.push(x.name.to_string());
        }
    }
    let share = |t: &crate::model::TimeAccountReport, name: &str| t.buckets.iter().find(|x| x.name.as_str() == name).map_or(0.0, |x| x.fraction);
    names
        .into_iter()
        .map(|name| {
            let (before, after) = (share(tb, &name), share(ta, &name));
            AccountRow {
                before_ms_per_step: sb.step_s.map(|s| before * s * 1e3),
                after_ms_per_step: sa.step_s.map(|s| after * s * 1e3),
                bucket: name,
                before,
                after,
            }
        })
        .collect()
}

/// The program a command line runs: its executable's name, or for an interpreter (python,
/// `python3 -m torch.distributed.run`, …) the script or module it runs. Two runs of one job
/// differ in arguments, seldom in this.
#[must_use]
pub fn program(command: &str) -> String {
    let mut words = command.split_whitespace();
    let Some(first) = words.next() else { return String::new() };
    let exe = first.rsplit('/').next().unwrap_or(first);
    if !exe.starts_with("python") {
        return exe.to_owned();
    }
    while let Some(w) = words.next() {
        match w {
            "-m" => return words.next().map_or_else(|| exe.to_owned(), str::to_owned),
            "-c" => return format!("{exe} -c"),
            w if w.starts_with('-') => {}
            script => return script.rsplit('/').next().unwrap_or(script).to_owned(),
        }
    }
    exe.to_owned()
}

#[cfg(test)]
mod tests;
