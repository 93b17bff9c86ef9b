//! Helpers for the privileged integration tests: the gputrace binary, the fake CUDA built by
//! `build.rs`, and workloads held at a gate until the tracer is armed.
#![expect(clippy::missing_panics_doc, reason = "test helpers panic by design")]
#![deny(missing_docs)]

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    path::PathBuf,
    process::{Child, ChildStderr, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use serde_json::Value;

pub mod metrics_server;
pub mod recordings;
pub mod schema_check;
pub mod twins;

/// The gputrace binary under test (`cargo xtask test` sets `GPUTRACE_BIN`).
#[must_use]
pub fn gputrace() -> PathBuf {
    let path = std::env::var_os("GPUTRACE_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/gputrace"), PathBuf::from);
    assert!(path.exists(), "{} does not exist: run the tests with `cargo xtask test`", path.display());
    path
}

/// The folder holding the fake libcuda.so.1, libcudart.so.13 and fakejob.
#[must_use]
pub fn fake_cuda_dir() -> PathBuf {
    PathBuf::from(env!("FAKE_CUDA_DIR"))
}

/// The fake job binary built beside the fake CUDA.
#[must_use]
pub fn fakejob() -> PathBuf {
    fake_cuda_dir().join("fakejob")
}

/// The job and fake CUDA built `-O2 -g` without frame pointers (`o2/fakejob`), and the job
/// with its debug information stripped (`o2/fakejob-nodebug`).
#[must_use]
pub fn optimized_dir() -> PathBuf {
    fake_cuda_dir().join("o2")
}

/// `gputrace run --json -- PROGRAM ARGS --lib-dir DIR` for a fake job built in `dir`, its
/// fake CUDA found there: the report, exit code and stderr.
#[must_use]
pub fn run_job_in(dir: &std::path::Path, program: &str, args: &[&str]) -> (Value, i32, String) {
    let out = Command::new(gputrace())
        .env("LD_LIBRARY_PATH", dir)
        .args(["run", "--json", "--"])
        .arg(dir.join(program))
        .args(args)
        .arg("--lib-dir")
        .arg(dir)
        .output()
        .expect("gputrace runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{stdout}\nstderr:\n{stderr}"));
    assert_valid(&report);
    (report, out.status.code().unwrap_or(-1), stderr)
}

/// Whether the long validations run (`cargo xtask test --long` sets `GPUTRACE_LONG=1`): a
/// test that repeats one check at many moments runs a few of them in CI, all of them here.
#[must_use]
pub fn long() -> bool {
    std::env::var_os("GPUTRACE_LONG").is_some_and(|v| v == "1")
}

/// These tests load eBPF programs: they need root. Not being root fails them, loudly.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "the integration tests load eBPF programs and must run as root");
}

/// A fakejob that has loaded its libraries and waits at its gate.
#[derive(Debug)]
pub struct Gated {
    /// The job's process.
    pub child: Child,
    /// Its pid.
    pub pid: u32,
}

impl Gated {
    /// The fake job with `args`, started and held at its gate.
    #[must_use]
    pub fn start(args: &[&str]) -> Self {
        Self::start_as(&fakejob(), args)
    }

    /// As [`Gated::start`], with the fakejob reached through `program` (a link of another
    /// name: the process is named after it).
    #[must_use]
    pub fn start_as(program: &std::path::Path, args: &[&str]) -> Self {
        Self::spawn(Command::new(program).arg("--gate").args(args))
    }

    /// As [`Gated::start`], from a fakejob command the caller made (its environment, its
    /// arguments, `--gate` among them).
    #[must_use]
    pub fn spawn(command: &mut Command) -> Self {
        let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("fakejob starts");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("piped")).read_line(&mut line).expect("fakejob says ready");
        let pid = line.trim().strip_prefix("ready ").and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("unexpected: {line:?}"));
        Self { child, pid }
    }

    /// Let the workload run.
    pub fn release(&mut self) {
        self.child.stdin.as_mut().expect("piped").write_all(b"go\n").expect("gate opens");
    }

    /// Wait until the workload prints a line starting with `prefix` (`holding`). Reads byte
    /// by byte, so nothing after the line is consumed.
    pub fn wait_for(&mut self, prefix: &str) {
        let stdout = self.child.stdout.as_mut().expect("piped");
        loop {
            let mut line = Vec::new();
            let mut byte = [0u8];
            while stdout.read(&mut byte).expect("fakejob output") == 1 && byte[0] != b'\n' {
                line.push(byte[0]);
            }
            assert!(!line.is_empty(), "fakejob ended before printing {prefix:?}");
            if line.starts_with(prefix.as_bytes()) {
                return;
            }
        }
    }

    /// Kill the workload and reap it (a job that runs until it is stopped).
    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Wait for the workload to finish; asserts success.
    pub fn finish(mut self) {
        let status = self.child.wait().expect("fakejob waits");
        assert!(status.success(), "fakejob failed: {status}");
    }
}

/// The row of `pid` in a sweep's JSON; panics with the sweep where it is missing.
#[must_use]
pub fn sweep_row(sweep: &Value, pid: u32) -> &Value {
    sweep["processes"]
        .as_array()
        .expect("processes is a list")
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} missing from the sweep: {sweep:#}"))
}

/// A running `gputrace attach`, armed (its "armed" log line was seen).
#[derive(Debug)]
pub struct Tracer {
    /// The tracer's process.
    pub child: Child,
    stderr_rest: mpsc::Receiver<String>,
}

impl Tracer {
    /// `gputrace -v attach --json --pid PID` with `extra`, once armed.
    #[must_use]
    pub fn attach(pid: u32, extra: &[&str]) -> Self {
        Self::start(Command::new(gputrace()).args(["-v", "attach", "--json", "--pid", &pid.to_string()]).args(extra))
    }

    /// `gputrace -v sweep --json EXTRA`, armed; `loader_path`: its `LD_LIBRARY_PATH`, where
    /// it looks for the libcuda a process starting during the window would load.
    #[must_use]
    pub fn sweep(extra: &[&str], loader_path: Option<&std::path::Path>) -> Self {
        let mut command = Command::new(gputrace());
        command.args(["-v", "sweep", "--json"]).args(extra);
        if let Some(dir) = loader_path {
            command.env("LD_LIBRARY_PATH", dir);
        }
        Self::start(&mut command)
    }

    /// Spawn `command` (a `gputrace -v …` of any binary) and wait until it is armed.
    pub fn start(command: &mut Command) -> Self {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("gputrace starts");
        let stderr = child.stderr.take().expect("piped");
        let (armed_tx, armed_rx) = mpsc::channel();
        let (rest_tx, rest_rx) = mpsc::channel();
        std::thread::spawn(move || forward_stderr(stderr, &armed_tx, &rest_tx));
        armed_rx.recv_timeout(Duration::from_secs(30)).expect("gputrace arms its probes within 30 s");
        Self { child, stderr_rest: rest_rx }
    }

    /// Wait for the report; returns it with gputrace's exit code and stderr.
    #[must_use]
    pub fn report(mut self) -> (Value, i32, String) {
        let mut out = String::new();
        self.child.stdout.take().expect("piped").read_to_string(&mut out).expect("report read");
        let status = self.child.wait().expect("gputrace exits");
        let stderr: String = self.stderr_rest.try_iter().collect();
        let report =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{out}\nstderr:\n{stderr}"));
        assert_valid(&report);
        (report, status.code().unwrap_or(-1), stderr)
    }

    /// The gputrace process itself (to wait for it after a signal).
    #[must_use]
    pub fn into_child(self) -> Child {
        self.child
    }

    /// Send the tracer signal `sig`.
    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }
}

fn forward_stderr(stderr: ChildStderr, armed: &mpsc::Sender<()>, rest: &mpsc::Sender<String>) {
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        // `attach` says "armed: tracing pid …", `sweep` says "armed: sweeping …".
        if line.contains("armed: ") {
            let _ = armed.send(());
        }
        let _ = rest.send(line + "\n");
    }
}

/// `gputrace run --json -- fakejob ARGS`: the report, exit code and stderr.
#[must_use]
pub fn run_fakejob(args: &[&str]) -> (Value, i32, String) {
    run_fakejob_with(&[], args)
}

/// `WRAPPER... gputrace run --json -- fakejob ARGS` (e.g. under `taskset`).
#[must_use]
pub fn run_fakejob_with(wrapper: &[&str], args: &[&str]) -> (Value, i32, String) {
    run_fakejob_full(wrapper, &[], args)
}

/// `gputrace run --json OPTIONS -- fakejob ARGS`.
#[must_use]
pub fn run_fakejob_opts(options: &[&str], args: &[&str]) -> (Value, i32, String) {
    run_fakejob_full(&[], options, args)
}

/// The folder of the fake NVML (`libnvidia-ml.so.1`, tests/fake-cuda/fake_nvml.c): apart from
/// the fake CUDA, so that a test sees an NVML only where it asks for one.
#[must_use]
pub fn fake_nvml_dir() -> PathBuf {
    fake_cuda_dir().join("nvml")
}

/// The fake NVML for one job: a fresh ledger file, through which the fake GPU tells the fake
/// NVML its busy time and memory (tests/fake-cuda/fake_gpu_ledger.h); removed on drop.
#[derive(Debug)]
pub struct FakeNvml {
    ledger: PathBuf,
}

impl FakeNvml {
    /// A fake NVML of its own, under a fresh name.
    #[must_use]
    pub fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ledger = std::env::temp_dir().join(format!("gputrace-ledger-{}-{n}", std::process::id()));
        // A ledger left by an earlier run would be read until the job resets it.
        let _ = std::fs::remove_file(&ledger);
        Self { ledger }
    }

    /// Give `command` (gputrace, or a job gputrace attaches to) the fake NVML and CUDA on its
    /// loader path and the ledger; the job and gputrace must be given the same one.
    pub fn apply<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        let path = std::env::join_paths([fake_nvml_dir(), fake_cuda_dir()]).expect("paths without a colon");
        command.env("LD_LIBRARY_PATH", path).env("FAKE_GPU_LEDGER", &self.ledger)
    }

    /// Whether the job's fake GPU has published anything (it creates the ledger on loading).
    #[must_use]
    pub fn published(&self) -> bool {
        self.ledger.exists()
    }
}

impl Default for FakeNvml {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for FakeNvml {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.ledger);
    }
}

/// `gputrace run --json OPTIONS -- fakejob ARGS` with the fake NVML reading the fake GPU:
/// the report, exit code and stderr (where the job's output goes).
#[must_use]
pub fn run_fakejob_nvml(options: &[&str], args: &[&str]) -> (Value, i32, String) {
    let nvml = FakeNvml::new();
    let out = run_fakejob_command(&[], options, args, Some(&nvml));
    assert!(nvml.published(), "the fake libcuda wrote no ledger: the fake NVML read nothing");
    out
}

fn run_fakejob_full(wrapper: &[&str], options: &[&str], args: &[&str]) -> (Value, i32, String) {
    run_fakejob_command(wrapper, options, args, None)
}

fn run_fakejob_command(wrapper: &[&str], options: &[&str], args: &[&str], nvml: Option<&FakeNvml>) -> (Value, i32, String) {
    let (program, wrapper_args): (std::ffi::OsString, Vec<std::ffi::OsString>) = match wrapper.split_first() {
        Some((first, rest)) => ((*first).into(), rest.iter().map(Into::into).chain([gputrace().into_os_string()]).collect()),
        None => (gputrace().into_os_string(), Vec::new()),
    };
    // As on a real machine, the driver is found through the loader path, which is how `run`
    // predicts it and arms the probes before the command starts.
    let mut command = Command::new(program);
    command.env("LD_LIBRARY_PATH", fake_cuda_dir());
    if let Some(nvml) = nvml {
        nvml.apply(&mut command);
    }
    let out = command
        .args(wrapper_args)
        .args(["run", "--json"])
        .args(options)
        .arg("--")
        .arg(fakejob())
        .args(args)
        .output()
        .expect("gputrace runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{stdout}\nstderr:\n{stderr}"));
    assert_valid(&report);
    (report, out.status.code().unwrap_or(-1), stderr)
}

/// `gputrace record -o DIR/job.gtr -- fakejob ARGS`: the recording's path.
#[must_use]
pub fn record_fakejob(dir: &std::path::Path, args: &[&str]) -> PathBuf {
    let file = dir.join("job.gtr");
    let recorded = Command::new(gputrace())
        .env("LD_LIBRARY_PATH", fake_cuda_dir())
        .args(["record", "-o"])
        .arg(&file)
        .arg("--")
        .arg(fakejob())
        .args(args)
        .output()
        .expect("gputrace records");
    assert!(recorded.status.success(), "{}", String::from_utf8_lossy(&recorded.stderr));
    file
}

/// `gputrace record -o FILE -- fakejob ARGS`, then `gputrace report --json FILE`: the report
/// made later from the recording. `name` keeps concurrent callers' files apart.
#[must_use]
pub fn record_then_report(name: &str, args: &[&str]) -> Value {
    let dir = std::env::temp_dir().join(format!("gputrace-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = record_fakejob(&dir, args);
    let out = Command::new(gputrace()).args(["report", "--json"]).arg(&file).output().expect("report runs");
    let _ = std::fs::remove_dir_all(&dir);
    report_json(&out.stdout)
}

/// Check a JSON report against its published schema (`gputrace.report/1` or
/// `gputrace.sweep/1`, by its `schema` field; docs/schema/, equal to the report types: a unit
/// test of `gputrace::report::schema` checks the files); panics with every violation.
pub fn assert_valid(report: &Value) {
    static SCHEMAS: std::sync::OnceLock<(Value, Value)> = std::sync::OnceLock::new();
    let (trace, sweep) = SCHEMAS.get_or_init(|| (gputrace::report::schema::report(), gputrace::report::schema::sweep()));
    let schema = match report["schema"].as_str() {
        Some("gputrace.report/1") => trace,
        Some("gputrace.sweep/1") => sweep,
        other => panic!("not a gputrace report (schema {other:?}): {report:#}"),
    };
    let errors = schema_check::violations(schema, report);
    assert!(errors.is_empty(), "the report breaks its published schema:\n{}", errors.join("\n"));
}

/// Parse one JSON report and check it against its published schema.
#[must_use]
pub fn report_json(bytes: impl AsRef<[u8]>) -> Value {
    let bytes = bytes.as_ref();
    let report: Value = serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{}", String::from_utf8_lossy(bytes)));
    assert_valid(&report);
    report
}

/// A number at a JSON pointer (`/cuda/launches/kernels`); panics with the report if absent.
#[must_use]
pub fn num(report: &Value, pointer: &str) -> u64 {
    report.pointer(pointer).and_then(Value::as_u64).unwrap_or_else(|| panic!("{pointer} missing in {report:#}"))
}

/// Hits of one probe symbol in `tracer.probes`.
#[must_use]
pub fn hits(report: &Value, symbol: &str) -> u64 {
    report["tracer"]["probes"]
        .as_array()
        .expect("probes is a list")
        .iter()
        .filter(|p| p["symbol"] == symbol)
        .map(|p| p["hits"].as_u64().expect("hits"))
        .sum()
}

/// An empty scratch folder for one test, `gputrace-SUITE-NAME-PID` under the temporary
/// folder (emptied if a previous run left it), removed when the test is done with it; kept
/// when the test fails, for a look at what it left.
#[must_use]
pub fn scratch(suite: &str, name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("gputrace-{suite}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    Scratch(dir)
}

/// A test's scratch folder (see [`scratch`]): a path, removed on drop unless the thread panics.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
