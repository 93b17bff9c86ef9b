//! gputrace's own resource use (CPU time, peak memory), for the `tracer` sections of its
//! reports: what a tracer costs is part of what it reports.

/// This process's use so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// CPU time in user mode, seconds.
    pub user_s: f64,
    /// CPU time in the kernel on this process's behalf, seconds.
    pub system_s: f64,
    /// Peak resident set (`ru_maxrss`, the `VmHWM` of `/proc/self/status`).
    pub peak_rss_bytes: u64,
}

/// `getrusage(RUSAGE_SELF)`; None if it fails.
#[must_use]
pub fn now() -> Option<Usage> {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid rusage is passed by pointer; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut u) } != 0 {
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(Usage { user_s: secs(u.ru_utime), system_s: secs(u.ru_stime), peak_rss_bytes: u.ru_maxrss as u64 * 1024 })
}
