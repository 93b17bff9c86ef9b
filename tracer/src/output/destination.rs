//! Where an output path leads, decided once before anything is written.
//!
//! gputrace often runs as root, so an output path is treated as hostile: a planted symlink,
//! a device node or the recording being read must never be replaced or truncated. The rules
//! (docs/cli.md, "Output files"):
//! - `-` is standard output;
//! - a character device or a FIFO (also when reached through a symlink, as `/dev/stdout`
//!   is) is written through, never replaced: `/dev/null` discards, a pipe streams; one owned
//!   by neither root nor the user gputrace works for (`SUDO_UID` under sudo) only with
//!   `--force`, unless it is our own standard output or error: root's trace written into
//!   another user's FIFO is handed to that user (issue 56);
//! - a regular file that exists is replaced only with `--force`, never when it is one of the
//!   command's inputs (the same inode);
//! - a symlink to a file, a directory, a block device or a socket is refused; with
//!   `--force` a symlink is replaced by the new file (the file it pointed to is untouched).

use std::{
    fmt, fs, io,
    os::unix::fs::{FileTypeExt as _, MetadataExt as _},
    path::{Path, PathBuf},
};

/// A vetted output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// `-`: our standard output.
    Stdout,
    /// A character device or FIFO, opened for writing as it is.
    Stream(PathBuf),
    /// A regular file, written under a temporary name beside it and renamed into place.
    File {
        /// The final path, as given.
        path: PathBuf,
        /// Whether something (a file or, with `--force`, a symlink) may be replaced there.
        replace: bool,
    },
}

impl Destination {
    /// Whether the output can be renamed and rotated (it is a file in a directory).
    #[must_use]
    pub fn is_file(&self) -> bool {
        matches!(self, Self::File { .. })
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stdout => f.write_str("standard output"),
            Self::Stream(p) | Self::File { path: p, .. } => write!(f, "{}", p.display()),
        }
    }
}

/// Why an output path was refused; each says what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// A regular file is at the path, and `--force` was not given.
    #[error("{}: a file is there; pass --force to replace it, or choose another name", .0.display())]
    Exists(PathBuf),
    /// The path is one of the command's inputs (the recording being read), even through a link.
    #[error("{}: this is the input being read ({}); writing there would destroy it — choose another output file", .path.display(), .input.display())]
    IsInput {
        /// The output path asked for.
        path: PathBuf,
        /// The input it is the same file as (same device and inode).
        input: PathBuf,
    },
    /// A symlink that leads to no character device or FIFO is at the path, and `--force` was not given.
    #[error("{}: a symbolic link is there; gputrace does not write through links to files — name the file itself, or pass --force to replace the link", .0.display())]
    Symlink(PathBuf),
    /// The path is something gputrace does not write to (a directory, a block device, a
    /// socket), or a file that changed while it was opened.
    #[error("{}: this is a {kind}; gputrace writes regular files, character devices (/dev/null) and FIFOs", .path.display())]
    Unsupported {
        /// The output path asked for.
        path: PathBuf,
        /// What is there, in words, for the message (e.g. "block device").
        kind: &'static str,
    },
    /// A FIFO or device owned by another user, and `--force` was not given.
    #[error(
        "{}: a FIFO or device owned by uid {owner}, neither root nor you (uid {invoker}); what gputrace writes there goes \
         to that user — pass --force to write to it anyway, or choose another output",
        .path.display()
    )]
    StrangersStream {
        /// The output path asked for.
        path: PathBuf,
        /// The owner of what it leads to.
        owner: u32,
        /// The user gputrace works for.
        invoker: u32,
    },
    /// Examining or opening the path failed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The output path asked for (`-` for standard output).
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

/// What a path's file type allows.
fn kind_of(ft: fs::FileType) -> Result<Kind, &'static str> {
    if ft.is_file() {
        Ok(Kind::Regular)
    } else if ft.is_char_device() || ft.is_fifo() {
        Ok(Kind::Stream)
    } else if ft.is_dir() {
        Err("directory")
    } else if ft.is_block_device() {
        Err("block device")
    } else if ft.is_socket() {
        Err("socket")
    } else {
        Err("special file")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Regular,
    Stream,
}

/// Decide what writing to `path` means. `inputs` are the files the command reads; `force`
/// allows replacing a file or a symlink.
pub fn resolve(path: &Path, force: bool, inputs: &[&Path]) -> Result<Destination, Refused> {
    if path.as_os_str() == "-" {
        return Ok(Destination::Stdout);
    }
    let io_err = |source| Refused::Io { path: path.to_owned(), source };
    if path.file_name().is_none() {
        return Err(Refused::Unsupported { path: path.to_owned(), kind: "directory" });
    }
    let here = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Destination::File { path: path.to_owned(), replace: false }),
        Err(e) => return Err(io_err(e)),
    };
    // An input is refused whatever the flags, through links too: replacing it would lose it.
    if let Ok(target) = fs::metadata(path) {
        for input in inputs {
            if fs::metadata(input).is_ok_and(|i| i.dev() == target.dev() && i.ino() == target.ino()) {
                return Err(Refused::IsInput { path: path.to_owned(), input: input.to_path_buf() });
            }
        }
    }
    if here.file_type().is_symlink() {
        // Follow it only to see whether it leads to a stream (`/dev/stdout`, `/dev/fd/1`).
        let followed = fs::metadata(path).ok().map(|m| kind_of(m.file_type()));
        return match followed {
            Some(Ok(Kind::Stream)) => stream(path, force),
            _ if force => Ok(Destination::File { path: path.to_owned(), replace: true }),
            _ => Err(Refused::Symlink(path.to_owned())),
        };
    }
    match kind_of(here.file_type()) {
        Ok(Kind::Stream) => stream(path, force),
        Ok(Kind::Regular) if force => Ok(Destination::File { path: path.to_owned(), replace: true }),
        Ok(Kind::Regular) => Err(Refused::Exists(path.to_owned())),
        Err(kind) => Err(Refused::Unsupported { path: path.to_owned(), kind }),
    }
}

/// The FIFO or device `path` leads to, if gputrace may write to it: see [`stream_allowed`].
fn stream(path: &Path, force: bool) -> Result<Destination, Refused> {
    let target = fs::metadata(path).map_err(|source| Refused::Io { path: path.to_owned(), source })?;
    let invoker = crate::discover::trust::invoking_uid();
    if force || stream_allowed(target.uid(), invoker, is_our_std_stream(&target)) {
        Ok(Destination::Stream(path.to_owned()))
    } else {
        Err(Refused::StrangersStream { path: path.to_owned(), owner: target.uid(), invoker })
    }
}

/// Whether a FIFO or device owned by `owner` may be written without `--force` for `invoker`:
/// root's (`/dev/null`, `/dev/full`), the invoker's own (their FIFO, their terminal, which
/// login makes theirs), or our standard output or error (`/dev/stdout`, whoever owns it:
/// whoever started gputrace chose it).
fn stream_allowed(owner: u32, invoker: u32, ours: bool) -> bool {
    owner == 0 || owner == invoker || ours
}

/// Whether `target` is the file our standard output or error is.
fn is_our_std_stream(target: &fs::Metadata) -> bool {
    use std::os::fd::AsFd as _;
    [rustix::fs::fstat(io::stdout().as_fd()), rustix::fs::fstat(io::stderr().as_fd())]
        .into_iter()
        .flatten()
        .any(|st| st.st_dev == target.dev() && st.st_ino == target.ino())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn scratch(name: &str) -> crate::test_support::Scratch {
        crate::test_support::scratch("dest", name)
    }

    #[test]
    fn dash_is_stdout_and_a_new_name_is_a_file() {
        assert_eq!(resolve(Path::new("-"), false, &[]).expect("stdout"), Destination::Stdout);
        let dir = scratch("new");
        let p = dir.join("out.json");
        assert_eq!(resolve(&p, false, &[]).expect("new"), Destination::File { path: p, replace: false });
    }

    #[test]
    fn devices_and_fifos_are_written_through() {
        for dev in ["/dev/null", "/dev/full"] {
            assert_eq!(resolve(Path::new(dev), false, &[]).expect(dev), Destination::Stream(dev.into()));
        }
        let dir = scratch("fifo");
        let fifo = dir.join("pipe");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).expect("mkfifo");
        assert_eq!(resolve(&fifo, false, &[]).expect("fifo"), Destination::Stream(fifo.clone()));
        // A link to a device (as /dev/stdout is) leads to a stream, too.
        let link = dir.join("null");
        symlink("/dev/null", &link).expect("link");
        assert_eq!(resolve(&link, false, &[]).expect("link"), Destination::Stream(link));
    }

    #[test]
    fn a_stream_of_another_user_needs_force() {
        assert!(stream_allowed(0, 1000, false), "root's device");
        assert!(stream_allowed(1000, 1000, false), "the invoker's own FIFO or terminal");
        assert!(stream_allowed(65534, 0, true), "our own standard output, whoever owns it");
        assert!(!stream_allowed(65534, 0, false));
        assert!(!stream_allowed(65534, 1000, false));
        // On disk: a FIFO chowned to nobody (needs root to chown; says so and stops if not).
        let dir = scratch("strangers");
        let fifo = dir.join("pipe");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o666)).expect("mkfifo");
        if std::os::unix::fs::chown(&fifo, Some(65534), Some(65534)).is_err() {
            eprintln!("skipped the FIFO half: chown needs root");
            return;
        }
        if crate::discover::trust::invoking_uid() == 65534 {
            return;
        }
        assert!(matches!(resolve(&fifo, false, &[]), Err(Refused::StrangersStream { owner: 65534, .. })));
        let link = dir.join("link");
        symlink(&fifo, &link).expect("link");
        assert!(matches!(resolve(&link, false, &[]), Err(Refused::StrangersStream { .. })), "through a link too");
        assert_eq!(resolve(&fifo, true, &[]).expect("forced"), Destination::Stream(fifo));
        // Root's devices stay writable.
        assert_eq!(resolve(Path::new("/dev/null"), false, &[]).expect("/dev/null"), Destination::Stream("/dev/null".into()));
    }

    #[test]
    fn existing_files_need_force_and_inputs_are_never_replaced() {
        let dir = scratch("exists");
        let f = dir.join("keep.gtr");
        fs::write(&f, b"precious").expect("file");
        assert!(matches!(resolve(&f, false, &[]), Err(Refused::Exists(_))));
        assert_eq!(resolve(&f, true, &[]).expect("forced"), Destination::File { path: f.clone(), replace: true });
        assert!(matches!(resolve(&f, true, &[&f]), Err(Refused::IsInput { .. })));
        // The same file under another name (a hard link, or a link to it) is still the input.
        let hard = dir.join("hard");
        fs::hard_link(&f, &hard).expect("hard link");
        assert!(matches!(resolve(&hard, true, &[&f]), Err(Refused::IsInput { .. })));
        let soft = dir.join("soft");
        symlink(&f, &soft).expect("symlink");
        assert!(matches!(resolve(&soft, true, &[&f]), Err(Refused::IsInput { .. })));
    }

    #[test]
    fn links_to_files_directories_and_block_devices_are_refused() {
        let dir = scratch("refused");
        let victim = dir.join("victim");
        fs::write(&victim, b"x").expect("victim");
        let link = dir.join("link");
        symlink(&victim, &link).expect("link");
        assert!(matches!(resolve(&link, false, &[]), Err(Refused::Symlink(_))));
        assert_eq!(resolve(&link, true, &[]).expect("forced"), Destination::File { path: link, replace: true });
        let dangling = dir.join("dangling");
        symlink(dir.join("nothing"), &dangling).expect("link");
        assert!(matches!(resolve(&dangling, false, &[]), Err(Refused::Symlink(_))));
        assert!(matches!(resolve(&dir, true, &[]), Err(Refused::Unsupported { kind: "directory", .. })));
        assert!(matches!(resolve(Path::new("/"), true, &[]), Err(Refused::Unsupported { .. })));
        if let Some(block) = fs::read_dir("/dev").ok().and_then(|d| {
            d.filter_map(Result::ok).map(|e| e.path()).find(|p| fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_block_device()))
        }) {
            assert!(matches!(resolve(&block, true, &[]), Err(Refused::Unsupported { kind: "block device", .. })));
        }
    }
}
