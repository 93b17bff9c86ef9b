//! The NVML source: what one tick reads of one device. Fast reads every tick (utilization and
//! the driver's high-resolution utilization samples, memory, power, SM clock, throttle
//! reasons, the PCIe link's generation and width, Hopper GPM SM activity, occupancy and
//! tensor activity); slow reads every
//! [`super::source::SLOW_EVERY`] ticks (PCIe throughput, which NVML measures over ~20 ms
//! inside the call, and per-process utilization, which enumerates processes).

use nvml_wrapper::{
    enum_wrappers::device::{Clock, PcieUtilCounter, Sampling},
    enums::{device::UsedGpuMemory, gpm::GpmMetricId},
    gpm, Device, GpmSample, Nvml,
};

use super::{source::SampleSource, DeviceInfo, FineUtil, ProcessUse, Sample};
use crate::clock;

/// The real NVML [`SampleSource`]: every device NVML lists, read through one NVML handle.
pub struct NvmlSource<'n> {
    nvml: &'n Nvml,
    /// The devices that opened, each with NVML's index of it.
    devices: Vec<(u32, Device<'n>)>,
    last_gpm: Vec<Option<GpmSample<'n>>>,
    /// Per device, the newest driver timestamp (µs) of utilization and process samples read.
    last_util_us: Vec<u64>,
    last_process_us: Vec<u64>,
}

impl std::fmt::Debug for NvmlSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource").field("devices", &self.devices.len()).finish_non_exhaustive()
    }
}

impl<'n> NvmlSource<'n> {
    /// `Err` says why there is no GPU view.
    pub fn new(nvml: &'n Nvml) -> Result<Self, super::NoGpuView> {
        let count = nvml.device_count().unwrap_or(0);
        // NVML's own index goes with each device: one that fails to open (lost from the bus)
        // must not renumber the others, which the sweep and nvidia-smi name by that index.
        let devices: Vec<(u32, Device<'n>)> = (0..count).filter_map(|i| nvml.device_by_index(i).ok().map(|d| (i, d))).collect();
        if devices.is_empty() {
            return Err(super::NoGpuView::NoDevice);
        }
        let last_gpm = devices.iter().map(|(_, d)| d.gpm_sample().ok()).collect();
        let n = devices.len();
        // Process samples are read from now on: their history before the trace is not the
        // trace's, and they are summarized by the tick that read them. Utilization samples
        // are placed by their own time, which keeps those before the window out of it; the
        // last of them says how busy the GPU was beside the window's first period.
        let now = wall_us();
        let util_since = now.saturating_sub(UTIL_HISTORY_US);
        Ok(Self { nvml, devices, last_gpm, last_util_us: vec![util_since; n], last_process_us: vec![now; n] })
    }
}

/// How far back the first tick reads the driver's utilization samples: a few periods.
const UTIL_HISTORY_US: u64 = 1_000_000;

/// Wall-clock now in µs: NVML stamps its sample buffers with it.
fn wall_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// nvml.h's `NVML_NVLINK_MAX_LINKS`: the links a GPU may have.
const NVLINK_MAX_LINKS: u32 = 18;

/// How many of the GPU's NVLink links are active; None where NVML answers for none of them
/// (no NVLink on this GPU, or a driver without the call).
fn nvlinks_active(dev: &nvml_wrapper::Device<'_>) -> Option<u32> {
    let states: Vec<bool> = (0..NVLINK_MAX_LINKS).filter_map(|link| dev.link_wrapper_for(link).is_active().ok()).collect();
    (!states.is_empty()).then(|| states.iter().filter(|a| **a).count() as u32)
}

impl SampleSource for NvmlSource<'_> {
    fn devices(&self) -> Vec<DeviceInfo> {
        self.devices
            .iter()
            .map(|&(index, ref dev)| DeviceInfo {
                index,
                uuid: dev.uuid().unwrap_or_default(),
                name: dev.name().unwrap_or_default(),
                memory_total_bytes: dev.memory_info().map_or(0, |m| m.total),
                target_memory_bytes: None,
                pci_bus_id: dev.pci_info().map(|p| p.bus_id).unwrap_or_default(),
                pcie_max_gen: dev.max_pcie_link_gen().ok(),
                pcie_max_width: dev.max_pcie_link_width().ok(),
                numa_node: dev.pci_info().ok().and_then(|p| crate::discover::cpus::numa_node_of_pci(&p.bus_id)),
                nvlinks_active: nvlinks_active(dev),
            })
            .collect()
    }

    fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    fn fast(&mut self, index: usize) -> Sample {
        let (nvml_index, dev) = (self.devices[index].0, &self.devices[index].1);
        let rates = dev.utilization_rates().ok();
        // The driver's own buffer of utilization samples (one per ~1/6 s on recent drivers):
        // finer than the one-second average `utilization.gpu` is.
        let fine: Vec<(u64, f64)> = dev
            .samples(Sampling::GpuUtilization, self.last_util_us[index])
            .map(|v| v.iter().map(|s| (s.timestamp, sample_value(&s.value))).collect())
            .unwrap_or_default();
        if let Some(newest) = fine.iter().map(|(t, _)| *t).max() {
            self.last_util_us[index] = newest;
        }
        // Each sample keeps the time the driver stamped it with (the end of the period it
        // covers, wall-clock µs), on the trace's clock: a tick reads samples of periods that
        // began before it, before the window even, and the summary places them by their own time.
        let wall_ahead = clock::wall_ahead_ns();
        let util_fine = fine.into_iter().map(|(us, pct)| FineUtil { at_ns: clock::monotonic_of_wall_us(us, wall_ahead), pct }).collect();
        let (sm_pct, occupancy_pct, tensor_pct) = gpm_activity(self.nvml, dev, &mut self.last_gpm[index]);
        Sample {
            at_ns: clock::monotonic_ns(),
            device: nvml_index,
            util_pct: rates.as_ref().map(|u| f64::from(u.gpu)),
            util_fine,
            mem_util_pct: rates.map(|u| f64::from(u.memory)),
            mem_used_bytes: dev.memory_info().ok().map(|m| m.used),
            power_w: dev.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
            sm_clock_mhz: dev.clock_info(Clock::SM).ok(),
            throttle_reasons: dev.current_throttle_reasons().ok().map(|r| r.bits()),
            pcie_gen: dev.current_pcie_link_gen().ok(),
            pcie_width: dev.current_pcie_link_width().ok(),
            sm_pct,
            occupancy_pct,
            tensor_pct,
            ..Sample::default()
        }
    }

    fn slow(&mut self, index: usize, sample: &mut Sample) {
        let dev = &self.devices[index].1;
        // KB/s over NVML's own ~20 ms window.
        sample.pcie_rx_bytes_s = dev.pcie_throughput(PcieUtilCounter::Receive).ok().map(|kb| f64::from(kb) * 1024.0);
        sample.pcie_tx_bytes_s = dev.pcie_throughput(PcieUtilCounter::Send).ok().map(|kb| f64::from(kb) * 1024.0);
        let since = self.last_process_us[index];
        if let Ok(stats) = dev.process_utilization_stats(since) {
            self.last_process_us[index] = stats.iter().map(|p| p.timestamp).max().unwrap_or(since).max(since);
            sample.processes = stats.iter().map(|p| ProcessUse { pid: p.pid, sm_pct: f64::from(p.sm_util), mem_pct: f64::from(p.mem_util) }).collect();
        }
    }

    fn process_memory(&mut self, index: usize) -> Option<Vec<(u32, u64)>> {
        let dev = &self.devices[index].1;
        let procs = dev.running_compute_processes().ok()?;
        let graphics = dev.running_graphics_processes().unwrap_or_default();
        Some(
            procs
                .iter()
                .chain(&graphics)
                .map(|p| {
                    let bytes = match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => b,
                        UsedGpuMemory::Unavailable => 0,
                    };
                    (p.pid, bytes)
                })
                .collect(),
        )
    }
}

fn sample_value(v: &nvml_wrapper::enums::device::SampleValue) -> f64 {
    use nvml_wrapper::enums::device::SampleValue as V;
    match *v {
        V::F64(x) => x,
        V::U32(x) => f64::from(x),
        V::U64(x) => x as f64,
        V::I64(x) => x as f64,
    }
}

/// SM activity, SM occupancy and tensor activity since the previous GPM sample (Hopper and
/// newer; None elsewhere).
fn gpm_activity<'n>(nvml: &'n Nvml, dev: &Device<'n>, last: &mut Option<GpmSample<'n>>) -> (Option<f64>, Option<f64>, Option<f64>) {
    let Some(prev) = last.take() else { return (None, None, None) };
    let Ok(now) = dev.gpm_sample() else {
        // Keep the old sample: the next tick measures from it.
        *last = Some(prev);
        return (None, None, None);
    };
    let wanted = [GpmMetricId::SmUtil, GpmMetricId::SmOccupancy, GpmMetricId::AnyTensorUtil];
    let values = gpm::gpm_metrics_get(nvml, &prev, &now, &wanted).ok();
    *last = Some(now);
    let get = |i: usize| values.as_ref().and_then(|v| v.get(i)?.as_ref().ok().map(|r| r.value));
    (get(0), get(1), get(2))
}
