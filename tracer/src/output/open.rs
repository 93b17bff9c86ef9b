//! Opening a vetted [`Destination`] for writing.
//!
//! A file is written unnamed (`O_TMPFILE` in its directory) and linked into place by
//! [`Landing::publish`] only once there is something worth keeping: a failed session or
//! export, even one killed with SIGKILL, leaves nothing behind and whatever was at the path
//! untouched. Without `--force` the link refuses to replace anything that appeared there
//! meanwhile. Where the filesystem has no `O_TMPFILE`, the file is written under a hidden
//! temporary name beside its path (created `O_EXCL | O_NOFOLLOW`, so nothing planted there is
//! followed) and renamed into place (`RENAME_NOREPLACE` without `--force`); temporary files
//! that killed gputraces left there are removed first.

use std::{
    ffi::OsString,
    fs::{self, File, OpenOptions},
    io,
    os::{
        fd::{AsFd as _, AsRawFd as _},
        unix::{
            ffi::OsStrExt as _,
            fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _},
        },
    },
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

use super::destination::{Destination, Refused};

/// Where an opened output still has to go: its final name, and how it gets there.
#[derive(Debug)]
pub struct Landing {
    how: Unnamed,
    path: PathBuf,
    replace: bool,
    published: bool,
}

#[derive(Debug)]
enum Unnamed {
    /// An `O_TMPFILE`: linked in through `/proc/self/fd` (the descriptor is kept for that).
    Anonymous(File),
    /// A hidden temporary file beside the path, renamed into place.
    Named(PathBuf),
}

/// Open `dest` for writing with file mode `mode`. For a file, the [`Landing`] puts it in
/// place; dropping it unpublished leaves nothing.
pub fn open(dest: &Destination, mode: u32) -> Result<(File, Option<Landing>), Refused> {
    match dest {
        Destination::Stdout => {
            let fd = io::stdout().as_fd().try_clone_to_owned().map_err(|source| Refused::Io { path: "-".into(), source })?;
            Ok((File::from(fd), None))
        }
        Destination::Stream(path) => open_stream(path).map(|f| (f, None)),
        Destination::File { path, replace } => {
            let io_err = |source| Refused::Io { path: path.clone(), source };
            let (file, how) = match open_anonymous(path, mode) {
                Ok(file) => {
                    let kept = file.try_clone().map_err(io_err)?;
                    (file, Unnamed::Anonymous(kept))
                }
                Err(e) if no_tmpfile(&e) => {
                    remove_stale_temporaries(path);
                    let tmp = temporary_name(path)?;
                    let file = OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(mode)
                        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                        .open(&tmp)
                        .map_err(io_err)?;
                    (file, Unnamed::Named(tmp))
                }
                Err(e) => return Err(io_err(e)),
            };
            Ok((file, Some(Landing { how, path: path.clone(), replace: *replace, published: false })))
        }
    }
}

/// An unnamed file in `path`'s directory.
fn open_anonymous(path: &Path, mode: u32) -> io::Result<File> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    OpenOptions::new().write(true).mode(mode).custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC).open(dir)
}

/// The errors of a filesystem (or kernel) without `O_TMPFILE`.
fn no_tmpfile(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL))
}

/// Open a device or FIFO as it is: no create, no truncate. It is checked again once open, so
/// a path swapped for a regular file since it was vetted is refused rather than overwritten.
fn open_stream(path: &Path) -> Result<File, Refused> {
    let io_err = |source| Refused::Io { path: path.to_owned(), source };
    let open = |flags: i32| OpenOptions::new().write(true).custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC | flags).open(path);
    // A FIFO with no reader blocks the open until one comes: first try without waiting, and
    // say what gputrace waits for if it must.
    let file = match open(libc::O_NONBLOCK) {
        Ok(f) => {
            // Writes wait for the reader as usual: only the open was not to block.
            rustix::fs::fcntl_setfl(&f, rustix::fs::fcntl_getfl(&f).map_err(|e| io_err(e.into()))? - rustix::fs::OFlags::NONBLOCK)
                .map_err(|e| io_err(e.into()))?;
            f
        }
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            eprintln!("gputrace: {} is a FIFO with no reader yet; waiting for one (open it for reading, e.g. `cat {} > OUT`)…", path.display(), path.display());
            open(0).map_err(io_err)?
        }
        Err(e) => return Err(io_err(e)),
    };
    let ft = file.metadata().map_err(io_err)?.file_type();
    if ft.is_char_device() || ft.is_fifo() {
        Ok(file)
    } else {
        Err(Refused::Unsupported { path: path.to_owned(), kind: "file that changed while it was opened" })
    }
}

/// `.NAME.gputrace-`: how temporary names beside `path` begin.
fn temporary_prefix(path: &Path) -> Result<OsString, Refused> {
    let name = path.file_name().ok_or_else(|| Refused::Unsupported { path: path.to_owned(), kind: "directory" })?;
    let mut prefix = OsString::from(".");
    prefix.push(name);
    prefix.push(".gputrace-");
    Ok(prefix)
}

/// `.NAME.gputrace-PID-N.tmp` beside `path`.
fn temporary_name(path: &Path) -> Result<PathBuf, Refused> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let mut tmp = temporary_prefix(path)?;
    tmp.push(format!("{}-{}.tmp", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    Ok(path.with_file_name(tmp))
}

/// Remove the temporary files beside `path` that a gputrace killed before it could put
/// them in place left (named for a pid that no longer runs, and ours).
fn remove_stale_temporaries(path: &Path) {
    let (Ok(prefix), Some(dir)) = (temporary_prefix(path), path.parent()) else { return };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let Ok(entries) = fs::read_dir(dir) else { return };
    let me = rustix::process::geteuid().as_raw();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(rest) = name.as_bytes().strip_prefix(prefix.as_bytes()).and_then(|r| r.strip_suffix(b".tmp")) else { continue };
        let pid = std::str::from_utf8(rest).ok().and_then(|r| r.split('-').next()?.parse::<i32>().ok());
        let gone = pid.and_then(rustix::process::Pid::from_raw).is_some_and(|p| rustix::process::test_kill_process(p).is_err_and(|e| e == rustix::io::Errno::SRCH));
        if gone && entry.metadata().is_ok_and(|m| m.is_file() && m.uid() == me) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

impl Landing {
    /// The final path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Put the file in place (once; later calls do nothing).
    pub fn publish(&mut self) -> io::Result<()> {
        if self.published {
            return Ok(());
        }
        if self.replace {
            // `--force` replaces a file or a link, never a device node or directory that
            // appeared since the path was vetted.
            if let Ok(m) = fs::symlink_metadata(&self.path) {
                let ft = m.file_type();
                if !(ft.is_file() || ft.is_symlink()) {
                    return Err(io::Error::new(io::ErrorKind::AlreadyExists, "something other than a file appeared there; not replaced"));
                }
            }
        }
        match (&self.how, self.replace) {
            // A link never replaces: it is the claim without `--force`.
            (Unnamed::Anonymous(file), false) => link_in(file, &self.path)?,
            // With it: a name of our own for a moment, then renamed over the path.
            (Unnamed::Anonymous(file), true) => {
                let tmp = temporary_name(&self.path).map_err(|e| io::Error::other(e.to_string()))?;
                link_in(file, &tmp)?;
                if let Err(e) = fs::rename(&tmp, &self.path) {
                    let _ = fs::remove_file(&tmp);
                    return Err(e);
                }
            }
            (Unnamed::Named(tmp), true) => fs::rename(tmp, &self.path)?,
            (Unnamed::Named(tmp), false) => rename_no_replace(tmp, &self.path)?,
        }
        self.published = true;
        Ok(())
    }
}

/// Give an unnamed file the name `to`; fails with `AlreadyExists` if `to` is taken.
fn link_in(file: &File, to: &Path) -> io::Result<()> {
    use rustix::fs::{linkat, AtFlags, CWD};
    let fd = format!("/proc/self/fd/{}", file.as_raw_fd());
    Ok(linkat(CWD, fd.as_str(), CWD, to, AtFlags::SYMLINK_FOLLOW)?)
}

impl Drop for Landing {
    fn drop(&mut self) {
        if let (false, Unnamed::Named(tmp)) = (self.published, &self.how) {
            let _ = fs::remove_file(tmp);
        }
    }
}

/// `rename` that fails with `AlreadyExists` instead of replacing. Filesystems without
/// `RENAME_NOREPLACE` get `link` + `unlink`, which refuses an existing name the same way.
fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => return Ok(()),
        Err(e) if e != rustix::io::Errno::INVAL => return Err(e.into()),
        Err(_) => {}
    }
    fs::hard_link(from, to)?;
    fs::remove_file(from)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn scratch(name: &str) -> crate::test_support::Scratch {
        crate::test_support::scratch("open", name)
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir).expect("dir").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_file_appears_only_when_published() {
        let dir = scratch("publish");
        let path = dir.join("out");
        let (mut f, placement) = open(&Destination::File { path: path.clone(), replace: false }, 0o600).expect("open");
        let mut placement = placement.expect("a file has a placement");
        f.write_all(b"data").expect("write");
        assert!(!path.exists(), "nothing at the path before publishing");
        placement.publish().expect("publish");
        assert_eq!(fs::read(&path).expect("published"), b"data");
        drop(placement);
        assert_eq!(entries(&dir), ["out"], "no temporary file left");
    }

    #[test]
    fn an_unpublished_file_leaves_the_old_one_alone() {
        let dir = scratch("abandon");
        let path = dir.join("keep");
        fs::write(&path, b"precious").expect("old");
        let (mut f, placement) = open(&Destination::File { path: path.clone(), replace: true }, 0o600).expect("open");
        f.write_all(b"new").expect("write");
        drop(placement);
        assert_eq!(fs::read(&path).expect("old"), b"precious");
        assert_eq!(entries(&dir), ["keep"]);
    }

    #[test]
    fn nothing_is_ever_at_a_name_before_publishing_and_stale_temporaries_go() {
        let dir = scratch("unnamed");
        let path = dir.join("out");
        let (_f, placement) = open(&Destination::File { path: path.clone(), replace: false }, 0o600).expect("open");
        assert_eq!(entries(&dir), Vec::<String>::new(), "an unnamed file, not a hidden one");
        drop(placement);
        // What a gputrace killed on a filesystem without O_TMPFILE leaves; pid 0x7ffffffe runs nowhere.
        let stale = dir.join(".out.gputrace-2147483646-0.tmp");
        fs::write(&stale, b"x").expect("stale");
        let mine = dir.join(format!(".out.gputrace-{}-99.tmp", std::process::id()));
        fs::write(&mine, b"x").expect("live");
        remove_stale_temporaries(&path);
        assert_eq!(entries(&dir), [mine.file_name().expect("name").to_string_lossy()], "a live process's file stays");
    }

    #[test]
    fn without_force_a_file_that_appeared_meanwhile_is_kept() {
        let dir = scratch("race");
        let path = dir.join("out");
        let (_f, placement) = open(&Destination::File { path: path.clone(), replace: false }, 0o600).expect("open");
        fs::write(&path, b"someone else's").expect("appeared");
        let err = placement.expect("placement").publish().expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&path).expect("kept"), b"someone else's");
    }

    #[test]
    fn a_stream_is_written_through_and_a_swapped_path_refused() {
        let (mut f, placement) = open(&Destination::Stream("/dev/null".into()), 0o600).expect("open");
        assert!(placement.is_none());
        f.write_all(b"gone").expect("write");
        assert!(fs::symlink_metadata("/dev/null").expect("null").file_type().is_char_device(), "/dev/null is still a device");
        let dir = scratch("swap");
        let p = dir.join("was-a-fifo");
        fs::write(&p, b"precious").expect("file");
        assert!(matches!(open(&Destination::Stream(p.clone()), 0o600), Err(Refused::Unsupported { .. })));
        assert_eq!(fs::read(&p).expect("kept"), b"precious");
    }
}
