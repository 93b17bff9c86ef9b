//! The NVML sampler. Runs on its own thread at a fixed rate (default 10 Hz); each tick reads
//! per device only cheap counters — utilization, memory, and on Hopper a GPM sample (SM and
//! tensor activity between two ticks). Slow calls (process lists take milliseconds) run once,
//! at the end. Samples are handed over as they are taken, so a recording keeps them on disk
//! second by second.

use std::{sync::mpsc, thread, time::Duration};

use nvml_wrapper::{
    enums::{device::UsedGpuMemory, gpm::GpmMetricId},
    error::NvmlError,
    gpm, Device, GpmSample, Nvml,
};

use super::{DeviceInfo, Sample};
use crate::clock;

/// How long NVML may take to start or to hand back its samples before we give up on it.
const NVML_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug)]
pub struct Sampler {
    /// Sending the traced pids ends the sampling (they are wanted for the final process list).
    stop: mpsc::Sender<Vec<u32>>,
    done: mpsc::Receiver<Finished>,
    samples: mpsc::Receiver<Sample>,
    pub interval: Duration,
    /// The driver and the devices, known from the start (for a recording's start record).
    pub driver_version: Option<String>,
    pub devices: Vec<DeviceInfo>,
}

/// What the sampler hands back at the end.
#[derive(Debug, Default)]
pub struct Finished {
    pub devices: Vec<DeviceInfo>,
    pub samples: Vec<Sample>,
    pub driver_version: Option<String>,
}

impl Sampler {
    /// Start sampling; `Err` says why there is no GPU view (no driver, no GPU, NVML hung).
    pub fn start(interval: Duration) -> Result<Self, String> {
        if interval.is_zero() {
            return Err("NVML sampling is off (--nvml-hz 0)".into());
        }
        let (stop, stop_rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let (sample_tx, sample_rx) = mpsc::channel();
        let channels = Channels { stop: stop_rx, ready: ready_tx, samples: sample_tx, done: done_tx };
        thread::Builder::new()
            .name("gputrace-nvml".into())
            .spawn(move || run(interval, &channels))
            .map_err(|e| format!("cannot start the NVML thread: {e}"))?;
        match ready_rx.recv_timeout(NVML_TIMEOUT) {
            Ok(Ok((driver_version, devices))) => Ok(Self { stop, done: done_rx, samples: sample_rx, interval, driver_version, devices }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!("NVML did not initialise within {NVML_TIMEOUT:?}; GPU-side figures are omitted")),
        }
    }

    /// The samples taken since the last call (never blocks).
    #[must_use]
    pub fn take_samples(&self) -> Vec<Sample> {
        self.samples.try_iter().collect()
    }

    /// Stop and collect; `pids` are the traced processes whose GPU memory is wanted. The
    /// samples are those not taken by [`Self::take_samples`] yet.
    pub fn finish(self, pids: Vec<u32>) -> Result<Finished, String> {
        let _ = self.stop.send(pids);
        let mut finished =
            self.done.recv_timeout(NVML_TIMEOUT + self.interval).map_err(|_| "NVML did not answer at the end of the trace".to_owned())?;
        finished.samples = self.samples.try_iter().collect();
        Ok(finished)
    }
}

/// The driver version and the devices, sent once NVML answered.
type Ready = (Option<String>, Vec<DeviceInfo>);

/// The sampler thread's ends of its channels.
struct Channels {
    /// Sending the traced pids ends the sampling.
    stop: mpsc::Receiver<Vec<u32>>,
    /// The driver version and the devices, or why NVML is unusable.
    ready: mpsc::Sender<Result<Ready, String>>,
    samples: mpsc::Sender<Sample>,
    done: mpsc::Sender<Finished>,
}

fn device_info(index: usize, dev: &Device<'_>, pids: Option<&[u32]>) -> DeviceInfo {
    DeviceInfo {
        index: index as u32,
        uuid: dev.uuid().unwrap_or_default(),
        name: dev.name().unwrap_or_default(),
        memory_total_bytes: dev.memory_info().map_or(0, |m| m.total),
        target_memory_bytes: pids.and_then(|p| target_memory(dev, p).ok()),
    }
}

fn run(interval: Duration, ch: &Channels) {
    let (stop, ready, done) = (&ch.stop, &ch.ready, &ch.done);
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => {
            let _ = ready.send(Err(format!("NVML is unavailable ({e}); GPU-side figures are omitted")));
            return;
        }
    };
    let count = nvml.device_count().unwrap_or(0);
    let devices: Vec<Device<'_>> = (0..count).filter_map(|i| nvml.device_by_index(i).ok()).collect();
    if devices.is_empty() {
        let _ = ready.send(Err("NVML sees no GPU; GPU-side figures are omitted".into()));
        return;
    }
    let infos = devices.iter().enumerate().map(|(i, d)| device_info(i, d, None)).collect();
    let _ = ready.send(Ok((nvml.sys_driver_version().ok(), infos)));
    let mut last_gpm: Vec<Option<GpmSample<'_>>> = devices.iter().map(|d| d.gpm_sample().ok()).collect();
    // Waiting on the stop channel is the tick: it ends the wait at once when the trace stops.
    let pids = loop {
        match stop.recv_timeout(interval) {
            Ok(pids) => break pids,
            Err(mpsc::RecvTimeoutError::Disconnected) => break Vec::new(),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        for (index, dev) in devices.iter().enumerate() {
            let (sm_pct, tensor_pct) = gpm_activity(&nvml, dev, &mut last_gpm[index]);
            let _ = ch.samples.send(Sample {
                at_ns: clock::monotonic_ns(),
                device: index as u32,
                util_pct: dev.utilization_rates().ok().map(|u| f64::from(u.gpu)),
                mem_used_bytes: dev.memory_info().ok().map(|m| m.used),
                sm_pct,
                tensor_pct,
            });
        }
    };
    let infos = devices.iter().enumerate().map(|(i, d)| device_info(i, d, Some(&pids))).collect();
    let _ = done.send(Finished { devices: infos, samples: Vec::new(), driver_version: nvml.sys_driver_version().ok() });
}

/// SM and tensor activity since the previous GPM sample (Hopper and newer; None elsewhere).
fn gpm_activity<'n>(nvml: &'n Nvml, dev: &Device<'n>, last: &mut Option<GpmSample<'n>>) -> (Option<f64>, Option<f64>) {
    let Some(prev) = last.take() else { return (None, None) };
    let Ok(now) = dev.gpm_sample() else { return (None, None) };
    let values = gpm::gpm_metrics_get(nvml, &prev, &now, &[GpmMetricId::SmUtil, GpmMetricId::AnyTensorUtil]).ok();
    *last = Some(now);
    let get = |i: usize| values.as_ref().and_then(|v| v.get(i)?.as_ref().ok().map(|r| r.value));
    (get(0), get(1))
}

/// GPU memory held by the traced processes. NVML reports host pids; inside a container
/// whose pid namespace differs they do not match ours, and this is then 0.
fn target_memory(dev: &Device<'_>, pids: &[u32]) -> Result<u64, NvmlError> {
    Ok(dev
        .running_compute_processes()?
        .iter()
        .filter(|p| pids.contains(&p.pid))
        .map(|p| match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => b,
            UsedGpuMemory::Unavailable => 0,
        })
        .sum())
}
