//! File offsets of exported symbols, read once per library. (aya can resolve a symbol per
//! attach, but it re-reads the whole file each time; libcuda is ~100 MB and we probe ~60
//! symbols, so we read it once — and only the parts the symbol tables need: reading all of
//! it made gputrace's peak memory 133 MB on the GPU machine.)
//!
//! The file may be anyone's (a library is found by name in any process's map), and the ELF
//! reader allocates whatever size a section header claims, limited only by the file's
//! length: a sparse 24 GB file whose `.dynsym` claimed 4 GiB made root's sweep peak at
//! 4.2 GB resident (issue 56). So every read goes through [`Budget`], which refuses once
//! [`MAX_ELF_READ_BYTES`] have been asked for, before the reader allocates.

use std::{cell::Cell, collections::HashMap, fs, ops::Range, path::Path};

use object::{Object as _, ObjectSegment as _, ObjectSymbol as _, ReadRef};

use crate::error::{Result, TraceError};

/// The most bytes read from one library to find its symbols: headers, symbol tables and
/// names together. The real tables are far smaller: with the real libcuda 580's read,
/// gputrace's whole peak on the H200 was 26 MB (docs/benchmarks.md), and NCCL 2.28 exports
/// 105 symbols (docs/facts.md); 64 MiB leaves room for a C++ library's full `.symtab` while
/// keeping a hostile header harmless.
pub const MAX_ELF_READ_BYTES: u64 = 64 << 20;

/// Why a library's symbols could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The ELF reader's own error.
    Elf(object::read::Error),
    /// The file asked for more than [`MAX_ELF_READ_BYTES`].
    OverBudget,
}

/// What is left of one library's read budget, and whether a read was refused for it.
#[derive(Debug)]
struct Limits {
    left: Cell<u64>,
    exceeded: Cell<bool>,
}

impl Default for Limits {
    fn default() -> Self {
        Self { left: Cell::new(MAX_ELF_READ_BYTES), exceeded: Cell::new(false) }
    }
}

impl Limits {
    /// `data`, read within this budget.
    fn over<D>(&self, data: D) -> Budget<'_, D> {
        Budget { data, limits: self }
    }

    /// The parser's error, or the budget's when a read was refused for it (the parser then
    /// reports only that a read failed).
    fn error(&self, e: object::read::Error) -> ReadError {
        if self.exceeded.get() { ReadError::OverBudget } else { ReadError::Elf(e) }
    }

    /// Take `size` bytes from the budget, or say it is spent.
    fn take(&self, size: u64) -> Result<(), ()> {
        if let Some(left) = self.left.get().checked_sub(size) {
            self.left.set(left);
            Ok(())
        } else {
            self.exceeded.set(true);
            Err(())
        }
    }
}

/// A reader that counts what it lets the ELF parser read and refuses beyond the budget, so
/// that a section header claiming gigabytes is refused before anything is allocated for it.
#[derive(Clone, Copy, Debug)]
struct Budget<'b, D> {
    data: D,
    limits: &'b Limits,
}

impl<'d, D: ReadRef<'d>> ReadRef<'d> for Budget<'_, D> {
    fn len(self) -> Result<u64, ()> {
        self.data.len()
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'d [u8], ()> {
        self.limits.take(size)?;
        self.data.read_bytes_at(offset, size)
    }

    fn read_bytes_at_until(self, range: Range<u64>, delimiter: u8) -> Result<&'d [u8], ()> {
        // The reader caps one string at 4 KiB itself; what it returned is counted after, so
        // that many names cannot add up past the budget either.
        let bytes = self.data.read_bytes_at_until(range, delimiter)?;
        self.limits.take(bytes.len() as u64)?;
        Ok(bytes)
    }
}

impl ReadError {
    /// As the user sees it, about the library known as `path`.
    fn about(self, path: &Path) -> TraceError {
        match self {
            Self::Elf(source) => TraceError::Elf { path: path.to_owned(), source },
            Self::OverBudget => TraceError::ElfTooLarge { path: path.to_owned(), limit: MAX_ELF_READ_BYTES },
        }
    }
}

/// Map each wanted symbol that the library exports to its file offset.
pub fn file_offsets(path: &Path, wanted: &[&str]) -> Result<HashMap<String, u64>> {
    let file = fs::File::open(path).map_err(|e| TraceError::io("reading library", path, e))?;
    // Reads the ranges the parser asks for (headers, symbol and string tables), no more.
    let cache = object::ReadCache::new(file);
    offsets_in(&cache, wanted).map_err(|e| e.about(path))
}

/// Pure part of [`file_offsets`], over the file's bytes.
pub fn offsets_in<'d, R: ReadRef<'d>>(data: R, wanted: &[&str]) -> Result<HashMap<String, u64>, ReadError> {
    let limits = Limits::default();
    offsets_unbudgeted(limits.over(data), wanted).map_err(|e| limits.error(e))
}

fn offsets_unbudgeted<'d, R: ReadRef<'d>>(data: R, wanted: &[&str]) -> Result<HashMap<String, u64>, object::read::Error> {
    let file = object::File::parse(data)?;
    let segments = segments(&file);
    let mut out = HashMap::new();
    for sym in file.dynamic_symbols().chain(file.symbols()) {
        if !sym.is_definition() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if !wanted.contains(&name) || out.contains_key(name) {
            continue;
        }
        if let Some(offset) = file_offset(&segments, sym.address()) {
            out.insert(name.to_owned(), offset);
        }
    }
    Ok(out)
}

/// Each segment's (virtual address, size in memory, file offset).
fn segments<'d, R: ReadRef<'d>>(file: &object::File<'d, R>) -> Vec<(u64, u64, u64)> {
    file.segments().map(|s| (s.address(), s.size(), s.file_range().0)).collect()
}

/// Uprobes take a file offset: the virtual address `addr` translated through the segment
/// holding it. None where no segment holds it, or where the header's figures (the file's,
/// untrusted) would overflow: a wrapped sum would name some other instruction.
fn file_offset(segments: &[(u64, u64, u64)], addr: u64) -> Option<u64> {
    segments.iter().find_map(|&(vaddr, size, off)| {
        let end = vaddr.checked_add(size)?;
        if (vaddr..end).contains(&addr) { (addr - vaddr).checked_add(off) } else { None }
    })
}

/// Map each program of `wanted` (demangled name and signature, program) whose function the
/// library defines to its file offset. For local C++ symbols (`.symtab`, not exported), such
/// as PyTorch's caching allocator in `libc10_cuda.so`: a name is taken only with the very
/// signature asked for, so a release that changed the arguments is not probed with the old
/// reading of them.
pub fn demangled_offsets(path: &Path, wanted: &[(&str, &'static str)]) -> Result<HashMap<&'static str, u64>> {
    let file = fs::File::open(path).map_err(|e| TraceError::io("reading library", path, e))?;
    let cache = object::ReadCache::new(file);
    demangled_in(&cache, wanted).map_err(|e| e.about(path))
}

/// Pure part of [`demangled_offsets`].
pub fn demangled_in<'d, R: ReadRef<'d>>(data: R, wanted: &[(&str, &'static str)]) -> Result<HashMap<&'static str, u64>, ReadError> {
    let limits = Limits::default();
    demangled_unbudgeted(limits.over(data), wanted).map_err(|e| limits.error(e))
}

fn demangled_unbudgeted<'d, R: ReadRef<'d>>(data: R, wanted: &[(&str, &'static str)]) -> Result<HashMap<&'static str, u64>, object::read::Error> {
    let file = object::File::parse(data)?;
    let segments = segments(&file);
    // The unqualified names, as their mangled forms spell them: only symbols holding one are
    // demangled (a symbol table holds tens of thousands).
    let leaves: Vec<&str> = wanted.iter().filter_map(|(name, _)| name.split('(').next()?.rsplit("::").next()).filter(|leaf| !leaf.is_empty()).collect();
    let mut out = HashMap::new();
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        if !sym.is_definition() || sym.kind() != object::SymbolKind::Text {
            continue;
        }
        let Ok(mangled) = sym.name() else { continue };
        if !mangled.starts_with("_Z") || !leaves.iter().any(|leaf| mangled.contains(leaf)) {
            continue;
        }
        let Some(demangled) = cpp_demangle::Symbol::new(mangled).ok().and_then(|s| s.demangle().ok()) else { continue };
        let Some(&(_, program)) = wanted.iter().find(|(name, _)| *name == demangled) else { continue };
        if let Some(offset) = file_offset(&segments, sym.address()) {
            out.entry(program).or_insert(offset);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-bit little-endian shared object, built here: one `PT_LOAD` segment
    /// (`vaddr`, `memsz`, file `offset`), a `.dynsym` holding `cuInit` (a function at
    /// `sym_addr`) whose header claims `dynsym_claim` bytes, and its `.dynstr`.
    fn elf(segment: (u64, u64, u64), sym_addr: u64, dynsym_claim: u64) -> Vec<u8> {
        fn put(out: &mut [u8], at: usize, bytes: &[u8]) {
            out[at..at + bytes.len()].copy_from_slice(bytes);
        }
        let mut f = vec![0u8; 384];
        // File header.
        put(&mut f, 0, &[0x7f, b'E', b'L', b'F', 2, 1, 1]);
        put(&mut f, 16, &3u16.to_le_bytes()); // ET_DYN
        put(&mut f, 18, &62u16.to_le_bytes()); // EM_X86_64
        put(&mut f, 20, &1u32.to_le_bytes());
        put(&mut f, 32, &64u64.to_le_bytes()); // e_phoff
        put(&mut f, 40, &128u64.to_le_bytes()); // e_shoff
        put(&mut f, 52, &64u16.to_le_bytes()); // e_ehsize
        put(&mut f, 54, &56u16.to_le_bytes()); // e_phentsize
        put(&mut f, 56, &1u16.to_le_bytes()); // e_phnum
        put(&mut f, 58, &64u16.to_le_bytes()); // e_shentsize
        put(&mut f, 60, &3u16.to_le_bytes()); // e_shnum
        put(&mut f, 62, &2u16.to_le_bytes()); // e_shstrndx: .dynstr doubles as the names' table
        // The PT_LOAD program header.
        let (vaddr, memsz, offset) = segment;
        put(&mut f, 64, &1u32.to_le_bytes());
        put(&mut f, 72, &offset.to_le_bytes());
        put(&mut f, 80, &vaddr.to_le_bytes());
        put(&mut f, 88, &vaddr.to_le_bytes());
        put(&mut f, 104, &memsz.to_le_bytes());
        // Section 1: .dynsym at 336, linked to section 2.
        let sh = 128 + 64;
        put(&mut f, sh + 4, &11u32.to_le_bytes()); // SHT_DYNSYM
        put(&mut f, sh + 24, &336u64.to_le_bytes());
        put(&mut f, sh + 32, &dynsym_claim.to_le_bytes());
        put(&mut f, sh + 40, &2u32.to_le_bytes());
        put(&mut f, sh + 48, &8u64.to_le_bytes());
        put(&mut f, sh + 56, &24u64.to_le_bytes());
        // Section 2: .dynstr at 320.
        let sh = 128 + 128;
        put(&mut f, sh + 4, &3u32.to_le_bytes()); // SHT_STRTAB
        put(&mut f, sh + 24, &320u64.to_le_bytes());
        put(&mut f, sh + 32, &16u64.to_le_bytes());
        put(&mut f, 320, b"\0cuInit\0");
        // Symbol 1 (symbol 0 is the null one): global function, defined in section 1.
        let sym = 336 + 24;
        put(&mut f, sym, &1u32.to_le_bytes());
        f[sym + 4] = 0x12;
        put(&mut f, sym + 6, &1u16.to_le_bytes());
        put(&mut f, sym + 8, &sym_addr.to_le_bytes());
        put(&mut f, sym + 16, &16u64.to_le_bytes());
        f
    }

    #[test]
    fn a_crafted_library_gives_its_symbols_offset() {
        let found = offsets_in(&elf((0x1000, 0x1000, 0x200), 0x1800, 48)[..], &["cuInit"]).expect("parses");
        assert_eq!(found.get("cuInit"), Some(&0xa00));
    }

    #[test]
    fn headers_whose_figures_overflow_name_no_offset() {
        // The old sum `addr - vaddr + off` wrapped to a small offset: some other instruction.
        let found = offsets_in(&elf((0x1000, 0x1000, u64::MAX - 0x10), 0x1800, 48)[..], &["cuInit"]).expect("parses");
        assert_eq!(found.get("cuInit"), None);
        // A segment whose end is past u64::MAX (`v + size` overflowed) holds nothing.
        let found = offsets_in(&elf((u64::MAX - 0xff, 0x1000, 0), u64::MAX - 0x10, 48)[..], &["cuInit"]).expect("parses");
        assert_eq!(found.get("cuInit"), None);
        assert_eq!(file_offset(&[(u64::MAX, u64::MAX, u64::MAX)], u64::MAX), None);
    }

    #[test]
    fn a_symbol_table_claiming_more_than_the_budget_is_refused_before_it_is_read() {
        // In memory: the claim is refused by the budget, not by the file's length.
        let mut bytes = elf((0x1000, 0x1000, 0x200), 0x1800, MAX_ELF_READ_BYTES + 24);
        bytes.resize(usize::try_from(MAX_ELF_READ_BYTES).expect("fits") + 400, 0);
        assert!(matches!(offsets_in(&bytes[..], &["cuInit"]), Err(ReadError::OverBudget)));
        drop(bytes);
        // On disk, as the file: sparse, long enough for a `.dynsym` claiming 512 MiB,
        // which the old reader allocated in full (and filled with the file's zeros).
        let dir = crate::test_support::scratch("symbols", "sparse");
        let path = dir.join("libcuda.so.1");
        let claim = 512u64 << 20;
        std::fs::write(&path, elf((0x1000, 0x1000, 0x200), 0x1800, claim)).expect("write");
        std::fs::OpenOptions::new().write(true).open(&path).and_then(|f| f.set_len(claim + 4096)).expect("sparse length");
        let peak_before = crate::usage::now().expect("rusage").peak_rss_bytes;
        let e = file_offsets(&path, &["cuInit"]).expect_err("refused");
        let grew = crate::usage::now().expect("rusage").peak_rss_bytes.saturating_sub(peak_before);
        assert!(matches!(e, TraceError::ElfTooLarge { limit: MAX_ELF_READ_BYTES, .. }), "{e}");
        assert!(e.to_string().contains("libcuda.so.1"), "{e}");
        assert!(grew < MAX_ELF_READ_BYTES, "peak memory grew by {grew} bytes");
    }

    #[test]
    fn a_demangled_name_is_found_only_with_its_signature() {
        // This test binary's own `String::from_utf8_lossy` is a Rust symbol; a C++ name is
        // built by the fake-CUDA rig's tests. Here: garbage and absence.
        assert!(demangled_in(&b"not an elf"[..], &[("a::b(int)", "p")]).is_err());
        let me = std::env::current_exe().expect("own path");
        let found = demangled_offsets(&me, &[("c10::cuda::Nothing::malloc(void**)", "p")]).expect("reads own ELF");
        assert!(found.is_empty());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(offsets_in(&b"not an elf"[..], &["x"]).is_err());
        assert!(offsets_in(&[0x7f, b'E', b'L', b'F', 2, 1, 1][..], &["x"]).is_err());
    }

    #[test]
    fn finds_a_libc_symbol() {
        // The test binary itself is an ELF that defines `main`.
        let me = std::env::current_exe().expect("own path");
        let found = file_offsets(&me, &["main", "no_such_symbol_here"]).expect("reads own ELF");
        assert!(found.contains_key("main"));
        assert!(!found.contains_key("no_such_symbol_here"));
    }
}
