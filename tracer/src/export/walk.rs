//! One pass over a recording's frames, decoded into what the exporters draw from. Damaged
//! frames end the walk (what came before is kept, as in `record::replay`); frames of kinds
//! no exporter draws are skipped.

use std::{collections::BTreeMap, io, path::Path};

use gputrace_common::{spec_of, Family, ThreadCounters};

use crate::{
    decode::{decode, Event},
    evidence::snapshot::{Snapshot, ThreadHits},
    gpu::Sample,
    record::{
        format::{kind, Checkpoint, End, GpuSamples, HostAnswer, Trigger},
        reader::Reader,
    },
};

/// One decoded frame.
#[derive(Debug)]
pub enum Item {
    /// A ring-buffer event as the probes wrote it.
    Event(Event),
    /// How a host address was classified while the next event was folded in.
    HostClass(HostAnswer),
    /// A thread that exited: its tid and its last kernel counters.
    ThreadExit(u32, Box<ThreadCounters>),
    /// A checkpoint's (or the end's) snapshot of the kernel counters.
    Checkpoint(Box<Snapshot>),
    /// NVML samples taken since the checkpoint before.
    GpuSamples(Vec<Sample>),
    /// A flight-recorder trigger that fired.
    Trigger(Trigger),
}

/// Hand each frame of the recording at `file` to `each`, in order.
pub fn walk(file: &Path, mut each: impl FnMut(Item) -> io::Result<()>) -> io::Result<()> {
    let mut reader = Reader::open(file).map_err(io::Error::other)?;
    while let Some(Ok(frame)) = reader.next_frame() {
        let item = match frame.kind {
            kind::EVENT => decode(&frame.payload).ok().map(Item::Event),
            kind::HOST_CLASS => HostAnswer::from_bytes(&frame.payload).map(Item::HostClass),
            kind::THREAD_EXIT => crate::record::replay::thread_exit(&frame.payload).map(|(tid, c)| Item::ThreadExit(tid, Box::new(c))),
            kind::CHECKPOINT => serde_json::from_slice::<Checkpoint>(&frame.payload).ok().map(|cp| Item::Checkpoint(Box::new(cp.snapshot))),
            kind::END => serde_json::from_slice::<End>(&frame.payload).ok().map(|end| Item::Checkpoint(Box::new(end.checkpoint.snapshot))),
            kind::GPU_SAMPLES => serde_json::from_slice::<GpuSamples>(&frame.payload).ok().map(Item::GpuSamples),
            kind::TRIGGER => serde_json::from_slice::<Trigger>(&frame.payload).ok().map(Item::Trigger),
            _ => None,
        };
        if let Some(item) = item {
            each(item)?;
        }
    }
    Ok(())
}

/// Kernel and graph launches per process between two checkpoints; `exited` are the threads
/// that exited in between (their last counters came in exit records, not in `now`).
#[must_use]
pub fn launches_since(prev: &Snapshot, now: &Snapshot, exited: &[ThreadHits]) -> BTreeMap<u32, u64> {
    let is_launch = |id: u32| spec_of(id).is_some_and(|p| matches!(p.family, Family::Launch | Family::GraphLaunch));
    // The previous reading by thread, indexed once (a checkpoint may list thousands).
    let before: BTreeMap<u32, &ThreadHits> = prev.threads.iter().map(|t| (t.tid, t)).collect();
    let mut launches: BTreeMap<u32, u64> = BTreeMap::new();
    for t in now.threads.iter().chain(exited) {
        let was = |id: u32| before.get(&t.tid).and_then(|b| b.hits.iter().find(|(i, _)| *i == id)).map_or(0, |(_, n)| *n);
        let added: u64 = t.hits.iter().filter(|(id, _)| is_launch(*id)).map(|&(id, n)| n.saturating_sub(was(id))).sum();
        *launches.entry(t.tgid).or_default() += added;
    }
    launches
}
