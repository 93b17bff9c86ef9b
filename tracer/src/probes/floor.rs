//! The bare counting uprobe used as the benchmark floor (see `tracer-ebpf/src/probes/bench.rs`).

use std::path::Path;

use aya::{
    maps::{MapData, PerCpuArray},
    programs::{uprobe::UProbeScope, UProbe},
    Ebpf,
};

use super::{map_error, OBJECT};
use gputrace_common::PROBES;

use crate::{
    discover::symbols,
    error::{Result, TraceError},
};

/// A bare uprobe on one function, for every process; removed when dropped.
pub struct Floor {
    _ebpf: Ebpf,
    hits: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for Floor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Floor").finish_non_exhaustive()
    }
}

impl Floor {
    /// A bare counting uprobe on `symbol` of `library`, for every process: the least any
    /// uprobe can cost there, which the benchmark compares gputrace's probes with.
    pub fn attach(library: &Path, symbol: &str) -> Result<Self> {
        if OBJECT.is_empty() {
            return Err(TraceError::NoEbpfObject);
        }
        crate::preflight::check()?;
        let mut ebpf = Ebpf::load(OBJECT).map_err(crate::preflight::classify_load_error)?;
        let offset = *symbols::file_offsets(library, &[symbol])?.get(symbol).ok_or_else(|| TraceError::NoSymbol { symbol: symbol.into(), library: library.into() })?;
        let prog: &mut UProbe =
            ebpf.program_mut("uprobe_floor").and_then(|p| p.try_into().ok()).ok_or_else(|| TraceError::Program { name: "uprobe_floor".into() })?;
        prog.load().map_err(|source| TraceError::LoadProgram { program: "uprobe_floor".into(), source: Box::new(source) })?;
        prog.attach([offset], library, UProbeScope::AllProcesses).map_err(|source| TraceError::AttachUprobe {
            symbol: symbol.into(),
            library: library.into(),
            source: Box::new(source.into()),
        })?;
        let hits = PerCpuArray::try_from(ebpf.take_map("FLOOR_HITS").ok_or_else(|| map_error("FLOOR_HITS"))?)
            .map_err(|_| map_error("FLOOR_HITS"))?;
        Ok(Self { _ebpf: ebpf, hits })
    }

    /// Bare programs on every trap gputrace would set in `library`: an entry on each probed
    /// symbol it exports, and a return where gputrace has one (all but launches). The floor
    /// of the per-call cost benchmark (`validation/gpu/call_cost.sh`): the same traps, none
    /// of the work. Returns the floor and how many symbols it covers.
    pub fn attach_like_gputrace(library: &Path) -> Result<(Self, usize)> {
        if OBJECT.is_empty() {
            return Err(TraceError::NoEbpfObject);
        }
        crate::preflight::check()?;
        let mut ebpf = Ebpf::load(OBJECT).map_err(crate::preflight::classify_load_error)?;
        let offsets = super::probed_offsets(library)?;
        let mut covered = 0;
        for (program, returns) in [("uprobe_floor", false), ("uretprobe_floor", true)] {
            let prog: &mut UProbe =
                ebpf.program_mut(program).and_then(|p| p.try_into().ok()).ok_or_else(|| TraceError::Program { name: program.into() })?;
            prog.load().map_err(|source| TraceError::LoadProgram { program: program.into(), source: Box::new(source) })?;
            for spec in PROBES {
                let Some(&offset) = offsets.get(spec.symbol) else { continue };
                if returns && !super::has_return(spec) {
                    continue;
                }
                prog.attach([offset], library, UProbeScope::AllProcesses).map_err(|source| TraceError::AttachUprobe {
                    symbol: spec.symbol.into(),
                    library: library.into(),
                    source: Box::new(source.into()),
                })?;
                covered += usize::from(!returns);
            }
        }
        let hits = PerCpuArray::try_from(ebpf.take_map("FLOOR_HITS").ok_or_else(|| map_error("FLOOR_HITS"))?)
            .map_err(|_| map_error("FLOOR_HITS"))?;
        Ok((Self { _ebpf: ebpf, hits }, covered))
    }

    /// Hits so far, all CPUs.
    #[must_use]
    pub fn hits(&self) -> u64 {
        self.hits.get(&0, 0).map_or(0, |v| v.iter().sum())
    }
}
