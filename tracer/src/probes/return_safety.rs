//! Whether return probes are safe on this kernel. On x86-64 since Linux 6.11 a uretprobe
//! returns through a trampoline that makes the `uretprobe` system call, and until kernels let
//! that call bypass seccomp, a process under a seccomp filter that does not allow it was
//! killed (SIGSYS) when a probed function returned. gputrace's uprobes sit on the library
//! file, for every process that maps it — a container under a default seccomp profile
//! included — so before attaching any return probe it asks the kernel itself: a forked child,
//! under a filter that kills on the `uretprobe` call, calls a function of ours that has a
//! return probe. If the child dies, return probes stay off (entry-only mode).

use std::{path::Path, time::Duration};

use aya::{
    maps::{HashMap as BpfHashMap, PerCpuArray},
    Ebpf,
};
use gputrace_common::loss;

use crate::discover::maps;

/// The `uretprobe` system call (x86-64 only; other architectures have no such call).
#[cfg(target_arch = "x86_64")]
const NR_URETPROBE: u32 = 335;
/// `AUDIT_ARCH_X86_64`, as the filter checks the architecture before the number.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;

/// The function the check probes: nothing else calls it.
#[inline(never)]
#[must_use]
pub extern "C" fn gputrace_return_probe_check(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_add(1)
}

/// What the check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Safety {
    /// Return probes do not go through a system call on this architecture.
    NoSyscall,
    /// The child under the filter survived its probed return (and the probe did fire).
    Survived,
    /// The child was killed at its probed return: return probes would kill confined processes.
    Killed,
    /// The check could not run; why.
    Unknown(String),
}

impl Safety {
    /// Whether return probes may go on: only where the check saw a confined process survive
    /// (or no system call is involved), since they apply to every process mapping a library.
    #[must_use]
    pub fn safe(&self) -> bool {
        matches!(self, Self::NoSyscall | Self::Survived)
    }
}

/// Ask the kernel, with `program` (a loaded return-probe program) attached to our own
/// function. The probe stays attached; its link id goes to `links`, which the session
/// detaches with all the others before it exits. (Detaching it from a background thread
/// raced the process's exit: the kernel logged "failed to unregister, leaking uprobe" and
/// kept a breakpoint in the executable for every later run, 6.18.)
pub fn check(ebpf: &mut Ebpf, program: &str, links: &mut super::uprobes::Uprobes) -> Safety {
    // The check itself takes a few milliseconds; telling first whether the kernel has the
    // `uretprobe` call at all meant reading /proc/kallsyms (~80 ms, twice): it is not done.
    let exe = Path::new("/proc/self/exe");
    // The function's file offset from where it is mapped: works for a stripped binary too.
    let Some(offset) = own_file_offset(gputrace_return_probe_check as *const () as usize as u64) else {
        return Safety::Unknown("the check function is not in a file mapping of this binary".into());
    };
    if let Err(e) = links.attach(ebpf, program, offset, exe) {
        return Safety::Unknown(format!("attaching the check probe: {e}"));
    }
    // The return program only counts (as an unmatched return: the check has no entry probe)
    // for a traced process: the child is traced for the check, so a survival can be told
    // from a probe that never fired.
    let fired_before = unmatched_returns(ebpf);
    let verdict = run_child_traced(ebpf, NR_URETPROBE, || {
        std::hint::black_box(gputrace_return_probe_check(std::hint::black_box(41)));
    });
    let fired = unmatched_returns(ebpf) > fired_before;
    // The check's returns are not the job's: start the count from zero again (nothing else
    // is attached yet when the check runs).
    if let Some(mut counts) = ebpf.map_mut("LOSS").and_then(|m| PerCpuArray::<_, u64>::try_from(m).ok()) {
        if let Ok(cpus) = aya::util::nr_cpus() {
            if let Ok(zeros) = aya::maps::PerCpuValues::try_from(vec![0u64; cpus.get() as usize]) {
                let _ = counts.set(loss::UNMATCHED_RETURN, zeros, 0);
            }
        }
    }
    match verdict {
        Safety::Survived if !fired => Safety::Unknown("the check probe did not fire".into()),
        other => other,
    }
}

/// Unmatched returns counted so far, all CPUs.
fn unmatched_returns(ebpf: &Ebpf) -> u64 {
    ebpf.map("LOSS")
        .and_then(|m| PerCpuArray::<_, u64>::try_from(m).ok())
        .and_then(|a| a.get(&loss::UNMATCHED_RETURN, 0).ok())
        .map_or(0, |v| v.iter().sum())
}

/// As [`run_child`], with the child in the `TRACED` set while it runs `work`.
fn run_child_traced(ebpf: &mut Ebpf, nr: u32, work: impl FnOnce()) -> Safety {
    let mut fds = [0; 2];
    // SAFETY: a valid two-int array for pipe2.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Safety::Unknown(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    let (rd, wr) = (fds[0], fds[1]);
    let mut traced = ebpf.map_mut("TRACED").and_then(|m| BpfHashMap::<_, u32, u32>::try_from(m).ok());
    let mut child_pid = None;
    let verdict = run_child_with(
        nr,
        || {
            // Wait until the parent has traced us (the filter allows read).
            let mut byte = 0u8;
            // SAFETY: reading one byte into a local from our end of the pipe.
            unsafe { libc::read(rd, (&raw mut byte).cast(), 1) };
            work();
        },
        |child| {
            child_pid = Some(child as u32);
            if let Some(t) = traced.as_mut() {
                let _ = t.insert(&(child as u32), &0, 0);
            }
            // SAFETY: writing one byte from a local to our end of the pipe.
            unsafe { libc::write(wr, [1u8].as_ptr().cast(), 1) };
        },
    );
    if let (Some(t), Some(pid)) = (traced.as_mut(), child_pid) {
        // The child is gone and its pid may be reused by anyone: untrace it.
        let _ = t.remove(&pid);
    }
    // SAFETY: closing the two descriptors pipe2 gave us.
    unsafe {
        libc::close(rd);
        libc::close(wr);
    }
    verdict
}

/// The offset in our executable's file of the code at `addr`.
fn own_file_offset(addr: u64) -> Option<u64> {
    let exe = std::fs::read_link("/proc/self/exe").ok()?;
    let text = crate::discover::procfs::read_text("/proc/self/maps").ok()?;
    let (mappings, _) = maps::parse(&text);
    let m = mappings.iter().find(|m| m.contains(addr) && std::path::Path::new(&m.path) == exe)?;
    Some(addr - m.start + m.offset)
}

/// Fork a child that installs a filter killing the process on system call `nr` (the
/// `uretprobe` call), runs `work`, and exits 0; report how it ended.
pub fn run_child(nr: u32, work: impl FnOnce()) -> Safety {
    run_child_with(nr, work, |_| {})
}

/// As [`run_child`]; `parent` runs in the parent with the child's pid once it is forked.
fn run_child_with(nr: u32, work: impl FnOnce(), parent: impl FnOnce(libc::pid_t)) -> Safety {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the child only makes system calls and calls `work` (no locks taken that a
        // thread of the parent could hold: no allocation, no I/O through std), then _exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Safety::Unknown(format!("fork: {}", std::io::Error::last_os_error()));
        }
        if pid == 0 {
            if install_filter(nr) {
                work();
                // SAFETY: ends the child without running the parent's atexit handlers.
                unsafe { libc::_exit(0) };
            }
            // SAFETY: as above.
            unsafe { libc::_exit(2) };
        }
        parent(pid);
        wait_child(pid)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (work, parent);
        Safety::NoSyscall
    }
}

#[cfg(target_arch = "x86_64")]
fn install_filter(nr: u32) -> bool {
    // Classic BPF: kill the process on the uretprobe call (for this architecture), allow the rest.
    let ins = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let (ld_w_abs, jeq_k, ret_k) = (0x20, 0x15, 0x06);
    let filter = [
        ins(ld_w_abs, 0, 0, 4),
        ins(jeq_k, 1, 0, AUDIT_ARCH),
        ins(ret_k, 0, 0, 0x7fff_0000),
        ins(ld_w_abs, 0, 0, 0),
        ins(jeq_k, 0, 1, nr),
        ins(ret_k, 0, 0, 0x8000_0000),
        ins(ret_k, 0, 0, 0x7fff_0000),
    ];
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr().cast_mut() };
    // SAFETY: prctl and seccomp with valid arguments; `prog` outlives the calls. Not
    // dumpable: a child killed by the filter must not leave a core dump of gputrace behind.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
            && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::syscall(libc::SYS_seccomp, 1 /* SECCOMP_SET_MODE_FILTER */, 0, &raw const prog) == 0
    }
}

#[cfg(target_arch = "x86_64")]
fn wait_child(pid: libc::pid_t) -> Safety {
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
        if r == pid {
            return if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS {
                Safety::Killed
            } else if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                Safety::Survived
            } else {
                Safety::Unknown(format!("the check child ended with status {status:#x}"))
            };
        }
        if r < 0 || std::time::Instant::now() > deadline {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &raw mut status, 0);
            }
            return Safety::Unknown("the check child did not finish".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn a_child_that_makes_the_filtered_call_is_seen_killed() {
        // The filter and the wait, shown with an ordinary call (kernels that let the
        // uretprobe call bypass seccomp cannot show it with that one).
        let nr = libc::SYS_getppid as u32;
        // SAFETY: a raw system call with no arguments; the filter kills the child first.
        assert_eq!(run_child(nr, || unsafe {
            libc::syscall(libc::SYS_getppid);
        }), Safety::Killed);
        assert_eq!(run_child(nr, || {}), Safety::Survived);
    }
}
