//! Stacks the kernel copied for unwinding (`UserStackEvent`), turned into the stack ids the
//! rest of the tracer already speaks: each copy is unwound once, as it arrives (its process
//! still mapping the files), and the instruction pointers it unwinds to are interned under an
//! id of their own ([`INTERNED_BIT`]), so that equal stacks share an id as the kernel's
//! stack-trace maps would have them share one.
//!
//! Each source counts under the copy's id differently:
//! - a CPU sample is counted here (the kernel counted nothing for it);
//! - an off-CPU spell is counted by the kernel in `SAMPLES` under the copy's id
//!   ([`gputrace_common::COPIED_STACK_BIT`]); [`CopiedStacks::fold`] moves those counts here
//!   under the interned id once the thread has a newer copy (no wakeup counts under the old
//!   one any more), keeping the kernel map from filling with one key per copy;
//! - an allocation carries the copy's id in its call record, swapped for the interned id
//!   before the call is counted ([`CopiedStacks::alloc_stack`]).

use std::collections::HashMap;

use gputrace_common::{stack_source, SampleKey, SampleStats, COPIED_STACK_BIT};

use super::unwind::{Regs, Unwinders, Unwound};
use crate::decode::UserStack;

/// Set on interned stack ids: above the kernel's stack-trace ids (below 2^32), apart from
/// copies' ids (`COPIED_STACK_BIT`, 1 << 62).
pub const INTERNED_BIT: i64 = 1 << 61;

/// Whether a stack id names a kernel copy not yet swapped for its interned stack.
#[must_use]
pub fn is_copy(id: i64) -> bool {
    id >= 0 && id as u64 & COPIED_STACK_BIT != 0
}

/// Whether a stack id is an interned unwound stack.
#[must_use]
pub fn is_interned(id: i64) -> bool {
    id >= 0 && id & INTERNED_BIT != 0 && !is_copy(id)
}

/// How the copies' walks went (logged at the end, and measured by the benchmark).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindCounts {
    pub copies: u64,
    /// Walks that reached the stack's root.
    pub complete: u64,
    /// Stacks for which the frame-pointer stack was kept, being longer than the walk.
    pub frame_pointer_kept: u64,
}

/// The interned stacks and what is counted under them.
#[derive(Debug, Default)]
pub struct CopiedStacks {
    unwinders: Unwinders,
    ids: HashMap<Vec<u64>, i64>,
    stacks: Vec<Vec<u64>>,
    /// Copies whose counts are still to come (off-CPU spells, allocations): their interned id.
    pending: HashMap<u64, i64>,
    /// Each thread's latest off-CPU copy: the one its next wakeup counts under.
    latest_off_cpu: HashMap<u32, u64>,
    /// CPU samples, and off-CPU spells folded out of the kernel map, by interned stack.
    counted: HashMap<SampleKey, SampleStats>,
    pub counts: UnwindCounts,
}

impl CopiedStacks {
    /// Unwind one copy and count or remember it by its source. `fp_stack` gives the
    /// frame-pointer stack of the same moment, the fallback where the walk found less.
    pub fn take(&mut self, copy: &UserStack<'_>, fp_stack: impl FnOnce(i64) -> Vec<u64>) {
        let e = &copy.event;
        let mut stack = copy.stack.to_vec();
        let unwound = self.unwinders.unwind(e.header.tgid, Regs { ip: e.ip, sp: e.sp, bp: e.bp }, &mut stack, &e.returns);
        let fp = if unwound.complete || e.fp_stack_id < 0 { Vec::new() } else { fp_stack(e.fp_stack_id) };
        let id = self.intern(unwound, fp);
        match e.source {
            stack_source::CPU => {
                let key = SampleKey { tgid: e.header.tgid, tid: e.header.tid, stack_id: id, probe: e.header.probe, off_cpu: 0 };
                self.counted.entry(key).or_default().count += 1;
            }
            stack_source::OFF_CPU => {
                self.pending.insert(e.id, id);
                self.latest_off_cpu.insert(e.header.tid, e.id);
            }
            stack_source::ALLOC => {
                self.pending.insert(e.id, id);
            }
            _ => {}
        }
    }

    /// The walk, or the frame-pointer stack where it is longer (the walk was cut early, at a
    /// module without unwind information), interned.
    fn intern(&mut self, unwound: Unwound, fp: Vec<u64>) -> i64 {
        self.counts.copies += 1;
        self.counts.complete += u64::from(unwound.complete);
        let ips = if fp.len() > unwound.ips.len() {
            self.counts.frame_pointer_kept += 1;
            fp
        } else {
            unwound.ips
        };
        if let Some(&id) = self.ids.get(&ips) {
            return id;
        }
        let id = INTERNED_BIT | self.stacks.len() as i64;
        self.stacks.push(ips.clone());
        self.ids.insert(ips, id);
        id
    }

    /// The instruction pointers of interned stack `id`, innermost first.
    #[must_use]
    pub fn ips(&self, id: i64) -> Vec<u64> {
        usize::try_from(id & !INTERNED_BIT).ok().and_then(|i| self.stacks.get(i)).cloned().unwrap_or_default()
    }

    /// The stack id an allocation's call record should carry: the interned stack of its copy
    /// (taken at the call's entry, so already unwound), or −1 where the copy was lost. Ids
    /// that are not copies pass through.
    pub fn alloc_stack(&mut self, id: i64) -> i64 {
        if !is_copy(id) {
            return id;
        }
        self.pending.remove(&(id as u64)).unwrap_or(-1)
    }

    /// The kernel's samples with copies' ids swapped for their interned stacks, plus those
    /// counted here; keys that become equal are summed.
    #[must_use]
    pub fn samples(&self, kernel: Vec<(SampleKey, SampleStats)>) -> Vec<(SampleKey, SampleStats)> {
        let mut merged: HashMap<SampleKey, SampleStats> = self.counted.clone();
        for (mut key, stats) in kernel {
            if is_copy(key.stack_id) {
                key.stack_id = self.pending.get(&(key.stack_id as u64)).copied().unwrap_or(-1);
            }
            let m = merged.entry(key).or_default();
            m.count += stats.count;
            m.ns += stats.ns;
        }
        merged.into_iter().collect()
    }

    /// Of the kernel's off-CPU keys, those under a copy that its thread has replaced since:
    /// their counts are final. Returns them, for the caller to delete from the kernel map,
    /// after adding their counts here.
    pub fn fold(&mut self, kernel: &[(SampleKey, SampleStats)]) -> Vec<SampleKey> {
        let mut done = Vec::new();
        for (key, stats) in kernel {
            if !is_copy(key.stack_id) || self.latest_off_cpu.get(&key.tid) == Some(&(key.stack_id as u64)) {
                continue;
            }
            let Some(&id) = self.pending.get(&(key.stack_id as u64)) else { continue };
            let m = self.counted.entry(SampleKey { stack_id: id, ..*key }).or_default();
            m.count += stats.count;
            m.ns += stats.ns;
            done.push(*key);
        }
        for key in &done {
            self.pending.remove(&(key.stack_id as u64));
        }
        done
    }

    /// Process `pid` exec'd or exited: its modules are another image's, or none.
    pub fn forget(&mut self, pid: u32) {
        self.unwinders.forget(pid);
    }
}
