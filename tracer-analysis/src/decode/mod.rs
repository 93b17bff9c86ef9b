//! Pure decoding of ring-buffer records into typed events. Input is untrusted bytes (a
//! recording may be damaged or crafted), so every length is checked and nothing panics.

use gputrace_common::{
    CallEvent, EventHeader, IdleEndEvent, IoEvent, LongSleepEvent, PyFramesEvent, SchedFinalEvent, TaskEvent, UserStackHead, KIND_CALL,
    KIND_IDLE_END, KIND_IO, KIND_LONG_SLEEP, KIND_PY_FRAMES, KIND_SCHED_FINAL, KIND_TASK_EXEC, KIND_TASK_EXIT, KIND_TASK_NEW,
    KIND_USER_STACK, STACK_COPY_BYTES,
};

/// One decoded record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A probed CUDA call, written at its return (`KIND_CALL`).
    Call(CallEvent),
    /// The first launch on a thread after its device queue was drained (`KIND_IDLE_END`).
    IdleEnd(IdleEndEvent),
    /// A traced process created a thread or process (`KIND_TASK_NEW`).
    TaskNew(TaskEvent),
    /// A traced task exited (`KIND_TASK_EXIT`).
    TaskExit(TaskEvent),
    /// A traced task called exec (`KIND_TASK_EXEC`).
    TaskExec(TaskEvent),
    /// A traced thread's final scheduler accounting, as it died (`KIND_SCHED_FINAL`).
    SchedFinal(SchedFinalEvent),
    /// A traced thread woke from a long off-CPU spell (`KIND_LONG_SLEEP`).
    LongSleep(LongSleepEvent),
    /// A block request of the traced tree completed (`KIND_IO`).
    Io(IoEvent),
}

impl Event {
    /// The header every record starts with: its kind, probe id, tgid and tid, and monotonic timestamp.
    #[must_use]
    pub fn header(&self) -> &EventHeader {
        match self {
            Self::Call(e) => &e.header,
            Self::IdleEnd(e) => &e.header,
            Self::TaskNew(e) | Self::TaskExit(e) | Self::TaskExec(e) => &e.header,
            Self::SchedFinal(e) => &e.header,
            Self::LongSleep(e) => &e.header,
            Self::Io(e) => &e.header,
        }
    }
}

/// Why a record's bytes are not a valid record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The record is too short to hold an [`EventHeader`].
    #[error("record of {len} bytes is shorter than a header")]
    NoHeader {
        /// The record's length, in bytes.
        len: usize,
    },
    /// The record's length is not the size of its kind's struct.
    #[error("record of kind {kind} has {len} bytes, expected {expected}")]
    WrongSize {
        /// The kind its header gives.
        kind: u32,
        /// The record's length, in bytes.
        len: usize,
        /// The size of that kind's struct, in bytes.
        expected: usize,
    },
    /// The header's kind is none this tracer knows.
    #[error("unknown record kind {kind}")]
    UnknownKind {
        /// The kind its header gives.
        kind: u32,
    },
}

/// Marker for the `#[repr(C)]` plain-integer records that may be read from any bytes.
trait Record: Copy {}
impl Record for EventHeader {}
impl Record for CallEvent {}
impl Record for IdleEndEvent {}
impl Record for TaskEvent {}
impl Record for SchedFinalEvent {}
impl Record for IoEvent {}
impl Record for LongSleepEvent {}
impl Record for UserStackHead {}
impl Record for PyFramesEvent {}

fn read<T: Record>(bytes: &[u8], kind: u32) -> Result<T, DecodeError> {
    let expected = size_of::<T>();
    if bytes.len() != expected {
        return Err(DecodeError::WrongSize { kind, len: bytes.len(), expected });
    }
    // SAFETY: the length was checked; `T` is a `Record`: `#[repr(C)]` integers only, valid
    // for every bit pattern; read_unaligned has no alignment requirement.
    Ok(unsafe { bytes.as_ptr().cast::<T>().read_unaligned() })
}

/// Decode one record.
pub fn decode(bytes: &[u8]) -> Result<Event, DecodeError> {
    if bytes.len() < size_of::<EventHeader>() {
        return Err(DecodeError::NoHeader { len: bytes.len() });
    }
    let header: EventHeader = read(&bytes[..size_of::<EventHeader>()], 0)?;
    let kind = header.kind;
    Ok(match kind {
        KIND_CALL => Event::Call(read(bytes, kind)?),
        KIND_IDLE_END => Event::IdleEnd(read(bytes, kind)?),
        KIND_TASK_NEW => Event::TaskNew(read(bytes, kind)?),
        KIND_TASK_EXIT => Event::TaskExit(read(bytes, kind)?),
        KIND_TASK_EXEC => Event::TaskExec(read(bytes, kind)?),
        KIND_SCHED_FINAL => Event::SchedFinal(read(bytes, kind)?),
        KIND_LONG_SLEEP => Event::LongSleep(read(bytes, kind)?),
        KIND_IO => Event::Io(read(bytes, kind)?),
        _ => return Err(DecodeError::UnknownKind { kind }),
    })
}

/// A copied user stack (`KIND_USER_STACK`), read in place: at 8 KiB it is no [`Event`]
/// (those are copied about), and it is consumed as it is drained, never recorded.
#[derive(Clone, Copy, Debug)]
pub struct UserStack<'a> {
    /// The record's fixed part: the thread's user registers, the copied length and the
    /// frame-pointer stack that stands in when unwinding fails.
    pub event: UserStackHead,
    /// The copied bytes from `event.sp` up (`event.len` of them, at most what the record holds).
    pub stack: &'a [u8],
}

/// The copied user stack in `bytes`, if it is one (None: another kind of record). A record of
/// the wrong size is an error, as for every kind.
#[must_use]
pub fn user_stack(bytes: &[u8]) -> Option<Result<UserStack<'_>, DecodeError>> {
    let head_len = size_of::<UserStackHead>();
    let header: EventHeader = read(bytes.get(..size_of::<EventHeader>())?, 0).ok()?;
    if header.kind != KIND_USER_STACK {
        return None;
    }
    let expected = head_len + STACK_COPY_BYTES;
    if bytes.len() != expected {
        return Some(Err(DecodeError::WrongSize { kind: header.kind, len: bytes.len(), expected }));
    }
    let event: UserStackHead = match read(&bytes[..head_len], KIND_USER_STACK) {
        Ok(e) => e,
        Err(e) => return Some(Err(e)),
    };
    let len = (event.len as usize).min(STACK_COPY_BYTES);
    Some(Ok(UserStack { event, stack: &bytes[head_len..head_len + len] }))
}

/// The Python frames read in a probe (`KIND_PY_FRAMES`), if `bytes` is such a record (None:
/// another kind). Consumed as it is drained, never recorded, like a copied stack.
#[must_use]
pub fn py_frames(bytes: &[u8]) -> Option<Result<PyFramesEvent, DecodeError>> {
    let header: EventHeader = read(bytes.get(..size_of::<EventHeader>())?, 0).ok()?;
    (header.kind == KIND_PY_FRAMES).then(|| read(bytes, KIND_PY_FRAMES))
}

/// The bytes of a record, as the kernel writes them (used by tests and recordings).
#[must_use]
pub fn encode(event: &Event) -> Vec<u8> {
    fn bytes_of<T: Record>(v: &T) -> Vec<u8> {
        // SAFETY: `T` is plain `#[repr(C)]` integers without padding (sizes pinned in
        // gputrace-common), so all its bytes are initialised.
        unsafe { std::slice::from_raw_parts(std::ptr::from_ref(v).cast::<u8>(), size_of::<T>()) }.to_vec()
    }
    match event {
        Event::Call(e) => bytes_of(e),
        Event::IdleEnd(e) => bytes_of(e),
        Event::TaskNew(e) | Event::TaskExit(e) | Event::TaskExec(e) => bytes_of(e),
        Event::SchedFinal(e) => bytes_of(e),
        Event::LongSleep(e) => bytes_of(e),
        Event::Io(e) => bytes_of(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u32) -> EventHeader {
        EventHeader { kind, probe: 19, tgid: 100, tid: 101, ts_ns: 123_456_789 }
    }

    #[test]
    fn every_kind_round_trips() {
        let events = [
            Event::Call(CallEvent { header: header(KIND_CALL), start_ns: 5, args: [1, 2, 3, 4, 5], ret: 0, out: 77 }),
            Event::IdleEnd(IdleEndEvent { header: header(KIND_IDLE_END), drained_at_ns: 9 }),
            Event::TaskNew(TaskEvent { header: header(KIND_TASK_NEW), child_tid: 7, _reserved: 0, flags: 0x11 }),
            Event::TaskExit(TaskEvent { header: header(KIND_TASK_EXIT), ..TaskEvent::default() }),
            Event::TaskExec(TaskEvent { header: header(KIND_TASK_EXEC), ..TaskEvent::default() }),
            Event::SchedFinal(SchedFinalEvent {
                header: header(KIND_SCHED_FINAL),
                sched: gputrace_common::ThreadSched { tgid: 100, spent_ns: [7, 0, 0, 1], ..Default::default() },
            }),
            Event::Io(IoEvent { header: header(KIND_IO), start_ns: 1, dev: 0xfd_00001, bytes: 4096, rwbs: u32::from(b'R'), error: 0 }),
            Event::LongSleep(LongSleepEvent {
                header: header(KIND_LONG_SLEEP),
                start_ns: 3,
                wake: gputrace_common::WakeKey { tid: 101, waker_tgid: 0, stack_id: -1, in_cuda: 1, _reserved: 0 },
                blocked: 1,
                _reserved: 0,
            }),
        ];
        for e in events {
            assert_eq!(decode(&encode(&e)), Ok(e));
        }
    }

    #[test]
    fn empty_truncated_oversize_and_unknown_are_errors() {
        assert_eq!(decode(&[]), Err(DecodeError::NoHeader { len: 0 }));
        let call = encode(&Event::Call(CallEvent { header: header(KIND_CALL), ..CallEvent::default() }));
        let n = call.len();
        assert!(matches!(decode(&call[..n - 1]), Err(DecodeError::WrongSize { kind: KIND_CALL, .. })));
        let mut long = call.clone();
        long.push(0);
        assert!(matches!(decode(&long), Err(DecodeError::WrongSize { .. })));
        let unknown = encode(&Event::IdleEnd(IdleEndEvent { header: header(999), drained_at_ns: 0 }));
        assert_eq!(decode(&unknown), Err(DecodeError::UnknownKind { kind: 999 }));
    }

    #[test]
    fn a_copied_stack_is_read_in_place_and_its_length_bounded() {
        let head = UserStackHead { header: header(KIND_USER_STACK), id: 9, fp_stack_id: -1, ip: 1, sp: 2, bp: 3, source: 1, len: u32::MAX, ..UserStackHead::default() };
        let mut bytes = {
            // SAFETY: plain integers without padding (size pinned in gputrace-common).
            unsafe { std::slice::from_raw_parts(std::ptr::from_ref(&head).cast::<u8>(), size_of::<UserStackHead>()) }.to_vec()
        };
        bytes.resize(size_of::<UserStackHead>() + STACK_COPY_BYTES, 7);
        let copy = user_stack(&bytes).expect("a stack record").expect("well formed");
        assert_eq!((copy.event.id, copy.stack.len()), (9, STACK_COPY_BYTES));
        bytes.pop();
        assert!(matches!(user_stack(&bytes), Some(Err(DecodeError::WrongSize { .. }))));
        assert!(user_stack(&encode(&Event::IdleEnd(IdleEndEvent { header: header(KIND_IDLE_END), drained_at_ns: 0 }))).is_none());
        assert!(user_stack(&[1, 2]).is_none());
    }

    #[test]
    fn python_frames_are_read_whole_or_refused() {
        let mut event = PyFramesEvent {
            header: header(KIND_PY_FRAMES),
            block: 0x7000,
            depth: 2,
            borrowed: 0,
            frames: [gputrace_common::PyFrameRef::default(); gputrace_common::python::PY_MAX_FRAMES],
        };
        event.frames[1].code = 0x5000;
        // SAFETY: plain integers without padding (size pinned in gputrace-common).
        let bytes = unsafe { std::slice::from_raw_parts(std::ptr::from_ref(&event).cast::<u8>(), size_of::<PyFramesEvent>()) }.to_vec();
        assert_eq!(py_frames(&bytes), Some(Ok(event)));
        assert!(matches!(py_frames(&bytes[..bytes.len() - 1]), Some(Err(DecodeError::WrongSize { kind: KIND_PY_FRAMES, .. }))));
        assert!(py_frames(&encode(&Event::IdleEnd(IdleEndEvent { header: header(KIND_IDLE_END), drained_at_ns: 0 }))).is_none());
        assert!(py_frames(&[1, 2]).is_none());
        // Not an event of the recording: decode() refuses it like any unknown kind.
        assert_eq!(decode(&bytes), Err(DecodeError::UnknownKind { kind: KIND_PY_FRAMES }));
    }

    #[test]
    fn any_bytes_decode_without_panicking() {
        // A cheap deterministic sweep over lengths and contents.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = decode(&bytes);
        }
    }
}
