//! `cargo xtask bench`: the added cost per traced launch, against the physical floor — one
//! bare counting uprobe on the same function, in the same run (issue 9's figure of merit).
//!
//! One fakejob launch loop (1,000,000 `cuLaunchKernel` calls on the fake CUDA) is timed by the
//! job itself, five times each: untraced, under the bare uprobe, under `gputrace attach`.
//! Medians are reported.
//!
//! Then per kind of call (`.item()`, a pageable copy, a sync, an allocation): what gputrace
//! adds against bare programs on the very same traps, and its own estimate of that
//! (`tracer.overhead.estimated_s`) against what it really added (issue 34).
//!
//! Then start-up and exit (issue 15): `gputrace run` of a short job, from gputrace's start
//! to probes armed (`attach_ms`, goal ≤ 200 ms) and from the end of the window to gputrace's
//! exit (goal ≤ 1 s); and `gputrace attach` from SIGINT to exit (issue 63: goal ≤ 300 ms).
//!
//! Last, what unwinding native stacks costs (`bench_unwind.rs`).

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{Child, ChildStdout, Command, Stdio},
};

use anyhow::{bail, Context as _, Result};

use crate::statistics::median;

const STEPS: u64 = 20;
const LAUNCHES_PER_STEP: u64 = 50_000;
const REPEATS: usize = 5;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Untraced,
    /// A bare counting uprobe on `cuLaunchKernel` alone.
    Floor,
    /// Bare counting programs on every trap gputrace sets in the fake libcuda (entries, and
    /// returns but on launches): the floor of each kind of call.
    FloorLikeGputrace,
    Gputrace,
    /// gputrace with every copy record waking the reader (before first-sight delivery).
    GputraceEveryCopy,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Untraced => "untraced",
            Self::Floor => "bare counting uprobe",
            Self::FloorLikeGputrace => "bare programs on gputrace's traps",
            Self::Gputrace => "gputrace attach",
            Self::GputraceEveryCopy => "gputrace, every copy wakes the reader",
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
    Ok(timed(mode, release, fake, &launch_loop(), &["libcuda.so.1"])?.0 / (STEPS * LAUNCHES_PER_STEP) as f64)
}

/// One timed run of fakejob with `args`: its work time in ns, and gputrace's JSON report.
/// The floor modes set their traps in each of `libraries` (files of the fake CUDA folder).
fn timed(mode: Mode, release: &Path, fake: &Path, args: &[String], libraries: &[&str]) -> Result<(f64, Option<String>)> {
    let mut job = Command::new(fake.join("fakejob"))
        .args(["--gate", "--print-time"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut job_out = BufReader::new(job.stdout.take().context("stdout")?);
    let ready = read_line(&mut job_out)?;
    let pid = ready.strip_prefix("ready ").context("fakejob did not get ready")?.to_owned();
    let mut floors: Vec<Child> = Vec::new();
    if matches!(mode, Mode::Floor | Mode::FloorLikeGputrace) {
        for library in libraries {
            let mut c = Command::new(release.join("gputrace-uprobe-floor"))
                .arg(fake.join(library))
                .arg(if mode == Mode::Floor { "cuLaunchKernel" } else { "--like-gputrace" })
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?;
            let mut out = BufReader::new(c.stdout.take().context("stdout")?);
            if !read_line(&mut out)?.starts_with("armed") {
                bail!("the floor probe did not arm on {library}");
            }
            floors.push(c);
        }
    }
    let mut tracer: Option<Child> = match mode {
        Mode::Untraced | Mode::Floor | Mode::FloorLikeGputrace => None,
        Mode::Gputrace | Mode::GputraceEveryCopy => {
            let mut c = Command::new(release.join("gputrace"))
                .env("GPUTRACE_PROMPT_EVERY_COPY", if mode == Mode::GputraceEveryCopy { "1" } else { "0" })
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
    for mut c in floors {
        drop(c.stdin.take());
        c.wait()?;
    }
    let mut report = None;
    if let Some(mut c) = tracer.take() {
        kill(c.id(), "INT");
        if let Some(mut out) = c.stdout.take() {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut out, &mut s)?;
            report = Some(s);
        }
        c.wait()?;
    }
    Ok((ns, report))
}

/// Steps of each per-kind loop: one call of its kind a step (the `.item()` one: a copy and
/// a synchronize). Enough that the job's own CPU samples land in traps often enough to set
/// the estimate (`tracer.overhead.basis` "sampled") on a machine whose traps cost ~1 µs.
const KIND_STEPS: u64 = 100_000;

/// The libraries of the fake CUDA whose traps a kind's floor sets.
const DRIVER: &[&str] = &["libcuda.so.1"];
const DRIVER_AND_NCCL: &[&str] = &["libcuda.so.1", "libnccl.so.2"];

/// The kinds of call of the second table: name, fakejob arguments, the floor's libraries.
const KINDS: [(&str, &[&str], &[&str]); 5] = [
    ("`.item()`: D2H copy + stream sync", &["--item", "1"], DRIVER),
    ("pageable H2D copy + stream sync", &["--pageable-h2d", "4096"], DRIVER),
    ("context sync", &["--sync"], DRIVER),
    ("alloc + free (1 MiB)", &["--alloc-churn", "1"], DRIVER),
    // One rank (its collectives wait for no other): a 4-byte all-reduce and the stream sync
    // after it, a step; the rank starts after 500 ms, time for gputrace to probe its NCCL.
    ("NCCL all-reduce (4 B, 1 rank) + stream sync", &["--ranks", "1", "--settle-ms", "500", "--allreduce-bytes", "4"], DRIVER_AND_NCCL),
];

/// Per kind of call (issue 34): the added cost per step under the bare programs on
/// gputrace's own traps (the floor) and under gputrace, with and without a reader wakeup
/// per copy record, beside gputrace's own estimate (`tracer.overhead.estimated_s` over
/// the steps) and the model's alone (`modelled_s`: the trap costs measured apart, before the
/// job's samples scale them). Modes alternate within each round; medians of `REPEATS` rounds.
#[expect(clippy::print_stdout, reason = "the table is this command's output")]
pub fn call_kinds(release: &Path, fake: &Path) -> Result<()> {
    const MODES: [Mode; 4] = [Mode::Untraced, Mode::FloorLikeGputrace, Mode::Gputrace, Mode::GputraceEveryCopy];
    println!(
        "\n| call, {KIND_STEPS} steps (median of {REPEATS}) | untraced ns/step | floor: bare programs on the same traps | gputrace | × floor | gputrace's estimate (basis) | the model alone | every copy wakes the reader |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, extra, libraries) in KINDS {
        let args: Vec<String> = ["--kernel-us", "0", "--steps", &KIND_STEPS.to_string()].iter().chain(extra).map(|s| (*s).to_owned()).collect();
        let mut ns: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
        let mut estimated = Vec::new();
        let mut modelled = Vec::new();
        let mut basis_seen = std::collections::BTreeSet::new();
        for _ in 0..REPEATS {
            for (i, mode) in MODES.iter().enumerate() {
                let (work, report) = timed(*mode, release, fake, &args, libraries)?;
                ns[i].push(work / KIND_STEPS as f64);
                if *mode == Mode::Gputrace {
                    let report: serde_json::Value = serde_json::from_str(&report.unwrap_or_default()).context("gputrace printed no report")?;
                    let basis = report.pointer("/tracer/overhead/basis").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
                    if !matches!(basis.as_str(), "measured" | "sampled") {
                        bail!("the trap costs were not measured: {}", report.pointer("/tracer/notes").unwrap_or(&serde_json::Value::Null));
                    }
                    basis_seen.insert(basis);
                    let figure = |name: &str| report.pointer(&format!("/tracer/overhead/{name}")).and_then(serde_json::Value::as_f64).context("no overhead estimate");
                    estimated.push(figure("estimated_s")? * 1e9 / KIND_STEPS as f64);
                    modelled.push(figure("modelled_s")? * 1e9 / KIND_STEPS as f64);
                }
            }
        }
        eprintln!("{name}: ns/step by mode {ns:.0?}; estimated {estimated:.0?}; modelled {modelled:.0?}");
        let m: Vec<f64> = ns.into_iter().map(median).collect();
        let (base, floor, ours, every) = (m[0], m[1] - m[0], m[2] - m[0], m[3] - m[0]);
        let (est, model) = (median(estimated), median(modelled));
        let bases = basis_seen.into_iter().collect::<Vec<_>>().join("/");
        println!(
            "| {name} | {base:.0} | {floor:+.0} | {ours:+.0} | {:.2} | {est:.0} ({:+.0} %, {bases}) | {model:.0} ({:+.0} %) | {every:+.0} |",
            ours / floor,
            (est / ours - 1.0) * 100.0,
            (model / ours - 1.0) * 100.0
        );
    }
    Ok(())
}

/// Signal a child through kill(1), which keeps xtask free of a libc dependency.
fn kill(pid: u32, signal: &str) {
    let _ = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status();
}

/// Prints the results tables on stdout: they are the command's output, meant to be pasted
/// into docs/benchmarks.md.
pub fn run(release: &Path, fake: &Path) -> Result<()> {
    launches(release, fake)?;
    call_kinds(release, fake)?;
    startup_and_exit(release, fake)?;
    crate::bench_unwind::run(release, fake)
}

/// The first table alone: the added cost per traced launch, against the bare-uprobe floor.
#[expect(clippy::print_stdout, reason = "the table is this command's output")]
pub fn launches(release: &Path, fake: &Path) -> Result<()> {
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
    Ok(())
}

/// Start-up and exit of `gputrace run` on a short job: medians of `REPEATS` runs.
#[expect(clippy::print_stdout, reason = "the table is this command's output")]
pub fn startup_and_exit(release: &Path, fake: &Path) -> Result<()> {
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
    let mut interrupted = Vec::new();
    for _ in 0..REPEATS {
        interrupted.push(sigint_to_exit_ms(release, fake)?);
    }
    eprintln!("armed after {armed:.0?} ms; exited {after:.0?} ms after the window; {interrupted:.0?} ms after SIGINT");
    println!("\n| `gputrace run`, short job (median of {REPEATS}) | ms | goal |");
    println!("|---|---|---|");
    println!("| start to probes armed (`attach_ms`) | {:.0} | ≤ 200 |", median(armed));
    println!("| end of window to exit (report, NVML, detach) | {:.0} | ≤ 1000 |", median(after));
    println!("| `attach` for 2 s, SIGINT to exit, report printed (issue 63) | {:.0} | ≤ 300 |", median(interrupted));
    Ok(())
}

/// `gputrace attach` to a running job for 2 s, then SIGINT: milliseconds from the signal until
/// gputrace is gone, its report printed (issue 63).
fn sigint_to_exit_ms(release: &Path, fake: &Path) -> Result<f64> {
    let mut job = Command::new(fake.join("fakejob"))
        .env("LD_LIBRARY_PATH", fake)
        .args(["--steps", "100000000", "--driver-launches", "5", "--kernel-us", "100", "--sync"])
        .stdout(Stdio::null())
        .spawn()?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    let tracer = Command::new(release.join("gputrace"))
        .args(["attach", "--json", "--pid", &job.id().to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    std::thread::sleep(std::time::Duration::from_secs(2));
    let signalled = std::time::Instant::now();
    Command::new("kill").args(["-INT", &tracer.id().to_string()]).status()?;
    let out = tracer.wait_with_output()?;
    let ms = signalled.elapsed().as_secs_f64() * 1e3;
    let _ = job.kill();
    let _ = job.wait();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).context("gputrace attach printed no JSON report after SIGINT")?;
    if report["window"]["stopped_by"].is_null() {
        bail!("the report after SIGINT has no window.stopped_by");
    }
    Ok(ms)
}
