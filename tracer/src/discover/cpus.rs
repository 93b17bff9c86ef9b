//! How many cores a process may use: its CPU affinity (`Cpus_allowed_list` in
//! `/proc/PID/status`), capped by its cgroup's CPU quota (cgroup v2 `cpu.max`, along the path
//! up to the root; the v1 `cpu` controller's `cfs_quota_us`/`cfs_period_us` on hybrid hosts).
//! The step model needs it: work moved off the training thread runs on the cores left.

use std::fs;

/// The cores process `pid` may use; None where `/proc` does not say (the process is gone).
#[must_use]
pub fn of(pid: u32) -> Option<f64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).and_then(|l| count_list(l.trim()))?;
    let quota = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok().and_then(|c| quota_of(&c, |p| fs::read_to_string(p).ok()));
    Some(quota.map_or(f64::from(allowed), |q| q.min(f64::from(allowed))))
}

/// The number of CPUs in a list such as `0-3,8,10-11`; None for a malformed one.
#[must_use]
pub fn count_list(list: &str) -> Option<u32> {
    let mut n = 0u32;
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        n = n.checked_add(b.checked_sub(a)?.checked_add(1)?)?;
    }
    (n > 0).then_some(n)
}

/// The CPUs of a list such as `0-3,8,10-11`, in order; None for a malformed one, or one
/// naming CPUs beyond `MAX_CPU` (the list may come from a file another user controls).
#[must_use]
pub fn parse_list(list: &str) -> Option<Vec<u32>> {
    const MAX_CPU: u32 = 1 << 16;
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        if a > b || b >= MAX_CPU {
            return None;
        }
        cpus.extend(a..=b);
    }
    Some(cpus)
}

/// The CPUs process `pid` may run on (`Cpus_allowed_list`); None where `/proc` does not say.
#[must_use]
pub fn allowed(pid: u32) -> Option<Vec<u32>> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).and_then(parse_list)
}

/// The tightest CPU quota in cores along a process's cgroup path (from `/proc/PID/cgroup`),
/// reading files through `read`; None where no quota is set.
pub fn quota_of(cgroup_file: &str, read: impl Fn(&str) -> Option<String>) -> Option<f64> {
    let mut tightest: Option<f64> = None;
    let mut keep = |q: Option<f64>| {
        if let Some(q) = q.filter(|q| *q > 0.0) {
            tightest = Some(tightest.map_or(q, |t| t.min(q)));
        }
    };
    for line in cgroup_file.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        // Every level from the process's own cgroup up to the root may set a quota.
        let mut levels: Vec<&str> = vec![path];
        let mut p = path;
        while let Some((up, _)) = p.rsplit_once('/') {
            levels.push(if up.is_empty() { "/" } else { up });
            p = up;
        }
        for level in levels {
            let level = if level == "/" { "" } else { level };
            if controllers.is_empty() {
                keep(read(&format!("/sys/fs/cgroup{level}/cpu.max")).and_then(|t| parse_cpu_max(&t)));
            } else if controllers.split(',').any(|c| c == "cpu") {
                let dir = format!("/sys/fs/cgroup/{controllers}{level}");
                let q = read(&format!("{dir}/cpu.cfs_quota_us")).and_then(|t| t.trim().parse::<i64>().ok());
                let period = read(&format!("{dir}/cpu.cfs_period_us")).and_then(|t| t.trim().parse::<i64>().ok());
                keep(match (q, period) {
                    (Some(q), Some(p)) if q > 0 && p > 0 => Some(q as f64 / p as f64),
                    _ => None,
                });
            }
        }
    }
    tightest
}

/// `cpu.max`: `max 100000` (no quota) or `QUOTA PERIOD`, in cores.
#[must_use]
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut it = text.split_whitespace();
    let quota: f64 = it.next()?.parse().ok()?;
    let period: f64 = it.next()?.parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

/// The NUMA node sysfs gives a PCI device as NVML names it (`00000000:3B:00.0`); None where
/// unknown (-1 in sysfs: a machine without NUMA).
#[must_use]
pub fn numa_node_of_pci(bus_id: &str) -> Option<i32> {
    let id = bus_id.to_ascii_lowercase();
    // NVML's domain has eight digits, sysfs's four.
    let id = if id.len() == 16 { id[4..].to_owned() } else { id };
    let node: i32 = fs::read_to_string(format!("/sys/bus/pci/devices/{id}/numa_node")).ok()?.trim().parse().ok()?;
    (node >= 0).then_some(node)
}

/// Where a job may run against the machine's NUMA nodes, for the placement check of a report
/// (`doctor::bearing`). Recorded, so that an offline report checks it too.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CpuPlacement {
    /// The CPUs the job may run on.
    pub cpus: Vec<u32>,
    /// NUMA node → its CPUs.
    pub nodes: std::collections::BTreeMap<i32, Vec<u32>>,
}

/// Process `pid`'s placement; None on a machine of one NUMA node (nothing to place) or where
/// `/proc` and sysfs do not say.
#[must_use]
pub fn placement(pid: u32) -> Option<CpuPlacement> {
    let nodes = numa_nodes();
    (nodes.len() >= 2).then_some(())?;
    Some(CpuPlacement { cpus: allowed(pid)?, nodes })
}

/// NUMA node → its CPUs (empty on a machine without NUMA information).
#[must_use]
pub fn numa_nodes() -> std::collections::BTreeMap<i32, Vec<u32>> {
    let Ok(dir) = fs::read_dir("/sys/devices/system/node") else { return std::collections::BTreeMap::new() };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let node = e.file_name().to_str()?.strip_prefix("node")?.parse().ok()?;
            Some((node, parse_list(&fs::read_to_string(e.path().join("cpulist")).ok()?)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(count_list("0-15"), Some(16));
        assert_eq!(count_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_list("3-1"), None);
        assert_eq!(count_list("x"), None);
        assert_eq!(count_list(""), None);
    }

    #[test]
    fn the_tightest_quota_along_the_path_counts() {
        let files = |p: &str| match p {
            "/sys/fs/cgroup/kubepods/pod1/cpu.max" => Some("250000 100000\n".to_owned()),
            "/sys/fs/cgroup/kubepods/cpu.max" => Some("max 100000\n".to_owned()),
            _ => None,
        };
        assert_eq!(quota_of("0::/kubepods/pod1\n", files), Some(2.5));
        assert_eq!(quota_of("0::/\n", |_| Some("max 100000".to_owned())), None);
        let v1 = |p: &str| match p {
            "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_quota_us" => Some("150000".to_owned()),
            "/sys/fs/cgroup/cpu,cpuacct/job/cpu.cfs_period_us" => Some("100000".to_owned()),
            _ => Some("-1".to_owned()),
        };
        assert_eq!(quota_of("4:cpu,cpuacct:/job\n", v1), Some(1.5));
    }

    #[test]
    fn this_process_may_use_at_least_one_core() {
        assert!(of(std::process::id()).is_some_and(|c| c >= 0.01));
    }
}
