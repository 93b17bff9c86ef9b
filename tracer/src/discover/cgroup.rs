//! CPU throttling of the traced tree's cgroups (`cpu.stat` of cgroup v2, or of the v1 `cpu`
//! controller on hybrid hosts): a job whose CPU quota runs out is runnable but not running,
//! and only the cgroup says why.

use std::{collections::BTreeMap, fs};

pub use gputrace_analysis::evidence::cpu_stat::CpuStat;

/// Parse `cpu.stat`.
#[must_use]
pub fn parse_cpu_stat(text: &str) -> CpuStat {
    let mut s = CpuStat::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(k), Some(Ok(v))) = (it.next(), it.next().map(str::parse::<u64>)) else { continue };
        match k {
            "nr_periods" => s.nr_periods = v,
            "nr_throttled" => s.nr_throttled = v,
            "throttled_usec" => s.throttled_usec = v,
            // cgroup v1 counts nanoseconds.
            "throttled_time" => s.throttled_usec = v / 1000,
            _ => {}
        }
    }
    s
}

/// Where the `cpu.stat` of a process's cgroup may be, from `/proc/PID/cgroup`: the v2 line
/// `0::/path`, or the v1 line whose controllers include `cpu`.
#[must_use]
pub fn candidates(cgroup_file: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in cgroup_file.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        let path = if path == "/" { "" } else { path };
        if controllers.is_empty() {
            out.push(format!("/sys/fs/cgroup{path}/cpu.stat"));
            out.push(format!("/sys/fs/cgroup/unified{path}/cpu.stat"));
        } else if controllers.split(',').any(|c| c == "cpu") {
            out.push(format!("/sys/fs/cgroup/{controllers}{path}/cpu.stat"));
            out.push(format!("/sys/fs/cgroup/cpu{path}/cpu.stat"));
        }
    }
    out
}

/// The `cpu.stat` file of a process's cgroup that has throttling counters.
#[must_use]
pub fn of(pid: u32) -> Option<String> {
    let text = crate::discover::procfs::read_text(format!("/proc/{pid}/cgroup")).ok()?;
    candidates(&text).into_iter().find(|f| fs::read_to_string(f).is_ok_and(|t| t.contains("nr_periods")))
}

/// `cpu.stat` of each cgroup holding one of `pids`, keyed by the file's path.
#[must_use]
pub fn snapshot(pids: &[u32]) -> BTreeMap<String, CpuStat> {
    let mut out = BTreeMap::new();
    for &pid in pids {
        let Some(file) = of(pid) else { continue };
        if out.contains_key(&file) {
            continue;
        }
        if let Ok(text) = fs::read_to_string(&file) {
            out.insert(file, parse_cpu_stat(&text));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_subtracts() {
        let a = parse_cpu_stat("usage_usec 10\nnr_periods 5\nnr_throttled 2\nthrottled_usec 300\nnonsense\n");
        assert_eq!(a, CpuStat { nr_periods: 5, nr_throttled: 2, throttled_usec: 300 });
        let b = CpuStat { nr_periods: 9, nr_throttled: 3, throttled_usec: 1300 };
        assert_eq!(b.since(&a), CpuStat { nr_periods: 4, nr_throttled: 1, throttled_usec: 1000 });
        assert_eq!(parse_cpu_stat(""), CpuStat::default());
        assert_eq!(parse_cpu_stat("nr_periods 1\nnr_throttled 1\nthrottled_time 5000000").throttled_usec, 5000);
    }

    #[test]
    fn finds_v1_and_v2_locations() {
        let hybrid = "4:memory:/job\n2:cpu,cpuacct:/job\n0::/\n";
        assert_eq!(
            candidates(hybrid),
            vec![
                "/sys/fs/cgroup/cpu,cpuacct/job/cpu.stat".to_owned(),
                "/sys/fs/cgroup/cpu/job/cpu.stat".to_owned(),
                "/sys/fs/cgroup/cpu.stat".to_owned(),
                "/sys/fs/cgroup/unified/cpu.stat".to_owned(),
            ]
        );
        assert_eq!(candidates("0::/a/b"), vec!["/sys/fs/cgroup/a/b/cpu.stat".to_owned(), "/sys/fs/cgroup/unified/a/b/cpu.stat".to_owned()]);
    }
}
