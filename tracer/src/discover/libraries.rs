//! Which CUDA driver libraries a process maps, identified by the inode it really maps.
//!
//! A path in `/proc/PID/maps` is only a name: in a container it is relative to another root,
//! the file may have been replaced on disk since it was mapped, or a hostile process may map
//! something called `libcuda.so.1` anywhere. So a library is opened through
//! `/proc/PID/map_files/START-END`, which reaches the mapped inode itself, and the inode is
//! checked against the one maps reports.

use std::{
    collections::BTreeMap,
    env, fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use super::maps;

/// A library file identified by device and inode.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Library {
    /// The device of the file system holding it (`st_dev`).
    pub dev: u64,
    /// Its inode on that device.
    pub inode: u64,
    /// Path used to read and probe the file (may be a `/proc/.../map_files/...` link).
    pub open_path: PathBuf,
    /// Path as the process names it, for humans.
    pub name: String,
}

/// Is this file name the CUDA driver library (`libcuda.so`, `libcuda.so.1`,
/// `libcuda.so.580.159.04`) — and not libcudart, libcudnn or a stub?
#[must_use]
pub fn is_driver_library(file_name: &str) -> bool {
    file_name == "libcuda.so" || file_name.strip_prefix("libcuda.so.").is_some_and(|v| !v.is_empty())
}

/// Is this file name NCCL (`libnccl.so`, `libnccl.so.2`, `libnccl.so.2.28.9`), whose
/// collectives are probed beside the driver's calls?
#[must_use]
pub fn is_collective_library(file_name: &str) -> bool {
    file_name == "libnccl.so" || file_name.strip_prefix("libnccl.so.").is_some_and(|v| !v.is_empty())
}

/// A library whose exported symbols gputrace probes: the driver, or NCCL.
#[must_use]
pub fn is_probed_library(file_name: &str) -> bool {
    is_driver_library(file_name) || is_collective_library(file_name)
}

/// Is this file name PyTorch's core library (`libc10.so`), whose profiler hook its caching
/// allocator reports every block to (`gputrace_common::ALLOCATOR_SYMBOLS`)?
#[must_use]
pub fn is_allocator_library(file_name: &str) -> bool {
    file_name == "libc10.so"
}

/// The libraries gputrace probes (the CUDA driver, NCCL) mapped by `pid`, one per inode.
#[must_use]
pub fn mapped_by(pid: u32) -> Vec<Library> {
    mapped_matching(pid, is_probed_library)
}

/// The probed libraries (the driver, NCCL) and the caching-allocator libraries `pid` maps,
/// from one reading of its memory map.
#[must_use]
pub fn mapped_driver_and_allocators(pid: u32) -> (Vec<Library>, Vec<Library>) {
    let all = mapped_matching(pid, |name| is_probed_library(name) || is_allocator_library(name));
    all.into_iter().partition(|l| is_probed_library(l.file_name()))
}

impl Library {
    /// The file's name as the process maps it.
    #[must_use]
    pub fn file_name(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or(&self.name)
    }
}

/// Libraries mapped by `pid` whose file name `wanted` accepts, one per inode.
fn mapped_matching(pid: u32, wanted: impl Fn(&str) -> bool) -> Vec<Library> {
    let Ok(text) = crate::discover::procfs::read_text(format!("/proc/{pid}/maps")) else { return Vec::new() };
    let (mappings, _) = maps::parse(&text);
    let mut found: BTreeMap<(u64, u64), Library> = BTreeMap::new();
    for m in mappings.iter().filter(|m| m.inode != 0 && wanted(m.file_name())) {
        let key = (m.dev(), m.inode);
        if found.contains_key(&key) {
            continue;
        }
        let via_map_files = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
        let via_root = Path::new(&format!("/proc/{pid}/root")).join(m.path.trim_start_matches('/'));
        let Some(open_path) = [via_map_files, via_root].into_iter().find(|p| same_inode(p, key)) else {
            log::warn!("pid {pid} maps {} but it cannot be opened with the same inode; skipped", m.path);
            continue;
        };
        found.insert(key, Library { dev: key.0, inode: key.1, open_path, name: m.path.clone() });
    }
    found.into_values().collect()
}

fn same_inode(path: &Path, (dev, inode): (u64, u64)) -> bool {
    fs::metadata(path).is_ok_and(|md| md.dev() == dev && md.ino() == inode)
}

/// The driver libraries a command about to start would load: `libcuda.so.1` looked up the
/// way the dynamic loader does (its `LD_LIBRARY_PATH`, then the ld.so cache, then the
/// default directories), plus every other candidate found, since a program may also
/// `dlopen` by full path. Probing them before the command runs means its first CUDA call is
/// seen.
#[must_use]
pub fn predicted_for_command(ld_library_path: Option<&str>) -> Vec<Library> {
    let mut dirs: Vec<PathBuf> = ld_library_path.unwrap_or_default().split(':').filter(|d| !d.is_empty()).map(PathBuf::from).collect();
    dirs.extend(ld_cache_dirs());
    dirs.extend(
        [
            "/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu",
            "/lib64",
            "/usr/lib64",
            "/usr/lib",
            "/lib",
            "/usr/local/nvidia/lib64",
            "/usr/lib/wsl/lib",
        ]
        .map(PathBuf::from),
    );
    let mut found: BTreeMap<(u64, u64), Library> = BTreeMap::new();
    for dir in dirs {
        for name in ["libcuda.so.1", "libcuda.so"] {
            let candidate = dir.join(name);
            let Ok(real) = fs::canonicalize(&candidate) else { continue };
            let Ok(md) = fs::metadata(&real) else { continue };
            found.entry((md.dev(), md.ino())).or_insert_with(|| Library {
                dev: md.dev(),
                inode: md.ino(),
                name: real.display().to_string(),
                open_path: real,
            });
        }
    }
    found.into_values().collect()
}

/// Directories holding a libcuda according to the ld.so cache (`ldconfig -p`), asked once:
/// running `ldconfig` takes milliseconds, and a session asks again at every exec.
fn ld_cache_dirs() -> Vec<PathBuf> {
    static DIRS: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    DIRS.get_or_init(ask_ld_cache).clone()
}

fn ask_ld_cache() -> Vec<PathBuf> {
    let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"].into_iter().find(|p| Path::new(p).exists());
    let Some(out) = ldconfig.and_then(|l| Command::new(l).arg("-p").output().ok()) else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("libcuda.so"))
        .filter_map(|l| Some(Path::new(l.rsplit_once("=> ")?.1.trim()).parent()?.to_path_buf()))
        .collect()
}

/// The driver libraries process `pid` would load, from its own `LD_LIBRARY_PATH` (as
/// [`predicted_for_command`]); none for a process under another root directory (a
/// container), whose files these paths would not name, and none again for a search path
/// already predicted (an exec-heavy shell script would otherwise pay for it every time).
#[must_use]
pub fn predicted_for_process(pid: u32) -> Vec<Library> {
    static PREDICTED: std::sync::Mutex<std::collections::BTreeSet<Option<Vec<u8>>>> = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let same_root = match (fs::metadata(format!("/proc/{pid}/root")), fs::metadata("/")) {
        (Ok(theirs), Ok(ours)) => theirs.dev() == ours.dev() && theirs.ino() == ours.ino(),
        _ => false,
    };
    if !same_root {
        return Vec::new();
    }
    let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) else { return Vec::new() };
    let ld_library_path = environ.split(|&b| b == 0).find_map(|var| var.strip_prefix(b"LD_LIBRARY_PATH=")).map(<[u8]>::to_vec);
    if !PREDICTED.lock().is_ok_and(|mut seen| seen.insert(ld_library_path.clone())) {
        return Vec::new();
    }
    predicted_for_command(ld_library_path.map(|v| String::from_utf8_lossy(&v).into_owned()).as_deref())
}

/// `LD_LIBRARY_PATH` as the command will see it.
#[must_use]
pub fn inherited_ld_library_path() -> Option<String> {
    env::var("LD_LIBRARY_PATH").ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_the_driver_from_other_cuda_libraries() {
        for yes in ["libcuda.so", "libcuda.so.1", "libcuda.so.580.159.04"] {
            assert!(is_driver_library(yes), "{yes}");
        }
        for yes in ["libnccl.so", "libnccl.so.2", "libnccl.so.2.28.9"] {
            assert!(is_collective_library(yes) && is_probed_library(yes) && !is_driver_library(yes), "{yes}");
        }
        for no in ["libnccl.so.", "libnccl-net.so", "libnccl_static.a"] {
            assert!(!is_collective_library(no), "{no}");
        }
        for no in ["libcudart.so.13", "libcudnn.so.9", "libcuda.so.", "libcuda_stub.so", "xlibcuda.so.1", "libcuda.sox"] {
            assert!(!is_driver_library(no), "{no}");
        }
    }

    #[test]
    fn a_process_without_cuda_maps_none() {
        assert!(mapped_by(std::process::id()).is_empty());
    }
}
