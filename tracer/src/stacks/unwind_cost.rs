//! What unwinding one copied stack costs in user space (`cargo xtask bench`,
//! docs/benchmarks.md): this process's own stack, `depth` calls deep, copied as the kernel
//! copies a traced thread's (registers and the top 8 KiB), taken again and again through
//! the same path a drained record takes (walk, frame-pointer fallback, interning, counting).

use std::time::Instant;

use gputrace_common::{host::stacks::HOST, stack_source, EventHeader, UserStackHead, KIND_USER_STACK, STACK_COPY_BYTES};

use super::{copied::CopiedStacks, unwind::Regs};
use crate::decode::UserStack;

/// This thread's registers at the call, and a copy of its stack from there up.
#[inline(never)]
pub(crate) fn copy_own_stack() -> (Regs, Vec<u8>) {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers into locals; no memory is touched.
    unsafe {
        std::arch::asm!("lea {ip}, [rip]", "mov {sp}, rsp", "mov {bp}, rbp", ip = out(reg) ip, sp = out(reg) sp, bp = out(reg) bp);
    }
    let mut bytes = vec![0u8; STACK_COPY_BYTES];
    // Only as far as this thread's stack is mapped: the kernel's copy stops there too.
    let len = own_stack_end().map_or(0, |end| usize::try_from(end.saturating_sub(sp)).unwrap_or(0).min(STACK_COPY_BYTES));
    // SAFETY: `len` bytes from `sp` lie within this thread's mapped stack (checked against
    // its mapping's end above); the destination holds STACK_COPY_BYTES ≥ len.
    unsafe { std::ptr::copy_nonoverlapping(sp as usize as *const u8, bytes.as_mut_ptr(), len) };
    bytes.truncate(len);
    (Regs { ip, sp, bp }, bytes)
}

/// The end of the mapping this thread's stack pointer is in.
fn own_stack_end() -> Option<u64> {
    let here = 0u8;
    let sp = std::ptr::from_ref(&here) as usize as u64;
    let text = crate::discover::procfs::read_text("/proc/self/maps").ok()?;
    crate::discover::maps::parse(&text).0.into_iter().find(|m| m.contains(sp)).map(|m| m.end)
}

/// Copy the stack `depth` calls below here.
#[inline(never)]
pub(crate) fn copy_at_depth(depth: usize) -> (Regs, Vec<u8>) {
    if depth == 0 {
        return std::hint::black_box(copy_own_stack());
    }
    let r = copy_at_depth(std::hint::black_box(depth - 1));
    std::hint::black_box(r)
}

/// One measurement.
#[derive(Clone, Copy, Debug)]
pub struct UnwindCost {
    /// Frames the stack unwound to.
    pub frames: usize,
    /// Whether the walk reached the root.
    pub complete: bool,
    /// Mean nanoseconds per stack taken, after a first (cold) one.
    pub ns_per_stack: f64,
}

/// Take a stack copied `depth` calls deep `iterations` times; the cost per stack.
#[must_use]
pub fn measure(depth: usize, iterations: u32) -> UnwindCost {
    // On a thread of its own, as a traced job's workers are: its stack's top is near.
    std::thread::spawn(move || {
        let (regs, bytes) = copy_at_depth(depth);
        let head = UserStackHead {
            header: EventHeader { kind: KIND_USER_STACK, probe: HOST, tgid: std::process::id(), tid: 1, ts_ns: 0 },
            id: 0,
            fp_stack_id: -1,
            ip: regs.ip,
            sp: regs.sp,
            bp: regs.bp,
            source: stack_source::CPU,
            len: bytes.len() as u32,
            ..UserStackHead::default()
        };
        let copy = UserStack { event: head, stack: &bytes };
        let mut stacks = CopiedStacks::default();
        stacks.take(&copy, |_| Vec::new());
        let started = Instant::now();
        for _ in 0..iterations {
            stacks.take(std::hint::black_box(&copy), |_| Vec::new());
        }
        let ns_per_stack = started.elapsed().as_nanos() as f64 / f64::from(iterations.max(1));
        let frames = stacks.samples(Vec::new()).first().map_or(0, |(k, _)| stacks.ips(k.stack_id).len());
        UnwindCost { frames, complete: stacks.counts.complete > 0, ns_per_stack }
    })
    .join()
    .unwrap_or(UnwindCost { frames: 0, complete: false, ns_per_stack: f64::NAN })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_deep_own_stack_unwinds_to_its_root() {
        let cost = super::measure(20, 10);
        assert!(cost.frames > 20 && cost.complete, "{cost:?}");
    }
}
