//! Where device memory is asked for: the user stack of every allocation call (the kernel
//! takes it at the call's entry, `slot::ALLOC_STACK`), symbolized while its process lives,
//! and for CPython targets the Python line read at once after the call returned
//! (`python.rs`). A memory diagnosis names the code whose allocations grow or fail.

use serde::{Deserialize, Serialize};

use super::{
    sites::{is_usable, rank, Site, Unit},
    Frame, Origin,
};

/// Device allocations charged to one stack of one thread, cumulative since the session began.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocStack {
    /// The allocating process.
    pub pid: u32,
    /// The allocating thread.
    pub tid: u32,
    /// Native frames (taken at the call's entry) or Python ones (read after it returned).
    pub origin: Origin,
    /// Innermost first.
    pub frames: Vec<Frame>,
    /// Allocations that succeeded, and their bytes.
    pub count: u64,
    /// Bytes those allocations got.
    pub bytes: u64,
    /// Allocations that failed, and the bytes they asked for.
    pub failed: u64,
    /// Bytes the failed allocations asked for.
    pub failed_bytes: u64,
}

impl AllocStack {
    /// Whether `other` is a later reading of the same thread and stack.
    #[must_use]
    pub fn same_key(&self, other: &Self) -> bool {
        self.pid == other.pid && self.tid == other.tid && self.origin == other.origin && self.frames == other.frames
    }

    /// Add `other`'s counts.
    pub fn add(&mut self, other: &Self) {
        self.count = self.count.saturating_add(other.count);
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.failed = self.failed.saturating_add(other.failed);
        self.failed_bytes = self.failed_bytes.saturating_add(other.failed_bytes);
    }

    /// These counts less `before`'s (a segment of a recording).
    #[must_use]
    pub fn since(&self, before: &Self) -> Self {
        Self {
            count: self.count.saturating_sub(before.count),
            bytes: self.bytes.saturating_sub(before.bytes),
            failed: self.failed.saturating_sub(before.failed),
            failed_bytes: self.failed_bytes.saturating_sub(before.failed_bytes),
            ..self.clone()
        }
    }
}

/// What a memory diagnosis weighs sites by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    /// Bytes allocated (memory that grows or is held).
    Allocated,
    /// Bytes asked for by failed allocations.
    Failed,
}

/// The `n` sites that allocated (or failed to allocate) the most bytes. Where a process has
/// Python stacks of that weight they are used, not its native ones: the interpreter's native
/// frames name no user code. (Python reads are a sample, at most 100 a second of each kind:
/// their bytes are those of the allocations read.) Where it has none, its native stacks
/// speak for it (a failure whose Python read was lost: the process died at once).
#[must_use]
pub fn top(stacks: &[AllocStack], weight: Weight, n: usize) -> Vec<Site> {
    let bytes = |s: &AllocStack| match weight {
        Weight::Allocated => s.bytes,
        Weight::Failed => s.failed_bytes,
    };
    let python: std::collections::BTreeSet<u32> = stacks.iter().filter(|s| s.origin == Origin::Python && bytes(s) > 0).map(|s| s.pid).collect();
    let chosen = stacks.iter().filter(|s| (s.origin == Origin::Python || !python.contains(&s.pid)) && is_usable(&s.frames));
    let counted = |s: &AllocStack| match weight {
        Weight::Allocated => s.count,
        Weight::Failed => s.failed,
    };
    rank(chosen.map(|s| (s.frames.as_slice(), bytes(s), counted(s))), Unit::Bytes, n)
}

/// A caching allocator's blocks still live at a moment, charged to the Python line that
/// asked for them (read soon after each block's allocation; a sample, at most ~100 blocks a
/// second). What a line keeps, not what made the allocator grow: a leak's line holds blocks
/// step after step.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSite {
    /// The process holding the blocks.
    pub pid: u32,
    /// Innermost first.
    pub frames: Vec<Frame>,
    /// Blocks of this line still live.
    pub live_blocks: u64,
    /// Bytes of those blocks.
    pub live_bytes: u64,
}

/// The `n` lines that hold the most live bytes.
#[must_use]
pub fn top_live(sites: &[BlockSite], n: usize) -> Vec<Site> {
    rank(sites.iter().filter(|s| is_usable(&s.frames)).map(|s| (s.frames.as_slice(), s.live_bytes, s.live_blocks)), Unit::Bytes, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_that_keeps_the_most_live_bytes_comes_first() {
        let line = |function: &str, live_bytes: u64| BlockSite {
            pid: 1,
            frames: vec![Frame { function: function.into(), file: Some("/w/train.py".into()), line: Some(3), module: None }],
            live_blocks: 1,
            live_bytes,
        };
        let sites = top_live(&[line("forward", 10), line("keep_outputs", 300), line("forward", 20)], 2);
        assert_eq!(sites.iter().map(|s| s.function.as_str()).collect::<Vec<_>>(), ["keep_outputs", "forward"]);
        assert_eq!(sites[1].bytes, Some(30));
    }

    fn at(origin: Origin, pid: u32, function: &str, file: &str, bytes: u64, failed_bytes: u64) -> AllocStack {
        AllocStack {
            pid,
            tid: pid,
            origin,
            frames: vec![Frame { function: function.into(), file: Some(file.into()), line: Some(7), module: None }],
            count: 1,
            bytes,
            failed: u64::from(failed_bytes > 0),
            failed_bytes,
        }
    }

    #[test]
    fn sites_rank_by_bytes_and_python_replaces_native() {
        let stacks = vec![
            at(Origin::Native, 1, "malloc_segment", "/src/alloc.cpp", 900, 0),
            at(Origin::Python, 1, "forward", "/w/train.py", 300, 0),
            at(Origin::Python, 1, "keep", "/w/train.py", 100, 50),
            at(Origin::Native, 2, "grow", "/w/job.c", 40, 0),
        ];
        let sites = top(&stacks, Weight::Allocated, 3);
        assert_eq!(sites.iter().map(|s| s.function.as_str()).collect::<Vec<_>>(), ["forward", "keep", "grow"]);
        assert_eq!(sites[0].bytes, Some(300));
        assert!((sites[0].share - 300.0 / 440.0).abs() < 1e-9);
        let failed = top(&stacks, Weight::Failed, 3);
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0].function, "keep");
        // A failure only the native stack saw still has its site.
        let native_only = vec![at(Origin::Native, 1, "grow_segment", "/src/alloc.cpp", 0, 64), at(Origin::Python, 1, "forward", "/w/train.py", 300, 0)];
        assert_eq!(top(&native_only, Weight::Failed, 3)[0].function, "grow_segment");
    }

    #[test]
    fn a_segment_subtracts_the_baseline() {
        let a = at(Origin::Native, 1, "f", "/w/a.c", 100, 10);
        let mut b = a.clone();
        b.add(&a);
        let d = b.since(&a);
        assert_eq!((d.count, d.bytes, d.failed, d.failed_bytes), (1, 100, 1, 10));
        assert!(d.same_key(&a));
    }
}
