//! CPython frames read inside a probe, at the very call (issue 38): where an interpreter's
//! thread states and frames lie in a traced process ([`PyLayout`], set by user space from the
//! interpreter's version), and the record of one thread's frames ([`PyFramesEvent`]). A read
//! from outside comes a fraction of a millisecond late, and by then a thread that made a tensor
//! has moved on to the next line; the probe reads where the thread is. It takes only each
//! frame's code object and instruction pointer: user space turns them into a file, function
//! and line later, from code objects that live as long as their functions.

use crate::event::EventHeader;

/// Where the frames of one CPython process are: its main interpreter's address and the
/// offsets (bytes) of the fields a walk from it to a thread's frames reads. Per version,
/// from CPython's headers (docs/architecture.md, "Python frames in the probe").
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyLayout {
    /// The main `PyInterpreterState`; 0: the process is read from outside only (its version
    /// has no layout here), and its allocations wake the reader at once instead.
    pub interp: u64,
    /// `PyInterpreterState.threads.head`: the newest thread state (user space walks the list
    /// and gives the probe each thread's, `PY_THREADS`: a walk in the probe would cost the
    /// verifier a loop per thread).
    pub threads_head: u32,
    /// `PyThreadState.next`.
    pub thread_next: u32,
    /// `PyThreadState.native_thread_id`: the thread's kernel id, which the probe checks.
    pub thread_tid: u32,
    /// `PyThreadState.cframe` (3.11, 3.12) or `.current_frame` (3.13 on).
    pub thread_frame: u32,
    /// `_PyCFrame.current_frame`, or [`NO_CFRAME`] where `thread_frame` is the frame itself.
    pub cframe_frame: u32,
    /// `_PyInterpreterFrame.f_code` (`f_executable` from 3.13, a tagged reference in 3.14).
    pub frame_code: u32,
    /// `_PyInterpreterFrame.previous`: the caller's frame.
    pub frame_previous: u32,
    /// `_PyInterpreterFrame.prev_instr` (3.11, 3.12) or `.instr_ptr` (3.13 on).
    pub frame_instr: u32,
    /// `_PyInterpreterFrame.owner` (one byte).
    pub frame_owner: u32,
    /// The owner value of frames the C stack owns (the interpreter's entry shims, 3.12 on),
    /// skipped; [`NO_OWNER`] where there are none.
    pub owner_skip: u32,
    /// One block in this many has its frames read ([`PY_CAPTURE_ONE_IN`]; 1: every one, for
    /// tests of short jobs, `GPUTRACE_PY_FRAMES_ONE_IN`).
    pub capture_one_in: u32,
    /// Explicit padding, always 0.
    #[expect(
        clippy::pub_underscore_fields,
        reason = "explicit padding of a wire struct; public so both sides can build it with a literal"
    )]
    pub _reserved: u32,
}
const _: () = assert!(core::mem::size_of::<PyLayout>() == 8 + 4 * 12);

/// The key of `PY_THREADS`: a thread state is found by process and thread. The thread id in
/// a thread state comes from the traced process's own memory, so keyed by it alone one
/// process could name another's threads and overwrite their entries (issue 56); the process
/// half is the kernel's, from the pid user space reads.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PyThreadKey {
    /// The process (thread group id).
    pub tgid: u32,
    /// The thread's kernel id.
    pub tid: u32,
}

const _: () = assert!(core::mem::size_of::<PyThreadKey>() == 8);

/// [`PyLayout::cframe_frame`] where the thread state points at the frame directly.
pub const NO_CFRAME: u32 = u32::MAX;
/// [`PyLayout::owner_skip`] where no frame is skipped.
pub const NO_OWNER: u32 = u32::MAX;
/// Bytes of a frame read at once: every field the walk takes lies within them. A power of
/// two, so that the probe bounds each offset by a mask the verifier can follow.
pub const PY_FRAME_WINDOW: usize = 128;
/// Frames read at most, innermost first: a module's forward is three frames deep per level of
/// `nn.Module` nesting, and the job's own line is under them.
pub const PY_MAX_FRAMES: usize = 24;
/// One block in this many, drawn at random, has its frames read: the walk costs ~2.6 µs, and
/// blocks come at a tensor's rate. A leak's blocks stay live step after step, so a sample of
/// them names it. At random, not every n-th nor the first after a pause: a step's blocks come
/// in the same order every step, and on the H200 a sample of the first block after each
/// millisecond never once caught the planted leak's (d43).
pub const PY_CAPTURE_ONE_IN: u32 = 16;
/// And at most one a process this often (10 000 a second).
pub const PY_CAPTURE_EVERY_NS: u64 = 100_000;
/// Whether `layout`'s frame offsets are ones the probe can read: its words 8-byte aligned and
/// inside [`PY_FRAME_WINDOW`] (user space sends no layout that fails this).
#[must_use]
pub const fn fits_window(l: &PyLayout) -> bool {
    window_word(l.frame_code) && window_word(l.frame_previous) && window_word(l.frame_instr) && l.frame_owner < PY_FRAME_WINDOW as u32
}

/// An 8-byte aligned word inside [`PY_FRAME_WINDOW`].
const fn window_word(off: u32) -> bool {
    off.is_multiple_of(8) && off + 8 <= PY_FRAME_WINDOW as u32
}

/// One frame as the probe saw it: its code object (a tagged reference in 3.14: low bits to
/// clear) and the instruction the frame was at.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PyFrameRef {
    /// The frame's code object (0: no frame).
    pub code: u64,
    /// Where the frame was: its `prev_instr` or `instr_ptr`.
    pub instr: u64,
}
const _: () = assert!(core::mem::size_of::<PyFrameRef>() == 16);

/// The Python frames of the thread that had a caching allocator hand out the block at
/// `block`, read in the probe (`header.ts_ns` is the block record's own timestamp, which ties
/// them). Consumed live, never recorded: its addresses mean something only in that process.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyFramesEvent {
    /// `KIND_PY_FRAMES`, for the allocating thread.
    pub header: EventHeader,
    /// The block's address (the allocator report's argument 0).
    pub block: u64,
    /// Frame slots filled, innermost first (at most [`PY_MAX_FRAMES`]): a slot whose code is 0
    /// holds no frame (a frame skipped, or past the outermost).
    pub depth: u32,
    /// 1: the frames are the main thread's, read for a thread with none of its own (its work
    /// is done for the Python call the main thread waits in).
    pub borrowed: u32,
    /// The frames, innermost first.
    pub frames: [PyFrameRef; PY_MAX_FRAMES],
}
const _: () = assert!(core::mem::size_of::<PyFramesEvent>() == 24 + 16 + 16 * PY_MAX_FRAMES);
