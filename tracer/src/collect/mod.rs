//! Collecting from the kernel: draining the ring buffer into decoded events, and the live
//! `/proc/PID/maps` lookup that classifies copy buffers.
pub mod host_memory;
pub mod ring;
