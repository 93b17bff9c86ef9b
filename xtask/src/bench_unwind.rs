//! `cargo xtask bench` (or `cargo xtask bench --unwind` alone): what native stacks cost now
//! that they are copied and unwound by the call frame information (issue 33; goal: 99 Hz
//! sampling plus 100 off-CPU stacks a second add ≤ 1 % of one CPU to the tracer).
//!
//! First the user-space cost of one stack, from `gputrace-unwind-cost` (its own stack, 10 and
//! 30 calls deep, taken 20,000 times through the path a drained record takes). Then the
//! tracer's CPU time over the window (`tracer.cpu_s`), stacks on and off (`--no-stacks`), for
//! the fake job built `-O2` without frame pointers doing 9 ms of host work and sleeping 1 ms
//! per step for 20 s: ~90 CPU samples and ~100 off-CPU stacks a second, all copied and
//! unwound.

use std::{path::Path, process::Command};

use anyhow::{Context as _, Result};

use crate::statistics::median;

const REPEATS: usize = 3;
/// 20 s of the job: what stacks cost a running job. A 4 s run mostly measured what is paid
/// once per file (reading and decompressing its debug information to name its lines): 1.4 to
/// 2.4 % of one CPU over 4 s, 0.4 to 0.8 % over 20 s (docs/benchmarks.md).
const JOB: [&str; 8] = ["--steps", "2000", "--host-us", "9000", "--sleep-ms", "1", "--driver-launches", "2"];

/// One traced run of the -O2 job: (tracer CPU seconds per second of window, stacks taken per
/// second).
fn traced(release: &Path, o2: &Path, stacks: bool) -> Result<(f64, f64)> {
    let out = Command::new(release.join("gputrace"))
        .env("LD_LIBRARY_PATH", o2)
        .args(["run", "--json", "--nvml-hz", "0"])
        .args(if stacks { &[][..] } else { &["--no-stacks"][..] })
        .arg("--")
        .arg(o2.join("fakejob"))
        .args(JOB)
        .arg("--lib-dir")
        .arg(o2)
        .output()?;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).context("gputrace run printed no JSON report")?;
    let window = report["window"]["duration_s"].as_f64().context("window.duration_s")?;
    let cpu = report["tracer"]["cpu_s"].as_f64().context("tracer.cpu_s")?;
    let taken = report["tracer"]["stacks"]["taken"].as_f64().unwrap_or(0.0);
    Ok((cpu / window, taken / window))
}

#[expect(clippy::print_stdout, reason = "the table is this command's output")]
pub fn run(release: &Path, fake: &Path) -> Result<()> {
    let out = Command::new(release.join("gputrace-unwind-cost")).args(["10", "30"]).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    println!("\n| one copied stack unwound in user space | frames | complete | ns per stack |");
    println!("|---|---|---|---|");
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [_, depth, _, frames, _, complete, _, ns] = f.as_slice() {
            println!("| own stack, {depth} calls deep | {frames} | {complete} | {ns} |");
        }
    }
    let o2 = fake.join("o2");
    let mut on = Vec::new();
    let mut off = Vec::new();
    let mut rate = Vec::new();
    for _ in 0..REPEATS {
        let (cpu, stacks) = traced(release, &o2, true)?;
        on.push(cpu);
        rate.push(stacks);
        off.push(traced(release, &o2, false)?.0);
    }
    eprintln!("tracer CPU per window second, stacks on {on:.4?}, off {off:.4?}; stacks/s {rate:.0?}");
    let (on, off, rate) = (median(on), median(off), median(rate));
    println!("\n| -O2 job, 9 ms host work + 1 ms sleep a step, 20 s (median of {REPEATS}) | value |");
    println!("|---|---|");
    println!("| stacks taken per second (CPU samples + off-CPU spells) | {rate:.0} |");
    println!("| tracer CPU, stacks on | {:.2} % of one CPU |", on * 100.0);
    println!("| tracer CPU, `--no-stacks` | {:.2} % of one CPU |", off * 100.0);
    println!("| added by stacks | {:.2} % of one CPU (goal ≤ 1 % at 99 Hz + 100 off-CPU/s) |", (on - off) * 100.0);
    Ok(())
}
