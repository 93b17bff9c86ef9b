//! Project tasks: `cargo xtask setup | build | demo | test | accuracy | bench | dist | fuzz`.
//!
//! `setup` installs what the eBPF build needs and is idempotent; every other task runs it
//! first, so the README's two commands work on a fresh machine.

mod accuracy;
mod bench;
mod bench_unwind;
mod dist;
mod statistics;
mod suites;
mod toolchain;

#[path = "../../tests/fake-cuda/builder.rs"]
mod builder;
#[path = "../../tracer/ebpf_build.rs"]
mod ebpf_build;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the nightly's rust-src and the pinned bpf-linker (idempotent).
    Setup,
    /// Setup, then build target/release/gputrace.
    Build,
    /// Build everything and trace the built-in demo workloads (fake CUDA; no GPU needed).
    Demo,
    /// Build everything and run every test, privileged integration tests included.
    Test {
        /// Also the long validations in full (`GPUTRACE_LONG=1`: every moment of the kill
        /// tests), which CI runs a part of (docs/development.md).
        #[arg(long)]
        long: bool,
    },
    /// Judge the recorded accuracy corpus (validation/corpus) with the current build, offline;
    /// fail when a score falls below the recorded one (docs/accuracy.md). `GPUTRACE_BIN`
    /// names a gputrace to judge with instead of building one.
    Accuracy {
        /// Write the scores as they are now into the corpus's scores.json.
        #[arg(long)]
        update: bool,
        /// The corpus to judge: a folder with seeds.json, scores.json and jobs/.
        #[arg(long, default_value = "validation/corpus")]
        corpus: PathBuf,
    },
    /// Measure the added cost per traced launch against a bare uprobe, and of unwinding
    /// native stacks (root; docs/benchmarks.md).
    Bench {
        /// Only the cost of unwinding native stacks.
        #[arg(long)]
        unwind: bool,
        /// Only the cost per kind of call and its estimate (issue 34).
        #[arg(long, conflicts_with = "unwind")]
        calls: bool,
        /// Only start-up and exit of `gputrace run` on a short job (attach and detach times).
        #[arg(long, conflicts_with_all = ["unwind", "calls"])]
        startup: bool,
        /// Only the first table: the added cost per traced launch. With `GPUTRACE_BENCH_RELEASE`
        /// (a folder with another build's gputrace and gputrace-uprobe-floor) it times that
        /// build instead, so that two builds are compared by the same harness.
        #[arg(long, conflicts_with_all = ["unwind", "calls", "startup"])]
        launches: bool,
    },
    /// Build the release artifacts into target/dist: tarball, debug info, .deb (docs/install.md).
    Dist,
    /// Fuzz the parsers of untrusted bytes with cargo-fuzz (installed if missing; nightly).
    Fuzz {
        /// One of the targets in fuzz/Cargo.toml; all of them by default.
        target: Option<String>,
        /// How long each target runs.
        #[arg(long, default_value_t = 60)]
        seconds: u32,
    },
}

const FUZZ_TARGETS: &[&str] = &["decode_event", "read_recording", "replay_frames", "parse_proc", "parse_elf", "unwind_cfi"];

/// Seed the corpora (written by a test of the library, which knows the formats), then run
/// each target for `seconds`. Crashes land in fuzz/artifacts/; keep one as a regression by
/// copying it into fuzz/corpus/TARGET/, which CI replays.
fn fuzz(target: Option<&str>, seconds: u32) -> Result<()> {
    toolchain::setup()?;
    if Command::new("cargo").args(["fuzz", "--version"]).output().map_or(true, |o| !o.status.success()) {
        run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    let seeds = target_dir().join("fuzz-seeds");
    run(Command::new("cargo")
        .current_dir(root())
        .env("GPUTRACE_EBPF_STUB", "1")
        .env("GPUTRACE_FUZZ_SEEDS", &seeds)
        .args(["test", "--package", "gputrace", "--lib", "fuzzing::tests::write_seeds", "--", "--ignored", "--exact"]))?;
    let targets: Vec<&str> = target.map_or_else(|| FUZZ_TARGETS.to_vec(), |t| vec![t]);
    for t in targets {
        let corpus = target_dir().join("fuzz-corpus").join(t);
        std::fs::create_dir_all(&corpus)?;
        run(Command::new("cargo")
            .current_dir(root().join("fuzz"))
            .env("GPUTRACE_EBPF_STUB", "1")
            .arg(format!("+{}", toolchain::NIGHTLY))
            .args(["fuzz", "run", t])
            .arg(&corpus)
            .arg(seeds.join(t))
            .arg(root().join("fuzz/corpus").join(t))
            .arg("--")
            .arg(format!("-max_total_time={seconds}")))?;
    }
    Ok(())
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

/// Cargo's target directory: `CARGO_TARGET_DIR` where set (relative to the workspace, as cargo
/// takes it here), else `target`. A demo run with it set looked for the binary in `target`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root().join(dir),
        _ => root().join("target"),
    }
}

/// Runs a step and says how long it took, so that a CI log shows where its time goes.
fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("+ {cmd:?}");
    let started = std::time::Instant::now();
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    eprintln!("+ took {:.1} s: {} {}", started.elapsed().as_secs_f64(), cmd.get_program().display(), cmd.get_args().take(3).map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" "));
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn build() -> Result<PathBuf> {
    build_only(&[])
}

/// The release build of gputrace's binaries, or only of those named (`--bin NAME` each): the
/// demo needs `gputrace` alone, and each other binary links the whole library again.
fn build_only(bins: &[&str]) -> Result<PathBuf> {
    toolchain::setup()?;
    let _ebpf = EbpfPrebuild::start()?;
    run(Command::new("cargo")
        .current_dir(root())
        .env(ebpf_build::TARGET_DIR_ENV, ebpf_target_dir())
        .args(["build", "--release", "--package", "gputrace"])
        .args(bins.iter().flat_map(|b| ["--bin", b])))?;
    Ok(target_dir().join("release/gputrace"))
}

/// The eBPF object's nightly build, started at once beside the host build rather than when
/// cargo reaches gputrace's build script (`tracer/ebpf_build.rs` says why), into the directory
/// that every cargo step of xtask tells the build script to use (`ebpf_target_dir`).
struct EbpfPrebuild {
    child: std::process::Child,
}

const HOST_ENDIAN: &str = if cfg!(target_endian = "big") { "big" } else { "little" };

impl EbpfPrebuild {
    fn start() -> Result<Self> {
        let mut cmd = ebpf_build::command(&root(), toolchain::NIGHTLY, &ebpf_target_dir(), std::env::consts::ARCH, HOST_ENDIAN);
        // Quiet: the build script's own run reports any failure, with these same messages.
        cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        let child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
        Ok(Self { child })
    }
}

impl Drop for EbpfPrebuild {
    /// Long done where the host build got as far as the build script, which waited for it;
    /// stopped where the host build failed first.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Where the eBPF object is built: the same for every cargo step (the build script reruns,
/// and gputrace is compiled again, when it changes) and for `EbpfPrebuild`. `.cargo/config.toml`
/// names the same folder for cargo run by hand.
fn ebpf_target_dir() -> PathBuf {
    target_dir().join("ebpf")
}

/// The demo: a planted bottleneck per run, each traced by `gputrace run` on the fake CUDA.
fn demo() -> Result<()> {
    let gputrace = build_only(&["gputrace"])?;
    let fake = target_dir().join("fake-cuda");
    builder::build_fake_cuda(&root().join("tests/fake-cuda"), &fake).map_err(anyhow::Error::msg)?;
    let job = fake.join("fakejob").display().to_string();
    let scenarios: [(&str, &[&str]); 3] = [
        ("many tiny kernels, launched one by one", &["--steps", "300", "--driver-launches", "200", "--kernel-us", "1", "--sync"]),
        (
            "a training step that copies from pageable memory and reads a scalar back",
            &[
                "--steps",
                "200",
                "--driver-launches",
                "20",
                "--kernel-us",
                "20",
                "--pageable-h2d",
                "4194304",
                "--item",
                "1",
                "--host-us",
                "300",
            ],
        ),
        ("a healthy job: large kernels keep the GPU busy", &["--steps", "100", "--driver-launches", "10", "--kernel-us", "500", "--sync"]),
    ];
    for (what, args) in scenarios {
        eprintln!("\n=== demo: {what} ===");
        // As on a machine with a driver installed, libcuda is on the loader's path: that is how
        // `gputrace run` finds it and arms the probes before the job's first call.
        run(Command::new(&gputrace).env("LD_LIBRARY_PATH", &fake).arg("run").arg("--").arg(&job).args(args))?;
    }
    // The same pageable-copy job recorded, then looked at: a page to open in a browser.
    let dir = target_dir().join("demo");
    std::fs::create_dir_all(&dir)?;
    let (recording, page) = (dir.join("pageable.gtr"), dir.join("pageable.html"));
    eprintln!("\n=== demo: the second job recorded, and its report as a page ===");
    run(Command::new(&gputrace).env("LD_LIBRARY_PATH", &fake).args(["record", "--force", "-o"]).arg(&recording).arg("--").arg(&job).args(scenarios[1].1))?;
    run(Command::new(&gputrace).args(["export", "--force", "--html"]).arg(&page).arg(&recording))?;
    eprintln!("demo: open {} in a browser", page.display());
    Ok(())
}

fn test(long: bool) -> Result<()> {
    let started = std::time::Instant::now();
    let result = test_steps(long);
    eprintln!("xtask test: {:.0} s in all", started.elapsed().as_secs_f64());
    result
}

/// Every cargo step of the test run selects the same packages: cargo unifies the features
/// of shared dependencies over the packages selected, so `-p gputrace` in one step and the
/// workspace in the next would compile blazesym, py-spy and gputrace itself twice.
const EVERY_HOST_CRATE: [&str; 3] = ["--workspace", "--exclude", "gputrace-ebpf"];

/// A cargo step over every host crate whose compiles are linted as they build: clippy-driver
/// wraps rustc for the workspace's own crates (as `cargo clippy` sets it up), so the release
/// build, the unit tests and the integration tests together lint every target that a separate
/// `cargo clippy --all-targets` would, without a second pass over the code (~60 s of CI's).
/// Warnings fail the step, as `-D warnings` does there.
fn cargo_release(verb: &str) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root()).args([verb, "--release"]).args(EVERY_HOST_CRATE);
    cmd.env("RUSTC_WORKSPACE_WRAPPER", clippy_driver())
        .env("CLIPPY_ARGS", "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__")
        .env("GPUTRACE_LINTED_BUILD", "1")
        .env(ebpf_build::TARGET_DIR_ENV, ebpf_target_dir());
    cmd
}

/// The toolchain's clippy-driver, by the path rustup gives (as cargo-clippy names its own).
fn clippy_driver() -> PathBuf {
    Command::new("rustup")
        .args(["which", "clippy-driver"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(|| PathBuf::from("clippy-driver"), |o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
}

fn test_steps(long: bool) -> Result<()> {
    toolchain::setup()?;
    // The HTML page's test needs a browser: Debian's is installed, where missing, while the
    // build runs (it waits on the network and dpkg more than on the CPU; ~20 s of a fresh
    // machine's CI otherwise).
    let browser = std::thread::spawn(|| {
        let started = std::time::Instant::now();
        let r = toolchain::browser();
        (r, started.elapsed())
    });
    // Every crate inherits the workspace lints; each compile below lints what it builds, and
    // a warning fails the run (`cargo_release`).
    let ebpf = EbpfPrebuild::start()?;
    run(&mut cargo_release("build"))?;
    drop(ebpf);
    let object = ebpf_build::object(&ebpf_target_dir(), HOST_ENDIAN);
    eprintln!("+ the eBPF object, built beside: {} ({} bytes before stripping)", object.display(), std::fs::metadata(&object)?.len());
    let gputrace = target_dir().join("release/gputrace");
    // The privileged suites, built now (linted, as every step), run by lane below (`suites`),
    // each test of a suite one at a time.
    // The release artifacts, which `tests/tests/dist.rs` installs and runs without cargo, packed
    // from the binary while the suites link (that step links 30 test binaries, mostly one core).
    let packing = {
        let gputrace = gputrace.clone();
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            (dist::dist(&root(), &gputrace), started.elapsed())
        })
    };
    let suites = build_suites()?;
    suites::check_listed(&root(), &suites)?;
    let (packed, took) = packing.join().map_err(|_| anyhow::anyhow!("packing the release artifacts panicked"))?;
    packed?;
    eprintln!("+ took {:.1} s: dist, beside the suites' build", took.as_secs_f64());
    let (installed, took) = browser.join().map_err(|_| anyhow::anyhow!("the browser's install panicked"))?;
    installed?;
    eprintln!("+ the browser: ready ({:.1} s, beside the build)", took.as_secs_f64());
    // Unit tests, of the libraries (the binaries and the integration-test crate's library
    // have none; clippy checks them). gputrace's own are built with overflow checks and debug
    // assertions on: the fuzz corpus and its mutations run as the fuzzer runs them (a release
    // build would wrap an overflow silently), without a second, debug build of every crate.
    // The options change gputrace and gputrace-analysis alone (the analysis crate holds the
    // decoding, the evidence and the detectors, and most of the unit tests); the eBPF object is not needed by unit tests (the
    // stub spares its second build). Not optimized: the crate's test build took 118 s on 2
    // cores at opt-level 3 and 65 s at 1 with its dependencies built (2026-12-03); at 0 it
    // takes 19 s (23 s of CPU against 102 s at 1) and its tests 7.5 s instead of 2.4 s
    // (2026-12-05), the CPU the suites beside it were short of. Without gputrace-tests selected, features of shared dependencies
    // would differ and py-spy, blazesym and a dozen more be compiled again: tracer/Cargo.toml
    // turns those features on itself. They build and run beside the shared lane of the suites,
    // which checks behaviour, not time (`suites::Lane`).
    let logs = target_dir().join("suite-logs");
    let mut unit = cargo_release("test");
    unit.env("GPUTRACE_BIN", &gputrace)
        .env("GPUTRACE_EBPF_STUB", "1")
        .args(["--exclude", "gputrace-tests", "--lib"])
        .args(["--config", "profile.release.package.gputrace.overflow-checks=true"])
        .args(["--config", "profile.release.package.gputrace.debug-assertions=true"])
        .args(["--config", "profile.release.package.gputrace.opt-level=0"])
        .args(["--config", "profile.release.package.gputrace-analysis.overflow-checks=true"])
        .args(["--config", "profile.release.package.gputrace-analysis.debug-assertions=true"])
        .args(["--config", "profile.release.package.gputrace-analysis.opt-level=0"]);
    let running = std::time::Instant::now();
    let unit = suites::start_command("unit-tests", unit, &logs)?;
    // The corpus judged again (offline reports, one at a time) beside them: it checks
    // verdicts and promises read from recordings, not time.
    let judging = {
        let gputrace = gputrace.clone();
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            (accuracy::run(&gputrace, &root(), &root().join("validation/corpus"), 1, false), started.elapsed())
        })
    };
    let long_flag = std::ffi::OsString::from(if long { "1" } else { "0" });
    let env = [("GPUTRACE_BIN", gputrace.as_os_str()), ("GPUTRACE_LONG", long_flag.as_os_str())];
    // Three wide: four took the CPU the unit tests' build needs (83 s against 61 s for it,
    // 2026-12-07).
    let mut failed = suites::run_lane(&suites, suites::Lane::Shared, 3, &env, &logs)?;
    if !suites::finish(unit)? {
        failed.push("unit tests".into());
    }
    match judging.join() {
        Ok((Ok(()), took)) => eprintln!("+ took {:.1} s: the accuracy corpus, beside them", took.as_secs_f64()),
        Ok((Err(e), _)) => {
            eprintln!("accuracy: {e:#}");
            failed.push("accuracy".into());
        }
        Err(_) => failed.push("accuracy (panicked)".into()),
    }
    eprintln!("+ took {:.1} s: the unit tests beside the shared suites", running.elapsed().as_secs_f64());
    let alone = std::time::Instant::now();
    failed.extend(suites::run_lane(&suites, suites::Lane::Alone, 1, &env, &logs)?);
    eprintln!("+ took {:.1} s: the suites that run alone", alone.elapsed().as_secs_f64());
    if !failed.is_empty() {
        bail!("failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Builds the integration suites (linted, as every step) and returns their test binaries.
fn build_suites() -> Result<Vec<suites::Suite>> {
    let building = std::time::Instant::now();
    let out = cargo_release("test")
        .args(["--test", "*", "--no-run", "--message-format=json-render-diagnostics"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("building the integration suites")?;
    if !out.status.success() {
        bail!("building the integration suites failed: {}", out.status);
    }
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let is_test = msg["target"]["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "test"));
        if let (true, Some(name), Some(exe)) = (is_test, msg["target"]["name"].as_str(), msg["executable"].as_str()) {
            found.push(suites::Suite { name: name.to_owned(), binary: PathBuf::from(exe) });
        }
    }
    eprintln!("+ took {:.1} s: building {} integration suites", building.elapsed().as_secs_f64(), found.len());
    Ok(found)
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => toolchain::setup(),
        Task::Build => build().map(|_| ()),
        Task::Demo => demo(),
        Task::Test { long } => test(long),
        Task::Accuracy { update, corpus } => {
            // GPUTRACE_BIN: a gputrace built already (as the suites take it), else built here.
            let gputrace = match std::env::var_os("GPUTRACE_BIN") {
                Some(bin) => PathBuf::from(bin),
                None => build_only(&["gputrace"])?,
            };
            let workers = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
            accuracy::run(&gputrace, &root(), &root().join(corpus), workers, update)
        }
        Task::Bench { unwind, calls, startup, launches } => {
            let gputrace = build()?;
            let release = match std::env::var_os("GPUTRACE_BENCH_RELEASE") {
                Some(other) => PathBuf::from(other),
                None => gputrace.parent().context("target/release")?.to_path_buf(),
            };
            let fake = target_dir().join("fake-cuda");
            builder::build_fake_cuda(&root().join("tests/fake-cuda"), &fake).map_err(anyhow::Error::msg)?;
            if unwind {
                bench_unwind::run(&release, &fake)
            } else if calls {
                bench::call_kinds(&release, &fake)
            } else if startup {
                bench::startup_and_exit(&release, &fake)
            } else if launches {
                bench::launches(&release, &fake)
            } else {
                bench::run(&release, &fake)
            }
        }
        Task::Dist => {
            let a = dist::dist(&root(), &build()?)?;
            for path in [a.tarball, a.debug, a.deb] {
                eprintln!("dist: {}", path.display());
            }
            Ok(())
        }
        Task::Fuzz { target, seconds } => fuzz(target.as_deref(), seconds),
    }
}
