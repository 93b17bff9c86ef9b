//! From evidence to diagnoses. Each detector is a pure function of the evidence and the time
//! account that returns a diagnosis with its impact (the fraction of the window's wall time it
//! costs), the evidence in numbers, and the fix. Thresholds are named constants with their
//! origin. NVML, where present, is the referee between "the GPU waits for the host" and
//! "the GPU is busy".

pub mod account;
pub mod definition;
pub mod diagnoses;
mod diagnosis;
pub mod framework;
mod gpu_idle;
pub mod memory_view;
pub mod ranks;
mod rank;
pub mod code_sites;
pub mod startup;
pub mod rhythm;
pub mod thresholds;
pub mod whatif;

pub use account::Account;
pub use definition::Bearing;

use crate::severity::Severity;
use crate::{
    evidence::{time_account::TimeAccount, Evidence},
    model::{Diagnosis, DiagnosisId, GpuDevice, GpuIdle, Steps},
};

/// What the detectors look at.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// The window: where it starts (monotonic ns, as the events' times) and how long it is.
    pub start_ns: u64,
    /// Its length, ns.
    pub window_ns: u64,
    /// What the probes and the samplers collected over the window.
    pub evidence: &'a Evidence,
    /// NVML's devices and their figures over the window; None where NVML is unavailable.
    pub gpu: Option<&'a [GpuDevice]>,
    /// The cores the job may use, if known (work moved off the training thread runs there).
    pub cpus: Option<f64>,
    /// What the probes added to each thread's time, ns (`report::overhead::per_thread_ns`);
    /// None where unknown. The step model takes it out of the host's time.
    pub tracer_ns: Option<&'a std::collections::HashMap<u32, f64>>,
}

/// Impact at or above which a problem is `high`, `medium`, `low`.
pub const HIGH: f64 = 0.25;
/// Impact at or above which a problem is `medium`.
pub const MEDIUM: f64 = 0.10;
/// Impact at or above which a problem is `low`; below it, `info`.
pub const LOW: f64 = 0.03;

/// The severity of a diagnosis whose impact (a share of the window, 0..1) is `impact`.
#[must_use]
pub fn severity(impact: f64) -> Severity {
    if impact >= HIGH {
        Severity::High
    } else if impact >= MEDIUM {
        Severity::Medium
    } else if impact >= LOW {
        Severity::Low
    } else {
        Severity::Info
    }
}

/// Everything the analysis concludes.
#[derive(Debug)]
pub struct Findings {
    /// The diagnosis the report leads with (see [`analyze`]).
    pub verdict: DiagnosisId,
    /// Largest impact first, each with its saving.
    pub diagnoses: Vec<Diagnosis>,
    /// The time account the impacts are parts of.
    pub time: Option<TimeAccount>,
    /// How long the GPU was known to be idle, and what NVML says; None when no thread launched
    /// kernels.
    pub gpu_idle: Option<GpuIdle>,
    /// The job's training steps, if its critical path keeps a steady rhythm; None otherwise.
    pub steps: Option<Steps>,
    /// The step model the savings were simulated on.
    pub step_model: Option<crate::model::StepModel>,
    /// The ranks' NCCL (`nccl`); None without it.
    pub nccl: Option<crate::model::Nccl>,
}

/// Every finding of a window, as the report and the flight recorder both take them (issue 59:
/// one entry): the time analysis ([`analyze`]), then the memory view with its diagnoses after
/// the time ones (they cost memory, not time, and leave the verdict alone), then each fix in
/// the framework's terms.
#[derive(Debug)]
pub struct Run {
    /// The verdict, every diagnosis (memory ones from `memory_from` on), the time account.
    pub findings: Findings,
    /// Where the memory diagnoses begin in `findings.diagnoses`.
    pub memory_from: usize,
    /// The `memory` section.
    pub memory: crate::model::Memory,
    /// The framework the stacks show, whose terms the fixes are said in.
    pub framework: Option<framework::Framework>,
}

/// See [`Run`].
#[must_use]
pub fn run(time: &Inputs<'_>, memory: memory_view::Inputs<'_>) -> Run {
    let mut findings = analyze(time);
    let memory_from = findings.diagnoses.len();
    let memory = memory_view::analyze(memory, &mut findings);
    let framework = framework::of(&time.evidence.stacks);
    framework::speak(&mut findings.diagnoses, framework);
    Run { findings, memory_from, memory, framework }
}

impl Run {
    /// The serious problem a flight recorder writes itself out for: the verdict where it is
    /// `high` (and not the GPU doing its work), else a `high` memory diagnosis (an
    /// out-of-memory: the incident one most wants kept).
    #[must_use]
    pub fn serious(&self) -> Option<&Diagnosis> {
        let high = |d: &&Diagnosis| d.severity == crate::severity::Severity::High;
        let verdict = self.findings.diagnoses.iter().filter(high).find(|d| d.id == self.findings.verdict && d.id != DiagnosisId::GpuBound);
        verdict.or_else(|| self.findings.diagnoses.get(self.memory_from..)?.iter().find(high))
    }
}

/// The diagnoses ranked by what their fix buys (`whatif`: each fix simulated on the step
/// model; a diagnosis's impact is the share of the time its fix gives back); the verdict:
/// the problem whose fix buys the most if it buys at least `medium`, else `gpu-bound` when
/// the GPU keeps the host waiting, else the largest found; the time account, GPU idle time,
/// steps and the step model.
#[must_use]
pub fn analyze(inputs: &Inputs<'_>) -> Findings {
    let account = Account::new(inputs.evidence, inputs.start_ns, inputs.window_ns, inputs.gpu);
    let mut found: Vec<Diagnosis> = diagnoses::time_rules()
        .filter_map(|(id, rule)| rule(inputs.evidence, &account).inspect(|d| debug_assert_eq!(d.id, id, "the rule listed for {id} found {}", d.id)))
        .collect();
    // The step model is built on the critical path around the job's main thread.
    let modelled = inputs.evidence.main_thread().map(|(_, t)| t.pid);
    let multi_gpu = ranks::analyze(inputs.evidence, &account, modelled, inputs.start_ns, inputs.start_ns.saturating_add(inputs.window_ns));
    let (nccl, rank_lag) = match multi_gpu {
        Some(m) => {
            found.extend(m.found);
            (Some(m.section), m.lag)
        }
        None => (None, None),
    };
    found.sort_by(|a, b| b.impact.total_cmp(&a.impact));
    let threads = account.time.as_ref().map(|t| t.threads.clone()).unwrap_or_default();
    diagnoses::checkpoint_stall::drop_pageable_of_checkpoints(&mut found, inputs.evidence);
    code_sites::attach(&mut found, inputs.evidence, &threads);
    let steps = account.time.as_ref().and_then(|t| rhythm::find(inputs.evidence, t));
    let mut model = whatif::StepModel::build(inputs.evidence, &account, steps.as_ref().map(|s| s.per_step.launches), inputs.cpus, inputs.tracer_ns);
    if let (Some(m), Some((lag, slowest))) = (model.as_mut(), rank_lag) {
        m.rank_lag = lag;
        m.notes.push(format!(
            "the ranks run in lockstep and {slowest}'s host phase is {} of the window longer than this rank's: a fix on every rank leaves that, so it bounds every fix but the straggler's",
            diagnosis::pct(lag)
        ));
    }
    let sm_over_util = match (account.sm_active, account.gpu_util) {
        (Some(sm), Some(u)) if u > 0.0 => Some(sm / u),
        _ => None,
    };
    let step_model = model.as_ref().map(|m| {
        let pair = rank::apply(&mut found, m, steps.as_ref().map(|s| s.per_second), account.window_s, sm_over_util);
        report_of(m, pair.as_ref(), steps.as_ref(), account.window_s)
    });
    let problems = || found.iter().filter(|d| d.id != DiagnosisId::GpuBound);
    let saw_cuda = inputs.evidence.threads.values().any(|t| t.hits.iter().any(|&h| h > 0));
    let verdict = if let Some(top) = problems().find(|d| d.impact >= MEDIUM) {
        top.id
    } else if let Some(g) = found.iter().find(|d| d.id == DiagnosisId::GpuBound) {
        g.id
    } else if let Some(top) = problems().find(|d| d.impact >= LOW) {
        top.id
    } else if saw_cuda {
        DiagnosisId::NoBottleneckFound
    } else {
        DiagnosisId::NoCudaWork
    };
    let gpu_idle = gpu_idle::gpu_idle(&account);
    Findings { verdict, diagnoses: found, time: account.time, gpu_idle, steps, step_model, nccl }
}

/// The step model as the report shows it.
fn report_of(m: &whatif::StepModel, pair: Option<&whatif::BestPair>, steps: Option<&Steps>, window_s: f64) -> crate::model::StepModel {
    let segments = [("idle", &m.idle), ("overlap", &m.overlap), ("serial", &m.serial)]
        .into_iter()
        .flat_map(|(phase, s)| s.named().into_iter().filter(|(_, f)| *f > 0.0).map(move |(name, fraction)| crate::model::StepSegment { name: name.into(), phase: phase.into(), fraction }))
        .collect();
    let per_s = steps.map(|s| s.per_second);
    crate::model::StepModel {
        basis: if steps.is_some() { "step" } else { "window" }.into(),
        time_s: steps.map_or(window_s, |s| s.step_time_s.mean),
        segments,
        gpu_wait: m.gpu_wait,
        gpu_busy: m.gpu.values(),
        gpu_source: m.gpu_source.map_or("structure", whatif::model::GpuSource::as_str).into(),
        launching: m.dispatch.share.values(),
        launching_source: m.dispatch.source.as_str().into(),
        cpus: m.cpus,
        job_cpu: m.job_cpu,
        best_pair: pair.map(|p| crate::model::FixPair {
            ids: p.ids,
            speedup: p.speedup.point,
            range: [p.speedup.lo, p.speedup.hi],
            bound: p.speedup.bound.as_str().into(),
            steps_per_s_after: per_s.map(|r| r * p.speedup.point),
        }),
        notes: m.notes.clone(),
    }
}

#[cfg(test)]
mod tests;
