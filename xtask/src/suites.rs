//! The privileged integration suites (`tests/tests/*.rs`) and how they share the machine.
//!
//! Suites that judge time — a verdict from a job's timing, a cost per call, a step model
//! against its twins, exact counts of millions of launches — run alone: a second suite beside
//! them on a 2-core machine takes a core they measure. Suites that check behaviour (bad
//! input, exports, the terminal, a tracer killed at any moment) or exact counts (launches,
//! delivered + dropped records) wait on clocks and processes more than they compute: the unit
//! tests build and run beside them, three of them at a time (issue 55: CI time). A suite whose
//! assertions read a verdict does not belong there: with the unit tests' build beside it, the
//! recording suite's flight recorder once fired on `cpu-starved` (its job waited for a CPU
//! 52 % of the time). Every file under tests/tests must be listed: a new suite says which it is.

use std::{
    collections::VecDeque,
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

/// How a suite may share the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// It measures time: nothing else runs beside it.
    Alone,
    /// It checks behaviour: it may run beside another `Shared` suite.
    Shared,
}

/// Every integration suite, with its lane and why.
pub const SUITES: &[(&str, Lane)] = &[
    // Verdicts, costs, counts and timings.
    ("budget", Lane::Alone),     // the overhead budget's measured cost
    ("call_costs", Lane::Alone), // the cost of a traced call against its model
    ("diagnosis", Lane::Alone),  // verdicts against untraced twins
    ("doctor", Lane::Alone),     // a link under load: a verdict and its promise
    ("frameworks", Lane::Alone), // verdicts in a framework's terms
    ("host", Lane::Alone),       // scheduler evidence: run-queue time, wakers, sleeps
    ("memory", Lane::Alone),     // memory verdicts over time
    ("nccl", Lane::Alone),       // ranks in lockstep, a straggler's lag
    ("nvml", Lane::Alone),       // busy shares against the fake GPU's truth
    ("sites", Lane::Alone),      // where sampled time goes
    ("sweep", Lane::Alone),      // judges jobs by their timing
    ("serve", Lane::Alone),      // the same judgements, window after window
    ("flight_recorder", Lane::Alone), // it fires on a verdict
    // The tracer's own eBPF objects gone, however it ends. Beside the shared suites (CI,
    // 2026-12-07) a killed tracer's programs once stayed in the kernel a minute; alone, and
    // on that machine with three other suites beside it, they never did: not understood.
    ("lifecycle", Lane::Alone),
    // Behaviour, and counts that load does not change. Started in this order, the longest
    // first (their times in CI, 2026-12-07): three at once, the lane ends with its longest
    // suite only where that one started first.
    ("recording", Lane::Shared),     // counts and files: what a recording keeps, damaged or cut (45 s)
    ("hostile", Lane::Shared),       // 20 s
    ("loss", Lane::Shared),          // delivered + dropped == sent, whatever the load (20 s)
    ("serve_conduct", Lane::Shared), // bad clients, a lost GPU, names that forge a series (~13 s)
    ("terminal", Lane::Shared),      // 12 s
    ("attaching", Lane::Shared),     // 11 s
    ("launches", Lane::Shared),      // exact counts from many threads (10 s)
    ("sweep_census", Lane::Shared),  // holders, workers and exact counts in a sweep (~9 s)
    ("calls", Lane::Shared),         // exact counts and bytes of copies, syncs, allocations (~7 s)
    ("top", Lane::Shared),           // the live sweep's rows: an idle holder and a busy job, by state (7 s)
    ("html", Lane::Shared),          // 7 s
    ("dist", Lane::Shared),
    ("bad_input", Lane::Shared),
    ("fake_gpu", Lane::Shared), // lower bounds on the fake GPU's time: load only adds to it
    ("docs", Lane::Shared),
    ("deploy", Lane::Shared),
    ("house", Lane::Shared),
];

/// The lane of suite `name`; an unlisted suite is an error that names the table.
fn lane_of(name: &str) -> Result<Lane> {
    SUITES.iter().find(|(n, _)| *n == name).map(|(_, l)| *l).with_context(|| format!("tests/tests/{name}.rs is in no lane: list it in xtask/src/suites.rs"))
}

/// A built suite: its name and test binary.
#[derive(Debug)]
pub struct Suite {
    pub name: String,
    pub binary: PathBuf,
}

/// Every suite of `tests/tests` in the table, and no suite in the table that is not there.
pub fn check_listed(root: &Path, suites: &[Suite]) -> Result<()> {
    let on_disk: Vec<String> = fs::read_dir(root.join("tests/tests"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".rs").map(str::to_owned))
        .collect();
    for name in &on_disk {
        lane_of(name)?;
        if !suites.iter().any(|s| &s.name == name) {
            bail!("tests/tests/{name}.rs was not built as a test suite");
        }
    }
    for (name, _) in SUITES {
        if !on_disk.iter().any(|n| n == name) {
            bail!("xtask/src/suites.rs lists {name}, which tests/tests does not have");
        }
    }
    Ok(())
}

/// One run: its output (kept in a file, printed whole when it ends), and its start.
pub struct Running {
    name: String,
    child: Child,
    log: PathBuf,
    started: Instant,
}

fn start(suite: &Suite, env: &[(&str, &std::ffi::OsStr)], logs: &Path) -> Result<Running> {
    let log = logs.join(format!("{}.log", suite.name));
    let out = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = Command::new(&suite.binary);
    cmd.args(["--test-threads=1"]).stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().with_context(|| format!("starting {}", suite.binary.display()))?;
    Ok(Running { name: suite.name.clone(), child, log, started: Instant::now() })
}

/// A command run beside the suites (the unit tests, during the shared lane), its output kept
/// in `logs/NAME.log` and printed when it ends (`finish`).
pub fn start_command(name: &str, mut cmd: Command, logs: &Path) -> Result<Running> {
    fs::create_dir_all(logs)?;
    let log = logs.join(format!("{name}.log"));
    let out = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(out.try_clone()?).stderr(out);
    let child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    Ok(Running { name: name.to_owned(), child, log, started: Instant::now() })
}

/// Wait for `r`, print its output and its time; false where it failed.
pub fn finish(mut r: Running) -> Result<bool> {
    let status = r.child.wait()?;
    let text = fs::read_to_string(&r.log).unwrap_or_default();
    eprintln!("\n=== suite {} ({:.1} s, {status}) ===\n{text}", r.name, r.started.elapsed().as_secs_f64());
    Ok(status.success())
}

/// Runs the suites of `lane`, `width` at a time. Every suite runs, whatever an earlier one
/// did; the names of those that failed are returned.
pub fn run_lane(suites: &[Suite], lane: Lane, width: usize, env: &[(&str, &std::ffi::OsStr)], logs: &Path) -> Result<Vec<String>> {
    fs::create_dir_all(logs)?;
    let mut failed = Vec::new();
    let mut lane_suites: Vec<&Suite> = suites.iter().filter(|s| lane_of(&s.name).is_ok_and(|l| l == lane)).collect();
    // In the table's order (`SUITES`), not the build's.
    lane_suites.sort_by_key(|s| SUITES.iter().position(|(n, _)| *n == s.name));
    let mut queue: VecDeque<&Suite> = lane_suites.into_iter().collect();
    let mut running: Vec<Running> = Vec::new();
    while !queue.is_empty() || !running.is_empty() {
        while running.len() < width.max(1) {
            let Some(s) = queue.pop_front() else { break };
            running.push(start(s, env, logs)?);
        }
        // Whichever ends first frees its slot.
        let done = loop {
            if let Some(i) = running.iter_mut().position(|r| r.child.try_wait().is_ok_and(|s| s.is_some())) {
                break i;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let r = running.swap_remove(done);
        let name = r.name.clone();
        if !finish(r)? {
            failed.push(name);
        }
    }
    Ok(failed)
}
