//! Checks before loading anything, so that a missing privilege or kernel feature is named
//! precisely instead of surfacing as a bare EPERM from deep inside a load.

use std::fs;

use crate::error::{Result, TraceError};

pub(crate) const CAP_SYS_ADMIN: u32 = 21;
pub(crate) const CAP_PERFMON: u32 = 38;
pub(crate) const CAP_BPF: u32 = 39;

/// Effective capability bits of this process.
pub(crate) fn effective_caps() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| u64::from_str_radix(l.strip_prefix("CapEff:")?.trim(), 16).ok()))
        .unwrap_or(0)
}

/// Whether `caps` hold capability `cap`.
pub(crate) fn has(caps: u64, cap: u32) -> bool {
    caps & (1 << cap) != 0
}

/// The capabilities tracing needs that `caps` lack: none with `CAP_SYS_ADMIN`, else
/// `CAP_BPF` and `CAP_PERFMON`.
pub(crate) fn missing_caps(caps: u64) -> Vec<&'static str> {
    if has(caps, CAP_SYS_ADMIN) {
        return Vec::new();
    }
    [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")].into_iter().filter(|(c, _)| !has(caps, *c)).map(|(_, n)| n).collect()
}

/// Fail with the missing capabilities, or the missing kernel support.
pub fn check() -> Result<()> {
    let missing = missing_caps(effective_caps());
    if !missing.is_empty() {
        return Err(TraceError::Permission { missing: missing.join(" and ") });
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
    use rustix::process::{setrlimit, Resource, Rlimit};
    if let Err(e) = setrlimit(Resource::Memlock, Rlimit { current: None, maximum: None }) {
        log::debug!("could not raise RLIMIT_MEMLOCK: {e}");
    }
}

/// Turn an object load failure into the most precise error we can, by the errno the kernel
/// returned (never by message text: a BTF or relocation error that merely mentions
/// "invalid" is not a missing kernel feature).
pub fn classify_load_error(e: aya::EbpfError) -> TraceError {
    match load_errno(&e) {
        Some(libc::EPERM | libc::EACCES) => {
            TraceError::Permission { missing: "CAP_BPF and CAP_PERFMON (the kernel refused to create BPF maps)".into() }
        }
        Some(libc::ENOSYS) => TraceError::Kernel { what: "the bpf() system call is not available (CONFIG_BPF_SYSCALL)".into() },
        // A map type the kernel does not know: the ring buffer needs Linux 5.8.
        Some(libc::EINVAL) if matches!(e, aya::EbpfError::MapError(aya::maps::MapError::CreateError { .. })) => {
            TraceError::Kernel { what: format!("the kernel refused a BPF map (EINVAL): the ring buffer map needs Linux 5.8+: {e}") }
        }
        _ => TraceError::LoadObject { source: Box::new(e) },
    }
}

/// The errno at the bottom of a load error's chain of causes.
fn load_errno(e: &aya::EbpfError) -> Option<i32> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(errno) = c.downcast_ref::<std::io::Error>().and_then(std::io::Error::raw_os_error) {
            return Some(errno);
        }
        cause = c.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit;

    fn map_create(errno: i32) -> aya::EbpfError {
        aya::EbpfError::MapError(aya::maps::MapError::CreateError {
            name: "EVENTS".into(),
            io_error: std::io::Error::from_raw_os_error(errno),
        })
    }

    #[test]
    fn load_errors_are_classified_by_errno() {
        assert_eq!(classify_load_error(map_create(libc::EPERM)).exit_code(), exit::PERMISSION);
        assert_eq!(classify_load_error(map_create(libc::ENOSYS)).exit_code(), exit::KERNEL);
        assert_eq!(classify_load_error(map_create(libc::EINVAL)).exit_code(), exit::KERNEL);
        // An EINVAL that is not a map the kernel lacks (a file that is not an object) is a
        // load failure, not a missing kernel feature.
        let file = aya::EbpfError::FileError { path: "x.o".into(), error: std::io::Error::from_raw_os_error(libc::EINVAL) };
        assert_eq!(classify_load_error(file).exit_code(), exit::FAILURE);
        assert_eq!(classify_load_error(aya::EbpfError::NoBTF).exit_code(), exit::FAILURE);
    }
}
