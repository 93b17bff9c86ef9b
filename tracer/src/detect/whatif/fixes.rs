//! Each diagnosis's fix as a transformation of the step model. One match over every id, so a
//! new diagnosis does not compile until it says what its fix does (or that it has none).

use super::{model::StepModel, simulate::Fix};
use crate::model::{Diagnosis, DiagnosisId, TimeBucket};

/// Launches a step taken where no step marker was found: a graph of this many kernels
/// replayed as one launch.
const LAUNCHES_PER_GRAPH_WITHOUT_STEPS: f64 = 50.0;

/// What one replay of a captured graph costs the host, at most: an eager PyTorch launch's
/// cost with its dispatch on the H200 (`dispatch::LAUNCH_COST_S`'s point; a bare
/// `cudaGraphLaunch` costs less).
const REPLAY_HOST_S: f64 = 20e-6;

/// The forms a diagnosis's fix can take where it has more than one, each a name, a
/// transformation and its sentence, the one to rank last (`whatif::apply`). Host-sync: the
/// sync alone removed, its bookkeeping kept and overlapped ("sync"); or the sync and the
/// host work that waits on its value removed, as logging every N steps does
/// ("sync-and-bookkeeping"). That work is the program's own host code between the sync's
/// return and the next launch, less the data loading there (loading's own fix).
#[must_use]
pub fn variants(d: &Diagnosis, m: &StepModel) -> Vec<(&'static str, Fix, String)> {
    if d.id != DiagnosisId::HostSync {
        return Vec::new();
    }
    let share = m.drains.share(m.drains.syncs);
    let bookkeeping = (1.0 - m.loading_share).clamp(0.0, 1.0);
    vec![
        (
            "sync",
            Fix { drop_drains: share, ..Fix::NONE },
            format!("without the per-step syncs ({:.0}% of the queue drains) the host runs ahead and its work after them overlaps the GPU", share * 100.0),
        ),
        (
            "sync-and-bookkeeping",
            Fix { drop_drains: share, drop_idle_user: bookkeeping, ..Fix::NONE },
            format!(
                "without the per-step syncs ({:.0}% of the queue drains) and the host work that waits on their values (the program's code between a sync and the next launch{}), as logging every N steps does",
                share * 100.0,
                if bookkeeping < 1.0 { ", less its data loading" } else { "" }
            ),
        ),
    ]
}

/// The fix of diagnosis `d` as a transformation, with the sentence that says what it does;
/// None for diagnoses that are no host-side problem (the GPU-bound verdict, memory, the
/// verdicts that are no diagnosis).
#[must_use]
pub fn of(d: &Diagnosis, m: &StepModel, sm_over_util: Option<f64>) -> Option<(Fix, String)> {
    let n = Fix::NONE;
    Some(match d.id {
        DiagnosisId::HostSync => {
            let share = m.drains.share(m.drains.syncs);
            (Fix { drop_drains: share, ..n }, format!("without the per-step syncs ({:.0}% of the queue drains) the host runs ahead and its work after them overlaps the GPU", share * 100.0))
        }
        DiagnosisId::BlockingCopy => {
            let share = m.drains.share(m.drains.after_bulk_copy);
            (
                Fix { drop_drains: share, keep: Segments0::with(|s| s.transfer = 0.0), bus_floor: true, ..n },
                "copies made asynchronous into pinned memory overlap the step; they still take their time on the bus".into(),
            )
        }
        DiagnosisId::PageableCopy => (pinned_copies(m), "pinned, non-blocking copies are neither staged by the host nor waited for; they still take their time on the bus".into()),
        DiagnosisId::LaunchBound => {
            let per_step = m.launches_per_step.unwrap_or(LAUNCHES_PER_GRAPH_WITHOUT_STEPS).max(1.0);
            // One replay costs the host what one cheap launch does, not what a framework's
            // whole dispatch does: a jitted call of milliseconds scanned over many steps
            // (jax.lax.scan) or captured shrinks to it too.
            let per_launch = m.launch_host_s.unwrap_or(REPLAY_HOST_S);
            let replay = if per_launch > REPLAY_HOST_S { REPLAY_HOST_S / per_launch } else { 1.0 };
            // A replay allocates nothing where a caching allocator serves the step: its memory
            // is the graph's own pool. Plain allocation calls cannot be captured: they stay.
            let (keep, churn) = if m.caching_allocator { (Segments0::with(|s| s.alloc = 0.0), churn_device_work(m, sm_over_util)) } else { (Fix::NONE.keep, 1.0) };
            (
                Fix { launch_scale: replay / per_step, keep, gpu_scale: churn * back_to_back(m), ..n },
                format!(
                    "captured as one CUDA graph (or several steps in one compiled call), the step's {per_step:.0} launches and their dispatch ({:.0} µs a launch now) become one replay{}; the program's own host work and its syncs stay",
                    per_launch * 1e6,
                    if m.caching_allocator { ", which allocates nothing" } else { "" }
                ),
            )
        }
        DiagnosisId::HostBound => (Fix { offload_user: 1.0, ..n }, format!("the program's host work moved off the training thread (to loader workers or another thread) runs on {}", free_cores(m))),
        DiagnosisId::InputStarved if d.bucket == Some(TimeBucket::LaunchingAndHost) => {
            // The training thread loads its own input (`sites::relabel_as_input`).
            let user = m.idle.user + m.overlap.user;
            let host = user + m.idle.launch + m.overlap.launch;
            let share = if user > 0.0 { (m.loading_share * host / user).clamp(0.0, 1.0) } else { 0.0 };
            let (pinned, words) = pinned_input(m);
            (Fix { offload_user: share, loader_paces: false, ..n }.and(&pinned), format!("loading moved into DataLoader workers runs on {}{words}", free_cores(m)))
        }
        DiagnosisId::InputStarved => {
            let (pinned, words) = pinned_input(m);
            (Fix { refill_input: true, ..n }.and(&pinned), format!("workers that keep up leave no wait for input; they need the cores for it{words}"))
        }
        DiagnosisId::AllocChurn => (
            Fix { keep: Segments0::with(|s| s.alloc = 0.0), gpu_scale: churn_device_work(m, sm_over_util), ..n },
            "a caching allocator left warm makes allocation calls nearly free, and the device work they cause goes with them".into(),
        ),
        DiagnosisId::CpuStarved => (Fix { keep: Segments0::with(|s| s.cpu_wait = 0.0), ..n }, "with its CPUs the training thread runs when it is ready".into()),
        DiagnosisId::IoStall => (Fix { keep: Segments0::with(|s| s.io_wait = 0.0), ..n }, "I/O moved off the training thread overlaps the step".into()),
        DiagnosisId::HostSleep => (Fix { keep: Segments0::with(|s| s.timer = 0.0), ..n }, "without the sleep the loop launches as soon as it can".into()),
        DiagnosisId::CheckpointStall => (Fix { cut: d.impact, ..n }, "an asynchronous checkpoint overlaps the training".into()),
        DiagnosisId::SmallKernels => {
            let scale = sm_over_util?.clamp(0.0, 1.0);
            (Fix { gpu_scale: scale, ..n }, format!("the same work filling the SMs takes {:.0}% of the GPU time it takes now", scale * 100.0))
        }
        // The others' wait for the straggler goes once its own bottleneck is fixed.
        DiagnosisId::Straggler => (Fix { cut: d.impact, ranks_pace: false, ..n }, "with the straggler's own bottleneck fixed, the other ranks no longer wait for it in their collectives".into()),
        // How much overlap or fewer bytes hide depends on what the GPU computes meanwhile,
        // which the host cannot see: no promise.
        DiagnosisId::CommBound
        | DiagnosisId::GpuBound
        | DiagnosisId::Oom
        | DiagnosisId::Fragmentation
        | DiagnosisId::MemoryGrowth
        | DiagnosisId::MemoryReserved
        | DiagnosisId::NoCudaWork
        | DiagnosisId::NoBottleneckFound => return None,
    })
}

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
fn back_to_back(m: &StepModel) -> f64 {
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
fn churn_device_work(m: &StepModel, sm_over_util: Option<f64>) -> f64 {
    match sm_over_util {
        Some(r) if m.alloc_calls_per_s >= crate::detect::rules::ALLOCS_PER_S => r.clamp(0.0, 1.0).sqrt(),
        _ => 1.0,
    }
}

/// Pageable copies made pinned and non-blocking: the drains they caused and their staging
/// go; the bus time stays.
fn pinned_copies(m: &StepModel) -> Fix {
    let pageable = m.drains.pageable_copies;
    let share = m.drains.share(pageable + pageable.min(m.drains.after_bulk_copy));
    Fix { drop_drains: share, keep: Segments0::with(|s| s.staging = 0.0), bus_floor: true, ..Fix::NONE }
}

/// The loader's fix sets `pin_memory=True` (its text says so): batches come pinned, so their
/// pageable copies' staging and drains go with the wait, and the words that say so. Nothing
/// where no copy is pageable.
fn pinned_input(m: &StepModel) -> (Fix, &'static str) {
    if m.drains.pageable_copies > 0.0 || m.serial.staging + m.overlap.staging + m.idle.staging > 0.0 {
        (pinned_copies(m), "; with pin_memory=True the batches' copies are no longer staged by the training thread or waited for")
    } else {
        (Fix::NONE, "")
    }
}

/// The cores a fix that moves work off the training thread spreads it over, in words (the
/// workers it takes are added once simulated: `whatif::apply`).
fn free_cores(m: &StepModel) -> String {
    match (m.cores_free(), m.cpus) {
        (Some(free), Some(all)) => format!("the {:.0} free cores of {all:.0}", free.max(1.0)),
        _ => "the free cores".into(),
    }
}

/// Segment multipliers that keep everything but what `change` sets.
struct Segments0;

impl Segments0 {
    fn with(change: impl FnOnce(&mut super::model::Segments)) -> super::model::Segments {
        let mut keep = Fix::NONE.keep;
        change(&mut keep);
        keep
    }
}
