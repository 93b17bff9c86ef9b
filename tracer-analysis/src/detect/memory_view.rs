//! The other half of "memory 90 % full, utilization 15 %": where the GPU memory is, and
//! whether it is a problem. From the driver's allocation calls (what the job reserved, when,
//! from which code, and which requests failed) and NVML's per-process memory (what the
//! process holds, context included):
//!
//! - `oom`: an allocation failed for good (its retry after freeing failed too, or nothing
//!   followed it): the size asked, what was held, who else holds the GPU.
//! - `fragmentation`: allocations failed and succeeded only after the job freed memory and
//!   retried: a caching allocator's out-of-memory path (PyTorch empties its cache, then
//!   retries), which costs the time of those frees and a device sync each time.
//! - `memory-growth`: reservations grow steadily through the second half of the window (a
//!   leak: tensors kept alive across steps; or a cache meeting ever new shapes), with the
//!   rate and the time left before the GPU is full.
//! - `memory-reserved` (info): the job holds a large part of the GPU; a caching allocator
//!   keeps what it reserved, so nvidia-smi shows it used even when its tensors are gone.
//!
//! These are not parts of the time account: their impact is 0 except `fragmentation`'s
//! (the time from a failed request to its successful retry).

use super::{diagnosis::pct, severity, code_sites::SITES};
use crate::severity::Severity;
use crate::{
    evidence::{Evidence, Failure, RETRY_WITHIN_NS},
    gpu_samples::Finished,
    model::{BlockSizes, Diagnosis, DiagnosisId, Memory, MemoryPoint, TensorMemory},
    printable::bytes,
    stacks::alloc::{top, top_live, Weight},
};

/// Growth below this over the second half of the window is noise (a segment or two).
const GROWTH_MIN_BYTES: u64 = 64 << 20;
/// Each quarter of the second half must carry at least this share of its growth: steady,
/// not one jump (an evaluation phase, a new batch shape).
const GROWTH_STEADY_SHARE: f64 = 0.2;
/// A leak's lowest level rises by at least this share of its peak's rise, quarter to quarter.
const FLOOR_RISE_SHARE: f64 = 0.5;
/// Windows shorter than this say nothing about growth per second...
const GROWTH_MIN_WINDOW_NS: u64 = 2_000_000_000;
/// ...unless they hold this many steps: growth is then judged per step (a leak of every
/// step shows in a second as well as in a minute), over at least `GROWTH_MIN_STEPS_WINDOW_NS`
/// so that the quarters of its second half fall in distinct points of the timeline.
const GROWTH_MIN_STEPS: f64 = 40.0;
const GROWTH_MIN_STEPS_WINDOW_NS: u64 = 4 * crate::evidence::TIMELINE_BUCKET_NS;
/// `memory-reserved` when the job holds at least this share of its GPUs.
const RESERVED_SHARE: f64 = 0.25;
/// At most this many timeline points (one a second; longer windows are thinned).
const TIMELINE_POINTS: u64 = 3600;

/// A sum that stops at the largest value rather than overflow (recordings are untrusted).
fn total(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0, u64::saturating_add)
}

/// What the memory view is made from.
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// What the probes collected over the window (allocations, frees, failed requests).
    pub evidence: &'a Evidence,
    /// The window's start, monotonic ns (the events' clock).
    pub start_ns: u64,
    /// The window's end, monotonic ns.
    pub end_ns: u64,
    /// The traced processes.
    pub traced: &'a [u32],
    /// NVML's devices, samples and the holders at the end (None without NVML).
    pub gpu: Option<&'a Finished>,
    /// Training steps a second, where steps were found; None otherwise.
    pub steps_per_s: Option<f64>,
    /// When each step began (the step marker's times, the newest 4096), to count the steps
    /// a span of the window holds.
    pub step_times: Option<&'a std::collections::VecDeque<u64>>,
    /// Where the loop began, if a start-up came before it (`window.phases`): the model built,
    /// the data loaded, the first steps compiled. Growth is judged from there.
    pub loop_start_ns: Option<u64>,
}

impl Inputs<'_> {
    /// NVML: bytes the traced processes hold on all devices, per the holders at the end; if
    /// NVML no longer lists them there (the job had exited), per the newest reading that did.
    fn held_at_end(&self) -> Option<u64> {
        let g = self.gpu?;
        let traced = |held: &[(u32, u64)]| -> Option<u64> {
            let mine: Vec<u64> = held.iter().filter(|(pid, _)| self.traced.contains(pid)).map(|(_, b)| *b).collect();
            (!mine.is_empty()).then(|| total(mine.iter().copied()))
        };
        let at_end: Vec<(u32, u64)> = g.holders.iter().flatten().copied().collect();
        traced(&at_end).or_else(|| {
            // The newest reading of each device that lists a traced process, summed.
            let mut per_device: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
            for s in g.samples.iter().filter(|s| s.at_ns <= self.end_ns) {
                if let Some(bytes) = s.memory_by_pid.as_deref().and_then(traced) {
                    per_device.insert(s.device, bytes);
                }
            }
            (!per_device.is_empty()).then(|| total(per_device.values().copied()))
        })
    }

    /// Requests that failed for good: those given up on, and those never resolved, but not a
    /// failure in the window's last second of a process still alive (its retry may come after).
    fn failed_for_good(&self) -> Vec<&Failure> {
        let failures = &self.evidence.allocs.out_of_memory_failures;
        let alive = |pid: u32| !self.evidence.processes.get(&pid).is_some_and(|p| p.exited);
        let unresolved = failures.pending.values().filter(|f| !(f.at_ns.saturating_add(RETRY_WITHIN_NS) > self.end_ns && alive(f.pid)));
        failures.fatal.iter().chain(unresolved).collect()
    }

    /// When the job first called CUDA in the window: growth is judged from there, so that a
    /// window that began with the interpreter's start-up is not half start-up.
    fn cuda_start_ns(&self) -> u64 {
        // max then min, not clamp: a damaged recording may end before it starts.
        self.evidence.threads.values().map(|t| t.first_ns).filter(|&f| f > 0).min().map_or(self.start_ns, |f| f.max(self.start_ns).min(self.end_ns))
    }

    /// Where growth is judged from: the loop's start after a start-up, else the first CUDA
    /// call. Under `run` a start-up of seconds (the model built and moved to the GPU) would
    /// otherwise fill the first half of the window, and its one-off reservations hide a leak
    /// of the loop (the H200's planted leak under `run`, docs/validation.md, d37).
    fn growth_start_ns(&self) -> u64 {
        self.cuda_start_ns().max(self.loop_start_ns.unwrap_or(0)).min(self.end_ns)
    }

    /// The devices the traced processes hold memory on: per the holders at the end, else (the
    /// job had exited) per any reading of the window; all devices if NVML never listed them.
    fn devices(&self) -> Vec<u32> {
        let Some(g) = self.gpu else { return Vec::new() };
        let mine = |held: &[(u32, u64)]| held.iter().any(|(pid, _)| self.traced.contains(pid));
        let mut held: std::collections::BTreeSet<u32> =
            g.holders.iter().enumerate().filter(|(_, h)| mine(h)).filter_map(|(i, _)| g.devices.get(i).map(|d| d.index)).collect();
        if held.is_empty() {
            held = g.samples.iter().filter(|s| s.memory_by_pid.as_deref().is_some_and(mine)).map(|s| s.device).collect();
        }
        if held.is_empty() {
            g.devices.iter().map(|d| d.index).collect()
        } else {
            held.into_iter().collect()
        }
    }

    fn device_total(&self) -> Option<u64> {
        let g = self.gpu?;
        let devices = self.devices();
        Some(g.devices.iter().filter(|d| devices.contains(&d.index)).map(|d| d.memory_total_bytes).fold(0, u64::saturating_add)).filter(|&t| t > 0)
    }

    /// Free memory on the job's devices at the last reading (NVML).
    fn device_free(&self) -> Option<u64> {
        let g = self.gpu?;
        let capacity = self.device_total()?;
        let used = total(self.devices().iter().filter_map(|&d| g.samples.iter().rev().find(|s| s.device == d).and_then(|s| s.mem_used_bytes)));
        Some(capacity.saturating_sub(used))
    }
}

/// The memory view, and its diagnoses added to the time analysis's findings (after the time
/// ones: they cost memory, not time, and do not change the verdict). The step figures of
/// `inputs` (`steps_per_s`, `step_times`, `loop_start_ns`) are taken from the findings:
/// growth is judged per step, and from the loop's start.
pub fn analyze(inputs: Inputs<'_>, findings: &mut super::Findings) -> Memory {
    let marker = findings.time.as_ref().and_then(|t| super::rhythm::best_marker(inputs.evidence, t));
    let inputs = Inputs {
        steps_per_s: findings.steps.as_ref().map(|s| s.per_second),
        step_times: marker.as_ref().map(|(_, times, _)| &**times),
        loop_start_ns: findings.time.as_ref().and_then(|t| t.startup.as_ref()).map(|s| s.mark.at_ns),
        ..inputs
    };
    let view = view(&inputs);
    findings.diagnoses.extend(diagnose(&inputs, &view));
    view
}

/// The `memory` section of the report.
fn view(inputs: &Inputs<'_>) -> Memory {
    let a = &inputs.evidence.allocs;
    let held = inputs.held_at_end();
    // Every reservation was seen: the job created or retained its context while traced, and
    // freed nothing allocated before (a library's retain in a running job is not its start).
    let from_start = inputs.evidence.contexts.iter().any(|c| c.result == 0 && (c.symbol.starts_with("cuCtxCreate") || c.symbol == "cuDevicePrimaryCtxRetain"))
        && a.unknown_frees == 0;
    let failures = &a.out_of_memory_failures;
    Memory {
        reserved_bytes: a.live_bytes,
        peak_reserved_bytes: a.peak_live_bytes,
        held_bytes: held,
        context_bytes: held.filter(|_| from_start).map(|h| h.saturating_sub(a.live_bytes)),
        device_total_bytes: inputs.device_total(),
        from_start,
        growth_bytes_per_s: growth_of(inputs).map(|g| g.rate),
        growth_bytes_per_step: growth_of(inputs).and_then(|g| g.per_step.or_else(|| inputs.steps_per_s.filter(|s| *s > 0.0).map(|s| g.rate / s))),
        out_of_memory: a.out_of_memory,
        recovered_by_retry: failures.recovered.iter().filter(|f| f.frees_after > 0).count() as u64,
        failed_for_good: inputs.failed_for_good().len() as u64,
        timeline: timeline(inputs),
        tensors: tensors(inputs.evidence, inputs.start_ns),
    }
}

/// The caching allocator's view, where its reports were seen.
fn tensors(ev: &Evidence, start_ns: u64) -> Option<TensorMemory> {
    let b = &ev.blocks;
    let (allocator_allocated, allocator_reserved) = b.allocator_totals()?;
    Some(TensorMemory {
        allocated_bytes: b.live_bytes,
        peak_allocated_bytes: b.peak_live_bytes,
        blocks: b.count,
        frees: b.frees,
        unknown_frees: b.unknown_frees,
        allocator_allocated_bytes: allocator_allocated,
        allocator_reserved_bytes: allocator_reserved,
        cached_bytes: allocator_reserved.saturating_sub(allocator_allocated),
        until_s: b.stopped_at_ns.map(|at| at.saturating_sub(start_ns) as f64 / 1e9),
        live_by_size: b.live_by_size().into_iter().map(|(from_bytes, blocks, bytes)| BlockSizes { from_bytes, blocks, bytes }).collect(),
    })
}

/// Reserved bytes at `t`: the newest point at or before it.
fn reserved_at(points: &[(u64, u64)], t: u64) -> u64 {
    let i = points.partition_point(|p| p.0 <= t);
    if i == 0 {
        0
    } else {
        points[i - 1].1
    }
}

fn timeline(inputs: &Inputs<'_>) -> Vec<MemoryPoint> {
    const S: u64 = 1_000_000_000;
    let window = inputs.end_ns.saturating_sub(inputs.start_ns);
    let step = S * (window / S / TIMELINE_POINTS + 1);
    let points = &inputs.evidence.allocs.timeline;
    let tensors = &inputs.evidence.blocks.timeline;
    // The memory readings in time order, each interval's found by bisection (a long window of
    // many devices must not be scanned once per point).
    let mut samples: Vec<&crate::gpu_samples::Sample> = inputs.gpu.map(|g| g.samples.iter().filter(|s| s.memory_by_pid.is_some()).collect()).unwrap_or_default();
    samples.sort_by_key(|s| s.at_ns);
    let mut out = Vec::new();
    let mut t = inputs.start_ns;
    while t < inputs.end_ns {
        let end = t.saturating_add(step).min(inputs.end_ns);
        // The newest memory reading of each device in this interval, summed over devices.
        let mut per_device: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
        let (from, to) = (samples.partition_point(|s| s.at_ns < t), samples.partition_point(|s| s.at_ns < end));
        for s in &samples[from..to] {
            if let Some(m) = &s.memory_by_pid {
                per_device.insert(s.device, m.iter().filter(|(pid, _)| inputs.traced.contains(pid)).map(|(_, b)| *b).fold(0, u64::saturating_add));
            }
        }
        out.push(MemoryPoint {
            t_s: (end - inputs.start_ns) as f64 / 1e9,
            reserved_bytes: reserved_at(points, end),
            held_bytes: (!per_device.is_empty()).then(|| total(per_device.values().copied())),
            tensor_bytes: tensors.first().filter(|&&(first, _)| first <= end).map(|_| reserved_at(tensors, end)),
        });
        t = end;
    }
    out
}

/// Steady growth of the reservations.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Growth {
    rate: f64,
    /// Bytes kept per step through the second half, where its steps are counted.
    per_step: Option<f64>,
    /// Bytes at the middle, three quarters and end of the window.
    at: [u64; 3],
    level: Level,
}

/// The most reserved at or before `t`.
fn peak_at(points: &[(u64, u64)], t: u64) -> u64 {
    points.iter().take_while(|p| p.0 <= t).map(|p| p.1).max().unwrap_or(0)
}

/// Growth of the reservations through the second half of the window (from the job's first
/// CUDA call, `start_ns`, to its end): both of its quarters
/// grow, each by a fair share, by at least [`GROWTH_MIN_BYTES`] in all. The first half is left
/// out: it holds the start-up, where every job's allocator fills its cache. Growth is of the
/// peak so far, so that the frees of a job's teardown do not hide it.
fn growth(points: &[(u64, u64)], start_ns: u64, end_ns: u64, steps_per_s: Option<f64>) -> Option<Growth> {
    let window = end_ns.checked_sub(start_ns)?;
    let steps = steps_per_s.unwrap_or(0.0) * window as f64 / 1e9;
    if window < GROWTH_MIN_WINDOW_NS && (steps < GROWTH_MIN_STEPS || window < GROWTH_MIN_STEPS_WINDOW_NS) {
        return None;
    }
    let at = |q: u64| peak_at(points, start_ns + window / 4 * q);
    let (mid, three, end) = (at(2), at(3), peak_at(points, end_ns));
    let (g1, g2) = (three.checked_sub(mid)?, end.checked_sub(three)?);
    let total = g1 + g2;
    if total < GROWTH_MIN_BYTES || (g1.min(g2) as f64) < GROWTH_STEADY_SHARE * total as f64 {
        return None;
    }
    // A leak lifts the level it falls back to with its peak; a level that swings (a cache
    // emptied every step, lengths that vary) sets new highs now and then while its lows stay.
    // The third quarter is compared with the second: the last may hold the teardown's frees.
    // A level that never falls back far below its peak at the half (a leak with no swing)
    // passes as it is: the timeline's points are 100 ms apart, so in a short window a
    // quarter holds two or three, and a steady leak's lows could rise by one point's growth
    // while its peaks rose by two (1 run in 30 of a fake leak of 0.8 s).
    let quarter = |q: u64| (start_ns + window / 4 * (q - 1), start_ns + window / 4 * q);
    let within = |(from, to): (u64, u64)| points.iter().filter(move |p| p.0 > from && p.0 <= to).map(|p| p.1);
    let falls_back = within(quarter(3)).any(|v| (v as f64) < mid as f64 - FLOOR_RISE_SHARE * g1 as f64);
    if let (true, Some(before), Some(after)) = (falls_back, within(quarter(2)).min(), within(quarter(3)).min()) {
        if (after.saturating_sub(before) as f64) < FLOOR_RISE_SHARE * g1 as f64 {
            return None;
        }
    }
    Some(Growth { rate: total as f64 / ((window / 2) as f64 / 1e9), per_step: None, at: [mid, three, end], level: Level::Reserved })
}

/// Growth, with its bytes per step where the steps of its second half can be counted (their
/// markers cover it): a rate per second divided by the mean step rate would mix a start-up's
/// slower steps into it.
///
/// Of the reservations first; where they hold still, of the tensors' live bytes (the caching
/// allocator's blocks, where probed): a leak fills the allocator's cache before it makes the
/// allocator reserve more, and the window may end before it does.
fn growth_of(inputs: &Inputs<'_>) -> Option<Growth> {
    growth_over(inputs, &inputs.evidence.allocs.timeline, Level::Reserved).or_else(|| {
        let b = &inputs.evidence.blocks;
        // Not where the probes went off early: the points stop there.
        (b.seen() && !b.stopped()).then(|| growth_over(inputs, &b.timeline, Level::Tensors)).flatten()
    })
}

/// Which bytes grew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    /// Reserved through the driver.
    Reserved,
    /// In tensors the caching allocator handed out.
    Tensors,
}

fn growth_over(inputs: &Inputs<'_>, points: &[(u64, u64)], level: Level) -> Option<Growth> {
    let (start, end) = (inputs.growth_start_ns(), inputs.end_ns);
    let mut g = growth(points, start, end, inputs.steps_per_s)?;
    g.level = level;
    // The timeline keeps a point per 100 ms bucket, stamped when it was last set: the steps
    // are counted between the points the growth was read at, not between the window's marks.
    let stamp = |t: u64| points.iter().take_while(|p| p.0 <= t).last().map(|p| p.0);
    let (from, to) = (stamp(start + (end - start) / 2), stamp(end));
    g.per_step = match (inputs.step_times, from, to) {
        (Some(times), Some(from), Some(to)) if times.front().is_some_and(|&first| first <= from) => {
            let steps = times.iter().filter(|&&t| t > from && t <= to).count();
            (steps > 0).then(|| g.at[2].saturating_sub(g.at[0]) as f64 / steps as f64)
        }
        _ => None,
    };
    Some(g)
}

/// The memory diagnoses, most severe first.
#[must_use]
fn diagnose(inputs: &Inputs<'_>, view: &Memory) -> Vec<Diagnosis> {
    let window_s = inputs.end_ns.saturating_sub(inputs.start_ns) as f64 / 1e9;
    let stacks = &inputs.evidence.alloc_stacks;
    let mut found: Vec<Diagnosis> = Vec::new();
    if let Some(mut d) = oom(inputs, view) {
        d.sites = top(stacks, Weight::Failed, SITES);
        found.push(d);
    }
    if let Some(mut d) = fragmentation(inputs, window_s, view.tensors.as_ref()) {
        d.sites = top(stacks, Weight::Failed, SITES);
        found.push(d);
    }
    if let Some(g) = growth_of(inputs) {
        let mut d = memory_growth(inputs, g);
        // The lines whose tensors are still live, where the caching allocator was probed: what
        // keeps the memory, not what made the allocator ask the driver for more.
        let live = top_live(&inputs.evidence.block_sites, SITES);
        if let Some(t) = view.tensors.as_ref().filter(|_| !live.is_empty()) {
            d.evidence.push(format!(
                "{} is in tensors handed out while traced and still live ({} blocks handed out, {} given back); the sites are the lines that made the live ones",
                bytes(t.allocated_bytes),
                t.blocks,
                t.frees
            ));
            d.sites = live;
        } else {
            d.sites = top(stacks, Weight::Allocated, SITES);
        }
        found.push(d);
    }
    if view.failed_for_good == 0 {
        if let Some(mut d) = memory_reserved(view) {
            d.sites = top(stacks, Weight::Allocated, SITES);
            found.push(d);
        }
    }
    found
}

fn memory_diagnosis(id: DiagnosisId, severity: Severity, impact: f64, summary: String, evidence: Vec<String>, fix: &str) -> Diagnosis {
    Diagnosis { id, severity, impact, summary, evidence, fix: fix.into(), bucket: None, saving: None, sites: Vec::new() }
}

/// Other processes' memory on the job's GPUs at the end (NVML), largest first.
fn others(inputs: &Inputs<'_>) -> Vec<String> {
    let Some(g) = inputs.gpu else { return vec!["other processes on the GPU are unknown without NVML".into()] };
    let devices = inputs.devices();
    let mut others: Vec<(u32, u32, u64)> = g
        .holders
        .iter()
        .enumerate()
        .filter_map(|(i, h)| Some((g.devices.get(i)?.index, h)))
        .filter(|(d, _)| devices.contains(d))
        .flat_map(|(d, h)| h.iter().filter(|(pid, _)| !inputs.traced.contains(pid)).map(move |&(pid, b)| (d, pid, b)))
        .collect();
    others.sort_by_key(|o| std::cmp::Reverse(o.2));
    if others.is_empty() {
        return vec!["no other process holds memory on the job's GPUs (NVML)".into()];
    }
    others.iter().take(3).map(|(d, pid, b)| format!("process {pid} holds {} on GPU {d} (NVML)", bytes(*b))).collect()
}

fn oom(inputs: &Inputs<'_>, view: &Memory) -> Option<Diagnosis> {
    let failures = inputs.failed_for_good();
    let largest = failures.iter().max_by_key(|f| f.bytes)?;
    // What the job held: through the driver where every reservation was seen, else NVML's.
    let held = if view.from_start {
        format!("{} reserved through the driver", bytes(largest.held_bytes))
    } else if let Some(h) = view.held_bytes {
        format!("{} on the GPU (NVML, at the end)", bytes(h))
    } else {
        "an unknown amount (tracing began after the job's context, and NVML is unavailable)".into()
    };
    let mut evidence = vec![format!(
        "{} request(s) failed for good with CUDA_ERROR_OUT_OF_MEMORY; the largest asked for {} while the job held {held}",
        failures.len(),
        bytes(largest.bytes),
    )];
    if largest.frees_after > 0 {
        let freed = if largest.freed_bytes_after > 0 { format!(" ({})", bytes(largest.freed_bytes_after)) } else { String::new() };
        evidence.push(format!("before giving up, the thread freed {} block(s){freed} and retried: the retries failed too", largest.frees_after));
    }
    evidence.extend(others(inputs));
    Some(memory_diagnosis(
        DiagnosisId::Oom,
        Severity::High,
        0.0,
        format!("the GPU ran out of memory: a request for {} failed for good", bytes(largest.bytes)),
        evidence,
        "lower the peak: a smaller batch or sequence length, mixed precision, activation checkpointing; free what the loop keeps (losses kept with their graph, cached outputs); if another process holds the memory, stop it or use a free GPU",
    ))
}

fn fragmentation(inputs: &Inputs<'_>, window_s: f64, tensors: Option<&TensorMemory>) -> Option<Diagnosis> {
    let retried: Vec<&Failure> = inputs.evidence.allocs.out_of_memory_failures.recovered.iter().filter(|f| f.frees_after > 0).collect();
    if retried.is_empty() {
        return None;
    }
    let spent = total(retried.iter().map(|f| f.recovered_at_ns.saturating_sub(f.at_ns)));
    let impact = if window_s > 0.0 { (spent as f64 / 1e9 / window_s).clamp(0.0, 1.0) } else { 0.0 };
    let free_calls = total(retried.iter().map(|f| f.frees_after));
    let freed_bytes = total(retried.iter().map(|f| f.freed_bytes_after));
    let largest = retried.iter().map(|f| f.bytes).max().unwrap_or(0);
    let level = match severity(impact) {
        Severity::Info => Severity::Low,
        s => s,
    };
    Some(memory_diagnosis(
        DiagnosisId::Fragmentation,
        level,
        impact,
        format!(
            "{} allocation(s) failed for lack of memory and succeeded only after the job freed cached memory and retried: its memory is fragmented or near capacity",
            retried.len()
        ),
        [
            vec![
                format!("{free_calls} frees ({}) between the failures and their retries; the largest request was {}", bytes(freed_bytes), bytes(largest)),
                format!("failing, freeing and retrying took {:.3} s, {} of the window", spent as f64 / 1e9, pct(impact)),
            ],
            tensors.map(held_in_tensors).into_iter().flatten().collect(),
        ]
        .concat(),
        // On the H200, expandable segments made a near-capacity growing buffer 8× slower
        // (docs/validation.md): they are worth a try, measured, not the fix.
        if inputs.evidence.vmm.maps > 0 {
            "leave headroom (a smaller batch, activation checkpointing, less memory held elsewhere) and keep shapes fixed (pad to a few bucket sizes, largest first); expandable segments are in use and are mapping and unmapping on each retry"
        } else {
            "leave headroom (a smaller batch, activation checkpointing, less memory held elsewhere) and keep shapes fixed (pad to a few bucket sizes, largest first); PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True can help when free memory is split between blocks, but measure it: it can also map and unmap on every retry"
        },
    ))
}

/// What the caching allocator's view adds to `fragmentation` (`--tensors`): the cache no
/// tensor uses, and the sizes of the live tensors' blocks, the largest classes by bytes.
fn held_in_tensors(t: &TensorMemory) -> Vec<String> {
    let mut out = Vec::new();
    out.push(format!(
        "at the allocator's last report, {} of its {} reserved was in no tensor (its cache: reserved − allocated), beside {} in live tensors",
        bytes(t.cached_bytes),
        bytes(t.allocator_reserved_bytes),
        bytes(t.allocator_allocated_bytes)
    ));
    let mut by_bytes: Vec<&BlockSizes> = t.live_by_size.iter().collect();
    by_bytes.sort_by_key(|c| std::cmp::Reverse(c.bytes));
    let classes: Vec<String> = by_bytes.iter().take(3).map(|c| format!("{} in {} block(s) of {}–{}", bytes(c.bytes), c.blocks, bytes(c.from_bytes), bytes(c.from_bytes.saturating_mul(2)))).collect();
    if !classes.is_empty() {
        out.push(format!("live tensors by block size: {}", classes.join("; ")));
    }
    out
}

const GROWTH_FIX: &str = "find what outlives its step: a list of losses or outputs kept with their graph (keep loss.item() or loss.detach()), a cache or history that grows without bound; if it is the allocator meeting new shapes, keep shapes fixed";
const GROWTH_FIX_WITHOUT_TENSORS: &str = "find what outlives its step: a list of losses or outputs kept with their graph (keep loss.item() or loss.detach()), a cache or history that grows without bound; if it is the allocator meeting new shapes, keep shapes fixed. The sites are where the allocator asked the driver for more; gputrace --tensors names the lines whose tensors stay live";

fn memory_growth(inputs: &Inputs<'_>, g: Growth) -> Diagnosis {
    let left = inputs.device_free().map(|free| free as f64 / g.rate);
    let level = match left {
        Some(s) if s <= 3600.0 => Severity::High,
        Some(s) if s > 86_400.0 => Severity::Low,
        _ => Severity::Medium,
    };
    let what = match g.level {
        Level::Reserved => "reserved through the driver",
        Level::Tensors => "in live tensors (the caching allocator's blocks; its reserve held still: its cache had room)",
    };
    let mut evidence = vec![format!(
        "{what}, at most: {} halfway through the job's CUDA work, {} at three quarters, {} at the end",
        bytes(g.at[0]),
        bytes(g.at[1]),
        bytes(g.at[2])
    )];
    let per_step = g.per_step.or_else(|| inputs.steps_per_s.filter(|s| *s > 0.0).map(|steps| g.rate / steps));
    if let (Some(b), Some(steps)) = (per_step, inputs.steps_per_s) {
        evidence.push(format!("about {} more every step ({steps:.1} steps/s)", bytes(b as u64)));
    }
    evidence.push(match left {
        Some(s) => format!("at this rate the GPU's free memory ({}) is gone in {}", bytes(inputs.device_free().unwrap_or(0)), duration(s)),
        None => "the GPU's free memory is unknown without NVML: no time to exhaustion".into(),
    });
    memory_diagnosis(
        DiagnosisId::MemoryGrowth,
        level,
        0.0,
        match per_step {
            Some(b) => format!(
                "the job's GPU memory grows steadily, {} a step ({}/s): a leak, or a cache that keeps meeting new shapes",
                bytes(b as u64),
                bytes(g.rate as u64)
            ),
            None => format!("the job's GPU memory grows steadily, {}/s: a leak, or a cache that keeps meeting new shapes", bytes(g.rate as u64)),
        },
        evidence,
        if inputs.evidence.blocks.seen() {
            GROWTH_FIX
        } else {
            GROWTH_FIX_WITHOUT_TENSORS
        },
    )
}

fn duration(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

fn memory_reserved(view: &Memory) -> Option<Diagnosis> {
    let total = view.device_total_bytes?;
    let held = view.held_bytes.unwrap_or(0).max(view.reserved_bytes);
    let share = held as f64 / total as f64;
    if share < RESERVED_SHARE {
        return None;
    }
    let source = if view.held_bytes.is_some_and(|h| h >= view.reserved_bytes) { "NVML" } else { "reserved through the driver" };
    let mut evidence = vec![format!("the job holds {} of the GPU's {} ({source})", bytes(held), bytes(total))];
    evidence.push(match view.context_bytes {
        Some(context) => format!("of it, {} was reserved through allocation calls and kept; {} is the context itself", bytes(view.reserved_bytes), bytes(context)),
        None => format!("{} was reserved while traced; the rest before tracing began or by the context", bytes(view.reserved_bytes)),
    });
    Some(memory_diagnosis(
        DiagnosisId::MemoryReserved,
        Severity::Info,
        0.0,
        format!(
            "the job holds {} ({} of the GPU): a caching allocator keeps what it reserved, so nvidia-smi shows it used even when the tensors in it are gone",
            bytes(held),
            pct(share)
        ),
        evidence,
        "a problem only where other jobs need the memory: cap it (torch.cuda.set_per_process_memory_fraction), give it back at phase ends (torch.cuda.empty_cache()), or tune PYTORCH_CUDA_ALLOC_CONF (expandable_segments:True, garbage_collection_threshold)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const MIB: u64 = 1 << 20;

    #[test]
    fn steady_growth_in_the_second_half_is_growth_and_start_up_is_not() {
        // 10 MiB a second for 20 s: 100 MiB over the second half.
        let leak: Vec<(u64, u64)> = (1..=20).map(|i| (i * S, i * 10 * MIB)).collect();
        let g = growth(&leak, 0, 20 * S, None).expect("a leak grows");
        assert!((g.rate - 10.0 * MIB as f64).abs() < 1.0, "{}", g.rate);
        // The cache fills in the first second and stays.
        let warm = vec![(S / 2, 900 * MIB), (S, 1000 * MIB)];
        assert_eq!(growth(&warm, 0, 20 * S, None), None);
        // The teardown's frees do not hide it.
        let mut torn_down = leak.clone();
        torn_down.push((20 * S, 0));
        assert_eq!(growth(&torn_down, 0, 20 * S, None).map(|g| g.at), Some([100 * MIB, 150 * MIB, 200 * MIB]));
        // One jump at three quarters (an evaluation phase) is not steady growth.
        let jump = vec![(S, 100 * MIB), (15 * S, 400 * MIB)];
        assert_eq!(growth(&jump, 0, 20 * S, None), None);
        // New highs of a level that swings back down every step are no growth: lengths that
        // vary, the cache emptied after each (cache_flush on the H200 read 3.9, 4.0, 4.0 GiB).
        let swings: Vec<(u64, u64)> = (1..=200).map(|i| (i * S / 10, if i % 2 == 0 { 100 * MIB } else { (300 + i) * MIB })).collect();
        assert_eq!(growth(&swings, 0, 20 * S, None), None);
        // A short leak whose timeline has a point per 100 ms: its quarters' lows rose by one
        // point's growth while its peaks rose by two (a flaky CI run, 0.78 s).
        let sparse: Vec<(u64, u64)> = [(93, 592), (194, 1216), (293, 1808), (395, 2400), (495, 3008), (593, 3632), (694, 4256), (779, 4800)]
            .iter()
            .map(|&(ms, mib)| (ms * S / 1000, mib * MIB))
            .collect();
        assert!(growth(&sparse, 0, 780 * S / 1000, Some(385.0)).is_some(), "a steady leak");
        // A trickle under the floor is noise.
        let trickle: Vec<(u64, u64)> = (1..=20).map(|i| (i * S, i * MIB)).collect();
        assert_eq!(growth(&trickle, 0, 20 * S, None), None);
    }

    #[test]
    fn a_short_window_of_many_steps_is_judged_per_step() {
        // 16 MiB kept by each of 375 steps a second, for 0.8 s: one point per 100 ms bucket.
        let ms = S / 1000;
        let leak: Vec<(u64, u64)> = (1..=8).map(|i| (i * 100 * ms, i * 600 * MIB)).collect();
        let g = growth(&leak, 0, 800 * ms, Some(375.0)).expect("many steps that each keep memory");
        assert!((g.rate - 6000.0 * MIB as f64).abs() < 1.0, "{}", g.rate);
        // The same window without steps, or with too few, says nothing.
        assert_eq!(growth(&leak, 0, 800 * ms, None), None);
        assert_eq!(growth(&leak, 0, 800 * ms, Some(20.0)), None);
        // Steps or not, a window too short for distinct quarters says nothing.
        assert_eq!(growth(&leak[..2], 0, 300 * ms, Some(10_000.0)), None);
    }

    #[test]
    fn reserved_at_takes_the_newest_point_before() {
        let p = vec![(10, 1), (20, 2)];
        assert_eq!((reserved_at(&p, 5), reserved_at(&p, 10), reserved_at(&p, 15), reserved_at(&p, 99)), (0, 1, 1, 2));
    }

    fn failure(at_ns: u64, bytes: u64, frees_after: u64, recovered_at_ns: u64) -> Failure {
        Failure { pid: 1, tid: 1, at_ns, bytes, held_bytes: 10 * MIB, frees_after, freed_bytes_after: frees_after * MIB, recovered_at_ns }
    }

    #[test]
    fn retries_after_frees_are_fragmentation_and_a_failed_retry_is_oom() {
        let mut ev = Evidence::default();
        ev.allocs.out_of_memory_failures.recovered = vec![failure(S, 64 * MIB, 4, S + S / 10), failure(2 * S, 64 * MIB, 0, 2 * S + 1)];
        ev.allocs.out_of_memory_failures.fatal = vec![failure(3 * S, 512 * MIB, 2, 0)];
        let inputs = Inputs { evidence: &ev, start_ns: 0, end_ns: 10 * S, traced: &[1], gpu: None, steps_per_s: None, step_times: None, loop_start_ns: None };
        let v = view(&inputs);
        assert_eq!((v.recovered_by_retry, v.failed_for_good), (1, 1));
        let found = diagnose(&inputs, &v);
        let ids: Vec<&str> = found.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["oom", "fragmentation"]);
        assert!(found[0].summary.contains("512.0 MiB"), "{}", found[0].summary);
        assert!((found[1].impact - 0.01).abs() < 1e-9, "0.1 s of 10 s: {}", found[1].impact);
        assert_eq!(found[1].severity, "low");
        // A failure in the last second of a live process may yet be retried; once it exited, not.
        ev.allocs.out_of_memory_failures.pending.insert(1, failure(10 * S - S / 2, 8 * MIB, 0, 0));
        let inputs = Inputs { evidence: &ev, start_ns: 0, end_ns: 10 * S, traced: &[1], gpu: None, steps_per_s: None, step_times: None, loop_start_ns: None };
        assert_eq!(inputs.failed_for_good().len(), 1);
        ev.processes.entry(1).or_default().exited = true;
        let inputs = Inputs { evidence: &ev, start_ns: 0, end_ns: 10 * S, traced: &[1], gpu: None, steps_per_s: None, step_times: None, loop_start_ns: None };
        assert_eq!(inputs.failed_for_good().len(), 2);
    }

    #[test]
    fn fragmentation_with_the_allocators_view_says_what_the_cache_holds_and_the_block_sizes() {
        let t = TensorMemory {
            allocated_bytes: 200 * MIB,
            allocator_allocated_bytes: 200 * MIB,
            allocator_reserved_bytes: 700 * MIB,
            cached_bytes: 500 * MIB,
            live_by_size: vec![
                BlockSizes { from_bytes: MIB, blocks: 8, bytes: 8 * MIB },
                BlockSizes { from_bytes: 128 * MIB, blocks: 1, bytes: 192 * MIB },
            ],
            ..TensorMemory::default()
        };
        let said = held_in_tensors(&t);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].contains("500.0 MiB of its 700.0 MiB reserved was in no tensor"), "{said:?}");
        assert!(said[1].starts_with("live tensors by block size: 192.0 MiB in 1 block(s) of 128.0 MiB–256.0 MiB; 8.0 MiB"), "{said:?}");
    }

    #[test]
    fn growth_is_judged_from_the_loop_after_a_start_up() {
        // A start-up reserves 3 GiB in steps from 5 s to 12 s; then the loop leaks 100 MiB a
        // second until 18 s (the H200's planted leak under `run`, d37).
        let mut ev = Evidence::default();
        let mut points: Vec<(u64, u64)> = (5..=12).map(|i| (i * S, (i - 4) * 384 * MIB)).collect();
        points.extend((1..=60).map(|i| (12 * S + i * S / 10, 8 * 384 * MIB + i * 10 * MIB)));
        ev.allocs.timeline = points;
        let inputs = Inputs { evidence: &ev, start_ns: 0, end_ns: 18 * S, traced: &[1], gpu: None, steps_per_s: None, step_times: None, loop_start_ns: Some(12 * S) };
        let g = growth_over(&inputs, &ev.allocs.timeline, Level::Reserved).expect("the loop's leak");
        assert!((g.rate / (100 * MIB) as f64 - 1.0).abs() < 0.1, "{} B/s", g.rate);
    }

    #[test]
    fn the_timeline_has_a_point_a_second() {
        let mut ev = Evidence::default();
        ev.allocs.timeline = vec![(S / 2, 5), (2 * S + 1, 7)];
        let inputs = Inputs { evidence: &ev, start_ns: 0, end_ns: 3 * S, traced: &[1], gpu: None, steps_per_s: None, step_times: None, loop_start_ns: None };
        let t = timeline(&inputs);
        assert_eq!(t.iter().map(|p| p.reserved_bytes).collect::<Vec<_>>(), [5, 5, 7]);
        assert!((t[2].t_s - 3.0).abs() < 1e-9);
    }
}
