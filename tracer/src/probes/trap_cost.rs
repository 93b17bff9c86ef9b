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
//! So gputrace measures, once per session, a bare counting probe on functions of its own
//! that begin with each kind of instruction (and a return probe), and classifies the first
//! instruction of every CUDA symbol it probes the same way: the cost of a probe is the
//! measured cost of its kind. Which kinds the kernel emulates need not be known in advance:
//! an emulated kind simply measures cheap.

use std::{fs::File, os::unix::fs::FileExt as _, path::Path, time::Instant};

use aya::{programs::UProbe, Ebpf};
use serde::{Deserialize, Serialize};

/// The kind of instruction a probe sits on, as far as its trap cost goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// `push reg` (emulated by x86-64 kernels since 5.x).
    Push,
    /// A NOP (`nop`, `nopl …`).
    Nop,
    /// `endbr64` (CET builds).
    Endbr,
    /// A relative jump, call or conditional branch (emulated).
    Branch,
    /// Anything else: executed out of line by single-stepping.
    Stepped,
}

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

/// Measured cost per trap, ns, by what the probe sits on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrapCosts {
    pub push_ns: f64,
    pub nop_ns: f64,
    pub endbr_ns: f64,
    pub branch_ns: f64,
    pub stepped_ns: f64,
    /// A return probe's own cost (its entry excluded).
    pub return_ns: f64,
}

impl TrapCosts {
    /// What the old model assumed for every trap: ~0.9 µs measured for a bare uprobe on a
    /// `push`-led function on the GPU machine, rounded up (docs/facts.md). Used where no
    /// measurement exists (a recording cut before its end record).
    pub const ASSUMED_NS: f64 = 1_000.0;

    #[must_use]
    pub fn entry_ns(&self, kind: EntryKind) -> f64 {
        match kind {
            EntryKind::Push => self.push_ns,
            EntryKind::Nop => self.nop_ns,
            EntryKind::Endbr => self.endbr_ns,
            EntryKind::Branch => self.branch_ns,
            EntryKind::Stepped => self.stepped_ns,
        }
    }
}

#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    // Tiny functions that begin with each kind of instruction; nothing but the calibration
    // calls them. Intel syntax (the default for global_asm! on x86).
    ".pushsection .text.gputrace_calibration,\"ax\",@progbits",
    ".p2align 4",
    ".globl gputrace_calib_push",
    "gputrace_calib_push:",
    "push rbp",
    "pop rbp",
    "ret",
    ".p2align 4",
    ".globl gputrace_calib_nop",
    "gputrace_calib_nop:",
    "nop dword ptr [rax + rax*1 + 0]",
    "ret",
    ".p2align 4",
    ".globl gputrace_calib_endbr",
    "gputrace_calib_endbr:",
    "endbr64",
    "ret",
    ".p2align 4",
    ".globl gputrace_calib_branch",
    "gputrace_calib_branch:",
    "jmp 2f",
    "2:",
    "ret",
    ".p2align 4",
    ".globl gputrace_calib_stepped",
    "gputrace_calib_stepped:",
    "mov rax, rdi",
    "ret",
    ".p2align 4",
    ".globl gputrace_calib_return",
    "gputrace_calib_return:",
    "push rbp",
    "pop rbp",
    "ret",
    ".popsection",
);

#[cfg(target_arch = "x86_64")]
unsafe extern "C" {
    fn gputrace_calib_push();
    fn gputrace_calib_nop();
    fn gputrace_calib_endbr();
    fn gputrace_calib_branch();
    fn gputrace_calib_stepped();
    fn gputrace_calib_return();
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

/// Measure with the floor programs of `ebpf` (the session's object). The probes sit on our
/// own executable and are removed in the background (each removal waits for a grace period).
#[cfg(target_arch = "x86_64")]
pub fn calibrate(ebpf: &mut Ebpf) -> Result<TrapCosts, String> {
    let functions: [(&str, unsafe extern "C" fn(), bool); 6] = [
        ("push", gputrace_calib_push, false),
        ("nop", gputrace_calib_nop, false),
        ("endbr", gputrace_calib_endbr, false),
        ("branch", gputrace_calib_branch, false),
        ("stepped", gputrace_calib_stepped, false),
        ("return", gputrace_calib_return, true),
    ];
    let bare: Vec<f64> = functions.iter().map(|(_, f, _)| per_call_ns(*f)).collect();
    for program in ["uprobe_floor", "uretprobe_floor"] {
        let prog: &mut UProbe = ebpf.program_mut(program).and_then(|p| p.try_into().ok()).ok_or_else(|| format!("no program {program}"))?;
        if prog.fd().is_err() {
            prog.load().map_err(|e| format!("loading {program}: {e}"))?;
        }
    }
    let exe = Path::new("/proc/self/exe");
    let mut links = Vec::new();
    let result = (|| {
        for (name, f, ret) in functions {
            let offset = super::return_safety::own_file_offset(f as usize as u64).ok_or_else(|| format!("{name}: not in a file mapping"))?;
            let program = if ret { "uretprobe_floor" } else { "uprobe_floor" };
            let prog: &mut UProbe = ebpf.program_mut(program).and_then(|p| p.try_into().ok()).ok_or_else(|| format!("no program {program}"))?;
            let link = prog.attach(None, offset, exe, None).map_err(|e| format!("attaching to {name}: {e}"))?;
            links.push((program, link));
        }
        let hits_before = floor_hits(ebpf);
        let probed: Vec<f64> = functions.iter().map(|(_, f, _)| per_call_ns(*f)).collect();
        // Every call ran its program once (the return function's at its return): otherwise
        // the figures measure nothing.
        let expected = u64::from(CALLS * BATCHES) * functions.len() as u64;
        let hits = floor_hits(ebpf).saturating_sub(hits_before);
        if hits < expected {
            return Err(format!("the calibration probes fired {hits} times of {expected}"));
        }
        let cost = |i: usize| (probed[i] - bare[i]).max(0.0);
        Ok(TrapCosts {
            push_ns: cost(0),
            nop_ns: cost(1),
            endbr_ns: cost(2),
            branch_ns: cost(3),
            stepped_ns: cost(4),
            // A return probe also traps at its function's entry (a push here).
            return_ns: (cost(5) - cost(0)).max(0.0),
        })
    })();
    for (program, link) in links {
        if let Some(Ok(owned)) = ebpf.program_mut(program).and_then(|p| <&mut UProbe>::try_from(p).ok()).map(|p| p.take_link(link)) {
            // Removal waits for a grace period; nothing needs to wait for it.
            std::thread::spawn(move || drop(owned));
        }
    }
    result
}

#[cfg(not(target_arch = "x86_64"))]
pub fn calibrate(_ebpf: &mut Ebpf) -> Result<TrapCosts, String> {
    Err("trap costs are measured on x86-64 only".into())
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

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_calibration_functions_begin_with_their_kind() {
        let code = |f: unsafe extern "C" fn()| {
            // SAFETY: reading the first bytes of a function of ours, mapped readable.
            unsafe { std::slice::from_raw_parts(f as usize as *const u8, 8) }.to_vec()
        };
        assert_eq!(classify(&code(gputrace_calib_push)), EntryKind::Push);
        assert_eq!(classify(&code(gputrace_calib_nop)), EntryKind::Nop);
        assert_eq!(classify(&code(gputrace_calib_endbr)), EntryKind::Endbr);
        assert_eq!(classify(&code(gputrace_calib_branch)), EntryKind::Branch);
        assert_eq!(classify(&code(gputrace_calib_stepped)), EntryKind::Stepped);
        assert_eq!(classify(&code(gputrace_calib_return)), EntryKind::Push);
    }
}
