//! `host-bound`: the launching thread computes on the CPU between launches while the GPU has
//! nothing to do. Its fix moves the program's own host work off the training thread.

use crate::{
    detect::{
        definition::{Bearing, Definition, FoundBy, Words},
        diagnosis::{diagnosis, gpu_line, pct},
        whatif::{self, Fix, StepModel},
        Account,
    },
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, Framework, TimeBucket},
    stacks::Activity,
};
use crate::detect::{
    thresholds::{GPU_IDLE_UTIL, HOST_WAIT_NONE, LAUNCH_BOUND_RATE},
    MEDIUM,
};

/// What one kernel launch costs the host through PyTorch, at most (docs/facts.md: ~6.8 µs for
/// an eager `add_`, ~6 µs for a bare `cuLaunchKernel`): host time per launch far above it is
/// the program's own work between launches, not the launching.
const LAUNCH_HOST_COST_S: f64 = 10e-6;

/// The launching thread computes on the CPU between launches while the GPU has nothing to do:
/// few launches, each preceded by far more host time than launching costs (many cheap
/// launches are `launch-bound`). The host work that follows a synchronize is host-sync's up
/// to what overlapping it with GPU work could hide; this is the rest.
fn detect(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    // Of the host time, the program's own code: the stacks say how much is launching and
    // dispatch (`whatif::dispatch`), which graphs remove and this fix does not.
    let threads = a.time.as_ref().map(|t| t.threads.clone()).unwrap_or_default();
    let all_host = a.share(|t| t.launching_and_host_ns);
    let dispatch = whatif::dispatch::share(ev, &threads, all_host * a.window_s, a.launch_rate * a.window_s);
    // Without stacks the split is a guess: a launch rate only tiny kernels sustain is taken
    // as launching, as `launch-bound` takes it.
    let launching = match dispatch.source {
        whatif::dispatch::ShareBasis::Stacks => dispatch.share.point,
        whatif::dispatch::ShareBasis::LaunchCost if a.launch_rate >= LAUNCH_BOUND_RATE => return None,
        whatif::dispatch::ShareBasis::LaunchCost => 0.0,
    };
    // All of the program's own host code on the critical path: where a sync leaves the GPU
    // idle behind it, moving it off the thread buys as much as dropping the sync (their twins
    // tie on the fake GPU, tests/tests/diagnosis.rs), so both are reported and the
    // simulation ranks them.
    let host = (all_host * (1.0 - launching)).max(0.0);
    let blocked = a.share(|t| t.waiting_on_gpu_ns + t.in_copies_ns);
    // The GPU must be idle while the host works. NVML says so directly. Without it: the GPU
    // queue was seen empty (after syncs, until the next launch) most of the time, or the job
    // synchronizes and yet hardly ever waits for the GPU, so nothing was left running at each
    // sync (a job that never syncs could be queueing GPU work and is not judged).
    let gpu_idle = match a.gpu_util {
        // Idle at least while the host works: some of the window.
        Some(u) => u < 1.0 - MEDIUM,
        None => (a.sync_rate > 0.0 && blocked < HOST_WAIT_NONE) || a.share(|t| t.queue_empty_ns) >= GPU_IDLE_UTIL,
    };
    let launches: u64 = ev.threads.values().map(|t| t.kernel_launches() + t.graph_launches()).sum();
    let host_s = host * a.window_s;
    let per_launch = host_s / launches.max(1) as f64;
    if host < MEDIUM || !gpu_idle {
        return None;
    }
    let impact = host.min(a.gpu_idle_cap());
    let mut evidence = vec![
        format!(
            "the launching threads ran their own host code (not launching) {} of the time: {:.2} ms per kernel launch ({} launches), where a launch itself costs under {:.0} µs",
            pct(host),
            per_launch * 1e3,
            launches,
            LAUNCH_HOST_COST_S * 1e6
        ),
        format!("they waited for the GPU only {} of the time", pct(blocked)),
    ];
    evidence.extend(gpu_line(a));
    Some(diagnosis(
        DiagnosisId::HostBound,
        TimeBucket::LaunchingAndHost,
        impact,
        format!("the training thread computes on the CPU between launches ({:.1} ms per launch) while the GPU has nothing to do", per_launch * 1e3),
        evidence,
        "find the host code between launches and take it off the step: data loading or decoding in the training process belongs in DataLoader workers (num_workers > 0, persistent_workers=True); vectorize Python loops; log and checkpoint less often (a profiler such as py-spy shows where)",
    ))
}

fn fix(m: &StepModel) -> (Fix, String) {
    (Fix { offload_user: 1.0, ..Fix::NONE }, format!("the program's host work moved off the training thread (to loader workers or another thread) runs on {}", whatif::fixes::free_cores(m)))
}

/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Tensorflow, Words::Fix(super::input_starved::TENSORFLOW)),
    (Framework::Deepspeed, Words::Fix(super::input_starved::DEEPSPEED)),
    (Framework::Accelerate, Words::Fix(super::input_starved::ACCELERATE)),
    (Framework::Vllm, Words::Fix(super::launch_bound::VLLM)),
    (Framework::Sglang, Words::Fix(super::launch_bound::SGLANG)),
    (Framework::Jax, Words::Fix(super::input_starved::JAX)),
    (Framework::Lightning, Words::Fix(super::input_starved::LIGHTNING)),
    (Framework::HfTrainer, Words::Fix(super::input_starved::HF_TRAINER)),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::HostBound,
    found_by: FoundBy::Time(detect),
    stacks: Some((&[Activity::Host], Some(true))),
    effort: 2,
    fix: Some(|_, m, _| Some(fix(m))),
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::Numa],
};
