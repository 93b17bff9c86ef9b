//! NCCL as the probes see it, per process (a rank): its communicators, and each kind of
//! collective's calls, bytes, time inside the calls and the waits that followed them.
//!
//! A collective is queued on a stream and returns at once; the host waits for it later, when
//! it synchronizes (or copies to the host, which drains the queue). Without the GPU's own
//! timeline (CUPTI) that wait is the one view of a collective's time the host has: a wait that
//! drains the queue after a collective was queued is charged to the last collective queued
//! before it. It includes the device work queued before that collective too, so it is an upper
//! bound on the collective's own time; across ranks, a rank that waits while another does
//! not is what a straggler looks like (`detect::ranks`).

use std::collections::BTreeMap;

use gputrace_common::{
    nccl::{self, Op},
    CallEvent, Family, ProbeSpec,
};

/// One kind of collective on one rank.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpSeen {
    /// Calls made, failed ones included.
    pub calls: u64,
    /// The calls' count times the datatype's size: each rank's buffer (all-gather's and
    /// reduce-scatter's per-rank part), as the call names it.
    pub bytes: u64,
    /// Calls whose datatype this version does not know (their bytes are not counted).
    pub unknown_datatype: u64,
    /// Host time inside the calls.
    pub call_ns: u64,
    /// Host time in the waits that drained the queue after such a call (module docs).
    pub wait_ns: u64,
}

/// One process's NCCL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankSeen {
    /// From its communicator's set-up (`ncclCommInitRank*`): its rank and the world's size,
    /// and the communicator's handle. The first communicator made is the one kept.
    pub rank: Option<u64>,
    /// The world's size: ranks in that communicator.
    pub nranks: Option<u64>,
    /// The communicator's handle, as its set-up returned it.
    pub comm: Option<u64>,
    /// Communicator set-up calls that succeeded.
    pub comms_made: u64,
    /// `ncclCommDestroy` calls.
    pub comms_destroyed: u64,
    /// `ncclGroupEnd` calls.
    pub group_ends: u64,
    /// Host time inside communicator set-up calls (the ranks meet there).
    pub init_ns: u64,
    /// Each kind of collective's totals.
    pub by_op: BTreeMap<Op, OpSeen>,
    /// The collective queued last since the queue was last drained.
    pending: Option<Op>,
}

impl RankSeen {
    /// Collective calls of every kind.
    #[must_use]
    pub fn calls(&self) -> u64 {
        self.by_op.values().map(|o| o.calls).sum()
    }

    /// Host time in the waits charged to its collectives (module docs), ns.
    #[must_use]
    pub fn wait_ns(&self) -> u64 {
        self.by_op.values().map(|o| o.wait_ns).sum()
    }

    /// Host time inside its collective calls, ns.
    #[must_use]
    pub fn call_ns(&self) -> u64 {
        self.by_op.values().map(|o| o.call_ns).sum()
    }
}

/// Every rank's NCCL, by process id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Collectives {
    /// Each process's NCCL, by pid.
    pub ranks: BTreeMap<u32, RankSeen>,
}

impl Collectives {
    /// Fold in one NCCL call of process `pid` (a collective or a communicator call).
    pub fn record(&mut self, spec: &ProbeSpec, call: &CallEvent, pid: u32) {
        let duration = call.header.ts_ns.saturating_sub(call.start_ns);
        let r = self.ranks.entry(pid).or_default();
        match (spec.family, spec.nccl) {
            (Family::Collective, Some(layout)) => {
                let o = r.by_op.entry(layout.op).or_default();
                o.calls += 1;
                o.call_ns += duration;
                // An int-sized enum: the register's upper half is not the caller's.
                match nccl::datatype_bytes(call.args[nccl::slot::DATATYPE] & 0xffff_ffff) {
                    Some(size) => o.bytes = o.bytes.saturating_add(call.args[nccl::slot::COUNT].saturating_mul(size)),
                    None => o.unknown_datatype += 1,
                }
                // A failed call queued nothing (`ncclResult_t`, int-sized).
                if call.ret as u32 == 0 {
                    r.pending = Some(layout.op);
                }
            }
            (Family::Comm, _) if spec.symbol == "ncclGroupEnd" => r.group_ends += 1,
            (Family::Comm, _) if spec.symbol == "ncclCommDestroy" => r.comms_destroyed += 1,
            (Family::Comm, _) => {
                r.init_ns += duration;
                if call.ret as u32 == 0 {
                    r.comms_made += 1;
                    if r.comm.is_none() {
                        r.rank = Some(call.args[nccl::init::RANK] & 0xffff_ffff);
                        r.nranks = Some(call.args[nccl::init::NRANKS] & 0xffff_ffff);
                        r.comm = Some(call.out);
                    }
                }
            }
            _ => {}
        }
    }

    /// Process `pid` waited `wait_ns` in a call that drained its queue: the wait of the last
    /// collective it queued since the queue was last drained, if any.
    pub fn drained(&mut self, pid: u32, wait_ns: u64) {
        let Some(r) = self.ranks.get_mut(&pid) else { return };
        if let Some(op) = r.pending.take() {
            r.by_op.entry(op).or_default().wait_ns += wait_ns;
        }
    }

    /// Whether any process called NCCL.
    #[must_use]
    pub fn any(&self) -> bool {
        !self.ranks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputrace_common::{spec_of, EventHeader, KIND_CALL};

    fn call(id: u32, pid: u32, start: u64, end: u64, args: [u64; 5], out: u64) -> CallEvent {
        CallEvent { header: EventHeader { kind: KIND_CALL, probe: id, tgid: pid, tid: pid, ts_ns: end }, start_ns: start, args, ret: 0, out }
    }

    #[test]
    fn calls_bytes_and_the_wait_after_the_last_collective_are_per_rank() {
        let mut c = Collectives::default();
        let (init, all_reduce, all_gather) = (spec_of(93).expect("init"), spec_of(85).expect("allreduce"), spec_of(86).expect("allgather"));
        c.record(init, &call(93, 10, 0, 50, [0x1000, 2, 1, 0, 0], 0xc0), 10);
        // 1,000 float32 (7) all-reduced, 10 bf16 (9) gathered, then a 30 µs wait.
        c.record(all_reduce, &call(85, 10, 100, 110, [1000, 7, 0, 0xc0, 0], 0), 10);
        c.record(all_gather, &call(86, 10, 120, 125, [10, 9, 0, 0xc0, 0], 0), 10);
        c.drained(10, 30_000);
        // A wait with nothing queued since is no collective's.
        c.drained(10, 99_000);
        // An unknown datatype is counted, its bytes are not.
        c.record(all_reduce, &call(85, 10, 200, 210, [5, 42, 0, 0xc0, 0], 0), 10);
        let r = &c.ranks[&10];
        assert_eq!((r.rank, r.nranks, r.comm, r.comms_made), (Some(1), Some(2), Some(0xc0), 1));
        assert_eq!(r.by_op[&Op::AllReduce], OpSeen { calls: 2, bytes: 4000, unknown_datatype: 1, call_ns: 20, wait_ns: 0 });
        assert_eq!(r.by_op[&Op::AllGather], OpSeen { calls: 1, bytes: 20, unknown_datatype: 0, call_ns: 5, wait_ns: 30_000 });
        assert_eq!((r.calls(), r.wait_ns(), r.init_ns), (3, 30_000, 50));
        // Another process's drain is its own.
        c.drained(11, 5);
        assert!(!c.ranks.contains_key(&11));
    }
}
