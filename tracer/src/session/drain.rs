//! Reading the ring buffer into the evidence: each record decoded, host addresses of copies
//! classified while their process lives, and each record and answer taped for a recording.

use super::{
    mapped::{attach_mapped, attach_predicted},
    recording::Tape,
};
use gputrace_common::{cuda::slot, spec_of, Family};

use crate::{
    collect::{host_memory::ProcMaps, ring::RingReader},
    decode::{encode, py_frames, user_stack, Event},
    discover::process,
    evidence::{Evidence, HostClass, HostMemory, RankEnv},
    probes::ProbeSet,
    record::format::HostAnswer,
    stacks::{copied::is_copy, python_reader::PythonSampler},
};


/// `python`: told of each device allocation as it comes, to read its Python line. Returns
/// the processes that exec'd: what was read of their memory maps before is another image's.
pub(super) fn drain_ring(
    ring: &mut RingReader,
    kernel: &mut ProbeSet,
    evidence: &mut Evidence,
    host: &mut ProcMaps,
    mut tape: Option<&mut Tape>,
    python: Option<&PythonSampler>,
) -> Vec<u32> {
    let mut execs = Vec::new();
    ring.drain(|bytes, decoded| {
        // Copied stacks are unwound now, while their process maps its files, and never taped:
        // what they unwind to reaches a recording through its checkpoints' stacks.
        if let Some(copy) = user_stack(bytes) {
            match copy {
                Ok(copy) => kernel.take_copied_stack(&copy),
                Err(e) => {
                    log::debug!("undecodable record: {e}");
                    evidence.undecodable();
                }
            }
            return;
        }
        // Python frames read in a probe: made into lines now, while their process lives
        // (their addresses mean nothing later), and never taped.
        if let Some(frames) = py_frames(bytes) {
            match frames {
                Ok(frames) => {
                    if let Some(py) = python {
                        py.probe_frames(frames);
                    }
                }
                Err(e) => {
                    log::debug!("undecodable record: {e}");
                    evidence.undecodable();
                }
            }
            return;
        }
        let mut event = match decoded {
            Ok(event) => event,
            Err(e) => {
                log::debug!("undecodable record: {e}");
                evidence.undecodable();
                if let Some(t) = tape.as_deref_mut() {
                    t.recorder.event(bytes);
                }
                return;
            }
        };
        // An allocation's copied stack, swapped for the stack it unwound to (taped so too).
        let swapped = swap_alloc_stack(&mut event, kernel).then(|| encode(&event));
        let bytes = swapped.as_deref().unwrap_or(bytes);
        let pid = event.header().tgid;
        // Enrichment: who owns the process, read while it is still alive.
        evidence.learn_uid(pid, || process::uid(pid));
        match tape.as_deref_mut() {
            Some(t) => {
                // The host-memory answers are recorded before their event, so a replay has
                // them at hand when it folds the event in.
                let mut answers = Answering { inner: host, answers: Vec::new() };
                evidence.apply(&event, &mut answers);
                for a in answers.answers {
                    t.recorder.host_answer(a);
                }
                t.recorder.event(bytes);
            }
            None => evidence.apply(&event, host),
        }
        match event {
            Event::Call(c) => {
                let spec = spec_of(c.header.probe);
                // A rank's placement, read from its environment while it lives (not taped: a
                // recording's report leaves it out).
                if spec.is_some_and(|s| matches!(s.family, Family::Collective | Family::Comm)) {
                    evidence.learn_rank_env(pid, || std::fs::read(format!("/proc/{pid}/environ")).map(|e| RankEnv::parse(&e)).unwrap_or_default());
                }
                if let (Some(py), Some(spec)) = (python, spec) {
                    let bytes = spec.size_arg.map_or(0, |i| c.args[usize::from(i)]);
                    match spec.family {
                        Family::Alloc => py.allocated(c.header.tgid, c.header.tid, bytes, c.ret != 0, c.header.ts_ns, None),
                        // A block handed out: the allocator's report of a positive size.
                        Family::Block if (c.args[1] as i64) > 0 && c.args[0] != 0 => {
                            py.allocated(c.header.tgid, c.header.tid, bytes, false, c.header.ts_ns, Some(c.args[0]));
                        }
                        _ => {}
                    }
                }
            }
            Event::TaskExit(e) => {
                // The thread is gone: fold its counters in and free its map slot.
                if let Some(c) = kernel.take_thread(e.header.tid) {
                    evidence.add_counters(e.header.tid, &c);
                    if let Some(t) = tape.as_deref_mut() {
                        t.recorder.thread_exit(e.header.tid, &c);
                    }
                }
                if e.header.tid == e.header.tgid {
                    kernel.process_exiting(e.header.tgid);
                    // Its copied stacks all came before this record: its modules can go.
                    kernel.forget_unwinding(e.header.tgid);
                }
            }
            // The leader's final switch, after its exit: the process is gone.
            Event::SchedFinal(e) if e.header.tid == e.header.tgid => kernel.untrace_exited(Some(e.header.tgid)),
            Event::TaskExec(e) => {
                // The new image has not loaded its libraries yet: probe the driver it would
                // load now (its first CUDA calls are seen), then anything already mapped.
                attach_predicted(kernel, e.header.tgid);
                attach_mapped(kernel, e.header.tgid);
                execs.push(e.header.tgid);
            }
            _ => {}
        }
    });
    kernel.untrace_exited(None);
    execs
}

/// Swap the copied stack id an allocation call carries (`slot::ALLOC_STACK`) for its
/// unwound stack's id; true if it did.
fn swap_alloc_stack(event: &mut Event, kernel: &mut ProbeSet) -> bool {
    let Event::Call(c) = event else { return false };
    if !spec_of(c.header.probe).is_some_and(|s| s.family == Family::Alloc) {
        return false;
    }
    let id = c.args[slot::ALLOC_STACK] as i64;
    if !is_copy(id) {
        return false;
    }
    c.args[slot::ALLOC_STACK] = kernel.alloc_stack_id(id) as u64;
    true
}

/// The live host-memory lookup, noting each answer for the recording.
pub(super) struct Answering<'a> {
    inner: &'a mut ProcMaps,
    answers: Vec<HostAnswer>,
}

impl HostMemory for Answering<'_> {
    fn classify(&mut self, pid: u32, addr: u64, at_ns: u64) -> HostClass {
        let class = self.inner.classify(pid, addr, at_ns);
        self.answers.push(HostAnswer { pid, class: crate::record::replay::class_number(class), addr, at_ns });
        class
    }
}
