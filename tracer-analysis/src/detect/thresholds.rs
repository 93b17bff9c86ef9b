//! The thresholds that more than one rule reads, and that `sweep` judges its windows by, with
//! their origin. A threshold only one diagnosis reads lives in that diagnosis's file.

use super::MEDIUM;

/// A launch rate the host path sustains only with tiny kernels. docs/facts.md: one eager PyTorch
/// `add_` costs ~6.8 µs of host time (≈150 k launches/s at best); the launch-bound MLP on the
/// GPU machine ran 15–25 k/s, GEMM-bound jobs a few hundred to a few thousand.
pub const LAUNCH_BOUND_RATE: f64 = 5_000.0;
/// Below this fraction of the window blocked on the GPU, the host is not GPU-limited.
pub const HOST_WAIT_LOW: f64 = 0.30;
/// At or above this fraction blocked on the GPU, the GPU is the limiter (healthy).
pub const HOST_WAIT_HIGH: f64 = 0.50;
/// Below this NVML utilization the GPU mostly has nothing to run.
pub const GPU_IDLE_UTIL: f64 = 0.5;
/// Below this fraction blocked on the GPU, a job that syncs finds the GPU done each time.
pub const HOST_WAIT_NONE: f64 = 0.05;
/// Syncs per second that amount to "every step" for a training loop (≥ 10 steps/s).
pub const SYNCS_PER_S: f64 = 10.0;
/// Alloc + free calls per second that mean the caching allocator is not caching. Only calls
/// that pair up count: allocations never freed are growth (`detect::memory_view`), not churn.
pub const ALLOCS_PER_S: f64 = 20.0;

/// A CUDA thread waiting for a CPU this much of the window is starved (it is runnable: the
/// work is there, the CPU is not). 10 % is where the text report starts calling it medium.
pub const RUNQUEUE_STARVED: f64 = MEDIUM;
/// A CUDA thread blocked in uninterruptible sleep (`D`, I/O) this much of the window stalls.
pub const BLOCKED_STALL: f64 = MEDIUM;
/// A CUDA thread sleeping outside CUDA calls this much of the window waits for its input.
pub const SLEEP_STARVED: f64 = 0.25;
/// GPU activity (GPM SM, else utilization) below which the GPU is waiting, not working.
pub const GPU_WAITING: f64 = 0.5;
/// A worker on a CPU this much of the window is CPU-bound (decoding, augmenting).
pub const WORKER_BUSY: f64 = 0.7;
/// A worker blocked this much of the window waits on the disk.
pub const WORKER_BLOCKED: f64 = 0.3;
