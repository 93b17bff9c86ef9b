//! The fake NVML (tests/fake-cuda/fake_nvml.c) reports the fake GPU's own busy time and
//! memory, so the report's `gpu` section, and the verdicts that read it, can be checked
//! against what the job is known to have done.
//!
//! Each test fails if the fake lies: a utilization that ignores the timeline reads the same for
//! a half-idle job and a GPU-bound one, and memory listed under another pid is not the job's.
use std::{process::Command, time::Duration};

use gputrace_tests::{
    fakejob, gputrace, require_root, run_fakejob_nvml,
    twins::{self, owned, usual_fix},
    FakeNvml, Gated, Tracer,
};
use serde_json::Value;

/// The job's device in the report, checked to be the fake NVML's.
fn device(r: &Value) -> &Value {
    let gpu = &r["gpu"];
    assert_eq!(gpu["available"], true, "{r:#}");
    assert_eq!(gpu["driver_version"], "fake-1", "{gpu:#}");
    let d = &gpu["devices"][0];
    assert_eq!(d["name"], "Fake GPU (gputrace tests)", "{gpu:#}");
    d
}

/// The utilization mean and the number of samples, from the driver's sample buffer.
fn utilization(d: &Value) -> (f64, u64) {
    assert_eq!(d["utilization_source"], "sample-buffer", "{d:#}");
    let u = &d["utilization"];
    (u["mean"].as_f64().unwrap_or_else(|| panic!("no mean: {d:#}")), u["samples"].as_u64().expect("samples"))
}

/// fakejob's `work_ns N` (`--print-time`; under `run` its output goes to stderr), in seconds.
fn work_s(stderr: &str) -> f64 {
    let ns: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("work_ns ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("fakejob printed no work_ns:\n{stderr}"));
    ns as f64 / 1e9
}

/// 150 steps of 4 ms host work, then 10 kernels of 400 µs and a synchronize: the GPU works
/// 4 ms of each step of 8 ms or more (more on a busy machine, where the host work and the
/// wake-ups stretch), 0.6 s in all. The truth is that over the job's own measured time.
/// Measured on two busy cores: 35.6–47.0 % read for truths of 36.0–47.6 % (0–1.6 points
/// under; 2.4–3.3 while the driver's samples were placed at the tick that read them).
#[test]
fn utilization_is_the_busy_share_of_a_known_duty_cycle() {
    require_root();
    let steps = 150;
    let args = ["--steps", "150", "--driver-launches", "10", "--kernel-us", "400", "--host-us", "4000", "--sync", "--print-time"];
    let (r, code, stderr) = run_fakejob_nvml(&[], &args);
    assert_eq!(code, 0, "{stderr}");
    let busy_s = f64::from(steps) * 10.0 * 400e-6;
    let work = work_s(&stderr);
    let truth = 100.0 * busy_s / work;
    assert!((25.0..=50.0).contains(&truth), "the job ran {work:.3} s for {busy_s} s of GPU work: not the duty cycle planted");
    let d = device(&r);
    let (mean, samples) = utilization(d);
    // About 6 samples a second. The one across the window's start counts for its part inside,
    // read as even throughout (docs/report.md), though its part before the job was idle.
    eprintln!("duty cycle: {mean:.1} % over {samples} samples, truth {truth:.1} % of {work:.3} s");
    assert!(samples >= 6, "{samples} samples in {work:.3} s: {d:#}");
    assert!((mean - truth).abs() <= 5.0, "utilization {mean:.1} % for a job busy {truth:.1} % of {work:.3} s: {d:#}");
    // The idle time gputrace saw (the queue empty after syncs) fits in the idle time NVML says.
    assert_eq!(r["gpu_idle"]["consistent"], true, "{:#}", r["gpu_idle"]);
}

/// A GPU-bound job of about 1 s under `run`: the window opens as the job starts, so the
/// driver's first sample read in it is mostly of the idle time before. Counted by the tick
/// that read them, the samples pulled such a job down to 83.7–92.2 % here (79–82 % with 50
/// steps of ten kernels, `no-bottleneck-found` each time); counted for the time each covers
/// inside the window, 93.6–99.8 %. 25 steps of twenty 2 ms kernels and a synchronize: 40 ms
/// of work per synchronize, so that the host's late wake-ups on two busy cores idle the GPU
/// little.
#[test]
fn a_short_gpu_bound_run_reads_busy_from_its_first_sample() {
    require_root();
    let args = ["--steps", "25", "--driver-launches", "20", "--kernel-us", "2000", "--sync", "--print-time"];
    let (r, code, stderr) = run_fakejob_nvml(&[], &args);
    assert_eq!(code, 0, "{stderr}");
    let work = work_s(&stderr);
    assert!((0.9..=2.0).contains(&work), "the job ran {work:.3} s: not the ~1 s planted");
    // 1 s of kernels over the job's own time: what a busy machine leaves of its 100 %.
    let truth = 100.0 * 25.0 * 20.0 * 2e-3 / work;
    let d = device(&r);
    let (mean, samples) = utilization(d);
    eprintln!("short GPU-bound run: {mean:.1} % over {samples} samples, truth {truth:.1} % of {work:.3} s, verdict {}", r["verdict"]);
    assert!(samples >= 4, "{samples} samples in {work:.3} s: {d:#}");
    assert!(mean >= 90.0, "utilization {mean:.1} % for a GPU-bound job of {work:.3} s: {d:#}");
    // By tick the first sample read in the window, mostly of the idle GPU before the job,
    // cost 7.8–20 points here; by its time, 0.4–4.7 (docs/development.md says why any).
    assert!(mean >= truth - 6.0, "utilization {mean:.1} % for a job busy {truth:.1} % of {work:.3} s: {d:#}");
    assert_eq!(r["verdict"], "gpu-bound", "{:#}", r["diagnoses"]);
}

/// gputrace attached for `secs` to a fakejob on the fake GPU, which is still running (or
/// holding its memory) when the report is made and is killed after it (a job left behind by
/// a failed test ends by itself within seconds). `at_work`: the job is
/// released 300 ms before gputrace starts, so that every slice NVML reads is of the job at
/// work; else it is released once gputrace is armed, so that its allocations are traced.
fn attach(args: &[&str], secs: &str, at_work: bool) -> (Value, u32) {
    require_root();
    let nvml = FakeNvml::new();
    let mut job = Gated::spawn(nvml.apply(Command::new(fakejob()).arg("--gate").args(args)));
    assert!(nvml.published(), "the fake libcuda wrote no ledger on loading");
    if at_work {
        job.release();
        std::thread::sleep(Duration::from_millis(300));
    }
    let tracer = Tracer::start(
        nvml.apply(&mut Command::new(gputrace())).args(["-v", "attach", "--json", "--duration", secs, "--pid"]).arg(job.pid.to_string()),
    );
    if !at_work {
        job.release();
    }
    let (r, code, stderr) = tracer.report();
    let _ = job.child.kill();
    let _ = job.child.wait();
    assert_eq!(code, 0, "{stderr}");
    (r, job.pid)
}

/// Ten 2 ms kernels, then a synchronize: the GPU is idle only while the host wakes up from
/// the synchronize and launches again: tens of µs, but milliseconds at times on two busy cores
/// with gputrace beside the job (five kernels a step read 92.6–99.1 % there; the job alone
/// 98–99 %), hence 20 ms of work per synchronize. Measured: 95–100 %.
#[test]
fn a_gpu_bound_job_reads_busy_and_is_gpu_bound() {
    let (r, _) = attach(&["--steps", "200", "--driver-launches", "10", "--kernel-us", "2000", "--sync"], "1500ms", true);
    let d = device(&r);
    let (mean, samples) = utilization(d);
    eprintln!("GPU-bound: {mean:.1} % over {samples} samples, verdict {}", r["verdict"]);
    assert!(samples >= 6, "{samples} samples in 1.5 s: {d:#}");
    assert!(mean >= 90.0, "utilization {mean:.1} % for a GPU-bound job: {d:#}");
    assert_eq!(r["verdict"], "gpu-bound", "{:#}", r["diagnoses"]);
}

/// The job holds its 64 MiB buffer and ten 3 MiB blocks it never frees (94 MiB): NVML lists
/// it at the end, by pid, with exactly that; the device's memory in use peaks at that; and the
/// allocations gputrace traced come to the same.
#[test]
fn the_jobs_memory_is_attributed_to_its_pid() {
    let held: u64 = (64 << 20) + 10 * (3 << 20);
    let (r, pid) = attach(
        &["--steps", "10", "--driver-launches", "1", "--kernel-us", "100", "--leak", "3145728", "--hold-ms", "4000"],
        "1200ms",
        false,
    );
    let d = device(&r);
    let processes = d["processes"].as_array().expect("processes");
    assert_eq!(processes.len(), 1, "only the job is on the fake GPU: {d:#}");
    assert_eq!(processes[0]["pid"], pid, "{d:#}");
    assert_eq!(processes[0]["traced"], true, "{d:#}");
    assert_eq!(processes[0]["memory_bytes"], held, "{d:#}");
    assert_eq!(d["target_memory_bytes"], held, "{d:#}");
    assert_eq!(d["memory_used_bytes"], held, "{d:#}");
    let m = &r["memory"];
    assert_eq!(m["held_bytes"], held, "{m:#}");
    assert_eq!(m["reserved_bytes"], held, "what NVML says the job holds is what it allocated: {m:#}");
    // A job that holds memory and runs nothing: NVML says the GPU was idle.
    let (mean, samples) = utilization(d);
    eprintln!("holding: {mean:.1} % over {samples} samples, {} bytes held", m["held_bytes"]);
    assert!(mean <= 5.0, "utilization {mean:.1} % while the job only held memory: {d:#}");
}

/// The step model on jobs whose truth is known analytically: the fake GPU's busy time is
/// set by the arguments, and the fake NVML reports it (#32). Returns the report and the
/// diagnosis `id`'s predicted steps/s after its fix.
fn predicted(r: &Value, id: &str) -> f64 {
    let d = r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == id).unwrap_or_else(|| panic!("no {id}: {r:#}"));
    d["saving"]["steps_per_s_after"].as_f64().unwrap_or_else(|| panic!("no steps/s after {id}: {d:#}"))
}

/// Each step: 2 ms of host work after the sync (the GPU idle), 10 kernels of 300 µs, and a
/// scalar read. Without the per-step sync the host's 2 ms hide behind the GPU's 3 ms: the
/// step becomes the GPU's 3 ms, 333 steps/s. Graphs would save only the 10 launches.
#[test]
fn sync_and_host_work_rank_the_sync_fix_first_at_the_gpus_rate() {
    require_root();
    let args = ["--steps", "400", "--driver-launches", "10", "--kernel-us", "300", "--host-us", "2000", "--item", "1"];
    let (r, code, stderr) = run_fakejob_nvml(&[], &args);
    assert_eq!(code, 0, "{stderr}");
    // Its twins: the read dropped, or the host work moved to a worker; both leave the GPU's
    // 3 ms, a tie the test leaves to the ranking.
    let planted = owned(&args);
    let _ = twins::assert_against(&r, &planted, &[usual_fix(&planted, "host-sync"), usual_fix(&planted, "host-bound")]);
    let after = predicted(&r, "host-sync");
    assert!((after - 1e6 / 3000.0).abs() <= 0.10 * 1e6 / 3000.0, "predicted {after:.0} steps/s, truth 333: {r:#}");
    let launch = r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == "launch-bound");
    assert!(launch.is_none_or(|d| d["impact"].as_f64() < Some(0.10)), "{r:#}");
}

/// Each step: 300 launches of 1 µs kernels and a sync; the host's launching (2 µs of fake
/// driver each, plus the probe) is the step. Captured as a graph, the step is the GPU's
/// 300 µs: 3333 steps/s, at most.
#[test]
fn tiny_launches_rank_the_launch_fix_first_at_the_gpus_rate() {
    require_root();
    let args = ["--steps", "1500", "--driver-launches", "300", "--kernel-us", "1", "--sync"];
    let (r, code, stderr) = run_fakejob_nvml(&[], &args);
    assert_eq!(code, 0, "{stderr}");
    let planted = owned(&args);
    let _ = twins::assert_against(&r, &planted, &[usual_fix(&planted, "launch-bound"), usual_fix(&planted, "host-sync")]);
    assert_eq!(r["verdict"], "launch-bound", "{r:#}");
    let after = predicted(&r, "launch-bound");
    assert!((after - 1e6 / 300.0).abs() <= 0.10 * 1e6 / 300.0, "predicted {after:.0} steps/s, truth 3333: {r:#}");
    let d = r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == "launch-bound").expect("launch-bound");
    assert_eq!(d["saving"]["bound"], "gpu", "{d:#}");
}

/// NVML counts two GPUs and the first cannot be opened (lost from the bus): the one that opens
/// keeps NVML's index, 1, with its samples, as `nvidia-smi` and the sweep name it; numbered
/// by position it would be reported as GPU 0, the lost one.
#[test]
fn a_gpu_that_fails_to_open_does_not_renumber_the_others() {
    require_root();
    let nvml = FakeNvml::new();
    let mut command = Command::new(gputrace());
    nvml.apply(&mut command).env("FAKE_NVML_LOST_FIRST", "1").args(["run", "--json", "--"]).arg(fakejob());
    command.args(["--steps", "100", "--driver-launches", "10", "--kernel-us", "2000", "--sync"]);
    let out = command.output().expect("gputrace runs");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = gputrace_tests::report_json(&out.stdout);
    let devices = r["gpu"]["devices"].as_array().unwrap_or_else(|| panic!("no devices: {:#}", r["gpu"]));
    assert_eq!(devices.len(), 1, "only the device that opened: {:#}", r["gpu"]);
    assert_eq!(devices[0]["index"].as_u64(), Some(1), "NVML's index, not the position: {:#}", devices[0]);
    let (mean, samples) = utilization(&devices[0]);
    assert!(samples >= 2 && mean > 50.0, "its own samples stay with it: {mean:.1} % over {samples}: {:#}", devices[0]);
}
