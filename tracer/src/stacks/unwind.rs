//! Unwinding copied user stacks with the call frame information (`.eh_frame`, `.debug_frame`)
//! of the files a process maps, for code built without frame pointers (gcc and clang omit
//! them from -O1 on). The kernel copies the thread's registers and the top of its stack
//! (`tracer-ebpf/src/stack_copy.rs`); `framehop` walks them here. The walk reads only the
//! copied bytes, never the process's memory, and stops after [`MAX_STEPS`] frames: a damaged
//! or hostile unwind table gives a short stack, not a hang.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use framehop::{
    x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64},
    ExplicitModuleSectionInfo, FrameAddress, MayAllocateDuringUnwind, Module, Unwinder as _,
};
use gputrace_common::ReturnAddrs;
use object::{Object as _, ObjectSection as _, ObjectSegment as _};

use crate::discover::{
    files::{open_same_file, Links},
    maps::{parse, Mapping},
};

/// Frames walked at most per stack: more than the frames kept ([`super::MAX_FRAMES`]), so that
/// a complete stack is told from a cut one, and few enough to bound a cyclic table's cost.
pub const MAX_STEPS: usize = 128;

/// A module's maps are read again at most this often when an address falls outside them (a
/// library loaded since).
const REREAD_MAPS_EVERY: Duration = Duration::from_secs(1);
/// How often a walk cut at an unknown address may read the map again (see `unwind`).
const REREAD_MAPS_ON_MISS: Duration = Duration::from_millis(20);

/// The largest unwind section read (a section beyond is left out, and its file's frames
/// fall back to frame pointers): a mapped file is the traced process's to make.
const MAX_SECTION_BYTES: u64 = 64 << 20;

type Data = Arc<[u8]>;

/// The registers a walk starts from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// The instruction pointer where the thread stood.
    pub ip: u64,
    /// The stack pointer: where the copied stack's bytes begin.
    pub sp: u64,
    /// The frame pointer (`rbp`), where the thread kept one.
    pub bp: u64,
}

/// What a walk found: instruction pointers, innermost first (the first is where the thread
/// stood; the others are return addresses, as the kernel's stacks have them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unwound {
    /// Instruction pointers, innermost first.
    pub ips: Vec<u64>,
    /// The walk reached the stack's root (the unwind information said no caller): not cut.
    pub complete: bool,
}

/// Walk `stack` (the bytes from `regs.sp` up) with `unwinder`'s modules. Reads only `stack`.
pub fn walk<U>(unwinder: &U, cache: &mut U::Cache, regs: Regs, stack: &[u8]) -> Unwound
where
    U: framehop::Unwinder<UnwindRegs = UnwindRegsX86_64>,
{
    let mut read_stack = |addr: u64| -> Result<u64, ()> {
        let offset = usize::try_from(addr.checked_sub(regs.sp).ok_or(())?).map_err(|_| ())?;
        let word = stack.get(offset..offset.checked_add(8).ok_or(())?).ok_or(())?;
        Ok(u64::from_le_bytes(word.try_into().map_err(|_| ())?))
    };
    let mut frames = unwinder.iter_frames(regs.ip, UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp), cache, &mut read_stack);
    let mut out = Unwound::default();
    while out.ips.len() < MAX_STEPS {
        match frames.next() {
            Ok(Some(FrameAddress::InstructionPointer(ip))) => out.ips.push(ip),
            Ok(Some(FrameAddress::ReturnAddress(ra))) => out.ips.push(ra.get()),
            Ok(None) => {
                out.complete = true;
                break;
            }
            Err(_) => break,
        }
    }
    out
}

/// Walk `stack` by an `.eh_frame` at `eh_frame_svma` of a module loaded at `bias` (the fuzz
/// target `unwind_cfi`: a mapped file's tables and a thread's stack are the traced process's
/// to make).
#[must_use]
pub fn walk_raw(eh_frame: &[u8], eh_frame_svma: u64, bias: u64, regs: Regs, stack: &[u8]) -> Unwound {
    let info = ExplicitModuleSectionInfo {
        base_svma: 0,
        eh_frame_svma: Some(eh_frame_svma..eh_frame_svma.saturating_add(eh_frame.len() as u64)),
        eh_frame: Some(Data::from(eh_frame)),
        ..ExplicitModuleSectionInfo::default()
    };
    let mut unwinder: UnwinderX86_64<Data, MayAllocateDuringUnwind> = UnwinderX86_64::new();
    unwinder.add_module(Module::new("fuzzed".into(), bias..bias.saturating_add(1 << 40), bias, info));
    walk(&unwinder, &mut CacheX86_64::new(), regs, stack)
}

/// The unwind sections of one file, read once and shared by every process that maps it.
#[derive(Debug)]
pub struct FileUnwindInfo {
    eh_frame: Option<(std::ops::Range<u64>, Data)>,
    eh_frame_hdr: Option<(std::ops::Range<u64>, Data)>,
    debug_frame: Option<Data>,
    text_svma: Option<std::ops::Range<u64>>,
    got_svma: Option<std::ops::Range<u64>>,
    /// Executable loadable segments: (virtual address, file offset, file size).
    segments: Vec<(u64, u64, u64)>,
}

/// Why a file's unwind information could not be read.
#[derive(Debug, thiserror::Error)]
pub enum UnwindInfoError {
    /// The file could not be read.
    #[error("opening it: {0}")]
    Open(#[from] std::io::Error),
    /// The file is not an ELF image this parser reads.
    #[error("parsing it as ELF: {0}")]
    Parse(#[from] object::Error),
}

impl FileUnwindInfo {
    /// Read the unwind sections of an ELF image (a file's bytes, or a cache over them).
    pub fn parse<'d, R: object::ReadRef<'d>>(data: R) -> Result<Self, UnwindInfoError> {
        let elf = object::File::parse(data)?;
        let section = |name: &str| -> Option<(std::ops::Range<u64>, Data)> {
            let s = elf.section_by_name(name)?;
            if s.size() > MAX_SECTION_BYTES {
                return None;
            }
            // Compressed sections (possible for .debug_frame) are left out: no decompressor here.
            let compressed = s.compressed_data().ok()?;
            if compressed.format != object::CompressionFormat::None {
                return None;
            }
            let bytes = s.data().ok()?;
            Some((s.address()..s.address().saturating_add(s.size()), Arc::from(bytes)))
        };
        let range = |name: &str| elf.section_by_name(name).map(|s| s.address()..s.address().saturating_add(s.size()));
        let eh_frame = section(".eh_frame");
        // `.debug_frame` mostly repeats `.eh_frame` where both exist: read only where it is
        // the one there is (code built with -fno-asynchronous-unwind-tables), so that a
        // process mapping many large files costs one copy of their tables, not two.
        let debug_frame = if eh_frame.is_none() { section(".debug_frame").map(|(_, d)| d) } else { None };
        Ok(Self {
            eh_frame,
            eh_frame_hdr: section(".eh_frame_hdr"),
            debug_frame,
            text_svma: range(".text"),
            got_svma: range(".got"),
            // Executable segments only: the mappings placed are the executable ones, and a
            // page can hold the end of one segment and the start of the next.
            segments: elf
                .segments()
                .filter(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (s.address(), offset, size)
                })
                .collect(),
        })
    }

    /// A copy sharing the same section bytes (for tests that damage some of them).
    #[cfg(test)]
    fn clone_sections(&self) -> Self {
        Self {
            eh_frame: self.eh_frame.clone(),
            eh_frame_hdr: self.eh_frame_hdr.clone(),
            debug_frame: self.debug_frame.clone(),
            text_svma: self.text_svma.clone(),
            got_svma: self.got_svma.clone(),
            segments: self.segments.clone(),
        }
    }

    /// The `.eh_frame` section and its address, if any.
    #[must_use]
    pub fn eh_frame(&self) -> Option<(u64, &[u8])> {
        self.eh_frame.as_ref().map(|(r, d)| (r.start, &d[..]))
    }

    /// Whether there is any call frame information to walk by.
    #[must_use]
    pub fn has_cfi(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    /// What to add to a virtual address of the file for where `mapping` (of it) put it.
    #[must_use]
    pub fn bias(&self, mapping: &Mapping) -> Option<u64> {
        // A mapping starts at a page boundary, so its offset can lie below its segment's.
        let page_start = |offset: u64| offset & !0xfff;
        let &(vaddr, offset, _) = self
            .segments
            .iter()
            .find(|&&(_, offset, size)| (page_start(offset)..offset.saturating_add(size.max(1))).contains(&mapping.offset))?;
        // File offset `o` of the segment is at `vaddr + (o - offset)`.
        Some(mapping.start.wrapping_sub(vaddr.wrapping_add(mapping.offset).wrapping_sub(offset)))
    }

    /// A framehop module for `mapping`, placed at `bias`.
    #[must_use]
    pub fn module(&self, name: String, mapping: &Mapping, bias: u64) -> Module<Data> {
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text_svma.clone(),
            got_svma: self.got_svma.clone(),
            eh_frame_svma: self.eh_frame.as_ref().map(|(r, _)| r.clone()),
            eh_frame: self.eh_frame.as_ref().map(|(_, d)| d.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|(r, _)| r.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|(_, d)| d.clone()),
            debug_frame: self.debug_frame.clone(),
            ..ExplicitModuleSectionInfo::default()
        };
        Module::new(name, mapping.start..mapping.end, bias, info)
    }
}

/// One process's modules and framehop's rule cache.
struct ProcessUnwinder {
    unwinder: UnwinderX86_64<Data, MayAllocateDuringUnwind>,
    cache: CacheX86_64<MayAllocateDuringUnwind>,
    /// The executable ranges added, and when the maps were read.
    ranges: Vec<std::ops::Range<u64>>,
    read_at: Instant,
    /// Some mapped file could not be opened when the maps were read (the process was
    /// exec'ing: `run`'s gate becomes the job), so some of its code has no tables yet.
    files_missing: bool,
    /// The kernel's return-probe trampoline page (`[uprobes]`), once the process has one.
    trampoline: Option<std::ops::Range<u64>>,
    trampoline_read_at: Instant,
}

/// How often a process's maps are read for its `[uprobes]` page while it has none.
const REREAD_TRAMPOLINE_EVERY: Duration = Duration::from_millis(100);

/// Put back on a copied stack the return addresses that return probes replaced with their
/// trampoline (`returns`: where they were and what they were). A slot is patched only where
/// it is in the copy and holds an address in `trampoline`: a slot of a call that has returned
/// since holds something else, left alone.
pub fn restore_returns(stack: &mut [u8], sp: u64, returns: &ReturnAddrs, trampoline: &std::ops::Range<u64>) -> usize {
    let mut restored = 0;
    for (&slot, &value) in returns.slots.iter().zip(&returns.values) {
        let Some(offset) = slot.checked_sub(sp).and_then(|o| usize::try_from(o).ok()) else { continue };
        let Some(word) = offset.checked_add(8).and_then(|end| stack.get_mut(offset..end)) else { continue };
        if slot != 0 && trampoline.contains(&u64::from_le_bytes(word.try_into().unwrap_or_default())) {
            word.copy_from_slice(&value.to_le_bytes());
            restored += 1;
        }
    }
    restored
}

/// Unwinds copied stacks of any process: each file's unwind sections are read once, by
/// (device, inode); each process's modules are placed from its memory map, read again when
/// an address falls outside them.
#[derive(Default)]
pub struct Unwinders {
    files: HashMap<(u64, u64), Option<Arc<FileUnwindInfo>>>,
    /// The vDSO's, read from this process's own at first need (`own_vdso`).
    vdso: std::sync::OnceLock<Option<Arc<FileUnwindInfo>>>,
    processes: HashMap<u32, ProcessUnwinder>,
}

impl std::fmt::Debug for Unwinders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinders").field("files", &self.files.len()).field("processes", &self.processes.len()).finish_non_exhaustive()
    }
}

impl Unwinders {
    /// Unwind a stack copied from process `pid` (empty where its maps cannot be read), its
    /// return addresses that return probes replaced put back first (`returns`).
    pub fn unwind(&mut self, pid: u32, regs: Regs, stack: &mut [u8], returns: &ReturnAddrs) -> Unwound {
        let stale = self.processes.get(&pid).is_none_or(|p| {
            let age = p.read_at.elapsed();
            !p.ranges.iter().any(|r| r.contains(&regs.ip)) && age >= REREAD_MAPS_EVERY || p.files_missing && age >= REREAD_MAPS_ON_MISS
        });
        if stale {
            if let Some(p) = self.load(pid) {
                self.processes.insert(pid, p);
            }
        }
        let Some(p) = self.processes.get_mut(&pid) else { return Unwound::default() };
        if returns.slots.iter().any(|&s| s != 0) {
            if p.trampoline.is_none() && p.trampoline_read_at.elapsed() >= REREAD_TRAMPOLINE_EVERY {
                p.trampoline = trampoline_of(pid);
                p.trampoline_read_at = Instant::now();
            }
            if let Some(t) = &p.trampoline {
                restore_returns(stack, regs.sp, returns, t);
            }
        }
        let unwound = walk(&p.unwinder, &mut p.cache, regs, stack);
        // A walk cut at an address no module covers: the process may have mapped it since
        // its map was read (a `dlopen`'ed driver, read before the load). Read it again, at
        // most every `REREAD_MAPS_ON_MISS`, while the process lives, and walk once more.
        let missed = !unwound.complete && unwound.ips.iter().any(|ip| !p.ranges.iter().any(|r| r.contains(ip)));
        if !missed || p.read_at.elapsed() < REREAD_MAPS_ON_MISS {
            return unwound;
        }
        let Some(fresh) = self.load(pid) else { return unwound };
        let p = self.processes.entry(pid).insert_entry(fresh).into_mut();
        let again = walk(&p.unwinder, &mut p.cache, regs, stack);
        if again.ips.len() >= unwound.ips.len() { again } else { unwound }
    }

    /// Forget a process (it exited, or exec'd another image).
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// Processes with modules loaded.
    #[must_use]
    pub fn processes(&self) -> usize {
        self.processes.len()
    }

    fn load(&mut self, pid: u32) -> Option<ProcessUnwinder> {
        let text = crate::discover::procfs::read_text(format!("/proc/{pid}/maps")).ok()?;
        let mut unwinder = UnwinderX86_64::new();
        let mut ranges = Vec::new();
        let mut files_missing = false;
        let mappings = parse(&text).0;
        let trampoline = mappings.iter().find(|m| m.path == "[uprobes]").map(|m| m.start..m.end);
        for m in mappings.into_iter().filter(Mapping::executable) {
            let info = if m.path == "[vdso]" {
                self.vdso.get_or_init(|| own_vdso().map(Arc::new)).clone()
            } else if m.path.starts_with('/') && m.inode != 0 {
                match self.files.get(&(m.dev(), m.inode)) {
                    Some(known) => known.clone(),
                    None => match read_mapped(pid, &m) {
                        Ok(info) => self.files.entry((m.dev(), m.inode)).or_insert(Some(Arc::new(info))).clone(),
                        // Not an ELF file we can read: the same next time.
                        Err(UnwindInfoError::Parse(_)) => self.files.entry((m.dev(), m.inode)).or_insert(None).clone(),
                        // The mapping went away before it was opened (the process exec'd or
                        // exited: `run`'s gate execs the job): a fact of that process, not of
                        // the file, which the next process to map it reads again.
                        Err(UnwindInfoError::Open(_)) => {
                            files_missing = true;
                            None
                        }
                    },
                }
            } else {
                None
            };
            let Some(info) = info.filter(|i| i.has_cfi()) else { continue };
            let Some(bias) = info.bias(&m) else { continue };
            unwinder.add_module(info.module(m.path.clone(), &m, bias));
            ranges.push(m.start..m.end);
        }
        Some(ProcessUnwinder {
            unwinder,
            cache: CacheX86_64::new(),
            ranges,
            read_at: Instant::now(),
            files_missing,
            trampoline,
            trampoline_read_at: Instant::now(),
        })
    }
}

/// The process's `[uprobes]` page, where the kernel's return-probe trampoline is.
fn trampoline_of(pid: u32) -> Option<std::ops::Range<u64>> {
    let text = crate::discover::procfs::read_text(format!("/proc/{pid}/maps")).ok()?;
    parse(&text).0.into_iter().find(|m| m.path == "[uprobes]").map(|m| m.start..m.end)
}

/// A mapped file's unwind sections, read through the process's own mapping (`map_files`:
/// the file it mapped, even if the path names another since), checked to be that file. A
/// process gone since its map was read (a short job whose last stacks are walked after it
/// exited) has no `map_files`: the path its map gave is opened then, if it still names the
/// very file (as the symbolizer does, `stacks::native`; without it a wait inside libc's
/// `read` was charged to `read` rather than to its caller).
fn read_mapped(pid: u32, m: &Mapping) -> Result<FileUnwindInfo, UnwindInfoError> {
    let link = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
    let read = || -> Result<FileUnwindInfo, UnwindInfoError> {
        let fd = open_same_file(std::path::Path::new(&link), (m.dev(), m.inode), Links::Follow)
            .or_else(|e| open_same_file(std::path::Path::new(&m.path), (m.dev(), m.inode), Links::Refuse).map_err(|_| e))?;
        let cache = object::ReadCache::new(std::fs::File::from(fd));
        FileUnwindInfo::parse(&cache)
    };
    read().inspect_err(|e| log::debug!("unwind information of {}: {e}", m.path))
}

/// The vDSO's unwind sections, from this process's own copy: the kernel maps the same image
/// into every process, and it is not a file that can be opened.
fn own_vdso() -> Option<FileUnwindInfo> {
    // SAFETY: getauxval has no preconditions; 0 means absent.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    if base == 0 {
        return None;
    }
    let text = crate::discover::procfs::read_text("/proc/self/maps").ok()?;
    let m = parse(&text).0.into_iter().find(|m| m.path == "[vdso]" && m.start == base)?;
    let len = usize::try_from(m.end - m.start).ok()?;
    // SAFETY: the kernel maps the vDSO readable for the life of the process, at `base` for
    // `len` bytes (its own line in /proc/self/maps); it is never written or unmapped.
    let image = unsafe { std::slice::from_raw_parts(base as usize as *const u8, len) };
    FileUnwindInfo::parse(image).inspect_err(|e| log::debug!("unwind information of the vDSO: {e}")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_caller_to_find() -> (Regs, Vec<u8>) {
        std::hint::black_box(crate::stacks::unwind_cost::copy_own_stack())
    }

    #[test]
    fn a_copied_stack_unwinds_past_its_caller() {
        let (regs, bytes) = a_caller_to_find();
        let mut unwinders = Unwinders::default();
        let unwound = unwinders.unwind(std::process::id(), regs, &mut bytes.clone(), &ReturnAddrs::default());
        assert!(unwound.ips.len() >= 3, "{unwound:?}");
        let caller = a_caller_to_find as *const () as usize as u64;
        // The return address into `a_caller_to_find` lies within its first few hundred bytes.
        assert!(unwound.ips[1..].iter().any(|&ra| (caller..caller + 512).contains(&ra)), "{unwound:?} vs {caller:#x}");
    }

    #[test]
    fn the_walk_reads_only_the_copy_and_stops_at_its_end() {
        let (regs, bytes) = a_caller_to_find();
        let mut unwinders = Unwinders::default();
        let none = ReturnAddrs::default();
        let full = unwinders.unwind(std::process::id(), regs, &mut bytes.clone(), &none);
        let short = unwinders.unwind(std::process::id(), regs, &mut bytes[..16].to_vec(), &none);
        assert!(short.ips.len() < full.ips.len() && !short.complete, "{short:?} vs {full:?}");
        assert_eq!(unwinders.unwind(std::process::id(), regs, &mut [], &none).ips.first(), Some(&regs.ip));
    }

    #[test]
    fn return_addresses_replaced_by_a_return_probe_are_put_back_where_the_trampoline_is() {
        let sp = 0x7000;
        let mut stack = [0x10u64.to_le_bytes(), 0xffff_e000u64.to_le_bytes(), 0x20u64.to_le_bytes()].concat();
        let trampoline = 0xffff_e000..0xffff_f000;
        // Slot 0 (at sp + 8) was replaced; slot 1's call returned since (sp + 16 holds data);
        // a slot outside the copy is left alone.
        let returns = ReturnAddrs { slots: [sp + 8, sp + 16], values: [0x4242, 0x4343] };
        assert_eq!(restore_returns(&mut stack, sp, &returns, &trampoline), 1);
        assert_eq!(&stack[8..16], &0x4242u64.to_le_bytes());
        assert_eq!(&stack[16..24], &0x20u64.to_le_bytes());
        let outside = ReturnAddrs { slots: [sp + 24, sp - 8], values: [1, 2] };
        assert_eq!(restore_returns(&mut stack, sp, &outside, &trampoline), 0);
    }

    /// A deterministic byte stream (xorshift), for damage that is the same at every run.
    struct Noise(u64);

    impl Noise {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }

        /// `data` with some bytes overwritten, sometimes cut short.
        fn damage(&mut self, data: &[u8]) -> Data {
            let mut out = data.to_vec();
            for _ in 0..=self.below(64) {
                let at = self.below(out.len());
                if let Some(b) = out.get_mut(at) {
                    *b = self.next() as u8;
                }
            }
            if self.below(4) == 0 {
                out.truncate(self.below(out.len()));
            }
            Arc::from(out)
        }
    }

    #[test]
    fn damaged_or_hostile_unwind_tables_give_short_stacks_never_a_hang_or_a_panic() {
        let (regs, bytes) = a_caller_to_find();
        let text = crate::discover::procfs::read_text("/proc/self/maps").expect("own maps");
        let mapping = parse(&text).0.into_iter().find(|m| m.executable() && m.contains(regs.ip)).expect("own text mapping");
        let info = read_mapped(std::process::id(), &mapping).expect("own unwind information");
        let bias = info.bias(&mapping).expect("own bias");
        let (eh_range, eh) = info.eh_frame.clone().expect("an .eh_frame");
        let mut noise = Noise(0x2545_f491_4f6c_dd1d);
        let started = Instant::now();
        for round in 0..400 {
            // Damage the real tables, or replace them with noise; and walk a real stack copy
            // or noise from registers that point anywhere.
            let eh_frame = if round % 2 == 0 { noise.damage(&eh) } else { (0..noise.below(4096)).map(|_| noise.next() as u8).collect() };
            let eh_frame_hdr =
                info.eh_frame_hdr.as_ref().map(|(r, d)| (r.clone(), if round % 3 == 0 { d.clone() } else { noise.damage(d) }));
            let damaged =
                FileUnwindInfo { eh_frame: Some((eh_range.clone(), eh_frame)), eh_frame_hdr, debug_frame: None, ..info.clone_sections() };
            let mut unwinder: UnwinderX86_64<Data, MayAllocateDuringUnwind> = UnwinderX86_64::new();
            unwinder.add_module(damaged.module("damaged".into(), &mapping, bias));
            let mut cache = CacheX86_64::new();
            let (regs, stack) = if round % 4 == 3 {
                let stack: Vec<u8> = (0..noise.below(8192)).map(|_| noise.next() as u8).collect();
                let ip = mapping.start + noise.below((mapping.end - mapping.start) as usize) as u64;
                (Regs { ip, sp: noise.next(), bp: noise.next() }, stack)
            } else {
                (regs, bytes.clone())
            };
            let unwound = walk(&unwinder, &mut cache, regs, &stack);
            assert!(unwound.ips.len() <= MAX_STEPS);
        }
        // 400 walks of at most MAX_STEPS frames each: far below a second unless one looped.
        assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    }
}
