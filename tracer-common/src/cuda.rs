//! The parts of the CUDA driver ABI that the kernel side reads through pointers: the
//! parameter structs of the 2D/3D copies (`cuMemcpy2D_v2`, `cuMemcpy3D_v2` and their forms).
//!
//! The mirrors below are `#[repr(C)]` copies of `CUDA_MEMCPY2D_v2` and `CUDA_MEMCPY3D_v2` from
//! CUDA 13's `cuda.h` (x86-64: `size_t`, pointers and `CUdeviceptr` are 8 bytes, the
//! `CUmemorytype` enum is 4 bytes and is followed by 4 bytes of padding). They are never
//! built or read whole: the eBPF stack is 512 bytes and only a few fields are needed, so the
//! kernel side reads single fields at the offsets [`MEMCPY2D`] and [`MEMCPY3D`] take from
//! these mirrors with `offset_of!`. The fake CUDA's C header asserts the same offsets with
//! the C compiler.

use core::mem::{offset_of, size_of};

/// `CUmemorytype` (cuda.h).
pub mod memory_type {
    /// Host memory: the copy's end is `srcHost` / `dstHost`.
    pub const HOST: u64 = 1;
    /// Device memory: the copy's end is `srcDevice` / `dstDevice`.
    pub const DEVICE: u64 = 2;
    /// A CUDA array: device memory with an opaque layout.
    pub const ARRAY: u64 = 3;
    /// A unified-addressing pointer, host or device: which one is decided from the address.
    pub const UNIFIED: u64 = 4;
}

/// Where a 2D/3D copy's entry probe stores what it read from the parameter struct, in
/// [`crate::InflightCall::args`] (and so in [`crate::CallEvent::args`]).
pub mod slot {
    /// Source `CUmemorytype` (0 if the struct could not be read).
    pub const SRC_TYPE: usize = 0;
    /// Source pointer: `srcHost` for host memory, else `srcDevice`.
    pub const SRC_PTR: usize = 1;
    /// Destination `CUmemorytype` (0 if the struct could not be read).
    pub const DST_TYPE: usize = 2;
    /// Destination pointer: `dstHost` for host memory, else `dstDevice`.
    pub const DST_PTR: usize = 3;
    /// `WidthInBytes * Height` (2D) or `WidthInBytes * Height * Depth` (3D).
    pub const BYTES: usize = 4;
    /// Device allocations (`Family::Alloc`) take at most four arguments; the entry puts the
    /// caller's user stack id here instead (`u64::MAX`: none taken), so each allocation and
    /// each failed one can be charged to the code that asked for it.
    pub const ALLOC_STACK: usize = 4;
}

/// `CUDA_MEMCPY2D_v2` (cuda.h), field for field in snake case.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Memcpy2D {
    /// `srcXInBytes`: the source's first column, in bytes.
    pub src_x_in_bytes: u64,
    /// `srcY`: the source's first row.
    pub src_y: u64,
    /// `srcMemoryType`: one of [`memory_type`].
    pub src_memory_type: u32,
    /// The 4 bytes of padding the C compiler puts after `srcMemoryType`.
    pub src_pad: u32,
    /// `srcHost`: the source in host memory.
    pub src_host: u64,
    /// `srcDevice`: the source in device memory (or a unified address).
    pub src_device: u64,
    /// `srcArray`: the source CUDA array.
    pub src_array: u64,
    /// `srcPitch`: bytes per row of the source.
    pub src_pitch: u64,
    /// `dstXInBytes`: the destination's first column, in bytes.
    pub dst_x_in_bytes: u64,
    /// `dstY`: the destination's first row.
    pub dst_y: u64,
    /// `dstMemoryType`: one of [`memory_type`].
    pub dst_memory_type: u32,
    /// The 4 bytes of padding the C compiler puts after `dstMemoryType`.
    pub dst_pad: u32,
    /// `dstHost`: the destination in host memory.
    pub dst_host: u64,
    /// `dstDevice`: the destination in device memory (or a unified address).
    pub dst_device: u64,
    /// `dstArray`: the destination CUDA array.
    pub dst_array: u64,
    /// `dstPitch`: bytes per row of the destination.
    pub dst_pitch: u64,
    /// `WidthInBytes`: bytes copied per row.
    pub width_in_bytes: u64,
    /// `Height`: rows copied.
    pub height: u64,
}
const _: () = assert!(size_of::<Memcpy2D>() == 128);

/// `CUDA_MEMCPY3D_v2` (cuda.h), field for field in snake case.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Memcpy3D {
    /// `srcXInBytes`: the source's first column, in bytes.
    pub src_x_in_bytes: u64,
    /// `srcY`: the source's first row.
    pub src_y: u64,
    /// `srcZ`: the source's first slice.
    pub src_z: u64,
    /// `srcLOD`: the source's level of detail.
    pub src_lod: u64,
    /// `srcMemoryType`: one of [`memory_type`].
    pub src_memory_type: u32,
    /// The 4 bytes of padding the C compiler puts after `srcMemoryType`.
    pub src_pad: u32,
    /// `srcHost`: the source in host memory.
    pub src_host: u64,
    /// `srcDevice`: the source in device memory (or a unified address).
    pub src_device: u64,
    /// `srcArray`: the source CUDA array.
    pub src_array: u64,
    /// `reserved0`: must be NULL.
    pub reserved0: u64,
    /// `srcPitch`: bytes per row of the source.
    pub src_pitch: u64,
    /// `srcHeight`: rows per slice of the source.
    pub src_height: u64,
    /// `dstXInBytes`: the destination's first column, in bytes.
    pub dst_x_in_bytes: u64,
    /// `dstY`: the destination's first row.
    pub dst_y: u64,
    /// `dstZ`: the destination's first slice.
    pub dst_z: u64,
    /// `dstLOD`: the destination's level of detail.
    pub dst_lod: u64,
    /// `dstMemoryType`: one of [`memory_type`].
    pub dst_memory_type: u32,
    /// The 4 bytes of padding the C compiler puts after `dstMemoryType`.
    pub dst_pad: u32,
    /// `dstHost`: the destination in host memory.
    pub dst_host: u64,
    /// `dstDevice`: the destination in device memory (or a unified address).
    pub dst_device: u64,
    /// `dstArray`: the destination CUDA array.
    pub dst_array: u64,
    /// `reserved1`: must be NULL.
    pub reserved1: u64,
    /// `dstPitch`: bytes per row of the destination.
    pub dst_pitch: u64,
    /// `dstHeight`: rows per slice of the destination.
    pub dst_height: u64,
    /// `WidthInBytes`: bytes copied per row.
    pub width_in_bytes: u64,
    /// `Height`: rows copied per slice.
    pub height: u64,
    /// `Depth`: slices copied.
    pub depth: u64,
}
const _: () = assert!(size_of::<Memcpy3D>() == 200);

/// Byte offsets of the fields a copy's entry probe reads from its parameter struct.
/// Memory types are 4-byte reads; every other field is an 8-byte read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyLayout {
    /// `srcMemoryType`.
    pub src_type: u64,
    /// `srcHost`.
    pub src_host: u64,
    /// `srcDevice`.
    pub src_device: u64,
    /// `dstMemoryType`.
    pub dst_type: u64,
    /// `dstHost`.
    pub dst_host: u64,
    /// `dstDevice`.
    pub dst_device: u64,
    /// `WidthInBytes`.
    pub width: u64,
    /// `Height`.
    pub height: u64,
    /// 3D copies only.
    pub depth: Option<u64>,
}

/// `offset_of!` as the `u64` the probes add to a user-space address.
macro_rules! at {
    ($t:ty, $field:ident) => {
        offset_of!($t, $field) as u64
    };
}

/// Where a 2D copy's entry reads its `CUDA_MEMCPY2D`.
pub const MEMCPY2D: CopyLayout = CopyLayout {
    src_type: at!(Memcpy2D, src_memory_type),
    src_host: at!(Memcpy2D, src_host),
    src_device: at!(Memcpy2D, src_device),
    dst_type: at!(Memcpy2D, dst_memory_type),
    dst_host: at!(Memcpy2D, dst_host),
    dst_device: at!(Memcpy2D, dst_device),
    width: at!(Memcpy2D, width_in_bytes),
    height: at!(Memcpy2D, height),
    depth: None,
};

/// Where a 3D copy's entry reads its `CUDA_MEMCPY3D`.
pub const MEMCPY3D: CopyLayout = CopyLayout {
    src_type: at!(Memcpy3D, src_memory_type),
    src_host: at!(Memcpy3D, src_host),
    src_device: at!(Memcpy3D, src_device),
    dst_type: at!(Memcpy3D, dst_memory_type),
    dst_host: at!(Memcpy3D, dst_host),
    dst_device: at!(Memcpy3D, dst_device),
    width: at!(Memcpy3D, width_in_bytes),
    height: at!(Memcpy3D, height),
    depth: Some(at!(Memcpy3D, depth)),
};

// The offsets cuda.h gives on x86-64, spelled out once so a mistake in a mirror cannot pass.
const _: () = assert!(
    MEMCPY2D.src_type == 16
        && MEMCPY2D.src_host == 24
        && MEMCPY2D.src_device == 32
        && MEMCPY2D.dst_type == 72
        && MEMCPY2D.dst_host == 80
        && MEMCPY2D.dst_device == 88
        && MEMCPY2D.width == 112
        && MEMCPY2D.height == 120
);
const _: () = assert!(
    MEMCPY3D.src_type == 32
        && MEMCPY3D.src_host == 40
        && MEMCPY3D.src_device == 48
        && MEMCPY3D.dst_type == 120
        && MEMCPY3D.dst_host == 128
        && MEMCPY3D.dst_device == 136
        && MEMCPY3D.width == 176
        && MEMCPY3D.height == 184
        && matches!(MEMCPY3D.depth, Some(192))
);

/// Whether a synchronous 2D/3D copy with these saved arguments leaves the device queue
/// drained: one from device memory (or an array) into host memory returns only once the
/// copy is done, like `cuMemcpyDtoH_v2` (CUDA driver API docs, "API synchronization
/// behavior"). A unified end may be either kind of memory and the kernel side cannot tell
/// which, so it never counts: the queue-idle time stays a lower bound.
#[must_use]
pub const fn device_to_host(args: &[u64; crate::CALL_ARGS]) -> bool {
    args[slot::DST_TYPE] == memory_type::HOST && matches!(args[slot::SRC_TYPE], memory_type::DEVICE | memory_type::ARRAY)
}
