//! Samples and their summary over the window (pure, unit-tested on synthetic samples).

use crate::model::{Distribution, GpuDevice, GpuProcess, ThrottleSeen};

/// One reading of one device, on the eBPF clock (`CLOCK_MONOTONIC`). Fields a source could
/// not read are None; slow fields are read every [`super::sampler::SLOW_EVERY`] ticks only.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Sample {
    pub at_ns: u64,
    pub device: u32,
    /// `utilization.gpu`: percent of the last period in which some kernel ran.
    pub util_pct: Option<f64>,
    /// The driver's high-resolution utilization samples taken since the previous reading.
    pub util_fine_pct: Vec<f64>,
    /// Percent of the period device memory was read or written.
    pub mem_util_pct: Option<f64>,
    pub mem_used_bytes: Option<u64>,
    pub power_w: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    /// NVML's clock throttle reason bits.
    pub throttle_reasons: Option<u64>,
    /// Hopper GPM over the last period: SM activity, SM occupancy, tensor-core activity.
    pub sm_pct: Option<f64>,
    pub occupancy_pct: Option<f64>,
    pub tensor_pct: Option<f64>,
    /// Slow readings: PCIe throughput, and SM/memory utilization per process.
    pub pcie_rx_bytes_s: Option<f64>,
    pub pcie_tx_bytes_s: Option<f64>,
    pub processes: Vec<ProcessUse>,
    /// Slow readings: GPU memory each process holds on the device (pid, bytes); None where
    /// not read this tick.
    pub memory_by_pid: Option<Vec<(u32, u64)>>,
}

/// A process's share of a device over the driver's last sampling period.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProcessUse {
    pub pid: u32,
    pub sm_pct: f64,
    pub mem_pct: f64,
}

/// What does not change during a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DeviceInfo {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_total_bytes: u64,
    /// GPU memory the traced processes hold here (None where NVML could not say).
    pub target_memory_bytes: Option<u64>,
    pub pci_bus_id: String,
}

/// NVML's throttle reason bits and their names (nvml.h, `nvmlClocksEventReason*`).
const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu-idle"),
    (0x2, "applications-clocks-setting"),
    (0x4, "sw-power-cap"),
    (0x8, "hw-slowdown"),
    (0x10, "sync-boost"),
    (0x20, "sw-thermal-slowdown"),
    (0x40, "hw-thermal-slowdown"),
    (0x80, "hw-power-brake-slowdown"),
    (0x100, "display-clock-setting"),
];

fn distribution(mut values: Vec<f64>) -> Option<Distribution> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    Some(Distribution { mean: values.iter().sum::<f64>() / values.len() as f64, p50: at(0.5), p95: at(0.95), samples: values.len() })
}

/// What the summary looks at besides the samples.
#[derive(Clone, Copy, Debug, Default)]
pub struct Context<'a> {
    /// Per device, the processes holding memory at the end (pid, bytes).
    pub holders: &'a [Vec<(u32, u64)>],
    /// The traced processes.
    pub traced: &'a [u32],
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Summaries per device of the samples taken inside the window.
#[must_use]
pub fn summarize(devices: &[DeviceInfo], samples: &[Sample], cx: &Context<'_>) -> Vec<GpuDevice> {
    devices
        .iter()
        .map(|d| {
            let mine: Vec<&Sample> = samples.iter().filter(|s| s.device == d.index && (cx.start_ns..=cx.end_ns).contains(&s.at_ns)).collect();
            let pick = |f: &dyn Fn(&Sample) -> Option<f64>| distribution(mine.iter().filter_map(|s| f(s)).collect());
            // The driver's fine samples where it gave them, else the one-second average.
            let fine: Vec<f64> = mine.iter().flat_map(|s| s.util_fine_pct.iter().copied()).collect();
            let (utilization, utilization_source) = if fine.is_empty() {
                (pick(&|s| s.util_pct), "utilization.gpu")
            } else {
                (distribution(fine), "sample-buffer")
            };
            GpuDevice {
                index: d.index,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                pci_bus_id: d.pci_bus_id.clone(),
                memory_used_bytes: mine.iter().filter_map(|s| s.mem_used_bytes).max().unwrap_or(0),
                memory_total_bytes: d.memory_total_bytes,
                utilization_gpu_pct: utilization.as_ref().map(|u| u.mean.round() as u32),
                utilization,
                utilization_source: utilization_source.into(),
                memory_util_pct: pick(&|s| s.mem_util_pct),
                sm_activity_pct: pick(&|s| s.sm_pct),
                sm_occupancy_pct: pick(&|s| s.occupancy_pct),
                tensor_activity_pct: pick(&|s| s.tensor_pct),
                power_w: pick(&|s| s.power_w),
                sm_clock_mhz: pick(&|s| s.sm_clock_mhz.map(f64::from)),
                pcie_rx_mb_s: pick(&|s| s.pcie_rx_bytes_s.map(|b| b / 1e6)),
                pcie_tx_mb_s: pick(&|s| s.pcie_tx_bytes_s.map(|b| b / 1e6)),
                throttle_reasons: throttles(&mine),
                processes: processes(&mine, cx.holders.get(d.index as usize).map_or(&[][..], Vec::as_slice), cx.traced),
                target_sm_util_pct: target_util(&mine, cx.traced),
                target_memory_bytes: d.target_memory_bytes,
                visible_to_target: None,
            }
        })
        .collect()
}

/// Each throttle reason seen, with the fraction of readings it was active in (the idle
/// reason is left out: it says the GPU had nothing to do, which utilization already says).
fn throttles(mine: &[&Sample]) -> Vec<ThrottleSeen> {
    let read: Vec<u64> = mine.iter().filter_map(|s| s.throttle_reasons).collect();
    if read.is_empty() {
        return Vec::new();
    }
    THROTTLE_REASONS
        .iter()
        .filter(|(bit, _)| *bit != 0x1)
        .filter_map(|&(bit, name)| {
            let n = read.iter().filter(|r| *r & bit != 0).count();
            (n > 0).then(|| ThrottleSeen { reason: name.into(), fraction: n as f64 / read.len() as f64 })
        })
        .collect()
}

/// Every process holding memory at the end or seen using the SMs, with its mean SM share.
fn processes(mine: &[&Sample], holders: &[(u32, u64)], traced: &[u32]) -> Vec<GpuProcess> {
    let mut by_pid: std::collections::BTreeMap<u32, GpuProcess> = std::collections::BTreeMap::new();
    for &(pid, bytes) in holders {
        by_pid.entry(pid).or_insert_with(|| GpuProcess { pid, traced: traced.contains(&pid), ..GpuProcess::default() }).memory_bytes = Some(bytes);
    }
    let mut util: std::collections::BTreeMap<u32, Vec<f64>> = std::collections::BTreeMap::new();
    for p in mine.iter().flat_map(|s| &s.processes) {
        util.entry(p.pid).or_default().push(p.sm_pct);
    }
    for (pid, v) in util {
        by_pid.entry(pid).or_insert_with(|| GpuProcess { pid, traced: traced.contains(&pid), ..GpuProcess::default() }).sm_util_pct =
            Some(v.iter().sum::<f64>() / v.len() as f64);
    }
    by_pid.into_values().collect()
}

/// Mean SM utilization of the traced processes over the slow readings, where NVML gave any.
fn target_util(mine: &[&Sample], traced: &[u32]) -> Option<f64> {
    let slow: Vec<&&Sample> = mine.iter().filter(|s| s.pcie_rx_bytes_s.is_some() || !s.processes.is_empty()).collect();
    if slow.is_empty() || traced.is_empty() {
        return None;
    }
    // Per reading, the traced processes' shares add up (they share the device).
    // (A fold from 0.0: an empty float sum is -0.0.)
    let per_reading: Vec<f64> =
        slow.iter().map(|s| s.processes.iter().filter(|p| traced.contains(&p.pid)).fold(0.0, |a, p| a + p.sm_pct).min(100.0)).collect();
    Some(per_reading.iter().fold(0.0, |a, v| a + v) / per_reading.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(index: u32) -> DeviceInfo {
        DeviceInfo { index, uuid: format!("GPU-{index}"), name: "fake".into(), memory_total_bytes: 100, ..DeviceInfo::default() }
    }

    fn sample(at_ns: u64, device: u32, util: f64, sm: Option<f64>) -> Sample {
        Sample { at_ns, device, util_pct: Some(util), mem_used_bytes: Some(at_ns), sm_pct: sm, ..Sample::default() }
    }

    #[test]
    #[expect(clippy::float_cmp, reason = "percentiles are picked samples and the GPM mean is (1+3+5)/3, all exact in f64")]
    fn summarizes_only_the_window_and_the_device() {
        let samples = vec![
            sample(5, 0, 100.0, None),
            sample(10, 0, 10.0, Some(1.0)),
            sample(20, 0, 20.0, Some(3.0)),
            sample(30, 0, 90.0, Some(5.0)),
            sample(20, 1, 50.0, None),
            sample(99, 0, 100.0, None),
        ];
        let out = summarize(&[dev(0), dev(1)], &samples, &Context { start_ns: 10, end_ns: 30, ..Context::default() });
        let u = out[0].utilization.as_ref().expect("samples");
        assert_eq!(u.samples, 3);
        assert!((u.mean - 40.0).abs() < 1e-9);
        assert_eq!(u.p50, 20.0);
        assert_eq!(u.p95, 90.0);
        assert_eq!(out[0].sm_activity_pct.as_ref().expect("gpm").mean, 3.0);
        assert_eq!(out[0].memory_used_bytes, 30);
        assert_eq!(out[1].utilization.as_ref().expect("one").samples, 1);
        assert!(out[1].sm_activity_pct.is_none(), "no GPM on that device");
    }

    #[test]
    fn fine_samples_throttles_and_processes() {
        let mut a = sample(10, 0, 100.0, None);
        a.util_fine_pct = vec![0.0, 0.0, 30.0];
        a.throttle_reasons = Some(0x1 | 0x4);
        a.pcie_rx_bytes_s = Some(2e6);
        a.processes = vec![ProcessUse { pid: 7, sm_pct: 30.0, mem_pct: 1.0 }, ProcessUse { pid: 9, sm_pct: 10.0, mem_pct: 0.0 }];
        let mut b = sample(20, 0, 100.0, None);
        b.throttle_reasons = Some(0x1);
        let holders = vec![vec![(7, 1000), (8, 500)]];
        let out = summarize(&[dev(0)], &[a, b], &Context { holders: &holders, traced: &[7], start_ns: 0, end_ns: 100 });
        let d = &out[0];
        assert_eq!(d.utilization_source, "sample-buffer");
        assert!((d.utilization.as_ref().expect("fine").mean - 10.0).abs() < 1e-9, "the fine samples, not the coarse 100 %");
        assert_eq!(d.throttle_reasons.len(), 1, "idle is not a throttle worth reporting");
        assert_eq!(d.throttle_reasons[0].reason, "sw-power-cap");
        assert!((d.throttle_reasons[0].fraction - 0.5).abs() < 1e-9);
        assert!((d.pcie_rx_mb_s.as_ref().expect("slow").mean - 2.0).abs() < 1e-9);
        assert_eq!(d.processes.iter().map(|p| (p.pid, p.traced, p.memory_bytes)).collect::<Vec<_>>(), vec![
            (7, true, Some(1000)),
            (8, false, Some(500)),
            (9, false, None)
        ]);
        assert_eq!(d.target_sm_util_pct, Some(30.0));
    }

    #[test]
    fn no_samples_is_none_not_zero() {
        let out = summarize(&[dev(0)], &[], &Context { end_ns: 100, ..Context::default() });
        assert!(out[0].utilization.is_none());
        assert!(out[0].utilization_gpu_pct.is_none());
    }
}
