//! What a uprobe trap really costs the traced thread, measured on this kernel and CPU rather
//! than assumed.
//!
//! The cost depends on the probed instruction. The kernel replaces it with a breakpoint; on
//! the trap it runs the BPF program and then must execute the instruction it displaced. Some
//! instructions it *emulates* in the trap handler (on x86-64: `push reg`, branches, and in
//! recent kernels some NOPs) — one trap. Every other instruction is *single-stepped* out of
//! line: a second exception (`exc_debug_user`), which on a virtual machine can cost ten
//! times the first (measured on the fake CUDA, issue 20). A return probe adds its own cost at
//! the function's return.
//!
//! So gputrace measures, once per session, a bare counting probe on tiny functions of its
//! own (in a private memfd) that begin with each kind of instruction (and a return probe),
//! and classifies the first instruction of every CUDA symbol it probes the same way: the
//! cost of a probe is the measured cost of its kind. Which kinds the kernel emulates need
//! not be known in advance: an emulated kind simply measures cheap.

use std::{collections::BTreeMap, fs::File, os::unix::fs::FileExt as _, path::Path, time::Instant};

use aya::{
    Ebpf,
};
use gputrace_common::PROBES;
use super::{uprobes::Uprobes, AttachedLibrary};

pub use crate::model::{EntryKind, ProgramNs, TrapCosts, TrapSampling};

/// The kind of the instruction that starts `code` (x86-64 encodings; other architectures
/// single-step everything as far as this model goes).
#[must_use]
pub fn classify(code: &[u8]) -> EntryKind {
    match code {
        [0x50..=0x57, ..] | [0x41, 0x50..=0x57, ..] => EntryKind::Push,
        [0xf3, 0x0f, 0x1e, 0xfa, ..] => EntryKind::Endbr,
        [0x90, ..] | [0x66, 0x90, ..] | [0x0f, 0x1f, ..] | [0x66, 0x0f, 0x1f, ..] => EntryKind::Nop,
        [0xe8 | 0xe9 | 0xeb | 0x70..=0x7f, ..] | [0x0f, 0x80..=0x8f, ..] => EntryKind::Branch,
        _ => EntryKind::Stepped,
    }
}

/// The first bytes of the code at `offset` in the file at `path`.
#[must_use]
pub fn entry_kind_at(path: &Path, offset: u64) -> EntryKind {
    let mut code = [0u8; 16];
    match File::open(path).and_then(|f| f.read_at(&mut code, offset)) {
        Ok(n) => classify(&code[..n]),
        // Unknown code is charged as the costly kind: the estimate errs high.
        Err(_) => EntryKind::Stepped,
    }
}

/// The calibration code (x86-64): tiny functions, each beginning with one kind of
/// instruction, 16 bytes apart. It lives in a private memfd, not in gputrace's own binary:
/// a probe sits on an inode for every process that maps it, and a probe on the shared
/// executable once left other runs of that file killed by SIGILL at the probed address (a
/// `nopl` led function, kernel 6.18) — the kernel's state for an inode of our own that dies
/// with us cannot touch any other process.
#[cfg(target_arch = "x86_64")]
const CODE: [(&str, &[u8]); 4] = [
    // push rbp; pop rbp; ret
    ("push", &[0x55, 0x5d, 0xc3]),
    // jmp +0; ret
    ("branch", &[0xeb, 0x00, 0xc3]),
    // mov rax, rdi; ret
    ("stepped", &[0x48, 0x89, 0xf8, 0xc3]),
    // the function a return probe measures: push rbp; pop rbp; ret
    ("return", &[0x55, 0x5d, 0xc3]),
];
#[cfg(target_arch = "x86_64")]
const SLOT: usize = 16;

/// Why the trap costs could not be measured (the assumed ones are used then, and a note says
/// why).
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// The calibration code could not be made: an executable memfd, written and mapped.
    #[error("{what}: {source}")]
    Code {
        /// The step that failed.
        what: &'static str,
        /// Its error.
        source: std::io::Error,
    },
    /// A calibration program did not load.
    #[error("loading {program}: {source}")]
    Load {
        /// The program's name.
        program: &'static str,
        /// aya's error.
        source: aya::programs::ProgramError,
    },
    /// A calibration probe did not attach.
    #[error("attaching to {function}: {source}")]
    Attach {
        /// The calibration function it was to sit on.
        function: &'static str,
        /// Why.
        source: super::uprobes::AttachError,
    },
    /// The probes fired fewer times than the calls made: the figures would measure nothing.
    #[error("the calibration probes fired {hits} times of {expected}")]
    Missed {
        /// Runs counted.
        hits: u64,
        /// Calls made.
        expected: u64,
    },
    /// Not on this architecture: the calibration code is x86-64 machine code.
    #[error("trap costs are measured on x86-64 only")]
    Unsupported,
}

/// The calibration functions, mapped executable from a private memfd.
#[cfg(target_arch = "x86_64")]
struct CalibrationCode {
    fd: std::os::fd::OwnedFd,
    base: *mut libc::c_void,
}

#[cfg(target_arch = "x86_64")]
impl CalibrationCode {
    fn new() -> Result<Self, CalibrationError> {
        use std::os::fd::FromRawFd as _;
        let name = c"gputrace-trap-calibration";
        // MFD_EXEC: an executable memfd, where the kernel distinguishes (6.3+); older
        // kernels reject the flag and make every memfd executable.
        // SAFETY: a valid NUL-terminated name; the flags are plain integers.
        let mut raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_EXEC) };
        if raw < 0 {
            // SAFETY: as above.
            raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        }
        if raw < 0 {
            return Err(CalibrationError::Code { what: "memfd_create", source: std::io::Error::last_os_error() });
        }
        // SAFETY: a descriptor we just created and own.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        let mut page = vec![0xcc_u8; 4096];
        for (i, (_, code)) in CODE.iter().enumerate() {
            page[i * SLOT..i * SLOT + code.len()].copy_from_slice(code);
        }
        let written = fd.try_clone().and_then(|copy| std::io::Write::write_all(&mut std::fs::File::from(copy), &page));
        written.map_err(|source| CalibrationError::Code { what: "writing the code", source })?;
        // SAFETY: maps the 4096 bytes just written, read and execute, private to us.
        let base = unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ | libc::PROT_EXEC, libc::MAP_PRIVATE, std::os::fd::AsRawFd::as_raw_fd(&fd), 0) };
        if base == libc::MAP_FAILED {
            return Err(CalibrationError::Code { what: "mapping the code executable", source: std::io::Error::last_os_error() });
        }
        Ok(Self { fd, base })
    }

    fn path(&self) -> std::path::PathBuf {
        format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&self.fd)).into()
    }

    fn function(&self, i: usize) -> unsafe extern "C" fn() {
        // SAFETY: slot i holds a complete function (CODE) that returns at once; the mapping
        // lives as long as `self`, and callers call it only while they hold `self`.
        unsafe { std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn()>(self.base.cast::<u8>().add(i * SLOT).cast()) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for CalibrationCode {
    fn drop(&mut self) {
        // SAFETY: unmapping the page mapped in `new`.
        unsafe { libc::munmap(self.base, 4096) };
    }
}

/// Calls per batch and batches per measurement: the fastest batch is kept, since preemption
/// only ever adds time. About 1,000 calls of ≤ 15 µs: well under 0.1 s in all.
const CALLS: u32 = 200;
const BATCHES: u32 = 5;

/// Fastest per-call time of `f` over the batches, ns.
#[cfg(target_arch = "x86_64")]
fn per_call_ns(f: unsafe extern "C" fn()) -> f64 {
    (0..BATCHES)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..CALLS {
                // SAFETY: each calibration function only touches rax/rbp (saved) and returns.
                unsafe { f() };
            }
            t.elapsed().as_nanos() as f64 / f64::from(CALLS)
        })
        .fold(f64::INFINITY, f64::min)
}

/// Whether probe `id` has a return probe attached (launches never do; nothing does in
/// entry-only mode).
#[must_use]
pub fn has_return(id: u32, entry_only: bool) -> bool {
    gputrace_common::has_return_program(id) && !entry_only
}

/// Per probe id (shared by the overhead estimate and the overhead budget): its entry kind
/// (from the first library that has the symbol), its entry and return cost, ns: the trap
/// and our program's run time in it.
#[must_use]
pub fn costs_by_probe(libraries: &[AttachedLibrary], measured: Option<&TrapCosts>, entry_only: bool) -> BTreeMap<u32, (Option<EntryKind>, f64, f64)> {
    PROBES
        .iter()
        .map(|spec| {
            let kind = libraries.iter().find_map(|l| l.entry.get(spec.symbol).copied());
            let (entry, ret) = match measured {
                // A probe whose instruction is unknown (an old recording) is charged as stepped.
                // The trap, and what our programs did in it.
                Some(c) => {
                    let program = c.program_ns.get(&spec.id).copied().unwrap_or_default();
                    (c.entry_ns(kind.unwrap_or(EntryKind::Stepped)) + program.entry_ns, c.return_ns + program.return_ns)
                }
                None => (TrapCosts::ASSUMED_NS, TrapCosts::ASSUMED_NS),
            };
            (spec.id, (kind, entry, if has_return(spec.id, entry_only) { ret } else { 0.0 }))
        })
        .collect()
}

/// What one hit of each probe costs the thread that takes it, ns (entry and return traps),
/// by probe id.
#[must_use]
pub fn hit_ns(libraries: &[AttachedLibrary], measured: Option<&TrapCosts>, entry_only: bool) -> [f64; gputrace_common::PROBE_SLOTS] {
    let mut out = [0.0; gputrace_common::PROBE_SLOTS];
    for (id, (_, entry, ret)) in costs_by_probe(libraries, measured, entry_only) {
        if let Some(slot) = out.get_mut(id as usize) {
            *slot = entry + ret;
        }
    }
    out
}

/// Measure with the floor programs of `ebpf` (the session's object). The probes sit on a
/// private memfd; their link ids go to `links`, detached with the session's others before
/// it exits (never from a thread the exit could race: `return_safety::check`).
/// NOPs and `endbr64` are single-stepped like any other instruction on the kernels measured
/// (6.18: 12–13 µs against 13 µs for a `mov`), and are charged as such, not probed here.
#[cfg(target_arch = "x86_64")]
pub fn calibrate(ebpf: &mut Ebpf, links: &mut Uprobes) -> Result<TrapCosts, CalibrationError> {
    let code = CalibrationCode::new()?;
    let functions: Vec<unsafe extern "C" fn()> = (0..CODE.len()).map(|i| code.function(i)).collect();
    let bare: Vec<f64> = functions.iter().map(|f| per_call_ns(*f)).collect();
    for program in ["uprobe_floor", "uretprobe_floor"] {
        links.prepare(ebpf, program).map_err(|source| CalibrationError::Load { program, source })?;
    }
    let path = code.path();
    let result = (|| {
        for (i, (name, _)) in CODE.iter().enumerate() {
            let program = if *name == "return" { "uretprobe_floor" } else { "uprobe_floor" };
            links.attach(ebpf, program, (i * SLOT) as u64, &path).map_err(|source| CalibrationError::Attach { function: name, source })?;
        }
        let hits_before = floor_hits(ebpf);
        let probed: Vec<f64> = functions.iter().map(|f| per_call_ns(*f)).collect();
        // Every call ran its program once (the return function's at its return): otherwise
        // the figures measure nothing.
        let expected = u64::from(CALLS * BATCHES) * functions.len() as u64;
        let hits = floor_hits(ebpf).saturating_sub(hits_before);
        if hits < expected {
            return Err(CalibrationError::Missed { hits, expected });
        }
        let cost = |i: usize| (probed[i] - bare[i]).max(0.0);
        Ok(TrapCosts {
            push_ns: cost(0),
            branch_ns: cost(1),
            stepped_ns: cost(2),
            nop_ns: cost(2),
            endbr_ns: cost(2),
            // A return probe also traps at its function's entry (a push here).
            return_ns: (cost(3) - cost(0)).max(0.0),
            // Read from the kernel's accounting when the costs are used (`program_costs`).
            program_ns: BTreeMap::new(),
            // Read from the sampler when the costs are used (`trap_sampling`).
            sampled: None,
        })
    })();
    drop(code);
    result
}

/// Elsewhere than x86-64: no measurement (the calibration code is x86-64 machine code), so
/// the costs are the assumed ones.
#[cfg(not(target_arch = "x86_64"))]
pub fn calibrate(_ebpf: &mut Ebpf, _links: &mut Uprobes) -> Result<TrapCosts, CalibrationError> {
    Err(CalibrationError::Unsupported)
}

fn floor_hits(ebpf: &Ebpf) -> u64 {
    ebpf.map("FLOOR_HITS")
        .and_then(|m| aya::maps::PerCpuArray::<_, u64>::try_from(m).ok())
        .and_then(|a| a.get(&0, 0).ok())
        .map_or(0, |v| v.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_instructions_are_classified_as_the_kernel_handles_them() {
        assert_eq!(classify(&[0x55, 0x48, 0x89, 0xe5]), EntryKind::Push, "push rbp");
        assert_eq!(classify(&[0x41, 0x57]), EntryKind::Push, "push r15");
        assert_eq!(classify(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55]), EntryKind::Endbr);
        assert_eq!(classify(&[0x0f, 0x1f, 0x44, 0x00, 0x00]), EntryKind::Nop);
        assert_eq!(classify(&[0x90]), EntryKind::Nop);
        assert_eq!(classify(&[0xe9, 0, 0, 0, 0]), EntryKind::Branch);
        assert_eq!(classify(&[0xeb, 0x00]), EntryKind::Branch);
        assert_eq!(classify(&[0x0f, 0x84, 0, 0, 0, 0]), EntryKind::Branch);
        // The fake CUDA's cuMemcpyDtoHAsync_v2 begins `mov rsi, rdx`: single-stepped.
        assert_eq!(classify(&[0x48, 0x89, 0xd6]), EntryKind::Stepped);
        assert_eq!(classify(&[0x48, 0x83, 0xec, 0x08]), EntryKind::Stepped, "sub rsp, 8");
        assert_eq!(classify(&[]), EntryKind::Stepped);
    }

    #[test]
    fn measured_costs_survive_a_recording_bit_for_bit() {
        // The end record carries them as JSON; an offline report must compute the very same
        // figures as the live one (serde_json's `float_roundtrip`).
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x >> 11) as f64 / (1u64 << 53) as f64 * 20_000.0;
            let c = TrapCosts { push_ns: v, return_ns: v / 3.0, ..TrapCosts::default() };
            let back: TrapCosts = serde_json::from_str(&serde_json::to_string(&c).expect("json")).expect("parse");
            assert_eq!(back.push_ns.to_bits(), c.push_ns.to_bits(), "{v}");
            assert_eq!(back.return_ns.to_bits(), c.return_ns.to_bits(), "{v}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_calibration_code_begins_with_its_kinds_and_runs() {
        let kinds: Vec<EntryKind> = CODE.iter().map(|(_, code)| classify(code)).collect();
        assert_eq!(kinds, [EntryKind::Push, EntryKind::Branch, EntryKind::Stepped, EntryKind::Push]);
        let code = CalibrationCode::new().expect("an executable memfd");
        for i in 0..CODE.len() {
            // SAFETY: each slot is a complete function that returns at once.
            unsafe { code.function(i)() };
        }
        assert!(code.path().starts_with("/proc/self/fd/"));
    }
}
