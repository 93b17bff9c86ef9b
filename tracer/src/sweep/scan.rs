//! The `/proc` census: which processes hold a GPU, by what they map and what they have open.
//!
//! Three signs, cheapest first, all from one process's own `/proc` entries:
//! - its memory map names the CUDA driver (`libcuda.so*`, by file name; the inode is what
//!   gets probed, see `discover::libraries`);
//! - its memory map names an NVIDIA device file: a CUDA context maps `/dev/nvidiactl`,
//!   `/dev/nvidiaN` and `/dev/nvidia-uvm` (docs/facts.md), so this is a live context;
//! - its file table has an NVIDIA device open (`/proc/PID/fd/*` links). NVML clients
//!   (`nvidia-smi`, exporters, gputrace itself) open the device without a context. The file
//!   table is the expensive part of a scan (a `readlink` per descriptor), so it is read only
//!   for processes whose map shows no NVIDIA device.
//!
//! Path names are untrusted: the parsers only compare them, never interpret them further.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    time::{Duration, Instant},
};

use crate::discover::{
    libraries::{self, Library},
    maps, process,
    procfs::{self, MAX_CMDLINE_BYTES},
};

/// The NVIDIA device a path names (`nvidia0`, `nvidiactl`, `nvidia-uvm`, `nvidia-caps/…`),
/// or None. Only exact `/dev/nvidia…` paths count: `/tmp/dev/nvidia0` or a file merely called
/// `nvidia0` elsewhere does not.
#[must_use]
pub fn device_file(path: &str) -> Option<&str> {
    let name = path.strip_prefix("/dev/")?;
    let base = name.strip_prefix("nvidia")?;
    let known = (!base.is_empty() && base.bytes().all(|b| b.is_ascii_digit()))
        || matches!(base, "ctl" | "-uvm" | "-uvm-tools" | "-modeset" | "-nvswitchctl" | "-nvlink")
        || base.strip_prefix("-caps/").is_some_and(|c| !c.is_empty() && !c.contains('/'));
    known.then_some(name)
}

/// What one memory map says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapsSigns {
    pub libcuda: bool,
    pub devices: BTreeSet<String>,
}

/// Read the signs from the text of `/proc/PID/maps`.
#[must_use]
pub fn maps_signs(text: &str) -> MapsSigns {
    let (mappings, _) = maps::parse(text);
    let mut signs = MapsSigns::default();
    for m in &mappings {
        if m.inode != 0 && libraries::is_driver_library(m.file_name()) {
            signs.libcuda = true;
        } else if let Some(dev) = device_file(&m.path) {
            signs.devices.insert(dev.to_owned());
        }
    }
    signs
}

/// The path of a process's cgroup from `/proc/PID/cgroup`: the v2 line (`0::/path`), else
/// the first v1 line's path.
#[must_use]
pub fn cgroup_path(text: &str) -> Option<String> {
    let paths: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            Some((parts.next()?, parts.nth(1)?))
        })
        .collect();
    let (_, path) = paths.iter().find(|(id, _)| *id == "0").or_else(|| paths.first())?;
    Some((*path).to_owned())
}

/// A container id in a cgroup path (`/docker/<id>`, `docker-<id>.scope`,
/// `cri-containerd-<id>.scope`, `crio-<id>`, `libpod-<id>`, kubepods `…/<id>`): the
/// 64-hex-digit segment, shortened to the 12 digits `docker ps` shows.
#[must_use]
pub fn container_of(cgroup: &str) -> Option<String> {
    cgroup.split('/').rev().find_map(|segment| {
        let s = segment.strip_suffix(".scope").unwrap_or(segment);
        let id = s.rsplit(['-', ':']).next().unwrap_or(s);
        (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id[..12].to_owned())
    })
}

/// A Kubernetes pod uid in a cgroup path: `kubepods-burstable-pod<uid>.slice` (systemd driver,
/// the uid's dashes written as underscores) or `/kubepods/burstable/pod<uid>/` (cgroupfs
/// driver). The uid is what `kubectl get pod -o jsonpath='{.metadata.uid}'` prints.
#[must_use]
pub fn pod_of(cgroup: &str) -> Option<String> {
    cgroup.split('/').find_map(|segment| {
        let s = segment.strip_suffix(".slice").unwrap_or(segment);
        let uid = s.rsplit_once("-pod").map(|(_, u)| u).or_else(|| s.strip_prefix("pod"))?;
        let uid = uid.replace('_', "-");
        let looks = uid.len() == 36 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') && uid.matches('-').count() == 4;
        looks.then_some(uid)
    })
}

/// The command line from `/proc/PID/cmdline` bytes: arguments joined by spaces, non-UTF-8
/// replaced; None if empty (kernel threads, zombies).
#[must_use]
pub fn command_line(bytes: &[u8]) -> Option<String> {
    let args: Vec<_> = bytes.split(|b| *b == 0).filter(|a| !a.is_empty()).map(String::from_utf8_lossy).collect();
    (!args.is_empty()).then(|| args.join(" "))
}

/// A process's command line, at most [`MAX_CMDLINE_BYTES`] of it (each holder's is read
/// every window). A longer one is cut there and ends in `…`.
fn cmdline(pid: u32) -> Option<String> {
    let (bytes, more) = procfs::read_head(format!("/proc/{pid}/cmdline"), MAX_CMDLINE_BYTES).ok()?;
    let mut line = command_line(&bytes)?;
    if more {
        line.push('…');
    }
    Some(line)
}

/// Who a process is: read once, when it is first seen (it may exit during the window).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Details {
    pub ppid: u32,
    /// The `/proc` state letter (R, S, D, Z, …).
    pub state: char,
    pub comm: String,
    pub start_ticks: u64,
    pub uid: Option<u32>,
    pub cmdline: Option<String>,
    pub cgroup: Option<String>,
}

/// Read a process's details, or None if it is gone.
#[must_use]
pub fn details(pid: u32) -> Option<Details> {
    let stat = process::stat(pid)?;
    Some(Details {
        ppid: stat.ppid,
        state: stat.state,
        comm: stat.comm,
        start_ticks: stat.start_ticks,
        uid: process::uid(pid),
        cmdline: cmdline(pid),
        cgroup: procfs::read_text(format!("/proc/{pid}/cgroup")).ok().and_then(|t| cgroup_path(&t)),
    })
}

/// How a process holds a GPU, as `/proc` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holding {
    pub libcuda: bool,
    /// NVIDIA device files in its memory map (a CUDA context).
    pub mapped: BTreeSet<String>,
    /// NVIDIA device files open in its file table (read only when none is mapped).
    pub open: BTreeSet<String>,
}

impl Holding {
    #[must_use]
    pub fn any(&self) -> bool {
        self.libcuda || !self.mapped.is_empty() || !self.open.is_empty()
    }
}

/// What a scan cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanCost {
    pub processes: u64,
    /// Processes whose map or file table we may not read (another user's, without root).
    pub unreadable: u64,
    /// File descriptors resolved.
    pub fds_read: u64,
    pub elapsed: Duration,
}

impl ScanCost {
    pub fn add(&mut self, other: &Self) {
        self.processes += other.processes;
        self.unreadable += other.unreadable;
        self.fds_read += other.fds_read;
        self.elapsed += other.elapsed;
    }
}

/// One pass over `/proc`.
#[derive(Debug, Default)]
pub struct Census {
    pub holders: BTreeMap<u32, Holding>,
    /// Every distinct CUDA driver library mapped on the host (when asked for).
    pub libraries: Vec<Library>,
    pub cost: ScanCost,
}

/// Every pid under `/proc`.
#[must_use]
pub fn pids() -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// Scan every process but `exclude` (ourselves: NVML opens the device in this process).
/// `files`: also read file tables; `want_libraries`: also resolve the driver libraries to
/// probe (an extra map read for CUDA processes only).
#[must_use]
pub fn census(exclude: u32, files: bool, want_libraries: bool) -> Census {
    let began = Instant::now();
    let mut census = Census::default();
    let mut libraries: BTreeMap<(u64, u64), Library> = BTreeMap::new();
    for pid in pids().into_iter().filter(|&p| p != exclude) {
        census.cost.processes += 1;
        let text = match crate::discover::procfs::read_text(format!("/proc/{pid}/maps")) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                census.cost.unreadable += 1;
                continue;
            }
            // Gone meanwhile.
            Err(_) => continue,
        };
        // Kernel threads and zombies have no memory map and no files of their own.
        if text.is_empty() {
            continue;
        }
        let signs = maps_signs(&text);
        let mut holding = Holding { libcuda: signs.libcuda, mapped: signs.devices, open: BTreeSet::new() };
        if files && holding.mapped.is_empty() {
            match open_devices(pid, &mut census.cost.fds_read) {
                Ok(open) => holding.open = open,
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => census.cost.unreadable += 1,
                // Gone meanwhile.
                Err(_) => {}
            }
        }
        if want_libraries && holding.libcuda {
            for lib in libraries::mapped_by(pid) {
                libraries.entry((lib.dev, lib.inode)).or_insert(lib);
            }
        }
        if holding.any() {
            census.holders.insert(pid, holding);
        }
    }
    census.libraries = libraries.into_values().collect();
    census.cost.elapsed = began.elapsed();
    census
}

/// NVIDIA device files in a process's file table.
fn open_devices(pid: u32, fds_read: &mut u64) -> std::io::Result<BTreeSet<String>> {
    let dir = fs::read_dir(format!("/proc/{pid}/fd"))?;
    let mut out = BTreeSet::new();
    for entry in dir.flatten() {
        *fds_read += 1;
        let Ok(target) = fs::read_link(entry.path()) else { continue };
        if let Some(dev) = target.to_str().and_then(device_file) {
            out.insert(dev.to_owned());
        }
    }
    Ok(out)
}

/// Seconds since boot (`/proc/uptime`) and clock ticks per second, to turn a process's start
/// time into an age.
#[must_use]
pub fn boot_clock() -> Option<(f64, f64)> {
    let uptime: f64 = fs::read_to_string("/proc/uptime").ok()?.split_whitespace().next()?.parse().ok()?;
    let ticks = rustix::param::clock_ticks_per_second();
    (ticks > 0).then_some((uptime, ticks as f64))
}

/// A process's age in seconds from its start time in ticks since boot.
#[must_use]
pub fn age_s(start_ticks: u64, (uptime_s, ticks_per_s): (f64, f64)) -> f64 {
    (uptime_s - start_ticks as f64 / ticks_per_s).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_files_are_recognised_exactly() {
        for (path, dev) in [
            ("/dev/nvidia0", "nvidia0"),
            ("/dev/nvidia15", "nvidia15"),
            ("/dev/nvidiactl", "nvidiactl"),
            ("/dev/nvidia-uvm", "nvidia-uvm"),
            ("/dev/nvidia-uvm-tools", "nvidia-uvm-tools"),
            ("/dev/nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap1"),
        ] {
            assert_eq!(device_file(path), Some(dev), "{path}");
        }
        for path in [
            "",
            "/dev/nvidia",
            "/dev/nvidiax",
            "/dev/nvidia0 (deleted)",
            "/tmp/dev/nvidia0",
            "dev/nvidia0",
            "/dev/null",
            "socket:[12345]",
            "anon_inode:[eventfd]",
            "/dev/nvidia-caps/",
            "/dev/nvidia-caps/a/b",
            "/dev/nvidia0\n/dev/nvidia1",
        ] {
            assert_eq!(device_file(path), None, "{path:?}");
        }
    }

    #[test]
    fn maps_show_the_driver_and_a_context() {
        let text = "\
7f0000000000-7f0000200000 r-xp 00000000 fd:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
7f1000000000-7f1000400000 rw-s 00000000 00:05 77 /dev/nvidiactl
7f1000400000-7f1000800000 rw-s 00000000 00:05 78 /dev/nvidia0
7f2000000000-7f2000001000 r-xp 00000000 fd:01 99 /usr/lib/libcudart.so.13
7f3000000000-7f3000001000 rw-p 00000000 00:00 0
garbage line
";
        let s = maps_signs(text);
        assert!(s.libcuda);
        assert_eq!(s.devices.into_iter().collect::<Vec<_>>(), ["nvidia0", "nvidiactl"]);
        // The runtime alone, or a file merely named like the driver, is not the driver.
        let s = maps_signs("1000-2000 r-xp 0 08:01 9 /opt/libcudart.so.13\n3000-4000 r--p 0 00:00 0 /x/libcuda.so.1\n");
        assert_eq!(s, MapsSigns::default());
        assert_eq!(maps_signs(""), MapsSigns::default());
    }

    #[test]
    fn cgroups_and_containers() {
        assert_eq!(
            cgroup_path("0::/user.slice/user-1000.slice/session-3.scope\n").as_deref(),
            Some("/user.slice/user-1000.slice/session-3.scope")
        );
        assert_eq!(cgroup_path("12:cpu,cpuacct:/job\n0::/unified\n").as_deref(), Some("/unified"));
        assert_eq!(cgroup_path("12:cpu,cpuacct:/job\n").as_deref(), Some("/job"));
        assert_eq!(cgroup_path(""), None);
        assert_eq!(cgroup_path("nonsense"), None);
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for path in [
            format!("/system.slice/docker-{id}.scope"),
            format!("/docker/{id}"),
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-pod1.slice/cri-containerd-{id}.scope"),
            format!("/kubepods/burstable/pod1234/{id}"),
            format!("/machine.slice/libpod-{id}.scope/container"),
        ] {
            assert_eq!(container_of(&path).as_deref(), Some("0123456789ab"), "{path}");
        }
        assert_eq!(container_of("/user.slice/user-1000.slice/session-3.scope"), None);
        let pod = "4f1c2d3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
        let systemd = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{id}.scope", pod.replace('-', "_"));
        assert_eq!(pod_of(&systemd).as_deref(), Some(pod));
        assert_eq!(pod_of(&format!("/kubepods/besteffort/pod{pod}/{id}")).as_deref(), Some(pod));
        assert_eq!(pod_of(&format!("/kubepods.slice/kubepods-pod{}.slice/x", pod.replace('-', "_"))).as_deref(), Some(pod));
        assert_eq!(pod_of("/kubepods/burstable/pod1234/x"), None);
        assert_eq!(pod_of("/system.slice/docker-abc.scope"), None);
        assert_eq!(container_of(""), None);
    }

    #[test]
    fn command_lines_and_ages() {
        assert_eq!(command_line(b"python\0train.py\0--lr\x000.1\0").as_deref(), Some("python train.py --lr 0.1"));
        assert_eq!(command_line(b"").as_deref(), None);
        assert_eq!(command_line(b"\0\0").as_deref(), None);
        assert_eq!(command_line(b"bad\xff\0x").as_deref(), Some("bad\u{fffd} x"));
        assert!((age_s(1000, (100.0, 100.0)) - 90.0).abs() < 1e-9);
        assert!(age_s(u64::MAX, (100.0, 100.0)).abs() < f64::EPSILON);
    }

    #[test]
    fn a_long_command_line_is_read_only_to_the_bound() {
        // One argument of 100 KB (an argument may hold 128 KiB): `sh` ignores it and sleeps
        // (a command after the sleep, so that `sh` does not exec into it).
        let mut child = std::process::Command::new("sh").args(["-c", "sleep 30; exit 0", "sh"]).arg("x".repeat(100_000)).spawn().expect("sh starts");
        // `spawn` returns once exec closed our pipe, which is before the kernel sets the new
        // command line: until then it reads empty.
        let deadline = Instant::now() + Duration::from_secs(5);
        let line = loop {
            let line = details(child.id()).and_then(|d| d.cmdline);
            if line.is_some() || Instant::now() > deadline {
                break line;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let _ = child.kill();
        let _ = child.wait();
        let line = line.expect("a command line");
        assert!(line.starts_with("sh -c sleep 30; exit 0 sh xxx") && line.ends_with("x…"), "{}", &line[..40]);
        assert_eq!(line.len(), MAX_CMDLINE_BYTES + '…'.len_utf8());
    }

    #[test]
    fn the_census_never_lists_the_excluded_process() {
        let me = std::process::id();
        let c = census(me, true, false);
        assert!(!c.holders.contains_key(&me));
        assert!(c.cost.processes > 0);
    }
}
