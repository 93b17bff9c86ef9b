//! Checks before loading anything, so that a missing privilege or kernel feature is named
//! precisely instead of surfacing as a bare EPERM from deep inside a load.

use std::fs;

use crate::error::{Result, TraceError};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capability bits of this process.
fn effective_caps() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| u64::from_str_radix(l.strip_prefix("CapEff:")?.trim(), 16).ok()))
        .unwrap_or(0)
}

/// Fail with the missing capabilities, or the missing kernel support.
pub fn check() -> Result<()> {
    let caps = effective_caps();
    let has = |c: u32| caps & (1 << c) != 0;
    if !has(CAP_SYS_ADMIN) {
        let missing: Vec<&str> =
            [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")].into_iter().filter(|(c, _)| !has(*c)).map(|(_, n)| n).collect();
        if !missing.is_empty() {
            return Err(TraceError::Permission { missing: missing.join(" and ") });
        }
    }
    if fs::metadata("/sys/bus/event_source/devices/uprobe").is_err() {
        return Err(TraceError::Kernel {
            what: "uprobes are not available (/sys/bus/event_source/devices/uprobe is missing; \
                   the kernel needs CONFIG_UPROBE_EVENTS)"
                .into(),
        });
    }
    raise_memlock();
    Ok(())
}

/// Kernels before 5.11 charge BPF maps to `RLIMIT_MEMLOCK`; newer ones ignore it.
fn raise_memlock() {
    let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: a valid rlimit struct is passed by pointer.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const unlimited) } != 0 {
        log::debug!("could not raise RLIMIT_MEMLOCK: {}", std::io::Error::last_os_error());
    }
}

/// Turn an object load failure into the most precise error we can.
pub fn classify_load_error(e: aya::EbpfError) -> TraceError {
    let text = e.to_string();
    if text.contains("Operation not permitted") {
        return TraceError::Permission { missing: "CAP_BPF and CAP_PERFMON (the kernel refused to create BPF maps)".into() };
    }
    if text.contains("Function not implemented") || text.contains("Invalid argument") {
        return TraceError::Kernel { what: format!("the BPF system call or the ring buffer map (Linux 5.8+) is unavailable: {text}") };
    }
    TraceError::LoadObject { source: Box::new(e) }
}
