//! The NVML sampler's start and end, off the event loop (NVML calls block): where either
//! fails, a note says why and the session goes on without the GPU's view.

use std::time::Duration;

use crate::gpu::sampler::{Finished as GpuSamples, Sampler};


/// Start NVML sampling; where that fails, say why in `notes` and trace without it.
pub(super) async fn start_sampler(nvml_interval: Duration, notes: &mut Vec<String>) -> Option<Sampler> {
    match tokio::task::spawn_blocking(move || Sampler::start(nvml_interval)).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(why)) => {
            let why = why.trace_note();
            log::warn!("{why}");
            notes.push(why);
            None
        }
        Err(e) => {
            notes.push(format!("the NVML sampler failed to start: {e}"));
            None
        }
    }
}

/// Stop NVML sampling and collect the samples for `pids`; failures go to `notes`.
pub(super) async fn finish_sampler(sampler: Sampler, pids: Vec<u32>, notes: &mut Vec<String>) -> Option<GpuSamples> {
    match tokio::task::spawn_blocking(move || sampler.finish(pids)).await {
        Ok(Ok(finished)) => Some(finished),
        Ok(Err(why)) => {
            notes.push(why.trace_note());
            None
        }
        Err(e) => {
            notes.push(format!("the NVML sampler failed: {e}"));
            None
        }
    }
}
