//! Reading `/proc` text. Its files carry names chosen by other processes — a command name
//! (`comm`), mapped file paths — and those need not be UTF-8; one such byte must not make a
//! whole file unreadable (and a process invisible), so bytes that are not UTF-8 are
//! replaced, never trusted. Files are still opened by what the kernel gives (inodes through
//! `map_files`), not by these lossy names.

use std::{
    io::{self, Read as _},
    path::Path,
};

/// The text of a `/proc` file, with bytes that are not UTF-8 replaced.
pub fn read_text(path: impl AsRef<Path>) -> io::Result<String> {
    let bytes = std::fs::read(path)?;
    Ok(match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// The most of `/proc/PID/cmdline` read. A command line may be as long as the kernel's
/// argument limit (a quarter of the stack limit: 2 MiB by default), and the sweep reads each
/// holder's every window; 4 KiB hold any command line a person reads whole.
pub const MAX_CMDLINE_BYTES: usize = 4096;

/// The first `max` bytes of a `/proc` file, and whether it held more. Some files are as
/// long as their process makes them (a command line may be megabytes), and the kernel builds
/// what is read: reading a head costs only the head.
pub fn read_head(path: impl AsRef<Path>, max: usize) -> io::Result<(Vec<u8>, bool)> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(max as u64 + 1).read_to_end(&mut bytes)?;
    let more = bytes.len() > max;
    bytes.truncate(max);
    Ok((bytes, more))
}

/// The option that hides other users' processes on the `/proc` we read (`hidepid=2`,
/// `hidepid=invisible`, `subset=pid`, …), from `/proc/self/mountinfo`; `None` when every
/// process is visible. Root (`CAP_SYS_PTRACE`) sees them all the same.
#[must_use]
pub fn hiding_option() -> Option<String> {
    hiding_option_in(&read_text("/proc/self/mountinfo").ok()?)
}

/// The hiding option of the mount at `/proc` in a mountinfo text (the last one mounted there
/// is the one in use).
#[must_use]
pub fn hiding_option_in(mountinfo: &str) -> Option<String> {
    let proc_line = mountinfo.lines().rfind(|l| l.split_whitespace().nth(4) == Some("/proc"))?;
    // After the ` - ` separator: filesystem type, source, superblock options.
    let (_, fs) = proc_line.split_once(" - ")?;
    let mut fields = fs.split_whitespace();
    if fields.next() != Some("proc") {
        return None;
    }
    let options = fields.nth(1)?;
    options
        .split(',')
        .find(|o| {
            o.strip_prefix("hidepid=").is_some_and(|v| !matches!(v, "0" | "off")) || o.strip_prefix("subset=").is_some_and(|v| v == "pid")
        })
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_read_and_says_whether_there_was_more() {
        let path = std::env::temp_dir().join(format!("gputrace-head-{}", std::process::id()));
        std::fs::write(&path, vec![b'x'; 10_000]).expect("written");
        let (bytes, more) = read_head(&path, 4096).expect("read");
        assert_eq!((bytes.len(), more), (4096, true));
        std::fs::write(&path, vec![b'x'; 4096]).expect("written");
        let (bytes, more) = read_head(&path, 4096).expect("read");
        let _ = std::fs::remove_file(&path);
        assert_eq!((bytes.len(), more), (4096, false));
    }

    #[test]
    fn hidepid_is_found_in_mountinfo() {
        let plain = "22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n";
        assert_eq!(hiding_option_in(plain), None);
        let hidden = "22 1 0:21 / /proc rw,relatime shared:12 - proc proc rw\n\
                      40 22 0:40 / /proc rw,relatime - proc proc rw,hidepid=invisible\n";
        assert_eq!(hiding_option_in(hidden).as_deref(), Some("hidepid=invisible"), "the last mount on /proc is the one seen");
        assert_eq!(hiding_option_in("22 1 0:21 / /proc rw - proc proc rw,hidepid=2,gid=10\n").as_deref(), Some("hidepid=2"));
        assert_eq!(hiding_option_in("22 1 0:21 / /proc rw - proc proc rw,hidepid=0\n"), None);
        assert_eq!(hiding_option_in("22 1 0:21 / /proc rw - proc proc rw,subset=pid\n").as_deref(), Some("subset=pid"));
        assert_eq!(hiding_option_in("garbage\n\n"), None);
    }

    #[test]
    fn a_process_with_a_non_utf8_name_is_readable() {
        // Name this very thread with a byte that is not UTF-8, as any process may.
        let name = b"gt\xff\xfename\0";
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
        assert_eq!(unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) }, 0);
        let tid = rustix::thread::gettid().as_raw_nonzero();
        let stat = read_text(format!("/proc/self/task/{tid}/stat")).expect("stat reads");
        assert!(stat.contains("gt\u{fffd}\u{fffd}name"), "{stat}");
        let status = read_text(format!("/proc/self/task/{tid}/status")).expect("status reads");
        assert!(status.contains("Uid:"), "{status}");
        assert!(std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).is_err(), "read_to_string fails on it: the defect this avoids");
    }
}
