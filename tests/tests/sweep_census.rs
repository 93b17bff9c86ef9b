//! `gputrace sweep`'s census against fake-CUDA processes, which no judgement of time enters:
//! an idle holder (loads the driver, allocates device memory, then sits) and a busy job
//! (released only once the sweep is armed, so its calls in the window are known exactly), a
//! busy job's forked workers, a job that starts in the window, a library of another user's,
//! bad arguments. The fake libcuda is not on any system path: the sweep must find it through
//! the processes' memory maps. There is no NVML here, so memory held from before the window
//! is unknown (null); what the probes see allocated in the window is
//! `cuda.allocated_in_window_bytes`. Beside other suites (`xtask/src/suites.rs`); the
//! judgements of busy jobs are `sweep.rs`.
use gputrace_tests::{fake_cuda_dir, fakejob, num, require_root, sweep_row as row, Gated, Tracer};
use serde_json::Value;

/// A fake job that allocated device memory and now only holds it.
fn idle_holder() -> Gated {
    let mut idle = Gated::start(&["--hold-ms", "60000"]);
    idle.release();
    idle.wait_for("holding");
    idle
}

#[test]
fn names_the_idle_holder_and_counts_the_busy_job_exactly() {
    require_root();
    let idle = idle_holder();
    let mut busy = Gated::start(&["--steps", "10", "--driver-launches", "100", "--sync", "--hold-ms", "60000"]);
    let scratch = gputrace_tests::scratch("sweep", "page");
    let page = scratch.join("sweep.html");

    let sweep = Tracer::sweep(&["--duration", "3", "--html", page.to_str().expect("a UTF-8 temp path")], None);
    busy.release();
    busy.wait_for("holding");
    let (r, code, stderr) = sweep.report();
    let (idle_pid, busy_pid) = (idle.pid, busy.pid);
    idle.stop();
    busy.stop();

    assert_eq!(code, 0, "{stderr}");
    assert_eq!(r["schema"], "gputrace.sweep/1");
    assert!(r["window"]["cuda_probes"].as_bool().expect("bool"), "{r:#}");
    // No NVML on this machine: one note, gpu null.
    assert!(r["gpu"].is_null());
    assert!(stderr.contains("NVML"), "{stderr}");

    let b = row(&r, busy_pid);
    assert_eq!(b["state"], "active", "{b:#}");
    assert_eq!(num(b, "/launches"), 1000, "{b:#}");
    // One cudaDeviceSynchronize per step reaches cuCtxSynchronize_v2.
    assert_eq!(num(b, "/syncs"), 10, "{b:#}");
    assert_eq!(num(b, "/copies"), 0, "{b:#}");
    assert_eq!(num(b, "/cuda/kernels"), 1000, "{b:#}");
    // Its 64 MiB device buffer was allocated after the gate, inside the window.
    assert_eq!(num(b, "/cuda/allocated_in_window_bytes"), 64 << 20, "{b:#}");
    // The runtime retained the primary context on its first call, inside the window.
    let contexts = b["cuda"]["contexts"].as_array().expect("contexts");
    assert!(contexts.iter().any(|c| c["symbol"] == "cuDevicePrimaryCtxRetain" && c["result"] == 0), "{b:#}");
    let last = b["last_activity_s"].as_f64().expect("busy was seen");
    assert!((0.0..3.5).contains(&last), "{b:#}");
    assert_eq!(b["user"], "root");
    assert!(b["command"].as_str().expect("command").contains("fakejob"), "root sees command lines: {b:#}");
    assert!(b["gpu_memory_bytes"].is_null(), "without NVML memory is unknown: {b:#}");
    // Its launching thread ended after ten steps (the process holds its memory on another):
    // that thread's time cannot be read any more, so the job is not judged.
    assert!(b["judgement"].is_null(), "{b:#}");

    let i = row(&r, idle_pid);
    assert_eq!(i["state"], "idle", "{i:#}");
    assert_eq!((num(i, "/launches"), num(i, "/syncs"), num(i, "/copies")), (0, 0, 0), "{i:#}");
    assert!(i["last_activity_s"].is_null(), "{i:#}");
    assert!(i["gpu_memory_bytes"].is_null(), "{i:#}");
    // Its allocation was made before the window: the probes cannot see it.
    assert_eq!(num(i, "/cuda/allocated_in_window_bytes"), 0, "{i:#}");
    assert!(i["holds"].as_array().expect("holds").contains(&Value::from("libcuda")), "{i:#}");
    assert!(i["age_s"].as_f64().expect("age") >= 0.0);

    let diagnoses = r["diagnoses"].as_array().expect("diagnoses");
    let named: Vec<&Value> = diagnoses.iter().filter(|d| d["id"] == "idle-gpu-holder").collect();
    assert!(named.iter().any(|d| d["pid"] == idle_pid && d["user"] == "root"), "{r:#}");
    assert!(!named.iter().any(|d| d["pid"] == busy_pid), "the busy job is not blamed: {r:#}");

    let libraries = r["tracer"]["libraries"].as_array().expect("libraries");
    assert!(libraries.iter().any(|l| l["path"].as_str().is_some_and(|p| p.ends_with("libcuda.so.1"))), "{r:#}");
    assert!(r["tracer"]["complete"].as_bool().expect("bool"), "{r:#}");
    assert!(num(&r, "/tracer/processes_scanned") > 0);
    assert!(num(&r, "/tracer/probe_hits") >= 1010, "{r:#}");

    // The page (`--html`): the same sweep as a table, the idle holder diagnosed, no requests.
    let html = std::fs::read_to_string(&page).expect("the sweep's page was written");
    let _ = std::fs::remove_file(&page);
    let table = html.split(r#"<table class="sites" id="processes">"#).nth(1).expect("the process table");
    for pid in [idle_pid, busy_pid] {
        assert!(table.contains(&format!("<tr><td>{pid}</td>")), "pid {pid} has no row");
    }
    assert!(html.contains(&format!("idle-gpu-holder — pid {idle_pid} ")), "the idle holder is not diagnosed on the page");
    assert!(html.contains("default-src 'none'") && !html.contains("<script"), "a page with no script and no requests");
}

#[test]
fn a_busy_jobs_forked_children_are_its_workers_not_idle_holders() {
    require_root();
    let idle = idle_holder();
    let mut busy = Gated::start(&["--steps", "10", "--driver-launches", "100", "--sync", "--hold-ms", "60000", "--idle-children", "2"]);
    let children: Vec<u32> = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", busy.pid))
        .expect("the job's children")
        .split_whitespace()
        .map(|p| p.parse().expect("a pid"))
        .collect();
    assert_eq!(children.len(), 2, "{children:?}");
    let sweep = Tracer::sweep(&["--duration", "3"], None);
    busy.release();
    busy.wait_for("holding");
    let (r, code, stderr) = sweep.report();
    let (idle_pid, busy_pid) = (idle.pid, busy.pid);
    idle.stop();
    busy.stop();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(row(&r, busy_pid)["state"], "active");
    let rows: Vec<u64> = r["processes"].as_array().expect("rows").iter().map(|p| p["pid"].as_u64().expect("pid")).collect();
    let job_at = rows.iter().position(|&p| p == u64::from(busy_pid)).expect("the job has a row");
    for child in &children {
        let c = row(&r, *child);
        assert_eq!((c["state"].as_str(), c["worker_of"].as_u64()), (Some("worker"), Some(u64::from(busy_pid))), "{c:#}");
        let at = rows.iter().position(|&p| p == u64::from(*child)).expect("a row");
        assert!(at > job_at && at <= job_at + 2, "listed under its job: {rows:?}");
    }
    // Of this test's processes (the sweep sees the whole host: other suites' jobs beside it).
    let ours: Vec<u64> = [idle_pid, busy_pid].into_iter().chain(children.iter().copied()).map(u64::from).collect();
    let named: Vec<u64> = r["diagnoses"]
        .as_array()
        .expect("diagnoses")
        .iter()
        .filter(|d| d["id"] == "idle-gpu-holder")
        .filter_map(|d| d["pid"].as_u64())
        .filter(|pid| ours.contains(pid))
        .collect();
    assert_eq!(named, [u64::from(idle_pid)], "only the real idle holder is blamed: {r:#}");
}

#[test]
fn a_job_that_starts_during_the_window_is_counted() {
    require_root();
    // Nothing maps the fake driver when the sweep arms: it is probed because it is the
    // libcuda a process starting now would load (the loader path).
    let sweep = Tracer::sweep(&["--duration", "2"], Some(&fake_cuda_dir()));
    let mut job = Gated::start(&["--steps", "5", "--driver-launches", "20", "--hold-ms", "60000"]);
    job.release();
    job.wait_for("holding");
    let (r, code, stderr) = sweep.report();
    let pid = job.pid;
    job.stop();
    assert_eq!(code, 0, "{stderr}");
    let j = row(&r, pid);
    assert_eq!(j["state"], "active", "{j:#}");
    assert_eq!(num(j, "/launches"), 100, "{j:#}");
}

#[test]
fn a_libcuda_owned_by_another_user_is_neither_parsed_nor_probed() {
    use std::os::unix::fs::MetadataExt as _;
    require_root();
    // Issue 56: a library qualifies by its file name, so any user can offer root a
    // `libcuda.so.1`. A job maps one owned by `nobody`: the sweep must leave it alone and say so.
    let dir = gputrace_tests::scratch("sweep", "nobody");
    for lib in ["libcuda.so.1", "libcudart.so.13"] {
        std::fs::copy(fake_cuda_dir().join(lib), dir.join(lib)).expect("copy the fake CUDA");
    }
    let theirs = dir.join("libcuda.so.1");
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown to nobody");
    let inode = std::fs::metadata(&theirs).expect("stat").ino();
    let mut job = Gated::spawn(
        std::process::Command::new(fakejob())
            .env_remove("LD_LIBRARY_PATH")
            .arg("--gate")
            .arg("--lib-dir")
            .arg(&*dir)
            .args(["--hold-ms", "60000"]),
    );
    job.release();
    job.wait_for("holding");
    let (r, code, stderr) = Tracer::sweep(&["--duration", "1"], None).report();
    job.stop();
    assert_eq!(code, 0, "{stderr}");
    let probed = r["tracer"]["libraries"].as_array().expect("libraries");
    assert!(!probed.iter().any(|l| l["inode"] == inode), "nobody's libcuda was probed: {:#}", r["tracer"]);
    let notes = r["tracer"]["notes"].to_string();
    assert!(notes.contains("owned by uid 65534"), "{notes}");
}

#[test]
fn bad_durations_are_usage_errors() {
    for bad in ["0", "-1", "abc", "nan", "inf"] {
        let out =
            std::process::Command::new(gputrace_tests::gputrace()).arg("sweep").arg(format!("--duration={bad}")).output().expect("runs");
        assert_eq!(out.status.code(), Some(2), "--duration {bad}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("duration"), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // The fakejob binary exists (keeps the fixture honest for the other tests).
    assert!(fakejob().exists());
}
