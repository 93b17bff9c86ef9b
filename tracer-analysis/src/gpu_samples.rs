//! NVML's samples as the analysis takes them, and their summary over the window (pure,
//! unit-tested on synthetic samples). The sampler that takes them is the tracer's
//! (`gputrace::gpu`).

use crate::model::{Distribution, GpuDevice, GpuProcess, ThrottleSeen};

/// One reading of one device, on the eBPF clock (`CLOCK_MONOTONIC`). Fields a source could
/// not read are None; slow fields are read every `SLOW_EVERY` (`gputrace::gpu::source`) ticks only.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Sample {
    /// When it was taken, monotonic ns.
    pub at_ns: u64,
    /// The device's index, as in `DeviceInfo::index`.
    pub device: u32,
    /// `utilization.gpu`: percent of the last period in which some kernel ran.
    pub util_pct: Option<f64>,
    /// The driver's high-resolution utilization samples read at this tick: those that ended
    /// since the previous reading, each at its own time.
    pub util_fine: Vec<FineUtil>,
    /// The same samples without their time, as recordings made before `util_fine` hold them
    /// (read only: they can be placed at this tick's time only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub util_fine_pct: Vec<f64>,
    /// Percent of the period device memory was read or written.
    pub mem_util_pct: Option<f64>,
    /// Device memory in use by all processes, bytes.
    pub mem_used_bytes: Option<u64>,
    /// Board power draw, watts.
    pub power_w: Option<f64>,
    /// The SM clock, megahertz.
    pub sm_clock_mhz: Option<u32>,
    /// NVML's clock throttle reason bits.
    pub throttle_reasons: Option<u64>,
    /// Hopper GPM over the last period: SM activity, SM occupancy, tensor-core activity.
    pub sm_pct: Option<f64>,
    /// GPM's SM occupancy: resident warps over the maximum, percent.
    pub occupancy_pct: Option<f64>,
    /// GPM's tensor-core activity, percent.
    pub tensor_pct: Option<f64>,
    /// Slow readings: PCIe throughput, and SM/memory utilization per process.
    pub pcie_rx_bytes_s: Option<f64>,
    /// Bytes a second the GPU sent over PCIe (NVML's transmit counter, over its own ~20 ms).
    pub pcie_tx_bytes_s: Option<f64>,
    /// The PCIe link's current generation and width (it trains down when the
    /// GPU idles, up under load); absent in older recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_gen: Option<u32>,
    /// Lanes the PCIe link runs with now; absent in older recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_width: Option<u32>,
    /// Slow readings: each process's SM and memory utilization since the previous slow reading;
    /// empty where not read this tick.
    pub processes: Vec<ProcessUse>,
    /// Slow readings: GPU memory each process holds on the device (pid, bytes); None where
    /// not read this tick.
    pub memory_by_pid: Option<Vec<(u32, u64)>>,
}

/// One of the driver's high-resolution utilization samples: the percent of its sample period
/// in which some kernel ran, the period ending at `at_ns` (the driver's wall-clock stamp on
/// the monotonic clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FineUtil {
    /// The end of the sample's period, monotonic ns.
    pub at_ns: u64,
    /// Percent of the period in which some kernel ran.
    pub pct: f64,
}

/// A process's share of a device over the driver's last sampling period.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProcessUse {
    /// The process's pid, as NVML gives it (a host pid).
    pub pid: u32,
    /// Percent of the period its kernels kept some SM busy.
    pub sm_pct: f64,
    /// Percent of the period it read or wrote device memory.
    pub mem_pct: f64,
}

/// What does not change during a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DeviceInfo {
    /// The device's place among those NVML opened: NVML's index unless one failed to open.
    pub index: u32,
    /// NVML's UUID (`GPU-…`); empty where NVML would not say.
    pub uuid: String,
    /// The product name NVML gives; empty where it would not say.
    pub name: String,
    /// Total device memory, bytes; 0 where NVML would not say.
    pub memory_total_bytes: u64,
    /// GPU memory the traced processes hold here (None where NVML could not say).
    pub target_memory_bytes: Option<u64>,
    /// The PCI bus id (`00000000:18:00.0`); empty where NVML would not say.
    pub pci_bus_id: String,
    /// The PCIe link's best generation and width with this GPU in this system (NVML's
    /// maximum; the current link drops when idle): the bus a pinned copy can use.
    pub pcie_max_gen: Option<u32>,
    /// The most lanes the link can train to (see `pcie_max_gen`).
    pub pcie_max_width: Option<u32>,
    /// The NUMA node sysfs gives the GPU's PCI device; None on a machine without NUMA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<i32>,
    /// NVLink links active (None where NVML does not support NVLink on this GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlinks_active: Option<u32>,
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
    /// Per device, in the order of the devices given (not by NVML's index, which skips a
    /// device that failed to open), the processes holding memory at the end (pid, bytes).
    pub holders: &'a [Vec<(u32, u64)>],
    /// The traced processes.
    pub traced: &'a [u32],
    /// The window's start, monotonic ns: samples before it are left out.
    pub start_ns: u64,
    /// The window's end, monotonic ns: samples after it are left out.
    pub end_ns: u64,
}

/// Summaries per device of the samples taken inside the window.
#[must_use]
pub fn summarize(devices: &[DeviceInfo], samples: &[Sample], cx: &Context<'_>) -> Vec<GpuDevice> {
    devices
        .iter()
        .enumerate()
        .map(|(position, d)| {
            let mine: Vec<&Sample> = samples.iter().filter(|s| s.device == d.index && (cx.start_ns..=cx.end_ns).contains(&s.at_ns)).collect();
            let pick = |f: &dyn Fn(&Sample) -> Option<f64>| distribution(mine.iter().filter_map(|s| f(s)).collect());
            // The driver's fine samples over the window where it gave them (old recordings
            // hold them without their time: by tick), else the one-second average by tick.
            let legacy: Vec<f64> = mine.iter().flat_map(|s| s.util_fine_pct.iter().copied()).collect();
            let (utilization, utilization_source) = match fine_utilization(samples, d.index, cx) {
                Some(u) => (Some(u), "sample-buffer"),
                None if !legacy.is_empty() => (distribution(legacy), "sample-buffer"),
                None => (pick(&|s| s.util_pct), "utilization.gpu"),
            };
            GpuDevice {
                index: d.index,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                pci_bus_id: d.pci_bus_id.clone(),
                pcie_max_gen: d.pcie_max_gen,
                pcie_max_width: d.pcie_max_width,
                pcie_under_load: link_under_load(&mine),
                numa_node: d.numa_node,
                nvlinks_active: d.nvlinks_active,
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
                processes: processes(&mine, cx.holders.get(position).map_or(&[][..], Vec::as_slice), cx.traced),
                target_sm_util_pct: target_util(&mine, cx.traced),
                target_memory_bytes: d.target_memory_bytes,
                visible_to_target: None,
            }
        })
        .collect()
}

/// The driver's fine utilization samples of one device over the window, each weighted by how
/// much of the period it covers lies inside the window (ns): the mean is the share of the
/// window's sampled time in which some kernel ran. A sample covers the time since the
/// device's previous one (the driver samples without pause); the first one known, the
/// device's usual period. Samples of ticks outside the window count too: the first tick
/// inside it brings periods that began before it, a tick after it the window's last period.
/// None where no sample covers any of the window.
fn fine_utilization(samples: &[Sample], device: u32, cx: &Context<'_>) -> Option<Distribution> {
    let mut fine: Vec<FineUtil> = samples.iter().filter(|s| s.device == device).flat_map(|s| s.util_fine.iter().copied()).collect();
    fine.sort_by_key(|f| f.at_ns);
    let mut gaps: Vec<u64> = fine.windows(2).map(|w| w[1].at_ns - w[0].at_ns).filter(|&g| g > 0).collect();
    gaps.sort_unstable();
    let usual = gaps.get(gaps.len() / 2).copied().unwrap_or(0);
    let mut weighted = Vec::new();
    for (i, f) in fine.iter().enumerate() {
        let begin = if i == 0 { f.at_ns.saturating_sub(usual) } else { fine[i - 1].at_ns };
        if begin == f.at_ns {
            // A sample whose period is unknown (the only one): inside if stamped inside.
            if (cx.start_ns..=cx.end_ns).contains(&f.at_ns) {
                weighted.push((f.pct, 1.0));
            }
            continue;
        }
        let (lo, hi) = (begin.max(cx.start_ns), f.at_ns.min(cx.end_ns));
        if hi <= lo {
            continue;
        }
        let neighbour = |j: Option<usize>| j.and_then(|j| fine.get(j)).map_or(f.pct, |n| n.pct);
        let pct = inside_pct(f.pct, (begin, f.at_ns), (lo, hi), (neighbour(i.checked_sub(1)), neighbour(Some(i + 1))));
        weighted.push((pct, (hi - lo) as f64));
    }
    weighted_distribution(weighted)
}

/// The utilization inside `[lo, hi]` of a sample of `pct` over `[begin, end]` that the window
/// holds only that part of. The parts outside are read at the level of the neighbouring
/// sample they adjoin (`before`, `after`; the sample's own where there is none), and the rest
/// of the sample's busy time is inside. Read as even throughout instead, a job that starts
/// busy on an idle GPU as the window opens (`gputrace run`) would read the idle part before it
/// into its window: up to a quarter period at that edge. For a steady load the two agree.
fn inside_pct(pct: f64, (begin, end): (u64, u64), (lo, hi): (u64, u64), (before, after): (f64, f64)) -> f64 {
    let (inside, period) = ((hi - lo) as f64, (end - begin) as f64);
    if inside >= period {
        return pct;
    }
    let busy = pct * period - before * (lo - begin) as f64 - after * (end - hi) as f64;
    (busy / inside).clamp(0.0, 100.0)
}

/// Mean and percentiles of (value, weight) pairs, each value standing for its weight's share.
fn weighted_distribution(mut values: Vec<(f64, f64)>) -> Option<Distribution> {
    let total: f64 = values.iter().map(|(_, w)| w).sum();
    if values.is_empty() || total <= 0.0 {
        return None;
    }
    values.sort_by(|a, b| a.0.total_cmp(&b.0));
    // The smallest value at or below which lies the share q of the weight.
    let at = |q: f64| {
        let mut below = 0.0;
        values
            .iter()
            .find(|(_, w)| {
                below += w;
                below >= q * total
            })
            .map_or(values[values.len() - 1].0, |(v, _)| *v)
    };
    Some(Distribution { mean: values.iter().map(|(v, w)| v * w).sum::<f64>() / total, p50: at(0.5), p95: at(0.95), samples: values.len() })
}

/// Utilization (%) at or above which a tick's link reading is of a working GPU (the doctor's
/// own threshold for an idle link).
const LINK_BUSY_PCT: f64 = 5.0;
/// PCIe traffic (bytes/s, both ways) at or above which the link was in use at a slow tick.
const LINK_BUSY_BYTES_S: f64 = 1e9;

/// The PCIe link as it ran while the GPU worked: the best generation and width read at ticks
/// whose utilization was at least [`LINK_BUSY_PCT`] or whose link moved a gigabyte a second.
/// An idle GPU trains its link down to save power, and a barely busy one keeps it down
/// between its kernels, so readings then say nothing of the link; the best of the busy ones
/// is the link's. None where no such reading was made.
fn link_under_load(mine: &[&Sample]) -> Option<crate::model::PcieLink> {
    let traffic = |s: &Sample| s.pcie_rx_bytes_s.unwrap_or(0.0) + s.pcie_tx_bytes_s.unwrap_or(0.0);
    let busy = mine.iter().filter(|s| {
        s.util_pct.is_some_and(|u| u >= LINK_BUSY_PCT) || s.util_fine.iter().any(|f| f.pct >= LINK_BUSY_PCT) || traffic(s) >= LINK_BUSY_BYTES_S
    });
    let (gen, width) = busy.filter_map(|s| Some((s.pcie_gen?, s.pcie_width?))).fold((0, 0), |(g, w), (sg, sw)| (g.max(sg), w.max(sw)));
    (gen > 0 && width > 0).then_some(crate::model::PcieLink { gen, width })
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

/// What the sampler hands back at the end.
#[derive(Debug, Default)]
pub struct Finished {
    /// The devices, with the memory the traced processes held at the end (`target_memory_bytes`).
    pub devices: Vec<DeviceInfo>,
    /// The samples not taken by the sampler (`gputrace::gpu::sampler`) before the end, oldest first.
    pub samples: Vec<Sample>,
    /// The driver's version, read again at the end.
    pub driver_version: Option<String>,
    /// Per device, every process holding memory there at the end: (pid, bytes).
    pub holders: Vec<Vec<(u32, u64)>>,
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
    fn the_link_under_load_is_the_best_read_while_the_gpu_worked() {
        let tick = |util: f64, gen: u32| Sample { util_pct: Some(util), pcie_gen: Some(gen), pcie_width: Some(16), ..Sample::default() };
        let (idle, barely, busy, busier) = (tick(0.0, 1), tick(3.0, 1), tick(60.0, 5), tick(90.0, 4));
        assert_eq!(link_under_load(&[&idle, &barely, &busy, &busier]), Some(crate::model::PcieLink { gen: 5, width: 16 }));
        assert_eq!(link_under_load(&[&idle, &barely]), None, "no reading of a working GPU: nothing said of its link");
        let copying = Sample { pcie_rx_bytes_s: Some(2e9), ..tick(0.0, 3) };
        assert_eq!(link_under_load(&[&idle, &copying]), Some(crate::model::PcieLink { gen: 3, width: 16 }), "a link moving 2 GB/s is in use");
    }

    #[test]
    fn fine_samples_throttles_and_processes() {
        let mut a = sample(10, 0, 100.0, None);
        a.util_fine = fine(&[(4, 0.0), (6, 0.0), (8, 30.0)]);
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

    fn fine(stamped: &[(u64, f64)]) -> Vec<FineUtil> {
        stamped.iter().map(|&(at_ns, pct)| FineUtil { at_ns, pct }).collect()
    }

    /// A tick carrying the driver's samples `stamped` (their period's end, pct); its own
    /// `utilization.gpu` reads 0, so that a mean from the fine samples is told apart.
    fn tick(at_ns: u64, device: u32, stamped: &[(u64, f64)]) -> Sample {
        Sample { util_fine: fine(stamped), ..sample(at_ns, device, 0.0, None) }
    }

    /// Periods of 100 ns, the window [250, 750]: idle before and after it, busy inside, and a
    /// period across each edge, busy 40 % of it (in its half inside: 80 %). Counted by the tick
    /// that read them (350 is the first inside the window, 1050 is after it), the idle period
    /// 100–200 was in, whole, and the period across the window's end was out: 0, 40, 100, 100
    /// read 60 %.
    #[test]
    fn fine_samples_count_by_the_time_they_cover() {
        let samples = vec![
            tick(240, 0, &[(100, 0.0)]),
            tick(350, 0, &[(200, 0.0), (300, 40.0)]),
            tick(560, 0, &[(400, 100.0), (500, 100.0)]),
            tick(760, 0, &[(600, 100.0), (700, 100.0)]),
            tick(1050, 0, &[(800, 40.0), (900, 0.0), (1000, 0.0)]),
        ];
        let out = summarize(&[dev(0)], &samples, &Context { start_ns: 250, end_ns: 750, ..Context::default() });
        assert_eq!(out[0].utilization_source, "sample-buffer");
        let u = out[0].utilization.as_ref().expect("fine samples");
        assert_eq!(u.samples, 6, "the four inside and the two across the edges: {u:?}");
        // 50 ns of 300's period (200–300) is inside, 50 of 800's (700–800); the idle samples
        // beside them say their parts outside the window were idle.
        let mean = (80.0 * 50.0 + 100.0 * 400.0 + 80.0 * 50.0) / 500.0;
        assert!((u.mean - mean).abs() < 1e-9, "{u:?}");
        assert_eq!(out[0].utilization_gpu_pct, Some(96));
        assert_eq!((u.p50, u.p95), (100.0, 100.0), "four fifths of the window read 100 %");
    }

    /// A period the window holds in part: its part outside is read at the level of the sample
    /// beside it, the rest of its busy time is inside.
    #[test]
    fn a_period_across_the_edge_is_split_by_its_neighbours() {
        let (period, inside) = ((0, 100), (40, 100));
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // A steady load: the same as reading the period as even.
        assert!(near(inside_pct(60.0, period, inside, (60.0, 60.0)), 60.0));
        // A job busy from the window's start on an idle GPU: 60 % of the period is its 60 ns.
        assert!(near(inside_pct(60.0, period, inside, (0.0, 0.0)), 100.0));
        // The window's end at 60, the GPU idle after: the 60 busy ns are all inside.
        assert!(near(inside_pct(60.0, period, (0, 60), (60.0, 0.0)), 100.0), "an idle neighbour after it");
        // The window's start at 50, the GPU busy before: 50 of the 60 busy ns are outside.
        assert!(near(inside_pct(60.0, period, (50, 100), (100.0, 0.0)), 20.0), "a busy neighbour before it");
        // Neighbours busier than the sample allows: nothing inside, not less.
        assert!(near(inside_pct(10.0, period, inside, (100.0, 0.0)), 0.0));
        assert!(near(inside_pct(35.0, period, period, (0.0, 0.0)), 35.0), "a period wholly inside is as read");
    }

    #[test]
    fn the_first_sample_covers_the_usual_period_and_a_window_without_any_falls_back() {
        // 1000 is the first sample known: it covers 900–1000 (the period between the
        // others), of which 950–1000 is in the window.
        let busy = vec![tick(1010, 0, &[(1000, 0.0)]), tick(1250, 0, &[(1100, 100.0), (1200, 100.0)])];
        let out = summarize(&[dev(0)], &busy, &Context { start_ns: 950, end_ns: 1300, ..Context::default() });
        let u = out[0].utilization.as_ref().expect("fine samples");
        assert_eq!(u.samples, 3);
        assert!((u.mean - 80.0).abs() < 1e-9, "(0 × 50 + 100 × 200) / 250: {u:?}");
        // One sample alone has no known period: it counts where it is stamped.
        let one = summarize(&[dev(0)], &[tick(600, 0, &[(500, 70.0)])], &Context { start_ns: 0, end_ns: 1000, ..Context::default() });
        assert_eq!(one[0].utilization.as_ref().map(|u| (u.mean.round() as u32, u.samples)), Some((70, 1)));
        // The device's samples all end before the window: `utilization.gpu` of its ticks.
        let before = vec![tick(240, 0, &[(100, 0.0), (200, 0.0)]), sample(300, 0, 55.0, None)];
        let out = summarize(&[dev(0)], &before, &Context { start_ns: 250, end_ns: 750, ..Context::default() });
        assert_eq!(out[0].utilization_source, "utilization.gpu");
        assert_eq!(out[0].utilization_gpu_pct, Some(55));
    }

    /// A recording made before samples kept their time holds `util_fine_pct`: it still reads,
    /// counted by tick as it was; new samples write their time and not that field.
    #[test]
    fn samples_without_their_time_still_read() {
        let old: Vec<Sample> = serde_json::from_str(
            r#"[{"at_ns":20,"device":0,"util_pct":100.0,"util_fine_pct":[0.0,0.0,30.0]},{"at_ns":5,"device":0,"util_fine_pct":[90.0]}]"#,
        )
        .expect("an old samples frame parses");
        assert!(old[0].util_fine.is_empty());
        let out = summarize(&[dev(0)], &old, &Context { start_ns: 10, end_ns: 100, ..Context::default() });
        assert_eq!(out[0].utilization_source, "sample-buffer");
        assert!((out[0].utilization.as_ref().expect("fine").mean - 10.0).abs() < 1e-9, "the tick inside the window only");
        let new = tick(20, 0, &[(15, 50.0)]);
        let json = serde_json::to_string(&new).expect("serializes");
        assert!(json.contains(r#""util_fine":[{"at_ns":15,"pct":50.0}]"#) && !json.contains("util_fine_pct"), "{json}");
        assert_eq!(serde_json::from_str::<Sample>(&json).expect("reads back"), new);
    }

    #[test]
    fn no_samples_is_none_not_zero() {
        let out = summarize(&[dev(0)], &[], &Context { end_ns: 100, ..Context::default() });
        assert!(out[0].utilization.is_none());
        assert!(out[0].utilization_gpu_pct.is_none());
    }
}
