//! The host's side: the privileges and kernel features tracing needs.

use std::path::Path;

use super::{Check, Status};
use crate::preflight::{has, missing_caps, CAP_PERFMON, CAP_SYS_ADMIN};
#[cfg(test)]
use crate::preflight::CAP_BPF;

/// What the host offers, read once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// `uname -r`.
    pub kernel: String,
    /// This process's effective capabilities (`CapEff`).
    pub caps: u64,
    /// The uprobe event source (`/sys/bus/event_source/devices/uprobe`).
    pub uprobes: bool,
    /// The kernel's own BTF (`/sys/kernel/btf/vmlinux`): `None` where it publishes none, else
    /// what the raw tracepoints could not read with it (empty: nothing).
    pub btf: Option<Vec<String>>,
    /// Whether multi-uprobe links load (None: not checked, without privileges).
    pub multi_uprobe_links: Option<bool>,
    /// `kernel.perf_event_paranoid`.
    pub perf_event_paranoid: Option<i32>,
}

/// Read the host's facts. The multi-link probe loads a two-instruction program, so it runs
/// only with the privileges to do so.
#[must_use]
pub fn facts() -> HostFacts {
    let caps = crate::preflight::effective_caps();
    let privileged = can_trace(caps);
    HostFacts {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_owned()).unwrap_or_default(),
        caps,
        uprobes: Path::new("/sys/bus/event_source/devices/uprobe").exists(),
        btf: crate::probes::tracepoint_gaps(),
        multi_uprobe_links: privileged.then(crate::probes::multi_uprobe_links_supported),
        perf_event_paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok().and_then(|s| s.trim().parse().ok()),
    }
}


/// The same rule as `preflight::check`'s.
fn can_trace(caps: u64) -> bool {
    missing_caps(caps).is_empty()
}

/// The host's checks, in the order a user fixes them.
#[must_use]
pub fn judge(f: &HostFacts) -> Vec<Check> {
    let mut checks = Vec::new();
    checks.push(if can_trace(f.caps) {
        let how = if has(f.caps, CAP_SYS_ADMIN) { "CAP_SYS_ADMIN" } else { "CAP_BPF and CAP_PERFMON" };
        Check::new("privileges", Status::Pass, format!("{how} held"))
    } else {
        Check::new(
            "privileges",
            Status::Fail,
            "neither CAP_SYS_ADMIN nor CAP_BPF with CAP_PERFMON is held: run gputrace as root (sudo), or grant those two capabilities \
             (setcap cap_bpf,cap_perfmon+ep $(command -v gputrace))",
        )
    });
    checks.push(Check::new("kernel", Status::Pass, format!("Linux {}", if f.kernel.is_empty() { "(release unknown)" } else { &f.kernel })));
    checks.push(if f.uprobes {
        Check::new("uprobes", Status::Pass, "the uprobe event source is there")
    } else {
        Check::new("uprobes", Status::Fail, "no uprobe event source (/sys/bus/event_source/devices/uprobe): the kernel needs CONFIG_UPROBE_EVENTS")
    });
    checks.push(match &f.btf {
        Some(gaps) if gaps.is_empty() => Check::new("btf", Status::Pass, "/sys/kernel/btf/vmlinux places every member the raw tracepoints read"),
        Some(gaps) => Check::new("btf", Status::Warn, gaps.join("; ")),
        None => Check::new(
            "btf",
            Status::Fail,
            "the kernel publishes no BTF (/sys/kernel/btf/vmlinux): the scheduler, block I/O and child-process tracepoints need it \
             (CONFIG_DEBUG_INFO_BTF)",
        ),
    });
    checks.push(match f.multi_uprobe_links {
        Some(true) => Check::new("multi-uprobe-links", Status::Pass, "available: probes attach in milliseconds and detach off the job's threads"),
        Some(false) => Check::new(
            "multi-uprobe-links",
            Status::Warn,
            "not available (Linux ≥ 6.6): each probe is its own perf event, so attach and exit take longer and --max-overhead is not applied",
        ),
        None => Check::new("multi-uprobe-links", Status::Skip, "not checked without the privileges to load a program"),
    });
    checks.push(match f.perf_event_paranoid {
        _ if has(f.caps, CAP_SYS_ADMIN) || has(f.caps, CAP_PERFMON) => {
            Check::new("perf-events", Status::Pass, "CPU sampling allowed (CAP_PERFMON or CAP_SYS_ADMIN held)")
        }
        Some(level) => Check::new(
            "perf-events",
            Status::Warn,
            format!("kernel.perf_event_paranoid is {level} and CAP_PERFMON is not held: CPU samples of the job cannot be taken"),
        ),
        None => Check::new("perf-events", Status::Skip, "kernel.perf_event_paranoid is not readable"),
    });
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> HostFacts {
        HostFacts {
            kernel: "6.18.0".into(),
            caps: 1 << CAP_SYS_ADMIN,
            uprobes: true,
            btf: Some(Vec::new()),
            multi_uprobe_links: Some(true),
            perf_event_paranoid: Some(2),
        }
    }

    fn status(checks: &[Check], name: &str) -> Status {
        checks.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no {name}")).status
    }

    #[test]
    fn root_on_a_full_kernel_passes_everything() {
        assert!(judge(&root()).iter().all(|c| c.status == Status::Pass), "{:#?}", judge(&root()));
    }

    #[test]
    fn a_plain_user_fails_privileges_and_is_told_how() {
        let f = HostFacts { caps: 0, multi_uprobe_links: None, ..root() };
        let checks = judge(&f);
        assert_eq!(status(&checks, "privileges"), Status::Fail);
        assert!(checks[0].detail.contains("sudo"), "{}", checks[0].detail);
        assert_eq!(status(&checks, "multi-uprobe-links"), Status::Skip);
        assert_eq!(status(&checks, "perf-events"), Status::Warn);
        // The two capabilities are enough.
        let f = HostFacts { caps: 1 << CAP_BPF | 1 << CAP_PERFMON, ..root() };
        assert_eq!(status(&judge(&f), "privileges"), Status::Pass);
        assert_eq!(status(&judge(&f), "perf-events"), Status::Pass);
    }

    #[test]
    fn missing_kernel_features_fail_or_warn_by_what_they_cost() {
        let f = HostFacts { uprobes: false, btf: None, multi_uprobe_links: Some(false), ..root() };
        let checks = judge(&f);
        assert_eq!(status(&checks, "uprobes"), Status::Fail);
        assert_eq!(status(&checks, "btf"), Status::Fail);
        let f = HostFacts { btf: Some(vec!["block I/O is not attributed: request.__sector".into()]), ..root() };
        let btf = judge(&f).into_iter().find(|c| c.name == "btf").expect("btf");
        assert_eq!(btf.status, Status::Warn);
        assert!(btf.detail.contains("request.__sector"), "{}", btf.detail);
        assert_eq!(status(&checks, "multi-uprobe-links"), Status::Warn);
    }
}
