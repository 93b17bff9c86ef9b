//! Tracepoint field offsets, written by user space from tracefs before the object is loaded.

use gputrace_common::Layout;

#[unsafe(no_mangle)]
static LAYOUT: Layout = Layout::DEFAULT;

#[inline(always)]
pub fn layout() -> Layout {
    // SAFETY: read_volatile keeps the compiler from folding the load-time value.
    unsafe { core::ptr::read_volatile(&raw const LAYOUT) }
}
