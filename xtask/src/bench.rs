//! `cargo xtask bench`: the added cost per traced launch, against the physical floor — one
//! bare counting uprobe on the same function, in the same run (issue 9's figure of merit).
//!
//! One fakejob launch loop (1,000,000 `cuLaunchKernel` calls on the fake CUDA) is timed by the
//! job itself, five times each: untraced, under the bare uprobe, under `gputrace attach`.
//! Medians are reported.
//!
//! Then the overhead estimate is checked against what tracing really cost: a `.item()` loop
//! (a device-to-host copy whose probe the kernel single-steps, and a synchronize) timed
//! untraced and traced, beside the report's `tracer.overhead.estimated_s`.
//!
//! Then start-up and exit (issue 15): `gputrace run` of a short job, from gputrace's start
//! to probes armed (`attach_ms`, goal ≤ 200 ms) and from the end of the window to gputrace's
//! exit (goal ≤ 1 s).
//!
//! Last, what unwinding native stacks costs (`bench_unwind.rs`).

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{Child, ChildStdout, Command, Stdio},
};

use anyhow::{bail, Context as _, Result};

const STEPS: u64 = 20;
const LAUNCHES_PER_STEP: u64 = 50_000;
const REPEATS: usize = 5;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Untraced,
    Floor,
    Gputrace,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Untraced => "untraced",
            Self::Floor => "bare counting uprobe",
            Self::Gputrace => "gputrace attach",
        }
    }
}

fn read_line(r: &mut BufReader<ChildStdout>) -> Result<String> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    Ok(line.trim().to_owned())
}

/// The launch loop of the first table.
fn launch_loop() -> Vec<String> {
    ["--kernel-us", "0", "--steps", &STEPS.to_string(), "--driver-launches", &LAUNCHES_PER_STEP.to_string()].map(str::to_owned).to_vec()
}

/// One timed run: nanoseconds per launch.
fn once(mode: Mode, release: &Path, fake: &Path) -> Result<f64> {
    Ok(timed(mode, release, fake, &launch_loop())?.0 / (STEPS * LAUNCHES_PER_STEP) as f64)
}

/// One timed run of fakejob with `args`: its work time in ns, and gputrace's JSON report.
fn timed(mode: Mode, release: &Path, fake: &Path, args: &[String]) -> Result<(f64, Option<String>)> {
    let mut job = Command::new(fake.join("fakejob"))
        .args(["--gate", "--print-time"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut job_out = BufReader::new(job.stdout.take().context("stdout")?);
    let ready = read_line(&mut job_out)?;
    let pid = ready.strip_prefix("ready ").context("fakejob did not get ready")?.to_owned();
    let mut tracer: Option<Child> = match mode {
        Mode::Untraced => None,
        Mode::Floor => {
            let mut c = Command::new(release.join("gputrace-uprobe-floor"))
                .arg(fake.join("libcuda.so.1"))
                .arg("cuLaunchKernel")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?;
            let mut out = BufReader::new(c.stdout.take().context("stdout")?);
            if read_line(&mut out)? != "armed" {
                bail!("the floor probe did not arm");
            }
            Some(c)
        }
        Mode::Gputrace => {
            let mut c = Command::new(release.join("gputrace"))
                .args(["-v", "attach", "--json", "--nvml-hz", "0", "--pid", &pid])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            let mut err = BufReader::new(c.stderr.take().context("stderr")?);
            loop {
                let mut line = String::new();
                if err.read_line(&mut line)? == 0 {
                    bail!("gputrace exited before arming");
                }
                if line.contains("armed: tracing pid") {
                    break;
                }
            }
            std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
            Some(c)
        }
    };
    job.stdin.as_mut().context("stdin")?.write_all(b"go\n")?;
    let timing = read_line(&mut job_out)?;
    let ns: f64 = timing.strip_prefix("work_ns ").context("fakejob printed no time")?.parse()?;
    job.wait()?;
    let mut report = None;
    if let Some(mut c) = tracer.take() {
        match mode {
            Mode::Floor => drop(c.stdin.take()),
            _ => kill(c.id(), "INT"),
        }
        if let Some(mut out) = c.stdout.take().filter(|_| mode == Mode::Gputrace) {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut out, &mut s)?;
            report = Some(s);
        }
        c.wait()?;
    }
    Ok((ns, report))
}

/// The `.item()` loop of the second table: 20,000 steps of one copy + synchronize.
const ITEM_STEPS: u64 = 20_000;

/// Measured against estimated cost of tracing the `.item()` loop, medians of `REPEATS`.
#[expect(clippy::print_stdout, reason = "the table is this command's output")]
fn estimate_accuracy(release: &Path, fake: &Path) -> Result<()> {
    let args: Vec<String> = ["--kernel-us", "0", "--steps", &ITEM_STEPS.to_string(), "--item", "1"].map(str::to_owned).to_vec();
    let untraced: Vec<f64> = (0..REPEATS).map(|_| timed(Mode::Untraced, release, fake, &args).map(|t| t.0)).collect::<Result<_>>()?;
    let mut added = Vec::new();
    let mut estimated = Vec::new();
    let base = median(untraced.clone());
    for _ in 0..REPEATS {
        let (ns, report) = timed(Mode::Gputrace, release, fake, &args)?;
        let report: serde_json::Value = serde_json::from_str(&report.unwrap_or_default()).context("gputrace printed no report")?;
        let est = report.pointer("/tracer/overhead/estimated_s").and_then(serde_json::Value::as_f64).context("no overhead estimate")?;
        if report.pointer("/tracer/overhead/basis").and_then(serde_json::Value::as_str) != Some("measured") {
            bail!("the trap costs were not measured: {}", report.pointer("/tracer/notes").unwrap_or(&serde_json::Value::Null));
        }
        added.push((ns - base) / 1e9);
        estimated.push(est);
    }
    eprintln!("untraced work: {:?} s", untraced.iter().map(|n| n / 1e9).collect::<Vec<_>>());
    eprintln!("traced, added: {added:?} s; estimated: {estimated:?} s");
    let (a, e) = (median(added), median(estimated));
    println!("
| `.item()` loop, {ITEM_STEPS} steps (median of {REPEATS}) | seconds |");
    println!("|---|---|");
    println!("| untraced work | {:.3} |", base / 1e9);
    println!("| added by tracing, measured | {a:.3} |");
    println!("| added by tracing, gputrace's estimate (`tracer.overhead.estimated_s`) | {e:.3} |");
    println!("
estimate / measured = {:.2}", e / a);
    Ok(())
}

/// Signal a child through kill(1), which keeps xtask free of a libc dependency.
fn kill(pid: u32, signal: &str) {
    let _ = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Prints the results table on stdout: it is the command's output, meant to be pasted into
/// docs/benchmarks.md.
#[expect(clippy::print_stdout, reason = "the table is this command's output")]
pub fn run(release: &Path, fake: &Path) -> Result<()> {
    let mut per_mode = Vec::new();
    for mode in [Mode::Untraced, Mode::Floor, Mode::Gputrace] {
        let runs: Vec<f64> = (0..REPEATS).map(|_| once(mode, release, fake)).collect::<Result<_>>()?;
        eprintln!("{}: {:?} ns/launch", mode.name(), runs.iter().map(|n| (n * 10.0).round() / 10.0).collect::<Vec<_>>());
        per_mode.push((mode, median(runs)));
    }
    let base = per_mode[0].1;
    let floor = per_mode[1].1 - base;
    println!("| mode | ns per launch (median of {REPEATS}) | added by tracing |");
    println!("|---|---|---|");
    for (mode, ns) in &per_mode {
        println!("| {} | {ns:.1} | {:+.1} ns |", mode.name(), ns - base);
    }
    let ours = per_mode[2].1 - base;
    println!(
        "\ngputrace's added cost per launch: {ours:.1} ns = {:.2} × the bare-uprobe floor ({floor:.1} ns); goal ≤ 1.2 ×",
        ours / floor
    );
    estimate_accuracy(release, fake)?;
    startup_and_exit(release, fake)?;
    crate::bench_unwind::run(release, fake)
}

/// Start-up and exit of `gputrace run` on a short job: medians of `REPEATS` runs.
#[expect(clippy::print_stdout, reason = "the table is this command's output")]
fn startup_and_exit(release: &Path, fake: &Path) -> Result<()> {
    let mut armed = Vec::new();
    let mut after = Vec::new();
    for _ in 0..REPEATS {
        let began = std::time::Instant::now();
        let out = Command::new(release.join("gputrace"))
            .env("LD_LIBRARY_PATH", fake)
            .args(["run", "--json", "--"])
            .arg(fake.join("fakejob"))
            .args(["--steps", "100", "--driver-launches", "10", "--kernel-us", "500", "--sync"])
            .output()?;
        let wall_ms = began.elapsed().as_secs_f64() * 1e3;
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).context("gputrace run printed no JSON report")?;
        let attach_ms = report["tracer"]["attach_ms"].as_f64().context("attach_ms")?;
        let window_ms = report["window"]["duration_s"].as_f64().context("window.duration_s")? * 1e3;
        armed.push(attach_ms);
        after.push(wall_ms - attach_ms - window_ms);
    }
    eprintln!("armed after {armed:.0?} ms; exited {after:.0?} ms after the window");
    println!("\n| `gputrace run`, short job (median of {REPEATS}) | ms | goal |");
    println!("|---|---|---|");
    println!("| start to probes armed (`attach_ms`) | {:.0} | ≤ 200 |", median(armed));
    println!("| end of window to exit (report, NVML, detach) | {:.0} | ≤ 1000 |", median(after));
    Ok(())
}
