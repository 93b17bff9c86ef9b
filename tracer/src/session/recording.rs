//! The recording side of a live session: its start record, its checkpoints each second,
//! and the flight recorder's check that dumps the buffer when a diagnosis fires.

use std::collections::BTreeSet;

use super::{host_and_kernel, snapshots, unix_now_s, Live};
use crate::{
    clock,
    evidence::Evidence,
    gpu::{sampler::Sampler, Sample},
    probes::{trap_cost::TrapCosts, ProbeSet},
    record::{
        format::{GpuStart, Start, Trigger},
        Recorder,
    },
};

/// A recording in progress, with what the session keeps for it.
pub(super) struct Tape {
    pub(super) recorder: Recorder,
    /// NVML samples taken off the sampler at checkpoints (for the live report too).
    pub(super) samples: Vec<Sample>,
    /// A flight recorder writes itself out once when a serious problem shows.
    pub(super) diagnosis_fired: bool,
    /// The traced process and the cores the job may use, as the recording's start says
    /// them: the report of a dump judges with them, and so does the recorder.
    pub(super) target_pid: u32,
    /// See `target_pid`.
    pub(super) cpus: Option<f64>,
}

impl Tape {
    /// Diagnose the window so far as the report does, through the same entry
    /// (`report::analysis::run`, with the same pieces); a serious problem (`Run::serious`: a
    /// `high` verdict, or a `high` memory diagnosis) writes the flight recorder out. At `-v`
    /// the log then lists every diagnosis judged, as JSON, so that a test holds them against
    /// the dump's report.
    pub(super) fn check_diagnosis(&mut self, ev: &Evidence, snapshot: &crate::evidence::snapshot::Snapshot, start_ns: u64, sampler: Option<&Sampler>, probes: (&ProbeSet, Option<&TrapCosts>)) {
        let mut so_far = ev.clone();
        snapshot.apply(&mut so_far, None, &BTreeSet::new());
        let traced: Vec<u32> = so_far.pids().into_iter().chain([self.target_pid]).collect();
        let cx = crate::gpu::Context { start_ns, end_ns: snapshot.at_ns, traced: &traced, ..crate::gpu::Context::default() };
        let devices = sampler.map(|s| crate::gpu::summarize(&s.devices, &self.samples, &cx));
        let (kernel, trap_costs) = probes;
        let libraries = kernel.attached_libraries();
        // Without NVML's holders (known at the end): what the job holds on the device is the
        // report's to say.
        let run = crate::report::analysis::run(&crate::report::analysis::Window {
            evidence: &so_far,
            start_ns,
            end_ns: snapshot.at_ns,
            devices: devices.as_deref(),
            samples: None,
            traced: &traced,
            cpus: self.cpus,
            entry_only: kernel.entry_only,
            libraries: &libraries,
            trap_costs,
        });
        if let Some(d) = run.serious() {
            self.diagnosis_fired = true;
            log::info!("flight recorder: {} fired ({}); writing the buffer out", d.id, d.summary);
            if log::log_enabled!(log::Level::Info) {
                log::info!("flight recorder: judged {}", serde_json::to_string(&run.findings.diagnoses).unwrap_or_default());
            }
            self.recorder.trigger(&Trigger {
                at_ns: snapshot.at_ns,
                reason: "diagnosis".into(),
                diagnosis: Some(d.id.as_str().to_owned()),
                summary: Some(d.summary.clone()),
            });
        }
    }
}

pub(super) fn start_record(kernel: &ProbeSet, command: &str, pid: u32, start_ns: u64, attach_ms: f64, sampler: Option<&Sampler>) -> Start {
    let uname = host_and_kernel();
    Start {
        format: "gputrace.recording/1".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        host: uname.0,
        kernel: uname.1,
        started_unix_s: unix_now_s(),
        start_ns,
        target_pid: pid,
        command: command.into(),
        attach_ms,
        startup: Some(kernel.startup),
        uprobe_links: Some(kernel.uprobe_link_kind()),
        sched_traced: kernel.sched_traced,
        io_traced: kernel.io_traced,
        gpu: sampler.map(|s| GpuStart {
            driver_version: s.driver_version.clone(),
            devices: s.devices.clone(),
            sample_interval_s: s.interval.as_secs_f64(),
        }),
        segment: 0,
        from_session_start: true,
        mode: String::new(),
        cuda_env: crate::model::CudaEnv::default(),
        cpus: None,
        placement: None,
        entry_only: kernel.entry_only,
    }
}

impl Live {
    /// Open the recording and claim its name, before the command runs: a name another
    /// recorder took meanwhile stops the session here, so that no job is traced for a
    /// recording that would be thrown away.
    pub(super) fn begin_recording(&mut self, mut r: Recorder, command: &str, pid: u32, attach_ms: f64, cuda_env: &crate::model::CudaEnv, (cpus, placement): (Option<f64>, Option<&crate::discover::cpus::CpuPlacement>)) -> crate::error::Result<()> {
        let mut start = start_record(&self.kernel, command, pid, self.start_ns, attach_ms, self.sampler.as_ref());
        // The same instant as the live report's `started_at`, so that both reports agree.
        start.started_unix_s = self.started_unix_s;
        start.cuda_env = cuda_env.clone();
        start.cpus = cpus;
        start.placement = placement.cloned();
        r.begin(start);
        r.publish().map_err(|source| crate::error::TraceError::OutputTaken { path: r.path().to_owned(), source })?;
        // The first checkpoint: a baseline for files that do not start with the session.
        let first = self.snapshots.read(&self.kernel, self.start_ns, &self.evidence.allocs, &self.evidence.blocks);
        r.checkpoint(snapshots::checkpoint(first, &self.kernel, &self.evidence, &self.notes, 0), &[]);
        self.tape = Some(Tape { recorder: r, samples: Vec::new(), diagnosis_fired: false, target_pid: pid, cpus });
        Ok(())
    }

    /// Write a recording checkpoint; a flight recorder also diagnoses the window so far.
    pub(super) fn checkpoint(&mut self, diagnose: bool) {
        self.drain();
        let Some(t) = self.tape.as_mut() else { return };
        self.snapshots.learn_processes(self.evidence.processes.keys().copied());
        let snapshot = self.snapshots.read(&self.kernel, clock::monotonic_ns(), &self.evidence.allocs, &self.evidence.blocks);
        let fresh = self.sampler.as_ref().map(Sampler::take_samples).unwrap_or_default();
        t.samples.extend(fresh.iter().cloned());
        let cp = snapshots::checkpoint(snapshot, &self.kernel, &self.evidence, &self.notes, self.host.reads);
        // The checkpoint goes first: a dump that follows must hold the counters up to now.
        t.recorder.checkpoint(cp.clone(), &fresh);
        // The timeline's mark, as the replay takes it from this checkpoint.
        cp.snapshot.mark(&mut self.evidence, None);
        if diagnose && !t.diagnosis_fired {
            let trap_costs = self.budget.as_ref().and_then(|b| b.costs.as_ref());
            t.check_diagnosis(&self.evidence, &cp.snapshot, self.start_ns, self.sampler.as_ref(), (&self.kernel, trap_costs));
        }
    }
}
