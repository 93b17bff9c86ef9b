//! Twins: a planted fake job run untraced, once as planted and once per cause with that cause
//! fixed, so that a test asserts what the fake GPU makes true rather than what it expects.
//!
//! The fake GPU's queue runs whether or not the job waits and pushes back when full
//! (tests/fake-cuda/libcuda.c), so a twin's time is the job's real time with that fix: the
//! verdict must be the fix whose twin ran fastest, and its promise must come within
//! [`PROMISE_TOLERANCE`] of that twin (issue 55).

use std::{process::Command, time::Instant};

use serde_json::Value;

use crate::fakejob;

/// How far a promise may be from its twin: ±25 %, wider than the ±20 % asked of the GPU
/// machine, for this 2-core machine's noise.
pub const PROMISE_TOLERANCE: f64 = 0.25;

/// Twins within this factor of the fastest are a tie: the test then asks that every tied
/// cause is reported, not their order.
pub const TIE: f64 = 1.10;

/// Below this measured gain no planted cause is worth a fix: the job is bound elsewhere.
pub const WORTH_A_FIX: f64 = 1.10;

/// Above this speed-up the fixed step is a few percent of today's, and its time is below
/// what the evidence resolves (a sync's wake-up, tens of µs on this VM, the structure's GPU
/// range without NVML): a twin that measured x1824 (20 ms of bookkeeping dropped from a
/// 20 ms step) and a promise of x38 say the same thing. Beyond it, the promise must only lie
/// beyond it too, less the tolerance.
pub const RESOLVED_SPEEDUP: f64 = 10.0;

/// Untraced runs per job; the fastest is kept (the one the machine disturbed least).
const RUNS: usize = 3;

/// The twins run a third of the traced job's steps (at least [`MIN_TWIN_STEPS`]): a speed-up
/// is a ratio of step times, which the count does not change, and the twins' runs were most
/// of these tests' time.
const TWIN_STEPS_DIVISOR: u64 = 3;
const MIN_TWIN_STEPS: u64 = 30;

/// `args` with `--steps` cut for a twin run (see [`TWIN_STEPS_DIVISOR`]).
fn shorter(args: &[String]) -> Vec<String> {
    let mut out = args.to_vec();
    if let Some(at) = out.iter().position(|a| a == "--steps") {
        if let Some(n) = out.get(at + 1).and_then(|v| v.parse::<u64>().ok()) {
            out[at + 1] = (n / TWIN_STEPS_DIVISOR).max(MIN_TWIN_STEPS.min(n)).to_string();
        }
    }
    out
}

/// One cause fixed: the diagnosis id whose fix it is, and the job's arguments with it fixed.
#[derive(Debug, Clone)]
pub struct Fix {
    /// The diagnosis whose fix it is.
    pub id: &'static str,
    /// The job's arguments with it fixed.
    pub args: Vec<String>,
}

impl Fix {
    /// The fix of `id`, as `args`.
    #[must_use]
    pub fn new(id: &'static str, args: Vec<String>) -> Self {
        Self { id, args }
    }
}

/// What the twins measured: the planted job's time and each fix's speed-up over it.
#[derive(Debug)]
pub struct Measured {
    /// The planted job's time, s.
    pub planted_s: f64,
    /// Each fix's speed-up over it, by diagnosis id.
    pub speedups: Vec<(&'static str, f64)>,
}

impl Measured {
    /// The fix whose twin ran fastest, and its speed-up.
    #[must_use]
    pub fn best(&self) -> (&'static str, f64) {
        self.speedups.iter().copied().fold(("", 0.0), |best, s| if s.1 > best.1 { s } else { best })
    }

    /// The fixes within [`TIE`] of the fastest.
    #[must_use]
    pub fn tied(&self) -> Vec<&'static str> {
        let (_, best) = self.best();
        self.speedups.iter().filter(|(_, x)| best / x <= TIE).map(|(id, _)| *id).collect()
    }

    /// The measured speed-up of fix `id`.
    #[must_use]
    pub fn of(&self, id: &str) -> Option<f64> {
        self.speedups.iter().find(|(i, _)| *i == id).map(|(_, x)| *x)
    }
}

/// Time of `fakejob ARGS` untraced: its loop and the GPU work it queued, to the last kernel
/// (`--print-time`; the process's start and exit left out, which would swamp a twin whose fix
/// leaves milliseconds), the fastest of [`RUNS`].
#[must_use]
pub fn untraced_seconds(args: &[String]) -> f64 {
    (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            let out = Command::new(fakejob()).args(args).arg("--print-time").output().expect("fakejob runs");
            assert!(out.status.success(), "fakejob {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8_lossy(&out.stdout);
            let work_ns: Option<f64> = text.lines().find_map(|l| l.strip_prefix("work_ns ")).and_then(|n| n.parse().ok());
            work_ns.map_or_else(|| started.elapsed().as_secs_f64(), |ns| ns / 1e9)
        })
        .fold(f64::INFINITY, f64::min)
}

/// Runs the planted job and each fix's twin untraced (each with a third of the steps).
#[must_use]
pub fn measure(planted: &[String], fixes: &[Fix]) -> Measured {
    let planted_s = untraced_seconds(&shorter(planted));
    let speedups = fixes.iter().map(|f| (f.id, planted_s / untraced_seconds(&shorter(&f.args)))).collect();
    let measured = Measured { planted_s, speedups };
    eprintln!("twins of {planted:?}: planted {:.3} s; {:?}", measured.planted_s, measured.speedups);
    measured
}

/// The promise (`saving.speedup`) of diagnosis `id` in `report`, if it has one.
#[must_use]
pub fn promise(report: &Value, id: &str) -> Option<f64> {
    report["diagnoses"].as_array()?.iter().find(|d| d["id"] == id)?["saving"]["speedup"].as_f64()
}

/// Asserts the report against the twins: the verdict is the fix whose twin ran fastest (or, in
/// a tie, one of the tied, all of them reported), and its promise is within
/// [`PROMISE_TOLERANCE`] of its twin. Where no twin gains [`WORTH_A_FIX`], no fix may promise
/// more than that plus the tolerance. Returns the measurement for further checks.
#[must_use = "the measurement, for further checks; `let _ =` where none are made"]
pub fn assert_against(report: &Value, planted: &[String], fixes: &[Fix]) -> Measured {
    let m = measure(planted, fixes);
    let verdict = report["verdict"].as_str().unwrap_or_else(|| panic!("a verdict: {report:#}"));
    let ids: Vec<&str> = report["diagnoses"].as_array().expect("diagnoses").iter().filter_map(|d| d["id"].as_str()).collect();
    let (best, best_x) = m.best();
    let context = || format!("verdict {verdict}, diagnoses {ids:?}; twins {m:?}\n{:#}", report["diagnoses"]);
    if best_x < WORTH_A_FIX {
        for fix in fixes {
            if let Some(p) = promise(report, fix.id) {
                assert!(p <= WORTH_A_FIX * (1.0 + PROMISE_TOLERANCE), "{} promises x{p:.2} where no twin gains {WORTH_A_FIX}: {}", fix.id, context());
            }
        }
        return m;
    }
    let tied = m.tied();
    if tied.len() == 1 {
        assert_eq!(verdict, best, "the verdict is the fix whose twin ran fastest: {}", context());
    } else {
        assert!(tied.contains(&verdict), "the verdict is one of the tied fixes {tied:?}: {}", context());
        for id in &tied {
            assert!(ids.contains(id), "{id} ties with the fastest twin and is reported: {}", context());
        }
    }
    let measured = m.of(verdict).expect("the verdict is one of the fixes");
    let promised = promise(report, verdict).unwrap_or_else(|| panic!("{verdict} promises a speed-up: {}", context()));
    let within = if measured > RESOLVED_SPEEDUP {
        promised >= RESOLVED_SPEEDUP * (1.0 - PROMISE_TOLERANCE)
    } else {
        (promised / measured - 1.0).abs() <= PROMISE_TOLERANCE
    };
    assert!(within, "{verdict} promises x{promised:.2}; its twin measured x{measured:.2}: {}", context());
    m
}

/// `args` as owned strings.
#[must_use]
pub fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|&a| a.to_owned()).collect()
}

/// `args` without the bare flag `flag` (`--sync`).
#[must_use]
pub fn without_flag(args: &[String], flag: &str) -> Vec<String> {
    assert!(args.iter().any(|a| a == flag), "{flag} is planted in {args:?}");
    args.iter().filter(|a| *a != flag).cloned().collect()
}

/// `args` without option `name` and its value (`--item 1`).
#[must_use]
pub fn without_option(args: &[String], name: &str) -> Vec<String> {
    let at = args.iter().position(|a| a == name).unwrap_or_else(|| panic!("{name} is planted in {args:?}"));
    args.iter().enumerate().filter(|&(i, _)| i != at && i != at + 1).map(|(_, a)| a.clone()).collect()
}

/// `args` with option `name` (and its value) changed to `to` with value `value`.
#[must_use]
pub fn replaced(args: &[String], name: &str, to: &str, value: &str) -> Vec<String> {
    let at = args.iter().position(|a| a == name).unwrap_or_else(|| panic!("{name} is planted in {args:?}"));
    let mut out = args.to_vec();
    to.clone_into(&mut out[at]);
    value.clone_into(&mut out[at + 1]);
    out
}

/// The value of option `name` in `args`.
#[must_use]
pub fn value_of<'a>(args: &'a [String], name: &str) -> &'a str {
    let at = args.iter().position(|a| a == name).unwrap_or_else(|| panic!("{name} is planted in {args:?}"));
    &args[at + 1]
}

/// The usual twin of each planted cause of fakejob, by its diagnosis:
/// - `host-sync`: its ranked form, the per-step sync dropped (`--item`, `--item-sync`,
///   `--sync`) with the host work that follows it (`--host-us` runs at the start of each
///   step, after the last step's sync: the bookkeeping that "log every N steps" drops);
/// - `alloc-churn`: `--alloc-churn` dropped (a caching allocator keeps the blocks);
/// - `pageable-copy`: `--pageable-h2d B` made `--pinned-h2d B` (pinned and asynchronous);
/// - `launch-bound`: `--driver-launches N` made `--graphs N/10` (a graph replays ten kernels);
/// - `host-bound`: `--host-us U` moved to a worker process that feeds each step through a pipe
///   (`--pipe-worker-us U`), as a DataLoader worker would;
/// - `checkpoint-stall`: `--checkpoint-every` dropped (the save moved off the training loop).
#[must_use]
pub fn usual_fix(planted: &[String], id: &'static str) -> Fix {
    let args = match id {
        "host-sync" => {
            let mut a = planted.to_vec();
            for opt in ["--item", "--item-sync"] {
                if a.iter().any(|x| x == opt) {
                    a = without_option(&a, opt);
                }
            }
            if a.iter().any(|x| x == "--sync") {
                a = without_flag(&a, "--sync");
            }
            assert!(a.len() < planted.len(), "no sync planted in {planted:?}");
            if a.iter().any(|x| x == "--host-us") {
                a = without_option(&a, "--host-us");
            }
            a
        }
        "alloc-churn" => without_option(planted, "--alloc-churn"),
        "pageable-copy" => {
            let bytes = value_of(planted, "--pageable-h2d").to_owned();
            replaced(planted, "--pageable-h2d", "--pinned-h2d", &bytes)
        }
        "launch-bound" => {
            let n: u32 = value_of(planted, "--driver-launches").parse().expect("a count");
            assert!(n.is_multiple_of(10) && n >= 10, "--driver-launches {n} groups into graphs of ten");
            replaced(planted, "--driver-launches", "--graphs", &(n / 10).to_string())
        }
        "host-bound" => {
            // The host work, or the batch made through the framework, moved to a worker.
            let work = if planted.iter().any(|a| a == "--host-us") { "--host-us" } else { "--torch-prep-us" };
            let us = value_of(planted, work).to_owned();
            replaced(planted, work, "--pipe-worker-us", &us)
        }
        "checkpoint-stall" => without_option(planted, "--checkpoint-every"),
        other => panic!("no usual twin for {other}"),
    };
    Fix::new(id, args)
}
