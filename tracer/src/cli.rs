//! The command line (../shared/CONTRACT.md, docs/cli.md): raw flags are parsed by clap and
//! turned once into a validated [`Job`]; nothing downstream sees clap types.

use std::{
    io::{self, IsTerminal as _, Write as _},
    time::Duration,
};

use clap::{Args, Parser, Subcommand};

use crate::{
    error::{exit, TraceError},
    report::{self, Report},
    session::{self, Target},
    sweep,
};

#[derive(Debug, Parser)]
#[command(name = "gputrace", version, about = "Tells you why your GPU sits idle: traces a CUDA job with eBPF, no code change")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More logging on stderr (-v info, -vv debug); `RUST_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Trace a running process, its threads and its child processes.
    Attach {
        /// The process to trace.
        #[arg(long)]
        pid: u32,
        #[command(flatten)]
        common: Common,
    },
    /// Start a command traced from its first CUDA call.
    Run {
        #[command(flatten)]
        common: Common,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        argv: Vec<String>,
    },
    /// Every process on the host that holds or uses a GPU, judged; idle holders are named.
    Sweep {
        /// Watch CUDA calls for this many seconds.
        #[arg(long, value_name = "SECS", value_parser = parse_seconds, default_value = "5")]
        duration: Duration,
        /// Print the sweep as one JSON document on stdout.
        #[arg(long)]
        json: bool,
        /// Show other users' command lines (root sees them anyway); otherwise only their
        /// short process name.
        #[arg(long)]
        show_commands: bool,
    },
}

#[derive(Debug, Args)]
struct Common {
    /// Stop after this many seconds (default: when the target exits or on Ctrl-C).
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    duration: Option<Duration>,
    /// NVML samples per second (utilization, memory, Hopper GPM); 0 turns NVML off.
    #[arg(long, value_name = "HZ", default_value_t = 10.0, value_parser = parse_hz)]
    nvml_hz: f64,
    /// Print the report as one JSON document on stdout; logs, and the output of a command
    /// started by `run`, go to stderr.
    #[arg(long)]
    json: bool,
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(secs.is_finite() && secs > 0.0 && secs < 1e9) {
        return Err(format!("the duration must be a positive number of seconds, got `{s}`"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_hz(s: &str) -> Result<f64, String> {
    let hz: f64 = s.parse().map_err(|_| format!("`{s}` is not a rate in Hz"))?;
    if !(0.0..=100.0).contains(&hz) {
        return Err(format!("the NVML rate must be between 0 and 100 Hz, got `{s}`"));
    }
    Ok(hz)
}

/// A validated job.
#[derive(Debug)]
pub struct Job {
    target: Target,
    duration: Option<Duration>,
    json: bool,
    /// Zero: NVML off.
    nvml_interval: Duration,
}

impl Common {
    fn nvml_interval(&self) -> Duration {
        if self.nvml_hz == 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(1.0 / self.nvml_hz)
        }
    }
}

/// What the command line asks for: a trace, or a host-wide sweep.
#[derive(Debug)]
pub enum Task {
    Trace(Job),
    Sweep { options: sweep::Options, json: bool },
}

impl Cli {
    #[must_use]
    pub fn job(self) -> Task {
        match self.command {
            Command::Attach { pid, common } => Task::Trace(Job {
                target: Target::Attach { pid },
                duration: common.duration,
                json: common.json,
                nvml_interval: common.nvml_interval(),
            }),
            Command::Run { common, argv } => Task::Trace(Job {
                target: Target::Run { argv, quiet_stdout: common.json },
                duration: common.duration,
                json: common.json,
                nvml_interval: common.nvml_interval(),
            }),
            Command::Sweep { duration, json, show_commands } => Task::Sweep { options: sweep::Options { duration, show_commands }, json },
        }
    }
}

/// Run a task to its report; returns the process exit code.
pub async fn execute(task: Task) -> i32 {
    match task {
        Task::Trace(job) => execute_trace(job).await,
        Task::Sweep { options, json } => execute_sweep(&options, json).await,
    }
}

async fn execute_sweep(options: &sweep::Options, json: bool) -> i32 {
    let mut finished = match sweep::sweep(options).await {
        Ok(f) => f,
        Err(e) => return fail(&e),
    };
    let report = &finished.report;
    let code = print_with(|out| {
        if json {
            serde_json::to_writer_pretty(&mut *out, report).map_err(io::Error::from).and_then(|()| writeln!(out))
        } else {
            out.write_all(sweep::text::render(report, io::stdout().is_terminal()).as_bytes())
        }
    });
    finished.detach();
    code
}

async fn execute_trace(job: Job) -> i32 {
    let mut outcome = match session::trace(job.target, job.duration, job.nvml_interval).await {
        Ok(o) => o,
        Err(e) => return fail(&e),
    };
    let report = report::build::build(&outcome);
    let code = print_report(&report, job.json);
    outcome.detach();
    code
}

fn fail(e: &TraceError) -> i32 {
    use std::fmt::Write as _;
    let mut msg = format!("gputrace: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        // Writing to a String cannot fail.
        let _ = write!(msg, "\n  caused by: {s}");
        source = s.source();
    }
    eprintln!("{msg}");
    e.exit_code()
}

fn print_report(report: &Report, json: bool) -> i32 {
    print_with(|out| {
        if json {
            serde_json::to_writer_pretty(&mut *out, report).map_err(io::Error::from).and_then(|()| writeln!(out))
        } else {
            out.write_all(report::text::render(report, io::stdout().is_terminal()).as_bytes())
        }
    })
}

/// Write a report to stdout; a closed pipe is a clean exit.
fn print_with(write: impl FnOnce(&mut io::StdoutLock<'static>) -> io::Result<()>) -> i32 {
    let mut out = io::stdout().lock();
    let written = write(&mut out);
    match written.and_then(|()| out.flush()) {
        Ok(()) => exit::OK,
        // A closed pipe (`gputrace ... | head`) is the reader's choice, not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => exit::OK,
        Err(e) => {
            eprintln!("gputrace: writing the report: {e}");
            exit::FAILURE
        }
    }
}
