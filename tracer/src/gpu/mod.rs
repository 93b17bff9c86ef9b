//! The GPU's own view through NVML: a snapshot of each device and of the memory the traced
//! processes hold. NVML is loaded at run time, so machines without a GPU (our CI) just get
//! `None` and one note. Calls run on a blocking thread under a timeout: a hung driver must
//! not hang the tracer.

use std::time::Duration;

use nvml_wrapper::Nvml;

use crate::report::model::{Gpu, GpuDevice};

const NVML_TIMEOUT: Duration = Duration::from_secs(3);

/// Snapshot the GPUs; `Err` says why there is no GPU view.
pub async fn snapshot(pids: Vec<u32>) -> Result<Gpu, String> {
    match tokio::time::timeout(NVML_TIMEOUT, tokio::task::spawn_blocking(move || read(&pids))).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(format!("NVML query failed: {e}")),
        Err(_) => Err(format!("NVML did not answer within {NVML_TIMEOUT:?}")),
    }
}

fn read(pids: &[u32]) -> Result<Gpu, String> {
    let nvml = Nvml::init().map_err(|e| format!("NVML is unavailable ({e}); GPU-side figures are omitted"))?;
    let count = nvml.device_count().map_err(|e| e.to_string())?;
    let mut devices = Vec::new();
    for index in 0..count {
        let Ok(dev) = nvml.device_by_index(index) else { continue };
        let mem = dev.memory_info().ok();
        let target_memory_bytes = dev.running_compute_processes().ok().map(|procs| {
            procs
                .iter()
                .filter(|p| pids.contains(&p.pid))
                .map(|p| match p.used_gpu_memory {
                    nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => b,
                    nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => 0,
                })
                .sum()
        });
        devices.push(GpuDevice {
            index,
            uuid: dev.uuid().unwrap_or_default(),
            name: dev.name().unwrap_or_default(),
            memory_used_bytes: mem.as_ref().map_or(0, |m| m.used),
            memory_total_bytes: mem.as_ref().map_or(0, |m| m.total),
            utilization_gpu_pct: dev.utilization_rates().ok().map(|u| u.gpu),
            target_memory_bytes,
        });
    }
    Ok(Gpu { available: true, driver_version: nvml.sys_driver_version().ok(), devices })
}
