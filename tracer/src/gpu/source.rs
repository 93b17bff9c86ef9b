//! What the sampler reads: NVML, or a fake in tests.

use super::{DeviceInfo, Sample};

/// Slow reads (PCIe throughput, per-process utilization) every this many ticks: once a
/// second at the default 10 Hz. NVML measures PCIe over ~20 ms inside the call, and process
/// utilization walks the driver's process list; every tick they would cost the sampler
/// thread a third of its time.
pub const SLOW_EVERY: u64 = 10;

/// Where samples come from.
pub trait SampleSource {
    /// The devices the source sees, each with its index, read once at the start.
    fn devices(&self) -> Vec<DeviceInfo>;
    /// The NVIDIA driver's version; None where the source cannot say.
    fn driver_version(&self) -> Option<String>;
    /// The cheap readings of device `index`.
    fn fast(&mut self, index: usize) -> Sample;
    /// Add the expensive readings to `sample`.
    fn slow(&mut self, index: usize, sample: &mut Sample);
    /// Every process holding memory on device `index`, with the bytes (None: unknown).
    fn process_memory(&mut self, index: usize) -> Option<Vec<(u32, u64)>>;
}
