//! Attaching the CPU sampler (`tracer-ebpf/src/probes/sample.rs`): one software perf event
//! per online CPU, firing every 1/99 s of CPU time, whoever runs there. The program keeps
//! to traced threads, so untraced CPUs' samples cost one hash lookup each.

use aya::{
    programs::{
        perf_event::{PerfEventConfig, PerfEventLinkId, PerfEventScope, SamplePolicy, SoftwareEvent},
        PerfEvent,
    },
    util::online_cpus,
    Ebpf,
};
use gputrace_common::host::stacks::SAMPLE_HZ;

/// Set by `--no-stacks`: take no stacks at all (no stacks in CPU samples, no off-CPU stacks,
/// no Python).
static NO_STACKS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turn stack sampling off for this process's sessions.
pub fn disable() {
    NO_STACKS.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether stacks are wanted (not `--no-stacks`).
#[must_use]
pub fn wanted() -> bool {
    !NO_STACKS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The period of the CPU-clock event in nanoseconds of CPU time: each sample stands for this
/// much time on a CPU.
pub const PERIOD_NS: u64 = 1_000_000_000 / SAMPLE_HZ;

/// Load the sampler and attach it to every online CPU. Errors are sentences for the report.
pub fn attach(ebpf: &mut Ebpf) -> Result<Vec<PerfEventLinkId>, String> {
    let program: &mut PerfEvent =
        ebpf.program_mut("sample_cpu").and_then(|p| p.try_into().ok()).ok_or("the sampler program is missing from the eBPF object")?;
    program.load().map_err(|e| format!("the CPU sampler could not be loaded: {e}"))?;
    let cpus = online_cpus().map_err(|(what, e)| format!("the online CPUs could not be read ({what}: {e})"))?;
    let mut links = Vec::with_capacity(cpus.len());
    for cpu in cpus {
        let link = program
            .attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Period(PERIOD_NS),
                false,
            )
            .map_err(|e| format!("the CPU sampler could not be attached to CPU {cpu}: {e}"))?;
        links.push(link);
    }
    Ok(links)
}

/// [`attach`], or a note saying what is missing when it fails (the session goes on):
/// `stacks_wanted`, whether it was to sample host code too.
pub fn attach_or_note(ebpf: &mut Ebpf, stacks_wanted: bool, notes: &mut Vec<String>) -> bool {
    match attach(ebpf) {
        Ok(_links) => true, // owned by the program, detached when the `Ebpf` is dropped
        Err(why) => {
            log::warn!("{why}");
            let lost = if stacks_wanted { "host code is not sampled (diagnoses[].sites shows off-CPU sites only), and " } else { "" };
            notes.push(format!("{why}: {lost}the overhead estimate rests on the trap costs measured apart (tracer.overhead.sampled is null)"));
            false
        }
    }
}
