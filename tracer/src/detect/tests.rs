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
        tensor_activity_pct: None,
        target_memory_bytes: None,
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
