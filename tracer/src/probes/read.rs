//! Reading the maps: the threads' counters and scheduler figures, wakeups, stack samples and
//! stacks, the loss counters, and what the programs and traps cost.

use super::{has_return, return_program, stack_ips, trap_cost, ProbeSet};
use crate::decode::UserStack;
use crate::stacks::copied;
use crate::stacks::copied::UnwindCounts;
use gputrace_common::PROBES;
use gputrace_common::SampleKey;
use gputrace_common::SampleStats;
use gputrace_common::ThreadCounters;
use gputrace_common::ThreadSched;
use gputrace_common::TrapSamples;
use gputrace_common::WakeKey;
use gputrace_common::WakeStats;
use gputrace_common::loss;
use gputrace_common::stack_source;
use std::collections::BTreeMap;

impl ProbeSet {
    /// What a trap costs on this kernel, by the instruction it sits on (`trap_cost`).
    pub fn measure_trap_costs(&mut self) -> std::result::Result<trap_cost::TrapCosts, trap_cost::CalibrationError> {
        trap_cost::calibrate(&mut self.ebpf, &mut self.uprobes)
    }

    /// What our CUDA probes' programs took per run so far, by probe id (entry and return
    /// program; the kernel's own accounting, `run_stats`). Runs in processes we do not trace
    /// stop at the first check, so the mean slightly understates a traced call. Empty where
    /// the accounting is off.
    #[must_use]
    pub fn program_costs(&self) -> BTreeMap<u32, trap_cost::ProgramNs> {
        if self.run_stats.is_none() {
            return BTreeMap::new();
        }
        let per_run = |name: &str| {
            let (ns, runs) = self.uprobes.run_time(&self.ebpf, name)?;
            (runs > 0).then(|| (ns as f64 / runs as f64, runs))
        };
        PROBES
            .iter()
            .filter_map(|spec| {
                let entry = per_run(spec.symbol);
                let ret = has_return(spec).then(|| per_run(&return_program(spec.symbol))).flatten();
                (entry.is_some() || ret.is_some()).then(|| {
                    let (entry_ns, runs) = entry.unwrap_or_default();
                    (spec.id, trap_cost::ProgramNs { entry_ns, return_ns: ret.map_or(0.0, |r| r.0), runs })
                })
            })
            .collect()
    }

    /// One thread's counters and scheduler accounting, looked up by key (a system call
    /// each), for the timeline's marks (`evidence::timeline`); None where it has none.
    #[must_use]
    pub fn thread_now(&self, tid: u32) -> (Option<ThreadCounters>, Option<ThreadSched>) {
        (self.threads.get(&tid, 0).ok(), self.sched.get(&tid, 0).ok())
    }

    /// Counters of every thread the kernel currently holds.
    #[must_use]
    pub fn thread_counters(&self) -> Vec<(u32, ThreadCounters)> {
        self.threads.iter().filter_map(std::result::Result::ok).collect()
    }

    /// Read and delete one exited thread's counters, keeping the map bounded by live threads.
    pub fn take_thread(&mut self, tid: u32) -> Option<ThreadCounters> {
        let value = self.threads.get(&tid, 0).ok()?;
        let _ = self.threads.remove(&tid);
        Some(value)
    }

    /// Each traced thread's CPU samples and those inside a trap, summed: what the probes
    /// cost the job, sampled (`tracer.overhead.sampled`). None where the sampler is not
    /// running.
    /// Only the threads `keep` accepts count.
    #[must_use]
    pub fn trap_sampling_of(&self, keep: impl Fn(u32) -> bool) -> Option<trap_cost::TrapSampling> {
        self.sampler_running.then(|| {
            let kept = self.trap_samples.iter().filter_map(std::result::Result::ok).filter(|(tid, _)| keep(*tid));
            let (samples, in_trap) = kept.fold((0u64, 0u64), |(s, t), (_, v): (u32, TrapSamples)| (s.saturating_add(v.samples), t.saturating_add(v.in_trap)));
            trap_cost::TrapSampling { samples, in_trap, hz: gputrace_common::host::stacks::SAMPLE_HZ }
        })
    }

    /// Scheduler accounting of every traced thread alive now.
    #[must_use]
    pub fn sched_stats(&self) -> Vec<(u32, ThreadSched)> {
        self.sched.iter().filter_map(std::result::Result::ok).collect()
    }

    /// Who took the CPU from traced threads (thread id, times).
    #[must_use]
    pub fn preempted_by(&self) -> Vec<(u32, u64)> {
        self.preempted_by.iter().filter_map(std::result::Result::ok).collect()
    }

    /// Off-CPU time by wakeup kind, cumulative (`WAKES`).
    #[must_use]
    pub fn wakes(&self) -> Vec<(WakeKey, WakeStats)> {
        self.wakes.iter().filter_map(std::result::Result::ok).collect()
    }

    /// The instruction pointers of a waker's kernel stack, innermost first.
    #[must_use]
    pub fn wake_stack(&self, id: i64) -> Vec<u64> {
        stack_ips(&self.wake_stacks, id)
    }

    /// The id of the `THREADS` map, for readers on other threads to open a handle of their own.
    #[must_use]
    pub fn threads_map_id(&self) -> Option<u32> {
        self.threads_id
    }

    /// The id of the `PYTHON_READ` map, for the Python reader to say which processes it reads.
    #[must_use]
    pub fn python_read_map_id(&self) -> Option<u32> {
        self.python_read_id
    }

    /// The id of the `PY_THREADS` map, for the Python reader to tell the block probe where
    /// each thread's state is.
    #[must_use]
    pub fn python_threads_map_id(&self) -> Option<u32> {
        self.python_threads_id
    }

    /// CPU samples and off-CPU spells by user stack, cumulative: the kernel's (`SAMPLES`) and
    /// those of copied stacks, under their interned ids.
    #[must_use]
    pub fn samples(&self) -> Vec<(SampleKey, SampleStats)> {
        self.copied.samples(self.samples.iter().filter_map(std::result::Result::ok).collect())
    }

    /// The instruction pointers of a traced thread's user stack, innermost first.
    #[must_use]
    pub fn user_stack(&self, id: i64) -> Vec<u64> {
        if copied::is_interned(id) {
            return self.copied.ips(id);
        }
        stack_ips(&self.user_stacks, id)
    }

    /// The instruction pointers of a device allocation's user stack (`ALLOC_STACKS`, the id
    /// an allocation call carries, or an interned copied stack), innermost first.
    #[must_use]
    pub fn alloc_stack(&self, id: i64) -> Vec<u64> {
        if copied::is_interned(id) {
            return self.copied.ips(id);
        }
        stack_ips(&self.alloc_stacks, id)
    }

    /// Unwind a stack the kernel copied, and count or remember it (`stacks::copied`).
    pub fn take_copied_stack(&mut self, copy: &UserStack<'_>) {
        let maps = if copy.event.source == stack_source::ALLOC { &self.alloc_stacks } else { &self.user_stacks };
        self.copied.take(copy, |id| stack_ips(maps, id));
    }

    /// The stack id an allocation's call record should carry (its copy's swapped for the
    /// interned stack; others unchanged).
    pub fn alloc_stack_id(&mut self, id: i64) -> i64 {
        self.copied.alloc_stack(id)
    }

    /// Move the final counts under replaced copies out of the kernel's `SAMPLES`, which
    /// would otherwise fill with one key per copy; returns the samples as `samples` does,
    /// from the same one reading of the map (each entry read costs two system calls, and a
    /// second pass every 200 ms cost the tracer as much as the unwinding).
    pub fn fold_copied_samples(&mut self) -> Vec<(SampleKey, SampleStats)> {
        let kernel: Vec<(SampleKey, SampleStats)> = self.samples.iter().filter_map(std::result::Result::ok).collect();
        let folded = self.copied.fold(&kernel);
        for key in &folded {
            let _ = self.samples.remove(key);
        }
        let kept = kernel.into_iter().filter(|(k, _)| !folded.contains(k)).collect();
        self.copied.samples(kept)
    }

    /// Process `pid` exec'd (its copied stacks unwind by its new image's files) or exited.
    pub fn forget_unwinding(&mut self, pid: u32) {
        self.copied.forget(pid);
    }

    /// How the copied stacks' walks went.
    #[must_use]
    pub fn unwind_counts(&self) -> UnwindCounts {
        self.copied.counts
    }

    /// Loss counters summed over CPUs, indexed by `gputrace_common::loss`.
    #[must_use]
    pub fn losses(&self) -> [u64; loss::COUNT as usize] {
        let mut out = [0; loss::COUNT as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            if let Ok(values) = self.loss.get(&(i as u32), 0) {
                *slot = values.iter().sum();
            }
        }
        out
    }
}
