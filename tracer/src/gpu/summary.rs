//! Samples and their summary over the window (pure, unit-tested on synthetic samples).

use crate::report::model::{Distribution, GpuDevice};

/// One reading of one device, on the eBPF clock (`CLOCK_MONOTONIC`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    pub at_ns: u64,
    pub device: u32,
    /// `utilization.gpu`: percent of the period in which some kernel ran.
    pub util_pct: Option<f64>,
    pub mem_used_bytes: Option<u64>,
    /// Hopper GPM: percent of SM time busy, and tensor-core activity, over the last period.
    pub sm_pct: Option<f64>,
    pub tensor_pct: Option<f64>,
}

/// What does not change during a trace.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_total_bytes: u64,
    /// GPU memory the traced processes hold here (None where NVML could not say).
    pub target_memory_bytes: Option<u64>,
}

fn distribution(mut values: Vec<f64>) -> Option<Distribution> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    Some(Distribution { mean: values.iter().sum::<f64>() / values.len() as f64, p50: at(0.5), p95: at(0.95), samples: values.len() })
}

/// Summaries per device of the samples taken inside `[start_ns, end_ns]`.
#[must_use]
pub fn summarize(devices: &[DeviceInfo], samples: &[Sample], start_ns: u64, end_ns: u64) -> Vec<GpuDevice> {
    devices
        .iter()
        .map(|d| {
            let mine: Vec<&Sample> = samples.iter().filter(|s| s.device == d.index && (start_ns..=end_ns).contains(&s.at_ns)).collect();
            let pick = |f: fn(&Sample) -> Option<f64>| distribution(mine.iter().filter_map(|s| f(s)).collect());
            let utilization = pick(|s| s.util_pct);
            GpuDevice {
                index: d.index,
                uuid: d.uuid.clone(),
                name: d.name.clone(),
                memory_used_bytes: mine.iter().filter_map(|s| s.mem_used_bytes).max().unwrap_or(0),
                memory_total_bytes: d.memory_total_bytes,
                utilization_gpu_pct: utilization.as_ref().map(|u| u.mean.round() as u32),
                utilization,
                sm_activity_pct: pick(|s| s.sm_pct),
                tensor_activity_pct: pick(|s| s.tensor_pct),
                target_memory_bytes: d.target_memory_bytes,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(index: u32) -> DeviceInfo {
        DeviceInfo { index, uuid: format!("GPU-{index}"), name: "fake".into(), memory_total_bytes: 100, target_memory_bytes: None }
    }

    fn sample(at_ns: u64, device: u32, util: f64, sm: Option<f64>) -> Sample {
        Sample { at_ns, device, util_pct: Some(util), mem_used_bytes: Some(at_ns), sm_pct: sm, tensor_pct: None }
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
        let out = summarize(&[dev(0), dev(1)], &samples, 10, 30);
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
    fn no_samples_is_none_not_zero() {
        let out = summarize(&[dev(0)], &[], 0, 100);
        assert!(out[0].utilization.is_none());
        assert!(out[0].utilization_gpu_pct.is_none());
    }
}
