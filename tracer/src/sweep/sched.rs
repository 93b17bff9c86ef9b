//! The scheduler's view of a thread read from `/proc`, for the sweep's judgement of each job
//! (`job`) without tracepoints: a host-wide sweep attaches none (`probes::Scope::AllCuda`),
//! and the kernel keeps these figures for every thread anyway.
//!
//! - `/proc/<pid>/task/<tid>/schedstat`: nanoseconds on a CPU and waiting on a run queue
//!   (`Documentation/scheduler/sched-stats.rst`), exact and cumulative;
//! - its `stat` state letter and `wchan` (the kernel function it sleeps in), sampled at each
//!   poll: what a sleeping thread waits for. Checked on this kernel (6.18): `anon_pipe_read`,
//!   `unix_stream_read_generic`, `poll_schedule_timeout.constprop.0`, `do_epoll_wait`,
//!   `futex_do_wait`, `hrtimer_nanosleep` for a pipe, a socket, poll/select, epoll, a lock or
//!   queue, and `time.sleep` (docs/sweep.md).

use std::fs;

/// A thread's cumulative scheduler time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStat {
    pub on_cpu_ns: u64,
    pub runqueue_ns: u64,
}

impl SchedStat {
    /// The time since `before` (a thread id the kernel reused counts from zero).
    #[must_use]
    pub fn since(self, before: Self) -> Self {
        if self.on_cpu_ns < before.on_cpu_ns || self.runqueue_ns < before.runqueue_ns {
            return self;
        }
        Self { on_cpu_ns: self.on_cpu_ns - before.on_cpu_ns, runqueue_ns: self.runqueue_ns - before.runqueue_ns }
    }
}

/// `schedstat`'s text: on-CPU ns, run-queue ns, time slices.
#[must_use]
pub fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut fields = text.split_ascii_whitespace().map(str::parse::<u64>);
    Some(SchedStat { on_cpu_ns: fields.next()?.ok()?, runqueue_ns: fields.next()?.ok()? })
}

#[must_use]
pub fn schedstat(pid: u32, tid: u32) -> Option<SchedStat> {
    parse_schedstat(&fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?)
}

/// The threads of `pid` now (none once it is gone).
#[must_use]
pub fn threads(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// The processes `pid`'s main thread forked that are alive (a DataLoader's workers are the
/// main thread's children); none where the kernel does not say (`CONFIG_PROC_CHILDREN`).
#[must_use]
pub fn children(pid: u32) -> Vec<u32> {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).map(|t| t.split_ascii_whitespace().filter_map(|p| p.parse().ok()).collect()).unwrap_or_default()
}

/// What a sleeping thread waits for. The order is the precedence when several threads of a
/// job sleep at once (`Sample::of`): the one that waits on the outside world says why they all
/// wait, the ones parked on a lock or queue wait for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Wait {
    /// Uninterruptible sleep (`D`): the disk, mostly.
    Disk,
    /// A pipe, socket or poll/select/epoll: another process (a DataLoader worker) or the
    /// network hands it something.
    Input,
    /// A timed sleep (`time.sleep`): the program's own pause.
    Timer,
    /// A futex: a lock, a queue or a condition, so another thread of the job.
    Thread,
    /// Anything else (waiting for a child, a full pipe, the driver outside a probed call).
    Other,
}

impl Wait {
    pub const ALL: [Self; 5] = [Self::Disk, Self::Input, Self::Timer, Self::Thread, Self::Other];
}

/// What a thread in state `state` sleeping in `wchan` waits for; None if it is running or
/// runnable (or its state is unknown).
#[must_use]
pub fn classify(state: char, wchan: &str) -> Option<Wait> {
    match state {
        'D' => return Some(Wait::Disk),
        'S' | 'I' => {}
        _ => return None,
    }
    let has = |parts: &[&str]| parts.iter().any(|p| wchan.contains(p));
    Some(if has(&["nanosleep"]) {
        Wait::Timer
    } else if has(&["futex"]) {
        Wait::Thread
    } else if has(&["pipe_read", "pipe_wait", "poll", "select", "unix_stream_read", "unix_dgram", "sk_wait", "tcp_recv", "skb_recv", "wait_woken"]) {
        Wait::Input
    } else {
        Wait::Other
    })
}

/// The state letter and wait channel of a thread now; None once it is gone.
#[must_use]
pub fn now(pid: u32, tid: u32) -> Option<(char, String)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // The state follows the command name's closing parenthesis (which may itself hold any byte).
    let state = stat.rsplit_once(')')?.1.split_ascii_whitespace().next()?.chars().next()?;
    let wchan = fs::read_to_string(format!("/proc/{pid}/task/{tid}/wchan")).unwrap_or_default();
    Some((state, wchan))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_reads_and_counts_from_a_baseline() {
        assert_eq!(parse_schedstat("89939494 62958324 244\n"), Some(SchedStat { on_cpu_ns: 89_939_494, runqueue_ns: 62_958_324 }));
        assert_eq!(parse_schedstat("12\n"), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
        let later = SchedStat { on_cpu_ns: 500, runqueue_ns: 70 };
        assert_eq!(later.since(SchedStat { on_cpu_ns: 200, runqueue_ns: 50 }), SchedStat { on_cpu_ns: 300, runqueue_ns: 20 });
        // A reused thread id: its counters start again below the old thread's.
        assert_eq!(later.since(SchedStat { on_cpu_ns: 900, runqueue_ns: 10 }), later);
    }

    #[test]
    fn wait_channels_say_what_a_thread_waits_for() {
        for (state, wchan, wait) in [
            ('S', "anon_pipe_read", Some(Wait::Input)),
            ('S', "poll_schedule_timeout.constprop.0", Some(Wait::Input)),
            ('S', "do_epoll_wait", Some(Wait::Input)),
            ('S', "unix_stream_read_generic", Some(Wait::Input)),
            ('S', "futex_do_wait", Some(Wait::Thread)),
            ('S', "futex_wait_queue", Some(Wait::Thread)),
            ('S', "hrtimer_nanosleep", Some(Wait::Timer)),
            ('S', "do_wait", Some(Wait::Other)),
            ('S', "", Some(Wait::Other)),
            ('D', "folio_wait_bit_common", Some(Wait::Disk)),
            ('R', "", None),
            ('Z', "", None),
        ] {
            assert_eq!(classify(state, wchan), wait, "{state} {wchan}");
        }
    }

    #[test]
    fn this_threads_figures_are_read() {
        let pid = std::process::id();
        // `/proc/thread-self` links to `<pid>/task/<tid>`.
        let link = fs::read_link("/proc/thread-self").expect("thread-self");
        let tid: u32 = link.file_name().and_then(|n| n.to_str()?.parse().ok()).expect("a tid");
        assert!(threads(pid).contains(&tid));
        // Some CPU time, then off the CPU once, so that the kernel has brought it to account.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(20);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        let (state, _) = now(pid, tid).expect("our own stat");
        assert_eq!(state, 'R');
        // A kernel without schedstats (CONFIG_SCHED_INFO off) has no file: nothing to assert.
        if let Some(s) = schedstat(pid, tid) {
            assert!(s.on_cpu_ns > 0, "{s:?}");
        }
    }
}
