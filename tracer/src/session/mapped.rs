//! Keeping the probes on the CUDA libraries the traced processes map: at attach, after a
//! `dlopen`, after an `exec`, and forgetting processes that are gone.

use crate::{
    discover::{libraries, process},
    probes::ProbeSet,
};


/// Probe any CUDA driver library a traced process maps that is not probed yet. The process
/// is running traced, so a library newly probed here was mapped unprobed for a while (up to
/// one rescan, or since its exec): calls made then were missed, and the report says so.
pub(super) fn attach_mapped(kernel: &mut ProbeSet, pid: u32) {
    let (drivers, allocators) = libraries::mapped_driver_and_allocators(pid);
    // A library refused for a lasting reason (another user's file, too large) is not parsed
    // again at every rescan.
    let (drivers, allocators): (Vec<_>, Vec<_>) = (
        drivers.into_iter().filter(|l| !kernel.was_refused(l)).collect(),
        allocators.into_iter().filter(|l| !kernel.was_refused(l)).collect(),
    );
    // A caching allocator (`--tensors`) is loaded with the framework (`import torch`), before
    // any CUDA: its blocks handed out before the probes are unknown to the tensor view, which
    // says so (`unknown_frees`), and mapping it does not make the process a CUDA one.
    for lib in allocators.into_iter().filter(|_| crate::probes::allocators_probed()) {
        if let Err(e) = kernel.attach_library(&lib) {
            log::warn!("{e}");
        }
    }
    for lib in drivers {
        let late = match kernel.attach_library(&lib) {
            Ok(true) => {
                log::warn!("process {pid} mapped {} (inode {}) before it was probed; its calls until now were not seen", lib.name, lib.inode);
                true
            }
            Ok(false) => false,
            Err(e) => {
                log::warn!("{e}");
                false
            }
        };
        kernel.note_mapping(&lib, pid, late);
    }
}

/// Probe the driver libraries `pid`'s environment would make it load (not mapped yet, so
/// nothing was missed; a failure is only logged: the rescan will find what it maps).
pub(super) fn attach_predicted(kernel: &mut ProbeSet, pid: u32) {
    for lib in libraries::predicted_for_process(pid) {
        if let Err(e) = kernel.attach_library(&lib) {
            log::info!("predicted library {} of process {pid}: {e}", lib.name);
        }
    }
}

pub(super) fn rescan_libraries(kernel: &mut ProbeSet) {
    for pid in kernel.traced_processes() {
        attach_mapped(kernel, pid);
    }
}

/// Drop processes that are gone without an exit event (tracepoints unavailable).
pub(super) fn reap_gone(kernel: &mut ProbeSet) {
    for pid in kernel.traced_processes() {
        if process::stat(pid).is_none_or(|s| s.state == 'Z' || s.state == 'X') {
            kernel.untrace_process(pid);
        }
    }
}
