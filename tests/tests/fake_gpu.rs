//! The fake GPU tells the truth where the diagnosis tests look: its queue runs whether or not
//! the job waits, pushes back when full, and an exiting job pays for what it left queued
//! (tests/fake-cuda/libcuda.c; the depth is measured on an H100, docs/development.md).
use std::{process::Command, time::Instant};

use gputrace_tests::{fake_cuda_dir, fakejob};

/// The model's own checks (tests/fake-cuda/queue_check.c): the depth at which a launch
/// blocks, streams as FIFOs of their own, the default stream waiting for the others, events
/// and queries, and the exit paying for queued work. Once at the measured depth, once at a
/// lowered one (the depth is read, not hard-wired).
#[test]
fn the_fake_gpus_queue_behaves_as_the_measured_gpu() {
    for depth in [None, Some("64")] {
        let mut cmd = Command::new(fake_cuda_dir().join("queue_check"));
        if let Some(d) = depth {
            cmd.env("FAKE_GPU_QUEUE_DEPTH", d);
        }
        let out = cmd.output().expect("queue_check runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "depth {depth:?}:\n{text}{}", String::from_utf8_lossy(&out.stderr));
        let expected = depth.map_or(1021, |d| d.parse::<u32>().expect("a depth") - 1);
        assert!(text.contains(&format!("pending_when_blocked {expected}\n")), "{text}");
    }
}

/// Wall time of `fakejob ARGS` untraced, and the loop's own time (`--print-time`).
fn timed(args: &[&str]) -> (f64, f64) {
    let started = Instant::now();
    let out = Command::new(fakejob()).args(args).arg("--print-time").output().expect("fakejob runs");
    let wall = started.elapsed().as_secs_f64();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let work_ns: f64 = text.lines().find_map(|l| l.strip_prefix("work_ns ")).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{text}"));
    (wall, work_ns / 1e9)
}

/// 3000 steps of two 100 µs kernels: 0.6 s of GPU work, whether or not the job syncs. The old
/// fake's queue had no bound and no cost at exit: without `--sync` this job ran in 14 ms. (A
/// loop without syncs runs ahead of the GPU by the queue's depth at most: the last 1022
/// kernels are paid after it, here by `--print-time`'s sync, else at exit.)
#[test]
fn a_job_takes_at_least_its_kernels_time_whether_or_not_it_syncs() {
    let kernels_s = 3000.0 * 2.0 * 100e-6;
    let plain = ["--steps", "3000", "--driver-launches", "2", "--kernel-us", "100"];
    let (wall, work) = timed(&plain);
    assert!(wall >= kernels_s, "without a sync the job still pays its kernels: {wall:.3} s for {kernels_s} s of kernels");
    // The loop and the work it queued (`--print-time` ends with a device sync): all of it.
    assert!(work >= kernels_s, "the loop's work takes its kernels' time: {work:.3} s");
    assert!(work < wall, "the process's start and exit are not the loop's: loop {work:.3} s, process {wall:.3} s");
    let (synced, _) = timed(&[&plain[..], &["--sync"]].concat());
    assert!(synced >= kernels_s, "{synced:.3} s");
}
