//! The command line (docs/contract.md, docs/cli.md): raw flags are parsed by clap and
//! turned once into a validated [`Job`]; nothing downstream sees clap types.

use std::{
    ffi::OsString,
    io::{self, Write as _},
    path::PathBuf,
    time::Duration,
};

use clap::{Args, Parser, Subcommand};

use crate::{
    error::{exit, TraceError},
    output::{self, Destination},
    record::{self, reader::Damage, Plan, Recorder},
    report::{self, Report},
    session::{self, Target},
    sweep,
};

/// The raw command line as clap parses it; [`Cli::job`] turns it into a validated [`Job`].
#[derive(Debug, Parser)]
#[command(name = "gputrace", version, about = "Tells you why your GPU sits idle: traces a CUDA job with eBPF, no code change")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More logging on stderr (-v info, -vv debug); `RUST_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// `--color`: when the text report is coloured.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t,
        value_name = "WHEN",
        help = "Colour the text report: auto (on a terminal, unless NO_COLOR is set), always, never"
    )]
    pub color: crate::output::style::When,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Trace a running process, its threads and its child processes.
    Attach {
        /// The process to trace.
        #[arg(short, long)]
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
        argv: Vec<OsString>,
    },
    /// Record a process (or a command) to a file, to report on or export later.
    Record {
        /// The process to record (or give a command after `--`).
        #[arg(short, long, required_unless_present = "argv", conflicts_with = "argv")]
        pid: Option<u32>,
        /// The recording file (created 0600), `-` for standard output, or a FIFO or
        /// character device written through. An existing file is kept unless --force.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Replace an existing file (or a symlink: the link is replaced, never followed) at
        /// the output path; the files rotation would shift are replaced too.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        limits: RecordLimits,
        /// As for `attach`; `--json` also prints the live report.
        #[command(flatten)]
        common: Common,
        /// The command to start and record, after `--`.
        #[arg(last = true, value_name = "CMD")]
        argv: Vec<OsString>,
    },
    /// The report of a recording, computed offline.
    Report {
        /// A file written by `gputrace record`.
        file: PathBuf,
        /// Print the report as one JSON document on stdout.
        #[arg(long)]
        json: bool,
        /// Also write the report as one self-contained HTML page (as `export --html`).
        #[arg(long, value_name = "OUT.html")]
        html: Option<PathBuf>,
        /// Replace an existing file at the --html path (never the recording being read).
        #[arg(long)]
        force: bool,
    },
    /// Compare two runs of one job, before and after a change: the speed-up, the promises
    /// checked, the diagnoses gone and new, the time account side by side.
    Diff {
        /// The run before the change: a recording, or a `--json` report.
        before: PathBuf,
        /// The run after it.
        after: PathBuf,
        /// Print the comparison as one JSON document (`gputrace.diff/1`) on stdout.
        #[arg(long)]
        json: bool,
        /// Exit 1 when AFTER runs slower than X times BEFORE (a regression gate for CI;
        /// `--fail-below 0.95` allows 5 % of noise).
        #[arg(long, value_name = "X", value_parser = parse_ratio)]
        fail_below: Option<f64>,
        /// Compare runs of two different programs too.
        #[arg(long)]
        allow_different: bool,
    },
    /// Export a recording as a timeline, or as a page to look at.
    #[command(group(clap::ArgGroup::new("format").required(true).multiple(true).args(["perfetto", "html"])))]
    Export {
        /// A file written by `gputrace record`.
        file: PathBuf,
        /// Write a Chrome trace-event JSON file that ui.perfetto.dev (and `chrome://tracing`)
        /// opens; `-` for standard output. An existing file is kept unless --force.
        #[arg(long, value_name = "OUT.json")]
        perfetto: Option<PathBuf>,
        /// Write one self-contained HTML page (no network needed to open it): the verdict,
        /// the diagnoses with flamegraphs of their call stacks, the time account and a
        /// zoomable timeline; `-` for standard output.
        #[arg(long, value_name = "OUT.html")]
        html: Option<PathBuf>,
        /// With --html: a run of the same job before a change (a recording or a `--json`
        /// report); the page opens with the diff of it against FILE (as `gputrace diff`).
        #[arg(long, value_name = "BEFORE", requires = "html")]
        diff: Option<PathBuf>,
        /// With --diff: compare runs of two different programs too.
        #[arg(long, requires = "diff")]
        allow_different: bool,
        /// Replace an existing file at the output path (never the recording being read).
        #[arg(long)]
        force: bool,
    },
    /// Every process on the host that holds or uses a GPU, judged; idle holders are named.
    Sweep {
        /// Watch CUDA calls this long (seconds, or 90s, 5m, 1h).
        #[arg(short, long, value_name = "SECS", value_parser = parse_seconds, default_value = "5")]
        duration: Duration,
        /// Print the sweep as one JSON document on stdout.
        #[arg(long)]
        json: bool,
        /// Show other users' command lines (root sees them anyway); otherwise only their
        /// short process name.
        #[arg(long)]
        show_commands: bool,
        /// Also write the sweep as one self-contained HTML page (a table of the holders).
        #[arg(long, value_name = "OUT.html")]
        html: Option<PathBuf>,
        /// Replace an existing file at the --html path.
        #[arg(long)]
        force: bool,
    },
    /// The sweep, window after window, as a live terminal view: every GPU and every GPU
    /// process with its state and diagnosis, workers folded under their job. `q` quits; s, m,
    /// l, p, u sort. Without a terminal, each window is printed as text.
    Top {
        /// Length of each window (seconds, or 500ms, 2s).
        #[arg(long, value_name = "SECS", value_parser = parse_seconds, default_value = "1")]
        interval: Duration,
        /// Show other users' command lines without being root (root sees them anyway).
        #[arg(long)]
        show_commands: bool,
    },
    /// The sweep, window after window, served as Prometheus metrics at `http://ADDR/metrics`
    /// (OpenMetrics text): GPUs, GPU processes, idle holders. Runs until SIGINT or SIGTERM.
    Serve {
        /// The address to listen on: IP:PORT (0.0.0.0:9400 for every interface).
        #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9400", value_parser = parse_listen)]
        listen: std::net::SocketAddr,
        /// Length of each window (seconds, or 30s, 2m).
        #[arg(long, value_name = "SECS", value_parser = parse_seconds, default_value = "15")]
        interval: Duration,
        /// Label series with whole command lines rather than program names (command lines
        /// may carry secrets, and each distinct one is a new series). Only on a loopback
        /// address, unless --publish-full-command-to-network is given too.
        #[arg(long)]
        full_command: bool,
        /// With --full-command on an address other than loopback: publish every user's whole
        /// command lines (paths, data set names, tokens in arguments) to whoever reaches the port.
        #[arg(long, requires = "full_command")]
        publish_full_command_to_network: bool,
        /// Show other users' command lines without being root (root sees them anyway).
        #[arg(long)]
        show_commands: bool,
    },
    /// Check this machine for tracing and its GPU path: privileges, kernel features, NVML,
    /// the PCIe link, NUMA placement, clocks, persistence and MIG, other processes, the CUDA
    /// driver against a job's runtime. Exits non-zero only when a check fails.
    Doctor {
        /// Also check this job: its CPUs against its GPU's NUMA node, its CUDA runtime
        /// against the driver, and which other processes share its GPU.
        #[arg(short, long)]
        pid: Option<u32>,
        /// Print the checks as one JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script: `gputrace completions bash > /etc/bash_completion.d/gputrace`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print a man page (roff): `gputrace man > gputrace.1; man ./gputrace.1`; with a
    /// subcommand, its own page (`gputrace man attach > gputrace-attach.1`).
    Man {
        /// The subcommand whose page to print (attach, run, record, report, export, sweep, doctor,
        /// completions, man); none: the page of gputrace itself.
        subcommand: Option<String>,
    },
}

#[derive(Debug, Args)]
struct RecordLimits {
    /// Start a new file once this one reaches SIZE (e.g. 512M, 2G); older files are kept as
    /// FILE.1, FILE.2, … With --flight-recorder: the most the buffer may hold.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_size: Option<u64>,
    /// How many older files rotation (or flight-recorder dumps) keeps, at most 1000.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_KEEP)))]
    keep: u32,
    /// Flight recorder: keep only the last SECS in memory and write them to FILE on SIGUSR1,
    /// when a high-severity diagnosis fires, and at the end.
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    flight_recorder: Option<Duration>,
}

#[derive(Debug, Args)]
#[expect(clippy::struct_excessive_bools, reason = "each is one command-line switch")]
struct Common {
    /// Stop after this long: seconds, or with a unit (500ms, 90s, 5m, 1h); default: when
    /// the target exits or on Ctrl-C.
    #[arg(short, long, value_name = "SECS", value_parser = parse_seconds)]
    duration: Option<Duration>,
    /// NVML samples per second (utilization, memory, Hopper GPM); 0 turns NVML off.
    #[arg(long, value_name = "HZ", default_value_t = 10.0, value_parser = parse_hz)]
    nvml_hz: f64,
    /// Print the report as one JSON document on stdout; logs, and the output of a command
    /// started by `run`, go to stderr.
    #[arg(long)]
    json: bool,
    /// Attach no return probes (calls are counted, not timed). gputrace turns this on by
    /// itself where the kernel would kill seccomp-confined processes at a probed return.
    #[arg(long)]
    entry_only: bool,
    /// Take no stacks: no stacks in CPU samples, no off-CPU stacks, no Python frames, and so
    /// no `diagnoses[].sites`.
    #[arg(long)]
    no_stacks: bool,
    /// Probe the framework's caching allocator too (PyTorch's `libc10_cuda.so`): memory at the
    /// tensor level (`memory.tensors`) and the lines whose tensors stay live. Each tensor made
    /// and freed costs four traps: about 15 % on an eager loop of small ops (docs/benchmarks.md).
    #[arg(long)]
    tensors: bool,
    /// Keep the estimated cost to the job's busiest thread under PCT percent (0 < PCT ≤ 100):
    /// past it, the launch probes are taken off part of each second and launch counts are
    /// scaled from the time they were on (the report says so, `tracer.sampling`); every
    /// other count stays exact. Not with `record`.
    // Negative numbers reach the parser (and its message), not clap's "unexpected argument".
    #[arg(long, value_name = "PCT", value_parser = parse_percent, allow_negative_numbers = true)]
    max_overhead: Option<f64>,
}

/// The most files rotation keeps: enough for any retention policy, few enough that a
/// rotation's renames stay instant.
const MAX_KEEP: u32 = 1000;
/// The longest `--duration`: a year.
const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// A duration: seconds (`90`, `2.5`), or a number with a unit (`500ms`, `90s`, `5m`, `1h`).
/// `--listen`: IP:PORT, or a bare port (on the loopback address).
fn parse_listen(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| format!("`{s}` is not an address to listen on: give IP:PORT, such as 127.0.0.1:9400, 0.0.0.0:9400 or [::]:9400"))
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    // The unit is the trailing letters, so that `1e3` stays a number of seconds.
    let (number, unit) = t.split_at(t.trim_end_matches(|c: char| c.is_ascii_alphabetic()).len());
    let not_a_duration = || format!("`{s}` is not a duration (seconds, or e.g. 90s, 5m)");
    if number.trim().is_empty() {
        return Err(not_a_duration());
    }
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (use ms, s, m or h)")),
    };
    let secs = number.trim().parse::<f64>().map_err(|_| not_a_duration())? * scale;
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("the duration must be positive, got `{s}`"));
    }
    if secs > MAX_SECONDS {
        return Err(format!("the duration must be at most {MAX_SECONDS} seconds (a year), got `{s}`"));
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

/// A speed-up ratio for `diff --fail-below`: a positive, finite number (`0.95`, `1.2`).
fn parse_ratio(s: &str) -> Result<f64, String> {
    let x: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a ratio (e.g. 0.95: after may be 5 % slower than before)"))?;
    if !(x.is_finite() && x > 0.0 && x <= 1e6) {
        return Err(format!("--fail-below takes a ratio above 0 (e.g. 0.95), got `{s}`"));
    }
    Ok(x)
}

/// The smallest `--max-overhead`, percent: a millionth of every second (1 µs, about one
/// trap). Below it the figure only makes notes unreadable (`1e-300` printed in full).
const MIN_OVERHEAD_PCT: f64 = 0.0001;

/// A budget in percent: `1`, `0.5`, `2%`.
fn parse_percent(s: &str) -> Result<f64, String> {
    let pct: f64 = s.trim().trim_end_matches('%').parse().map_err(|_| format!("`{s}` is not a percentage (e.g. 1 or 0.5)"))?;
    if !(pct > 0.0 && pct <= 100.0) {
        return Err(format!("the overhead budget must be above 0 and at most 100 (percent), got `{s}`"));
    }
    if pct < MIN_OVERHEAD_PCT {
        return Err(format!("the overhead budget must be at least {MIN_OVERHEAD_PCT} (percent), got `{s}`"));
    }
    Ok(pct)
}

/// `512M`, `2G`, `100k` or a number of bytes.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, unit) = t.find(|c: char| !c.is_ascii_digit()).map_or((t, ""), |i| t.split_at(i));
    let n: u64 = digits.parse().map_err(|_| format!("`{s}` is not a size (e.g. 512M, 2G)"))?;
    let mult: u64 = match unit.to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (use K, M or G)")),
    };
    let bytes = n.checked_mul(mult).ok_or_else(|| format!("`{s}` is too large"))?;
    if bytes < 1 << 16 {
        return Err(format!("`{s}` is too small for a recording file (at least 64K)"));
    }
    Ok(bytes)
}

/// A validated job.
#[derive(Debug)]
pub enum Job {
    /// Trace a process live (`attach`, `run`), or record it to a file (`record`).
    Trace {
        /// The process to attach to, or the command to start.
        target: Target,
        /// How long to trace; `None`: until the target exits or Ctrl-C.
        duration: Option<Duration>,
        /// Print the report as JSON on stdout rather than as text.
        json: bool,
        /// Zero: NVML off.
        nvml_interval: Duration,
        /// Where and how to write the recording; `None` for `attach` and `run`, which record nothing.
        record: Option<Plan>,
        /// `--max-overhead`, a fraction.
        max_overhead: Option<f64>,
    },
    /// `report`: the report of a recording, computed offline.
    Report {
        /// The recording to read.
        file: PathBuf,
        /// Print the report as JSON on stdout rather than as text.
        json: bool,
        /// Where to write the report also as an HTML page (never stdout); `None`: no page.
        html: Option<Destination>,
    },
    /// `diff`: two runs of one job compared.
    Diff {
        /// The run before the change.
        before: PathBuf,
        /// The run after it.
        after: PathBuf,
        /// Print the comparison as JSON on stdout rather than as text.
        json: bool,
        /// The regression gate: exit 1 when the speed-up is below it.
        fail_below: Option<f64>,
        /// Compare runs of two different programs too.
        allow_different: bool,
    },
    /// `export`: a recording as a Perfetto trace, an HTML page, or both (at least one is given).
    Export {
        /// The recording to read.
        file: PathBuf,
        /// Where to write the Chrome trace-event JSON; `None`: not asked for.
        perfetto: Option<Destination>,
        /// Where to write the HTML page; `None`: not asked for.
        html: Option<Destination>,
        /// A run before a change, to diff FILE against on the page; `None`: no diff.
        diff: Option<PathBuf>,
        /// Compare runs of two different programs too.
        allow_different: bool,
    },
    /// `sweep`: every GPU process on the host, judged once.
    Sweep {
        /// How long to watch, and whether to show other users' command lines.
        options: sweep::Options,
        /// Print the sweep as JSON on stdout rather than as text.
        json: bool,
        /// Where to write the sweep also as an HTML page (never stdout); `None`: no page.
        html: Option<Destination>,
    },
    /// `doctor`: check this machine for tracing and its GPU path.
    Doctor {
        /// A job whose process to check too (NUMA placement, CUDA runtime, GPU sharing); `None`: the machine only.
        pid: Option<u32>,
        /// Print the checks as JSON on stdout rather than as text.
        json: bool,
    },
    /// `serve`: the sweep, window after window, as Prometheus metrics over HTTP.
    Serve {
        /// The address to listen on, the window length and how series are labelled.
        options: crate::serve::Options,
    },
    /// `top`: the sweep, window after window, as a live terminal view.
    Top {
        /// The window length, and whether to show other users' command lines.
        options: crate::top::Options,
    },
    /// `completions`: print a shell completion script.
    Completions {
        /// The shell to write the script for.
        shell: clap_complete::Shell,
    },
    /// A man page: gputrace's, or a subcommand's (checked to be one).
    Man {
        /// The subcommand whose page to print; `None`: the page of gputrace itself.
        subcommand: Option<String>,
    },
}

fn nvml_interval(hz: f64) -> Duration {
    if hz == 0.0 {
        Duration::ZERO
    } else {
        Duration::from_secs_f64(1.0 / hz)
    }
}

impl Cli {
    /// The validated job, or why the command line cannot be carried out (exit 2). Output
    /// paths are vetted here, before anything is traced or written.
    pub fn job(self) -> Result<Job, String> {
        let (entry_only, no_stacks, tensors) = match &self.command {
            Command::Attach { common, .. } | Command::Run { common, .. } | Command::Record { common, .. } => (common.entry_only, common.no_stacks, common.tensors),
            _ => (false, false, false),
        };
        if tensors {
            crate::probes::probe_allocators();
        }
        if entry_only {
            crate::probes::force_entry_only();
        }
        if no_stacks {
            crate::probes::cpu_sampler::disable();
        }
        Ok(match self.command {
            Command::Attach { pid, common } => Job::Trace {
                target: Target::Attach { pid },
                duration: common.duration,
                json: common.json,
                nvml_interval: nvml_interval(common.nvml_hz),
                record: None,
                max_overhead: common.max_overhead.map(|pct| pct / 100.0),
            },
            Command::Run { common, argv } => Job::Trace {
                target: Target::Run { argv, quiet_stdout: common.json },
                duration: common.duration,
                json: common.json,
                nvml_interval: nvml_interval(common.nvml_hz),
                record: None,
                max_overhead: common.max_overhead.map(|pct| pct / 100.0),
            },
            Command::Record { pid, output, force, limits, common, argv } => {
                if common.max_overhead.is_some() {
                    return Err("--max-overhead is for attach and run: a recording keeps every launch counted (record without it, or attach with it)".into());
                }
                let plan = record_plan(output, force, &limits, common.json)?;
                // A recording on stdout must not mix with the command's own output.
                let quiet_stdout = common.json || plan.destination == Destination::Stdout;
                Job::Trace {
                    target: match pid {
                        Some(pid) => Target::Attach { pid },
                        None => Target::Run { argv, quiet_stdout },
                    },
                    duration: common.duration,
                    json: common.json,
                    nvml_interval: nvml_interval(common.nvml_hz),
                    record: Some(plan),
                    max_overhead: None,
                }
            }
            Command::Report { file, json, html, force } => {
                let html = html.map(|h| output::resolve(&h, force, &[&file])).transpose().map_err(|e| e.to_string())?;
                if html.as_ref().is_some_and(|h| *h == Destination::Stdout) {
                    let report = if json { "the JSON report" } else { "the text report" };
                    return Err(format!(
                        "--html - would mix the page with {report} on standard output: give --html a file, or write the page alone with `gputrace export FILE --html -`"
                    ));
                }
                Job::Report { file, json, html }
            }
            Command::Diff { before, after, json, fail_below, allow_different } => Job::Diff { before, after, json, fail_below, allow_different },
            Command::Export { file, perfetto, html, diff, allow_different, force } => {
                let inputs: Vec<&std::path::Path> = std::iter::once(file.as_path()).chain(diff.as_deref()).collect();
                let resolve = |p: Option<PathBuf>| p.map(|p| output::resolve(&p, force, &inputs)).transpose().map_err(|e| e.to_string());
                let (perfetto, html) = (resolve(perfetto)?, resolve(html)?);
                if let (Some(p), Some(h)) = (&perfetto, &html) {
                    if p == h {
                        return Err(format!("--perfetto and --html name the same output, {p}: give each its own"));
                    }
                }
                Job::Export { file, perfetto, html, diff, allow_different }
            }
            Command::Sweep { duration, json, show_commands, html, force } => {
                let html = html.map(|h| output::resolve(&h, force, &[])).transpose().map_err(|e| e.to_string())?;
                if html.as_ref().is_some_and(|h| *h == Destination::Stdout) {
                    return Err("--html - would mix the page with the sweep report on standard output: give --html a file".into());
                }
                Job::Sweep { options: sweep::Options { duration, show_commands }, json, html }
            }
            Command::Doctor { pid, json } => Job::Doctor { pid, json },
            Command::Top { interval, show_commands } => {
                if interval < Duration::from_millis(500) {
                    return Err(format!("--interval {interval:?} is too short: give top half a second or more a window"));
                }
                Job::Top { options: crate::top::Options { interval, show_commands } }
            }
            Command::Serve { listen, interval, full_command, publish_full_command_to_network, show_commands } => {
                if interval < Duration::from_secs(1) {
                    return Err(format!("--interval {interval:?} is too short: a window needs a second or more to judge a process idle"));
                }
                check_publication(listen, full_command, publish_full_command_to_network)?;
                Job::Serve { options: crate::serve::Options { listen, interval, full_command, show_commands } }
            }
            Command::Completions { shell } => Job::Completions { shell },
            Command::Man { subcommand } => {
                man_page(subcommand.as_deref())?;
                Job::Man { subcommand }
            }
        })
    }
}

/// `serve`'s labels go to whoever reaches the port (`/metrics` has no authentication): whole
/// command lines only on a loopback address, unless asked for twice.
fn check_publication(listen: std::net::SocketAddr, full_command: bool, publish: bool) -> Result<(), String> {
    if full_command && !listen.ip().is_loopback() && !publish {
        return Err(format!(
            "--full-command on {listen} would publish every user's whole command lines (paths, data set names, tokens in \
             arguments) to anyone who can reach that port: listen on a loopback address (127.0.0.1:{port}), drop \
             --full-command, or say --publish-full-command-to-network as well",
            port = listen.port()
        ));
    }
    Ok(())
}

/// The man page of gputrace (`None`) or of one of its subcommands (`gputrace-attach(1)` …,
/// the pages the main one lists). clap's `help` subcommand gets none: the pages are it.
fn man_page(subcommand: Option<&str>) -> Result<clap_mangen::Man, String> {
    let mut cli = <Cli as clap::CommandFactory>::command().disable_help_subcommand(true);
    cli.build();
    let Some(name) = subcommand else { return Ok(clap_mangen::Man::new(cli)) };
    if let Some(sub) = cli.find_subcommand(name) {
        return Ok(clap_mangen::Man::new(sub.clone()).source(concat!("gputrace ", env!("CARGO_PKG_VERSION"))));
    }
    let names: Vec<&str> = cli.get_subcommands().map(clap::Command::get_name).collect();
    Err(format!("`{name}` is not a subcommand of gputrace; the pages are gputrace and {}", names.join(", ")))
}

/// Vet where a recording goes: rotation and dumps need a file they can rename, standard
/// output cannot carry the recording and the JSON report at once, and without `--force`
/// nothing that rotation would shift may already be there.
fn record_plan(output: PathBuf, force: bool, limits: &RecordLimits, json: bool) -> Result<Plan, String> {
    let destination = output::resolve(&output, force, &[]).map_err(|e| e.to_string())?;
    let renames = limits.max_size.is_some() || limits.flight_recorder.is_some();
    if renames && !destination.is_file() {
        return Err(format!("{destination}: --max-size and --flight-recorder write files one after another, so they need a file name"));
    }
    if json && destination == Destination::Stdout {
        return Err("`-o -` puts the recording on standard output, where --json puts the report: use one of them".into());
    }
    if renames && !force {
        if let Some(taken) = (1..=limits.keep).map(|n| record::file::rotated_name(&output, n)).find(|p| std::fs::symlink_metadata(p).is_ok()) {
            return Err(format!("{}: a file is there, and rotation would replace it; pass --force, or choose another name", taken.display()));
        }
    }
    Ok(Plan { destination, path: output, max_bytes: limits.max_size, keep: limits.keep, flight: limits.flight_recorder, mode: 0o600 })
}

/// Run a job to its end; returns the process exit code.
pub async fn execute(job: Job) -> i32 {
    match job {
        Job::Trace { target, duration, json, nvml_interval, record, max_overhead } => {
            Box::pin(trace(target, duration, json, nvml_interval, record, max_overhead)).await
        }
        Job::Report { file, json, html } => offline_report(&file, json, html.as_ref()),
        Job::Export { file, perfetto, html, diff, allow_different } => export(&file, perfetto.as_ref(), html.as_ref(), diff.as_deref().map(|b| (b, allow_different))),
        Job::Diff { before, after, json, fail_below, allow_different } => diff(&before, &after, json, fail_below, allow_different),
        Job::Sweep { options, json, html } => execute_sweep(&options, json, html.as_ref()).await,
        Job::Doctor { pid, json } => doctor(pid, json),
        Job::Top { options } => match crate::top::top(&options).await {
            Ok(()) => exit::OK,
            Err(e) => fail(&e),
        },
        Job::Serve { options } => match crate::serve::serve(&options).await {
            Ok(()) => exit::OK,
            Err(e) => fail(&e),
        },
        Job::Completions { shell } => print_with("the completion script", |out| {
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "gputrace", out);
            Ok(())
        }),
        Job::Man { subcommand } => match man_page(subcommand.as_deref()) {
            Ok(page) => print_with("the man page", |out| page.render(out)),
            Err(why) => {
                eprintln!("gputrace: {why}");
                exit::USAGE
            }
        },
    }
}

async fn execute_sweep(options: &sweep::Options, json: bool, html: Option<&Destination>) -> i32 {
    let mut finished = match sweep::sweep(options).await {
        Ok(f) => f,
        Err(e) => return fail(&e),
    };
    let report = &finished.report;
    let code = print_with("the sweep report", |out| {
        if json {
            serde_json::to_writer_pretty(&mut *out, report).map_err(io::Error::from).and_then(|()| writeln!(out))
        } else {
            out.write_all(sweep::sweep_text::render(report, crate::output::style::on_stdout()).as_bytes())
        }
    });
    let code = match html.map(|out| (out, crate::export::html::write_sweep(report, out))) {
        Some((out, Ok(bytes))) => {
            eprintln!("gputrace: wrote the sweep's page ({} KiB) to {out}", bytes.div_ceil(1024));
            code
        }
        Some((out, Err(e))) => export_failed(out, &e),
        None => code,
    };
    finished.detach();
    code
}

async fn trace(target: Target, duration: Option<Duration>, json: bool, nvml_interval: Duration, record: Option<Plan>, max_overhead: Option<f64>) -> i32 {
    let recorder = match record.map(Recorder::new) {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            eprintln!("gputrace: cannot record: {e}");
            return exit::USAGE;
        }
        None => None,
    };
    let recording = recorder.is_some();
    let run = matches!(target, Target::Run { .. }) && !recording;
    let mut outcome = match Box::pin(session::trace(target, duration, nvml_interval, recorder, max_overhead)).await {
        Ok(o) => o,
        Err(e) => return fail(&e),
    };
    let report = report::build::build(&outcome);
    let mut code = if recording { recorded(&outcome, &report) } else { exit::OK };
    if json || !recording {
        let printed = print_report(&report, json);
        code = code.max(printed);
    }
    outcome.detach();
    // `run` ends as its command ended, as `perf stat` and `strace` do: a failed command's
    // status, 128 + N for a command killed by signal N (the report is printed either way).
    match (run && code == exit::OK, outcome.exit_status) {
        (true, Some(status)) if status != 0 => status,
        _ => code,
    }
}

/// The closing lines of `record` (on stderr: stdout belongs to the recorded command). They
/// say what the files hold, which after a write error is less than the session traced;
/// "recorded" is said only of a recording that succeeded.
fn recorded(outcome: &crate::outcome::Outcome, report: &Report) -> i32 {
    let Some(w) = &outcome.written else { return exit::FAILURE };
    let files: Vec<String> = w.files.iter().map(|p| p.display().to_string()).collect();
    let held = |until: u64| until.saturating_sub(outcome.start_ns) as f64 / 1e9;
    let size = format!("{} frames, {:.1} MB", w.frames, w.bytes as f64 / 1e6);
    let readable = w.files.first().is_some_and(|f| f.is_file());
    let Some(e) = &w.error else {
        eprintln!(
            "gputrace: recorded {:.1} s of pid {} ({size}) to {}; verdict: {}",
            report.window.duration_s,
            report.target.pid,
            files.join(", "),
            report.verdict
        );
        if readable {
            eprintln!("gputrace: read it with `gputrace report {}` or `gputrace export {} --perfetto OUT.json`", files[0], files[0]);
        }
        return exit::OK;
    };
    eprintln!("gputrace: {e}");
    match w.until_ns.filter(|_| readable && w.frames > 0) {
        Some(until) if w.bytes > 0 => eprintln!(
            "gputrace: the recording is incomplete: {} hold{} the session up to {:.1} s of the {:.1} s traced ({size}); `gputrace report {}` reports that part",
            files.join(", "),
            if files.len() == 1 { "s" } else { "" },
            held(until),
            report.window.duration_s,
            files[0]
        ),
        _ => eprintln!("gputrace: nothing of the {:.1} s traced was recorded", report.window.duration_s),
    }
    eprintln!("gputrace: the verdict of the whole session, from the live trace: {}", report.verdict);
    exit::FAILURE
}

/// Exit code for a recording read with damage: a cut tail is what a killed recorder leaves
/// (the report of what was written is the point of recording), anything else is damage.
fn damage_code(damage: Option<&Damage>) -> i32 {
    match damage {
        None | Some(Damage::Truncated { .. }) => exit::OK,
        Some(_) => exit::BAD_RECORDING,
    }
}

fn read_recording(file: &std::path::Path) -> Result<record::Replayed, i32> {
    record::replay(file).map_err(|e| {
        eprintln!("gputrace: {}", output::clean(&e.to_string()));
        // A file that cannot be opened (missing, unreadable) is not a bad recording.
        match e {
            record::ReplayError::Open(record::reader::OpenError::Io { .. }) => exit::FAILURE,
            _ => exit::BAD_RECORDING,
        }
    })
}

fn offline_report(file: &std::path::Path, json: bool, html: Option<&Destination>) -> i32 {
    let replayed = match read_recording(file) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if let Some(d) = &replayed.damage {
        eprintln!("gputrace: {}: {}; reporting what was read before it", file.display(), output::clean(&d.to_string()));
    }
    let report = report::build::build(&replayed.outcome);
    let printed = print_report(&report, json);
    if printed != exit::OK {
        return printed;
    }
    if let Some(out) = html {
        if let Err(code) = write_page(file, &replayed, &report, None, out) {
            return code;
        }
    }
    damage_code(replayed.damage.as_ref())
}

fn export(file: &std::path::Path, perfetto: Option<&Destination>, html: Option<&Destination>, before: Option<(&std::path::Path, bool)>) -> i32 {
    let replayed = match read_recording(file) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if let Some(d) = &replayed.damage {
        eprintln!("gputrace: {}: {}; exporting what was read before it", file.display(), output::clean(&d.to_string()));
    }
    let report = report::build::build(&replayed.outcome);
    // The diff is made before anything is written: runs that cannot be compared write nothing.
    let compared = match before.map(|(b, allow_different)| diff_against(b, file, &report, replayed.damage.as_ref(), allow_different)).transpose() {
        Ok(d) => d,
        Err(code) => return code,
    };
    if let Some(out) = perfetto {
        match crate::export::perfetto::write(file, &replayed, &report, out) {
            Ok(n) => eprintln!("gputrace: wrote {n} trace events to {out}; open it at https://ui.perfetto.dev"),
            Err(e) => return export_failed(out, &e),
        }
    }
    if let Some(out) = html {
        if let Err(code) = write_page(file, &replayed, &report, compared.as_ref(), out) {
            return code;
        }
    }
    damage_code(replayed.damage.as_ref())
}

/// The run at `path` for a diff, or the exit code of why not (said on stderr).
fn load_run(path: &std::path::Path) -> Result<crate::diff::input::Loaded, i32> {
    crate::diff::input::report_of(path).map_err(|e| {
        eprintln!("gputrace: {}", output::clean(&e.to_string()));
        if e.damaged_recording { exit::BAD_RECORDING } else { exit::USAGE }
    })
}

/// BEFORE against AFTER (each a path, its report and where its reading stopped short), or the
/// exit code of why not. A recording read short is compared on what was read, and the notes
/// say so.
fn compare_runs(
    before: (&std::path::Path, &Report, Option<&Damage>),
    after: (&std::path::Path, &Report, Option<&Damage>),
    allow_different: bool,
) -> Result<crate::diff::Diff, i32> {
    let (b, a) = (before.0.display().to_string(), after.0.display().to_string());
    let mut compared = crate::diff::compare((before.1, &b), (after.1, &a), allow_different).map_err(|why| {
        eprintln!("gputrace: cannot compare: {}", output::clean(&why.to_string()));
        exit::USAGE
    })?;
    for (name, damage) in [(&b, before.2), (&a, after.2)] {
        if let Some(d) = damage {
            compared.notes.push(format!("{}: {}; compared on what was read before it", output::clean(name), output::clean(&d.to_string())));
        }
    }
    Ok(compared)
}

/// The diff of the run at `before` against `after`'s report (read up to `damage`), or the exit
/// code of why not.
fn diff_against(before: &std::path::Path, after: &std::path::Path, report: &Report, damage: Option<&Damage>, allow_different: bool) -> Result<crate::diff::Diff, i32> {
    let earlier = load_run(before)?;
    compare_runs((before, &earlier.report, earlier.damage.as_ref()), (after, report, damage), allow_different)
}

/// `gputrace diff`: 0 when compared (and above `--fail-below`), 1 below it, 2 when the two
/// runs cannot be compared, 6 for a damaged recording.
fn diff(before: &std::path::Path, after: &std::path::Path, json: bool, fail_below: Option<f64>, allow_different: bool) -> i32 {
    let runs = match load_run(before).and_then(|b| Ok([b, load_run(after)?])) {
        Ok(runs) => runs,
        Err(code) => return code,
    };
    let compared = match compare_runs(
        (before, &runs[0].report, runs[0].damage.as_ref()),
        (after, &runs[1].report, runs[1].damage.as_ref()),
        allow_different,
    ) {
        Ok(d) => d,
        Err(code) => return code,
    };
    // Damage (not a cut) ends in exit 6, as `report` does.
    let damaged = runs.iter().map(|r| damage_code(r.damage.as_ref())).max().unwrap_or(exit::OK);
    let printed = print_with("the diff", |out| {
        if json {
            let mut v = serde_json::to_value(&compared).map_err(io::Error::from)?;
            v["fail_below"] = serde_json::json!(fail_below);
            v["passed"] = serde_json::json!(fail_below.map(|x| compared.speedup >= x));
            serde_json::to_writer_pretty(&mut *out, &v).map_err(io::Error::from).and_then(|()| writeln!(out))
        } else {
            out.write_all(output::clean_lines(&crate::diff::diff_text::render(&compared, fail_below)).as_bytes())
        }
    });
    if printed != exit::OK {
        return printed;
    }
    let gate = match fail_below {
        Some(x) if compared.speedup < x => {
            eprintln!("gputrace: after runs ×{:.2} of before, below --fail-below {x}", compared.speedup);
            exit::FAILURE
        }
        _ => exit::OK,
    };
    gate.max(damaged)
}

fn write_page(file: &std::path::Path, replayed: &record::Replayed, report: &report::Report, diff: Option<&crate::diff::Diff>, out: &Destination) -> Result<(), i32> {
    match crate::export::html::write(file, replayed, report, diff, out) {
        Ok(bytes) => {
            eprintln!("gputrace: wrote the page ({} KiB) to {out}; open it in any browser, no network needed", bytes.div_ceil(1024));
            Ok(())
        }
        Err(e) => Err(export_failed(out, &e)),
    }
}

fn export_failed(out: &Destination, e: &io::Error) -> i32 {
    let kept = if out.is_file() { "; nothing was put in its place" } else { "" };
    eprintln!("gputrace: exporting to {out}: {e}{kept}");
    exit::FAILURE
}

fn fail(e: &TraceError) -> i32 {
    // Errors quote paths and names the traced process chose (its libraries, its files).
    eprintln!("{}", output::clean_lines(&failure_message(e)));
    e.exit_code()
}

/// The error and its causes, each said once: a message that already quotes its cause (most
/// do, `reading /x: not found`) gets no `caused by: not found` line repeating it.
fn failure_message(e: &dyn std::error::Error) -> String {
    use std::fmt::Write as _;
    let mut msg = format!("gputrace: {e}");
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !msg.contains(&text) {
            // Writing to a String cannot fail.
            let _ = write!(msg, "\n  caused by: {text}");
        }
        source = s.source();
    }
    msg
}

fn print_report(report: &Report, json: bool) -> i32 {
    print_with("the report", |out| {
        if json {
            serde_json::to_writer_pretty(&mut *out, report).map_err(io::Error::from).and_then(|()| writeln!(out))
        } else {
            out.write_all(report::text::render(report, crate::output::style::on_stdout()).as_bytes())
        }
    })
}

/// Write `what` (a report, a man page) to stdout in one buffer (stdout is line-buffered: a
/// JSON report would otherwise be a write call per line), then flush it; a closed pipe is a
/// clean exit, any other error is named with what was being written.
/// `gputrace doctor`: the checks on stdout; exit 1 when one fails (a missing `--pid` is a
/// usage error, not a failed check).
fn doctor(pid: Option<u32>, json: bool) -> i32 {
    if let Some(pid) = pid {
        if let Err(e) = crate::discover::process::require(pid) {
            return fail(&e);
        }
    }
    let findings = crate::doctor::run(pid);
    let printed = print_with("the checks", |out| {
        if json {
            serde_json::to_writer_pretty(&mut *out, &findings).map_err(io::Error::from).and_then(|()| writeln!(out))
        } else {
            out.write_all(crate::printable::terminal_safe(&crate::doctor::render(&findings)).as_bytes())
        }
    });
    if printed != exit::OK {
        return printed;
    }
    if findings.fails > 0 { exit::FAILURE } else { exit::OK }
}

fn print_with(what: &str, write: impl FnOnce(&mut io::BufWriter<io::StdoutLock<'static>>) -> io::Result<()>) -> i32 {
    let mut out = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let written = write(&mut out);
    match written.and_then(|()| out.flush()) {
        Ok(()) => exit::OK,
        // A closed pipe (`gputrace ... | head`) is the reader's choice, not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => exit::OK,
        Err(e) => {
            eprintln!("gputrace: writing {what} to standard output: {e}");
            exit::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] io::Error);

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let e = TraceError::io("reading", "/x", io::Error::from(io::ErrorKind::NotFound));
        let msg = failure_message(&e);
        assert_eq!(msg.matches("entity not found").count(), 1, "{msg}");
        assert!(!msg.contains("caused by"), "{msg}");
        // A cause the message does not quote is still shown.
        let msg = failure_message(&Outer(io::Error::other("the inner reason")));
        assert_eq!(msg, "gputrace: outer\n  caused by: the inner reason");
    }

    #[test]
    fn overhead_budgets_are_percentages_above_zero() {
        assert_eq!(parse_percent("1"), Ok(1.0));
        assert_eq!(parse_percent("0.5%"), Ok(0.5));
        for bad in ["0", "-1", "101", "NaN", "inf", "one", "", "1e-300", "0.00009"] {
            assert!(parse_percent(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_percent("0.0001"), Ok(0.0001));
    }

    #[test]
    fn durations_take_seconds_or_a_unit() {
        let secs = |s: &str| parse_seconds(s).map(|d| d.as_secs_f64());
        assert_eq!(secs("90"), Ok(90.0));
        assert_eq!(secs("90s"), Ok(90.0));
        assert_eq!(secs("5m"), Ok(300.0));
        assert_eq!(secs("1h"), Ok(3600.0));
        assert_eq!(secs("500ms"), Ok(0.5));
        assert_eq!(secs("1e3"), Ok(1000.0));
        assert!(secs("5x").is_err_and(|e| e.contains("unknown unit")));
        assert!(secs("0s").is_err());
        assert!(secs("m").is_err());
        assert!(secs("9999h").is_err(), "over a year");
    }

    #[test]
    fn short_flags_parse_as_their_long_forms() {
        let cli = Cli::try_parse_from(["gputrace", "attach", "-p", "42", "-d", "5m"]).expect("parses");
        match cli.job() {
            Ok(Job::Trace { target: Target::Attach { pid: 42 }, duration: Some(d), .. }) => assert_eq!(d.as_secs(), 300),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn whole_command_lines_reach_the_network_only_when_said_twice() {
        let job = |args: &[&str]| Cli::try_parse_from(["gputrace", "serve"].iter().chain(args)).expect("parses").job();
        let err = job(&["--listen", "0.0.0.0:9400", "--full-command"]).expect_err("refused");
        assert!(err.contains("--publish-full-command-to-network") && err.contains("127.0.0.1:9400"), "{err}");
        assert!(job(&["--listen", "[::]:9400", "--full-command"]).is_err());
        for ok in [
            &["--listen", "127.0.0.1:9400", "--full-command"][..],
            &["--listen", "[::1]:9400", "--full-command"],
            &["--listen", "9400", "--full-command"],
            &["--listen", "0.0.0.0:9400"],
            &["--listen", "0.0.0.0:9400", "--full-command", "--publish-full-command-to-network"],
        ] {
            match job(ok) {
                Ok(Job::Serve { .. }) => {}
                other => panic!("{ok:?}: {other:?}"),
            }
        }
        // The second flag alone means nothing: clap says it needs the first.
        assert!(Cli::try_parse_from(["gputrace", "serve", "--publish-full-command-to-network"]).is_err());
    }
}
