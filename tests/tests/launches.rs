//! Launch counting: every launch counted exactly once, whichever API layer it came through,
//! per thread, for the traced process only.
use gputrace_tests::{hits, num, require_root, run_fakejob, Gated, Tracer};

#[test]
fn run_counts_every_launch_once_across_threads_and_layers() {
    require_root();
    // 2 threads × 50 steps × (30 runtime + 20 driver + 10 Ex launches, 4 graphs).
    let (r, code, stderr) = run_fakejob(&[
        "--threads",
        "2",
        "--steps",
        "50",
        "--runtime-launches",
        "30",
        "--driver-launches",
        "20",
        "--ex-launches",
        "10",
        "--graphs",
        "4",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(r["schema"], "gputrace.report/1");
    assert_eq!(num(&r, "/cuda/launches/kernels"), 2 * 50 * (30 + 20 + 10));
    assert_eq!(num(&r, "/cuda/launches/graphs"), 2 * 50 * 4);
    // cudaLaunchKernel forwards to cuLaunchKernel: that symbol carries runtime + driver.
    assert_eq!(hits(&r, "cuLaunchKernel"), 2 * 50 * 50);
    assert_eq!(hits(&r, "cuLaunchKernelEx"), 2 * 50 * 10);
    assert_eq!(hits(&r, "cuGraphLaunch"), 2 * 50 * 4);
    let threads = r["cuda"]["threads"].as_array().expect("threads");
    let workers: Vec<_> = threads.iter().filter(|t| t["kernels"].as_u64() > Some(0)).collect();
    assert_eq!(workers.len(), 2, "{threads:?}");
    for t in workers {
        assert_eq!(t["kernels"], 50 * 60);
        assert_eq!(t["graphs"], 50 * 4);
    }
    assert_eq!(r["window"]["stopped_by"], "target-exited");
    assert_eq!(r["tracer"]["complete"], true);
    assert!(num(&r, "/cpu/main_thread/tid") > 0);
}

#[test]
fn attach_counts_only_the_target_process() {
    require_root();
    let mut target = Gated::start(&["--steps", "100", "--driver-launches", "7", "--graphs", "1"]);
    let mut bystander = Gated::start(&["--steps", "100", "--driver-launches", "13"]);
    let tracer = Tracer::attach(target.pid, &[]);
    target.release();
    bystander.release();
    target.finish();
    bystander.finish();
    let (r, code, stderr) = tracer.report();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(num(&r, "/target/pid"), u64::from(target_pid(&r)));
    assert_eq!(num(&r, "/cuda/launches/kernels"), 700, "the bystander's 1300 launches must not count");
    assert_eq!(num(&r, "/cuda/launches/graphs"), 100);
    assert_eq!(r["window"]["stopped_by"], "target-exited");
}

fn target_pid(r: &serde_json::Value) -> u32 {
    r["target"]["pid"].as_u64().expect("pid") as u32
}

#[test]
fn attach_before_cuda_is_loaded_picks_it_up() {
    require_root();
    let mut job = Gated::start(&["--load-after-gate", "--settle-ms", "600", "--steps", "20", "--driver-launches", "5"]);
    let tracer = Tracer::attach(job.pid, &[]);
    job.release();
    job.finish();
    let (r, code, stderr) = tracer.report();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(num(&r, "/cuda/launches/kernels"), 100);
    assert_eq!(r["target"]["cuda_loaded"], true);
    let notes = r["tracer"]["notes"].to_string();
    assert!(notes.contains("has not loaded the CUDA driver"), "{notes}");
}

#[test]
fn child_processes_are_followed() {
    require_root();
    let mut job = Gated::start(&["--fork", "--steps", "30", "--driver-launches", "10"]);
    let tracer = Tracer::attach(job.pid, &[]);
    job.release();
    job.finish();
    let (r, code, stderr) = tracer.report();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(num(&r, "/cuda/launches/kernels"), 2 * 300, "parent and forked child");
    let pids: Vec<u64> = r["cuda"]["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter(|t| t["kernels"] == 300)
        .map(|t| t["pid"].as_u64().expect("pid"))
        .collect();
    assert_eq!(pids.len(), 2);
    assert_ne!(pids[0], pids[1], "the launches come from two processes");
    let processes = r["target"]["processes"].as_array().expect("processes");
    assert!(processes.iter().any(|p| p["parent"].as_u64() == Some(u64::from(job_pid(&r)))), "{processes:?}");
}

fn job_pid(r: &serde_json::Value) -> u32 {
    target_pid(r)
}

#[test]
fn duration_and_signals_stop_the_trace_with_a_report() {
    require_root();
    let mut job = Gated::start(&["--steps", "2000000", "--driver-launches", "1", "--host-us", "100"]);
    job.release();
    let tracer = Tracer::attach(job.pid, &["--duration", "1"]);
    let (r, code, _) = tracer.report();
    assert_eq!(code, 0);
    assert_eq!(r["window"]["stopped_by"], "duration");
    let secs = r["window"]["duration_s"].as_f64().expect("duration");
    assert!((0.9..3.0).contains(&secs), "{secs}");
    assert!(num(&r, "/cuda/launches/kernels") > 0);

    let tracer = Tracer::attach(job.pid, &[]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    tracer.signal(libc::SIGINT);
    let (r, code, _) = tracer.report();
    assert_eq!(code, 0);
    assert_eq!(r["window"]["stopped_by"], "signal");
    job.child.kill().expect("kill the endless job");
    let _ = job.child.wait();
}

#[test]
fn a_library_replaced_on_disk_is_probed_where_the_process_maps_it() {
    require_root();
    // The job maps a libcuda that is then replaced on disk (an upgrade under a running job):
    // the path now names another file, and only the mapped inode sees the job's calls.
    let dir = std::env::temp_dir().join(format!("gputrace-replaced-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    for lib in ["libcuda.so.1", "libcudart.so.13"] {
        std::fs::copy(gputrace_tests::fake_cuda_dir().join(lib), dir.join(lib)).expect("copy the fake CUDA");
    }
    let lib_dir = dir.display().to_string();
    let mut job = Gated::start(&["--lib-dir", &lib_dir, "--steps", "50", "--driver-launches", "10"]);
    let mapped = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(dir.join("libcuda.so.1")).expect("stat"));
    std::fs::copy(dir.join("libcudart.so.13"), dir.join("replacement")).expect("a different file");
    std::fs::rename(dir.join("replacement"), dir.join("libcuda.so.1")).expect("replace on disk");
    let tracer = Tracer::attach(job.pid, &[]);
    job.release();
    job.finish();
    let (r, code, stderr) = tracer.report();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(num(&r, "/cuda/launches/kernels"), 50 * 10, "{r:#}");
    let libraries = r["tracer"]["libraries"].as_array().expect("libraries");
    assert!(libraries.iter().any(|l| l["inode"] == mapped), "probed the mapped inode {mapped}: {libraries:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
