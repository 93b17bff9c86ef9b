//! Errors that reach the user, each with what to do about it, and the exit code it maps to.
//! Exit codes are part of the command-line contract (docs/cli.md).

use std::{io, path::PathBuf};

/// Exit codes, documented in docs/cli.md.
pub mod exit {
    /// Success: a report was printed.
    pub const OK: i32 = 0;
    /// Something failed that has no more specific code.
    pub const FAILURE: i32 = 1;
    /// Bad command line (clap's own code).
    pub const USAGE: i32 = 2;
    /// The target pid does not exist or exited before tracing began.
    pub const NO_TARGET: i32 = 3;
    /// Not root and missing a capability gputrace needs.
    pub const PERMISSION: i32 = 4;
    /// The kernel lacks a feature gputrace needs (BPF, uprobes, tracepoints, ring buffer).
    pub const KERNEL: i32 = 5;
    /// A recording file is damaged or not a recording.
    pub const BAD_RECORDING: i32 = 6;
}

// The aya error sources are boxed: they are hundreds of bytes, and unboxed they would make
// every `Result<_, TraceError>` that large, even on the success path.
/// An error that stops a gputrace run; its message says what to do, and
/// [`TraceError::exit_code`] gives the process exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("no process with pid {pid}; check it with `ps -p {pid}`")]
    /// No process has the pid given to trace.
    NoSuchProcess {
        /// The pid asked for.
        pid: u32,
    },

    #[error("process {pid} exited before tracing could start")]
    /// The target process exited before the probes were in place.
    TargetExited {
        /// The target's pid.
        pid: u32,
    },

    #[error("process {pid} was replaced by another process with the same pid while attaching; nothing was traced")]
    /// The target exited and a new process took its pid while gputrace attached, so the
    /// probes would have watched the wrong process.
    PidReused {
        /// The pid that was reused.
        pid: u32,
    },

    #[error(
        "tracing needs root, or the capabilities {missing}; run gputrace with sudo \
         (or grant them: setcap cap_bpf,cap_perfmon,cap_sys_ptrace,cap_dac_read_search+ep gputrace)"
    )]
    /// gputrace lacks privileges it needs: it runs without root and misses capabilities, or
    /// the kernel refused to create BPF maps.
    Permission {
        /// The missing capabilities, for the message (e.g. "`CAP_BPF` and `CAP_PERFMON`").
        missing: String,
    },

    #[error("this kernel cannot run gputrace: {what}")]
    /// The running kernel lacks a feature gputrace needs.
    Kernel {
        /// Which feature is missing and why it is needed, for the message.
        what: String,
    },

    #[error(
        "this gputrace binary was built without its eBPF programs (GPUTRACE_EBPF_STUB was set); \
         run `cargo xtask setup` and rebuild"
    )]
    /// The binary was built with `GPUTRACE_EBPF_STUB`, so it carries no eBPF programs to load.
    NoEbpfObject,

    #[error("loading the eBPF object: {source}")]
    /// The kernel refused the eBPF object as a whole (its maps, BTF or relocations).
    LoadObject {
        /// The loader's error.
        #[source]
        source: Box<aya::EbpfError>,
    },

    #[error("loading eBPF program `{program}`: {source}{}", verifier_hint(.source))]
    /// The kernel refused one eBPF program; the message carries the verifier log when there is one.
    LoadProgram {
        /// The program's name in the eBPF object.
        program: String,
        /// The loader's error.
        #[source]
        source: Box<aya::programs::ProgramError>,
    },

    #[error("no CUDA symbol of {} could be probed (the notes say why for each)", .library.display())]
    /// Not one CUDA symbol of a library could be probed, so tracing it would record nothing.
    NothingProbed {
        /// The library, as its name is known to the user.
        library: PathBuf,
    },

    #[error("attaching to `{symbol}` in {}: {source}", .library.display())]
    /// Attaching a uprobe to a symbol of a library failed.
    AttachUprobe {
        /// The probed symbol.
        symbol: String,
        /// The library that holds the symbol.
        library: PathBuf,
        /// Why the kernel refused the attachment.
        #[source]
        source: Box<AttachError>,
    },

    #[error("attaching raw tracepoint {name}: {source}")]
    /// Attaching an eBPF program to a kernel tracepoint failed.
    AttachTracepoint {
        /// The tracepoint's name (e.g. `sched_switch`).
        name: String,
        /// Why the kernel refused the attachment.
        #[source]
        source: Box<aya::programs::ProgramError>,
    },

    #[error("eBPF map `{name}` is missing from the object or has the wrong type")]
    /// A map the tracer needs is missing from the eBPF object, or has another type: the
    /// binary and its eBPF programs do not match.
    Map {
        /// The map's name in the eBPF object.
        name: String,
    },

    #[error("{} has no symbol `{symbol}`", .library.display())]
    /// A library lacks a symbol that must be probed.
    NoSymbol {
        /// The symbol looked for.
        symbol: String,
        /// The library searched.
        library: PathBuf,
    },

    #[error("eBPF program `{name}` is missing from the object or has the wrong type")]
    /// A program the tracer needs is missing from the eBPF object, or has another type: the
    /// binary and its eBPF programs do not match.
    Program {
        /// The program's name in the eBPF object.
        name: String,
    },

    #[error("reading the ELF symbols of {}: {source}", .path.display())]
    /// A library's ELF symbol tables could not be read.
    Elf {
        /// The library's file, as its name is known to the user.
        path: PathBuf,
        /// The ELF parser's error.
        #[source]
        source: object::read::Error,
    },

    #[error(
        "{}: its symbol tables ask for more than {} MiB to be read; not probed (a real library's are far smaller: \
         a damaged or hostile file)",
        .path.display(), .limit >> 20
    )]
    /// A library's headers claim symbol tables larger than gputrace reads
    /// (`discover::symbols::MAX_ELF_READ_BYTES`).
    ElfTooLarge {
        /// The library's file, as its name is known to the user.
        path: PathBuf,
        /// The most bytes read from one library, for the message.
        limit: u64,
    },

    #[error(
        "{}: owned by uid {owner}, neither root nor the user who ran gputrace (uid {invoker}); not probed — \
         root would parse and probe a file another user controls",
        .library.display()
    )]
    /// A library owned by neither root nor the invoking user (`discover::trust`).
    UntrustedLibrary {
        /// The library, as the process names it.
        library: PathBuf,
        /// Its owner.
        owner: u32,
        /// The user gputrace works for (`SUDO_UID` under sudo).
        invoker: u32,
    },

    #[error("{}: {size} bytes, over the {} MiB a library may have to be probed; not probed", .library.display(), .limit >> 20)]
    /// A library file larger than `discover::trust::MAX_LIBRARY_FILE_BYTES`.
    LibraryTooLarge {
        /// The library, as the process names it.
        library: PathBuf,
        /// Its size.
        size: u64,
        /// The limit, for the message.
        limit: u64,
    },

    #[error("{}: {limit} libraries are probed already, the most one session probes; not probed", .library.display())]
    /// The session probes `probes::MAX_PROBED_LIBRARIES` libraries already.
    TooManyLibraries {
        /// The library left out.
        library: PathBuf,
        /// The limit, for the message.
        limit: usize,
    },

    #[error("cannot listen on {addr}: {source}; give --listen an address of this host and a free port (ADDR:PORT)")]
    /// The HTTP server could not bind the address given with `--listen`.
    Listen {
        /// The address asked for, as `ADDR:PORT`.
        addr: String,
        /// Why binding failed.
        #[source]
        source: io::Error,
    },

    #[error("{what} {}: {source}", .path.display())]
    /// An I/O operation failed.
    Io {
        /// What was being done, placed before `path` in the message (e.g. "reading library").
        what: &'static str,
        /// What it was done to: a file, or a description such as "the terminal".
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },

    #[error(
        "{}: {source}: another recording (or someone else) took this name while gputrace started; nothing was traced \
         — choose another name, or pass --force to replace what is there",
        .path.display()
    )]
    /// A recording could not be published under its name, because something else took the
    /// name after the command line was checked.
    OutputTaken {
        /// The recording's path.
        path: PathBuf,
        /// Why publishing failed.
        #[source]
        source: io::Error,
    },

    #[error("starting `{command}`: {source}")]
    /// The command to trace could not be started.
    Spawn {
        /// The command line, joined with spaces (bytes that are not UTF-8 shown replaced).
        command: String,
        /// Why starting it failed.
        #[source]
        source: io::Error,
    },
}

fn verifier_hint(e: &aya::programs::ProgramError) -> String {
    match e {
        aya::programs::ProgramError::LoadError { verifier_log, .. } => format!("\nverifier log:\n{verifier_log}"),
        _ => String::new(),
    }
}

impl TraceError {
    /// The process exit code for this error.
    #[must_use]
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::NoSuchProcess { .. } | Self::TargetExited { .. } | Self::PidReused { .. } => exit::NO_TARGET,
            Self::Permission { .. } => exit::PERMISSION,
            Self::Kernel { .. } => exit::KERNEL,
            // As an output path refused on the command line: nothing was done.
            Self::OutputTaken { .. } | Self::Listen { .. } => exit::USAGE,
            _ => exit::FAILURE,
        }
    }

    /// Whether this is an attachment that failed because its file (or the process whose
    /// mapping named it) went away: the library as a whole is gone, not one symbol.
    #[must_use]
    pub fn file_gone(&self) -> bool {
        let Self::AttachUprobe { source, .. } = self else { return false };
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<io::Error>() {
                return matches!(io.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) || io.kind() == io::ErrorKind::NotFound;
            }
            cause = e.source();
        }
        false
    }

    /// The same error about a file read through a descriptor (`/proc/self/fd/N`), with the
    /// file's name as the user knows it.
    #[must_use]
    pub(crate) fn naming(self, name: &str) -> Self {
        match self {
            Self::Elf { source, .. } => Self::Elf { path: name.into(), source },
            Self::ElfTooLarge { limit, .. } => Self::ElfTooLarge { path: name.into(), limit },
            Self::UntrustedLibrary { owner, invoker, .. } => Self::UntrustedLibrary { library: name.into(), owner, invoker },
            Self::LibraryTooLarge { size, limit, .. } => Self::LibraryTooLarge { library: name.into(), size, limit },
            Self::Io { what, source, .. } => Self::Io { what, path: name.into(), source },
            other => other,
        }
    }

    /// Whether a library's failure will not change by trying again: the file is not trusted,
    /// too large, not a readable ELF, holds nothing to probe, or the session's cap is reached.
    /// (A file gone or a descriptor refused may differ for the next process that maps it.)
    #[must_use]
    pub fn lasting(&self) -> bool {
        matches!(
            self,
            Self::Elf { .. }
                | Self::ElfTooLarge { .. }
                | Self::UntrustedLibrary { .. }
                | Self::LibraryTooLarge { .. }
                | Self::TooManyLibraries { .. }
                | Self::NothingProbed { .. }
        )
    }

    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io { what, path: path.into(), source }
    }
}

/// A `Result` whose error defaults to [`TraceError`].
pub type Result<T, E = TraceError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_about_a_descriptor_names_the_file_as_the_user_knows_it() {
        let e = TraceError::io("reading library", "/proc/self/fd/7", io::Error::from_raw_os_error(libc::EIO)).naming("/usr/lib/libcuda.so.1");
        let text = e.to_string();
        assert!(text.contains("/usr/lib/libcuda.so.1") && !text.contains("/proc/self/fd"), "{text}");
        // Errors that name no file are left as they are.
        assert_eq!(TraceError::NoEbpfObject.naming("x").to_string(), TraceError::NoEbpfObject.to_string());
    }
}

/// Why a uprobe attachment failed: aya's error, whichever kind of link it was making (here,
/// not in `probes`, so that the error type imports nothing of the stages that raise it).
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// aya could not attach the link (either kind: a multi-uprobe link or a perf event).
    #[error(transparent)]
    Aya(#[from] aya::programs::ProgramError),
}
