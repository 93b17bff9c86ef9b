//! Native frames: the kernel's user stacks (instruction pointers) turned into functions,
//! files and lines with blazesym, from the live process's memory maps and ELF files. A stack
//! first seen after its process exited (an allocation that failed just before the job died)
//! is symbolized from the executable mappings remembered while the process lived, through
//! the files' paths; without them it keeps its addresses, with a note.

use std::{collections::HashMap, os::fd::OwnedFd};

use blazesym::{
    symbolize::{
        source::{Elf, Process, Source},
        Input, Symbolized, Symbolizer,
    },
    Pid,
};

use super::{sections::SectionBounds, Frame, MAX_FRAMES};
use crate::discover::{
    files::{self, open_same_file, Links},
    maps::{parse, Mapping},
};

/// Symbolizes stacks, each (process, stack id) once: the kernel's stack ids are stable for
/// the session, and a stack is read at every snapshot.
pub struct NativeSymbolizer {
    symbolizer: Symbolizer,
    /// For gone processes' files, read through /proc/self/fd/N: a symbolizer of their own,
    /// since blazesym keeps one reader per file named by the first path it came by, and
    /// libc so named would read as the user's code in every live process after.
    remembered: Symbolizer,
    cache: HashMap<(u32, i64), Vec<Frame>>,
    /// Each process's executable file mappings, as last read while it lived, and when.
    mappings: HashMap<u32, (std::time::Instant, Vec<Mapping>)>,
    /// Files of gone processes, opened and checked once each, by (device, inode); None: the
    /// path names another file now. Kept open: their descriptors' paths are what blazesym
    /// caches them by.
    opened: HashMap<(u64, u64), Option<OwnedFd>>,
    /// Where sizeless symbols end (a PLT stub is no `_init`).
    sections: SectionBounds,
    /// Stacks whose process was gone (or unreadable) when they were symbolized.
    pub unresolved: u64,
}

impl std::fmt::Debug for NativeSymbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeSymbolizer").field("cached", &self.cache.len()).field("unresolved", &self.unresolved).finish_non_exhaustive()
    }
}

impl Default for NativeSymbolizer {
    fn default() -> Self {
        Self {
            symbolizer: Symbolizer::new(),
            remembered: Symbolizer::new(),
            cache: HashMap::new(),
            mappings: HashMap::new(),
            opened: HashMap::new(),
            sections: SectionBounds::default(),
            unresolved: 0,
        }
    }
}

impl NativeSymbolizer {
    /// The frames of stack `id` of process `pid`, its instruction pointers read by `ips`
    /// (innermost first) the first time it is asked for.
    pub fn frames(&mut self, pid: u32, id: i64, ips: impl FnOnce() -> Vec<u64>) -> &[Frame] {
        if !self.cache.contains_key(&(pid, id)) {
            let frames = if id < 0 { Vec::new() } else { self.symbolize(pid, &ips()) };
            self.cache.insert((pid, id), frames);
        }
        self.cache.get(&(pid, id)).map_or(&[], Vec::as_slice)
    }

    fn symbolize(&mut self, pid: u32, ips: &[u64]) -> Vec<Frame> {
        let ips: Vec<u64> = ips.iter().take(MAX_FRAMES).copied().collect();
        if ips.is_empty() {
            return Vec::new();
        }
        // A caller's frame holds a return address, one past its call: look up the call itself,
        // so that the line is the call's and a call at a function's end is not misnamed.
        let lookup: Vec<u64> = ips.iter().enumerate().map(|(i, &ip)| if i == 0 { ip } else { ip.saturating_sub(1) }).collect();
        self.refresh_mappings(pid);
        // Files are read through /proc/PID/map_files (blazesym's default), which follows
        // what the process mapped even when the file was replaced on disk since.
        let source = Source::Process(Process::new(Pid::from(pid)));
        let live = match self.symbolizer.symbolize(&source, Input::AbsAddr(&lookup)) {
            Ok(symbols) => {
                let sections = &mut self.sections;
                let frames = symbols.iter().zip(&ips).map(|(s, &ip)| frame_of(s, ip, |m, sym, addr| sections.same_section(m, sym, addr))).collect();
                // Not one address known to the live map: the process has exec'd since (or
                // the pid is another's), so the mappings it had when it lived may know them.
                if symbols.iter().any(|s| matches!(s, Symbolized::Sym(_))) {
                    return frames;
                }
                frames
            }
            Err(e) => {
                log::debug!("symbolizing a stack of {pid}: {e}");
                ips.iter().map(|&ip| address_frame(ip, None)).collect()
            }
        };
        self.symbolize_remembered(pid, &lookup, &ips).unwrap_or_else(|| {
            self.unresolved += 1;
            live
        })
    }

    /// Keep the process's executable file mappings, for its stacks seen after it exits, read
    /// now (an event says they changed, or matter: an exec, a first allocation).
    pub fn remember_mappings(&mut self, pid: u32) {
        let Ok(text) = crate::discover::procfs::read_text(format!("/proc/{pid}/maps")) else { return };
        let executable: Vec<Mapping> = parse(&text).0.into_iter().filter(|m| m.executable() && m.path.starts_with('/') && m.inode != 0).collect();
        if !executable.is_empty() {
            self.mappings.insert(pid, (std::time::Instant::now(), executable));
        }
    }

    /// Read the process's mappings again if the last reading is a second old or more (so a
    /// library it loaded late is known too): a large process's maps take a millisecond to
    /// parse.
    pub fn refresh_mappings(&mut self, pid: u32) {
        if self.mappings.get(&pid).is_none_or(|(at, _)| at.elapsed() >= std::time::Duration::from_secs(1)) {
            self.remember_mappings(pid);
        }
    }

    /// Drop what was read of the process's mappings (it exec'd: they are another image's).
    pub fn forget_mappings(&mut self, pid: u32) {
        self.mappings.remove(&pid);
    }

    /// Symbolize a stack of a process that is gone from its remembered mappings: each address
    /// becomes an offset into its file, read by path (None: nothing remembered).
    fn symbolize_remembered(&mut self, pid: u32, lookup: &[u64], ips: &[u64]) -> Option<Vec<Frame>> {
        let mappings = &self.mappings.get(&pid)?.1;
        let mut frames = Vec::with_capacity(ips.len());
        for (&addr, &ip) in lookup.iter().zip(ips) {
            let Some(m) = mappings.iter().find(|m| m.contains(addr)) else {
                frames.push(address_frame(ip, None));
                continue;
            };
            let Some(opened) = self.opened.entry((m.dev(), m.inode)).or_insert_with(|| open_mapped_file(m)) else {
                frames.push(address_frame(ip, None));
                continue;
            };
            let offset = addr - m.start + m.offset;
            // Read through the descriptor checked above, never the path again.
            let source = Source::Elf(Elf::new(files::through(opened)));
            let frame = match self.remembered.symbolize_single(&source, Input::FileOffset(offset)) {
                Ok(symbolized) => {
                    // The file was read through /proc/self/fd/N: the module is the path mapped.
                    let sections = &mut self.sections;
                    let mut f = frame_of(&symbolized, ip, |_, sym, addr| sections.same_section(&m.path, sym, addr));
                    f.module = Some(m.path.clone());
                    f
                }
                Err(_) => address_frame(ip, None),
            };
            frames.push(frame);
        }
        Some(frames)
    }
}

/// The file a gone process mapped, opened by the path its memory map gave, if that path
/// still names the very file (`discover::files`; no link followed: the map names real paths).
fn open_mapped_file(m: &Mapping) -> Option<OwnedFd> {
    open_same_file(std::path::Path::new(&m.path), (m.dev(), m.inode), Links::Refuse)
        .inspect_err(|e| log::debug!("opening {} of a gone process: {e}", m.path))
        .ok()
}

/// The frame of one symbolized address. `same_section(module, symbol address, address)` says
/// whether an address named after a sizeless symbol lies in that symbol's section (see
/// `stacks::sections`); where it does not, the frame keeps its address.
fn frame_of(symbolized: &Symbolized<'_>, ip: u64, mut same_section: impl FnMut(&str, u64, u64) -> bool) -> Frame {
    match symbolized {
        Symbolized::Sym(sym) => {
            if sym.size.is_none() {
                let module = sym.module.as_deref().map(std::ffi::OsStr::to_string_lossy).unwrap_or_default();
                let addr = sym.addr.saturating_add(sym.offset as u64);
                if !module.is_empty() && !same_section(&module, sym.addr, addr) {
                    return address_frame(ip, Some(&format!("past the section of the sizeless symbol {}", sym.name)));
                }
            }
            let module = sym.module.as_ref().map(|m| m.to_string_lossy().into_owned());
            let (file, line) = match &sym.code_info {
                Some(info) => {
                    let file = match &info.dir {
                        Some(dir) => dir.join(&*info.file).to_string_lossy().into_owned(),
                        None => info.file.to_string_lossy().into_owned(),
                    };
                    (Some(file), info.line)
                }
                None => (None, None),
            };
            Frame { function: sym.name.to_string(), file, line, module }
        }
        Symbolized::Unknown(reason) => address_frame(ip, Some(&reason.to_string())),
    }
}

/// A frame known only by its address (a stripped object, or a process gone).
fn address_frame(ip: u64, why: Option<&str>) -> Frame {
    Frame { function: format!("{ip:#x}"), file: None, line: None, module: why.map(|w| format!("unknown: {w}")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function of this binary with a name of its own, not inlined into its caller.
    #[inline(never)]
    fn a_frame_to_find() -> u64 {
        std::hint::black_box(7)
    }

    fn mapping_of(path: &std::path::Path) -> Mapping {
        use std::os::unix::fs::MetadataExt as _;
        let md = std::fs::metadata(path).expect("stat");
        let dev = md.dev();
        Mapping {
            start: 0x1000,
            end: 0x2000,
            perms: *b"r-xp",
            offset: 0,
            dev_major: libc::major(dev),
            dev_minor: libc::minor(dev),
            inode: md.ino(),
            path: path.to_string_lossy().into_owned(),
        }
    }

    #[test]
    fn a_gone_processs_file_is_read_only_if_its_path_still_names_it() {
        let dir = std::env::temp_dir().join(format!("gputrace-native-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("real")).expect("mkdir");
        let lib = dir.join("real/lib.so");
        std::fs::write(&lib, b"\x7fELF").expect("write");
        let mapped = mapping_of(&lib);
        assert!(open_mapped_file(&mapped).is_some(), "the very file");
        // The directory on the way is now a link to where the file is: not followed.
        std::os::unix::fs::symlink(dir.join("real"), dir.join("via")).expect("symlink");
        let through_link = Mapping { path: dir.join("via/lib.so").to_string_lossy().into_owned(), ..mapped.clone() };
        assert!(open_mapped_file(&through_link).is_none(), "a link on the path");
        // Swapped for a FIFO with no writer: refused at once, not waited on.
        std::fs::remove_file(&lib).expect("rm");
        rustix::fs::mknodat(rustix::fs::CWD, &lib, rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR, 0).expect("mkfifo");
        assert!(open_mapped_file(&mapped).is_none(), "a FIFO in its place");
        // Another regular file under the same name (the first one kept alive under another
        // name, so its inode cannot be handed out again): refused.
        std::fs::remove_file(&lib).expect("rm");
        std::fs::write(dir.join("real/first"), b"\x7fELF").expect("write");
        let first = mapping_of(&dir.join("real/first"));
        std::fs::write(&lib, b"\x7fELF").expect("write");
        assert!(open_mapped_file(&Mapping { path: lib.to_string_lossy().into_owned(), ..first }).is_none(), "a file of another inode");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stack_read_after_its_process_exited_is_named_from_the_mappings_it_had() {
        // A forked child has its parent's mappings at the same addresses: its stack can hold
        // the address of a function of this test binary.
        let address = a_frame_to_find as *const () as usize as u64;
        // SAFETY: the child only sleeps and exits, touching no lock another thread may hold.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            // SAFETY: async-signal-safe calls only.
            unsafe {
                libc::usleep(300_000);
                libc::_exit(0);
            }
        }
        let pid = child as u32;
        let mut symbolizer = NativeSymbolizer::default();
        symbolizer.remember_mappings(pid);
        // Exited but not reaped: its /proc entry is there, with an empty memory map (blazesym
        // fails on it, as on a pid that is gone).
        // SAFETY: a zeroed siginfo_t is a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, leaving it unreaped (WNOWAIT).
        let waited = unsafe { libc::waitid(libc::P_PID, child as libc::id_t, &raw mut info, libc::WEXITED | libc::WNOWAIT) };
        assert_eq!(waited, 0);
        let zombie = symbolizer.frames(pid, 1, || vec![address]).to_vec();
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
        let gone = symbolizer.frames(pid, 2, || vec![address]).to_vec();
        for frames in [zombie, gone] {
            assert!(frames[0].function.ends_with("a_frame_to_find"), "{frames:?}");
        }
        assert_eq!(symbolizer.unresolved, 0);
        // A process never seen alive keeps its addresses, and is counted.
        let never = symbolizer.frames(u32::MAX - 1, 3, || vec![address]).to_vec();
        assert!(never[0].function.starts_with("0x"), "{never:?}");
        assert_eq!(symbolizer.unresolved, 1);
    }
}
