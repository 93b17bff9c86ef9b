//! Recording files: a buffered output that counts what reached the kernel, and rotation by
//! renaming (`FILE` → `FILE.1` → `FILE.2` …). Where an output path may lead is decided by
//! `crate::output`.

use std::{
    fs::{self, File},
    io::{self, BufWriter, Write as _},
    path::{Path, PathBuf},
};

use crate::output::{self, Destination, Landing, Refused};

/// `FILE.n`
#[must_use]
pub fn rotated_name(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// Shift `FILE.1` … up by one and `FILE` to `FILE.1`, dropping what falls past `keep`
/// (how many older files stay besides the new `FILE`). Only the run of files that exist is
/// touched, so the work is proportional to the files there, whatever `keep` is.
pub fn rotate(path: &Path, keep: u32) -> io::Result<()> {
    if keep == 0 {
        return match fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    // The first free slot, or `keep` when all are taken (its file is dropped).
    let top = (1..=keep).find(|&n| fs::symlink_metadata(rotated_name(path, n)).is_err()).unwrap_or(keep);
    if top == keep {
        let _ = fs::remove_file(rotated_name(path, keep));
    }
    for n in (1..top).rev() {
        fs::rename(rotated_name(path, n), rotated_name(path, n + 1))?;
    }
    fs::rename(path, rotated_name(path, 1))
}

/// `FILE` and the rotated files that follow it without a gap.
#[must_use]
pub fn existing_segments(path: &Path, keep: u32) -> Vec<PathBuf> {
    std::iter::once(path.to_owned()).chain((1..=keep).map(|n| rotated_name(path, n)).take_while(|p| p.exists())).collect()
}

/// A buffered output file that counts its bytes and remembers its first write error: a full
/// disk stops the recording (with what was flushed still readable), never the trace.
///
/// Flushes come after whole frames (a checkpoint, the start or end record), so after a
/// failure a file is cut back to its last flush: it then ends at a checkpoint, holds exactly
/// what the closing message says, and no half-written frame follows it.
#[derive(Debug)]
pub struct Output {
    /// The destination's path, for messages and renames (`-` for standard output).
    pub path: PathBuf,
    out: BufWriter<Closable>,
    /// Bytes handed to the buffer.
    pub bytes: u64,
    /// Bytes the kernel has taken (at the last successful flush): what the file holds.
    pub flushed: u64,
    /// The first write or flush error; once set, nothing more is written. None while all went well.
    pub failed: Option<io::Error>,
    /// Where a file still has to be renamed to; `None` once in place, and for streams.
    placement: Option<Landing>,
}

/// The file under the buffer. Once writing has failed it takes nothing more: what the
/// buffer still holds, flushed when it is dropped, would land after the cut as half a frame.
#[derive(Debug)]
struct Closable {
    file: File,
    closed: bool,
}

impl io::Write for Closable {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            Ok(buf.len())
        } else {
            self.file.write(buf)
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            Ok(())
        } else {
            self.file.flush()
        }
    }
}

impl Output {
    /// Open a vetted destination with `preamble` written; a file is not in place until
    /// [`Output::publish`].
    pub fn open(dest: &Destination, mode: u32, preamble: &[u8]) -> Result<Self, Refused> {
        let (file, placement) = output::open(dest, mode)?;
        let path = match dest {
            Destination::Stdout => PathBuf::from("-"),
            Destination::Stream(p) | Destination::File { path: p, .. } => p.clone(),
        };
        let file = Closable { file, closed: false };
        let mut out = Self { path, out: BufWriter::with_capacity(1 << 20, file), bytes: 0, flushed: 0, failed: None, placement };
        out.write(preamble);
        Ok(out)
    }

    /// A new file at `path`, in place at once (rotation and later flight-recorder dumps, at a
    /// name this session has just vacated; whatever stands there is replaced, never followed).
    pub fn create(path: &Path, mode: u32, preamble: &[u8]) -> io::Result<Self> {
        let dest = Destination::File { path: path.to_owned(), replace: true };
        let mut out = Self::open(&dest, mode, preamble).map_err(|e| io::Error::other(e.to_string()))?;
        out.flush();
        out.publish()?;
        Ok(out)
    }

    /// Put a file in place under its final name (once).
    pub fn publish(&mut self) -> io::Result<()> {
        match &mut self.placement {
            Some(p) => p.publish(),
            None => Ok(()),
        }
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
                self.fail(e);
                false
            }
        }
    }

    /// Hand everything to the kernel: after this a killed recorder loses nothing written.
    pub fn flush(&mut self) {
        if self.failed.is_none() {
            match self.out.flush() {
                Ok(()) => self.flushed = self.bytes,
                Err(e) => self.fail(e),
            }
        }
    }

    /// Stop at the first error: nothing more is written, and a regular file is cut back to
    /// its last flush (the partial write of a full disk ends mid-frame; cutting it also
    /// gives the space back). A device or pipe keeps what it took.
    fn fail(&mut self, e: io::Error) {
        let under = self.out.get_mut();
        under.closed = true;
        if under.file.metadata().is_ok_and(|m| m.is_file()) {
            if let Err(cut) = under.file.set_len(self.flushed) {
                log::warn!("cutting {} back to its last whole frame: {cut}", self.path.display());
            }
        }
        self.failed = Some(e);
    }

    /// Flush and wait for the disk (at the end: the file survives a crash of the machine).
    /// A device or pipe has no disk to wait for (and `fdatasync` fails on them).
    pub fn sync(&mut self) {
        self.flush();
        let regular = self.out.get_ref().file.metadata().is_ok_and(|m| m.is_file());
        if self.failed.is_none() && regular {
            if let Err(e) = self.out.get_ref().file.sync_data() {
                self.fail(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    use super::*;

    fn scratch(name: &str) -> crate::test_support::Scratch {
        crate::test_support::scratch("file-test", name)
    }

    #[test]
    fn a_rotated_segment_replaces_a_planted_symlink_without_following_it() {
        let dir = scratch("symlink");
        let victim = dir.join("victim");
        fs::write(&victim, b"precious").expect("victim");
        let out = dir.join("rec");
        std::os::unix::fs::symlink(&victim, &out).expect("symlink");
        drop(Output::create(&out, 0o600, b"GPUTRACE").expect("create"));
        assert_eq!(fs::read(&victim).expect("victim"), b"precious");
        let meta = fs::symlink_metadata(&out).expect("out");
        assert!(meta.file_type().is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.uid(), rustix::process::geteuid().as_raw());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn rotation_work_follows_the_files_that_exist_not_keep() {
        let dir = scratch("rotate-huge-keep");
        let path = dir.join("rec");
        fs::write(&path, "a").expect("write");
        let started = std::time::Instant::now();
        rotate(&path, u32::MAX).expect("rotate");
        fs::write(&path, "b").expect("write");
        rotate(&path, u32::MAX).expect("rotate");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "two rotations took {:?}", started.elapsed());
        assert_eq!(fs::read_to_string(rotated_name(&path, 1)).expect("1"), "b");
        assert_eq!(fs::read_to_string(rotated_name(&path, 2)).expect("2"), "a");
        assert_eq!(existing_segments(&path, u32::MAX).len(), 3, "rec, rec.1, rec.2 (rec is listed even when absent)");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_write_reports_what_was_flushed_not_what_was_meant() {
        let mut out = Output::open(&Destination::Stream("/dev/full".into()), 0o600, b"GPUTRACE").expect("open");
        out.write(&[0; 4096]);
        out.flush();
        assert!(out.failed.is_some(), "/dev/full refuses writes");
        assert_eq!(out.flushed, 0, "nothing reached the device");
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
