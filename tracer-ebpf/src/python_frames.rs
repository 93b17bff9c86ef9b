//! A CPython thread's frames read in the probe (issue 38): from the calling thread's state
//! (`PY_THREADS`, which user space keeps from the interpreter's thread list) frame by frame to
//! the outermost, taking each frame's code object and instruction pointer only. User space,
//! which reads the interpreter from outside too, cannot do this itself: by the time it reads,
//! the thread has left the line that made the tensor.
//!
//! The walk is written without branches inside its loop (masks instead): the verifier follows
//! every iteration of a bounded loop, and each branch in it multiplied the paths it walked
//! (a first version with a thread-list walk and early exits took it ~0.46 s to load, against
//! ~0.03 s for all the other programs).

use aya_ebpf::{
    helpers::{bpf_get_prandom_u32, bpf_probe_read_user, bpf_probe_read_user_buf},
    macros::map,
    maps::{HashMap, LruHashMap, PerCpuArray},
};
use gputrace_common::{
    loss,
    python::{fits_window, NO_CFRAME, NO_OWNER, PY_CAPTURE_EVERY_NS, PY_FRAME_WINDOW, PY_MAX_FRAMES},
    EventHeader, PyFrameRef, PyFramesEvent, PyLayout, PyThreadKey, KIND_PY_FRAMES, MAX_PROCESSES, MAX_THREADS,
};

use crate::maps::{count_loss, python_layout, Current, EVENTS};

/// Each Python thread's thread state, by process and thread: written by user space from the
/// interpreter's thread list (`stacks/python_reader.rs`), checked here against the state's own
/// `native_thread_id` before use. The process is part of the key because the thread ids
/// come from the traced processes' memory: one process must not overwrite another's.
#[map]
static PY_THREADS: HashMap<PyThreadKey, u64> = HashMap::with_max_entries(MAX_THREADS, 0);

/// When each process's frames were last read (LRU: exited processes age out).
#[map]
static PY_CAPTURED: LruHashMap<u32, u64> = LruHashMap::with_max_entries(MAX_PROCESSES, 0);

/// One frame's first bytes, read at once (the 512-byte stack has no room to spare).
#[map]
static FRAME_WINDOW: PerCpuArray<[u64; PY_FRAME_WINDOW / 8]> = PerCpuArray::with_max_entries(1, 0);

/// What [`capture`] did.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// The process has no layout: its lines are read from outside.
    NoLayout,
    /// A record went to the ring.
    Sent,
    /// Not due yet, or nothing could be read: the block goes without a line.
    Skipped,
}

#[inline(always)]
fn read_u64(addr: u64) -> u64 {
    // SAFETY: bpf_probe_read_user checks the address; a bad pointer just fails (0).
    unsafe { bpf_probe_read_user(addr as *const u64) }.unwrap_or(0)
}

/// The innermost frame of thread `tid` of process `tgid` (0: none known, or its state is
/// another thread's now).
#[inline(always)]
fn current_frame(l: &PyLayout, tgid: u32, tid: u32) -> u64 {
    // SAFETY: the value is copied out.
    let Some(ts) = (unsafe { PY_THREADS.get(&PyThreadKey { tgid, tid }) }).copied() else { return 0 };
    if read_u64(ts + u64::from(l.thread_tid)) != u64::from(tid) {
        return 0;
    }
    let at = read_u64(ts + u64::from(l.thread_frame));
    if l.cframe_frame == NO_CFRAME || at == 0 {
        return at;
    }
    read_u64(at + u64::from(l.cframe_frame))
}

/// The 8 bytes at `off` of a frame window: `off` is masked to an aligned word inside it (a
/// mask, not a test, so that the verifier sees the bound however the compiler orders it).
#[inline(always)]
fn word(window: &[u64; PY_FRAME_WINDOW / 8], off: u32) -> u64 {
    window[(off as usize / 8) & (PY_FRAME_WINDOW / 8 - 1)]
}

/// The byte at `off` of a frame window.
#[inline(always)]
fn byte(window: &[u64; PY_FRAME_WINDOW / 8], off: u32) -> u32 {
    ((word(window, off) >> ((off & 7) * 8)) & 0xff) as u32
}

/// Read the Python frames of the calling thread (or of its process's main thread, where it
/// has none: autograd's engine works for the call the main thread waits in) for the block at
/// `block`, for one block in `capture_one_in` at random and at most once a process every
/// `PY_CAPTURE_EVERY_NS`, and send them to the ring.
#[inline(always)]
pub fn capture(cur: &Current, now: u64, block: u64) -> Capture {
    let Some(l) = python_layout(cur.tgid) else { return Capture::NoLayout };
    if l.interp == 0 || !fits_window(&l) {
        return Capture::NoLayout;
    }
    // SAFETY: the kernel's pseudo-random generator has no preconditions.
    if l.capture_one_in > 1 && unsafe { bpf_get_prandom_u32() } % l.capture_one_in != 0 {
        return Capture::Skipped;
    }
    // SAFETY: the value is copied out.
    if unsafe { PY_CAPTURED.get(&cur.tgid) }.copied().is_some_and(|t| now.saturating_sub(t) < PY_CAPTURE_EVERY_NS) {
        return Capture::Skipped;
    }
    let _ = PY_CAPTURED.insert(&cur.tgid, &now, 0);
    let mut frame = current_frame(&l, cur.tgid, cur.tid);
    let borrowed = u32::from(frame == 0 && cur.tid != cur.tgid);
    if borrowed == 1 {
        frame = current_frame(&l, cur.tgid, cur.tgid);
    }
    if frame == 0 {
        return Capture::Skipped;
    }
    let Some(window) = FRAME_WINDOW.get_ptr_mut(0) else { return Capture::Skipped };
    let Some(mut entry) = EVENTS.reserve::<PyFramesEvent>(0) else {
        count_loss(loss::RING_FULL);
        return Capture::Skipped;
    };
    let ev = entry.as_mut_ptr();
    let skip = if l.owner_skip == NO_OWNER { u32::MAX } else { l.owner_skip };
    // SAFETY: `ev` is the reserved record, `window` this CPU's scratch value; both sized by
    // their types, and every index below is a constant of the unrolled loop or masked.
    unsafe {
        (*ev).header = EventHeader { kind: KIND_PY_FRAMES, probe: 0, tgid: cur.tgid, tid: cur.tid, ts_ns: now };
        (*ev).block = block;
        (*ev).borrowed = borrowed;
        (*ev).depth = PY_MAX_FRAMES as u32;
        let w = &mut *window;
        for i in 0..PY_MAX_FRAMES {
            // A failed read (the chain's end at 0, or a torn pointer) leaves zeros: the frame
            // reads as none, and so does every one after it.
            let ok = u64::from(frame != 0 && bpf_probe_read_user_buf(frame as *const u8, &mut *window.cast::<[u8; PY_FRAME_WINDOW]>()).is_ok());
            let keep = ok & u64::from(byte(w, l.frame_owner) != skip);
            (*ev).frames[i] = PyFrameRef { code: word(w, l.frame_code) * keep, instr: word(w, l.frame_instr) * keep };
            frame = word(w, l.frame_previous) * ok;
        }
    }
    entry.submit(crate::maps::batched_submit());
    Capture::Sent
}
