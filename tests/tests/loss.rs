//! Every drop is counted: what the kernel sent is what was delivered plus what was dropped,
//! exactly, and a report with drops says it is incomplete.
use std::time::Duration;

use gputrace_tests::{hits, num, require_root, run_fakejob_opts, Gated, Tracer};

#[test]
fn delivered_plus_dropped_is_what_was_sent() {
    require_root();
    // 300 × 1000 × (a 4-byte D2H copy + a stream synchronize): 600,000 call records, far more
    // than the 4 MiB ring holds while nobody reads it.
    let mut job = Gated::start(&["--steps", "300", "--item", "1000", "--hold-ms", "4000"]);
    let tracer = Tracer::attach(job.pid, &[]);
    // Stop the reader: the ring fills and the kernel counts each record it cannot reserve.
    tracer.signal(libc::SIGSTOP);
    job.release();
    job.wait_for("holding");
    tracer.signal(libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(200));
    let (r, code, stderr) = tracer.report();
    assert_eq!(code, 0, "{stderr}");
    // Sent: the kernel counts every probe hit in its per-thread counters, whatever the ring
    // did. Launch probes send no record; every other probe sends one per returning call.
    let sent: u64 = r["tracer"]["probes"]
        .as_array()
        .expect("probes")
        .iter()
        .filter(|p| !p["symbol"].as_str().expect("symbol").contains("Launch"))
        .map(|p| p["hits"].as_u64().expect("hits"))
        .sum();
    let delivered = num(&r, "/tracer/call_events_delivered");
    let dropped = num(&r, "/tracer/loss/ring_full_calls");
    assert!(dropped > 0, "the ring overflowed while the reader was stopped: {r:#}");
    assert!(delivered > 0);
    // 600,000 plus the few context calls each worker thread makes when it starts.
    assert!((600_000..600_010).contains(&sent), "every call was counted in the kernel: {sent}");
    assert_eq!(delivered + dropped, sent, "delivered {delivered} + dropped {dropped} != sent {sent}");
    // Thread exits while the ring was full are dropped records too (not calls).
    assert!(num(&r, "/tracer/lost_events") >= dropped);
    assert_eq!(num(&r, "/tracer/lost_events"), num(&r, "/tracer/loss/ring_full"));
    assert_eq!(r["tracer"]["complete"], false, "a report with drops says so");
    job.finish();
}

/// What a counter cannot say comes as the kernel programs' own messages at -vv (aya-log): a
/// planted copy whose parameters cannot be read (a null `CUDA_MEMCPY2D *`) names its probe
/// and the address the read failed at. Without -vv the programs write nothing: their level
/// is set off before they load.
#[test]
fn a_failed_argument_read_is_told_at_vv_and_only_there() {
    require_root();
    let args = ["--steps", "3", "--bad-copy2d", "2", "--driver-launches", "1", "--sync"];
    // srcMemoryType, the first field read, lies 16 bytes into the struct.
    let message = "cuMemcpy2D_v2: the copy's parameters could not be read at 0x10";
    let (r, code, stderr) = run_fakejob_opts(&["-vv"], &args);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(hits(&r, "cuMemcpy2D_v2"), 6, "every planted copy counted");
    assert!(stderr.contains(message), "no message at -vv:\n{stderr}");
    let (r, code, stderr) = run_fakejob_opts(&[], &args);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(hits(&r, "cuMemcpy2D_v2"), 6, "every planted copy counted");
    assert!(!stderr.contains("could not be read"), "a message without -vv:\n{stderr}");
}
