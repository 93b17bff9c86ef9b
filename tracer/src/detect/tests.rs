//! Detector logic on synthetic evidence, including the borderlines.

use gputrace_common::ThreadCounters;

use super::*;
use crate::report::model::{Distribution, GpuDevice};

const S: u64 = 1_000_000_000;

/// Evidence with one thread that launched `kernels` and waited `wait_ns` in syncs.
fn evidence(kernels: u64, syncs: u64, wait_ns: u64, idle_ns: u64) -> Evidence {
    let mut ev = Evidence::default();
    let mut c = ThreadCounters { tgid: 1, _reserved: 0, drained_at_ns: 0, hits: [0; gputrace_common::PROBE_SLOTS] };
    c.hits[1] = kernels;
    ev.add_counters(1, &c);
    let t = ev.threads.get_mut(&1).expect("thread");
    t.syncs = syncs;
    t.sync_wait_ns = wait_ns;
    t.queue_idle_ns = idle_ns;
    ev
}

fn gpu(util: f64) -> Vec<GpuDevice> {
    gpu_with_sm(util, None)
}

fn gpu_with_sm(util: f64, sm: Option<f64>) -> Vec<GpuDevice> {
    vec![GpuDevice {
        index: 0,
        uuid: "GPU-0".into(),
        name: "test".into(),
        memory_used_bytes: 0,
        memory_total_bytes: 0,
        utilization_gpu_pct: Some(util as u32),
        utilization: Some(Distribution { mean: util, p50: util, p95: util, samples: 10 }),
        sm_activity_pct: sm.map(|m| Distribution { mean: m, p50: m, p95: m, samples: 10 }),
        ..GpuDevice::default()
    }]
}

fn verdict(ev: &Evidence, gpu: Option<&[GpuDevice]>) -> String {
    diagnose(&Inputs { window_ns: 10 * S, evidence: ev, gpu }).0
}

#[test]
fn many_launches_and_no_waiting_is_launch_bound() {
    assert_eq!(verdict(&evidence(100_000, 0, 0, 0), None), "launch-bound");
}

#[test]
fn the_launch_rate_threshold_is_a_borderline() {
    assert_eq!(verdict(&evidence(49_999, 0, 0, 0), None), NO_BOTTLENECK_FOUND);
    assert_eq!(verdict(&evidence(50_000, 0, 0, 0), None), "launch-bound");
}

#[test]
fn a_busy_gpu_overrules_the_launch_rate() {
    // The host launches fast but NVML says the GPU never idles: it is the GPU's pace.
    assert_eq!(verdict(&evidence(100_000, 0, 0, 0), Some(&gpu(97.0))), "gpu-bound");
    assert_eq!(verdict(&evidence(100_000, 0, 0, 0), Some(&gpu(11.0))), "launch-bound");
}

#[test]
fn sm_activity_outranks_utilization() {
    // "A kernel was running" 90% of the time but the SMs were 8% busy: not GPU-bound.
    assert_eq!(verdict(&evidence(100_000, 0, 0, 0), Some(&gpu_with_sm(90.0, Some(8.0)))), "launch-bound");
    assert_eq!(verdict(&evidence(100_000, 0, 0, 0), Some(&gpu_with_sm(90.0, Some(85.0)))), "gpu-bound");
}

#[test]
fn waiting_on_the_gpu_most_of_the_time_is_healthy() {
    let ev = evidence(1_000, 1_000, 8 * S, 0);
    let (v, found) = diagnose(&Inputs { window_ns: 10 * S, evidence: &ev, gpu: None });
    assert_eq!(v, "gpu-bound");
    assert!(found.iter().all(|d| d.id == "gpu-bound" || d.severity == "low" || d.severity == "info"), "{found:?}");
}

#[test]
fn an_idle_queue_after_every_sync_is_host_sync() {
    // 200 syncs/s, GPU queue empty 40% of the time, host otherwise waiting half the time.
    assert_eq!(verdict(&evidence(10_000, 2_000, 5 * S, 4 * S), None), "host-sync");
    // The same idle time with rare syncs is not "every step".
    assert_ne!(verdict(&evidence(10_000, 50, 5 * S, 4 * S), None), "host-sync");
}

#[test]
fn nothing_seen_is_no_cuda_work() {
    assert_eq!(verdict(&Evidence::default(), None), NO_CUDA_WORK);
}

#[test]
fn impacts_are_fractions() {
    let ev = evidence(10_000_000, 100_000, 30 * S, 30 * S);
    let (_, found) = diagnose(&Inputs { window_ns: 10 * S, evidence: &ev, gpu: None });
    assert!(found.iter().all(|d| (0.0..=1.0).contains(&d.impact)), "{found:?}");
}

/// Scheduler evidence for a thread of process `pid`: on-CPU, run-queue, blocked, sleep (ns).
fn sched(ev: &mut Evidence, tid: u32, pid: u32, t: [u64; 4]) {
    let s = ev.sched.entry(tid).or_default();
    s.pid = pid;
    (s.on_cpu_ns, s.runqueue_ns, s.blocked_ns, s.sleep_ns) = (t[0], t[1], t[2], t[3]);
}

/// A PyTorch-like launch-bound job: the Python thread (1) and autograd's thread (2) take
/// turns launching, each sleeping while the other works, and an idle helper process (3)
/// exists. Seen on the GPU machine: this must not read as waiting for input.
#[test]
fn threads_taking_turns_are_not_input_starved() {
    let mut ev = evidence(300_000, 0, 0, 0);
    let mut c = ThreadCounters { tgid: 1, _reserved: 0, drained_at_ns: 0, hits: [0; gputrace_common::PROBE_SLOTS] };
    c.hits[1] = 150_000;
    ev.add_counters(2, &c);
    sched(&mut ev, 1, 1, [6 * S, 0, 0, 4 * S]);
    sched(&mut ev, 2, 1, [4 * S, 0, 0, 6 * S]);
    sched(&mut ev, 3, 3, [0, 0, 0, 10 * S]);
    let (v, found) = diagnose(&Inputs { window_ns: 10 * S, evidence: &ev, gpu: Some(&gpu_with_sm(12.0, Some(0.1))) });
    assert_eq!(v, "launch-bound");
    assert!(found.iter().all(|d| d.id != "input-starved"), "{found:?}");
}

/// The same sleep with busy loader workers is input starvation, and the cause is named.
#[test]
fn a_sleeping_trainer_with_busy_workers_is_input_starved() {
    let mut ev = evidence(1_000, 0, 0, 0);
    sched(&mut ev, 1, 1, [S / 2, 0, 0, 9 * S]);
    sched(&mut ev, 7, 7, [19 * S / 2, 0, 0, S / 2]);
    sched(&mut ev, 8, 8, [19 * S / 2, 0, 0, S / 2]);
    let (v, found) = diagnose(&Inputs { window_ns: 10 * S, evidence: &ev, gpu: Some(&gpu_with_sm(1.0, Some(0.5))) });
    assert_eq!(v, "input-starved");
    assert!(found[0].summary.contains("busy on the CPU"), "{}", found[0].summary);
    // Workers blocked on the disk instead.
    sched(&mut ev, 7, 7, [S, 0, 8 * S, S]);
    let (_, found) = diagnose(&Inputs { window_ns: 10 * S, evidence: &ev, gpu: None });
    assert!(found.iter().any(|d| d.id == "input-starved" && d.summary.contains("disk")), "{found:?}");
}

/// Waiting for a CPU is cpu-starved, and it outranks what the launch rate suggests.
#[test]
fn waiting_for_a_cpu_is_cpu_starved() {
    let mut ev = evidence(180_000, 0, 0, 0);
    sched(&mut ev, 1, 1, [2 * S, 7 * S, 0, S]);
    assert_eq!(verdict(&ev, None), "cpu-starved");
    sched(&mut ev, 1, 1, [9 * S, S / 20, 0, S]);
    assert_ne!(verdict(&ev, None), "cpu-starved", "5% run-queue is below the threshold");
}
