//! Evidence: everything the probes said, folded into totals per kind of call and per thread.
//! Pure over decoded events plus a [`HostMemory`] lookup (so tests can give synthetic memory
//! maps); no I/O happens here.

pub mod time_account;
pub mod blocks;
pub mod bursts;
pub mod collectives;
mod copies;
pub mod cost;
pub mod cpu_stat;
pub mod sched_io;
mod memory;
pub mod sampled_calls;
pub mod snapshot;
pub mod steps;
pub mod timeline;
pub mod waits;
#[cfg(test)]
mod tests;
mod threads;
mod vmm;

use std::collections::BTreeMap;

use gputrace_common::{drains_queue_after, spec_of, CallEvent, Family, ProbeSpec, ThreadCounters, CLONE_THREAD};

pub use copies::{CopyClass, CopyStats, DirStats, Direction, HostClass, HostMemory};
pub use memory::{AllocStats, ContextCall, Failure, Failures, HostPinStats, StackAllocs, RETRY_WITHIN_NS, TIMELINE_BUCKET_NS};
pub use threads::ThreadStats;
pub use vmm::VmmStats;

use crate::decode::Event;

/// A device-to-host copy this small followed by a sync is reading a scalar (`.item()`),
/// not moving data: 8 bytes is a float64, 256 leaves room for a handful of values.
pub const SCALAR_READ_BYTES: u64 = 256;

/// Totals for one kind of synchronize call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Calls made.
    pub count: u64,
    /// Host time inside those calls, ns.
    pub wait_ns: u64,
    /// Per symbol: calls and wait.
    pub by_symbol: BTreeMap<&'static str, (u64, u64)>,
}

/// A process of the traced tree as the task events saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessSeen {
    /// The process that created it, where its creation was seen during the window; None for
    /// one that existed before tracing began.
    pub parent: Option<u32>,
    /// Times it called exec during the window.
    pub execs: u32,
    /// Whether it exited (its main thread did) during the window.
    pub exited: bool,
}

/// Calls of one kind and the bytes they named.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    /// Calls made.
    pub count: u64,
    /// Bytes they named, summed.
    pub bytes: u64,
}

/// Everything the probes said over a window, folded per kind of call, per thread and per
/// process: what the detectors and the report are built from. Times are monotonic ns.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    /// Copies, by direction.
    pub copies: CopyStats,
    /// Bulk device-to-host copies in bursts (checkpoints).
    pub d2h_bursts: bursts::Bursts,
    /// Memset calls and the bytes they set.
    pub memsets: Calls,
    /// Synchronize calls and the time they waited.
    pub syncs: SyncStats,
    /// Device memory allocated and freed through the driver.
    pub allocs: AllocStats,
    /// A caching allocator's blocks (tensors), where its probes were attached.
    pub blocks: blocks::Blocks,
    /// Host memory pinned and unpinned through the driver.
    pub host_pins: HostPinStats,
    /// Virtual memory mappings (`cuMemMap`, `cuMemUnmap`).
    pub vmm: VmmStats,
    /// Context calls, in the order they arrived.
    pub contexts: Vec<ContextCall>,
    /// NCCL, per rank.
    pub(crate) collectives: collectives::Collectives,
    /// Where each rank runs, from its environment (read while it lived; `learn_rank_env`).
    pub(crate) rank_env: BTreeMap<u32, RankEnv>,
    /// Per-thread figures, by tid, of each thread that made a CUDA call or hit a probe.
    pub threads: BTreeMap<u32, ThreadStats>,
    /// Processes (by pid) that task events named: created, exec'd or exited during the window.
    pub processes: BTreeMap<u32, ProcessSeen>,
    /// Records that failed to decode (a kernel/user version mismatch or a damaged recording;
    /// `undecodable`).
    pub(crate) decode_errors: u64,
    /// Records delivered through the ring buffer and folded in; of them, CUDA call records.
    pub delivered: u64,
    /// Of `delivered`, call records (CUDA, NCCL and caching-allocator probes).
    pub calls_delivered: u64,
    /// Events whose probe id we do not know.
    pub(crate) unknown_probes: u64,
    /// Owner (real uid) of each process seen, looked up while it was alive (`learn_uid`).
    pub(crate) uids: BTreeMap<u32, Option<u32>>,
    /// Scheduler accounting per thread of the traced tree.
    pub sched: BTreeMap<u32, sched_io::SchedStats>,
    /// Block I/O of the traced tree.
    pub io: sched_io::IoStats,
    /// Who took the CPU from traced threads, looked up at the end.
    pub preempted_by: Vec<snapshot::Preemptor>,
    /// CPU throttling of the tree's cgroups over the window, by `cpu.stat` file.
    pub cgroups: Vec<(String, crate::evidence::cpu_stat::CpuStat)>,
    /// Off-CPU time of the traced threads by who woke them (from snapshots; `waits`).
    pub wakes: Vec<waits::Wake>,
    /// Time by user stack and activity (`crate::stacks`), for the diagnoses' call sites.
    pub stacks: Vec<crate::stacks::StackTime>,
    /// Device allocations by user stack, for the memory diagnoses' sites.
    pub alloc_stacks: Vec<crate::stacks::alloc::AllocStack>,
    /// The caching allocator's live blocks by the Python line that asked for them (`blocks`).
    pub block_sites: Vec<crate::stacks::alloc::BlockSite>,
    /// Off-CPU spells of at least half a second, as they ended.
    pub long_sleeps: Vec<waits::LongSleep>,
    /// The CUDA threads' cumulative figures at moments of the window (`timeline`).
    pub timeline: timeline::Timeline,
    /// When threads and processes created during the window were created.
    pub(crate) births: BTreeMap<u32, u64>,
    /// When threads of the traced tree exited during the window.
    pub deaths: BTreeMap<u32, u64>,
    /// Spans with the launch probes off (`--max-overhead`), ns; the last ends at `u64::MAX`
    /// while they are still off.
    pub(crate) launches_off: Vec<(u64, u64)>,
    /// Spans with the copy, memset and sync probes off as well (`sampled_calls`), ns; the
    /// last ends at `u64::MAX` while they are still off.
    pub(crate) calls_off: Vec<(u64, u64)>,
    /// Empty-queue spells left out because the launch probes were off during them (the
    /// launch that ended the spell may have gone unseen).
    pub spells_unseen: u64,
    /// Each thread's probe hits, and its empty-queue time and spells, when the launch probes
    /// first went off (all seen until then).
    pub(crate) hits_at_first_shed: BTreeMap<u32, [u64; gputrace_common::PROBE_SLOTS]>,
    /// Each thread's empty-queue time (ns) and spells at that moment (`queue_idle_ns`,
    /// `idle_periods`).
    pub(crate) spells_at_first_shed: BTreeMap<u32, (u64, u64)>,
    /// Each thread's hits when the launch probes last went off, until they are back on
    /// (kept for a thread that ended meanwhile: its last hits are its final ones).
    pub(crate) hits_at_last_shed: BTreeMap<u32, [u64; gputrace_common::PROBE_SLOTS]>,
    /// Hits counted while the launch probes were off: the kernel takes a closed link's
    /// probes out over a grace period or more, and they fire meanwhile. Their calls count as
    /// made with launches off, so these are left out of what is scaled
    /// (`scale_sampled_launches`): counted, then scaled again, they made short windows'
    /// estimates 5–40 % high.
    pub(crate) lingering_hits: BTreeMap<u32, [u64; gputrace_common::PROBE_SLOTS]>,
}

/// A rank's placement, as its launcher set it in its environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankEnv {
    /// `LOCAL_RANK`.
    pub local_rank: Option<u32>,
    /// `CUDA_VISIBLE_DEVICES`, as given.
    pub visible_devices: Option<String>,
}

impl RankEnv {
    /// From a process's environment (`/proc/PID/environ`: NUL-separated `NAME=value`).
    #[must_use]
    pub fn parse(environ: &[u8]) -> Self {
        let value = |name: &str| {
            environ.split(|&b| b == 0).find_map(|kv| kv.strip_prefix(name.as_bytes())?.strip_prefix(b"=")).map(|v| String::from_utf8_lossy(v).into_owned())
        };
        Self { local_rank: value("LOCAL_RANK").and_then(|v| v.trim().parse().ok()), visible_devices: value("CUDA_VISIBLE_DEVICES") }
    }

    /// The GPU the rank uses by convention: the `LOCAL_RANK`-th device `CUDA_VISIBLE_DEVICES`
    /// names, or device `LOCAL_RANK` where that names none.
    #[must_use]
    pub fn gpu(&self) -> Option<String> {
        let local = self.local_rank?;
        match self.visible_devices.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            Some(list) => list.split(',').nth(local as usize).map(|d| d.trim().to_owned()),
            None => Some(local.to_string()),
        }
    }
}

/// What the evidence learns beside the events, by its own methods: the live drain and a
/// recording's replay write through these and `apply` alone (issue 59), so the two cannot
/// fold the same records differently.
impl Evidence {
    /// A record that did not decode (counted in the report's `tracer.lost_events`).
    pub fn undecodable(&mut self) {
        self.decode_errors += 1;
    }

    /// Records that failed to decode so far.
    #[must_use]
    pub const fn decode_errors(&self) -> u64 {
        self.decode_errors
    }

    /// The owner of process `pid`, looked up by `read` the first time it is seen (a live
    /// session reads `/proc` while the process lives; a replay knows it from a checkpoint).
    pub fn learn_uid(&mut self, pid: u32, read: impl FnOnce() -> Option<u32>) {
        self.uids.entry(pid).or_insert_with(read);
    }

    /// The owner of `pid` as learnt; None where unknown.
    #[must_use]
    pub fn uid_of(&self, pid: u32) -> Option<u32> {
        self.uids.get(&pid).copied().flatten()
    }

    /// Every owner learnt, by pid (a recording's checkpoint keeps them).
    pub fn uids(&self) -> impl Iterator<Item = (u32, Option<u32>)> + '_ {
        self.uids.iter().map(|(p, u)| (*p, *u))
    }

    /// Where rank `pid` runs, read by `read` the first time it calls NCCL.
    pub fn learn_rank_env(&mut self, pid: u32, read: impl FnOnce() -> RankEnv) {
        self.rank_env.entry(pid).or_insert_with(read);
    }

    /// Thread `tid`'s scheduler figures made relative to `before` (a recording that does not
    /// start with the session keeps only its own part of an exit's cumulative reading).
    pub fn rebase_sched(&mut self, tid: u32, before: &sched_io::SchedStats) {
        if let Some(s) = self.sched.get_mut(&tid) {
            *s = s.since(before);
        }
    }
}

impl Evidence {
    /// Fold one event in.
    pub fn apply(&mut self, event: &Event, host: &mut dyn HostMemory) {
        self.delivered += 1;
        match event {
            Event::Call(call) => {
                self.calls_delivered += 1;
                // A caching allocator's report is no CUDA call: it neither anchors the
                // launches' scale nor takes the thread's time.
                match spec_of(call.header.probe) {
                    Some(spec) if spec.family == Family::Block => self.blocks.record(spec, call),
                    Some(spec) => self.apply_call(spec, call, host),
                    None => self.unknown_probes += 1,
                }
            }
            Event::IdleEnd(e) => {
                self.d2h_bursts.launch(e.header.tid, e.header.ts_ns);
                if self.launches_were_off(e.drained_at_ns, e.header.ts_ns) {
                    // The probes were off for part of it: the first launch after the drain
                    // was maybe not seen, so the spell's end is not known.
                    self.spells_unseen += 1;
                    return;
                }
                let t = self.thread(e.header.tid, e.header.tgid);
                t.queue_idle_ns += e.header.ts_ns.saturating_sub(e.drained_at_ns);
                t.idle_periods += 1;
            }
            Event::TaskNew(e) => {
                if e.flags & CLONE_THREAD == 0 && e.child_tid != 0 {
                    self.processes.entry(e.child_tid).or_default().parent = Some(e.header.tgid);
                }
                if e.child_tid != 0 {
                    self.births.insert(e.child_tid, e.header.ts_ns);
                }
            }
            Event::LongSleep(e) => self.long_sleeps.push(waits::LongSleep {
                tid: e.header.tid,
                pid: e.header.tgid,
                start_ns: e.start_ns,
                end_ns: e.header.ts_ns,
                waker_pid: e.wake.waker_tgid,
                stack_id: e.wake.stack_id,
                in_cuda: e.wake.in_cuda != 0,
            }),
            Event::TaskExec(e) => self.processes.entry(e.header.tgid).or_default().execs += 1,
            Event::SchedFinal(e) => self.sched.entry(e.header.tid).or_default().add(&e.sched, 0),
            Event::Io(e) => self.io.record(e),
            Event::TaskExit(e) => {
                self.deaths.insert(e.header.tid, e.header.ts_ns);
                if e.header.tid == e.header.tgid {
                    self.processes.entry(e.header.tgid).or_default().exited = true;
                    self.blocks.exited(e.header.tgid);
                }
            }
        }
    }

    /// The launch probes went off at `at_ns` (the overhead budget); `live` are the live
    /// threads' counters then (the first time, every thread's hits so far are kept: they were
    /// all seen).
    pub fn launch_probes_off(&mut self, at_ns: u64, live: &[(u32, ThreadCounters)]) {
        if self.launches_off.is_empty() {
            self.hits_at_first_shed = self.threads.iter().map(|(&tid, t)| (tid, t.hits)).collect();
            self.spells_at_first_shed = self.threads.iter().map(|(&tid, t)| (tid, (t.queue_idle_ns, t.idle_periods))).collect();
            self.hits_at_first_shed.extend(live.iter().map(|(tid, c)| (*tid, c.hits)));
        }
        if self.launches_off.last().is_none_or(|&(_, on)| on != u64::MAX) {
            self.launches_off.push((at_ns, u64::MAX));
            self.hits_at_last_shed.extend(live.iter().map(|(tid, c)| (*tid, c.hits)));
        }
    }

    /// What each thread's probes counted since `at_last_shed`, now that they read `hits`.
    fn linger(&mut self, tid: u32, at_last_shed: &[u64; gputrace_common::PROBE_SLOTS], hits: &[u64; gputrace_common::PROBE_SLOTS]) {
        let l = self.lingering_hits.entry(tid).or_insert([0; gputrace_common::PROBE_SLOTS]);
        for ((l, &now), &then) in l.iter_mut().zip(hits).zip(at_last_shed) {
            *l = l.saturating_add(now.saturating_sub(then));
        }
    }

    /// Whether the launch probes were off at some point of `[from_ns, to_ns]`. Spans are in
    /// time order and events come roughly so: only the last few are looked at.
    fn launches_were_off(&self, from_ns: u64, to_ns: u64) -> bool {
        self.launches_off.iter().rev().take_while(|&&(_, on)| on > from_ns).any(|&(off, on)| off <= to_ns && from_ns < on)
    }

    /// The launch probes are back on at `at_ns`; `live` are the live threads' counters read
    /// before they were put back (what they counted since the shedding lingered).
    pub fn launch_probes_on(&mut self, at_ns: u64, live: &[(u32, ThreadCounters)]) {
        if let Some(last) = self.launches_off.last_mut().filter(|(_, on)| *on == u64::MAX) {
            last.1 = at_ns.max(last.0);
        }
        for (tid, c) in live {
            if let Some(then) = self.hits_at_last_shed.remove(tid) {
                self.linger(*tid, &then, &c.hits);
            }
        }
    }

    /// The share of `[start_ns, end_ns)` the launch probes were on, when they were off for
    /// part of it; then every thread's launch counts after the first shedding are scaled to
    /// the window, and so are its empty-queue spells (seen only while launches were). None
    /// when they were on throughout.
    ///
    /// A thread's scale is its calls since the first shedding over those made while launches
    /// were seen, where it made enough of both: a loop makes the same calls each step, so
    /// launches per call hold whatever the speed, while the time ratio would carry the traps'
    /// own slowing of the on phases into the estimate (14 % too few launches, measured on the
    /// H200 for a loop of tiny kernels). Other threads are scaled by time since the first
    /// shedding (a thread born or gone meanwhile is taken as living through it).
    pub fn scale_sampled_launches(&mut self, start_ns: u64, end_ns: u64) -> Option<f64> {
        /// Calls seen with launches on, and off, below which the call ratio is too coarse.
        const MIN_ANCHOR_CALLS: u64 = 20;
        let window_ns = end_ns.saturating_sub(start_ns);
        let off_ns: u64 = self.launches_off.iter().map(|&(off, on)| on.min(end_ns).saturating_sub(off.max(start_ns))).sum();
        let first_off = self.launches_off.first().map(|&(off, _)| off.max(start_ns))?;
        if off_ns == 0 || window_ns == 0 {
            return None;
        }
        let since_ns = end_ns.saturating_sub(first_off).max(1);
        let on_since_ns = since_ns.saturating_sub(off_ns).max(1);
        let calls_exact = self.calls_off.is_empty();
        let level = if calls_exact { gputrace_common::Shed::Launches } else { gputrace_common::Shed::LaunchesAndCalls };
        let mut sampled = [false; gputrace_common::PROBE_SLOTS];
        for p in gputrace_common::PROBES {
            sampled[p.id as usize] = level.takes(p);
        }
        // Threads that ended while the probes were off, and every thread when the window
        // ended so: their last hits since the shedding lingered too.
        let open: Vec<(u32, [u64; gputrace_common::PROBE_SLOTS])> = std::mem::take(&mut self.hits_at_last_shed).into_iter().collect();
        for (tid, then) in open {
            if let Some(hits) = self.threads.get(&tid).map(|t| t.hits) {
                self.linger(tid, &then, &hits);
            }
        }
        for (tid, t) in &mut self.threads {
            let calls_on = t.calls_seen.saturating_sub(t.calls_while_launches_off);
            // Calls anchor the scale only where they were all seen: with their probes off
            // too, those of the off phases are the few the kernel had not taken out yet.
            let anchored = calls_exact && calls_on >= MIN_ANCHOR_CALLS && t.calls_while_launches_off >= MIN_ANCHOR_CALLS;
            let (part, whole) = if anchored {
                (calls_on, t.calls_seen)
            } else {
                (on_since_ns, since_ns)
            };
            let before = self.hits_at_first_shed.get(tid).copied().unwrap_or([0; gputrace_common::PROBE_SLOTS]);
            let lingering = self.lingering_hits.get(tid).copied().unwrap_or([0; gputrace_common::PROBE_SLOTS]);
            t.launch_sampling = Some(threads::LaunchSampling { sampled, before, lingering, part, whole });
            let scale = whole as f64 / part as f64;
            let (idle_before, periods_before) = self.spells_at_first_shed.get(tid).copied().unwrap_or_default();
            let after = |now: u64, before: u64| before.min(now) + (now.saturating_sub(before) as f64 * scale).round() as u64;
            t.queue_idle_ns = after(t.queue_idle_ns, idle_before).min(window_ns);
            t.idle_periods = after(t.idle_periods, periods_before);
        }
        Some(1.0 - off_ns as f64 / window_ns as f64)
    }

    /// A synchronous scalar read (a native `cudaMemcpy` of a loss to the host) drains the
    /// queue as `.item()`'s async copy and sync do: a sync, and host-sync's, whatever memory
    /// it lands in (pinning 4 bytes is no fix). Its time stays the copy's in the account;
    /// only the count is the sync's.
    fn synchronous_scalar_read(&mut self, tid: u32, pid: u32, duration: u64) {
        self.thread(tid, pid).syncs += 1;
        let d = self.copies.dir_mut(Direction::DeviceToHost);
        d.scalar_reads += 1;
        d.scalar_read_wait_ns += duration;
    }

    fn thread(&mut self, tid: u32, pid: u32) -> &mut ThreadStats {
        self.threads.entry(tid).or_insert_with(|| ThreadStats::new(pid))
    }

    fn apply_call(&mut self, spec: &ProbeSpec, call: &CallEvent, host: &mut dyn HostMemory) {
        let duration = call.header.ts_ns.saturating_sub(call.start_ns);
        let (tid, pid) = (call.header.tid, call.header.tgid);
        // Calls are counted whatever the budget does: how many came since it first took the
        // launch probes off, and how many while they were off, per thread, is what scales its
        // launch count (`scale_sampled_launches`).
        if self.launches_off.first().is_some_and(|&(off, _)| call.header.ts_ns >= off) {
            let off = self.launches_were_off(call.header.ts_ns, call.header.ts_ns);
            let t = self.thread(tid, pid);
            t.calls_seen += 1;
            t.calls_while_launches_off += u64::from(off);
        }
        if matches!(spec.family, Family::Copy | Family::Sync | Family::Memset) {
            self.blocks.work(pid, call.header.ts_ns);
        }
        match spec.family {
            Family::Copy => {
                let (dir, class) = self.copies.record(spec, call, duration, &self.allocs, &self.host_pins, host);
                let bytes = spec.size_arg.map_or(0, |i| call.args[usize::from(i)]);
                if dir == Direction::DeviceToHost {
                    self.d2h_bursts.copy(tid, call.start_ns, call.header.ts_ns, bytes, class == Some(CopyClass::Pageable));
                }
                let t = self.thread(tid, pid);
                t.copies += 1;
                t.copy_ns += duration;
                let to_or_from_device = matches!(dir, Direction::HostToDevice | Direction::DeviceToHost);
                if class == Some(CopyClass::Pageable) {
                    t.pageable_copy_cost_ns += duration.min(cost::transfer_ns(bytes, cost::PAGEABLE_BYTES_PER_S));
                } else if spec.sync_api && to_or_from_device {
                    t.sync_copy_cost_ns += duration.min(cost::transfer_ns(bytes, cost::PINNED_BYTES_PER_S));
                }
                // A copy that drained the queue needs no later sync to be waited for. Async
                // copies in one direction before a sync add up (a batch and its labels).
                let drained = drains_queue_after(spec.id, &call.args);
                t.last_async_copy = if drained {
                    None
                } else {
                    match t.last_async_copy {
                        Some((d, before)) if d == dir => Some((dir, before + bytes)),
                        _ => Some((dir, bytes)),
                    }
                };
                t.markers.record(steps::MarkerKind { probe: spec.id, class: bytes.max(1).ilog2() }, call.header.ts_ns);
                if drained && dir == Direction::DeviceToHost && bytes <= SCALAR_READ_BYTES {
                    self.synchronous_scalar_read(tid, pid, duration);
                }
                if drained {
                    self.collectives.drained(pid, duration);
                }
            }
            Family::Memset => {
                self.memsets.count += 1;
                self.memsets.bytes += spec.size_arg.map_or(0, |i| call.args[usize::from(i)]);
            }
            Family::Sync => {
                self.syncs.count += 1;
                self.syncs.wait_ns += duration;
                self.collectives.drained(pid, duration);
                let e = self.syncs.by_symbol.entry(spec.symbol).or_default();
                e.0 += 1;
                e.1 += duration;
                let t = self.thread(tid, pid);
                t.syncs += 1;
                t.sync_wait_ns += duration;
                let after_copy = t.last_async_copy.take();
                // An async copy then a sync on the same thread is how a copy with
                // non_blocking=False, .cpu() and .item() look at the driver (docs/facts.md).
                let mut marker_class = 0;
                if let Some((dir, bytes)) = after_copy {
                    let d = self.copies.dir_mut(dir);
                    if dir == Direction::DeviceToHost && bytes <= SCALAR_READ_BYTES {
                        d.scalar_reads += 1;
                        d.scalar_read_wait_ns += duration;
                        marker_class = 1;
                    } else {
                        d.then_synced += 1;
                        d.then_synced_wait_ns += duration;
                        let t = self.thread(tid, pid);
                        t.copy_sync_wait_ns += duration;
                        t.copy_wait_transfer_ns += duration.min(cost::transfer_ns(bytes, cost::PINNED_BYTES_PER_S));
                        marker_class = 2 + dir as u32;
                    }
                }
                self.thread(tid, pid).markers.record(steps::MarkerKind { probe: spec.id, class: marker_class }, call.header.ts_ns);
            }
            // Mapping is the caching allocator's work as much as allocating is: time the host
            // spends there is not spent launching.
            Family::Alloc | Family::Free | Family::Map | Family::Unmap => {
                if matches!(spec.family, Family::Map | Family::Unmap) {
                    self.vmm.record(spec, call);
                } else {
                    self.allocs.record(spec, call);
                }
                let t = self.thread(tid, pid);
                t.allocs += 1;
                t.alloc_ns += duration;
            }
            Family::HostPin | Family::HostUnpin => self.host_pins.record(spec, call),
            Family::Context => self.contexts.push(ContextCall::of(spec, call)),
            // Queued like a launch: the host's time inside is the call's own.
            Family::Collective | Family::Comm => self.collectives.record(spec, call, pid),
            Family::Launch | Family::GraphLaunch | Family::Block => {}
        }
        let t = self.thread(tid, pid);
        t.first_ns = if t.first_ns == 0 { call.start_ns } else { t.first_ns.min(call.start_ns) };
        t.last_ns = t.last_ns.max(call.header.ts_ns);
    }

    /// Fold in a thread's kernel counters (when it exited, or at the end of the trace).
    pub fn add_counters(&mut self, tid: u32, counters: &ThreadCounters) {
        let t = self.thread(tid, counters.tgid);
        for (sum, hit) in t.hits.iter_mut().zip(counters.hits.iter()) {
            *sum += hit;
        }
    }

    /// Every process of the traced tree seen: through task events, CUDA calls or the
    /// scheduler (a process that existed before attach has no task event).
    #[must_use]
    pub fn pids(&self) -> std::collections::BTreeSet<u32> {
        self.processes.keys().copied().chain(self.threads.values().map(|t| t.pid)).chain(self.sched.values().map(|s| s.pid)).filter(|&p| p != 0).collect()
    }

    /// Hits per probe id over all threads.
    #[must_use]
    pub fn hits(&self) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for t in self.threads.values() {
            for (id, &n) in t.hits.iter().enumerate() {
                if n > 0 {
                    *out.entry(id as u32).or_default() += n;
                }
            }
        }
        out
    }

    /// The thread that launched the most kernels (the "main" thread of the contract).
    #[must_use]
    pub fn main_thread(&self) -> Option<(u32, &ThreadStats)> {
        Self::busiest(self.threads.iter())
    }

    /// [`Self::main_thread`] among the threads of process `pid`.
    #[must_use]
    pub fn main_thread_of(&self, pid: u32) -> Option<(u32, &ThreadStats)> {
        Self::busiest(self.threads.iter().filter(|(_, t)| t.pid == pid))
    }

    fn busiest<'a>(threads: impl Iterator<Item = (&'a u32, &'a ThreadStats)>) -> Option<(u32, &'a ThreadStats)> {
        threads.max_by_key(|(tid, t)| (t.kernel_launches() + t.graph_launches(), t.syncs, std::cmp::Reverse(**tid))).map(|(tid, t)| (*tid, t))
    }
}
