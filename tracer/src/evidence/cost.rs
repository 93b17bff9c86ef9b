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
    fn four_mib_pinned_and_pageable() {
        // 4 MiB at 25 GB/s ≈ 0.17 ms; at 1.4 GB/s ≈ 3.0 ms (docs/facts.md's pageable D2H).
        assert_eq!(transfer_ns(4 << 20, PINNED_BYTES_PER_S) / 10_000, 17);
        assert_eq!(transfer_ns(4 << 20, PAGEABLE_BYTES_PER_S) / 100_000, 30);
    }
}
