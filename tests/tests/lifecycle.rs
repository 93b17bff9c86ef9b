//! Nothing is left behind: every eBPF program, map and link a gputrace process held is gone
//! from the kernel once that process has ended, however it ended. The objects checked are
//! the tracer's own, read from its `/proc/PID/fdinfo` while it runs, so other sessions on the
//! machine (suites beside this one) neither hide a leak nor fake one. (Allow some time: the
//! kernel frees an object after its last reference, through a grace period.) It runs alone
//! all the same: `xtask/src/suites.rs` says why.
use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use gputrace_tests::{require_root, Gated, Tracer};

/// A kind of BPF object, by its `fdinfo` key and the `bpf(2)` command that opens one by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Program,
    Map,
    Link,
}

impl Kind {
    const ALL: [Self; 3] = [Self::Program, Self::Map, Self::Link];

    fn fdinfo_key(self) -> &'static str {
        match self {
            Self::Program => "prog_id:",
            Self::Map => "map_id:",
            Self::Link => "link_id:",
        }
    }

    /// `BPF_PROG_GET_FD_BY_ID`, `BPF_MAP_GET_FD_BY_ID`, `BPF_LINK_GET_FD_BY_ID` (uapi bpf.h).
    fn get_fd_by_id(self) -> libc::c_long {
        match self {
            Self::Program => 13,
            Self::Map => 14,
            Self::Link => 30,
        }
    }
}

/// The BPF objects whose descriptors process `pid` holds now (a link's fdinfo names its
/// program too). Empty once the process is gone.
fn held_by(pid: u32) -> BTreeSet<(Kind, u32)> {
    let mut held = BTreeSet::new();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else { return held };
    for fd in fds.filter_map(Result::ok) {
        let Ok(info) = std::fs::read_to_string(fd.path()) else { continue };
        for line in info.lines() {
            for kind in Kind::ALL {
                if let Some(id) = line.strip_prefix(kind.fdinfo_key()).and_then(|v| v.trim().parse().ok()) {
                    held.insert((kind, id));
                }
            }
        }
    }
    held
}

/// Whether the kernel still has object `id` of `kind`.
fn exists(kind: Kind, id: u32) -> bool {
    // union bpf_attr { struct { __u32 prog_id/map_id/link_id; __u32 next_id; __u32 open_flags; } }.
    let mut attr = [0u32; 16];
    attr[0] = id;
    // SAFETY: a valid, large enough attribute buffer is passed with its size.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, kind.get_fd_by_id(), attr.as_mut_ptr(), size_of_val(&attr)) };
    if fd >= 0 {
        // SAFETY: the descriptor was just opened by us and is closed once.
        unsafe { libc::close(fd as i32) };
        return true;
    }
    let errno = std::io::Error::last_os_error().raw_os_error();
    assert_eq!(errno, Some(libc::ENOENT), "bpf(GET_FD_BY_ID, {kind:?} {id}) failed otherwise than 'gone'");
    false
}

/// Wait until none of `objects` is left in the kernel; panic after a minute.
fn wait_until_gone(objects: &BTreeSet<(Kind, u32)>) {
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let left: Vec<&(Kind, u32)> = objects.iter().filter(|(kind, id)| exists(*kind, *id)).collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "still in the kernel a minute after gputrace ended: {left:?} (of {} it held)", objects.len());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every kind of object, programs above all, among what a tracer held.
fn assert_holds_programs_maps_and_links(held: &BTreeSet<(Kind, u32)>) {
    for kind in Kind::ALL {
        assert!(held.iter().any(|(k, _)| *k == kind), "an armed tracer holds {kind:?}s: {held:?}");
    }
}

#[test]
fn every_program_is_gone_after_exit() {
    require_root();
    let mut job = Gated::start(&["--steps", "20", "--driver-launches", "5", "--sync"]);
    let tracer = Tracer::attach(job.pid, &[]);
    let held = held_by(tracer.child.id());
    assert_holds_programs_maps_and_links(&held);
    job.release();
    job.finish();
    let (r, code, stderr) = tracer.report();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(r["cuda"]["launches"]["kernels"], 100);
    wait_until_gone(&held);
}

#[test]
fn a_sigkilled_tracer_leaves_nothing_behind_and_the_job_goes_on() {
    require_root();
    let mut job = Gated::start(&["--steps", "200", "--driver-launches", "50", "--host-us", "2000"]);
    let tracer = Tracer::attach(job.pid, &[]);
    job.release();
    std::thread::sleep(Duration::from_millis(150));
    let held = held_by(tracer.child.id());
    assert_holds_programs_maps_and_links(&held);
    tracer.signal(libc::SIGKILL);
    let _ = tracer.into_child().wait();
    // The traced job is unharmed: it finishes its work normally.
    job.finish();
    wait_until_gone(&held);
}

#[test]
fn killed_at_any_moment_it_leaves_nothing_behind() {
    require_root();
    // Moments across a session's life: loading, attaching, tracing, printing, detaching. A
    // session of 0.3 s lasts ~1.1 s on the fake CUDA, start to exit (multi-uprobe links
    // detach at once; perf-event links took ~6 s once), so the moments end past that.
    // CI takes every other moment (each costs a session's life), `--long` all of them.
    let step = if gputrace_tests::long() { 1 } else { 2 };
    let mut held = BTreeSet::new();
    for delay_ms in [0u64, 3, 10, 25, 60, 150, 300, 500, 750, 1000, 1300, 1800].into_iter().step_by(step) {
        // Longer than the last moment; stopped once it has gone on unharmed a while.
        let mut job = Gated::start(&["--steps", "2000", "--driver-launches", "20", "--host-us", "2000"]);
        let mut tracer = std::process::Command::new(gputrace_tests::gputrace())
            .args(["attach", "--json", "--duration", "0.3", "--pid", &job.pid.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("gputrace starts");
        job.release();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // What it holds at the moment it dies (a load between this read and the kill, a few
        // µs, goes unchecked).
        held.extend(held_by(tracer.id()));
        let _ = tracer.kill();
        let _ = tracer.wait();
        // The job is unharmed wherever the tracer died: 100 ms more of its calls (a thousand
        // launches) through wherever a probe might have been left, and it still runs.
        std::thread::sleep(Duration::from_millis(100));
        match job.child.try_wait().expect("the job's status") {
            None => job.stop(),
            Some(status) => assert!(status.success(), "the job ended badly after the tracer was killed at {delay_ms} ms: {status}"),
        }
    }
    assert!(held.iter().any(|(k, _)| *k == Kind::Program), "some moment found programs loaded: {held:?}");
    wait_until_gone(&held);
    // Uprobes made through perf_event_open leave no tracefs entries; check none appeared.
    let events = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default();
    assert!(!events.contains("gputrace"), "{events}");
}
