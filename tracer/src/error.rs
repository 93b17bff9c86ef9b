//! Errors that reach the user, each with what to do about it, and the exit code it maps to.
//! Exit codes are part of the command-line contract (docs/cli.md).

use std::{io, path::PathBuf};

/// Exit codes, documented in docs/cli.md.
pub mod exit {
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
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("no process with pid {pid}; check it with `ps -p {pid}`")]
    NoSuchProcess { pid: u32 },

    #[error("process {pid} exited before tracing could start")]
    TargetExited { pid: u32 },

    #[error("process {pid} was replaced by another process with the same pid while attaching; nothing was traced")]
    PidReused { pid: u32 },

    #[error(
        "tracing needs root, or the capabilities {missing}; run gputrace with sudo \
         (or grant them: setcap cap_bpf,cap_perfmon,cap_sys_ptrace,cap_dac_read_search+ep gputrace)"
    )]
    Permission { missing: String },

    #[error("this kernel cannot run gputrace: {what}")]
    Kernel { what: String },

    #[error(
        "this gputrace binary was built without its eBPF programs (GPUTRACE_EBPF_STUB was set); \
         run `cargo xtask setup` and rebuild"
    )]
    NoEbpfObject,

    #[error("loading the eBPF object: {source}")]
    LoadObject {
        #[source]
        source: Box<aya::EbpfError>,
    },

    #[error("loading eBPF program `{program}`: {source}{}", verifier_hint(.source))]
    LoadProgram {
        program: String,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },

    #[error("no CUDA symbol of {} could be probed (the notes say why for each)", .library.display())]
    NothingProbed { library: PathBuf },

    #[error("attaching to `{symbol}` in {}: {source}", .library.display())]
    AttachUprobe {
        symbol: String,
        library: PathBuf,
        #[source]
        source: Box<AttachError>,
    },

    #[error("attaching tracepoint {category}:{name}: {source}")]
    AttachTracepoint {
        category: String,
        name: String,
        #[source]
        source: Box<aya::programs::ProgramError>,
    },

    #[error("eBPF map `{name}` is missing from the object or has the wrong type")]
    Map { name: String },

    #[error("{} has no symbol `{symbol}`", .library.display())]
    NoSymbol { symbol: String, library: PathBuf },

    #[error("eBPF program `{name}` is missing from the object or has the wrong type")]
    Program { name: String },

    #[error("reading the ELF symbols of {}: {source}", .path.display())]
    Elf {
        path: PathBuf,
        #[source]
        source: object::read::Error,
    },

    #[error("cannot listen on {addr}: {source}; give --listen an address of this host and a free port (ADDR:PORT)")]
    Listen {
        addr: String,
        #[source]
        source: io::Error,
    },

    #[error("{what} {}: {source}", .path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error(
        "{}: {source}: another recording (or someone else) took this name while gputrace started; nothing was traced \
         — choose another name, or pass --force to replace what is there",
        .path.display()
    )]
    OutputTaken {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("starting `{command}`: {source}")]
    Spawn {
        command: String,
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
            Self::Io { what, source, .. } => Self::Io { what, path: name.into(), source },
            other => other,
        }
    }

    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io { what, path: path.into(), source }
    }
}

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
    #[error(transparent)]
    Aya(#[from] aya::programs::ProgramError),
}
