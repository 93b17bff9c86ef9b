//! Where a sizeless symbol ends. blazesym names an address after the nearest symbol below it
//! when that symbol has no size (ELF's "unknown size", `st_size == 0`), however far away the
//! address is. glibc's `_init` is such a symbol, and the PLT follows its `.init` section: every
//! sample taken in a PLT stub (a call to `clock_gettime@plt`, say) read as `_init`, and a job's
//! sites said `[main, _init, worker]`. An address past the end of its symbol's own section is
//! not that symbol's: it is left as an address.

use std::{collections::HashMap, fs::File};

use object::{
    elf::{FileHeader64, SHF_EXECINSTR},
    read::elf::{FileHeader as _, SectionHeader as _},
    Endianness,
};

/// At most this many section headers are read from a file (ELF allows 65 535 and more through
/// an extension; real objects have tens): a hostile file's claim costs no more.
pub const MAX_SECTIONS: usize = 4096;

/// The executable sections of each file, read once per path, by address: `[start, end)`.
#[derive(Debug, Default)]
pub struct SectionBounds {
    by_path: HashMap<String, Option<Vec<(u64, u64)>>>,
}

impl SectionBounds {
    /// Whether `addr` (a file address, as blazesym normalizes it) lies in the section of the
    /// symbol that starts at `symbol_addr` in `path`. Where the file cannot be read the answer
    /// is yes: the name is kept, as before.
    pub fn same_section(&mut self, path: &str, symbol_addr: u64, addr: u64) -> bool {
        let sections = self.by_path.entry(path.to_owned()).or_insert_with(|| executable_sections(path));
        sections.as_deref().is_none_or(|s| same_section(s, symbol_addr, addr))
    }
}

/// Pure part of [`SectionBounds::same_section`]: a symbol outside every executable section
/// (data, an absolute symbol) keeps its name; one inside a section covers only that section.
#[must_use]
pub fn same_section(sections: &[(u64, u64)], symbol_addr: u64, addr: u64) -> bool {
    match sections.iter().find(|(start, end)| (*start..*end).contains(&symbol_addr)) {
        Some((start, end)) => (*start..*end).contains(&addr),
        None => true,
    }
}

/// The executable sections of the ELF file at `path`, from its section headers alone (read
/// through a cache that fetches only the header and the table).
fn executable_sections(path: &str) -> Option<Vec<(u64, u64)>> {
    let file = File::open(path).ok()?;
    let data = object::ReadCache::new(file);
    let header = FileHeader64::<Endianness>::parse(&data).ok()?;
    let endian = header.endian().ok()?;
    // The count comes from the file: checked before the table is read.
    if header.shnum(endian, &data).ok()? > MAX_SECTIONS {
        return None;
    }
    let table = header.section_headers(endian, &data).ok()?;
    Some(
        table
            .iter()
            .filter(|s| s.sh_flags(endian) & u64::from(SHF_EXECINSTR) != 0)
            .filter_map(|s| Some((s.sh_addr(endian), s.sh_addr(endian).checked_add(s.sh_size(endian))?)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_past_a_sizeless_symbols_section_is_not_the_symbols() {
        // fakejob's layout: .init [0x1000, 0x1017), .plt [0x1020, 0x12b0), .text [0x12c0, 0x36b8).
        let sections = [(0x1000, 0x1017), (0x1020, 0x12b0), (0x12c0, 0x36b8)];
        assert!(same_section(&sections, 0x1000, 0x1010), "inside _init itself");
        assert!(!same_section(&sections, 0x1000, 0x1050), "a PLT stub is not _init");
        assert!(same_section(&sections, 0x12c0, 0x2000), "a sizeless symbol in .text covers .text");
        assert!(same_section(&sections, 0x9000, 0x9100), "a symbol in no executable section keeps its name");
        assert!(same_section(&[], 0x1000, 0x5000), "no sections known");
    }

    #[test]
    fn this_test_binarys_own_text_section_is_read() {
        let exe = std::env::current_exe().expect("the test binary");
        let mut bounds = SectionBounds::default();
        let path = exe.to_str().expect("a UTF-8 path");
        let sections = executable_sections(path).expect("an ELF file");
        assert!(!sections.is_empty(), "a binary has code");
        let (start, end) = sections[0];
        assert!(bounds.same_section(path, start, end - 1));
        assert!(!bounds.same_section(path, start, end + 0x10_0000_0000));
        assert!(SectionBounds::default().same_section("/nonexistent/file", 1, 2), "unreadable: the name is kept");
    }
}
