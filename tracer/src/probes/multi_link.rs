//! Multi-uprobe links (`BPF_TRACE_UPROBE_MULTI`, Linux ≥ 6.6): how gputrace detaches fast.
//!
//! Why: closing a perf-event uprobe waits for RCU grace periods while the kernel holds its
//! global `event_mutex`, so ~70 probes close one after another, ~90 ms each — a session took
//! 6.5 s to exit on 6.18 (docs/facts.md). A multi-uprobe link waits for its grace period
//! outside that mutex: links closed together, on threads of their own, wait together.
//!
//! Such links need programs loaded with the expected attach type `BPF_TRACE_UPROBE_MULTI`,
//! which aya 0.13 never sets for uprobes. So this module loads the object's uprobe programs
//! itself: aya-obj parses the same object and relocates it against the maps aya already
//! created (so both sets of programs share every map), and `BPF_PROG_LOAD` gets the attach
//! type. Where the kernel lacks these links, the caller keeps aya's perf-event path.

use std::{
    collections::{HashMap, HashSet},
    ffi::CString,
    io,
    os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
    path::Path,
};

use aya::{maps::Map, Ebpf};
use aya_obj::{generated::bpf_insn, Object, ProgramSection};

// Kernel ABI (include/uapi/linux/bpf.h).
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_PROG_TYPE_KPROBE: u32 = 2;
const BPF_TRACE_UPROBE_MULTI: u32 = 48;
const BPF_F_UPROBE_MULTI_RETURN: u32 = 1;

/// `union bpf_attr` as `BPF_PROG_LOAD` reads it (the fields up to the attach type; the
/// kernel zero-fills what a shorter attribute leaves out).
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` as `BPF_LINK_CREATE` reads it for `uprobe_multi`.
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    path: u64,
    offsets: u64,
    ref_ctr_offsets: u64,
    cookies: u64,
    cnt: u32,
    multi_flags: u32,
    pid: u32,
    _pad: u32,
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<OwnedFd> {
    let size = std::mem::size_of::<T>();
    // SAFETY: `attr` is a live, initialised `repr(C)` prefix of `union bpf_attr` of `size`
    // bytes; the pointers it carries point at buffers that outlive the call.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, std::ptr::from_mut(attr).cast::<libc::c_void>(), size) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::other("descriptor out of range"))?;
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Load `insns` as a kprobe-type program that multi-uprobe links accept.
fn load(name: &str, insns: &[bpf_insn], license: &CString) -> Result<OwnedFd, String> {
    let mut log = vec![0u8; 64 * 1024];
    let mut prog_name = [0u8; 16];
    // The kernel takes at most 15 characters of [A-Za-z0-9_.].
    for (slot, b) in prog_name.iter_mut().zip(name.bytes().filter(|b| b.is_ascii_alphanumeric() || *b == b'_').take(15)) {
        *slot = b;
    }
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_KPROBE,
        insn_cnt: u32::try_from(insns.len()).map_err(|_| format!("{name}: too many instructions"))?,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name,
        expected_attach_type: BPF_TRACE_UPROBE_MULTI,
        ..ProgLoadAttr::default()
    };
    if let Ok(fd) = bpf(BPF_PROG_LOAD, &mut attr) {
        return Ok(fd);
    }
    // Again with the verifier's log, only for the failure (logging costs load time).
    attr.log_level = 1;
    attr.log_size = log.len() as u32;
    attr.log_buf = log.as_mut_ptr() as u64;
    match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(fd),
        Err(e) => {
            let text = String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(log.len())]).into_owned();
            let tail: Vec<&str> = text.lines().rev().take(5).collect();
            Err(format!("loading {name}: {e}; verifier: {}", tail.into_iter().rev().collect::<Vec<_>>().join(" / ")))
        }
    }
}

/// Attach `program` at `offsets` of the file `path`, for every process (pid 0).
fn link(program: &OwnedFd, path: &Path, offsets: &[u64], is_return: bool) -> io::Result<OwnedFd> {
    let path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut attr = LinkCreateAttr {
        prog_fd: u32::try_from(program.as_raw_fd()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        attach_type: BPF_TRACE_UPROBE_MULTI,
        multi_flags: if is_return { BPF_F_UPROBE_MULTI_RETURN } else { 0 },
        cnt: u32::try_from(offsets.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
        path: path.as_ptr() as u64,
        offsets: offsets.as_ptr() as u64,
        ..LinkCreateAttr::default()
    };
    bpf(BPF_LINK_CREATE, &mut attr)
}

/// Whether this kernel has multi-uprobe links. A trivial program of the right attach type
/// is linked to a directory: a kernel with the links refuses the directory (`EBADF`), one
/// without them refuses the attach type first.
#[must_use]
pub fn supported() -> bool {
    // r0 = 0; exit (registers and immediates all zero)
    let insn = |code: u8| {
        // SAFETY: `bpf_insn` is plain integers, for which all-zero bytes are valid.
        let mut i: bpf_insn = unsafe { std::mem::zeroed() };
        i.code = code;
        i
    };
    let (mov, exit) = (insn(0xb7), insn(0x95));
    let Ok(license) = CString::new("GPL") else { return false };
    let Ok(program) = load("gputrace_probe", &[mov, exit], &license) else { return false };
    matches!(link(&program, Path::new("/"), &[0], false), Err(e) if e.raw_os_error() == Some(libc::EBADF))
}

/// One attachment; detached when dropped.
#[derive(Debug)]
pub struct Link(#[expect(dead_code, reason = "held for its drop, which detaches")] OwnedFd);

/// The object's uprobe programs, loaded for multi-uprobe links.
#[derive(Debug)]
pub struct Programs {
    /// Program name → (descriptor, whether it is a return probe).
    loaded: HashMap<String, (OwnedFd, bool)>,
}

/// The descriptor of an aya map, whatever its kind.
fn map_fd(map: &Map) -> RawFd {
    let data = match map {
        Map::Array(d)
        | Map::BloomFilter(d)
        | Map::CpuMap(d)
        | Map::DevMap(d)
        | Map::DevMapHash(d)
        | Map::HashMap(d)
        | Map::LpmTrie(d)
        | Map::LruHashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::PerfEventArray(d)
        | Map::ProgramArray(d)
        | Map::Queue(d)
        | Map::RingBuf(d)
        | Map::SockHash(d)
        | Map::SockMap(d)
        | Map::Stack(d)
        | Map::StackTraceMap(d)
        | Map::Unsupported(d)
        | Map::XskMap(d) => d,
    };
    data.fd().as_fd().as_raw_fd()
}

impl Programs {
    /// Load every uprobe program of `object`, sharing the maps of `ebpf` (loaded from the
    /// same object; call before any map is taken out of it).
    pub fn load(object: &[u8], ebpf: &Ebpf) -> Result<Self, String> {
        let mut obj = Object::parse(object).map_err(|e| format!("parsing the eBPF object: {e}"))?;
        let maps: Vec<(&str, RawFd)> = ebpf.maps().map(|(name, map)| (name, map_fd(map))).collect();
        let missing: Vec<&str> = obj.maps.keys().map(String::as_str).filter(|n| !maps.iter().any(|(m, _)| m == n)).collect();
        if !missing.is_empty() {
            return Err(format!("maps not created by the loader: {}", missing.join(", ")));
        }
        let text_sections: HashSet<usize> = obj.functions.keys().map(|(section, _)| *section).collect();
        let object_maps = obj.maps.clone();
        obj.relocate_maps(maps.iter().filter_map(|(name, fd)| object_maps.get(*name).map(|m| (*name, *fd, m))), &text_sections)
            .map_err(|e| format!("relocating maps: {e}"))?;
        obj.relocate_calls(&text_sections).map_err(|e| format!("relocating calls: {e}"))?;
        let mut loaded = HashMap::new();
        for (name, program) in &obj.programs {
            let is_return = match program.section {
                ProgramSection::UProbe { .. } => false,
                ProgramSection::URetProbe { .. } => true,
                _ => continue,
            };
            let function = obj.functions.get(&program.function_key()).ok_or_else(|| format!("{name}: no code"))?;
            let fd = load(name, &function.instructions, &program.license)?;
            loaded.insert(name.clone(), (fd, is_return));
        }
        Ok(Self { loaded })
    }

    /// The kernel's run-time accounting of `program`: total ns and runs (counted only while
    /// `BPF_ENABLE_STATS` is held; None for a program not loaded here).
    #[must_use]
    pub fn run_time(&self, program: &str) -> Option<(u64, u64)> {
        let (fd, _) = self.loaded.get(program)?;
        run_time(fd.as_fd())
    }

    /// Attach `program` at `offset` of `path`, for every process.
    pub fn attach(&self, program: &str, path: &Path, offset: u64) -> io::Result<Link> {
        let (fd, is_return) = self.loaded.get(program).ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no program {program}")))?;
        link(fd, path, &[offset], *is_return).map(Link)
    }
}


/// `union bpf_attr` as `BPF_OBJ_GET_INFO_BY_FD` reads it.
#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// A program's accumulated run time (ns) and run count, from `bpf_prog_info`.
#[must_use]
pub fn run_time(program: std::os::fd::BorrowedFd<'_>) -> Option<(u64, u64)> {
    // SAFETY: `bpf_prog_info` is plain integers and byte arrays: all-zero is a valid value
    // (and what the kernel expects in the fields it does not fill).
    let mut info: aya_obj::generated::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr = InfoAttr {
        bpf_fd: u32::try_from(program.as_raw_fd()).ok()?,
        info_len: u32::try_from(std::mem::size_of_val(&info)).ok()?,
        info: std::ptr::from_mut(&mut info) as u64,
    };
    let size = std::mem::size_of::<InfoAttr>();
    // SAFETY: `attr` is a live `repr(C)` prefix of `union bpf_attr`; `info` points at a
    // `bpf_prog_info` of `info_len` bytes that outlives the call. The command returns 0, no
    // descriptor.
    let r = unsafe { libc::syscall(libc::SYS_bpf, BPF_OBJ_GET_INFO_BY_FD, std::ptr::from_mut(&mut attr).cast::<libc::c_void>(), size) };
    (r == 0).then_some((info.run_time_ns, info.run_cnt))
}
