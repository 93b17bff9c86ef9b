//! File offsets of exported symbols, read once per library. (aya can resolve a symbol per
//! attach, but it re-reads the whole file each time; libcuda is ~100 MB and we probe ~60
//! symbols, so we read it once — and only the parts the symbol tables need: reading all of
//! it made gputrace's peak memory 133 MB on the GPU machine.)

use std::{collections::HashMap, fs, path::Path};

use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};

use crate::error::{Result, TraceError};

/// Map each wanted symbol that the library exports to its file offset.
pub fn file_offsets(path: &Path, wanted: &[&str]) -> Result<HashMap<String, u64>> {
    let file = fs::File::open(path).map_err(|e| TraceError::io("reading library", path, e))?;
    // Reads the ranges the parser asks for (headers, symbol and string tables), no more.
    let cache = object::ReadCache::new(file);
    offsets_in(&cache, wanted).map_err(|source| TraceError::Elf { path: path.to_owned(), source })
}

/// Pure part of [`file_offsets`], over the file's bytes.
pub fn offsets_in<'d, R: object::ReadRef<'d>>(data: R, wanted: &[&str]) -> Result<HashMap<String, u64>, object::read::Error> {
    let file = object::File::parse(data)?;
    let segments: Vec<(u64, u64, u64)> = file.segments().map(|s| (s.address(), s.size(), s.file_range().0)).collect();
    let mut out = HashMap::new();
    for sym in file.dynamic_symbols().chain(file.symbols()) {
        if !sym.is_definition() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if !wanted.contains(&name) || out.contains_key(name) {
            continue;
        }
        let addr = sym.address();
        // Uprobes take a file offset; translate the virtual address through its segment.
        if let Some((vaddr, _, off)) = segments.iter().find(|(v, size, _)| (*v..v + size).contains(&addr)) {
            out.insert(name.to_owned(), addr - vaddr + off);
        }
    }
    Ok(out)
}

/// Map each program of `wanted` (demangled name and signature, program) whose function the
/// library defines to its file offset. For local C++ symbols (`.symtab`, not exported), such
/// as PyTorch's caching allocator in `libc10_cuda.so`: a name is taken only with the very
/// signature asked for, so a release that changed the arguments is not probed with the old
/// reading of them.
pub fn demangled_offsets(path: &Path, wanted: &[(&str, &'static str)]) -> Result<HashMap<&'static str, u64>> {
    let file = fs::File::open(path).map_err(|e| TraceError::io("reading library", path, e))?;
    let cache = object::ReadCache::new(file);
    demangled_in(&cache, wanted).map_err(|source| TraceError::Elf { path: path.to_owned(), source })
}

/// Pure part of [`demangled_offsets`].
pub fn demangled_in<'d, R: object::ReadRef<'d>>(data: R, wanted: &[(&str, &'static str)]) -> Result<HashMap<&'static str, u64>, object::read::Error> {
    let file = object::File::parse(data)?;
    let segments: Vec<(u64, u64, u64)> = file.segments().map(|s| (s.address(), s.size(), s.file_range().0)).collect();
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
        let addr = sym.address();
        if let Some((vaddr, _, off)) = segments.iter().find(|(v, size, _)| (*v..v + size).contains(&addr)) {
            out.entry(program).or_insert(addr - vaddr + off);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
