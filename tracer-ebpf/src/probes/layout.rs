//! Where the raw tracepoints' arguments keep what we read (offsets into `task_struct`,
//! `request`, `gendisk`), written by user space from the kernel's BTF before the object is
//! loaded.

use aya_ebpf::helpers::bpf_probe_read_kernel;
use gputrace_common::Layout;

#[unsafe(no_mangle)]
static LAYOUT: Layout = Layout::UNKNOWN;

#[inline(always)]
pub fn layout() -> Layout {
    // SAFETY: read_volatile keeps the compiler from folding the load-time value.
    unsafe { core::ptr::read_volatile(&raw const LAYOUT) }
}

/// The member at `offset` of the kernel structure at `base`: `None` where this kernel has no
/// such member, the pointer is null, or the read fails.
#[inline(always)]
pub fn member<T>(base: u64, offset: u32) -> Option<T> {
    if base == 0 || offset == Layout::NONE {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one fails the read, no more.
    unsafe { bpf_probe_read_kernel((base + u64::from(offset)) as *const T) }.ok()
}

/// The pid (kernel thread id) of the `task_struct` at `task`, 0 where it cannot be read.
#[inline(always)]
pub fn task_pid(l: &Layout, task: u64) -> u32 {
    member::<i32>(task, l.task_pid).unwrap_or(0) as u32
}
