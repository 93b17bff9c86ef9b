//! The scoring of `cargo xtask accuracy` (docs/accuracy.md): one job's report against its
//! twins' measured speed-ups, and a set's scores. Pure, so its unit tests run with the
//! workspace's (`cargo test --lib`).

use anyhow::{Context as _, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// How close a twin must come to the fastest for a verdict that chose it to be right.
const VERDICT_WITHIN: f64 = 0.10;
/// How close a promise must come to its twin's measured speed-up.
const PROMISE_WITHIN: f64 = 0.20;
/// A job whose fastest twin gains less than this is healthy: nothing measured helps it.
const HEALTHY_BELOW: f64 = 1.10;
/// Verdicts that say the job has no problem to fix.
const HEALTHY_VERDICTS: [&str; 2] = ["gpu-bound", "no-bottleneck-found"];

/// The twins that apply each diagnosis's fix (validation/gpu/corpus.py names and builds them).
/// A diagnosis with several is judged by the fastest of those its job has: host-bound's fix
/// (move the host work away) is the bookkeeping's or the loader's, by its sites.
fn twins_of(id: &str) -> &'static [&'static str] {
    match id {
        "launch-bound" => &["graph"],
        "host-sync" => &["lognth"],
        "host-bound" | "host-sleep" => &["nobook", "workers"],
        "input-starved" => &["workers"],
        "pageable-copy" | "blocking-copy" => &["pinned"],
        "alloc-churn" => &["nochurn"],
        "cpu-starved" => &["alone"],
        "checkpoint-stall" | "io-stall" => &["nockpt"],
        _ => &[],
    }
}

/// One job judged.
#[derive(Debug)]
pub struct Judged {
    /// The job's seed.
    pub seed: u64,
    /// Its planted causes, `+`-joined (empty: none planted).
    pub causes: String,
    /// The report's verdict.
    pub verdict: String,
    /// The verdict's twin and its speed-up, where it has one.
    pub verdict_twin: Option<(String, f64)>,
    /// The fastest single-fix twin and its speed-up.
    pub best: (String, f64),
    /// Whether no twin speeds the job up by 10 %.
    pub healthy: bool,
    /// Whether the first fix is right.
    pub verdict_right: bool,
    /// Each twin: (twin, promised, measured, within ±20 %).
    pub promises: Vec<(String, f64, f64, bool)>,
    /// Diagnoses promising more than the all-fixed twin measured (beyond the band).
    pub over_all_fixed: Vec<String>,
    /// A healthy job with a `high` or `medium` problem.
    pub false_alarm: bool,
    /// The recording's format version (0: the report did not say).
    pub format_version: u64,
}

/// A set's scores, as scores.json keeps them.
#[derive(Default, Clone, Copy, PartialEq, Debug)]
pub struct Scores {
    /// Jobs judged.
    pub jobs: u64,
    /// Of them, those whose first fix is right.
    pub verdict_right: u64,
    /// Twins whose promise was checked.
    pub promises: u64,
    /// Of them, those within ±20 %.
    pub promises_within: u64,
    /// Promises above the all-fixed twin (beyond the band).
    pub over_all_fixed: u64,
    /// Healthy jobs (no twin gains 10 %).
    pub healthy: u64,
    /// Healthy jobs that were given an alarm.
    pub false_alarms: u64,
}

impl Scores {
    /// Count one judged job in.
    pub fn add(&mut self, j: &Judged) {
        self.jobs += 1;
        self.verdict_right += u64::from(j.verdict_right);
        self.promises += j.promises.len() as u64;
        self.promises_within += j.promises.iter().filter(|p| p.3).count() as u64;
        self.over_all_fixed += j.over_all_fixed.len() as u64;
        self.healthy += u64::from(j.healthy);
        self.false_alarms += u64::from(j.false_alarm);
    }

    /// `n` of `of`, 1 where `of` is 0.
    #[must_use]
    pub fn rate(n: u64, of: u64) -> f64 {
        if of == 0 { 1.0 } else { n as f64 / of as f64 }
    }

    /// As scores.json keeps them.
    #[must_use]
    pub fn to_json(self) -> Value {
        json!({"jobs": self.jobs, "verdict_right": self.verdict_right, "promises": self.promises,
               "promises_within": self.promises_within, "over_all_fixed": self.over_all_fixed,
               "healthy": self.healthy, "false_alarms": self.false_alarms})
    }

    /// From scores.json (missing figures read as 0).
    #[must_use]
    pub fn from_json(v: &Value) -> Self {
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        Self {
            jobs: n("jobs"),
            verdict_right: n("verdict_right"),
            promises: n("promises"),
            promises_within: n("promises_within"),
            over_all_fixed: n("over_all_fixed"),
            healthy: n("healthy"),
            false_alarms: n("false_alarms"),
        }
    }

    /// The scores in one line, for the log.
    #[must_use]
    pub fn line(self) -> String {
        format!(
            "first fix right {}/{} ({:.0} %), promises within ±20 % {}/{} ({:.0} %), above all-fixed {}, false alarms {} of {} healthy",
            self.verdict_right,
            self.jobs,
            100.0 * Self::rate(self.verdict_right, self.jobs),
            self.promises_within,
            self.promises,
            100.0 * Self::rate(self.promises_within, self.promises),
            self.over_all_fixed,
            self.false_alarms,
            self.healthy
        )
    }

    /// What fell since `recorded`: rates for the shares, counts per job for the rest, and the
    /// jobs themselves (a corpus that lost a job, whose rates would rise, has dropped).
    #[must_use]
    pub fn drops(self, recorded: Self) -> Vec<String> {
        let mut out = Vec::new();
        if self.jobs < recorded.jobs {
            out.push(format!("{} jobs judged, {} recorded: a job left the corpus", self.jobs, recorded.jobs));
        }
        let eps = 1e-9;
        if Self::rate(self.verdict_right, self.jobs) + eps < Self::rate(recorded.verdict_right, recorded.jobs) {
            out.push(format!("first fix right {}/{}, recorded {}/{}", self.verdict_right, self.jobs, recorded.verdict_right, recorded.jobs));
        }
        if Self::rate(self.promises_within, self.promises) + eps < Self::rate(recorded.promises_within, recorded.promises) {
            out.push(format!("promises within ±20 % {}/{}, recorded {}/{}", self.promises_within, self.promises, recorded.promises_within, recorded.promises));
        }
        if Self::rate(self.over_all_fixed, self.jobs) > Self::rate(recorded.over_all_fixed, recorded.jobs) + eps {
            out.push(format!("promises above the all-fixed twin {}, recorded {}", self.over_all_fixed, recorded.over_all_fixed));
        }
        if Self::rate(self.false_alarms, self.healthy.max(1)) > Self::rate(recorded.false_alarms, recorded.healthy.max(1)) + eps {
            out.push(format!("false alarms {} of {}, recorded {} of {}", self.false_alarms, self.healthy, recorded.false_alarms, recorded.healthy));
        }
        out
    }
}

/// Judge one job: its twins' measurements (its `jobs/SEED.json`) and its report.
///
/// # Errors
/// Where either lacks what it is judged by.
pub fn judge(seed: u64, twins: &Value, report: &Value) -> Result<Judged> {
    let measured: BTreeMap<String, f64> = twins["twins"]
        .as_object()
        .context("no `twins` in the job's file")?
        .iter()
        .filter_map(|(name, t)| Some((name.clone(), t["speedup"].as_f64()?)))
        .collect();
    let all_fixed = measured.get("allfixed").copied();
    let best = measured
        .iter()
        .filter(|(name, _)| name.as_str() != "allfixed")
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or(("none".to_owned(), 1.0), |(n, &x)| (n.clone(), x));
    // Healthy: no fix helps, alone or all together.
    let healthy = best.1 < HEALTHY_BELOW && all_fixed.is_none_or(|x| x < HEALTHY_BELOW);
    let diagnoses = report["diagnoses"].as_array().context("no `diagnoses` in the report")?;
    let promise = |d: &Value| d["saving"]["speedup"].as_f64();
    let twin_of = |id: &str| -> Option<(String, f64)> {
        twins_of(id).iter().filter_map(|t| measured.get(*t).map(|&x| ((*t).to_owned(), x))).max_by(|a, b| a.1.total_cmp(&b.1))
    };
    let verdict = report["verdict"].as_str().unwrap_or("").to_owned();
    let verdict_twin = twin_of(&verdict);
    let verdict_right = if healthy {
        HEALTHY_VERDICTS.contains(&verdict.as_str())
    } else {
        verdict_twin.as_ref().is_some_and(|(_, x)| *x >= best.1 * (1.0 - VERDICT_WITHIN))
    };
    // Each measured twin against the largest promise of the diagnoses its fix answers.
    let promises = measured
        .iter()
        .filter(|(name, _)| name.as_str() != "allfixed")
        .map(|(name, &x)| {
            let promised = diagnoses
                .iter()
                .filter(|d| d["id"].as_str().is_some_and(|id| twins_of(id).contains(&name.as_str())))
                .filter_map(promise)
                .fold(1.0_f64, f64::max);
            (name.clone(), promised, x, (promised / x - 1.0).abs() <= PROMISE_WITHIN)
        })
        .collect();
    let over_all_fixed = all_fixed.map_or_else(Vec::new, |cap| {
        diagnoses
            .iter()
            .filter(|d| promise(d).is_some_and(|p| p > cap * (1.0 + PROMISE_WITHIN)))
            .map(|d| format!("{} ×{:.2} > all-fixed ×{cap:.2}", d["id"].as_str().unwrap_or("?"), promise(d).unwrap_or(0.0)))
            .collect()
    });
    let alarm = |d: &&Value| {
        let id = d["id"].as_str().unwrap_or("");
        matches!(d["severity"].as_str(), Some("high" | "medium")) && !HEALTHY_VERDICTS.contains(&id) && id != "no-cuda-work"
    };
    // A false alarm is a `high` or `medium` problem on a healthy job (a wrong verdict there is
    // already counted by `verdict_right`).
    let false_alarm = healthy && diagnoses.iter().any(|d| alarm(&d));
    Ok(Judged {
        seed,
        causes: twins["job"]["causes"].as_array().map_or_else(String::new, |c| c.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("+")),
        verdict,
        verdict_twin,
        best,
        healthy,
        verdict_right,
        promises,
        over_all_fixed,
        false_alarm,
        format_version: report["tracer"]["recording"]["format_version"].as_u64().unwrap_or(0),
    })
}


#[cfg(test)]
mod tests {
    use super::*;

    fn twins(speedups: &[(&str, f64)]) -> Value {
        let t: serde_json::Map<String, Value> = speedups.iter().map(|(n, x)| ((*n).to_owned(), json!({"speedup": x}))).collect();
        json!({"job": {"causes": ["sync"]}, "twins": t})
    }

    fn report(verdict: &str, diagnoses: &[(&str, &str, f64)]) -> Value {
        let d: Vec<Value> = diagnoses.iter().map(|(id, sev, x)| json!({"id": id, "severity": sev, "saving": {"speedup": x}})).collect();
        json!({"verdict": verdict, "diagnoses": d, "tracer": {"recording": {"format_version": 1}}})
    }

    #[test]
    fn the_verdict_is_right_within_ten_percent_of_the_fastest_twin() {
        let t = twins(&[("lognth", 1.30), ("graph", 1.40), ("allfixed", 1.9)]);
        let j = judge(1, &t, &report("host-sync", &[("host-sync", "high", 1.35), ("launch-bound", "medium", 1.45)])).expect("judged");
        assert!(j.verdict_right, "1.30 is within 10 % of 1.40");
        assert_eq!(j.promises.iter().filter(|p| p.3).count(), 2);
        let j = judge(1, &twins(&[("lognth", 1.10), ("graph", 1.40)]), &report("host-sync", &[("host-sync", "high", 1.1)])).expect("judged");
        assert!(!j.verdict_right, "1.10 is not within 10 % of 1.40");
        // The graph twin had no promise: 1 against 1.40 is a miss.
        assert!(j.promises.iter().any(|(n, p, m, ok)| n == "graph" && (*p - 1.0).abs() < 1e-9 && (*m - 1.4).abs() < 1e-9 && !ok));
        let j = judge(1, &t, &report("alloc-churn", &[("alloc-churn", "high", 2.0)])).expect("judged");
        assert!(!j.verdict_right, "a verdict with no twin in the job is wrong");
        assert_eq!(j.over_all_fixed.len(), 0, "2.0 is within 20 % of the all-fixed 1.9");
        let j = judge(1, &t, &report("alloc-churn", &[("alloc-churn", "high", 2.5)])).expect("judged");
        assert_eq!(j.over_all_fixed.len(), 1, "2.5 is above the all-fixed 1.9 by more than 20 %");
    }

    #[test]
    fn a_job_nothing_speeds_up_is_healthy_and_an_alarm_on_it_is_false() {
        let t = twins(&[("graph", 1.04), ("allfixed", 1.05)]);
        let j = judge(2, &t, &report("gpu-bound", &[("gpu-bound", "info", 1.0), ("host-sync", "low", 1.02)])).expect("judged");
        assert!(j.healthy && j.verdict_right && !j.false_alarm);
        let j = judge(2, &t, &report("launch-bound", &[("launch-bound", "medium", 1.6)])).expect("judged");
        assert!(j.healthy && !j.verdict_right && j.false_alarm);
        let j = judge(2, &t, &report("host-sync", &[("host-sync", "low", 1.03)])).expect("judged");
        assert!(!j.verdict_right && !j.false_alarm, "a low verdict is wrong, not an alarm");
        // Fixes that only pay together: not healthy.
        let j = judge(2, &twins(&[("graph", 1.05), ("lognth", 1.05), ("allfixed", 2.0)]), &report("gpu-bound", &[])).expect("judged");
        assert!(!j.healthy);
    }

    #[test]
    fn scores_fall_by_rate_and_rise_freely() {
        let recorded = Scores { jobs: 10, verdict_right: 9, promises: 20, promises_within: 18, over_all_fixed: 0, healthy: 2, false_alarms: 0 };
        assert!(recorded.drops(recorded).is_empty());
        let more = Scores { jobs: 20, verdict_right: 19, promises: 40, promises_within: 37, ..recorded };
        assert!(more.drops(recorded).is_empty(), "a larger corpus at higher rates");
        let worse = Scores { verdict_right: 8, false_alarms: 1, ..recorded };
        let drops = worse.drops(recorded);
        assert_eq!(drops.len(), 2, "{drops:?}");
        let fewer = Scores { jobs: 9, verdict_right: 9, ..recorded };
        assert!(fewer.drops(recorded).iter().any(|d| d.contains("left the corpus")), "dropping a badly judged job is no gain");
        assert_eq!(Scores::from_json(&recorded.to_json()), recorded);
    }
}
