//! What the diagnoses' fixes are made of (each fix itself is in its diagnosis's file,
//! `detect::diagnoses`): the parts several fixes share, as transformations of the step model.

use super::{
    model::{Segments, StepModel},
    simulate::Fix,
};

/// What a kernel that finds the GPU idle costs it beyond running back to back, the time a
/// graph's replay saves on each: on the H200 an isolated small op kept the GPU busy 1.1-1.2
/// µs longer (NVML) than the same op replayed in a graph (1.9 µs for a 64x256x1024 matmul),
/// the median of five ops (`validation/gpu/graph_floor.py`, docs/validation.md).
const ISOLATED_LAUNCH_DEVICE_S: f64 = 1.15e-6;

/// The GPU's busy time left once the step's kernels run back to back in a graph, as a
/// multiplier. A kernel finds the GPU idle when the host takes longer to launch the next
/// than the kernel takes to run: each of those pays the device [`ISOLATED_LAUNCH_DEVICE_S`]
/// that a replay does not. The host's time a launch (its launching share over the launches)
/// against the GPU's busy time a launch says how many; partly where they are within that
/// cost of each other.
pub(crate) fn back_to_back(m: &StepModel) -> f64 {
    let busy = m.gpu.point;
    let (Some(host_per_launch), true) = (m.launch_host_s, busy > 0.0 && m.launches_per_s > 0.0) else { return 1.0 };
    let device_per_launch = busy / m.launches_per_s;
    let running = device_per_launch - ISOLATED_LAUNCH_DEVICE_S;
    let isolated = ((host_per_launch - running) / ISOLATED_LAUNCH_DEVICE_S).clamp(0.0, 1.0);
    let saved = m.launches_per_s * ISOLATED_LAUNCH_DEVICE_S * isolated;
    (1.0 - saved / busy).clamp(0.0, 1.0)
}

/// The GPU's busy time left once the allocator stops churning, as a multiplier. The driver's
/// allocations and frees put device work in NVML's busy time that is no kernel (memory
/// mapped and unmapped, the syncs a free makes); GPM's SM activity, below the utilization,
/// bounds how much. The evidence does not split that gap between such work and kernels too
/// small to fill the SMs, so the point takes its geometric middle, as the GPU's range does
/// where nothing else says (`model::gpu_range`); the range's ends stay the model's. On the
/// H200, `empty_cache()` every step read 68 % utilization against 39 % SM activity; its fixed
/// twin ran the same work in 51 % of the planted step (docs/validation.md).
pub(crate) fn churn_device_work(m: &StepModel, sm_over_util: Option<f64>) -> f64 {
    match sm_over_util {
        Some(r) if m.alloc_calls_per_s >= crate::detect::thresholds::ALLOCS_PER_S => r.clamp(0.0, 1.0).sqrt(),
        _ => 1.0,
    }
}

/// Pageable copies made pinned and non-blocking: the drains they caused and their staging
/// go; the bus time stays.
pub(crate) fn pinned_copies(m: &StepModel) -> Fix {
    let pageable = m.drains.pageable_copies;
    let share = m.drains.share(pageable + pageable.min(m.drains.after_bulk_copy));
    Fix { drop_drains: share, keep: keep_all_but(|s| s.staging = 0.0), bus_floor: true, ..Fix::NONE }
}

/// The loader's fix sets `pin_memory=True` (its text says so): batches come pinned, so their
/// pageable copies' staging and drains go with the wait, and the words that say so. Nothing
/// where no copy is pageable.
pub(crate) fn pinned_input(m: &StepModel) -> (Fix, &'static str) {
    if m.drains.pageable_copies > 0.0 || m.serial.staging + m.overlap.staging + m.idle.staging > 0.0 {
        (pinned_copies(m), "; with pin_memory=True the batches' copies are no longer staged by the training thread or waited for")
    } else {
        (Fix::NONE, "")
    }
}

/// The cores a fix that moves work off the training thread spreads it over, in words (the
/// workers it takes are added once simulated: `rank::apply`).
pub(crate) fn free_cores(m: &StepModel) -> String {
    match (m.cores_free(), m.cpus) {
        (Some(free), Some(all)) => format!("the {:.0} free cores of {all:.0}", free.max(1.0)),
        _ => "the free cores".into(),
    }
}

/// Segment multipliers that keep everything but what `change` sets.
pub(crate) fn keep_all_but(change: impl FnOnce(&mut Segments)) -> Segments {
    let mut keep = Fix::NONE.keep;
    change(&mut keep);
    keep
}
