//! A CPython thread's frames read in the probe (issue 38): from the process's interpreter
//! (`PYTHON_READ`'s layout) to the calling thread's state, then frame by frame to the
//! outermost, taking each frame's code object and instruction pointer only. User space, which
//! reads the interpreter from outside too, cannot do this itself: by the time it reads, the
//! thread has left the line that made the tensor.

use aya_ebpf::{
    helpers::{bpf_probe_read_user, bpf_probe_read_user_buf},
    macros::map,
    maps::{LruHashMap, PerCpuArray},
};
use gputrace_common::{
    loss,
    python::{fits_window, NO_CFRAME, NO_OWNER, PY_CAPTURE_EVERY_NS, PY_FRAME_WINDOW, PY_MAX_FRAMES, PY_MAX_THREADS, PY_MISS_RETRY_NS},
    EventHeader, PyFrameRef, PyFramesEvent, PyLayout, PyThreadSlot, KIND_PY_FRAMES, MAX_PROCESSES, MAX_THREADS,
};

use crate::maps::{count_loss, python_layout, Current, EVENTS};

/// Each thread's thread state, as last found (LRU: exited threads age out).
#[map]
static PY_THREADS: LruHashMap<u32, PyThreadSlot> = LruHashMap::with_max_entries(MAX_THREADS, 0);

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
    /// A record went to the ring (possibly with no frames: the thread had none).
    Sent,
    /// Not due yet, or nothing could be read: the block goes without a line.
    Skipped,
}

#[inline(always)]
fn read_u64(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_user checks the address; a bad pointer just fails.
    unsafe { bpf_probe_read_user(addr as *const u64) }.ok()
}

/// The thread state of thread `tid`, cached; a thread without one is looked up again only
/// after `PY_MISS_RETRY_NS`.
#[inline(always)]
fn thread_state(l: &PyLayout, tid: u32, now: u64) -> Option<u64> {
    // SAFETY: the value is copied out.
    if let Some(slot) = unsafe { PY_THREADS.get(&tid) }.copied() {
        if slot.tstate == 0 {
            if now.saturating_sub(slot.checked_ns) < PY_MISS_RETRY_NS {
                return None;
            }
        } else if read_u64(slot.tstate + u64::from(l.thread_tid)).is_some_and(|t| t == u64::from(tid)) {
            // Still this thread's (a state freed and reused names another thread).
            return Some(slot.tstate);
        }
    }
    let mut ts = read_u64(l.interp + u64::from(l.threads_head)).unwrap_or(0);
    let mut found = 0;
    for _ in 0..PY_MAX_THREADS {
        if ts == 0 {
            break;
        }
        if read_u64(ts + u64::from(l.thread_tid)).is_some_and(|t| t == u64::from(tid)) {
            found = ts;
            break;
        }
        ts = read_u64(ts + u64::from(l.thread_next)).unwrap_or(0);
    }
    let _ = PY_THREADS.insert(&tid, &PyThreadSlot { tstate: found, checked_ns: now }, 0);
    (found != 0).then_some(found)
}

/// The innermost frame of thread state `ts` (0: none).
#[inline(always)]
fn current_frame(l: &PyLayout, ts: u64) -> u64 {
    let Some(at) = read_u64(ts + u64::from(l.thread_frame)) else { return 0 };
    if l.cframe_frame == NO_CFRAME || at == 0 {
        return at;
    }
    read_u64(at + u64::from(l.cframe_frame)).unwrap_or(0)
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
/// `block`, at most once a process every `PY_CAPTURE_EVERY_NS`, and send them to the ring.
#[inline(always)]
pub fn capture(cur: &Current, now: u64, block: u64) -> Capture {
    let Some(l) = python_layout(cur.tgid) else { return Capture::NoLayout };
    if l.interp == 0 || !fits_window(&l) {
        return Capture::NoLayout;
    }
    // SAFETY: the value is copied out.
    if unsafe { PY_CAPTURED.get(&cur.tgid) }.copied().is_some_and(|t| now.saturating_sub(t) < PY_CAPTURE_EVERY_NS) {
        return Capture::Skipped;
    }
    let _ = PY_CAPTURED.insert(&cur.tgid, &now, 0);
    let mut borrowed = 0;
    let mut frame = match thread_state(&l, cur.tid, now) {
        Some(ts) => current_frame(&l, ts),
        None => 0,
    };
    if frame == 0 && cur.tid != cur.tgid {
        borrowed = 1;
        frame = match thread_state(&l, cur.tgid, now) {
            Some(ts) => current_frame(&l, ts),
            None => 0,
        };
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
    let mut depth: u32 = 0;
    // SAFETY: `ev` is the reserved record, `window` this CPU's scratch value; both sized by
    // their types, and every index below is bounded by them.
    unsafe {
        (*ev).header = EventHeader { kind: KIND_PY_FRAMES, probe: 0, tgid: cur.tgid, tid: cur.tid, ts_ns: now };
        (*ev).block = block;
        (*ev).borrowed = borrowed;
        for i in 0..PY_MAX_FRAMES {
            (*ev).frames[i] = PyFrameRef::default();
        }
        for _ in 0..PY_MAX_FRAMES {
            if frame == 0 || bpf_probe_read_user_buf(frame as *const u8, &mut *window.cast::<[u8; PY_FRAME_WINDOW]>()).is_err() {
                break;
            }
            let w = &*window;
            let owner = byte(w, l.frame_owner);
            if l.owner_skip == NO_OWNER || owner != l.owner_skip {
                let d = depth as usize;
                if d < PY_MAX_FRAMES {
                    (*ev).frames[d] = PyFrameRef { code: word(w, l.frame_code), instr: word(w, l.frame_instr) };
                    depth += 1;
                }
            }
            frame = word(w, l.frame_previous);
        }
        (*ev).depth = depth;
    }
    entry.submit(crate::maps::batched_submit());
    Capture::Sent
}
