//! Nothing is left behind: every eBPF program gputrace loaded is gone once it has exited.
//! (Allow some time: programs of earlier tests' sessions may still be on their way out.)
use std::time::{Duration, Instant};

use gputrace_tests::{require_root, run_fakejob};

/// Number of BPF programs loaded in the kernel (`BPF_PROG_GET_NEXT_ID` walk).
fn loaded_programs() -> usize {
    const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
    let mut count = 0;
    let mut id: u32 = 0;
    loop {
        // union bpf_attr { struct { __u32 start_id; __u32 next_id; ... } }, zero-padded.
        let mut attr = [0u32; 16];
        attr[0] = id;
        // SAFETY: a valid, large enough attribute buffer is passed with its size.
        let rc = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_GET_NEXT_ID, attr.as_mut_ptr(), size_of_val(&attr)) };
        if rc != 0 {
            return count;
        }
        id = attr[1];
        count += 1;
    }
}

#[test]
fn every_program_is_gone_after_exit() {
    require_root();
    let before = loaded_programs();
    let (r, code, stderr) = run_fakejob(&["--steps", "20", "--driver-launches", "5", "--sync"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(r["cuda"]["launches"]["kernels"], 100);
    wait_for_programs_at_most(before);
}

/// Wait until no more programs are loaded than `before`; panic after a minute.
fn wait_for_programs_at_most(before: usize) {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let now = loaded_programs();
        if now <= before {
            return;
        }
        assert!(Instant::now() < deadline, "{now} programs still loaded a minute after gputrace ended (before: {before})");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_sigkilled_tracer_leaves_nothing_behind_and_the_job_goes_on() {
    require_root();
    let before = loaded_programs();
    let mut job = gputrace_tests::Gated::start(&["--steps", "200", "--driver-launches", "50", "--host-us", "2000"]);
    let tracer = gputrace_tests::Tracer::attach(job.pid, &[]);
    assert!(loaded_programs() > before, "gputrace loaded its programs");
    job.release();
    std::thread::sleep(Duration::from_millis(150));
    tracer.signal(libc::SIGKILL);
    let _ = tracer.into_child().wait();
    // The traced job is unharmed: it finishes its work normally.
    job.finish();
    wait_for_programs_at_most(before);
}

#[test]
fn killed_at_any_moment_it_leaves_nothing_behind() {
    require_root();
    let before = loaded_programs();
    // Moments across a session's life: loading, attaching, tracing, printing, detaching. A
    // session of 0.3 s lasts ~1.1 s on the fake CUDA, start to exit (multi-uprobe links
    // detach at once; perf-event links took ~6 s once), so the moments end past that.
    // CI takes every other moment (each costs a session's life), `--long` all of them.
    let step = if gputrace_tests::long() { 1 } else { 2 };
    for delay_ms in [0u64, 3, 10, 25, 60, 150, 300, 500, 750, 1000, 1300, 1800].into_iter().step_by(step) {
        // Longer than the last moment; stopped once it has gone on unharmed a while.
        let mut job = gputrace_tests::Gated::start(&["--steps", "2000", "--driver-launches", "20", "--host-us", "2000"]);
        let mut tracer = std::process::Command::new(gputrace_tests::gputrace())
            .args(["attach", "--json", "--duration", "0.3", "--pid", &job.pid.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("gputrace starts");
        job.release();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = tracer.kill();
        let _ = tracer.wait();
        // The job is unharmed wherever the tracer died: 100 ms more of its calls (a thousand
        // launches) through wherever a probe might have been left, and it still runs.
        std::thread::sleep(Duration::from_millis(100));
        match job.child.try_wait().expect("the job's status") {
            None => {
                let _ = job.child.kill();
                let _ = job.child.wait();
            }
            Some(status) => assert!(status.success(), "the job ended badly after the tracer was killed at {delay_ms} ms: {status}"),
        }
    }
    wait_for_programs_at_most(before);
    // Uprobes made through perf_event_open leave no tracefs entries; check none appeared.
    let events = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default();
    assert!(!events.contains("gputrace"), "{events}");
}
