//! `cargo xtask accuracy`: the recorded corpus (validation/corpus, docs/accuracy.md) judged
//! again by the current build, offline. Each generated job was recorded on a real GPU beside
//! untraced twins, each twin the job with one fix applied; `gputrace report FILE --json` of
//! the recording is scored against the twins' measured speed-ups:
//!
//! - the verdict is right when its fix's twin ran within 10 % of the fastest twin (on a job no
//!   twin speeds up by 10 %, when the verdict is the healthy one);
//! - a twin's promise is the largest `saving.speedup` of the diagnoses its fix answers (1 where
//!   none does): within ±20 % of the twin's measured speed-up, it holds;
//! - no promise may be above the all-fixed twin by more than that band;
//! - a job no twin speeds up by 10 % gets no `high` or `medium` diagnosis (a false alarm).
//!
//! The scores of the tuning seeds and of the held-back seeds are kept apart, and CI fails
//! when either falls below the one recorded in validation/corpus/scores.json.

use std::{collections::BTreeMap, path::Path, process::Command, sync::Mutex};

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};
use xtask::score::{judge, Judged, Scores};

/// The recording format this build writes, read from its source (xtask does not link the
/// tracer): older recordings in the corpus are listed as lacking what came since.
fn current_format(root: &Path) -> Option<u64> {
    let src = std::fs::read_to_string(root.join("tracer/src/record/format.rs")).ok()?;
    src.lines().find_map(|l| l.trim().strip_prefix("pub const VERSION: u32 = ")?.trim_end_matches(';').parse().ok())
}

/// The report of one recording, offline.
fn report(gputrace: &Path, recording: &Path) -> Result<Value> {
    let out = Command::new(gputrace).arg("report").arg(recording).arg("--json").output().with_context(|| format!("running {}", gputrace.display()))?;
    if !out.status.success() {
        bail!("gputrace report {} failed ({}): {}", recording.display(), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("the report of {} is not JSON", recording.display()))
}

/// Judge the job `seed` of the corpus at `dir`: its twins' file and its recording's report.
fn judge_file(gputrace: &Path, dir: &Path, seed: u64) -> Result<Judged> {
    let twins: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(format!("jobs/{seed}.json")))?)?;
    judge(seed, &twins, &report(gputrace, &dir.join(format!("jobs/{seed}.gtr.zst")))?)
}

/// Judge every job of the corpus at `dir` with `gputrace`, `workers` reports at a time; print
/// the table and the scores; compare them with the recorded ones (`update`: write them).
/// `root` is the repository's (where the recording format's version is read).
pub fn run(gputrace: &Path, root: &Path, dir: &Path, workers: usize, update: bool) -> Result<()> {
    let started = std::time::Instant::now();
    let seeds: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("seeds.json")).with_context(|| format!("reading {}/seeds.json", dir.display()))?)?;
    let mut jobs: Vec<(&'static str, u64)> = Vec::new();
    for set in ["tuning", "held_back"] {
        for s in seeds[set].as_array().with_context(|| format!("seeds.json has no `{set}` list"))? {
            jobs.push((set, s.as_u64().context("a seed is not a number")?));
        }
    }
    let queue = Mutex::new(jobs.clone().into_iter());
    let results: Mutex<Vec<(&'static str, Result<Judged>)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            scope.spawn(|| {
                while let Some((set, seed)) = queue.lock().map_or(None, |mut q| q.next()) {
                    let judged = judge_file(gputrace, dir, seed).with_context(|| format!("seed {seed}"));
                    if let Ok(mut r) = results.lock() {
                        r.push((set, judged));
                    }
                }
            });
        }
    });
    let mut results = results.into_inner().map_err(|_| anyhow::anyhow!("a report worker panicked"))?;
    results.sort_by_key(|(set, j)| (*set != "tuning", j.as_ref().map_or(0, |j| j.seed)));
    let current = current_format(root);
    if current.is_none() {
        eprintln!("accuracy: tracer/src/record/format.rs names no `pub const VERSION: u32 = N;`: recordings of older formats are not listed");
    }
    let mut scores: BTreeMap<&str, Scores> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut older = Vec::new();
    eprintln!("| set | seed | causes | verdict | right | verdict's twin | fastest twin | promised / measured (twin) |");
    eprintln!("|---|---|---|---|---|---|---|---|");
    for (set, judged) in &results {
        let j = match judged {
            Ok(j) => j,
            Err(e) => {
                failures.push(format!("{e:#}"));
                continue;
            }
        };
        scores.entry(set).or_default().add(j);
        if current.is_some_and(|c| j.format_version < c) {
            older.push(j.seed);
        }
        let twin = j.verdict_twin.as_ref().map_or_else(|| "–".into(), |(n, x)| format!("{n} ×{x:.2}"));
        let promises: Vec<String> = j.promises.iter().map(|(n, p, m, ok)| format!("{n} {p:.2}/{m:.2}{}", if *ok { "" } else { " ✗" })).collect();
        let right = match (j.verdict_right, j.healthy) {
            (true, _) => "yes",
            (false, true) => "no (healthy)",
            (false, false) => "no",
        };
        eprintln!(
            "| {set} | {} | {} | {} | {right} | {twin} | {} ×{:.2} | {}{} |",
            j.seed,
            if j.causes.is_empty() { "none" } else { &j.causes },
            j.verdict,
            j.best.0,
            j.best.1,
            promises.join(", "),
            if j.over_all_fixed.is_empty() { String::new() } else { format!("; over all-fixed: {}", j.over_all_fixed.join(", ")) }
        );
    }
    let path = dir.join("scores.json");
    // The recorded scores are the gate: without them (unless writing them) there is none.
    let recorded: Value = match std::fs::read_to_string(&path).map_err(anyhow::Error::from).and_then(|t| Ok(serde_json::from_str(&t)?)) {
        Ok(v) => v,
        Err(_) if update => Value::Null,
        Err(e) => bail!("{}: {e:#} (the recorded scores; `cargo xtask accuracy --update` writes them)", path.display()),
    };
    let mut drops = Vec::new();
    for set in ["tuning", "held_back"] {
        let now = scores.get(set).copied().unwrap_or_default();
        eprintln!("\n{set}: {}", now.line());
        if !recorded[set].is_null() {
            drops.extend(now.drops(Scores::from_json(&recorded[set])).into_iter().map(|d| format!("{set}: {d}")));
        }
    }
    if !older.is_empty() {
        eprintln!(
            "\nrecorded with an older format than this build writes ({current:?}), scored on what they hold — record them again when device time allows: {older:?}"
        );
    }
    eprintln!("accuracy: {} jobs judged in {:.1} s", results.len(), started.elapsed().as_secs_f64());
    if !failures.is_empty() {
        bail!("{} job(s) could not be judged:\n  {}", failures.len(), failures.join("\n  "));
    }
    if update {
        let written = json!({"tuning": scores.get("tuning").copied().unwrap_or_default().to_json(),
                             "held_back": scores.get("held_back").copied().unwrap_or_default().to_json()});
        std::fs::write(&path, serde_json::to_string_pretty(&written)? + "\n").with_context(|| format!("writing {}", path.display()))?;
        eprintln!("accuracy: wrote {}", path.display());
        return Ok(());
    }
    if !drops.is_empty() {
        bail!("the accuracy fell below the recorded scores (validation/corpus/scores.json):\n  {}\n(if a change is meant to trade these, say so and run `cargo xtask accuracy --update`)", drops.join("\n  "));
    }
    Ok(())
}
