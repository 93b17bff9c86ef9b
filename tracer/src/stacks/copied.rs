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
//!   before the call is counted ([`CopiedStacks::alloc_stack`]);
//! - the copy taken at the entry of a sync or device-to-host copy is what the kernel counts
//!   that call's CPU samples and off-CPU spells under (`ThreadCounters::call_stack`), folded as off-CPU
//!   ones are once the thread has a newer such copy (a key folded while its site still
//!   reuses the copy comes back, and is folded again).
//!
//! A copy's translation is kept [`KEEP_TRANSLATION`] after it stops being its thread's
//! latest: the kernel may count under it a little longer (a spell begun before, a sample
//! racing the next entry), and a key folded out of the kernel map can come back.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use gputrace_common::{stack_source, SampleKey, SampleStats, COPIED_STACK_BIT};

use super::unwind::{Regs, Unwinders, Unwound};
use crate::decode::UserStack;

/// How long a copy's translation outlives its being its thread's latest.
const KEEP_TRANSLATION: Duration = Duration::from_secs(30);

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
    /// Stack copies unwound.
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
    /// Copies whose counts are still to come (off-CPU spells, calls' entries, allocations):
    /// their interned id, and when they arrived.
    pending: HashMap<u64, (i64, Instant)>,
    /// Each thread's latest off-CPU copy: the one its next wakeup counts under.
    latest_off_cpu: HashMap<u32, u64>,
    /// Each thread's latest copy at a sync's or blocking copy's entry.
    latest_call: HashMap<u32, u64>,
    /// CPU samples, and off-CPU spells folded out of the kernel map, by interned stack.
    counted: HashMap<SampleKey, SampleStats>,
    /// How the walks went, over the session.
    pub counts: UnwindCounts,
}

impl CopiedStacks {
    /// Unwind one copy and count or remember it by its source. `fp_stack` gives the
    /// frame-pointer stack of the same moment, the fallback where the walk found less.
    pub fn take(&mut self, copy: &UserStack<'_>, fp_stack: impl FnOnce(i64) -> Vec<u64>) {
        let e = &copy.event;
        let mut stack = copy.stack.to_vec();
        // A copy taken at a probed call's first instruction (an allocation's, a sync's) has the
        // return address at `sp`: the walk starts in the caller, so the callee's own unwind
        // information (a driver's may have none) is not needed.
        let at_entry =
            matches!(e.source, stack_source::ALLOC | stack_source::CALL) && e.returns.slots[0] == e.sp && e.returns.values[0] != 0;
        let unwound = match stack.get_mut(8..).filter(|_| at_entry) {
            Some(caller) => {
                let regs = Regs { ip: e.returns.values[0], sp: e.sp + 8, bp: e.bp };
                let mut u = self.unwinders.unwind(e.header.tgid, regs, caller, &e.returns);
                u.ips.insert(0, e.ip);
                u
            }
            None => self.unwinders.unwind(e.header.tgid, Regs { ip: e.ip, sp: e.sp, bp: e.bp }, &mut stack, &e.returns),
        };
        let fp = if unwound.complete || e.fp_stack_id < 0 { Vec::new() } else { fp_stack(e.fp_stack_id) };
        let id = self.intern(unwound, fp);
        match e.source {
            stack_source::CPU => {
                let key = SampleKey { tgid: e.header.tgid, tid: e.header.tid, stack_id: id, probe: e.header.probe, off_cpu: 0, launch_age: e.launch_age };
                self.counted.entry(key).or_default().count += 1;
            }
            stack_source::OFF_CPU => {
                self.pending.insert(e.id, (id, Instant::now()));
                self.latest_off_cpu.insert(e.header.tid, e.id);
            }
            stack_source::CALL => {
                self.pending.insert(e.id, (id, Instant::now()));
                self.latest_call.insert(e.header.tid, e.id);
            }
            stack_source::ALLOC => {
                self.pending.insert(e.id, (id, Instant::now()));
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
        self.pending.remove(&(id as u64)).map_or(-1, |(id, _)| id)
    }

    /// The kernel's samples with copies' ids swapped for their interned stacks, plus those
    /// counted here; keys that become equal are summed.
    #[must_use]
    pub fn samples(&self, kernel: Vec<(SampleKey, SampleStats)>) -> Vec<(SampleKey, SampleStats)> {
        let mut merged: HashMap<SampleKey, SampleStats> = self.counted.clone();
        for (mut key, stats) in kernel {
            if is_copy(key.stack_id) {
                key.stack_id = self.pending.get(&(key.stack_id as u64)).map_or(-1, |&(id, _)| id);
            }
            let m = merged.entry(key).or_default();
            m.count += stats.count;
            m.ns += stats.ns;
        }
        merged.into_iter().collect()
    }

    /// Of the kernel's keys under copies, those under a copy that its thread has replaced
    /// since (off-CPU, or at a call's entry): their counts are final. Returns them, for the
    /// caller to delete from the kernel map, after adding their counts here.
    pub fn fold(&mut self, kernel: &[(SampleKey, SampleStats)]) -> Vec<SampleKey> {
        let mut done = Vec::new();
        for (key, stats) in kernel {
            let copy = key.stack_id as u64;
            if !is_copy(key.stack_id) || self.is_latest(key.tid, copy) {
                continue;
            }
            let Some(&(id, _)) = self.pending.get(&copy) else { continue };
            let m = self.counted.entry(SampleKey { stack_id: id, ..*key }).or_default();
            m.count += stats.count;
            m.ns += stats.ns;
            done.push(*key);
        }
        let latest: std::collections::HashSet<u64> = self.latest_off_cpu.values().chain(self.latest_call.values()).copied().collect();
        self.pending.retain(|copy, (_, at)| latest.contains(copy) || at.elapsed() < KEEP_TRANSLATION);
        done
    }

    /// Whether `copy` is what thread `tid`'s next spell or in-call sample may count under.
    fn is_latest(&self, tid: u32, copy: u64) -> bool {
        self.latest_off_cpu.get(&tid) == Some(&copy) || self.latest_call.get(&tid) == Some(&copy)
    }

    /// Process `pid` exec'd or exited: its modules are another image's, or none.
    pub fn forget(&mut self, pid: u32) {
        self.unwinders.forget(pid);
    }
}

#[cfg(test)]
mod tests {
    use gputrace_common::{EventHeader, UserStackHead, KIND_USER_STACK};

    use super::*;

    /// A copy of source `source` by thread `tid`: registers that unwind to one frame.
    fn take(stacks: &mut CopiedStacks, id: u64, tid: u32, source: u16, ip: u64) {
        let event = UserStackHead {
            header: EventHeader { kind: KIND_USER_STACK, probe: 7, tgid: std::process::id(), tid, ts_ns: 0 },
            id: COPIED_STACK_BIT | id,
            fp_stack_id: -1,
            ip,
            source,
            ..UserStackHead::default()
        };
        stacks.take(&UserStack { event, stack: &[] }, |_| Vec::new());
    }

    fn key(tid: u32, copy: u64, off_cpu: u16) -> SampleKey {
        SampleKey { tgid: std::process::id(), tid, stack_id: (COPIED_STACK_BIT | copy) as i64, probe: 7, off_cpu, launch_age: 0 }
    }

    #[test]
    fn counts_under_a_copy_are_folded_once_its_thread_has_a_newer_one() {
        let mut stacks = CopiedStacks::default();
        take(&mut stacks, 1, 10, stack_source::OFF_CPU, 0x1000);
        take(&mut stacks, 2, 20, stack_source::CALL, 0x2000);
        let kernel = vec![(key(10, 1, 1), SampleStats { count: 2, ns: 50 }), (key(20, 2, 0), SampleStats { count: 3, ns: 0 })];
        assert!(stacks.fold(&kernel).is_empty(), "both copies are their threads' latest");
        // Translated while still in the kernel map.
        let merged = stacks.samples(kernel.clone());
        assert!(merged.iter().all(|(k, _)| is_interned(k.stack_id)), "{merged:?}");
        // Each thread takes a newer copy of the same kind: the older ones' counts are final.
        take(&mut stacks, 3, 10, stack_source::OFF_CPU, 0x1000);
        take(&mut stacks, 4, 20, stack_source::CALL, 0x3000);
        let folded = stacks.fold(&kernel);
        assert_eq!(folded.len(), 2);
        // Gone from the kernel map, still counted, under the stacks they unwound to.
        let merged = stacks.samples(Vec::new());
        let of = |tid: u32| {
            merged.iter().filter(|(k, _)| k.tid == tid).map(|(k, s)| (stacks.ips(k.stack_id), s.count, s.ns)).collect::<Vec<_>>()
        };
        assert_eq!(of(10), [(vec![0x1000], 2, 50)]);
        assert_eq!(of(20), [(vec![0x2000], 3, 0)]);
        // A key that comes back under a folded copy (a spell begun before) still translates.
        assert!(stacks.samples(vec![(key(10, 1, 1), SampleStats { count: 1, ns: 5 })]).iter().all(|(k, _)| is_interned(k.stack_id)));
    }

    #[test]
    fn an_allocations_copy_is_swapped_once_and_equal_stacks_share_an_id() {
        let mut stacks = CopiedStacks::default();
        take(&mut stacks, 5, 10, stack_source::ALLOC, 0x4000);
        take(&mut stacks, 6, 10, stack_source::ALLOC, 0x4000);
        let first = stacks.alloc_stack((COPIED_STACK_BIT | 5) as i64);
        assert!(is_interned(first));
        assert_eq!(stacks.alloc_stack((COPIED_STACK_BIT | 6) as i64), first, "the same stack, the same id");
        assert_eq!(stacks.alloc_stack((COPIED_STACK_BIT | 5) as i64), -1, "swapped once");
        assert_eq!(stacks.alloc_stack(42), 42, "a frame-pointer stack id passes through");
    }
}
