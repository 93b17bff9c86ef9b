//! Detaching: the tracepoints first (off the job's threads), then the uprobes with the set.

use super::{detach_timed, take_tracepoint_links, ProbeSet};

impl ProbeSet {
    /// Detach everything, in parallel: multi-uprobe links then wait for their grace periods
    /// together (docs/facts.md: 63 perf-event uprobes took 6.8 s to close, one after another
    /// under the kernel's event mutex; one multi link, 24 ms).
    pub fn detach(mut self) {
        let uprobes = self.uprobes.take_all(&mut self.ebpf);
        let tracepoints = take_tracepoint_links(&mut self.ebpf, std::mem::take(&mut self.tracepoint_links));
        std::thread::scope(|scope| {
            scope.spawn(|| detach_timed("uprobe", uprobes));
            // Empty when `start_detaching_tracepoints` already took them.
            if !tracepoints.is_empty() {
                scope.spawn(|| detach_timed("tracepoint", tracepoints));
            }
        });
        if let Some(closing) = self.tracepoints_closing.take() {
            let _ = closing.join();
        }
    }

    /// Start closing the tracepoints, once the window's last reading is taken, so that the
    /// scheduler's probes stop costing the machine while the report is made (raw tracepoints
    /// close in milliseconds: `TRACEPOINT_GROUPS`). The maps stay readable; `detach` waits for
    /// the thread.
    pub fn start_detaching_tracepoints(&mut self) {
        let links = take_tracepoint_links(&mut self.ebpf, std::mem::take(&mut self.tracepoint_links));
        if links.is_empty() || self.tracepoints_closing.is_some() {
            return;
        }
        self.tracepoints_closing = std::thread::Builder::new().name("gputrace-detach".into()).spawn(move || detach_timed("tracepoint", links)).ok();
    }
}
