//! Copies of user stacks for unwinding in user space (perf's `--call-graph dwarf` design,
//! docs/architecture.md "Native stacks"): the thread's user registers and the top of its user
//! stack go into one ring record, which user space unwinds with the call frame information of
//! the mapped files. The kernel's own walk (`bpf_get_stackid`) follows frame pointers only,
//! and most optimized code has none.

use aya_ebpf::{
    bindings::task_struct,
    helpers::{
        bpf_ktime_get_ns, bpf_probe_read_user,
        generated::{self, bpf_get_current_task_btf, bpf_get_smp_processor_id, bpf_probe_read_kernel, bpf_task_pt_regs},
    },
    macros::map,
    maps::{LruHashMap, PerCpuArray},
};
use gputrace_common::{
    host::{launch_age, stacks::OFF_CPU_RETAKE_NS},
    loss, stack_source, CallSite, CallStack, EventHeader, ThreadCounters, UserStackEvent, COPIED_STACK_BIT,
    KIND_USER_STACK, MAX_THREADS, RING_BYTES, STACK_COPY_BYTES,
};

use crate::maps::{count_loss, Current, BPF_RB_AVAIL_DATA, EVENTS, THREADS};

/// Stacks copied so far on each CPU: with the CPU number, a copy's unique id.
#[map]
static COPIES: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// At the entry of a call with a return probe (`sp`: the entry's stack pointer, which points
/// at the return address), remember in the thread's counters `c` where its return address is
/// and what it is, before the return probe replaces it (`ThreadCounters::returns`).
/// Returns the return address (0 where it could not be read).
#[inline(always)]
pub fn remember_return(c: *mut ThreadCounters, sp: u64) -> u64 {
    // SAFETY: bpf_probe_read_user checks the address; a bad pointer just fails.
    let Ok(value) = (unsafe { bpf_probe_read_user(sp as *const u64) }) else { return 0 };
    // SAFETY: the thread's own map entry; only its own probes write it.
    unsafe {
        let r = &mut (*c).returns;
        r.slots[1] = r.slots[0];
        r.values[1] = r.values[0];
        r.slots[0] = sp;
        r.values[0] = value;
    }
    value
}

/// The stack last copied at each call site (`CallSite`): a loop that alternates a copy and a
/// sync reuses each one's for `OFF_CPU_RETAKE_NS`. LRU: sites not called again age out.
#[map]
static CALL_SITES: LruHashMap<CallSite, CallStack> = LruHashMap::with_max_entries(4 * MAX_THREADS, 0);

/// At the entry of a sync or a device-to-host copy: the caller's stack (frame-pointer id
/// `fp_stack_id`, and a copy) into the thread's counters `c` (`ThreadCounters::call_stack`),
/// unless this call site's was copied less than `OFF_CPU_RETAKE_NS` ago (a loop that syncs
/// 100,000 times a second copies 100 stacks a second per site).
#[inline(always)]
pub fn take_call_stack(cur: &Current, c: *mut ThreadCounters, probe: u32, sp: u64, ret: u64, fp_stack_id: impl FnOnce() -> i64) {
    // SAFETY: reading the monotonic clock has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let site = CallSite { tid: cur.tid, _reserved: 0, sp, ret };
    // SAFETY: a copy of the site's entry.
    let stack_id = match unsafe { CALL_SITES.get(&site) } {
        Some(c) if now.saturating_sub(c.taken_ns) < OFF_CPU_RETAKE_NS => c.stack_id,
        _ => {
            let fp = fp_stack_id();
            let stack_id = copy_user_stack(cur, stack_source::CALL, launch_age::UNKNOWN, probe, fp).map_or(fp, |id| id as i64);
            let _ = CALL_SITES.insert(&site, &CallStack { stack_id, probe, _reserved: 0, taken_ns: now }, 0);
            stack_id
        }
    };
    // SAFETY: the thread's own map entry; only its own probes write it.
    unsafe { (*c).call_stack = CallStack { stack_id, probe, _reserved: 0, taken_ns: now } };
}

/// Word offsets of `ip`, `sp` and `bp` in x86-64's `struct pt_regs` (the ptrace ABI,
/// arch/x86/include/uapi/asm/ptrace.h: r15 r14 r13 r12 bp bx r11 r10 r9 r8 ax cx dx si di
/// orig_ax ip cs flags sp ss).
const PT_REGS_BP: usize = 4;
const PT_REGS_IP: usize = 16;
const PT_REGS_SP: usize = 19;

const PAGE: u64 = 4096;
const _: () = assert!(STACK_COPY_BYTES as u64 == 2 * PAGE);

/// One word of the current task's saved user registers.
#[inline(always)]
fn user_reg(regs: *const u64, word: usize) -> u64 {
    let mut value = 0u64;
    // SAFETY: `regs` is the kernel's `pt_regs` of the current task (bpf_task_pt_regs); the
    // helper checks the read and leaves 0 on failure.
    unsafe { bpf_probe_read_kernel((&raw mut value).cast(), 8, regs.wrapping_add(word).cast()) };
    value
}

/// Copy the current thread's user registers and stack top into a ring record, and return
/// its id (None: the ring was full, counted as `loss::STACK_COPY_FAILED`). `fp_stack_id` is
/// the frame-pointer stack of the same moment; `probe` the call the thread is in; `age` a CPU
/// sample's `launch_age`.
#[inline(always)]
pub fn copy_user_stack(cur: &Current, source: u16, age: u16, probe: u32, fp_stack_id: i64) -> Option<u64> {
    // The user registers saved at the thread's entry into the kernel (a syscall, the sampling
    // interrupt, the uprobe's trap): where its user code stands, whatever context this is.
    // SAFETY: no preconditions; the verifier types the returned pointer.
    let task: *mut task_struct = unsafe { bpf_get_current_task_btf() };
    // SAFETY: `task` is the current task, as the helper requires.
    let regs = unsafe { bpf_task_pt_regs(task) } as *const u64;
    // Copies are the bulkiest records: they may fill half the ring, never the rest, which
    // is kept for the call records whose loss would make the counts incomplete.
    if EVENTS.query(BPF_RB_AVAIL_DATA) >= u64::from(RING_BYTES / 2) {
        count_loss(loss::STACK_COPY_FAILED);
        return None;
    }
    let Some(mut entry) = EVENTS.reserve::<UserStackEvent>(0) else {
        count_loss(loss::STACK_COPY_FAILED);
        return None;
    };
    let copies = COPIES.get_ptr_mut(0);
    let count = match copies {
        // SAFETY: a per-CPU slot, touched only by this CPU with preemption disabled.
        Some(c) => unsafe {
            *c += 1;
            *c
        },
        None => 0,
    };
    // SAFETY: no preconditions.
    let cpu = u64::from(unsafe { bpf_get_smp_processor_id() });
    let id = COPIED_STACK_BIT | (cpu & 0xff) << 40 | (count & ((1 << 40) - 1));
    let sp = user_reg(regs, PT_REGS_SP);
    let record = entry.as_mut_ptr();
    // SAFETY: `record` points into the reserved ring space of one `UserStackEvent`; fields
    // are written one by one (the struct is far larger than the 512-byte eBPF stack).
    unsafe {
        (*record).head.header = EventHeader { kind: KIND_USER_STACK, probe, tgid: cur.tgid, tid: cur.tid, ts_ns: bpf_ktime_get_ns() };
        (*record).head.id = id;
        (*record).head.fp_stack_id = fp_stack_id;
        (*record).head.ip = user_reg(regs, PT_REGS_IP);
        (*record).head.sp = sp;
        (*record).head.bp = user_reg(regs, PT_REGS_BP);
        (*record).head.source = source;
        (*record).head.launch_age = age;
        (*record).head.returns = THREADS.get(&cur.tid).map(|c| c.returns).unwrap_or_default();
    }
    // The rest of the stack pointer's page, then the next page if it is mapped: two reads of
    // at most a page each, so that a stack whose top is near needs no size search.
    let first = PAGE - (sp & (PAGE - 1));
    let mut len = 0u32;
    if first <= PAGE {
        // SAFETY: `stack` has room for `first` ≤ one page from its start; the helper checks
        // the user address and fails on a fault.
        let dst = unsafe { (&raw mut (*record).stack).cast::<u8>() };
        // SAFETY: as above.
        if unsafe { generated::bpf_probe_read_user(dst.cast(), first as u32, sp as *const _) } == 0 {
            len = first as u32;
            // SAFETY: `first` ≤ one page, so the second page fits in the two-page `stack`.
            if unsafe { generated::bpf_probe_read_user(dst.wrapping_add(first as usize).cast(), PAGE as u32, (sp + first) as *const _) } == 0 {
                len += PAGE as u32;
            }
        }
    }
    // SAFETY: as above.
    unsafe { (*record).head.len = len };
    entry.submit(if unwinder_due(cur.tgid) { crate::maps::FORCE_WAKEUP } else { crate::maps::batched_submit() });
    Some(id)
}

/// At most this often a process's copied stack wakes the reader at once.
const UNWINDER_REFRESH_NS: u64 = 20_000_000;

/// When each process's copied stack last woke the reader (LRU: exited processes age out).
#[map]
static UNWINDER_WOKEN: LruHashMap<u32, u64> = LruHashMap::with_max_entries(1024, 0);

/// Whether this copy should reach user space at once: user space unwinds a copy with the
/// process's memory map, read when its first copy arrives (and again when an address falls
/// outside it). A short job's copies left for the next batch would find the process gone
/// and be walked by frame pointers alone, skipping the frames of the libraries built
/// without them (a fake driver's spin in libc read as the job's own code). One prompt copy
/// per process per `UNWINDER_REFRESH_NS` keeps the map read while the process lives.
#[inline(always)]
fn unwinder_due(tgid: u32) -> bool {
    // SAFETY: reading the monotonic clock has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: the value is copied out.
    let last = unsafe { UNWINDER_WOKEN.get(&tgid) }.copied();
    if last.is_some_and(|t| now.saturating_sub(t) < UNWINDER_REFRESH_NS) {
        return false;
    }
    let _ = UNWINDER_WOKEN.insert(&tgid, &now, 0);
    true
}
