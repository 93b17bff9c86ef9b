//! The parts of NCCL's ABI the kernel side reads: where each collective's arguments are.
//!
//! NCCL's calls take up to eight arguments (`ncclReduce`). On x86-64 the first six integer
//! arguments are in registers and the rest on the stack, above the return address; the entry
//! probe reads each by its position ([`Layout`]) and stores it in the call's argument slots
//! ([`slot`]), so that user space reads every collective alike. Signatures: `nccl.h` of NCCL
//! 2.28, which PyTorch 2.11 loads (docs/facts.md).

/// What a collective does (`crate::ProbeSpec::nccl`), as the report names it.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// `ncclAllReduce`.
    AllReduce = 1,
    /// `ncclAllGather`.
    AllGather = 2,
    /// `ncclReduceScatter`.
    ReduceScatter = 3,
    /// `ncclBroadcast`.
    Broadcast = 4,
    /// `ncclReduce`.
    Reduce = 5,
    /// `ncclSend`.
    Send = 6,
    /// `ncclRecv`.
    Recv = 7,
}

impl Op {
    /// The report's name (docs/contract.md, `nccl.by_op`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AllReduce => "allreduce",
            Self::AllGather => "allgather",
            Self::ReduceScatter => "reducescatter",
            Self::Broadcast => "broadcast",
            Self::Reduce => "reduce",
            Self::Send => "send",
            Self::Recv => "recv",
        }
    }
}

/// Position of an argument the call does not have.
pub const NONE: u8 = u8::MAX;

/// Argument positions (0-based) of one collective.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// What the call does.
    pub op: Op,
    /// Element count as the call gives it: the whole buffer for all-reduce, broadcast,
    /// reduce, send and recv; each rank's part for all-gather (`sendcount`) and
    /// reduce-scatter (`recvcount`).
    pub count: u8,
    /// The element type (`ncclDataType_t`).
    pub datatype: u8,
    /// The reduction, the root or the peer (`NONE` for all-gather).
    pub extra: u8,
    /// The communicator (`ncclComm_t`).
    pub comm: u8,
    /// The CUDA stream the call is queued on.
    pub stream: u8,
}

const fn layout(op: Op, count: u8, datatype: u8, extra: u8, comm: u8, stream: u8) -> Layout {
    Layout { op, count, datatype, extra, comm, stream }
}

/// `ncclAllReduce(send, recv, count, datatype, op, comm, stream)`.
pub const ALL_REDUCE: Layout = layout(Op::AllReduce, 2, 3, 4, 5, 6);
/// `ncclAllGather(send, recv, sendcount, datatype, comm, stream)`.
pub const ALL_GATHER: Layout = layout(Op::AllGather, 2, 3, NONE, 4, 5);
/// `ncclReduceScatter(send, recv, recvcount, datatype, op, comm, stream)`.
pub const REDUCE_SCATTER: Layout = layout(Op::ReduceScatter, 2, 3, 4, 5, 6);
/// `ncclBroadcast(send, recv, count, datatype, root, comm, stream)`.
pub const BROADCAST: Layout = layout(Op::Broadcast, 2, 3, 4, 5, 6);
/// `ncclReduce(send, recv, count, datatype, op, root, comm, stream)`: `extra` is the root.
pub const REDUCE: Layout = layout(Op::Reduce, 2, 3, 5, 6, 7);
/// `ncclSend(send, count, datatype, peer, comm, stream)`.
pub const SEND: Layout = layout(Op::Send, 1, 2, 3, 4, 5);
/// `ncclRecv(recv, count, datatype, peer, comm, stream)`.
pub const RECV: Layout = layout(Op::Recv, 1, 2, 3, 4, 5);

/// Where a collective's entry stores its arguments in the call's slots.
pub mod slot {
    /// Element count (`Layout::count`).
    pub const COUNT: usize = 0;
    /// Element type (`Layout::datatype`).
    pub const DATATYPE: usize = 1;
    /// Reduction, root or peer (`Layout::extra`; 0 where the call has none).
    pub const EXTRA: usize = 2;
    /// Communicator (`Layout::comm`).
    pub const COMM: usize = 3;
    /// Stream (`Layout::stream`).
    pub const STREAM: usize = 4;
}

/// `ncclCommInitRank(comm*, nranks, commId, rank)` and `ncclCommInitRankConfig(…, config)`:
/// the 128-byte `ncclUniqueId` is passed by value on the stack, so `rank` is the third
/// register argument. Their entries save the registers as they are.
pub mod init {
    /// The `ncclComm_t*` the call fills (`crate::ProbeSpec::out_arg`).
    pub const COMM_OUT: usize = 0;
    /// `nranks`: the communicator's number of ranks.
    pub const NRANKS: usize = 1;
    /// `rank`: the caller's rank in it.
    pub const RANK: usize = 2;
}

/// Bytes of one element of `ncclDataType_t` `datatype` (nccl.h: int8, uint8, int32, uint32,
/// int64, uint64, float16, float32, float64, bfloat16, float8 e4m3, float8 e5m2); None for a
/// type this table does not know.
#[must_use]
pub const fn datatype_bytes(datatype: u64) -> Option<u64> {
    match datatype {
        0 | 1 | 10 | 11 => Some(1),
        6 | 9 => Some(2),
        2 | 3 | 7 => Some(4),
        4 | 5 | 8 => Some(8),
        _ => None,
    }
}
