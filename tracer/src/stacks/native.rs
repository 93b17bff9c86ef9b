//! Native frames: the kernel's user stacks (instruction pointers) turned into functions,
//! files and lines with blazesym, from the live process's memory maps and ELF files. A stack
//! first seen after its process exited (an allocation that failed just before the job died)
//! is symbolized from the executable mappings remembered while the process lived, through
//! the files' paths; without them it keeps its addresses, with a note.

use std::collections::HashMap;

use blazesym::{
    symbolize::{
        source::{Elf, Process, Source},
        Input, Symbolized, Symbolizer,
    },
    Pid,
};

use super::{Frame, MAX_FRAMES};
use crate::discover::maps::{parse, Mapping};

/// Symbolizes stacks, each (process, stack id) once: the kernel's stack ids are stable for
/// the session, and a stack is read at every snapshot.
pub struct NativeSymbolizer {
    symbolizer: Symbolizer,
    cache: HashMap<(u32, i64), Vec<Frame>>,
    /// Each process's executable file mappings, as last read while it lived, and when.
    mappings: HashMap<u32, (std::time::Instant, Vec<Mapping>)>,
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
        Self { symbolizer: Symbolizer::new(), cache: HashMap::new(), mappings: HashMap::new(), unresolved: 0 }
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
        self.remember_mappings(pid);
        // Files are read through /proc/PID/map_files (blazesym's default), which follows
        // what the process mapped even when the file was replaced on disk since.
        let source = Source::Process(Process::new(Pid::from(pid)));
        let live = match self.symbolizer.symbolize(&source, Input::AbsAddr(&lookup)) {
            // Not one address known to the live map: the process has exec'd since (or the
            // pid is another's), so the mappings it had when it lived may know them.
            Ok(symbols) if symbols.iter().any(|s| matches!(s, Symbolized::Sym(_))) => {
                return symbols.iter().zip(&ips).map(|(s, &ip)| frame_of(s, ip)).collect();
            }
            Ok(symbols) => symbols.iter().zip(&ips).map(|(s, &ip)| frame_of(s, ip)).collect(),
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

    /// Keep the process's executable file mappings if none are kept yet.
    pub fn remember_mappings_once(&mut self, pid: u32) {
        if !self.mappings.contains_key(&pid) {
            self.remember_mappings(pid);
        }
    }

    /// Keep the process's executable file mappings, for its stacks seen after it exits (a
    /// library it loaded since the last reading is then known too). Read at most once a
    /// second per process: a large process's maps take a millisecond to parse.
    pub fn remember_mappings(&mut self, pid: u32) {
        if self.mappings.get(&pid).is_some_and(|(at, _)| at.elapsed() < std::time::Duration::from_secs(1)) {
            return;
        }
        let Ok(text) = crate::discover::procfs::read_text(format!("/proc/{pid}/maps")) else { return };
        let executable: Vec<Mapping> = parse(&text).0.into_iter().filter(|m| m.executable() && m.path.starts_with('/') && m.inode != 0).collect();
        if !executable.is_empty() {
            self.mappings.insert(pid, (std::time::Instant::now(), executable));
        }
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
            // Opened by path as root after the process is gone: only the very file it mapped
            // (a regular file, same device and inode), never what a path may name since (a
            // FIFO would hang us, a device node is no ELF file).
            if !same_file(m) {
                frames.push(address_frame(ip, None));
                continue;
            }
            let offset = addr - m.start + m.offset;
            let source = Source::Elf(Elf::new(m.path.as_str()));
            let frame = match self.symbolizer.symbolize_single(&source, Input::FileOffset(offset)) {
                Ok(symbolized) => {
                    let mut f = frame_of(&symbolized, ip);
                    f.module.get_or_insert_with(|| m.path.clone());
                    f
                }
                Err(_) => address_frame(ip, None),
            };
            frames.push(frame);
        }
        Some(frames)
    }
}

/// Whether `m.path` still names the regular file the process mapped.
fn same_file(m: &Mapping) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(&m.path).is_ok_and(|md| {
        md.file_type().is_file() && md.ino() == m.inode && md.dev() == m.dev()
    })
}

fn frame_of(symbolized: &Symbolized<'_>, ip: u64) -> Frame {
    match symbolized {
        Symbolized::Sym(sym) => {
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
