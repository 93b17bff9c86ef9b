//! The detectors. Each returns `None` when its pattern is absent.

use super::{
    diagnosis::{diagnosis, gpu_line, pct},
    severity, Account, LOW, MEDIUM,
};
use crate::{
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, TimeBucket},
};

/// A detector over the time account (`catalog` lists them, one per diagnosis).
pub type Rule = fn(&Evidence, &Account) -> Option<Diagnosis>;

/// A launch rate the host path sustains only with tiny kernels. docs/facts.md: one eager PyTorch
/// `add_` costs ~6.8 µs of host time (≈150 k launches/s at best); the launch-bound MLP on the
/// GPU machine ran 15–25 k/s, GEMM-bound jobs a few hundred to a few thousand.
pub(crate) const LAUNCH_BOUND_RATE: f64 = 5_000.0;
/// Below this fraction of the window blocked on the GPU, the host is not GPU-limited.
pub(crate) const HOST_WAIT_LOW: f64 = 0.30;
/// At or above this fraction blocked on the GPU, the GPU is the limiter (healthy).
pub(crate) const HOST_WAIT_HIGH: f64 = 0.50;
/// Below this NVML utilization the GPU mostly has nothing to run.
pub(crate) const GPU_IDLE_UTIL: f64 = 0.5;
/// Below this fraction blocked on the GPU, a job that syncs finds the GPU done each time.
pub(crate) const HOST_WAIT_NONE: f64 = 0.05;
/// Syncs per second that amount to "every step" for a training loop (≥ 10 steps/s).
pub(crate) const SYNCS_PER_S: f64 = 10.0;
/// Alloc + free calls per second that mean the caching allocator is not caching. Only calls
/// that pair up count: allocations never freed are growth (`detect::memory`), not churn.
pub(crate) const ALLOCS_PER_S: f64 = 20.0;

/// Launch-bound's fix for a job whose launches are mostly graph replays: it has graphs
/// already (a framework's "capture graphs" text is not said to it, `framework::speak`).
pub(crate) const REPLAYS_FIX: &str =
    "put more work in each replay: capture the whole step (optimizer included) in one graph, a larger batch, or several steps per call (jax.lax.scan); fewer replays per step";

pub(super) fn launch_bound(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let blocked = a.share(|t| t.waiting_on_gpu_ns + t.in_copies_ns);
    if blocked >= HOST_WAIT_LOW || a.gpu_busy() == Some(true) {
        return None;
    }
    // Launch overhead is launches times their cost: many cheap ones (eager PyTorch), or few
    // that each cost a framework's whole dispatch (a jitted JAX call: argument checks, cache
    // lookup, the executable's launch). The stacks tell the second from the program's own
    // host work; without them only a rate that tiny kernels alone sustain says it.
    let threads = a.time.as_ref().map(|t| t.threads.clone()).unwrap_or_default();
    let all_host = a.share(|t| t.launching_and_host_ns);
    let dispatch = super::whatif::dispatch::share(ev, &threads, all_host * a.window_s, a.launch_rate * a.window_s);
    let dispatch_heavy = dispatch.source == super::whatif::dispatch::Source::Stacks && dispatch.share.point * all_host >= MEDIUM;
    if a.launch_rate < LAUNCH_BOUND_RATE && !dispatch_heavy {
        return None;
    }
    // The critical path's host work, less the part after a sync that host-sync is charged
    // with. NVML, where present, caps it by how idle the GPU really was.
    let host_share = a.share(|t| t.launching_and_host_ns - t.host_while_queue_empty_ns);
    let impact = host_share.min(a.gpu_idle_cap());
    // A job that already replays graphs (torch.compile's reduce-overhead, CUDA graphs, JAX's
    // XLA command buffers) is told to put more in each replay, not to capture graphs.
    let replays = a.graph_rate >= 0.5 * a.launch_rate;
    let mut evidence = vec![
        format!("{:.0} launches/s over {:.2} s ({:.0} kernel launches/s, {:.0} graph replays/s)", a.launch_rate, a.window_s, a.launch_rate - a.graph_rate, a.graph_rate),
        format!("the launching threads ran host code {} of the time and were blocked on the GPU {}", pct(host_share), pct(blocked)),
    ];
    if dispatch.source == super::whatif::dispatch::Source::Stacks {
        evidence.push(format!("the stacks put {} of that host time in launching and the framework's dispatch", pct(dispatch.share.point)));
    }
    evidence.extend(gpu_line(a));
    let per_launch_ms = dispatch.share.point * all_host * a.window_s * 1e3 / (a.launch_rate * a.window_s).max(1.0);
    let summary = if replays {
        format!("the host replays {:.0} graphs per second, each costing it {per_launch_ms:.2} ms, and the GPU waits for it", a.graph_rate)
    } else if a.launch_rate >= LAUNCH_BOUND_RATE {
        format!("the host launches {:.0} small kernels per second and the GPU waits for it", a.launch_rate)
    } else {
        format!("each launch costs the host {per_launch_ms:.2} ms of the framework's dispatch and the GPU waits for it")
    };
    let fix = if replays {
        REPLAYS_FIX
    } else {
        "launch fewer, larger kernels: a larger batch, CUDA graphs (torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs), or fused ops"
    };
    Some(diagnosis(DiagnosisId::LaunchBound, TimeBucket::LaunchingAndHost, impact, summary, evidence, fix))
}

/// What one kernel launch costs the host through PyTorch, at most (docs/facts.md: ~6.8 µs for
/// an eager `add_`, ~6 µs for a bare `cuLaunchKernel`): host time per launch far above it is
/// the program's own work between launches, not the launching.
const LAUNCH_HOST_COST_S: f64 = 10e-6;

/// The launching thread computes on the CPU between launches while the GPU has nothing to do:
/// few launches, each preceded by far more host time than launching costs (many cheap
/// launches are `launch-bound`). The host work that follows a synchronize is host-sync's up
/// to what overlapping it with GPU work could hide; this is the rest.
pub(super) fn host_bound(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    // Of the host time, the program's own code: the stacks say how much is launching and
    // dispatch (`whatif::dispatch`), which graphs remove and this fix does not.
    let threads = a.time.as_ref().map(|t| t.threads.clone()).unwrap_or_default();
    let all_host = a.share(|t| t.launching_and_host_ns);
    let dispatch = super::whatif::dispatch::share(ev, &threads, all_host * a.window_s, a.launch_rate * a.window_s);
    // Without stacks the split is a guess: a launch rate only tiny kernels sustain is taken
    // as launching, as `launch-bound` takes it.
    let launching = match dispatch.source {
        super::whatif::dispatch::Source::Stacks => dispatch.share.point,
        super::whatif::dispatch::Source::LaunchCost if a.launch_rate >= LAUNCH_BOUND_RATE => return None,
        super::whatif::dispatch::Source::LaunchCost => 0.0,
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

pub(super) fn host_sync(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let empty = a.share(|t| t.queue_empty_ns);
    // The queue's empty spells less the other stalls that may lie in them, capped by the
    // time NVML saw no kernel running.
    // Only what GPU work could have hidden is the sync's doing (`Account::sync_hideable`).
    // What it costs is the step model's to say (`whatif`): a sync every step serializes the
    // host and the GPU even where the queue is empty only briefly.
    let impact = a.sync_hideable().min(a.gpu_util.map_or(1.0, |u| 1.0 - u));
    if a.sync_rate < SYNCS_PER_S || ev.threads.values().all(|t| t.queue_idle_ns == 0) {
        return None;
    }
    let (count, wait): (u64, u64) = ev.threads.values().fold((0, 0), |(c, w), t| (c + t.syncs, w + t.sync_wait_ns));
    let periods: u64 = ev.threads.values().map(|t| t.idle_periods).sum();
    Some(diagnosis(
        DiagnosisId::HostSync,
        TimeBucket::LaunchingAndHost,
        impact,
        format!(
            "the host synchronizes {:.0} times/s; after each, the GPU queue sits empty while the host works, until it launches again ({} of the time)",
            a.sync_rate,
            pct(impact)
        ),
        vec![
            format!("{count} synchronizing calls waited {:.3} s in total", wait as f64 / 1e9),
            format!("{periods} periods with an empty GPU queue, {} of the window (a lower bound on GPU idle)", pct(empty)),
        ],
        "synchronize less: avoid .item()/.cpu()/torch.cuda.synchronize() every step, log metrics every N steps, keep values on the GPU",
    ))
}

pub(super) fn pageable_copy(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let c = &ev.copies;
    let pageable = c.h2d.pageable + c.d2h.pageable;
    if pageable == 0 || a.window_s == 0.0 {
        return None;
    }
    let copies = c.h2d.count + c.d2h.count;
    // Pageable copies are staged through a driver buffer while the host waits (docs/facts.md: 4 MiB
    // pageable H2D 0.34 ms vs pinned 0.08 ms). The call also waits for the GPU work queued
    // before it, which is not the copy's cost: each call is charged at most its staging time
    // (`evidence::cost`). NVML caps it by the time the GPU did not work.
    let staging = a.share(|t| t.pageable_staging_ns);
    let impact = staging.min(a.gpu_idle_cap());
    Some(diagnosis(
        DiagnosisId::PageableCopy,
        TimeBucket::InCopies,
        impact,
        format!("{pageable} of {copies} host↔device copies use pageable memory, which the host must stage synchronously"),
        vec![
            format!("H2D: {} pageable copies, {} bytes", c.h2d.pageable, c.h2d.pageable_bytes),
            format!("D2H: {} pageable copies, {} bytes", c.d2h.pageable, c.d2h.pageable_bytes),
            format!("staging them took about {} of the time on the launching threads", pct(staging)),
            "classified from the traced pinning calls and the process memory map (pinned memory is a shared /dev/zero mapping)".into(),
        ],
        "pin the host buffers: DataLoader(pin_memory=True) or tensor.pin_memory(), then copy with .to(device, non_blocking=True)",
    ))
}

/// Copies that stall the host by their own doing: synchronous copy APIs, and async copies
/// the program then waited for (`non_blocking=False`, `.cpu()`). Scalar reads (`.item()`)
/// are `host-sync`'s: what they cost is the GPU idling afterwards, not the read.
///
/// The synchronize after a copy waits for everything queued before it. In a GPU-bound loop
/// ending each step with `.cpu()`, that is the step's compute: the GPU is working, and
/// making the copy non-blocking would not make it finish sooner. Only the copy's transfer
/// (bytes over the bus, estimated per call, `evidence::cost`) is the copy's cost — and
/// where NVML says the GPU was busy, at most the time it was not. So a GPU-bound loop
/// stays `gpu-bound`, and a large blocking transfer with little compute is `blocking-copy`.
pub(super) fn blocking_copy(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let c = &ev.copies;
    let then_synced = c.h2d.then_synced + c.d2h.then_synced;
    let sync_api = c.h2d.sync_api + c.d2h.sync_api;
    if then_synced + sync_api == 0 || a.window_s == 0.0 {
        return None;
    }
    let transfer = a.share(|t| t.copy_transfer_waits_ns + t.sync_copy_transfer_ns);
    let impact = transfer.min(a.gpu_idle_cap());
    if impact < LOW {
        return None;
    }
    let waited = (c.h2d.then_synced_wait_ns + c.d2h.then_synced_wait_ns) as f64 / 1e9;
    Some(diagnosis(
        DiagnosisId::BlockingCopy,
        TimeBucket::WaitingOnGpu,
        impact,
        format!("{} copies made the host wait for them ({then_synced} async copies followed by a synchronize, {sync_api} synchronous copy calls)", then_synced + sync_api),
        vec![
            format!("H2D then synchronize (non_blocking=False): {} times, {:.3} s waiting", c.h2d.then_synced, c.h2d.then_synced_wait_ns as f64 / 1e9),
            format!("D2H then synchronize (.cpu()): {} times, {:.3} s waiting", c.d2h.then_synced, c.d2h.then_synced_wait_ns as f64 / 1e9),
            format!(
                "of the {waited:.3} s waited, the transfers themselves account for about {} of the time; the rest was the GPU finishing earlier work",
                pct(transfer)
            ),
        ],
        "copy with non_blocking=True into pinned memory and wait on an event only when the data is needed, so the transfer overlaps the next step; fetch results to the host (.cpu(), .item()) only when needed",
    ))
}

pub(super) fn alloc_churn(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let m = &ev.allocs;
    // Counted from the start-up's end where the account left one out (a model loads there).
    let (count, frees) = a.time.as_ref().map_or((m.count, m.frees), |t| t.allocs_in(ev));
    let rate = if a.window_s == 0.0 { 0.0 } else { 2.0 * count.min(frees) as f64 / a.window_s };
    if rate < ALLOCS_PER_S {
        return None;
    }
    let allocating = a.share(|t| t.allocating_ns);
    Some(diagnosis(
        DiagnosisId::AllocChurn,
        TimeBucket::Allocating,
        allocating,
        format!("device memory is allocated and freed {rate:.0} times/s: the caching allocator is being bypassed or emptied"),
        vec![
            format!("{} allocations ({} bytes), {} frees, {} failed", m.count, m.bytes, m.frees, m.failures),
            format!("the launching threads spent {} of the window inside allocation calls", pct(allocating)),
        ],
        // Mappings mean expandable segments are already on: advising them would be noise.
        if ev.vmm.maps > 0 {
            "keep memory cached: drop torch.cuda.empty_cache() from the loop and keep tensor shapes stable (expandable segments are already in use: the churn is in their map/unmap calls)"
        } else {
            "keep memory cached: drop torch.cuda.empty_cache() from the loop, keep tensor shapes stable, or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        },
    ))
}

/// NVML utilization at or above which the GPU is busy in time (a kernel nearly always runs).
const SMALL_KERNELS_UTIL: f64 = 0.80;
/// GPM SM activity below this share of the utilization: the kernels that run leave most SMs
/// empty.
const SMALL_KERNELS_SM_SHARE: f64 = 0.5;

/// The GPU is busy in time but its SMs are mostly empty: each kernel is too small to fill the
/// GPU (a small batch, CUDA graphs or XLA programs of tiny kernels). Needs both NVML's
/// utilization (time) and Hopper GPM's SM activity (space). The impact is GPU time, not a
/// host bucket: the time kernels ran with the SMs idle (utilization − SM activity). Host-side
/// problems are capped by the time no kernel ran, so the impacts still add up to at most 1.
pub(super) fn small_kernels(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let (util, sm) = (a.gpu_util?, a.sm_active?);
    if util < SMALL_KERNELS_UTIL || sm >= SMALL_KERNELS_SM_SHARE * util {
        return None;
    }
    let impact = (util - sm).clamp(0.0, 1.0);
    let graphs: u64 = ev.threads.values().map(crate::evidence::ThreadStats::graph_launches).sum();
    let mut evidence: Vec<String> = gpu_line(a).into_iter().collect();
    evidence.push(format!("{:.0} kernel launches/s and {:.0} graph launches/s", a.launch_rate - a.graph_rate, if a.window_s > 0.0 { graphs as f64 / a.window_s } else { 0.0 }));
    Some(Diagnosis {
        id: DiagnosisId::SmallKernels,
        severity: severity(impact),
        impact,
        summary: format!("the GPU runs kernels {} of the time but its SMs are busy only {}: the work is too small to fill it", pct(util), pct(sm)),
        evidence,
        fix: "give each kernel more work: a larger batch, fused or compiled kernels (torch.compile), larger graphs; or share the GPU with other jobs (MPS)".into(),
        bucket: None,
        saving: None,
        sites: Vec::new(),
    })
}

pub(super) fn gpu_bound(_: &Evidence, a: &Account) -> Option<Diagnosis> {
    // NVML decides where it answered; without it, the host waiting for GPU work most of the
    // time (syncs and copy calls, less what the copies cost by their own doing).
    let waiting = a.waiting_for_gpu_work();
    let busy = a.gpu_busy().unwrap_or(waiting >= HOST_WAIT_HIGH);
    if !busy {
        return None;
    }
    let mut evidence = vec![format!("the launching threads waited for GPU work {} of the time", pct(waiting))];
    evidence.extend(gpu_line(a));
    Some(Diagnosis {
        id: DiagnosisId::GpuBound,
        severity: crate::severity::Severity::Info,
        impact: a.gpu_activity().unwrap_or(waiting),
        summary: "the GPU is the limiter: the host keeps it fed — healthy".into(),
        evidence,
        fix: "nothing on the host side; to go faster, make the GPU work cheaper (mixed precision, better kernels, larger tiles)".into(),
        bucket: Some(TimeBucket::WaitingOnGpu),
        saving: None,
        sites: Vec::new(),
    })
}
