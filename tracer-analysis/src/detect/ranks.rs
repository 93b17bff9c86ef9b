//! Multi-GPU: each rank's NCCL and time, and who waits for whom.
//!
//! Ranks of a data-parallel job run in lockstep: every collective ends only once every rank
//! has reached it. So a step lasts as long as the slowest rank's host phase (everything it
//! does that is not waiting for its GPU) plus the device work, and the other ranks spend the
//! difference waiting after their collectives. Each rank's own time account
//! (`TimeAccount::critical_path_of`) says how long its host phase is and what fills it:
//! - **straggler**: one rank's host phase is longer than the others', and the others wait in
//!   their collectives about that much longer than it does. The rank is named with what its
//!   host phase is (its own verdict): fixing that is the fix, the others' waiting goes with it.
//! - **comm-bound**: the ranks are even, all wait after their collectives, and the bytes the
//!   collectives move over the link NVML describes take most of that wait: the step is bound
//!   by communication, not by a rank nor by compute.

use std::collections::BTreeMap;

use gputrace_common::{nccl::Op, PROBES};

use super::{
    diagnosis::{diagnosis, pct},
    Account,
};
use crate::{
    evidence::{collectives::RankSeen, time_account::TimeAccount, waits::WaitKind, Evidence},
    model::{Diagnosis, DiagnosisId, Nccl, NcclOp, NcclRank, TimeBucket},
};

/// The others must wait at least this share of their time more than the straggler does.
const STRAGGLER_EXCESS_WAIT: f64 = 0.10;
/// ... and the straggler's longer host phase must explain at least this part of that wait:
/// otherwise the others wait for something else (their own GPU, a link).
const STRAGGLER_EXPLAINED: f64 = 0.5;
/// Ranks whose host phases differ by less than this share are even.
const EVEN_HOST_SPREAD: f64 = 0.10;
/// Even ranks that wait at least this share after their collectives...
const COMM_WAIT: f64 = 0.30;
/// ... are comm-bound where moving their bytes over the link takes at least this part of it.
const COMM_EXPLAINED: f64 = 0.5;

/// What one NVLink link carries each way, bytes per second: 25 GB/s for NVLink 2, 3 and 4
/// (NVIDIA's figures); NVLink 5 (Blackwell) carries twice that, so there the transfer is
/// overstated. NVML's link count is read; the rate is assumed, and the evidence says so.
const NVLINK_BYTES_PER_S: f64 = 25e9;

/// One rank as the detectors see it.
struct Rank<'a> {
    pid: u32,
    seen: &'a RankSeen,
    account: Option<TimeAccount>,
    launches: u64,
}

impl Rank<'_> {
    fn share(&self, ns: u64) -> Option<f64> {
        self.account.as_ref().map(|a| a.fraction(ns))
    }

    fn host_share(&self) -> Option<f64> {
        self.account.as_ref().map(|a| 1.0 - a.fraction(a.waiting_on_gpu_ns))
    }

    fn label(&self) -> String {
        match self.seen.rank {
            Some(r) => format!("rank {r} (pid {})", self.pid),
            None => format!("pid {}", self.pid),
        }
    }
}

/// What a rank's account says it mostly does, and that bucket's share: the largest bucket,
/// as the diagnosis it would be alone.
fn verdict_of(a: &TimeAccount) -> (DiagnosisId, f64) {
    let input = a.sleep_split().map_or(0.0, |s| s[WaitKind::ALL.iter().position(|k| *k == WaitKind::InputWorker).unwrap_or(0)]);
    let copies = if a.pageable_staging_ns * 2 >= a.in_copies_ns { DiagnosisId::PageableCopy } else { DiagnosisId::BlockingCopy };
    let candidates = [
        (DiagnosisId::GpuBound, a.waiting_on_gpu_ns),
        (DiagnosisId::HostBound, a.launching_and_host_ns),
        (copies, a.in_copies_ns),
        (DiagnosisId::AllocChurn, a.allocating_ns),
        (DiagnosisId::CpuStarved, a.waiting_for_cpu_ns),
        (DiagnosisId::IoStall, a.io_wait_ns),
        (if input >= 0.5 { DiagnosisId::InputStarved } else { DiagnosisId::HostSleep }, a.sleeping_ns),
    ];
    let (id, ns) = candidates.into_iter().max_by_key(|(_, ns)| *ns).unwrap_or((DiagnosisId::GpuBound, 0));
    (id, a.fraction(ns))
}

/// What fixing a rank's own bottleneck means, in a phrase that names no framework's API (the
/// ranks may be PyTorch's, JAX's or TensorFlow's; tracing the rank alone gives its own fix in
/// its framework's terms).
fn fix_of(id: DiagnosisId) -> &'static str {
    match id {
        DiagnosisId::InputStarved => "feed its input faster (more loader workers, lighter decoding, data read ahead)",
        DiagnosisId::HostBound => "move its host work off the training thread or cut it",
        DiagnosisId::CpuStarved => "give it its CPUs back (other processes, a cgroup limit, thread pinning)",
        DiagnosisId::IoStall => "read its data ahead of the step, off the training thread",
        DiagnosisId::HostSleep => "remove the sleep or wait in its loop",
        DiagnosisId::PageableCopy => "copy from pinned host memory, asynchronously",
        DiagnosisId::BlockingCopy => "make its copies asynchronous",
        DiagnosisId::AllocChurn => "keep its allocator's memory warm (steady shapes, no cache flushes)",
        _ => "find what its host phase is doing",
    }
}

/// Bytes each rank sends over its link for `op` moving `bytes` (each call's buffer as named)
/// among `n` ranks, by the ring algorithms NCCL uses for large messages.
fn wire_bytes(op: Op, bytes: u64, n: u64) -> f64 {
    let n = n.max(1) as f64;
    let b = bytes as f64;
    match op {
        Op::AllReduce => 2.0 * (n - 1.0) / n * b,
        // The count is each rank's part: it receives every other rank's.
        Op::AllGather | Op::ReduceScatter => (n - 1.0) * b,
        Op::Broadcast | Op::Reduce | Op::Send => b,
        // What a rank receives crosses the link the other way: its send is counted.
        Op::Recv => 0.0,
    }
}

/// What the ranks of a multi-GPU job show.
#[derive(Debug)]
pub struct MultiGpu {
    /// The report's `nccl` section.
    pub section: Nccl,
    /// `straggler` or `comm-bound`, where found.
    pub found: Vec<Diagnosis>,
    /// How much longer the slowest other rank's host phase is than the modelled rank's
    /// (`StepModel::rank_lag`), with that rank's label; None where no other rank is longer.
    pub lag: Option<(f64, String)>,
}

/// The `nccl` section, the multi-GPU diagnoses and the ranks' lag behind the slowest; None
/// where no process called NCCL. `modelled`: the process whose critical path the step model
/// is built on.
#[must_use]
pub fn analyze(ev: &Evidence, account: &Account, modelled: Option<u32>, start_ns: u64, end_ns: u64) -> Option<MultiGpu> {
    if !ev.collectives.any() {
        return counted(ev).map(|section| MultiGpu { section, found: Vec::new(), lag: None });
    }
    let ranks: Vec<Rank<'_>> = ev
        .collectives
        .ranks
        .iter()
        .map(|(&pid, seen)| Rank {
            pid,
            seen,
            account: TimeAccount::critical_path_of(ev, pid, start_ns, end_ns),
            launches: ev.threads.values().filter(|t| t.pid == pid).map(|t| t.kernel_launches() + t.graph_launches()).sum(),
        })
        .collect();
    let mut by_op: BTreeMap<String, NcclOp> = BTreeMap::new();
    for r in &ranks {
        for (op, o) in &r.seen.by_op {
            let e = by_op.entry(op.as_str().into()).or_default();
            e.count += o.calls;
            e.bytes = e.bytes.saturating_add(o.bytes);
            e.wait_s += o.wait_ns as f64 / 1e9;
            e.call_s += o.call_ns as f64 / 1e9;
        }
    }
    let env = &ev.rank_env;
    let mut table: Vec<NcclRank> = ranks
        .iter()
        .map(|r| {
            let verdict = r.account.as_ref().map(verdict_of);
            let placed = env.get(&r.pid);
            NcclRank {
                pid: r.pid,
                rank: r.seen.rank,
                world_size: r.seen.nranks,
                local_rank: placed.and_then(|p| p.local_rank),
                gpu: placed.and_then(crate::evidence::RankEnv::gpu),
                calls: r.seen.calls(),
                bytes: r.seen.by_op.values().map(|o| o.bytes).sum(),
                launches: r.launches,
                wait_share: r.share(r.seen.wait_ns()),
                in_calls_share: r.share(r.seen.call_ns()),
                host_share: r.host_share(),
                verdict: verdict.map(|v| v.0),
                verdict_share: verdict.map(|v| v.1),
            }
        })
        .collect();
    table.sort_by_key(|r| (r.rank.unwrap_or(u64::MAX), r.pid));
    let section = Nccl {
        calls: ranks.iter().map(|r| r.seen.calls()).sum(),
        wait_s: ranks.iter().map(|r| r.seen.wait_ns()).sum::<u64>() as f64 / 1e9,
        by_op,
        ranks: table,
        counted_only: false,
    };
    let timed = timed(&ranks);
    let found = straggler(&timed).or_else(|| comm_bound(&timed, account));
    Some(MultiGpu { section, found: found.into_iter().collect(), lag: modelled.and_then(|pid| lag_behind(&timed, pid)) })
}

/// The `nccl` section from the probes' hit counters alone, where no call was recorded (return
/// probes off): calls by kind and by process, nothing the call records would say. None where
/// no collective was counted either.
fn counted(ev: &Evidence) -> Option<Nccl> {
    let mut by_op: BTreeMap<String, NcclOp> = BTreeMap::new();
    let mut by_pid: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for t in ev.threads.values() {
        let calls: u64 = PROBES
            .iter()
            .filter_map(|spec| Some((spec.nccl?.op, t.hits.get(spec.id as usize).copied().filter(|&n| n > 0)?)))
            .map(|(op, n)| {
                by_op.entry(op.as_str().into()).or_default().count += n;
                n
            })
            .sum();
        let e = by_pid.entry(t.pid).or_default();
        e.0 += calls;
        e.1 += t.kernel_launches() + t.graph_launches();
    }
    by_pid.retain(|_, (calls, _)| *calls > 0);
    if by_pid.is_empty() {
        return None;
    }
    let env = &ev.rank_env;
    let ranks = by_pid
        .into_iter()
        .map(|(pid, (calls, launches))| {
            let placed = env.get(&pid);
            NcclRank {
                pid,
                rank: None,
                world_size: None,
                local_rank: placed.and_then(|p| p.local_rank),
                gpu: placed.and_then(crate::evidence::RankEnv::gpu),
                calls,
                bytes: 0,
                launches,
                wait_share: None,
                in_calls_share: None,
                host_share: None,
                verdict: None,
                verdict_share: None,
            }
        })
        .collect();
    Some(Nccl { calls: by_op.values().map(|o| o.count).sum(), wait_s: 0.0, by_op, ranks, counted_only: true })
}

/// How much longer than rank `pid`'s host phase the longest other rank's is (a share of the
/// window), with that rank's label; None where none is longer or `pid` is no rank.
fn lag_behind(timed: &[Timed<'_, '_>], pid: u32) -> Option<(f64, String)> {
    let own = timed.iter().find(|t| t.0.pid == pid)?.1;
    let (slowest, host, _) = timed.iter().filter(|t| t.0.pid != pid).max_by(|a, b| a.1.total_cmp(&b.1))?;
    (*host > own).then(|| (host - own, slowest.label()))
}

/// A rank that has a time account, with its host phase's share and its share waiting after
/// collectives.
type Timed<'a, 'b> = (&'a Rank<'b>, f64, f64);

/// The ranks that have a time account (see [`Timed`]).
fn timed<'a, 'b>(ranks: &'a [Rank<'b>]) -> Vec<Timed<'a, 'b>> {
    ranks.iter().filter_map(|r| Some((r, r.host_share()?, r.share(r.seen.wait_ns())?))).collect()
}

/// One rank's host phase longer than the others', the others waiting for it (module docs).
fn straggler(timed: &[Timed<'_, '_>]) -> Option<Diagnosis> {
    if timed.len() < 2 {
        return None;
    }
    let (slow, slow_host, slow_wait) = *timed.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    let others: Vec<&Timed<'_, '_>> = timed.iter().filter(|t| t.0.pid != slow.pid).collect();
    let mean = |f: fn(&Timed<'_, '_>) -> f64| others.iter().map(|t| f(t)).sum::<f64>() / others.len() as f64;
    let (others_host, others_wait) = (mean(|t| t.1), mean(|t| t.2));
    let excess = others_wait - slow_wait;
    let longer = slow_host - others_host;
    if excess < STRAGGLER_EXCESS_WAIT || longer < STRAGGLER_EXPLAINED * excess {
        return None;
    }
    // Fixing the straggler gives back what its longer host phase makes the others wait, no
    // more: a wait beyond it is for something else.
    let impact = excess.min(longer);
    let (cause, cause_share) = slow.account.as_ref().map(verdict_of)?;
    let mut evidence = vec![format!(
        "{}: host phase {} of its time, {} waiting after collectives; the other ranks: host phase {}, waiting {}",
        slow.label(),
        pct(slow_host),
        pct(slow_wait),
        pct(others_host),
        pct(others_wait)
    )];
    evidence.push(format!("{}'s own time: mostly {} ({} of it)", slow.label(), cause.as_str(), pct(cause_share)));
    evidence.extend(others.iter().map(|t| format!("{} waits {} of its time after its collectives", t.0.label(), pct(t.2))));
    let fix = format!(
        "{} sets the pace: {}. The other ranks then stop waiting for it in their collectives; look at it alone with `gputrace attach --pid {}`.",
        slow.label(),
        fix_of(cause),
        slow.pid
    );
    Some(diagnosis(
        DiagnosisId::Straggler,
        TimeBucket::WaitingOnGpu,
        impact,
        format!("{} is a straggler ({}): the other ranks wait {} of their time in collectives for it", slow.label(), cause.as_str(), pct(impact)),
        evidence,
        &fix,
    ))
}

/// Even ranks that all wait after their collectives, the wait mostly their bytes on the link.
fn comm_bound(timed: &[Timed<'_, '_>], account: &Account) -> Option<Diagnosis> {
    let hosts = timed.iter().map(|t| t.1);
    let spread = hosts.clone().fold(f64::MIN, f64::max) - hosts.fold(f64::MAX, f64::min);
    let wait = timed.iter().map(|t| t.2).sum::<f64>() / timed.len().max(1) as f64;
    // One rank alone may be waiting for a rank not traced here: even ranks take two.
    if timed.len() < 2 || spread > EVEN_HOST_SPREAD || wait < COMM_WAIT {
        return None;
    }
    // Ranks on one host talk over NVLink where the GPU has active links, else over PCIe.
    let (bus, link) = match account.nvlinks {
        Some(n) if n > 0 => (f64::from(n) * NVLINK_BYTES_PER_S, format!("{n} NVLink links (NVML), at 25 GB/s each assumed")),
        _ => (account.bus_bytes_per_s?, "the PCIe link (NVML)".to_owned()),
    };
    // What one rank's collectives take on its link, as a share of its time.
    let transfer = timed
        .iter()
        .filter_map(|(r, _, _)| {
            let n = r.seen.nranks?;
            let secs = r.seen.by_op.iter().map(|(op, o)| wire_bytes(*op, o.bytes, n)).sum::<f64>() / bus;
            r.account.as_ref().map(|a| secs * 1e9 / a.window_ns.max(1) as f64)
        })
        .fold(0.0, f64::max);
    if transfer < COMM_EXPLAINED * wait {
        return None;
    }
    let impact = transfer.min(wait);
    let evidence = vec![
        format!("every rank waits after its collectives: {} of its time on average; their host phases are even (within {})", pct(wait), pct(spread)),
        format!("the bytes their collectives move over {link}, {:.1} GB/s, take {} of a rank's time", bus / 1e9, pct(transfer)),
    ];
    Some(diagnosis(
        DiagnosisId::CommBound,
        TimeBucket::WaitingOnGpu,
        impact,
        format!("communication bounds the step: collectives keep every rank waiting {} of its time", pct(impact)),
        evidence,
        "Overlap the collectives with compute (DDP's bucket_cap_mb, gradient accumulation with no_sync() between steps), move fewer bytes (bf16 or compressed gradients, ZeRO/FSDP sharding), or use a faster interconnect (NVLink rather than PCIe).",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_moves_what_each_kind_of_collective_needs() {
        assert!((wire_bytes(Op::AllReduce, 1000, 2) - 1000.0).abs() < 1e-9);
        assert!((wire_bytes(Op::AllReduce, 1000, 4) - 1500.0).abs() < 1e-9);
        assert!((wire_bytes(Op::AllGather, 1000, 4) - 3000.0).abs() < 1e-9);
        assert!((wire_bytes(Op::Send, 1000, 8) - 1000.0).abs() < 1e-9);
        assert!(wire_bytes(Op::Recv, 1000, 8).abs() < 1e-9, "a send and its recv cross the link once");
        assert!(wire_bytes(Op::AllReduce, 1000, 1).abs() < 1e-9, "a rank alone moves nothing");
    }

    #[test]
    fn a_ranks_verdict_is_its_largest_bucket() {
        let mut a = TimeAccount { window_ns: 100, waiting_on_gpu_ns: 20, launching_and_host_ns: 30, sleeping_ns: 50, ..TimeAccount::default() };
        assert_eq!(verdict_of(&a), (DiagnosisId::HostSleep, 0.5));
        a.sleep_by_kind_ns[0] = 40;
        a.sleep_by_kind_ns[2] = 10;
        assert_eq!(verdict_of(&a).0, DiagnosisId::InputStarved, "woken by its input workers");
        a.waiting_on_gpu_ns = 60;
        assert_eq!(verdict_of(&a), (DiagnosisId::GpuBound, 0.6));
    }
}
