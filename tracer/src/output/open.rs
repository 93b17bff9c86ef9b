//! Opening a vetted [`Destination`] for writing.
//!
//! A file is written under a temporary name beside its final path (created `O_EXCL |
//! O_NOFOLLOW`, so nothing planted there is followed) and renamed into place by
//! [`Placement::publish`] only once there is something worth keeping: a failed session or
//! export leaves whatever was at the path untouched. Without `--force` the rename refuses to
//! replace anything that appeared there meanwhile (`RENAME_NOREPLACE`).

use std::{
    fs::{self, File, OpenOptions},
    io,
    os::{
        fd::AsFd as _,
        unix::fs::{FileTypeExt as _, OpenOptionsExt as _},
    },
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

use super::destination::{Destination, Refused};

/// Where an opened output still has to go: a temporary file and its final name.
#[derive(Debug)]
pub struct Placement {
    tmp: PathBuf,
    path: PathBuf,
    replace: bool,
    published: bool,
}

/// Open `dest` for writing with file mode `mode`. For a file, the [`Placement`] renames it
/// into place; dropping it unpublished removes the temporary file.
pub fn open(dest: &Destination, mode: u32) -> Result<(File, Option<Placement>), Refused> {
    match dest {
        Destination::Stdout => {
            let fd = io::stdout().as_fd().try_clone_to_owned().map_err(|source| Refused::Io { path: "-".into(), source })?;
            Ok((File::from(fd), None))
        }
        Destination::Stream(path) => open_stream(path).map(|f| (f, None)),
        Destination::File { path, replace } => {
            let tmp = temporary_name(path)?;
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)
                .map_err(|source| Refused::Io { path: path.clone(), source })?;
            Ok((file, Some(Placement { tmp, path: path.clone(), replace: *replace, published: false })))
        }
    }
}

/// Open a device or FIFO as it is: no create, no truncate. It is checked again once open, so
/// a path swapped for a regular file since it was vetted is refused rather than overwritten.
fn open_stream(path: &Path) -> Result<File, Refused> {
    let io_err = |source| Refused::Io { path: path.to_owned(), source };
    let file = OpenOptions::new().write(true).custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC).open(path).map_err(io_err)?;
    let ft = file.metadata().map_err(io_err)?.file_type();
    if ft.is_char_device() || ft.is_fifo() {
        Ok(file)
    } else {
        Err(Refused::Unsupported { path: path.to_owned(), kind: "file that changed while it was opened" })
    }
}

/// `.NAME.gputrace-PID-N.tmp` beside `path`.
fn temporary_name(path: &Path) -> Result<PathBuf, Refused> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = path.file_name().ok_or_else(|| Refused::Unsupported { path: path.to_owned(), kind: "directory" })?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".gputrace-{}-{}.tmp", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    Ok(path.with_file_name(tmp))
}

impl Placement {
    /// The final path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rename the file into place (once; later calls do nothing).
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
            fs::rename(&self.tmp, &self.path)?;
        } else {
            rename_no_replace(&self.tmp, &self.path)?;
        }
        self.published = true;
        Ok(())
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        if !self.published {
            let _ = fs::remove_file(&self.tmp);
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

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gputrace-open-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch dir");
        dir
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
