//! The GPU's side (NVML and sysfs): the PCIe link, the NUMA placement of the job's CPUs,
//! clocks held back, persistence and MIG modes, other processes on the GPU, and the driver
//! against the job's CUDA runtime.

use std::collections::BTreeMap;

use nvml_wrapper::{bitmasks::device::ThrottleReasons, enums::device::UsedGpuMemory, Nvml};

use super::{Check, Status};
use crate::discover::{cpus, process};

/// The names of the GPU checks, in order (each is reported, skipped where it cannot be made).
pub const CHECKS: [&str; 8] = ["nvml", "pcie-link", "numa", "clocks", "persistence", "mig", "other-processes", "cuda-versions"];

/// One GPU, as NVML and sysfs describe it; None where the driver did not say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceFacts {
    /// NVML's device index.
    pub index: u32,
    /// The product name NVML gives.
    pub name: String,
    /// Current generation and width, and the most this card and slot can train to.
    pub pcie: Option<Pcie>,
    /// Utilization (%), to tell a link trained down for idling from a bad one.
    pub busy_pct: Option<u32>,
    /// The NUMA node the GPU's PCIe slot is attached to, from sysfs.
    pub numa_node: Option<i32>,
    /// NVML's current clock throttle reasons, as its bitmask (`ThrottleReasons`).
    pub throttle: Option<u64>,
    /// Whether persistence mode is on.
    pub persistence: Option<bool>,
    /// Whether MIG mode is on (the current mode, not a pending one).
    pub mig: Option<bool>,
    /// Processes using the GPU: pid and the memory it holds (None where not reported).
    pub processes: Vec<(u32, Option<u64>)>,
}

/// A PCIe link: the generation and lane width it runs at now, and the most it can train to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pcie {
    /// Generation it runs at now (3, 4, 5, …).
    pub gen: u32,
    /// The highest generation the card and slot support.
    pub max_gen: u32,
    /// Lanes it runs with now.
    pub width: u32,
    /// The most lanes the card and slot support.
    pub max_width: u32,
}

/// The job `--pid` names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobFacts {
    /// The job's pid.
    pub pid: u32,
    /// The job and its descendants.
    pub tree: Vec<u32>,
    /// The CPUs it may run on.
    pub cpus: Option<Vec<u32>>,
    /// The CUDA runtime it maps (`libcudart.so.MAJOR[.MINOR…]`): major and minor if named.
    pub runtime: Option<(u32, Option<u32>)>,
}

/// Everything the GPU checks judge, gathered once by `facts`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuFacts {
    /// Why there is no NVML (None: it answered).
    pub no_nvml: Option<String>,
    /// The driver's version (`580.95.05`, …); None without NVML or where it would not say.
    pub driver: Option<String>,
    /// The CUDA version the driver supports, as NVML gives it (13000 for 13.0).
    pub cuda_driver: Option<i32>,
    /// Every device NVML could open; empty without NVML.
    pub devices: Vec<DeviceFacts>,
    /// NUMA node → its CPUs (empty on a machine without NUMA information).
    pub nodes: BTreeMap<i32, Vec<u32>>,
    /// The job `--pid` names, if any.
    pub job: Option<JobFacts>,
}

/// Read NVML, sysfs and the job's `/proc` entries once.
#[must_use]
pub fn facts(pid: Option<u32>) -> GpuFacts {
    let job = pid.map(job_facts);
    let nodes = cpus::numa_nodes();
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => return GpuFacts { no_nvml: Some(e.to_string()), nodes, job, ..GpuFacts::default() },
    };
    let count = nvml.device_count().unwrap_or(0);
    let devices = (0..count)
        .filter_map(|i| nvml.device_by_index(i).ok().map(|d| (i, d)))
        .map(|(index, d)| DeviceFacts {
            index,
            name: d.name().unwrap_or_default(),
            pcie: match (d.current_pcie_link_gen(), d.max_pcie_link_gen(), d.current_pcie_link_width(), d.max_pcie_link_width()) {
                (Ok(gen), Ok(max_gen), Ok(width), Ok(max_width)) => Some(Pcie { gen, max_gen, width, max_width }),
                _ => None,
            },
            busy_pct: d.utilization_rates().ok().map(|u| u.gpu),
            numa_node: d.pci_info().ok().and_then(|p| cpus::numa_node_of_pci(&p.bus_id)),
            throttle: d.current_throttle_reasons().ok().map(|r| r.bits()),
            persistence: d.is_in_persistent_mode().ok(),
            mig: d.mig_mode().ok().map(|m| m.current == 1),
            processes: d
                .running_compute_processes()
                .unwrap_or_default()
                .into_iter()
                .chain(d.running_graphics_processes().unwrap_or_default())
                .map(|p| (p.pid, if let UsedGpuMemory::Used(b) = p.used_gpu_memory { Some(b) } else { None }))
                .collect(),
        })
        .collect();
    GpuFacts { no_nvml: None, driver: nvml.sys_driver_version().ok(), cuda_driver: nvml.sys_cuda_driver_version().ok(), devices, nodes, job }
}

fn job_facts(pid: u32) -> JobFacts {
    // Read as bytes, lossily: any mapped path not in UTF-8 (a file named by the job, or by
    // anyone whose file it maps) made `read_to_string` fail, and the job "mapped no runtime".
    let runtime = crate::discover::procfs::read_text(format!("/proc/{pid}/maps")).ok().and_then(|maps| runtime_version(&maps));
    JobFacts { pid, tree: process::tree(pid), cpus: cpus::allowed(pid), runtime }
}

/// The CUDA runtime a process maps, from `libcudart.so.13` or `libcudart.so.12.4.127` in its
/// memory map; the newest where it maps several.
#[must_use]
pub fn runtime_version(maps: &str) -> Option<(u32, Option<u32>)> {
    maps.lines()
        .filter_map(|l| l.rsplit('/').next())
        .filter_map(|name| name.strip_prefix("libcudart.so."))
        .filter_map(|v| {
            let mut parts = v.split('.');
            let major = parts.next()?.parse().ok()?;
            Some((major, parts.next().and_then(|m| m.parse().ok())))
        })
        .max()
}

/// The GPU's checks: one of each name in [`CHECKS`], skipped with the reason where NVML, the
/// driver or the job cannot tell.
#[must_use]
pub fn judge(f: &GpuFacts) -> Vec<Check> {
    if let Some(why) = &f.no_nvml {
        let mut checks = vec![Check::new("nvml", Status::Skip, format!("NVML is unavailable ({why}): no GPU checks on this machine"))];
        checks.extend(CHECKS[1..].iter().map(|name| Check::new(name, Status::Skip, "needs NVML")));
        return checks;
    }
    if f.devices.is_empty() {
        let mut checks = vec![Check::new("nvml", Status::Warn, "NVML answered but lists no GPU (a container without devices, or a driver fault)")];
        checks.extend(CHECKS[1..].iter().map(|name| Check::new(name, Status::Skip, "no GPU")));
        return checks;
    }
    let names: Vec<String> = f.devices.iter().map(|d| format!("{} {}", d.index, d.name)).collect();
    let mut checks = vec![Check::new(
        "nvml",
        Status::Pass,
        format!("driver {}, {} GPU(s): {}", f.driver.as_deref().unwrap_or("(version unknown)"), f.devices.len(), names.join(", ")),
    )];
    checks.push(worst("pcie-link", f.devices.iter().map(pcie)));
    checks.push(worst("numa", f.devices.iter().map(|d| numa(d, &f.nodes, f.job.as_ref()))));
    checks.push(worst("clocks", f.devices.iter().map(clocks)));
    checks.push(worst("persistence", f.devices.iter().map(persistence)));
    checks.push(worst("mig", f.devices.iter().map(mig)));
    checks.push(worst("other-processes", f.devices.iter().map(|d| others(d, f.job.as_ref()))));
    checks.push(versions(f.cuda_driver, f.job.as_ref()));
    checks
}

/// One check over every GPU: the worst status, the details of all of them.
fn worst(name: &str, per_device: impl Iterator<Item = (Status, String)>) -> Check {
    let all: Vec<(Status, String)> = per_device.collect();
    let status = all.iter().map(|(s, _)| *s).filter(|s| *s != Status::Skip).max().unwrap_or(Status::Skip);
    Check::new(name, status, all.into_iter().map(|(_, d)| d).collect::<Vec<_>>().join("; "))
}

/// A link trained below what card and slot can do costs every copy; an idle GPU trains its
/// link down to save power, so a lower generation at idle is normal.
fn pcie(d: &DeviceFacts) -> (Status, String) {
    let Some(p) = d.pcie else { return (Status::Skip, format!("GPU {}: the driver does not report its PCIe link", d.index)) };
    let now = format!("GPU {}: Gen{} x{} of Gen{} x{}", d.index, p.gen, p.width, p.max_gen, p.max_width);
    if p.width < p.max_width {
        return (Status::Warn, format!("{now}: the link trained narrower than it can, so host↔device copies get {}/{} of its bandwidth: reseat the card, or move it to a full-width slot", p.width, p.max_width));
    }
    if p.gen < p.max_gen {
        if d.busy_pct.is_some_and(|b| b < 5) {
            return (Status::Pass, format!("{now}: the GPU is idle, and an idle link trains down to save power; check again under load"));
        }
        return (Status::Warn, format!("{now} while the GPU works: the link runs below its generation (a riser, a BIOS setting, or the slot); copies are slower for it"));
    }
    (Status::Pass, now)
}

/// The job's CPUs against the GPU's NUMA node: copies and the driver's threads cross the
/// socket link when the trainer runs on another node.
fn numa(d: &DeviceFacts, nodes: &BTreeMap<i32, Vec<u32>>, job: Option<&JobFacts>) -> (Status, String) {
    if nodes.len() < 2 {
        return (Status::Pass, format!("GPU {}: one NUMA node, nothing to place", d.index));
    }
    let Some(node) = d.numa_node else { return (Status::Skip, format!("GPU {}: its NUMA node is not known", d.index)) };
    let local = nodes.get(&node).cloned().unwrap_or_default();
    let pin = format!("numactl --cpunodebind={node} --membind={node}");
    let Some(cpus) = job.and_then(|j| j.cpus.as_ref()) else {
        return (Status::Pass, format!("GPU {} is on NUMA node {node}: run its trainer there ({pin})", d.index));
    };
    let on_node = cpus.iter().filter(|c| local.contains(c)).count();
    match on_node {
        0 => (Status::Warn, format!("GPU {} is on NUMA node {node}, and the job may run only on CPUs of other nodes: its copies and launches cross the socket link; run it with {pin}", d.index)),
        n if n < cpus.len() => (Status::Warn, format!("GPU {} is on NUMA node {node}; {} of the job's {} CPUs are on other nodes, where the scheduler may put its threads: {pin}", d.index, cpus.len() - n, cpus.len())),
        _ => (Status::Pass, format!("GPU {} and the job's CPUs are on NUMA node {node}", d.index)),
    }
}

/// Clocks held back by heat, power or the board.
fn clocks(d: &DeviceFacts) -> (Status, String) {
    let Some(bits) = d.throttle else { return (Status::Skip, format!("GPU {}: the driver does not report why its clocks are held", d.index)) };
    let r = ThrottleReasons::from_bits_truncate(bits);
    let named = [
        (ThrottleReasons::HW_THERMAL_SLOWDOWN, "hardware thermal slowdown (the GPU is too hot: check cooling)"),
        (ThrottleReasons::SW_THERMAL_SLOWDOWN, "software thermal slowdown (the GPU runs hot)"),
        (ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN, "power brake (the power supply asked the board to slow down)"),
        (ThrottleReasons::HW_SLOWDOWN, "hardware slowdown (heat or power)"),
        (ThrottleReasons::SW_POWER_CAP, "power cap (normal while the GPU is saturated; not while it waits)"),
    ];
    let held: Vec<&str> = named.iter().filter(|(flag, _)| r.contains(*flag)).map(|(_, why)| *why).collect();
    if held.is_empty() {
        (Status::Pass, format!("GPU {}: clocks not held back", d.index))
    } else {
        (Status::Warn, format!("GPU {}: clocks held back by {}", d.index, held.join(", ")))
    }
}

fn persistence(d: &DeviceFacts) -> (Status, String) {
    match d.persistence {
        Some(true) => (Status::Pass, format!("GPU {}: persistence mode on", d.index)),
        Some(false) => (Status::Warn, format!("GPU {}: persistence mode off: when no process holds the GPU the driver tears it down, and the next job's first CUDA call waits for it (seconds); an administrator can run nvidia-persistenced", d.index)),
        None => (Status::Skip, format!("GPU {}: persistence mode not reported", d.index)),
    }
}

fn mig(d: &DeviceFacts) -> (Status, String) {
    match d.mig {
        Some(true) => (Status::Warn, format!("GPU {}: MIG is on: a job gets one instance's share of the GPU, and NVML's utilization is of the whole GPU", d.index)),
        Some(false) => (Status::Pass, format!("GPU {}: MIG off", d.index)),
        None => (Status::Pass, format!("GPU {}: no MIG on this GPU", d.index)),
    }
}

/// Processes on the GPU besides the job (an X server, another user's job, an idle notebook):
/// they take its memory and its time.
fn others(d: &DeviceFacts, job: Option<&JobFacts>) -> (Status, String) {
    let mine = |pid: u32| job.is_some_and(|j| j.tree.contains(&pid));
    let list: Vec<String> = d
        .processes
        .iter()
        .filter(|(pid, _)| !mine(*pid))
        .map(|&(pid, bytes)| {
            let name = crate::printable::clean(&process::command_line(pid));
            let name = name.split_whitespace().next().unwrap_or("?").rsplit('/').next().unwrap_or("?").to_owned();
            match bytes {
                Some(b) => format!("{pid} {name} ({})", crate::output::wrap::bytes(b)),
                None => format!("{pid} {name}"),
            }
        })
        .collect();
    match (list.is_empty(), job.is_some()) {
        (true, true) => (Status::Pass, format!("GPU {}: only the job uses it", d.index)),
        (true, false) => (Status::Pass, format!("GPU {}: no process uses it", d.index)),
        (false, true) => (Status::Warn, format!("GPU {}: other processes use it: {}", d.index, list.join(", "))),
        (false, false) => (Status::Pass, format!("GPU {} is used by {} (give --pid to check them against a job; `gputrace sweep` judges them)", d.index, list.join(", "))),
    }
}

/// The driver must support the job's CUDA runtime: a runtime of a newer major version does
/// not run at all; a newer minor runs under minor-version compatibility, except for code
/// that needs the newer driver (PTX compiled for it, some new APIs).
fn versions(cuda_driver: Option<i32>, job: Option<&JobFacts>) -> Check {
    let Some(v) = cuda_driver.and_then(|v| u32::try_from(v).ok()) else {
        return Check::new("cuda-versions", Status::Skip, "the driver does not say which CUDA version it supports");
    };
    let (major, minor) = (v / 1000, v % 1000 / 10);
    let supports = format!("the driver supports CUDA {major}.{minor}");
    let Some(job) = job else { return Check::new("cuda-versions", Status::Pass, format!("{supports} (give --pid to check a job's runtime against it)")) };
    match job.runtime {
        None => Check::new("cuda-versions", Status::Skip, format!("{supports}; process {} maps no CUDA runtime (libcudart) to check", job.pid)),
        Some((m, _)) if m > major => Check::new(
            "cuda-versions",
            Status::Fail,
            format!("{supports}, and the job's CUDA runtime is {m}: it cannot run on this driver; update the driver, or install a build for CUDA {major}"),
        ),
        Some((m, Some(n))) if m == major && n > minor => Check::new(
            "cuda-versions",
            Status::Warn,
            format!("{supports}, and the job's runtime is {m}.{n}: it runs under minor-version compatibility, but PTX built for {m}.{n} will not load"),
        ),
        Some((m, n)) => Check::new("cuda-versions", Status::Pass, format!("{supports}; the job's runtime is {m}{}", n.map(|n| format!(".{n}")).unwrap_or_default())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> DeviceFacts {
        DeviceFacts {
            index: 0,
            name: "NVIDIA H200".into(),
            pcie: Some(Pcie { gen: 5, max_gen: 5, width: 16, max_width: 16 }),
            busy_pct: Some(90),
            numa_node: Some(1),
            throttle: Some(0),
            persistence: Some(true),
            mig: Some(false),
            processes: vec![(100, Some(1 << 30))],
        }
    }

    fn two_nodes() -> BTreeMap<i32, Vec<u32>> {
        [(0, (0..8).collect()), (1, (8..16).collect())].into_iter().collect()
    }

    fn job(cpus: Vec<u32>) -> JobFacts {
        JobFacts { pid: 100, tree: vec![100, 101], cpus: Some(cpus), runtime: Some((13, None)) }
    }

    fn facts(devices: Vec<DeviceFacts>, job: Option<JobFacts>) -> GpuFacts {
        GpuFacts { no_nvml: None, driver: Some("580.1".into()), cuda_driver: Some(13000), devices, nodes: two_nodes(), job }
    }

    fn check<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no {name} in {checks:#?}"))
    }

    #[test]
    fn without_nvml_every_gpu_check_is_skipped_and_says_why() {
        let checks = judge(&GpuFacts { no_nvml: Some("libnvidia-ml.so.1: cannot open".into()), ..GpuFacts::default() });
        assert_eq!(checks.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), CHECKS);
        assert!(checks.iter().all(|c| c.status == Status::Skip));
        assert!(checks[0].detail.contains("libnvidia-ml.so.1"), "{}", checks[0].detail);
    }

    #[test]
    fn a_healthy_gpu_with_its_job_on_its_node_passes() {
        let checks = judge(&facts(vec![h200()], Some(job((8..16).collect()))));
        assert!(checks.iter().all(|c| c.status == Status::Pass), "{checks:#?}");
    }

    #[test]
    fn a_job_pinned_to_the_other_node_is_warned_with_the_fix() {
        let checks = judge(&facts(vec![h200()], Some(job((0..8).collect()))));
        let numa = check(&checks, "numa");
        assert_eq!(numa.status, Status::Warn);
        assert!(numa.detail.contains("numactl --cpunodebind=1"), "{}", numa.detail);
        // Half on each node: the scheduler may move it off.
        let checks = judge(&facts(vec![h200()], Some(job((4..12).collect()))));
        assert_eq!(check(&checks, "numa").status, Status::Warn);
        // One node only: nothing to place.
        let mut one = facts(vec![h200()], Some(job((0..8).collect())));
        one.nodes = [(0, (0..16).collect())].into_iter().collect();
        assert_eq!(check(&judge(&one), "numa").status, Status::Pass);
    }

    #[test]
    fn a_narrow_link_warns_and_an_idle_one_trained_down_does_not() {
        let narrow = DeviceFacts { pcie: Some(Pcie { gen: 5, max_gen: 5, width: 8, max_width: 16 }), ..h200() };
        assert_eq!(check(&judge(&facts(vec![narrow], None)), "pcie-link").status, Status::Warn);
        let idle = DeviceFacts { pcie: Some(Pcie { gen: 1, max_gen: 5, width: 16, max_width: 16 }), busy_pct: Some(0), ..h200() };
        assert_eq!(check(&judge(&facts(vec![idle.clone()], None)), "pcie-link").status, Status::Pass);
        let slow = DeviceFacts { busy_pct: Some(80), ..idle };
        assert_eq!(check(&judge(&facts(vec![slow], None)), "pcie-link").status, Status::Warn);
    }

    #[test]
    fn heat_power_persistence_mig_and_strangers_are_warned() {
        let hot = DeviceFacts {
            throttle: Some((ThrottleReasons::HW_THERMAL_SLOWDOWN | ThrottleReasons::GPU_IDLE).bits()),
            persistence: Some(false),
            mig: Some(true),
            processes: vec![(100, Some(1 << 30)), (4242, Some(20 << 30))],
            ..h200()
        };
        let checks = judge(&facts(vec![hot], Some(job((8..16).collect()))));
        for name in ["clocks", "persistence", "mig", "other-processes"] {
            assert_eq!(check(&checks, name).status, Status::Warn, "{name}: {checks:#?}");
        }
        assert!(check(&checks, "clocks").detail.contains("thermal"), "{checks:#?}");
        assert!(check(&checks, "other-processes").detail.contains("4242"), "{checks:#?}");
        assert!(!check(&checks, "other-processes").detail.contains("100 "), "the job's own process is not another: {checks:#?}");
    }

    #[test]
    fn a_runtime_newer_than_the_driver_fails_and_a_newer_minor_warns() {
        let with = |runtime| Some(JobFacts { runtime, ..job((8..16).collect()) });
        let mut f = facts(vec![h200()], with(Some((13, None))));
        f.cuda_driver = Some(12040);
        assert_eq!(check(&judge(&f), "cuda-versions").status, Status::Fail);
        f.job = with(Some((12, Some(6))));
        assert_eq!(check(&judge(&f), "cuda-versions").status, Status::Warn);
        f.job = with(Some((12, Some(4))));
        assert_eq!(check(&judge(&f), "cuda-versions").status, Status::Pass);
        f.job = with(None);
        assert_eq!(check(&judge(&f), "cuda-versions").status, Status::Skip);
    }

    #[test]
    fn a_mapped_path_not_in_utf8_does_not_hide_the_runtime() {
        use std::os::unix::{ffi::OsStrExt as _, io::AsRawFd as _};
        // This process maps a file called libcudart.so.12.4 from a folder whose name is not
        // UTF-8, as a job may: its runtime must still be found.
        let dir = crate::test_support::scratch("doctor", "maps");
        let odd = dir.join(std::ffi::OsStr::from_bytes(b"venv\xff\xfe"));
        std::fs::create_dir(&odd).expect("mkdir");
        let path = odd.join("libcudart.so.12.4");
        std::fs::write(&path, [0u8; 4096]).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        // SAFETY: a fresh private read-only mapping of a 4096-byte file, unmapped below and
        // never read.
        let at = unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
        assert_ne!(at, libc::MAP_FAILED);
        let facts = job_facts(std::process::id());
        // SAFETY: the mapping made above, of that length.
        unsafe { libc::munmap(at, 4096) };
        assert_eq!(facts.runtime, Some((12, Some(4))));
    }

    #[test]
    fn the_runtime_version_is_read_from_the_mapped_library_name() {
        let maps = "7f00-7f01 r-xp 0 08:01 5 /venv/nvidia/cuda_runtime/lib/libcudart.so.13\n\
                    7f02-7f03 r-xp 0 08:01 6 /usr/local/cuda/lib64/libcudart.so.12.4.127\n";
        assert_eq!(runtime_version(maps), Some((13, None)));
        assert_eq!(runtime_version("7f02-7f03 r-xp 0 08:01 6 /opt/libcudart.so.12.4.127\n"), Some((12, Some(4))));
        assert_eq!(runtime_version("7f02-7f03 r-xp 0 08:01 6 /opt/libcuda.so.1\n"), None);
    }
}
