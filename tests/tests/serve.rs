//! `gputrace serve` judges as `sweep` does: against the fake CUDA and the fake NVML, an idle
//! holder (its 64 MiB are what the fake NVML lists), a busy job with two forked children that
//! sleep (DataLoader workers) and a job fed through a pipe, scraped over HTTP, parsed by an
//! OpenMetrics parser, compared with a JSON sweep of the same host. Alone (it reads
//! judgements); the server's conduct is `serve_conduct.rs`.
#![allow(clippy::float_cmp, reason = "the values compared are whole numbers of bytes, counts and 0/1, exact in an f64")]
use std::process::Command;

use gputrace_tests::{
    fakejob, gputrace,
    metrics_server::{sample, value, Server},
    require_root, FakeNvml, Gated,
};
use serde_json::Value;

#[test]
fn serve_is_scraped_twice_and_agrees_with_the_sweep() {
    require_root();
    let nvml = FakeNvml::new();
    // The idle holder writes the fake GPU's ledger: NVML lists it with its 64 MiB.
    let mut idle = {
        let mut c = Command::new(fakejob());
        nvml.apply(&mut c);
        Gated::spawn(c.args(["--gate", "--hold-ms", "120000"]))
    };
    idle.release();
    idle.wait_for("holding");
    let mut busy = Gated::start(&["--idle-children", "2", "--steps", "200000", "--driver-launches", "10", "--kernel-us", "100", "--sync"]);
    busy.release();
    // A job fed by a worker process through a pipe: input-starved.
    let mut fed = Gated::start(&["--steps", "1000000", "--driver-launches", "5", "--pipe-worker-us", "2000"]);
    fed.release();

    let server = Server::start(&nvml, &["--interval", "2"]);
    let first = server.metrics_after(0.0);
    let second = server.metrics_after(value(&first, "gputrace_sweeps", &[]));
    let (idle_pid_n, busy_pid_n) = (idle.pid, busy.pid);
    let (idle_pid, busy_pid) = (idle_pid_n.to_string(), busy_pid_n.to_string());

    // A JSON sweep of the same host meanwhile: the same judgement.
    let mut sweep = Command::new(gputrace());
    nvml.apply(&mut sweep);
    let out = sweep.args(["sweep", "--json", "--duration", "2"]).output().expect("sweep runs");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let third = server.metrics_after(value(&second, "gputrace_sweeps", &[]));
    let children: Vec<String> = json["processes"].as_array().expect("rows").iter().filter(|p| p["worker_of"] == busy.pid).map(|p| p["pid"].to_string()).collect();
    let fed_pid = fed.pid.to_string();
    fed.stop();
    busy.stop();
    idle.stop();
    let (code, stderr) = server.stop();
    assert_eq!(code, 0, "serve ends cleanly on SIGTERM: {stderr}");

    let row = |pid: u32| json["processes"].as_array().expect("rows").iter().find(|p| p["pid"] == pid).unwrap_or_else(|| panic!("{pid}: {json:#}")).clone();
    assert_eq!(row(idle_pid_n)["state"], "idle", "{json:#}");
    assert_eq!(row(busy_pid_n)["state"], "active", "{json:#}");
    assert_eq!(children.len(), 2, "the busy job's two children are its workers: {json:#}");
    let held = row(idle_pid_n)["gpu_memory_bytes"].as_f64().expect("NVML lists the idle holder");
    assert_eq!(held, f64::from(64 << 20));

    for m in [&second, &third] {
        // The contract's names, each with the sweep's values.
        assert_eq!(value(m, "gputrace_process_active", &[("pid", &busy_pid), ("state", "active")]), 1.0, "{m}");
        assert_eq!(value(m, "gputrace_process_active", &[("pid", &idle_pid), ("state", "idle")]), 0.0, "{m}");
        assert_eq!(value(m, "gputrace_idle_gpu_holder_bytes", &[("pid", &idle_pid), ("user", "root"), ("command", "fakejob")]), held, "{m}");
        assert_eq!(value(m, "gputrace_process_gpu_memory_bytes", &[("pid", &idle_pid), ("gpu", "0")]), held, "{m}");
        assert!(sample(m, "gputrace_idle_gpu_holder_bytes", &[("pid", &busy_pid)]).is_none(), "the busy job is no idle holder: {m}");
        for child in &children {
            assert!(sample(m, "gputrace_idle_gpu_holder_bytes", &[("pid", child)]).is_none(), "a sleeping worker is no idle holder: {m}");
        }
        // The fake GPU ran nothing of the idle holder's, and the fake NVML says so.
        assert_eq!(value(m, "gputrace_gpu_utilization_ratio", &[("gpu", "0")]), 0.0, "{m}");
        let used = json["gpu"]["devices"][0]["memory_used_bytes"].as_f64().expect("NVML's memory");
        assert_eq!(value(m, "gputrace_gpu_memory_used_bytes", &[("gpu", "0")]), used, "{m}");
        let launches = value(m, "gputrace_process_kernel_launches_per_second", &[("pid", &busy_pid)]);
        assert!(launches > 100.0, "the busy job launches ~9,000 kernels a second: {launches}");
        assert_eq!(value(m, "gputrace_lost_events", &[]), 0.0, "{m}");
        let window = value(m, "gputrace_sweep_duration_seconds", &[]);
        assert!((1.9..3.0).contains(&window), "windows of --interval 2: {window}");
        assert_eq!(value(m, "gputrace_cuda_probes", &[]), 1.0);
        // Each job's judgement: the busy one waits for its GPU, the fed one for its input; the
        // idle holder and the workers are not judged.
        assert_eq!(value(m, "gputrace_job_verdict", &[("pid", &busy_pid), ("verdict", "gpu-bound")]), 1.0, "{m}");
        assert_eq!(value(m, "gputrace_job_verdict", &[("pid", &fed_pid), ("verdict", "input-starved")]), 1.0, "{m}");
        assert!(value(m, "gputrace_job_diagnosis_ratio", &[("pid", &fed_pid), ("id", "input-starved")]) > 0.5, "{m}");
        assert!(value(m, "gputrace_job_time_ratio", &[("pid", &busy_pid), ("part", "waiting_on_gpu")]) > 0.5, "{m}");
        for pid in children.iter().chain([&idle_pid]) {
            assert!(sample(m, "gputrace_job_verdict", &[("pid", pid)]).is_none(), "{pid} is no job: {m}");
        }
    }
    // The JSON sweep judged them alike.
    assert_eq!(row(busy_pid_n)["judgement"]["verdict"], "gpu-bound", "{json:#}");
    let fed_row = row(fed_pid.parse().expect("a pid"));
    assert_eq!(fed_row["judgement"]["verdict"], "input-starved", "{json:#}");
    assert!(fed_row["judgement"]["diagnoses"][0]["ratio"].as_f64() > Some(0.5), "{json:#}");
    // Counters only grow; each scrape saw a new window.
    assert!(value(&third, "gputrace_sweeps", &[]) > value(&second, "gputrace_sweeps", &[]));
    assert!(value(&third, "gputrace_probe_hits", &[]) > value(&second, "gputrace_probe_hits", &[]));
}
