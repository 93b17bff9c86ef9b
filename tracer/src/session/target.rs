//! The two ways to get a target: attach to a running process tree, or start a command with
//! the probes armed before its first instruction.

use std::{
    ffi::OsString,
    io,
    os::{fd::AsRawFd as _, unix::process::CommandExt as _},
};

use crate::{
    discover::{libraries, process},
    error::{Result, TraceError},
    probes::ProbeSet,
};

/// What to trace: a running process tree (`attach`) or a command to start (`run`).
#[derive(Clone, Debug)]
pub enum Target {
    /// Trace the running process `pid` and its descendants.
    Attach {
        /// The process whose tree is traced.
        pid: u32,
    },
    /// `quiet_stdout`: send the command's stdout to our stderr, so that with `--json`
    /// stdout holds the report alone.
    Run {
        /// The command and its arguments, as given after `--`.
        argv: Vec<OsString>,
        /// Whether the command's stdout goes to our stderr (with `--json`, or a recording on
        /// stdout).
        quiet_stdout: bool,
    },
}

/// A target that is being traced.
#[derive(Debug)]
pub struct Started {
    pub pid: u32,
    pub command: String,
    /// The command we started (run mode), until it is reaped.
    pub child: Option<tokio::process::Child>,
    /// The command's gate (run mode): it runs once [`Started::go`] says so, when everything
    /// that reads its events is ready (a job of a few milliseconds would otherwise exit
    /// before its first records were read, and its copies could not be classified).
    gate: Option<std::os::fd::OwnedFd>,
}

impl Started {
    /// Let the command run (nothing to do when attached to a running process).
    pub fn go(&mut self) -> Result<()> {
        match self.gate.take() {
            Some(gate) => write_byte(&gate).map_err(|source| TraceError::Spawn { command: self.command.clone(), source }),
            None => Ok(()),
        }
    }
}

impl Target {
    pub(super) fn start(self, kernel: &mut ProbeSet, notes: &mut Vec<String>) -> Result<Started> {
        match self {
            Self::Attach { pid } => attach(pid, kernel, notes),
            Self::Run { argv, quiet_stdout } => run(&argv, quiet_stdout, kernel),
        }
    }
}

fn attach(pid: u32, kernel: &mut ProbeSet, notes: &mut Vec<String>) -> Result<Started> {
    // A thread id is reachable under /proc too: trace the process it belongs to, and say so
    // (tracing the thread id as a process would see nothing).
    let pid = match process::tgid_of(pid) {
        Some(tgid) if tgid != pid => {
            let note = format!("{pid} is a thread of process {tgid}; tracing process {tgid} (all its threads)");
            log::warn!("{note}");
            notes.push(note);
            tgid
        }
        _ => pid,
    };
    if pid == 1 {
        let note = "pid 1 is the init process: its tree is every process of this pid namespace (the whole host outside a container), and all of them are traced".to_owned();
        log::warn!("{note}");
        notes.push(note);
    }
    let before = process::require(pid)?;
    let tree = process::tree(pid);
    for &p in &tree {
        kernel.trace_process(p)?;
    }
    // The pid must still name the same process: otherwise we would trace a stranger.
    match process::stat(pid) {
        Some(now) if now.start_ticks == before.start_ticks => {}
        Some(_) => return Err(TraceError::PidReused { pid }),
        None => return Err(TraceError::TargetExited { pid }),
    }
    for &p in &tree {
        for lib in libraries::mapped_by(p) {
            match kernel.attach_library(&lib) {
                Ok(_) => {}
                // A child (a worker) that exits while it is being attached to takes its
                // mapping with it: skipped, as it would have been a moment later.
                Err(e) if p != pid && process::stat(p).is_none() => {
                    log::info!("process {p} exited while its libraries were probed: {e}");
                    continue;
                }
                Err(_) if p == pid && process::stat(pid).is_none() => return Err(TraceError::TargetExited { pid }),
                Err(e) if p != pid => {
                    let note = format!("process {p} of the traced tree: {e}; its calls there are not counted");
                    log::warn!("{note}");
                    notes.push(note);
                    continue;
                }
                Err(e) => return Err(e),
            }
            // Mapped before tracing began: nothing of this window was missed.
            kernel.note_mapping(&lib, p, false);
        }
        seed_threads(kernel, p);
    }
    // A launcher (a shell, torchrun) with no driver mapped yet: probe the one its children
    // would load, so that their first CUDA calls are seen (the rescan would be late).
    if kernel.attached_libraries().is_empty() {
        for lib in libraries::predicted_for_process(pid) {
            if let Err(e) = kernel.attach_library(&lib) {
                log::info!("predicted library {}: {e}", lib.name);
            }
        }
    }
    Ok(Started { pid, command: process::command_line(pid), child: None, gate: None })
}

/// Spawn the command held just before `exec`, put it in the traced set, probe the driver
/// libraries it would load, then let it go.
///
/// The hold is a re-exec of gputrace itself as `gputrace __gate FD -- CMD...`, which waits
/// for one byte on FD and then execs CMD, keeping the pid. (Blocking in `pre_exec` instead
/// would deadlock: spawning waits for the child's exec to report success.)
fn run(argv: &[OsString], quiet_stdout: bool, kernel: &mut ProbeSet) -> Result<Started> {
    // For people: bytes that are not UTF-8 are shown replaced; the command gets them as given.
    let command = argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
    let spawn_err = |source| TraceError::Spawn { command: command.clone(), source };
    let (gate_read, gate_write) = pipe().map_err(spawn_err)?;
    let me = std::env::current_exe().map_err(spawn_err)?;
    let mut cmd = std::process::Command::new(me);
    cmd.arg(GATE_ARG).arg(gate_read.as_raw_fd().to_string()).arg("--").args(argv);
    if quiet_stdout {
        cmd.stdout(std::io::stderr());
    }
    let read_fd = gate_read.as_raw_fd();
    // SAFETY: fcntl is async-signal-safe; it only makes the read end survive the exec.
    unsafe {
        cmd.pre_exec(move || if libc::fcntl(read_fd, libc::F_SETFD, 0) == 0 { Ok(()) } else { Err(io::Error::last_os_error()) });
    }
    let child = tokio::process::Command::from(cmd).spawn().map_err(spawn_err)?;
    drop(gate_read);
    let pid = child.id().ok_or(TraceError::TargetExited { pid: 0 })?;
    kernel.trace_process(pid)?;
    for lib in libraries::predicted_for_command(libraries::inherited_ld_library_path().as_deref()) {
        kernel.attach_library(&lib)?;
    }
    Ok(Started { pid, command, child: Some(child), gate: Some(gate_write) })
}

/// The hidden first argument that turns gputrace into the gate of `run`.
pub const GATE_ARG: &str = "__gate";

/// The gate side: wait for the go byte on `fd`, then exec `argv` (never returns on success).
/// If gputrace dies before saying go, the pipe closes and the command is not started.
#[must_use]
pub fn gate_then_exec(fd: i32, argv: &[OsString]) -> i32 {
    use std::os::unix::process::CommandExt as _;
    if fd < 0 {
        eprintln!("gputrace: tracing did not start; not running the command");
        return crate::error::exit::FAILURE;
    }
    // SAFETY: the parent passed this descriptor to us alone (its number is our argument);
    // nothing else in this process owns it.
    let gate = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut byte = [0u8];
    let n = rustix::io::read(&gate, &mut byte);
    drop(gate);
    if !matches!(n, Ok(1)) {
        eprintln!("gputrace: tracing did not start; not running the command");
        return crate::error::exit::FAILURE;
    }
    let Some((program, program_args)) = argv.split_first() else { return crate::error::exit::USAGE };
    let err = std::process::Command::new(program).args(program_args).exec();
    let why = exec_failure(program, &err);
    // One write: eprintln! writes its pieces one by one to the unbuffered stderr, and the
    // parent's log lines, on the same stderr, could land between them.
    let _ = io::Write::write_all(&mut io::stderr(), format!("gputrace: cannot run `{}`: {why}\n", program.to_string_lossy()).as_bytes());
    // The shell's convention: 127 for not found, 126 for found but not executable.
    if err.kind() == io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// Why `exec` failed, in the words of what is wrong: the kernel's errno names the call's
/// failure, which for a directory is "Permission denied" and for a script whose interpreter
/// is missing is "No such file or directory", of a file that is there.
fn exec_failure(program: &std::ffi::OsStr, err: &io::Error) -> String {
    use std::path::{Path, PathBuf};
    // The file exec tried: the name itself when it has a slash, else the first on PATH.
    let path = if program.as_encoded_bytes().contains(&b'/') {
        Some(PathBuf::from(program))
    } else {
        std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(program)).find(|p| p.exists()))
    };
    let Some(path) = path.filter(|p| p.exists()) else { return err.to_string() };
    if path.is_dir() {
        return format!("{} is a directory, not a program", path.display());
    }
    if err.kind() != io::ErrorKind::NotFound {
        return err.to_string();
    }
    // The file is there: what is missing is what it needs to start.
    let mut head = [0u8; 256];
    let n = std::fs::File::open(&path).and_then(|mut f| io::Read::read(&mut f, &mut head)).unwrap_or(0);
    match head[..n].strip_prefix(b"#!") {
        Some(line) => {
            let line = String::from_utf8_lossy(line.split(|&b| b == b'\n').next().unwrap_or_default()).into_owned();
            let interpreter = line.split_whitespace().next().unwrap_or_default().to_owned();
            if Path::new(&interpreter).exists() {
                err.to_string()
            } else {
                format!("its interpreter `{interpreter}` (named on its #! line) does not exist")
            }
        }
        None => format!("{} is there, but what it needs to start (its dynamic loader) is missing: {err}", path.display()),
    }
}

/// Seed the scheduler accounting of a process's existing threads from their `/proc` state.
fn seed_threads(kernel: &mut ProbeSet, pid: u32) {
    use gputrace_common::host::state;
    let now = crate::clock::monotonic_ns();
    for tid in process::threads(pid) {
        let Ok(text) = crate::discover::procfs::read_text(format!("/proc/{pid}/task/{tid}/stat")) else { continue };
        let Some(stat) = process::parse_stat(&text) else { continue };
        let s = match stat.state {
            'R' => state::RUNNING,
            'D' => state::BLOCKED,
            _ => state::SLEEPING,
        };
        kernel.seed_thread(tid, pid, s, now);
    }
}

fn pipe() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

fn write_byte(fd: &std::os::fd::OwnedFd) -> io::Result<()> {
    match rustix::io::write(fd, &[1u8])? {
        1 => Ok(()),
        _ => Err(io::Error::from(io::ErrorKind::WriteZero)),
    }
}

/// How a command we started ended: its exit code (128 + signal when a signal killed it, as
/// shells report it) and the signal, if one did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exit {
    pub code: i32,
    pub signal: Option<i32>,
}

/// Wait for a command we started to exit; never resolves when there is none (attach mode)
/// or once it has been reaped.
pub async fn wait_child(child: &mut Option<tokio::process::Child>) -> Option<Exit> {
    use std::os::unix::process::ExitStatusExt as _;
    let Some(c) = child else { return std::future::pending().await };
    let status = c.wait().await.ok();
    *child = None;
    status.map(|s| match s.signal() {
        Some(sig) => Exit { code: 128 + sig, signal: Some(sig) },
        None => Exit { code: s.code().unwrap_or(0), signal: None },
    })
}

/// Pass a stopping signal on to a command we started, so that it ends with us; returns
/// whether it was sent. A SIGINT typed at the terminal has already reached the command
/// (it shares our process group, the terminal's foreground group): sending it again could
/// interrupt the command's own clean-up, so it is not repeated.
pub fn forward_signal(child: Option<&tokio::process::Child>, signal: i32) -> bool {
    let Some(pid) = child.and_then(tokio::process::Child::id) else { return false };
    if signal == libc::SIGINT && in_terminal_foreground() {
        return false;
    }
    let (Some(pid), Some(signal)) = (rustix::process::Pid::from_raw(pid as i32), rustix::process::Signal::from_named_raw(signal)) else {
        return false;
    };
    rustix::process::kill_process(pid, signal).is_ok()
}

/// Whether our process group is the foreground group of the terminal on stdin, stdout or
/// stderr: then a Ctrl-C went to the whole group.
fn in_terminal_foreground() -> bool {
    let group = rustix::process::getpgrp();
    [rustix::stdio::stdin(), rustix::stdio::stdout(), rustix::stdio::stderr()]
        .into_iter()
        .any(|fd| rustix::termios::tcgetpgrp(fd).is_ok_and(|g| g == group))
}
