//! The one entry to the analysis for everything that judges a window (issue 59): the report
//! at the end of a session or of a recording, and the flight recorder at each checkpoint of
//! a live one. Both hand over the same pieces, so that a dump's report says what the recorder
//! fired on: the evidence, the window, NVML's view, the cores the job may use, and the
//! probes' own cost per thread (`overhead::per_thread_ns`), taken out of the step model.

use crate::{
    detect,
    evidence::Evidence,
    gpu::sampler::Finished as GpuSamples,
    model::GpuDevice,
    probes::{trap_cost::TrapCosts, AttachedLibrary},
};

/// A window to judge.
#[derive(Clone, Copy, Debug)]
pub struct Window<'a> {
    /// What the probes and samplers collected.
    pub evidence: &'a Evidence,
    /// Its start and end, monotonic ns.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
    /// NVML's devices and their figures over the window; None without NVML.
    pub devices: Option<&'a [GpuDevice]>,
    /// NVML's samples, with the processes holding memory (the memory view's); None where
    /// not known.
    pub samples: Option<&'a GpuSamples>,
    /// The traced processes.
    pub traced: &'a [u32],
    /// The cores the job may use, if known.
    pub cpus: Option<f64>,
    /// Whether the launch probes traced entries only (their cost per call).
    pub entry_only: bool,
    /// The libraries probed (the costs of their probes).
    pub libraries: &'a [AttachedLibrary],
    /// What a trap cost here, where measured.
    pub trap_costs: Option<&'a TrapCosts>,
}

/// Every finding of `w` (`detect::run`).
#[must_use]
pub fn run(w: &Window<'_>) -> detect::Run {
    let tracer_ns = super::overhead::per_thread_ns(w.evidence, w.entry_only, w.libraries, w.trap_costs);
    let time = detect::Inputs {
        start_ns: w.start_ns,
        window_ns: w.end_ns.saturating_sub(w.start_ns),
        evidence: w.evidence,
        gpu: w.devices,
        cpus: w.cpus,
        tracer_ns: Some(&tracer_ns),
    };
    // The memory view's step figures come from the time analysis.
    let memory = detect::memory_view::Inputs {
        evidence: w.evidence,
        start_ns: w.start_ns,
        end_ns: w.end_ns,
        traced: w.traced,
        gpu: w.samples,
        steps_per_s: None,
        step_times: None,
        loop_start_ns: None,
    };
    detect::run(&time, memory)
}
