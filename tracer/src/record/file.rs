//! Output files: created without following a planted symlink, private (0600) by default,
//! and rotated by renaming (`FILE` → `FILE.1` → `FILE.2` …).

use std::{
    fs::{self, File, OpenOptions},
    io::{self, BufWriter, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
};

/// Create `path` afresh for writing, mode `mode`.
///
/// The file is made under a temporary name with `O_CREAT | O_EXCL | O_NOFOLLOW` (an existing
/// file or symlink there makes it fail, not follow) and then renamed over `path`: a rename
/// replaces a symlink planted at `path` instead of writing through it, and a reader never
/// sees a file without its preamble.
pub fn create_private(path: &Path, mode: u32, preamble: &[u8]) -> io::Result<File> {
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the output path names no file"))?;
    let tmp = path.with_file_name(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id()));
    let mut file = OpenOptions::new().write(true).create_new(true).mode(mode).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&tmp)?;
    let written = file.write_all(preamble).and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(file)
}

/// `FILE.n`
#[must_use]
pub fn rotated_name(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// Shift `FILE.(keep-1)` … `FILE` up by one, dropping what falls off the end; `keep` is how
/// many older files stay besides the new `FILE`.
pub fn rotate(path: &Path, keep: u32) -> io::Result<()> {
    if keep == 0 {
        return match fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let _ = fs::remove_file(rotated_name(path, keep));
    for n in (1..keep).rev() {
        let from = rotated_name(path, n);
        if from.exists() {
            fs::rename(&from, rotated_name(path, n + 1))?;
        }
    }
    fs::rename(path, rotated_name(path, 1))
}

/// A buffered output file that counts its bytes and remembers its first write error: a full
/// disk stops the recording (with what was flushed still readable), never the trace.
#[derive(Debug)]
pub struct Output {
    pub path: PathBuf,
    out: BufWriter<File>,
    pub bytes: u64,
    pub failed: Option<io::Error>,
}

impl Output {
    pub fn create(path: &Path, mode: u32, preamble: &[u8]) -> io::Result<Self> {
        let file = create_private(path, mode, preamble)?;
        Ok(Self { path: path.to_owned(), out: BufWriter::with_capacity(1 << 20, file), bytes: preamble.len() as u64, failed: None })
    }

    /// Write `bytes`; false once writing has failed (nothing more is written after a failure,
    /// so the file never holds a frame with a hole in it).
    pub fn write(&mut self, bytes: &[u8]) -> bool {
        if self.failed.is_some() {
            return false;
        }
        match self.out.write_all(bytes) {
            Ok(()) => {
                self.bytes += bytes.len() as u64;
                true
            }
            Err(e) => {
                self.failed = Some(e);
                false
            }
        }
    }

    /// Hand everything to the kernel: after this a killed recorder loses nothing written.
    pub fn flush(&mut self) {
        if self.failed.is_none() {
            if let Err(e) = self.out.flush() {
                self.failed = Some(e);
            }
        }
    }

    /// Flush and wait for the disk (at the end: the file survives a crash of the machine).
    pub fn sync(&mut self) {
        self.flush();
        if self.failed.is_none() {
            if let Err(e) = self.out.get_ref().sync_data() {
                self.failed = Some(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gputrace-file-test-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn a_planted_symlink_is_replaced_not_followed() {
        let dir = scratch("symlink");
        let victim = dir.join("victim");
        fs::write(&victim, b"precious").expect("victim");
        let out = dir.join("rec");
        std::os::unix::fs::symlink(&victim, &out).expect("symlink");
        drop(create_private(&out, 0o600, b"GPUTRACE").expect("create"));
        assert_eq!(fs::read(&victim).expect("victim"), b"precious");
        let meta = fs::symlink_metadata(&out).expect("out");
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // SAFETY: geteuid has no preconditions and cannot fail.
        assert_eq!(meta.uid(), unsafe { libc::geteuid() });
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn rotation_keeps_the_newest() {
        let dir = scratch("rotate");
        let path = dir.join("rec");
        for generation in 0..5 {
            if generation > 0 {
                rotate(&path, 2).expect("rotate");
            }
            fs::write(&path, format!("{generation}")).expect("write");
        }
        assert_eq!(fs::read_to_string(&path).expect("0"), "4");
        assert_eq!(fs::read_to_string(rotated_name(&path, 1)).expect("1"), "3");
        assert_eq!(fs::read_to_string(rotated_name(&path, 2)).expect("2"), "2");
        assert!(!rotated_name(&path, 3).exists());
        let _ = fs::remove_dir_all(&dir);
    }
}
