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
pub mod text;

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
    /// Kernel and graph launches per second.
    pub launches_per_s: f64,
    /// Host↔device copies per second (all directions).
    pub copies_per_s: f64,
    /// The traced window's active time, seconds.
    pub active_s: f64,
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
    /// Whether the measured speed-up is within ±20 % of the promise.
    pub held: bool,
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
    /// A run made no CUDA calls at all: there is nothing to compare it by.
    #[error("{which} ({file}) holds no kernel launches: there is nothing of the GPU to compare")]
    NoLaunches {
        /// `BEFORE` or `AFTER`.
        which: &'static str,
        /// Its file.
        file: String,
    },
}

/// A ±20 % band: how close a measured speed-up must come to a promise for it to hold (the
/// accuracy corpus judges promises by the same band, docs/accuracy.md).
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
    let (basis, speedup) = match (sb.steps_per_s, sa.steps_per_s) {
        (Some(x), Some(y)) if x > 0.0 => ("steps", y / x),
        _ => {
            notes.push(format!(
                "{} has no steps: the runs are compared by their launch rate ({:.0} → {:.0} launches/s) and copy rate ({:.0} → {:.0} copies/s), which follow the step rate only while the work per step is the same",
                if sb.steps_per_s.is_none() { "BEFORE" } else { "AFTER" },
                sb.launches_per_s,
                sa.launches_per_s,
                sb.copies_per_s,
                sa.copies_per_s
            ));
            ("launch-rate", sa.launches_per_s / sb.launches_per_s)
        }
    };
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
    let predictions = predictions(b, &gone, speedup);
    if gone.len() > 1 {
        notes.push(format!(
            "{} diagnoses went away together: the measured speed-up is theirs together, not each one's",
            gone.len()
        ));
    }
    Ok(Diff { schema: DIFF_SCHEMA, time_account: account(b, a, &sb, &sa), before: sb, after: sa, basis, speedup, predictions, gone, new, kept, notes })
}

/// A diagnosis that names a problem: `low` or worse, and not the healthy verdict.
fn is_problem(id: DiagnosisId, severity: Severity) -> bool {
    severity <= Severity::Low && !matches!(id, DiagnosisId::GpuBound | DiagnosisId::NoBottleneckFound | DiagnosisId::NoCudaWork)
}

/// Each promise of `b` whose diagnosis went away, and the best pair where both of its went.
fn predictions(b: &Report, gone: &[DiagnosisId], measured: f64) -> Vec<Prediction> {
    let held = |predicted: f64| (measured / predicted - 1.0).abs() <= HELD_WITHIN;
    let mut out: Vec<Prediction> = b
        .diagnoses
        .iter()
        .filter(|d| gone.contains(&d.id))
        .filter_map(|d| {
            let s = d.saving.as_ref()?;
            let predicted = s.speedup?;
            Some(Prediction { id: d.id.to_string(), predicted, range: s.range, measured, held: held(predicted) })
        })
        .collect();
    if let Some(pair) = b.step_model.as_ref().and_then(|m| m.best_pair.as_ref()) {
        if pair.ids.iter().all(|id| gone.contains(id)) {
            out.push(Prediction {
                id: format!("{}+{}", pair.ids[0], pair.ids[1]),
                predicted: pair.speedup,
                range: Some(pair.range),
                measured,
                held: held(pair.speedup),
            });
        }
    }
    out
}

fn side(r: &Report, source: &str) -> Side {
    let active = if r.window.active_s > 0.0 { r.window.active_s } else { r.window.duration_s };
    let c = &r.cuda.copies;
    let copies = [&c.h2d, &c.d2h, &c.d2d, &c.peer].iter().map(|d| d.count).sum::<u64>();
    let steps_per_s = r.steps.as_ref().map(|s| s.per_second).filter(|&x| x > 0.0 && x.is_finite());
    Side {
        source: source.to_owned(),
        command: r.target.command.clone(),
        verdict: r.verdict,
        steps_per_s,
        step_s: steps_per_s.map(|x| 1.0 / x),
        launches_per_s: r.cuda.launches.launch_rate_per_s,
        copies_per_s: if active > 0.0 { copies as f64 / active } else { 0.0 },
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
    let share = |t: &crate::model::TimeAccount, name: &str| t.buckets.iter().find(|x| x.name.as_str() == name).map_or(0.0, |x| x.fraction);
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
