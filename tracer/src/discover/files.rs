//! Opening, as root, files that other processes name (a library they map, a file they mapped
//! before they exited). Their paths lie in directories their owners may control, so a path
//! checked and then used again could name another file by then: each file is opened once,
//! checked through its descriptor, and read (and named to the kernel) only through it.

use std::{
    io,
    os::fd::{AsRawFd as _, OwnedFd},
    path::{Path, PathBuf},
};

use rustix::fs::{fstat, openat2, FileType, Mode, OFlags, ResolveFlags, CWD};

/// Whether symbolic links may be followed on the way to the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// `/proc/PID/map_files/…` and `/proc/PID/root/…` are links by design.
    Follow,
    /// A path as a process's memory map gives it: the kernel names files by their real paths,
    /// so a link on the way was put there since.
    Refuse,
}

/// Open `path` for reading if it is the regular file of device and inode `file`. Opened
/// without blocking and without taking a terminal, so a FIFO or a device put in its place is
/// refused at once, never waited on.
pub fn open_same_file(path: &Path, file: (u64, u64), links: Links) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let resolve = match links {
        Links::Follow => ResolveFlags::empty(),
        Links::Refuse => ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    };
    let fd = openat2(CWD, path, flags, Mode::empty(), resolve)?;
    let st = fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || (st.st_dev, st.st_ino) != file {
        return Err(io::Error::other(format!("it is no longer the file found there (device {}, inode {})", file.0, file.1)));
    }
    Ok(fd)
}

/// The path that reopens a descriptor's own file, whatever its name names now.
#[must_use]
pub fn through(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}
