//! The detectors. Each returns `None` when its pattern is absent.

use super::{severity, Inputs, LOW};
use crate::{evidence::ThreadStats, report::model::Diagnosis};

pub const GPU_BOUND: &str = "gpu-bound";

pub type Rule = fn(&Inputs<'_>) -> Option<Diagnosis>;
pub const ALL: &[Rule] = &[launch_bound, host_sync, pageable_copy, blocking_copy, alloc_churn, gpu_bound];

/// A launch rate the host path can only sustain with tiny kernels. FACTS.md: one eager
/// PyTorch `add_` costs ~6.8 µs of host time (≈150 k launches/s at best); GEMM-sized work
/// launches hundreds to a few thousand kernels per second.
const LAUNCH_BOUND_RATE: f64 = 5_000.0;
/// Below this fraction of the window waiting on the GPU, the host is not GPU-limited.
const GPU_WAIT_LOW: f64 = 0.30;
/// At or above this fraction waiting on the GPU, the GPU is the limiter (healthy).
const GPU_WAIT_HIGH: f64 = 0.50;
/// Syncs per second that amount to "every step" for a training loop (≥ 10 steps/s).
const SYNCS_PER_S: f64 = 10.0;
/// Alloc + free calls per second that mean the caching allocator is not caching.
const ALLOCS_PER_S: f64 = 20.0;

fn fraction(ns: u64, window_ns: u64) -> f64 {
    if window_ns == 0 { 0.0 } else { (ns as f64 / window_ns as f64).clamp(0.0, 1.0) }
}

fn per_s(n: u64, window_ns: u64) -> f64 {
    if window_ns == 0 { 0.0 } else { n as f64 * 1e9 / window_ns as f64 }
}

fn main_thread<'a>(i: &Inputs<'a>) -> Option<(u32, &'a ThreadStats)> {
    i.evidence.main_thread()
}

fn diagnosis(id: &str, impact: f64, summary: String, evidence: Vec<String>, fix: &str) -> Option<Diagnosis> {
    Some(Diagnosis { id: id.into(), severity: severity(impact).into(), impact, summary, evidence, fix: fix.into() })
}

fn launch_bound(i: &Inputs<'_>) -> Option<Diagnosis> {
    let (tid, t) = main_thread(i)?;
    let launches = t.kernel_launches();
    let rate = per_s(launches, i.window_ns);
    let waiting = fraction(t.sync_wait_ns + t.copy_ns, i.window_ns);
    if rate < LAUNCH_BOUND_RATE || waiting >= GPU_WAIT_LOW {
        return None;
    }
    // The host is busy the rest of the time: launching and the Python around it.
    let impact = 1.0 - waiting;
    diagnosis(
        "launch-bound",
        impact,
        format!("the launching thread issues {rate:.0} kernels/s and waits on the GPU only {:.0}% of the time: the GPU waits for the host", waiting * 100.0),
        vec![
            format!("thread {tid}: {launches} kernel launches in {:.2} s", i.window_ns as f64 / 1e9),
            format!("time blocked in syncs and copies: {:.1}% of the window", waiting * 100.0),
        ],
        "launch fewer, larger kernels: a larger batch, CUDA graphs (torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs), or fused ops",
    )
}

fn host_sync(i: &Inputs<'_>) -> Option<Diagnosis> {
    let (tid, t) = main_thread(i)?;
    let rate = per_s(t.syncs, i.window_ns);
    let idle = fraction(t.queue_idle_ns, i.window_ns);
    if rate < SYNCS_PER_S || idle < LOW {
        return None;
    }
    diagnosis(
        "host-sync",
        idle,
        format!("the host synchronizes {rate:.0} times/s and the GPU queue then sits empty {:.0}% of the time until the next launch", idle * 100.0),
        vec![
            format!("thread {tid}: {} synchronizing calls waited {:.3} s in total", t.syncs, t.sync_wait_ns as f64 / 1e9),
            format!("{} periods with an empty GPU queue, {:.3} s in total (lower bound)", t.idle_periods, t.queue_idle_ns as f64 / 1e9),
        ],
        "synchronize less: avoid .item()/.cpu()/torch.cuda.synchronize() every step, log metrics every N steps, keep values on the GPU",
    )
}

fn pageable_copy(i: &Inputs<'_>) -> Option<Diagnosis> {
    let c = &i.evidence.copies;
    let pageable = c.h2d.pageable + c.d2h.pageable;
    if pageable == 0 {
        return None;
    }
    let copies = c.h2d.count + c.d2h.count;
    // Pageable copies are staged through a driver buffer while the host waits, so their
    // host time is the cost (FACTS.md: 4 MiB pageable H2D 0.34 ms vs pinned 0.08 ms).
    let share = pageable as f64 / copies.max(1) as f64;
    let impact = fraction(((c.h2d.call_ns + c.d2h.call_ns) as f64 * share) as u64, i.window_ns);
    diagnosis(
        "pageable-copy",
        impact,
        format!("{pageable} of {copies} host↔device copies use pageable memory, which the host must stage synchronously"),
        vec![
            format!("H2D: {} pageable copies, {} bytes", c.h2d.pageable, c.h2d.pageable_bytes),
            format!("D2H: {} pageable copies, {} bytes", c.d2h.pageable, c.d2h.pageable_bytes),
            "classified from the traced pinning calls and the process memory map (pinned memory is a shared /dev/zero mapping)".into(),
        ],
        "pin the host buffers: DataLoader(pin_memory=True) or tensor.pin_memory(), then copy with .to(device, non_blocking=True)",
    )
}

fn blocking_copy(i: &Inputs<'_>) -> Option<Diagnosis> {
    let c = &i.evidence.copies;
    let waited = c.h2d.then_synced_wait_ns + c.d2h.then_synced_wait_ns;
    let then_synced = c.h2d.then_synced + c.d2h.then_synced;
    let sync_api = c.h2d.sync_api + c.d2h.sync_api;
    if then_synced + sync_api == 0 {
        return None;
    }
    let impact = fraction(waited + c.d2h.call_ns, i.window_ns);
    if impact < LOW {
        return None;
    }
    diagnosis(
        "blocking-copy",
        impact,
        format!("{} copies made the host wait for the GPU ({then_synced} async copies followed by a synchronize, {sync_api} synchronous copy calls)", then_synced + sync_api),
        vec![
            format!("H2D then synchronize: {} times, {:.3} s waiting", c.h2d.then_synced, c.h2d.then_synced_wait_ns as f64 / 1e9),
            format!("D2H then synchronize (.item(), .cpu()): {} times, {:.3} s waiting", c.d2h.then_synced, c.d2h.then_synced_wait_ns as f64 / 1e9),
        ],
        "copy with non_blocking=True from pinned memory, and fetch results to the host (.cpu(), .item()) only when needed",
    )
}

fn alloc_churn(i: &Inputs<'_>) -> Option<Diagnosis> {
    let a = &i.evidence.allocs;
    let calls = a.count + a.frees;
    let rate = per_s(calls, i.window_ns);
    if rate < ALLOCS_PER_S {
        return None;
    }
    let impact = fraction(a.call_ns, i.window_ns);
    diagnosis(
        "alloc-churn",
        impact.max(LOW),
        format!("device memory is allocated and freed {rate:.0} times/s: the caching allocator is being bypassed or emptied"),
        vec![
            format!("{} allocations ({} bytes), {} frees, {} failed", a.count, a.bytes, a.frees, a.failures),
            format!("{:.3} s of host time inside allocation calls", a.call_ns as f64 / 1e9),
        ],
        "keep memory cached: drop torch.cuda.empty_cache() from the loop, keep tensor shapes stable, or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    )
}

fn gpu_bound(i: &Inputs<'_>) -> Option<Diagnosis> {
    let (tid, t) = main_thread(i)?;
    let waiting = fraction(t.sync_wait_ns, i.window_ns);
    if waiting < GPU_WAIT_HIGH {
        return None;
    }
    Some(Diagnosis {
        id: GPU_BOUND.into(),
        severity: "info".into(),
        impact: waiting,
        summary: format!("the GPU is the limiter: the launching thread waits for it {:.0}% of the time — healthy", waiting * 100.0),
        evidence: vec![format!("thread {tid}: {} synchronizing calls waited {:.3} s", t.syncs, t.sync_wait_ns as f64 / 1e9)],
        fix: "nothing on the host side; to go faster, make the GPU work cheaper (mixed precision, better kernels)".into(),
    })
}
