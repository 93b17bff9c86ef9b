//! Python frames read in the probe, made into lines (issue 38). The probe takes, per frame,
//! the code object's address and the instruction the frame was at (`PyFramesEvent`); the
//! code object, which lives as long as its function, gives the file, the function and the
//! table that maps an instruction to its line. This file holds where CPython keeps those
//! (per version, [`layout`]), the reading of a code object from the live process, and the
//! line table's decoding (CPython's `Objects/locations.md`: PEP 626's table, the 3.11 format).
//!
//! Nothing read here is trusted: a frame whose code object is not of the interpreter's code
//! type, or whose strings or table do not decode, is dropped, and a record with none left
//! leaves its block to the reads from outside. Offsets that were wrong for the interpreter
//! would so end in lines missing, never in lines made up.

use std::{
    collections::HashMap,
    fs::File,
    os::unix::fs::FileExt,
    rc::Rc,
    time::{Duration, Instant},
};

use gputrace_common::{
    python::{NO_CFRAME, NO_OWNER, PY_CAPTURE_ONE_IN},
    PyFramesEvent, PyLayout,
};

use super::Frame;

/// Where an interpreter of version `major.minor` (x86-64, the default build: not free-threaded,
/// not debug) keeps what the probe and [`CodeReader`] read, with its interpreter at `interp`;
/// None for a version without one (its lines are read from outside only).
#[must_use]
pub fn layout(major: u64, minor: u64, interp: u64) -> Option<(PyLayout, CodeLayout)> {
    // The offsets are those of CPython's own structs (Include/internal/pycore_interp.h,
    // pycore_frame.h, cpython/pystate.h, cpython/code.h, cpython/unicodeobject.h) in each
    // release's headers, and match py-spy 0.4.3's bindings of them. Checked: 3.11 by the tests
    // (the build machine's python3), 3.12.1 and 3.13.0 by hand on the fake rig, 3.12.3 on the
    // H200 (its records checked out, docs/validation.md d41–d43). 3.14's are unchecked: wrong
    // offsets lose lines (the reader drops what does not check out), never invent them.
    let (p, c) = match (major, minor) {
        (3, 11) => (
            PyLayout {
                interp,
                threads_head: 16,
                thread_next: 8,
                thread_tid: 160,
                thread_frame: 56,
                cframe_frame: 8,
                frame_code: 32,
                frame_previous: 48,
                frame_instr: 56,
                frame_owner: 69,
                owner_skip: NO_OWNER,
                capture_one_in: PY_CAPTURE_ONE_IN,
                _reserved: 0,
            },
            CodeLayout { filename: 112, name: 120, first_line: 72, line_table: 136, code: 184, ascii_size: 48, compact_size: 72 },
        ),
        // From 3.12 the interpreter's entry frames are owned by the C stack (owner 3): shims,
        // not the job's code.
        (3, 12) => (
            PyLayout {
                interp,
                threads_head: 72,
                thread_next: 8,
                thread_tid: 144,
                thread_frame: 56,
                cframe_frame: 0,
                frame_code: 0,
                frame_previous: 8,
                frame_instr: 56,
                frame_owner: 70,
                owner_skip: 3,
                capture_one_in: PY_CAPTURE_ONE_IN,
                _reserved: 0,
            },
            CodeLayout { filename: 112, name: 120, first_line: 68, line_table: 136, code: 192, ascii_size: 40, compact_size: 56 },
        ),
        (3, 13) => (
            PyLayout {
                interp,
                threads_head: 7344,
                thread_next: 8,
                thread_tid: 160,
                thread_frame: 72,
                cframe_frame: NO_CFRAME,
                frame_code: 0,
                frame_previous: 8,
                frame_instr: 56,
                frame_owner: 70,
                owner_skip: 3,
                capture_one_in: PY_CAPTURE_ONE_IN,
                _reserved: 0,
            },
            CodeLayout { filename: 112, name: 120, first_line: 68, line_table: 136, code: 200, ascii_size: 40, compact_size: 56 },
        ),
        // 3.14 numbers its owners anew: the C stack's is 4 (3 is the interpreter's own).
        (3, 14) => (
            PyLayout {
                interp,
                threads_head: 7344,
                thread_next: 8,
                thread_tid: 160,
                thread_frame: 72,
                cframe_frame: NO_CFRAME,
                frame_code: 0,
                frame_previous: 8,
                frame_instr: 56,
                frame_owner: 74,
                owner_skip: 4,
                capture_one_in: PY_CAPTURE_ONE_IN,
                _reserved: 0,
            },
            CodeLayout { filename: 112, name: 120, first_line: 68, line_table: 136, code: 208, ascii_size: 40, compact_size: 56 },
        ),
        _ => return None,
    };
    (interp != 0 && gputrace_common::python::fits_window(&p)).then_some((p, c))
}

/// Where a code object keeps what a line needs (offsets in bytes), and how strings are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeLayout {
    /// `co_filename` (a str).
    pub filename: u32,
    /// `co_name` (a str): the function's name, as the reads from outside give it.
    pub name: u32,
    /// `co_firstlineno` (an int).
    pub first_line: u32,
    /// `co_linetable` (bytes).
    pub line_table: u32,
    /// `co_code_adaptive`: the first instruction.
    pub code: u32,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters start.
    pub ascii_size: u32,
    /// `sizeof(PyCompactUnicodeObject)`: where other compact strings' characters start.
    pub compact_size: u32,
}

/// What a code object says about itself.
#[derive(Clone, Debug)]
struct Code {
    name: String,
    file: String,
    first_line: i64,
    table: Vec<u8>,
    /// The address of its first instruction.
    start: u64,
}

impl Code {
    /// The bytes it holds that the process chose (counted against [`MAX_CODE_BYTES`]).
    fn bytes(&self) -> usize {
        self.name.len() + self.file.len() + self.table.len()
    }
}

/// Bytes of a code object read at once: every field [`CodeLayout`] names lies within them.
const CODE_HEAD: usize = 256;
/// The longest string or line table read (a longer one is not a name or a table).
const MAX_READ: u64 = 1 << 16;
/// Code objects, and lines, remembered per process (a job has thousands of functions at most).
const MAX_CODES: usize = 1 << 16;
/// The most bytes of names, file names and line tables remembered per process. Each code
/// object may hold up to [`MAX_READ`] of each, so [`MAX_CODES`] of them could hold gigabytes
/// of whatever a hostile process lays out (issue 56); real ones are short (a training job's
/// few thousand functions hold well under a megabyte). Beyond it a code object is still
/// read for its frame, but not remembered.
pub const MAX_CODE_BYTES: usize = 16 << 20;
/// A remembered code object is checked against its address's memory this often.
const RECHECK: Duration = Duration::from_secs(1);
/// Threads listed at most per process.
const MAX_THREADS: usize = 4096;

/// Reads a CPython process's code objects from its memory (`/proc/PID/mem`), remembering each.
#[derive(Debug)]
pub struct CodeReader {
    mem: File,
    layout: CodeLayout,
    /// The interpreter's code type: the first code object's, once its name said "code".
    code_type: Option<u64>,
    /// What each address held when last read, and when: a code object freed and its address
    /// reused by another (a lambda made again, an `exec`) is read anew after [`RECHECK`].
    codes: HashMap<u64, (Option<Rc<Code>>, Instant)>,
    /// What the code objects in `codes` hold, bytes (at most [`MAX_CODE_BYTES`]).
    code_bytes: usize,
    /// Lines by code object and instruction: a loop's frames come back to the same few.
    lines: HashMap<(u64, u64), Option<u32>>,
}

impl CodeReader {
    /// A reader of process `pid`'s code objects, None where its memory cannot be opened.
    #[must_use]
    pub fn open(pid: u32, layout: CodeLayout) -> Option<Self> {
        let mem = File::open(format!("/proc/{pid}/mem")).ok()?;
        Some(Self { mem, layout, code_type: None, codes: HashMap::new(), code_bytes: 0, lines: HashMap::new() })
    }

    /// The frames of a record, innermost first: those whose code object checks out.
    pub fn frames(&mut self, event: &PyFramesEvent) -> Vec<Frame> {
        let depth = (event.depth as usize).min(event.frames.len());
        event.frames[..depth]
            .iter()
            .filter_map(|f| {
                // 3.14's frames hold a tagged reference: the low bits are flags.
                let addr = f.code & !7;
                let code = self.code(addr)?;
                let line = if let Some(&line) = self.lines.get(&(addr, f.instr)) {
                    line
                } else {
                    let line = line_at(&code.table, code.first_line, unit_of(&code, f.instr)).and_then(|l| u32::try_from(l).ok()).filter(|&l| l > 0);
                    if self.lines.len() < MAX_CODES {
                        self.lines.insert((addr, f.instr), line);
                    }
                    line
                };
                Some(Frame { function: code.name.clone(), file: Some(code.file.clone()), line, module: None })
            })
            .collect()
    }

    fn code(&mut self, addr: u64) -> Option<Rc<Code>> {
        if addr == 0 {
            return None;
        }
        if let Some((known, read_at)) = self.codes.get(&addr) {
            if read_at.elapsed() < RECHECK {
                return known.clone();
            }
        }
        let code = self.read_code(addr).map(Rc::new);
        let before = self.codes.remove(&addr).and_then(|(c, _)| c);
        self.code_bytes -= before.as_deref().map_or(0, Code::bytes);
        // Another object at the address now: its lines are not the old one's.
        let same = match (&before, &code) {
            (Some(a), Some(b)) => a.name == b.name && a.file == b.file && a.first_line == b.first_line && a.table == b.table,
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.lines.retain(|(a, _), _| *a != addr);
        }
        let held = code.as_deref().map_or(0, Code::bytes);
        if self.codes.len() < MAX_CODES && self.code_bytes + held <= MAX_CODE_BYTES {
            self.code_bytes += held;
            self.codes.insert(addr, (code.clone(), Instant::now()));
        }
        code
    }

    fn read_code(&mut self, addr: u64) -> Option<Code> {
        let mut head = [0u8; CODE_HEAD];
        self.mem.read_exact_at(&mut head, addr).ok()?;
        let at = |off: u32| -> u64 { field(&head, off) };
        // Its type must be the interpreter's code type: the first time, by the type's name.
        let ty = at(8);
        match self.code_type {
            Some(known) if known != ty => return None,
            Some(_) => {}
            None => {
                let name_ptr = self.word(ty.checked_add(24)?)?;
                if self.c_string(name_ptr, 16)? != "code" {
                    return None;
                }
                self.code_type = Some(ty);
            }
        }
        let l = self.layout;
        let first_line = i64::from(i32::from_ne_bytes(head[l.first_line as usize..l.first_line as usize + 4].try_into().ok()?));
        Some(Code {
            name: self.str_object(at(l.name))?,
            file: self.str_object(at(l.filename))?,
            first_line,
            table: self.bytes_object(at(l.line_table))?,
            start: addr.checked_add(u64::from(l.code))?,
        })
    }

    fn word(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.mem.read_exact_at(&mut b, addr).ok()?;
        Some(u64::from_ne_bytes(b))
    }

    fn c_string(&self, addr: u64, max: usize) -> Option<String> {
        let mut b = vec![0u8; max];
        let n = self.mem.read_at(&mut b, addr).ok()?;
        let end = b[..n].iter().position(|&c| c == 0)?;
        String::from_utf8(b[..end].to_vec()).ok()
    }

    /// A `str` object's text: compact strings only (every name and file name is one).
    fn str_object(&self, addr: u64) -> Option<String> {
        let mut head = [0u8; 40];
        self.mem.read_exact_at(&mut head, addr).ok()?;
        let length = field(&head, 16);
        let state = u32::from_ne_bytes(head[32..36].try_into().ok()?);
        let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1 == 1, (state >> 6) & 1 == 1);
        if !compact || length > MAX_READ || !matches!(kind, 1 | 2 | 4) {
            return None;
        }
        let data = addr.checked_add(u64::from(if ascii { self.layout.ascii_size } else { self.layout.compact_size }))?;
        let mut b = vec![0u8; usize::try_from(length * u64::from(kind)).ok()?];
        self.mem.read_exact_at(&mut b, data).ok()?;
        match kind {
            1 if ascii => String::from_utf8(b).ok(),
            1 => Some(b.iter().map(|&c| char::from(c)).collect()),
            2 => char::decode_utf16(b.as_chunks::<2>().0.iter().map(|&c| u16::from_ne_bytes(c))).collect::<Result<String, _>>().ok(),
            _ => b.as_chunks::<4>().0.iter().map(|&c| char::from_u32(u32::from_ne_bytes(c))).collect(),
        }
    }

    /// The interpreter's threads, `(native thread id, thread state)`, newest first: its thread
    /// list walked from `layout.interp` (at most [`MAX_THREADS`]; a torn list ends the walk).
    #[must_use]
    pub fn threads(&self, layout: &PyLayout) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        // Every address here is the process's to choose: a sum past u64::MAX ends the walk.
        let mut state = layout.interp.checked_add(u64::from(layout.threads_head)).and_then(|a| self.word(a)).unwrap_or(0);
        while state != 0 && out.len() < MAX_THREADS {
            let Some(tid) = state.checked_add(u64::from(layout.thread_tid)).and_then(|a| self.word(a)).and_then(|t| u32::try_from(t).ok()) else { break };
            if out.iter().any(|&(_, s)| s == state) {
                break;
            }
            out.push((tid, state));
            state = state.checked_add(u64::from(layout.thread_next)).and_then(|a| self.word(a)).unwrap_or(0);
        }
        out
    }

    /// A `bytes` object's contents.
    fn bytes_object(&self, addr: u64) -> Option<Vec<u8>> {
        let length = self.word(addr.checked_add(16)?)?;
        if length > MAX_READ {
            return None;
        }
        let mut b = vec![0u8; usize::try_from(length).ok()?];
        self.mem.read_exact_at(&mut b, addr.checked_add(32)?).ok()?;
        Some(b)
    }
}

/// The instruction (in 2-byte code units) `instr` is in its code object: the frame's
/// `prev_instr` (3.11, 3.12) and `instr_ptr` (3.13 on) both point at the call being made.
/// Before its first instruction (a frame just entered): -1, which the table reads as the
/// function's first line.
fn unit_of(code: &Code, instr: u64) -> i64 {
    let bytes = i64::try_from(instr.wrapping_sub(code.start)).unwrap_or(-2);
    if bytes < 0 {
        return -1;
    }
    bytes / 2
}

/// The 8 bytes at `off` of `head` (0 past its end).
fn field(head: &[u8], off: u32) -> u64 {
    head.get(off as usize..off as usize + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_ne_bytes)
}

/// The line of code unit `unit` by a code object's line table (`co_linetable`, 3.11 on),
/// starting from its first line; None where the table says the instruction has no line, or the
/// table ends first (a torn or foreign table), or its deltas would carry the line past what
/// an `i64` holds (a crafted table: a wrapped sum would be a line made up).
#[must_use]
pub fn line_at(table: &[u8], first_line: i64, unit: i64) -> Option<i64> {
    if unit < 0 {
        return Some(first_line);
    }
    let mut bytes = table.iter().copied();
    let (mut line, mut start) = (first_line, 0i64);
    while let Some(head) = bytes.next() {
        // Every entry starts with its top bit set; its code says how the line moves.
        if head & 0x80 == 0 {
            return None;
        }
        let (code, units) = ((head >> 3) & 15, i64::from(head & 7) + 1);
        let delta = match code {
            // No location.
            15 => None,
            // Long form: the line's delta, then the end line's and both columns.
            14 => {
                let d = signed_varint(&mut bytes)?;
                for _ in 0..3 {
                    varint(&mut bytes)?;
                }
                Some(d)
            }
            // No columns: the line's delta only.
            13 => Some(signed_varint(&mut bytes)?),
            // One line (delta 0, 1 or 2) and two column bytes.
            10..=12 => {
                bytes.next()?;
                bytes.next()?;
                Some(i64::from(code - 10))
            }
            // Short form: the same line, one column byte.
            _ => {
                bytes.next()?;
                Some(0)
            }
        };
        if let Some(d) = delta {
            line = line.checked_add(d)?;
        }
        // `start` grows by at most 8 a byte of the table: it cannot overflow.
        if unit < start + units {
            return delta.map(|_| line);
        }
        start += units;
    }
    None
}

/// A varint of the line table: 6 bits a byte, low bits first, bit 6 set on all but the last.
fn varint(bytes: &mut impl Iterator<Item = u8>) -> Option<u64> {
    let mut b = bytes.next()?;
    let mut value = u64::from(b & 63);
    let mut shift = 0;
    while b & 64 != 0 {
        b = bytes.next()?;
        shift += 6;
        if shift > 60 {
            return None;
        }
        value |= u64::from(b & 63) << shift;
    }
    Some(value)
}

/// A signed varint: the sign in the lowest bit.
fn signed_varint(bytes: &mut impl Iterator<Item = u8>) -> Option<i64> {
    let v = varint(bytes)?;
    let magnitude = i64::try_from(v >> 1).ok()?;
    Some(if v & 1 == 1 { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line table of a function starting at line 10 whose units 0–1 are line 10 (short
    /// form), 2–4 line 11 (one-line form, delta 1), 5 no line, 6–7 line 9 (no-columns form,
    /// delta -2), 8 line 40 (long form, delta 31).
    const TABLE: [u8; 13] = [
        0x80 | 1,             // short form, 2 units
        0x05,                 // its column byte
        0x80 | (11 << 3) | 2, // one line, delta 1, 3 units
        0x01,
        0x04,                 // columns
        0x80 | (15 << 3),     // no location, 1 unit
        0x80 | (13 << 3) | 1, // no columns, 2 units
        0x05,                 // delta -2: 2 << 1 | 1
        0x80 | (14 << 3),     // long form, 1 unit
        62,                   // delta 31: 31 << 1
        0x00,
        0x00,
        0x00, // end-line delta, both columns
    ];

    #[test]
    fn each_form_of_the_line_table_moves_the_line_as_cpython_does() {
        let t = TABLE;
        let lines: Vec<Option<i64>> = (0..9).map(|u| line_at(&t, 10, u)).collect();
        assert_eq!(lines, [Some(10), Some(10), Some(11), Some(11), Some(11), None, Some(9), Some(9), Some(40)]);
        // Before the first instruction: the function's first line. Past the end: none.
        assert_eq!(line_at(&t, 10, -1), Some(10));
        assert_eq!(line_at(&t, 10, 9), None);
    }

    #[test]
    fn a_damaged_table_gives_no_line_rather_than_a_wrong_one() {
        // An entry without its top bit, a form cut short, a varint that never ends.
        assert_eq!(line_at(&[0x05], 1, 0), None);
        assert_eq!(line_at(&[0x80 | (11 << 3)], 1, 0), None);
        assert_eq!(line_at(&[0x80 | (13 << 3), 0x40, 0x40], 1, 0), None);
        assert_eq!(line_at(&[0x80 | (13 << 3), 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x3f], 1, 0), None);
        assert_eq!(line_at(&[], 1, 0), None);
    }

    #[test]
    fn a_table_whose_deltas_pass_i64_gives_no_line() {
        // Two long-form entries of delta 2^62 each: the sum from line 1 passes i64::MAX, and
        // the old `line += d` wrapped it to a negative line.
        let mut entry = vec![0x80 | (14 << 3)];
        entry.extend([0x40; 10]);
        entry.extend([0x08, 0, 0, 0]);
        let table = [entry.clone(), entry].concat();
        assert_eq!(line_at(&table, 1, 0), Some(1 + (1 << 62)));
        assert_eq!(line_at(&table, 1, 1), None);
        assert_eq!(line_at(&table[..15], i64::MAX - 1, 0), None);
    }

    /// A compact ASCII `str` object of CPython 3.12 holding `text`.
    fn str_object(text: &str) -> Vec<u64> {
        let mut o = vec![0u64; 5 + text.len() / 8 + 1];
        o[2] = text.len() as u64;
        // state: kind 1 (bits 2–4), compact (bit 5), ascii (bit 6).
        o[4] = (1 << 2) | (1 << 5) | (1 << 6);
        let bytes: &mut [u8] = bytemuck_bytes(&mut o[5..]);
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        o
    }

    fn bytemuck_bytes(words: &mut [u64]) -> &mut [u8] {
        // SAFETY: u64 words viewed as their bytes: same memory, alignment 1, no padding.
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) }
    }

    #[test]
    fn a_code_object_in_live_memory_gives_its_function_file_and_line() {
        // A 3.12 code object built in this process's own memory, read back through /proc.
        let (_, layout) = layout(3, 12, 0x1000).expect("3.12");
        let name = b"code\0";
        let mut ty = [0u64; 8];
        ty[3] = name.as_ptr() as u64;
        let function = str_object("train_step");
        let file = str_object("/w/train.py");
        let mut table = [0u64; 4 + 2];
        table[2] = TABLE.len() as u64;
        bytemuck_bytes(&mut table[4..])[..TABLE.len()].copy_from_slice(&TABLE);
        let mut code = vec![0u64; 64];
        code[1] = ty.as_ptr() as u64;
        code[layout.filename as usize / 8] = file.as_ptr() as u64;
        code[layout.name as usize / 8] = function.as_ptr() as u64;
        code[layout.line_table as usize / 8] = table.as_ptr() as u64;
        bytemuck_bytes(&mut code)[layout.first_line as usize..layout.first_line as usize + 4].copy_from_slice(&10i32.to_ne_bytes());
        std::hint::black_box((&ty, &table, &code));
        let start = code.as_ptr() as u64 + u64::from(layout.code);
        let mut event = PyFramesEvent {
            header: gputrace_common::EventHeader::default(),
            block: 0,
            depth: 3,
            borrowed: 0,
            frames: [gputrace_common::PyFrameRef::default(); gputrace_common::python::PY_MAX_FRAMES],
        };
        // The call at unit 2 (line 11); a slot with no frame; a code address that is no code.
        event.frames[0] = gputrace_common::PyFrameRef { code: code.as_ptr() as u64, instr: start + 4 };
        event.frames[2] = gputrace_common::PyFrameRef { code: table.as_ptr() as u64, instr: 0 };
        let mut reader = CodeReader::open(std::process::id(), layout).expect("our own memory");
        let frames = reader.frames(&event);
        assert_eq!(frames.len(), 1, "{frames:?}");
        assert_eq!((frames[0].function.as_str(), frames[0].file.as_deref(), frames[0].line), ("train_step", Some("/w/train.py"), Some(11)));
        // Before the first instruction: the function's first line.
        event.frames[0].instr = start - 2;
        assert_eq!(reader.frames(&event)[0].line, Some(10));
        // The object freed and another made at its address: read anew once RECHECK has passed.
        let other = str_object("eval_step");
        code[layout.name as usize / 8] = other.as_ptr() as u64;
        std::hint::black_box(&code);
        assert_eq!(reader.frames(&event)[0].function, "train_step", "remembered meanwhile");
        std::thread::sleep(RECHECK + Duration::from_millis(50));
        assert_eq!(reader.frames(&event)[0].function, "eval_step");
    }

    #[test]
    fn code_objects_remembered_hold_at_most_the_byte_cap() {
        // 300 code objects in this process's memory, each with a line table of MAX_READ bytes
        // (19 MiB together, past MAX_CODE_BYTES): the first are remembered, the rest only read.
        let (_, layout) = layout(3, 12, 0x1000).expect("3.12");
        let name = b"code\0";
        let mut ty = [0u64; 8];
        ty[3] = name.as_ptr() as u64;
        let function = str_object("f");
        let file = str_object("/w/x.py");
        let mut table = vec![0u64; 4 + usize::try_from(MAX_READ).expect("fits") / 8];
        table[2] = MAX_READ;
        let codes: Vec<Vec<u64>> = (0..300)
            .map(|_| {
                let mut code = vec![0u64; 64];
                code[1] = ty.as_ptr() as u64;
                code[layout.filename as usize / 8] = file.as_ptr() as u64;
                code[layout.name as usize / 8] = function.as_ptr() as u64;
                code[layout.line_table as usize / 8] = table.as_ptr() as u64;
                code
            })
            .collect();
        std::hint::black_box((&ty, &table, &codes, &function, &file));
        let mut reader = CodeReader::open(std::process::id(), layout).expect("our own memory");
        for code in &codes {
            assert_eq!(reader.code(code.as_ptr() as u64).expect("a code object").table.len(), 1 << 16, "read whether remembered or not");
        }
        let held: usize = reader.codes.values().filter_map(|(c, _)| c.as_deref()).map(Code::bytes).sum();
        assert!(held <= MAX_CODE_BYTES, "{held} bytes remembered");
        assert_eq!(held, reader.code_bytes);
        assert!(reader.codes.len() > 200 && reader.codes.len() < 300, "{} remembered", reader.codes.len());
        // An entry read again past RECHECK replaces its old bytes, not adds to them.
        let first = codes[0].as_ptr() as u64;
        reader.codes.get_mut(&first).expect("remembered").1 -= RECHECK;
        reader.code(first).expect("read again");
        assert_eq!(reader.code_bytes, held);
    }

    #[test]
    fn addresses_near_the_top_of_memory_end_reads_instead_of_wrapping() {
        let (_, layout) = layout(3, 12, 0x1000).expect("3.12");
        let mut reader = CodeReader::open(std::process::id(), layout).expect("our own memory");
        assert!(reader.bytes_object(u64::MAX - 8).is_none());
        assert!(reader.str_object(u64::MAX - 8).is_none());
        // A code object whose type pointer is near u64::MAX: `ty + 24` would overflow.
        let mut code = vec![0u64; 64];
        code[1] = u64::MAX - 8;
        std::hint::black_box(&code);
        assert!(reader.code(code.as_ptr() as u64).is_none());
        let (p, _) = super::layout(3, 12, u64::MAX - 8).expect("3.12");
        assert!(reader.threads(&p).is_empty());
    }

    #[test]
    fn varints_carry_six_bits_a_byte() {
        // 300 = 0b100_101100: 0x2c with the continuation bit, then 4.
        assert_eq!(varint(&mut [0x2c | 0x40, 0x04].into_iter()), Some(300));
        assert_eq!(signed_varint(&mut [7].into_iter()), Some(-3));
        assert_eq!(signed_varint(&mut [6].into_iter()), Some(3));
    }

    #[test]
    fn only_versions_with_a_layout_get_one_and_every_layout_fits_the_probes_window() {
        for minor in 11..=14 {
            let (p, _) = layout(3, minor, 0x1000).expect("a layout");
            assert!(gputrace_common::python::fits_window(&p), "3.{minor}");
            assert!(p.frame_owner < 128 && p.frame_code.is_multiple_of(8));
            assert_eq!(p.interp, 0x1000);
        }
        assert!(layout(3, 10, 0x1000).is_none());
        assert!(layout(3, 15, 0x1000).is_none());
        assert!(layout(2, 7, 0x1000).is_none());
        // No interpreter found: no layout either.
        assert!(layout(3, 12, 0).is_none());
    }
}
