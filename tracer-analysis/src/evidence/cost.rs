//! What a copy costs by its own doing, estimated per call. A copy call or the synchronize
//! after it also waits for every piece of GPU work queued before the copy: in a GPU-bound
//! loop that ends each step with `.cpu()`, nearly all of that wait is the GPU finishing the
//! step, which is the GPU's time, not the copy's. The copy's own part is at most its bytes
//! over the bus (or through the driver's staging buffer) plus a fixed cost, so each call is
//! charged the smaller of its wait and that transfer time.

/// Pinned (DMA) transfer rate for the estimate, bytes per second. A gen4 x16 PCI Express link moves about
/// 25 GB/s in practice; the H200's gen5 link moved 4 MiB pinned in 0.08 ms (52 GB/s,
/// docs/facts.md). Estimating at the slower rate blames the copy generously, never too little.
pub const PINNED_BYTES_PER_S: f64 = 25e9;
/// Bytes per second one PCIe lane carries after line coding, by generation (1 to 6).
const PCIE_LANE_BYTES_PER_S: [f64; 6] = [0.25e9, 0.5e9, 0.985e9, 1.969e9, 3.938e9, 7.563e9];
/// The share of a link's rate a pinned DMA copy reaches: 52 GB/s for 4 MiB on the H200's
/// gen5 x16 link (63 GB/s), docs/facts.md.
const PCIE_DMA_EFFICIENCY: f64 = 0.83;

/// What a pinned copy moves per second over a PCIe link of generation `gen` and `width`
/// lanes; None for a link NVML did not describe.
#[must_use]
pub fn pcie_bytes_per_s(gen: u32, width: u32) -> Option<f64> {
    let lane = *PCIE_LANE_BYTES_PER_S.get(usize::try_from(gen).ok()?.checked_sub(1)?)?;
    (width > 0 && width <= 32).then(|| lane * f64::from(width) * PCIE_DMA_EFFICIENCY)
}

/// Pageable transfer rate for the estimate, bytes per second: the host stages the data
/// through a pinned buffer. The slowest staging measured on the GPU machine: pageable D2H of
/// 4 MiB in 3.0 ms, 1.4 GB/s (docs/facts.md; pageable H2D was 12 GB/s).
pub const PAGEABLE_BYTES_PER_S: f64 = 1.4e9;
/// A copy's fixed cost (submission, DMA setup, completion), ns: the order of a CUDA call's
/// latency, which matters only for copies of a few bytes.
pub const COPY_FIXED_NS: u64 = 10_000;

/// The transfer time of `bytes` at `bytes_per_s`, with the fixed cost.
#[must_use]
pub fn transfer_ns(bytes: u64, bytes_per_s: f64) -> u64 {
    COPY_FIXED_NS + (bytes as f64 * 1e9 / bytes_per_s) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gen5_x16_link_moves_what_the_h200_measured() {
        let gen5 = pcie_bytes_per_s(5, 16).expect("gen5 x16");
        assert!((gen5 / 1e9 - 52.3).abs() < 0.5, "{gen5}");
        assert_eq!(pcie_bytes_per_s(0, 16), None);
        assert_eq!(pcie_bytes_per_s(7, 16), None);
        assert_eq!(pcie_bytes_per_s(4, 0), None);
    }

    #[test]
    fn four_mib_pinned_and_pageable() {
        // 4 MiB at 25 GB/s ≈ 0.17 ms; at 1.4 GB/s ≈ 3.0 ms (docs/facts.md's pageable D2H).
        assert_eq!(transfer_ns(4 << 20, PINNED_BYTES_PER_S) / 10_000, 17);
        assert_eq!(transfer_ns(4 << 20, PAGEABLE_BYTES_PER_S) / 100_000, 30);
    }
}
