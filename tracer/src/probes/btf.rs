//! The running kernel's BTF (`/sys/kernel/btf/vmlinux`), read for the little the raw
//! tracepoints need: where a few members lie in `task_struct`, `request` and `gendisk`, and how
//! many arguments a tracepoint passes. The format is the kernel's (Documentation/bpf/btf.rst):
//! a header, then types (each a fixed part and a kind's trailer), then their names. Read
//! defensively all the same: a truncated or unknown section is an error, never a panic.

use std::ops::Range;

const MAGIC: u16 = 0xeb9f;

/// Why the kernel's BTF could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BtfError {
    /// Shorter than its header, a section it declares or a type's record.
    #[error("too short for its header or a section it declares")]
    Truncated,
    /// Not BTF, or BTF of the other byte order.
    #[error("not BTF (magic {0:#06x}; this host's byte order expected)")]
    Magic(u16),
    /// A kind of type newer than this reader: what follows it cannot be found.
    #[error("type {id} is of kind {kind}, which this reader does not know")]
    UnknownKind {
        /// The type's id.
        id: usize,
        /// Its kind's number.
        kind: u8,
    },
}

/// One type: its name, kind, member count and the bytes of its trailer.
#[derive(Clone, Debug)]
struct Type {
    name_off: u32,
    kind: u8,
    vlen: u16,
    kind_flag: bool,
    /// A size (integers, structures) or another type's id (pointers, typedefs, qualifiers).
    size_or_id: u32,
    trailer: Range<usize>,
}

const INT: u8 = 1;
const PTR: u8 = 2;
const STRUCT: u8 = 4;
const UNION: u8 = 5;
const ENUM: u8 = 6;
const TYPEDEF: u8 = 8;
const VOLATILE: u8 = 9;
const CONST: u8 = 10;
const RESTRICT: u8 = 11;
const FUNC_PROTO: u8 = 13;
const FLOAT: u8 = 16;
const TYPE_TAG: u8 = 18;
const ENUM64: u8 = 19;

/// A member found in a structure: where it starts and its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Bytes from the start of the outermost structure searched.
    pub offset: u32,
    /// The member's type.
    pub type_id: u32,
}

/// A parsed BTF blob.
#[derive(Debug)]
pub struct Btf {
    data: Vec<u8>,
    /// Index 0 is the `void` type, which has no record; ids index this directly.
    types: Vec<Option<Type>>,
    strings: Range<usize>,
}

fn u32_at(data: &[u8], at: usize) -> Result<u32, BtfError> {
    data.get(at..at + 4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]])).ok_or(BtfError::Truncated)
}

/// The size of a kind's trailer, after the 12-byte fixed part.
fn trailer_len(kind: u8, vlen: usize) -> Option<usize> {
    Some(match kind {
        // INT's encoding; VAR's linkage; DECL_TAG's component index.
        1 | 14 | 17 => 4,
        // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG.
        2 | 7..=12 | 16 | 18 => 0,
        // ARRAY: element type, index type, count.
        3 => 12,
        // STRUCT, UNION: (name, type, offset) a member; DATASEC: (type, offset, size); ENUM64.
        4 | 5 | 15 | 19 => 12 * vlen,
        // ENUM: (name, value); FUNC_PROTO: (name, type) a parameter.
        6 | 13 => 8 * vlen,
        _ => return None,
    })
}

impl Btf {
    /// The running kernel's own.
    pub fn kernel() -> std::io::Result<Result<Self, BtfError>> {
        std::fs::read("/sys/kernel/btf/vmlinux").map(Self::parse)
    }

    /// The types of a BTF blob (its names are read from it as asked).
    pub fn parse(data: Vec<u8>) -> Result<Self, BtfError> {
        let magic = data.get(0..2).map(|b| u16::from_ne_bytes([b[0], b[1]])).ok_or(BtfError::Truncated)?;
        if magic != MAGIC {
            return Err(BtfError::Magic(magic));
        }
        let hdr_len = u32_at(&data, 4)? as usize;
        let (type_off, type_len) = (u32_at(&data, 8)? as usize, u32_at(&data, 12)? as usize);
        let (str_off, str_len) = (u32_at(&data, 16)? as usize, u32_at(&data, 20)? as usize);
        let section = |off: usize, len: usize| {
            let start = hdr_len.checked_add(off)?;
            let end = start.checked_add(len)?;
            (end <= data.len()).then_some(start..end)
        };
        let type_range = section(type_off, type_len).ok_or(BtfError::Truncated)?;
        let strings = section(str_off, str_len).ok_or(BtfError::Truncated)?;
        let mut types = vec![None];
        let mut at = type_range.start;
        while at < type_range.end {
            if at + 12 > type_range.end {
                return Err(BtfError::Truncated);
            }
            let info = u32_at(&data, at + 4)?;
            let (kind, vlen) = (((info >> 24) & 0x1f) as u8, (info & 0xffff) as u16);
            let len = trailer_len(kind, usize::from(vlen)).ok_or(BtfError::UnknownKind { id: types.len(), kind })?;
            let trailer = at + 12..at + 12 + len;
            if trailer.end > type_range.end {
                return Err(BtfError::Truncated);
            }
            types.push(Some(Type { name_off: u32_at(&data, at)?, kind, vlen, kind_flag: info >> 31 == 1, size_or_id: u32_at(&data, at + 8)?, trailer: trailer.clone() }));
            at = trailer.end;
        }
        Ok(Self { data, types, strings })
    }

    fn name(&self, off: u32) -> &[u8] {
        let Some(start) = self.strings.start.checked_add(off as usize).filter(|s| *s < self.strings.end) else { return b"" };
        let rest = &self.data[start..self.strings.end];
        &rest[..rest.iter().position(|b| *b == 0).unwrap_or(rest.len())]
    }

    fn ty(&self, id: u32) -> Option<&Type> {
        self.types.get(id as usize)?.as_ref()
    }

    /// The id of the first type of `kind` named `name` (a structure's definition, not a
    /// forward declaration: those are another kind).
    fn named(&self, kind: u8, name: &str) -> Option<u32> {
        let id = self.types.iter().position(|t| t.as_ref().is_some_and(|t| t.kind == kind && self.name(t.name_off) == name.as_bytes()))?;
        u32::try_from(id).ok()
    }

    /// `id` with typedefs and qualifiers looked through (bounded: a cycle is not followed
    /// forever).
    fn resolve(&self, mut id: u32) -> Option<&Type> {
        for _ in 0..32 {
            let t = self.ty(id)?;
            match t.kind {
                TYPEDEF | VOLATILE | CONST | RESTRICT | TYPE_TAG => id = t.size_or_id,
                _ => return Some(t),
            }
        }
        None
    }

    /// Member `name` of `struct name`, looked for through its anonymous structures and unions.
    #[must_use]
    pub fn member(&self, structure: &str, name: &str) -> Option<Member> {
        let id = self.named(STRUCT, structure)?;
        self.member_in(self.ty(id)?, name, 0, 0)
    }

    fn member_in(&self, t: &Type, name: &str, base: u32, depth: u32) -> Option<Member> {
        if !matches!(t.kind, STRUCT | UNION) || depth > 8 {
            return None;
        }
        for m in self.data[t.trailer.clone()].as_chunks::<12>().0 {
            let (m_name, m_type, m_offset) = (u32_at(m, 0).ok()?, u32_at(m, 4).ok()?, u32_at(m, 8).ok()?);
            // With kind_flag, the top byte is a bitfield's size: the offset is the low 24 bits.
            let bits = if t.kind_flag { m_offset & 0xff_ffff } else { m_offset };
            let offset = base.checked_add(bits / 8)?;
            if m_name == 0 {
                if let Some(found) = self.resolve(m_type).and_then(|inner| self.member_in(inner, name, offset, depth + 1)) {
                    return Some(found);
                }
            } else if self.name(m_name) == name.as_bytes() {
                // A bitfield is not a member we can read whole.
                return (bits % 8 == 0).then_some(Member { offset, type_id: m_type });
            }
        }
        None
    }

    /// The size in bytes of type `id` (integers, pointers, enums, structures).
    #[must_use]
    pub fn size_of(&self, id: u32) -> Option<u32> {
        let t = self.resolve(id)?;
        match t.kind {
            INT | STRUCT | UNION | ENUM | ENUM64 | FLOAT => Some(t.size_or_id),
            PTR => Some(8),
            _ => None,
        }
    }

    /// How many arguments tracepoint `name` passes a raw tracepoint program: its
    /// `btf_trace_<name>` prototype's parameters, less the context the kernel adds first.
    #[must_use]
    pub fn tracepoint_args(&self, name: &str) -> Option<usize> {
        let typedef = self.ty(self.named(TYPEDEF, &format!("btf_trace_{name}"))?)?;
        let pointer = self.resolve(typedef.size_or_id)?;
        let proto = if pointer.kind == PTR { self.resolve(pointer.size_or_id)? } else { pointer };
        (proto.kind == FUNC_PROTO).then(|| usize::from(proto.vlen).saturating_sub(1))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a BTF blob type by type, for tests here and in `layout`.
    #[derive(Default)]
    pub(crate) struct Builder {
        types: Vec<u8>,
        strings: Vec<u8>,
        count: u32,
    }

    impl Builder {
        pub(crate) fn new() -> Self {
            Self { strings: vec![0], ..Self::default() }
        }

        fn string(&mut self, s: &str) -> u32 {
            if s.is_empty() {
                return 0;
            }
            let off = self.strings.len() as u32;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            off
        }

        fn push(&mut self, name: &str, kind: u8, vlen: u16, kind_flag: bool, size_or_id: u32, trailer: &[u32]) -> u32 {
            let name = self.string(name);
            let info = (u32::from(kind) << 24) | u32::from(vlen) | (u32::from(kind_flag) << 31);
            for w in [name, info, size_or_id].iter().chain(trailer) {
                self.types.extend_from_slice(&w.to_ne_bytes());
            }
            self.count += 1;
            self.count
        }

        pub(crate) fn int(&mut self, name: &str, size: u32) -> u32 {
            self.push(name, INT, 0, false, size, &[size * 8])
        }

        pub(crate) fn pointer(&mut self, to: u32) -> u32 {
            self.push("", PTR, 0, false, to, &[])
        }

        pub(crate) fn typedef(&mut self, name: &str, to: u32) -> u32 {
            self.push(name, TYPEDEF, 0, false, to, &[])
        }

        /// A structure (or union) of `(name, type, byte offset)` members.
        pub(crate) fn structure(&mut self, name: &str, union: bool, size: u32, members: &[(&str, u32, u32)]) -> u32 {
            let mut trailer = Vec::new();
            for (m, ty, off) in members {
                trailer.extend([self.string(m), *ty, off * 8]);
            }
            self.push(name, if union { UNION } else { STRUCT }, members.len() as u16, false, size, &trailer)
        }

        pub(crate) fn proto(&mut self, params: &[u32]) -> u32 {
            let trailer: Vec<u32> = params.iter().flat_map(|p| [0, *p]).collect();
            self.push("", FUNC_PROTO, params.len() as u16, false, 0, &trailer)
        }

        /// `typedef void (*btf_trace_NAME)(void *, args...)`.
        pub(crate) fn tracepoint(&mut self, name: &str, args: &[u32]) -> u32 {
            let mut params = vec![0];
            params.extend(args);
            let proto = self.proto(&params);
            let ptr = self.pointer(proto);
            self.typedef(&format!("btf_trace_{name}"), ptr)
        }

        pub(crate) fn build(&self) -> Vec<u8> {
            let mut out = Vec::new();
            out.extend_from_slice(&MAGIC.to_ne_bytes());
            out.extend_from_slice(&[1, 0]);
            let words = [24, 0, self.types.len() as u32, self.types.len() as u32, self.strings.len() as u32];
            for w in words {
                out.extend_from_slice(&w.to_ne_bytes());
            }
            out.extend_from_slice(&self.types);
            out.extend_from_slice(&self.strings);
            out
        }
    }

    #[test]
    fn finds_members_through_anonymous_structures_and_tracepoint_arguments() {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        let long = b.int("long", 8);
        let inner = b.structure("", false, 8, &[("pid", int, 0), ("tgid", int, 4)]);
        let task = b.structure("task_struct", false, 64, &[("state", long, 16), ("", inner, 40)]);
        let task_ptr = b.pointer(task);
        let b_int = b.int("_Bool", 1);
        b.tracepoint("sched_switch", &[b_int, task_ptr, task_ptr]);
        let btf = Btf::parse(b.build()).expect("parses");
        assert_eq!(btf.member("task_struct", "pid"), Some(Member { offset: 40, type_id: int }));
        assert_eq!(btf.member("task_struct", "tgid").map(|m| m.offset), Some(44));
        let state = btf.member("task_struct", "state").expect("state");
        assert_eq!((state.offset, btf.size_of(state.type_id)), (16, Some(8)));
        assert_eq!(btf.member("task_struct", "nope"), None);
        assert_eq!(btf.member("request", "q"), None);
        assert_eq!(btf.tracepoint_args("sched_switch"), Some(3));
        assert_eq!(btf.tracepoint_args("sched_waking"), None);
    }

    #[test]
    fn damaged_blobs_are_errors_not_panics() {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        b.structure("task_struct", false, 8, &[("pid", int, 0)]);
        let good = b.build();
        assert!(Btf::parse(good.clone()).is_ok());
        for cut in 0..good.len() {
            let _ = Btf::parse(good[..cut].to_vec());
        }
        assert_eq!(Btf::parse(vec![0; 30]).map(|_| ()), Err(BtfError::Magic(0)));
        let mut unknown = good.clone();
        // The first type's kind byte (the info word's top byte) made 31.
        unknown[24 + 7] = 31;
        assert!(matches!(Btf::parse(unknown), Err(BtfError::UnknownKind { id: 1, kind: 31 })));
        // Every byte flipped in turn: never a panic.
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0xff;
            if let Ok(btf) = Btf::parse(bad) {
                let _ = btf.member("task_struct", "pid");
                let _ = btf.tracepoint_args("x");
            }
        }
    }

    #[test]
    fn reads_this_kernels_own() {
        let Ok(Ok(btf)) = Btf::kernel() else { return };
        let pid = btf.member("task_struct", "pid").expect("task_struct.pid");
        assert_eq!(btf.size_of(pid.type_id), Some(4));
        assert!(btf.tracepoint_args("sched_switch").is_some_and(|n| n == 3 || n == 4));
    }
}
