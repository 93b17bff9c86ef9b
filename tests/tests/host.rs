//! Host-side evidence: scheduler states and block I/O of the traced tree, from tracepoints.
use std::{io::Write as _, path::PathBuf, process::Command};

use gputrace_tests::{num, require_root, run_fakejob, run_fakejob_with};

const MIB: u64 = 1 << 20;

/// A 64 MiB file of random bytes on a real block device (`O_DIRECT` needs one; tmpfs has none).
fn data_file() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gputrace-io-test.bin");
    if std::fs::metadata(&path).map(|m| m.len()).ok() != Some(64 * MIB) {
        let mut f = std::fs::File::create(&path).expect("create data file");
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let chunk: Vec<u8> = (0..MIB)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for _ in 0..64 {
            f.write_all(&chunk).expect("write data file");
        }
        f.sync_all().expect("sync data file");
    }
    path
}

#[test]
fn a_forked_workers_disk_reads_are_attributed_to_it() {
    require_root();
    let file = data_file();
    let (r, code, stderr) = run_fakejob(&["--steps", "20", "--driver-launches", "5", "--read-file", file.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{stderr}");
    let target = num(&r, "/target/pid");
    let io = &r["io"];
    let worker = io["by_process"]
        .as_array()
        .expect("by_process")
        .iter()
        .find(|p| p["pid"].as_u64() != Some(target))
        .unwrap_or_else(|| panic!("{io:#}"));
    let read = worker["read_bytes"].as_u64().expect("bytes");
    // O_DIRECT: every byte is a block request. Within 5% (the bound); in practice exact.
    assert!(read.abs_diff(64 * MIB) <= 64 * MIB / 20, "worker read {read} bytes: {io:#}");
    assert!(worker["reads"].as_u64() >= Some(64), "1 MiB requests or smaller");
    let processes = r["target"]["processes"].as_array().expect("processes");
    assert!(processes.iter().any(|p| p["pid"] == worker["pid"] && p["parent"].as_u64() == Some(target)), "{processes:?}");
    assert!(io["latency_us"]["p50"].as_u64() > Some(0));
}

/// Busy loops pinned to CPU 0, killed when dropped (also when the test fails).
struct Hogs(Vec<std::process::Child>);
impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn competing_for_one_cpu_is_run_queue_time() {
    require_root();
    let hogs = Hogs(
        (0..2)
            .map(|_| Command::new("taskset").args(["-c", "0", "sh", "-c", "while :; do :; done"]).spawn().expect("taskset runs"))
            .collect(),
    );
    std::thread::sleep(std::time::Duration::from_millis(200));
    // The job spins 2 ms per step on CPU 0 next to two busy loops. CFS gives each of the
    // three runnable tasks a third of the CPU, so while the job wants to run it waits about
    // two thirds of the time; we ask for at least half of that.
    let (r, code, stderr) = run_fakejob_with(&["taskset", "-c", "0"], &["--steps", "100", "--driver-launches", "5", "--host-us", "2000"]);
    drop(hogs);
    assert_eq!(code, 0, "{stderr}");
    let m = &r["cpu"]["main_thread"];
    let window = r["window"]["duration_s"].as_f64().expect("window");
    let runqueue = m["runqueue_s"].as_f64().expect("runqueue figure");
    assert!(runqueue >= window / 3.0, "run-queue {runqueue} s of {window} s: {m}");
    assert_eq!(r["verdict"], "cpu-starved", "{:#}", r["diagnoses"]);
    assert!(r["cpu"]["preempted_by"].to_string().contains("sh"), "the busy loops took the CPU: {}", r["cpu"]["preempted_by"]);
}

#[test]
fn a_sleeping_thread_and_a_cpu_bound_one_are_told_apart() {
    require_root();
    let (sleepy, _, _) = run_fakejob(&["--steps", "60", "--driver-launches", "2", "--sleep-ms", "5"]);
    let (busy, _, _) = run_fakejob(&["--steps", "60", "--driver-launches", "2", "--host-us", "5000"]);
    let f = |r: &serde_json::Value, k: &str| r["cpu"]["main_thread"][k].as_f64().unwrap_or_else(|| panic!("{k}: {r:#}"));
    assert!(f(&sleepy, "sleep_s") > 5.0 * f(&sleepy, "on_cpu_s"), "{}", sleepy["cpu"]);
    assert!(f(&busy, "on_cpu_s") > 5.0 * f(&busy, "sleep_s"), "{}", busy["cpu"]);
    // 60 × 5 ms of sleep and of spinning: about 0.3 s each. A spinning thread is running or,
    // on a loaded machine, waiting for a CPU; either way it is not asleep.
    assert!((0.25..1.0).contains(&f(&sleepy, "sleep_s")), "{}", sleepy["cpu"]);
    // The time account partitions the window, and says where each thread's time went.
    let bucket = |r: &serde_json::Value, name: &str| {
        let buckets = r["time_account"]["buckets"].as_array().unwrap_or_else(|| panic!("{r:#}"));
        let total: f64 = buckets.iter().map(|b| b["fraction"].as_f64().expect("fraction")).sum();
        assert!((total - 1.0).abs() < 1e-9, "fractions add up to {total}");
        buckets.iter().find(|b| b["name"] == name).and_then(|b| b["fraction"].as_f64()).expect("bucket")
    };
    assert!(bucket(&sleepy, "sleeping") > 0.5, "{}", sleepy["time_account"]);
    assert!(bucket(&busy, "launching_and_host") + bucket(&busy, "waiting_for_cpu") > 0.5, "{}", busy["time_account"]);
    assert!((0.25..1.0).contains(&(f(&busy, "on_cpu_s") + f(&busy, "runqueue_s"))), "{}", busy["cpu"]);
}

#[test]
fn reading_the_disk_in_the_training_thread_is_io_stall() {
    require_root();
    let file = data_file();
    let (r, code, stderr) = run_fakejob(&[
        "--steps",
        "40",
        "--driver-launches",
        "5",
        "--read-file",
        file.to_str().expect("utf-8"),
        "--read-per-step",
        "4194304",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(r["verdict"], "io-stall", "{:#}", r["diagnoses"]);
    assert!(num(&r, "/io/read_bytes") >= 30 * 4 * MIB, "{}", r["io"]);
}

#[test]
fn waiting_between_steps_with_the_gpu_idle_is_input_starved() {
    require_root();
    let (r, code, stderr) = run_fakejob(&["--steps", "100", "--driver-launches", "5", "--sleep-ms", "5"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(r["verdict"], "input-starved", "{:#}", r["diagnoses"]);
}
