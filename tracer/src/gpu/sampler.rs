//! The sampler: a thread that reads a [`SampleSource`] (NVML, or a fake in tests) at a fixed rate
//! and hands each sample over a channel as it is taken. NVML calls block, and a hung driver
//! must not stall the event loop: the session only ever waits on channels, with timeouts.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc, Arc,
    },
    thread,
    time::Duration,
};

pub use super::source::{SampleSource, SLOW_EVERY};
pub use gputrace_analysis::gpu_samples::Finished;
use super::{DeviceInfo, NoGpuView, Sample};

/// How long the source may take to start or to hand back its final readings.
const SOURCE_TIMEOUT: Duration = Duration::from_secs(3);
/// The NVML sampler thread of a session, and the ends of its channels.
#[derive(Debug)]
pub struct Sampler {
    /// Sending the traced pids ends the sampling (they are wanted for the final reading).
    stop: mpsc::Sender<Vec<u32>>,
    done: mpsc::Receiver<Finished>,
    samples: mpsc::Receiver<Sample>,
    /// Time between ticks (10 Hz by default).
    pub interval: Duration,
    /// How long the source may take to start, and to hand back its final readings.
    timeout: Duration,
    /// The driver and the devices, known from the start (for a recording's start record).
    pub driver_version: Option<String>,
    /// The devices, each as `SampleSource::devices` described it at the start.
    pub devices: Vec<DeviceInfo>,
    /// The busiest device's last `utilization.gpu` (f64 bits; NaN: none yet), for the live
    /// status line, which must not take samples from the report.
    latest_util: Arc<AtomicU64>,
}

/// The driver version and the devices, sent once the source answered.
type Ready = (Option<String>, Vec<DeviceInfo>);

/// The sampler thread's ends of its channels.
struct Channels {
    stop: mpsc::Receiver<Vec<u32>>,
    ready: mpsc::Sender<Result<Ready, NoGpuView>>,
    samples: mpsc::Sender<Sample>,
    done: mpsc::Sender<Finished>,
    latest_util: Arc<AtomicU64>,
}

impl Sampler {
    /// Start NVML sampling; `Err` says why there is no GPU view (no driver, no GPU, NVML hung).
    pub fn start(interval: Duration) -> Result<Self, NoGpuView> {
        if interval.is_zero() {
            return Err(NoGpuView::Off);
        }
        Self::start_with(interval, SOURCE_TIMEOUT, |tick| {
            let nvml = nvml_wrapper::Nvml::init().map_err(NoGpuView::Unavailable)?;
            let mut source = super::nvml::NvmlSource::new(&nvml)?;
            tick(&mut source);
            Ok(())
        })
    }

    /// Start sampling a source made on the sampler thread by `open` (NVML's handles cannot
    /// leave the thread that borrows them); `open` runs the loop it is handed on its source.
    /// The source has `timeout` to start, and again to hand back its final readings.
    pub fn start_with<F>(interval: Duration, timeout: Duration, open: F) -> Result<Self, NoGpuView>
    where
        F: FnOnce(&mut dyn FnMut(&mut dyn SampleSource)) -> Result<(), NoGpuView> + Send + 'static,
    {
        let (stop, stop_rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let (sample_tx, sample_rx) = mpsc::channel();
        let latest_util = Arc::new(AtomicU64::new(f64::NAN.to_bits()));
        let ch = Channels { stop: stop_rx, ready: ready_tx, samples: sample_tx, done: done_tx, latest_util: Arc::clone(&latest_util) };
        thread::Builder::new()
            .name("gputrace-nvml".into())
            .spawn(move || {
                let ready = ch.ready.clone();
                if let Err(e) = open(&mut |source| sample_loop(source, interval, &ch)) {
                    let _ = ready.send(Err(e));
                }
            })
            .map_err(NoGpuView::Thread)?;
        match ready_rx.recv_timeout(timeout) {
            Ok(Ok((driver_version, devices))) => Ok(Self { stop, done: done_rx, samples: sample_rx, interval, timeout, driver_version, devices, latest_util }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(NoGpuView::StartTimeout(timeout)),
        }
    }

    /// The busiest device's utilization at the last tick, percent (never blocks).
    #[must_use]
    pub fn latest_utilization(&self) -> Option<f64> {
        Some(f64::from_bits(self.latest_util.load(Ordering::Relaxed))).filter(|u| !u.is_nan())
    }

    /// The samples taken since the last call (never blocks).
    #[must_use]
    pub fn take_samples(&self) -> Vec<Sample> {
        self.samples.try_iter().collect()
    }

    /// Stop and collect; `pids` are the traced processes whose GPU memory is wanted. The
    /// samples are those not taken by [`Self::take_samples`] yet.
    pub fn finish(self, pids: Vec<u32>) -> Result<Finished, NoGpuView> {
        let _ = self.stop.send(pids);
        let mut finished = self.done.recv_timeout(self.timeout + self.interval).map_err(|_| NoGpuView::EndTimeout)?;
        finished.samples = self.samples.try_iter().collect();
        Ok(finished)
    }
}

fn sample_loop(source: &mut dyn SampleSource, interval: Duration, ch: &Channels) {
    let devices = source.devices();
    let _ = ch.ready.send(Ok((source.driver_version(), devices.clone())));
    let mut tick: u64 = 0;
    // Waiting on the stop channel is the tick: it ends the wait at once when the trace stops.
    let pids = loop {
        match ch.stop.recv_timeout(interval) {
            Ok(pids) => break pids,
            Err(mpsc::RecvTimeoutError::Disconnected) => break Vec::new(),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        tick += 1;
        let mut busiest: Option<f64> = None;
        for index in 0..devices.len() {
            let mut sample = source.fast(index);
            if let Some(u) = sample.util_pct {
                busiest = Some(busiest.map_or(u, |b| b.max(u)));
            }
            if tick.is_multiple_of(SLOW_EVERY) {
                source.slow(index, &mut sample);
                sample.memory_by_pid = source.process_memory(index);
            }
            let _ = ch.samples.send(sample);
        }
        if let Some(u) = busiest {
            ch.latest_util.store(u.to_bits(), Ordering::Relaxed);
        }
    };
    let holders: Vec<Vec<(u32, u64)>> = (0..devices.len()).map(|i| source.process_memory(i).unwrap_or_default()).collect();
    let infos = devices
        .into_iter()
        .zip(&holders)
        .map(|(mut d, held)| {
            d.target_memory_bytes = Some(held.iter().filter(|(pid, _)| pids.contains(pid)).map(|(_, b)| b).sum());
            d
        })
        .collect();
    let _ = ch.done.send(Finished { devices: infos, samples: Vec::new(), driver_version: source.driver_version(), holders });
}

#[cfg(test)]
mod tests {
    use std::sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    };

    use super::*;

    /// The timeout the tests give their sources: a real one, short.
    const TEST_TIMEOUT: Duration = Duration::from_millis(200);

    /// Two devices; counts its fast and slow reads; device 1 holds memory for pids 7 and 8.
    struct Fake {
        fast: Arc<AtomicU64>,
        slow: Arc<AtomicU64>,
    }

    impl SampleSource for Fake {
        fn devices(&self) -> Vec<DeviceInfo> {
            (0..2).map(|i| DeviceInfo { index: i, uuid: format!("GPU-{i}"), ..DeviceInfo::default() }).collect()
        }
        fn driver_version(&self) -> Option<String> {
            Some("fake".into())
        }
        fn fast(&mut self, index: usize) -> Sample {
            self.fast.fetch_add(1, Ordering::Relaxed);
            Sample { device: index as u32, util_pct: Some(50.0), at_ns: crate::clock::monotonic_ns(), ..Sample::default() }
        }
        fn slow(&mut self, _: usize, sample: &mut Sample) {
            self.slow.fetch_add(1, Ordering::Relaxed);
            sample.pcie_rx_bytes_s = Some(1.0);
        }
        fn process_memory(&mut self, index: usize) -> Option<Vec<(u32, u64)>> {
            Some(if index == 1 { vec![(7, 100), (8, 50), (9, 1)] } else { Vec::new() })
        }
    }

    #[test]
    fn samples_stream_at_the_rate_and_slow_reads_are_rare() {
        let (fast, slow) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (f, s) = (fast.clone(), slow.clone());
        let sampler = Sampler::start_with(Duration::from_millis(10), TEST_TIMEOUT, move |tick| {
            tick(&mut Fake { fast: f, slow: s });
            Ok(())
        })
        .expect("starts");
        assert_eq!(sampler.devices.len(), 2);
        std::thread::sleep(Duration::from_millis(300));
        let early = sampler.take_samples();
        assert!(!early.is_empty(), "samples arrive while sampling runs");
        let finished = sampler.finish(vec![7, 8]).expect("finishes");
        let all = early.len() + finished.samples.len();
        let fast_reads = fast.load(Ordering::Relaxed);
        assert_eq!(all as u64, fast_reads, "every reading is handed over once");
        // ~30 ticks in 300 ms on an idle machine; a loaded CI machine ticks less, never more.
        assert!((4..=2 * 32).contains(&fast_reads), "{fast_reads} readings of 2 devices in 300 ms at 100 Hz");
        assert_eq!(slow.load(Ordering::Relaxed), fast_reads / 2 / SLOW_EVERY * 2, "slow reads once per {SLOW_EVERY} ticks per device");
        assert_eq!(finished.devices[1].target_memory_bytes, Some(150), "only the traced pids count");
        assert_eq!(finished.devices[0].target_memory_bytes, Some(0));
        assert_eq!(finished.holders[1].len(), 3);
    }

    #[test]
    fn a_source_that_fails_to_open_says_why() {
        let err = Sampler::start_with(Duration::from_millis(10), TEST_TIMEOUT, |_| Err(NoGpuView::NoDevice)).expect_err("fails");
        assert!(matches!(err, NoGpuView::NoDevice), "{err}");
        assert_eq!(err.trace_note(), "NVML sees no GPU; GPU-side figures are omitted");
    }

    #[test]
    fn a_hung_source_does_not_hang_the_tracer() {
        let began = std::time::Instant::now();
        let err = Sampler::start_with(Duration::from_millis(10), TEST_TIMEOUT, |_| {
            std::thread::sleep(Duration::from_hours(1));
            Ok(())
        })
        .expect_err("times out");
        assert!(matches!(err, NoGpuView::StartTimeout(t) if t == TEST_TIMEOUT), "{err}");
        assert!(began.elapsed() < TEST_TIMEOUT + Duration::from_secs(2));
    }

    #[test]
    fn a_source_that_hangs_at_the_end_is_given_up() {
        struct Stuck;
        impl SampleSource for Stuck {
            fn devices(&self) -> Vec<DeviceInfo> {
                vec![DeviceInfo::default()]
            }
            fn driver_version(&self) -> Option<String> {
                None
            }
            fn fast(&mut self, _: usize) -> Sample {
                Sample::default()
            }
            fn slow(&mut self, _: usize, _: &mut Sample) {}
            fn process_memory(&mut self, _: usize) -> Option<Vec<(u32, u64)>> {
                std::thread::sleep(Duration::from_hours(1));
                None
            }
        }
        let sampler = Sampler::start_with(Duration::from_millis(10), TEST_TIMEOUT, |tick| {
            tick(&mut Stuck);
            Ok(())
        })
        .expect("starts");
        let began = std::time::Instant::now();
        assert!(matches!(sampler.finish(vec![]), Err(NoGpuView::EndTimeout)));
        assert!(began.elapsed() < TEST_TIMEOUT + Duration::from_secs(2));
    }
}
