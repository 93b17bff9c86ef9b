//! Classifying host addresses by the traced process's live memory map.

use std::collections::HashMap;

use crate::{
    clock,
    discover::maps::{self, Mapping},
    evidence::{HostClass, HostMemory},
};

/// A cached map is re-read on a miss only if it was read before the call being classified:
/// a map read after the call already shows everything the call could have used, so a miss
/// then means the memory is gone, and re-reading would not help. This bounds reads to one
/// per missed call.
#[derive(Debug, Default)]
pub struct ProcMaps {
    /// Per process: monotonic time of the read, and the mappings.
    cache: HashMap<u32, (u64, Vec<Mapping>)>,
    /// How many times maps were read (the cost of this lookup, for the tracer section).
    pub reads: u64,
}

impl ProcMaps {
    fn load(&mut self, pid: u32) -> &Vec<Mapping> {
        self.reads += 1;
        let read_at = clock::monotonic_ns();
        let mappings = crate::discover::procfs::read_text(format!("/proc/{pid}/maps")).map(|t| maps::parse(&t).0).unwrap_or_default();
        let entry = self.cache.entry(pid).or_default();
        *entry = (read_at, mappings);
        &entry.1
    }

    fn lookup(mappings: &[Mapping], addr: u64) -> Option<&Mapping> {
        mappings.iter().find(|m| m.contains(addr))
    }
}

impl HostMemory for ProcMaps {
    fn classify(&mut self, pid: u32, addr: u64, at_ns: u64) -> HostClass {
        let needs_load = match self.cache.get(&pid) {
            Some((_, mappings)) if Self::lookup(mappings, addr).is_some() => false,
            Some((read_at, _)) => *read_at < at_ns,
            None => true,
        };
        let mappings = if needs_load { self.load(pid) } else { &self.cache[&pid].1 };
        match Self::lookup(mappings, addr) {
            Some(m) if m.looks_pinned() => HostClass::PinnedMapping,
            // UVA device memory shows as mappings of the NVIDIA device files.
            Some(m) if m.path.starts_with("/dev/nvidia") => HostClass::Unmapped,
            Some(_) => HostClass::Pageable,
            None => HostClass::Unmapped,
        }
    }
}
