//! Hostile input: output paths that are devices, FIFOs, links, existing files or the input
//! itself; names and arguments that are not UTF-8; thread ids for pids; stopping signals;
//! `/proc` hiding other users. Nothing is ever clobbered, nothing panics, and the report
//! says what it could not see.
use std::{
    ffi::{OsStr, OsString},
    fs,
    io::Read as _,
    os::unix::{
        ffi::OsStrExt as _,
        fs::{symlink, FileTypeExt as _, PermissionsExt as _},
    },
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use gputrace_tests::{fake_cuda_dir, fakejob, gputrace, num, require_root, Gated, Tracer};
use serde_json::Value;

fn scratch(name: &str) -> gputrace_tests::Scratch {
    gputrace_tests::scratch("hostile", name)
}

/// Exit code, stdout and stderr.
fn output(cmd: &mut Command) -> (i32, Vec<u8>, String) {
    let out = cmd.stdin(Stdio::null()).output().expect("gputrace runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code().unwrap_or(-1), out.stdout, stderr)
}

fn gt() -> Command {
    let mut c = Command::new(gputrace());
    c.env("LD_LIBRARY_PATH", fake_cuda_dir());
    c
}

/// A small recording of a fakejob at `file`.
fn recording(file: &Path) {
    let (code, _, stderr) =
        output(gt().args(["record", "--nvml-hz", "0", "-o"]).arg(file).arg("--").arg(fakejob()).args(["--steps", "5", "--driver-launches", "2"]));
    assert_eq!(code, 0, "{stderr}");
}

/// A character device node of our own (major, minor), so that a regression replaces this
/// node and not the host's /dev/null.
fn char_device(path: &Path, major: u32, minor: u32) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path; mknod only reads it.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(major, minor)) };
    assert_eq!(rc, 0, "mknod {}: {}", path.display(), std::io::Error::last_os_error());
}

fn is_char_device(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

fn entries(dir: &Path) -> Vec<OsString> {
    let mut v: Vec<OsString> = fs::read_dir(dir).expect("dir").map(|e| e.expect("entry").file_name()).collect();
    v.sort();
    v
}

#[test]
fn devices_fifos_and_stdout_are_written_through_never_replaced() {
    require_root();
    let dir = scratch("devices");
    let rec = dir.join("job.gtr");
    recording(&rec);

    let null = dir.join("null");
    char_device(&null, 1, 3);
    let (code, _, stderr) = output(gt().arg("export").arg(&rec).arg("--perfetto").arg(&null));
    assert_eq!(code, 0, "{stderr}");
    assert!(is_char_device(&null), "the device node is still a device node");

    // A device that refuses writes: the export fails and says so; the node stays.
    let full = dir.join("full");
    char_device(&full, 1, 7);
    let (code, _, stderr) = output(gt().arg("export").arg(&rec).arg("--perfetto").arg(&full));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("No space left"), "{stderr}");
    assert!(is_char_device(&full));

    // A recording into a device node, as root: written through.
    let (code, _, stderr) =
        output(gt().args(["record", "--nvml-hz", "0", "-o"]).arg(&null).arg("--").arg(fakejob()).args(["--steps", "2", "--driver-launches", "1"]));
    assert_eq!(code, 0, "{stderr}");
    assert!(is_char_device(&null));

    // `-` and a link to our stdout (as /dev/stdout is) both reach stdout; the link stays.
    let (code, stdout, stderr) = output(gt().arg("export").arg(&rec).args(["--perfetto", "-"]));
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_slice(&stdout).expect("stdout holds the trace");
    assert!(v["traceEvents"].as_array().is_some_and(|e| !e.is_empty()));
    let link = dir.join("stdout");
    symlink("/proc/self/fd/1", &link).expect("link");
    let (code, stdout, stderr) = output(gt().arg("export").arg(&rec).arg("--perfetto").arg(&link));
    assert_eq!(code, 0, "{stderr}");
    assert!(serde_json::from_slice::<Value>(&stdout).is_ok(), "written through the link to stdout");
    assert!(fs::symlink_metadata(&link).expect("link").file_type().is_symlink(), "the link is still a link");

    // A FIFO streams to its reader and stays a FIFO.
    let fifo = dir.join("pipe");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut s = String::new();
            fs::File::open(&fifo).expect("open the fifo").read_to_string(&mut s).expect("read");
            s
        })
    };
    let (code, _, stderr) = output(gt().arg("export").arg(&rec).arg("--perfetto").arg(&fifo));
    assert_eq!(code, 0, "{stderr}");
    assert!(serde_json::from_str::<Value>(&reader.join().expect("reader")).is_ok());
    assert!(fs::symlink_metadata(&fifo).expect("fifo").file_type().is_fifo());

    // Rotation needs file names: refused for a device, before anything runs.
    let (code, _, stderr) = output(gt().args(["record", "--max-size", "1M", "--pid", "1", "-o"]).arg(&null));
    assert_eq!(code, 2, "{stderr}");
    assert!(is_char_device(&null));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn inputs_and_existing_files_are_never_destroyed() {
    require_root();
    let dir = scratch("keep");
    let rec = dir.join("job.gtr");
    recording(&rec);
    let original = fs::read(&rec).expect("recording");

    // Exporting a recording over itself: refused, with or without --force.
    for force in [false, true] {
        let mut cmd = gt();
        cmd.arg("export").arg(&rec).arg("--perfetto").arg(&rec);
        if force {
            cmd.arg("--force");
        }
        let (code, _, stderr) = output(&mut cmd);
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("input"), "{stderr}");
        assert_eq!(fs::read(&rec).expect("kept"), original);
    }

    // Recording over an existing file: refused without --force; with it, a session that
    // cannot start leaves the file as it was, and no temporary file behind.
    let (code, _, stderr) = output(gt().args(["record", "--pid", "999999", "-o"]).arg(&rec));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    let (code, _, stderr) = output(gt().args(["record", "--force", "--pid", "999999", "-o"]).arg(&rec));
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(fs::read(&rec).expect("kept"), original);
    assert_eq!(entries(&dir), [OsString::from("job.gtr")], "nothing left beside it");

    // The same as a plain user, in a folder of theirs.
    let user_dir = dir.join("user");
    fs::create_dir(&user_dir).expect("dir");
    let theirs = user_dir.join("keep.gtr");
    fs::write(&theirs, &original).expect("their file");
    for p in [&user_dir, &theirs] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).expect("chown");
    }
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
    for (force, expected) in [(false, 2), (true, 4)] {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
            .arg(gputrace())
            .args(["record", "--pid", "999999", "-o"])
            .arg(&theirs);
        if force {
            cmd.arg("--force");
        }
        let (code, _, stderr) = output(&mut cmd);
        assert_eq!(code, expected, "force {force}: {stderr}");
        assert_eq!(fs::read(&theirs).expect("kept"), original);
        assert_eq!(entries(&user_dir), [OsString::from("keep.gtr")]);
    }

    // An export over an existing file needs --force, and then replaces it.
    let json = dir.join("out.json");
    fs::write(&json, b"old").expect("old");
    let (code, _, stderr) = output(gt().arg("export").arg(&rec).arg("--perfetto").arg(&json));
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(fs::read(&json).expect("kept"), b"old");
    let (code, _, stderr) = output(gt().arg("export").arg(&rec).arg("--perfetto").arg(&json).arg("--force"));
    assert_eq!(code, 0, "{stderr}");
    assert!(serde_json::from_slice::<Value>(&fs::read(&json).expect("new")).is_ok());

    // A link planted at the output: refused; the file it points to is untouched.
    let victim = dir.join("victim");
    fs::write(&victim, b"keep me").expect("victim");
    let planted = dir.join("planted.gtr");
    symlink(&victim, &planted).expect("symlink");
    let (code, _, stderr) = output(gt().args(["record", "--nvml-hz", "0", "-o"]).arg(&planted).arg("--").arg(fakejob()));
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(fs::read(&victim).expect("victim"), b"keep me");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn arguments_and_names_that_are_not_utf8_never_panic() {
    require_root();
    let dir = scratch("utf8");
    let bad = OsStr::from_bytes(b"\xff\xfe");
    // A command argument: passed through as bytes.
    let (code, stdout, stderr) = output(gt().args(["run", "--json", "--", "/bin/echo"]).arg(bad));
    assert_eq!(code, 0, "{stderr}");
    let r = gputrace_tests::report_json(&stdout);
    assert_eq!(r["target"]["exit_code"], 0);
    assert!(stderr.contains('\u{fffd}'), "echo's output (on stderr with --json) carried the bytes: {stderr}");
    // A recording named with such bytes: written, then read back.
    let mut name = dir.clone().into_os_string();
    name.push("/");
    name.push(OsStr::from_bytes(b"job\xff.gtr"));
    let file = PathBuf::from(name);
    recording(&file);
    let (code, stdout, stderr) = output(gt().args(["report", "--json"]).arg(&file));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(num(&gputrace_tests::report_json(&stdout), "/cuda/launches/kernels"), 10);
    // A missing one: a clear message, exit 1 (it is no damaged recording).
    let (code, _, stderr) = output(gt().arg("report").arg(OsStr::from_bytes(b"\xff.gtr")));
    assert_eq!(code, 1, "{stderr}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_process_with_a_name_that_is_not_utf8_is_traced() {
    require_root();
    let dir = scratch("name");
    let link = dir.join(OsStr::from_bytes(b"job\xff\xfe"));
    symlink(fakejob(), &link).expect("link");
    let mut job = Gated::start_as(&link, &["--steps", "20", "--driver-launches", "5"]);
    let comm = fs::read(format!("/proc/{}/comm", job.pid)).expect("comm");
    assert!(String::from_utf8(comm).is_err(), "the process name is not UTF-8");
    let tracer = Tracer::attach(job.pid, &["--nvml-hz", "0"]);
    job.release();
    job.finish();
    let (r, code, stderr) = tracer.report();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(num(&r, "/cuda/launches/kernels"), 100, "{r:#}");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_thread_id_traces_its_process_and_says_so() {
    require_root();
    let mut job = Gated::start(&["--threads", "2", "--steps", "100000000", "--driver-launches", "1", "--host-us", "100"]);
    job.release();
    let deadline = Instant::now() + Duration::from_secs(10);
    let tid = loop {
        let tids: Vec<u32> = fs::read_dir(format!("/proc/{}/task", job.pid))
            .expect("tasks")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|&t| t != job.pid)
            .collect();
        if let Some(&t) = tids.first() {
            break t;
        }
        assert!(Instant::now() < deadline, "the job started no thread");
        std::thread::sleep(Duration::from_millis(20));
    };
    let tracer = Tracer::attach(tid, &["--duration", "1", "--nvml-hz", "0"]);
    let (r, code, stderr) = tracer.report();
    let _ = job.child.kill();
    let _ = job.child.wait();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(r["target"]["pid"], job.pid, "{r:#}");
    assert!(num(&r, "/cuda/launches/kernels") > 0, "{r:#}");
    let notes = r["tracer"]["notes"].to_string();
    assert!(notes.contains(&format!("{tid} is a thread of process {}", job.pid)), "{notes}");
}

#[test]
fn calls_missed_before_a_library_was_probed_make_the_report_incomplete() {
    require_root();
    // The job loads a libcuda from a folder that is not on the loader path: `run` cannot
    // probe it in advance, so it is found mapped, and probed, only after the job started.
    let dir = scratch("late");
    for lib in ["libcuda.so.1", "libcudart.so.13"] {
        fs::copy(fake_cuda_dir().join(lib), dir.join(lib)).expect("copy the fake CUDA");
    }
    let lib_dir = dir.display().to_string();
    let (code, stdout, stderr) = output(
        Command::new(gputrace())
            .env_remove("LD_LIBRARY_PATH")
            .args(["run", "--json", "--nvml-hz", "0", "--"])
            .arg(fakejob())
            .args(["--lib-dir", &lib_dir, "--steps", "2000", "--driver-launches", "10", "--kernel-us", "50", "--sync"]),
    );
    assert_eq!(code, 0, "{stderr}");
    let r = gputrace_tests::report_json(&stdout);
    assert_eq!(r["tracer"]["probed_late"], 1, "{:#}", r["tracer"]);
    assert_eq!(r["tracer"]["complete"], false);
    assert!(r["tracer"]["notes"].to_string().contains("before gputrace probed it"), "{:#}", r["tracer"]["notes"]);
    assert_eq!(r["target"]["cuda_loaded"], true);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_command_that_maps_no_cuda_has_not_loaded_it() {
    require_root();
    // libcuda is on the loader path (and probed in advance), but `sleep` never maps it.
    let (code, stdout, stderr) = output(gt().args(["run", "--json", "--nvml-hz", "0", "--", "sleep", "0.3"]));
    assert_eq!(code, 0, "{stderr}");
    let r = gputrace_tests::report_json(&stdout);
    assert_eq!(r["target"]["cuda_loaded"], false, "{:#}", r["target"]);
    assert_eq!(r["tracer"]["complete"], true);
}

/// `gputrace run --json` of an endless fakejob, given `signal` once armed and running.
fn run_then_signal(signal: i32) -> Value {
    use std::io::BufRead as _;
    let mut child = gt()
        .args(["-v", "run", "--json", "--nvml-hz", "0", "--"])
        .arg(fakejob())
        .args(["--steps", "100000000", "--driver-launches", "1", "--host-us", "100"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gputrace runs");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("piped"));
    let mut line = String::new();
    while !line.contains("armed: ") {
        line.clear();
        assert!(stderr.read_line(&mut line).expect("stderr") > 0, "gputrace ended before arming");
    }
    // Drain the rest, so that gputrace never blocks on a full pipe.
    let drained = std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: sending a signal has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, signal) };
    let out = child.wait_with_output().expect("gputrace exits");
    let _ = drained.join();
    assert!(!out.stdout.is_empty(), "no report after signal {signal}");
    gputrace_tests::report_json(&out.stdout)
}

/// A SIGTERM that comes as soon as `run` has started its command, before the probes are
/// armed, is passed on too: gputrace once installed its handlers after the "armed" line, so a
/// signal in between killed it and left the command running, orphaned, holding our stdout.
#[test]
fn a_stopping_signal_before_arming_ends_the_command_with_gputrace() {
    require_root();
    let mut child = gt()
        .args(["run", "--json", "--nvml-hz", "0", "--"])
        .arg(fakejob())
        .args(["--steps", "100000000", "--driver-launches", "1", "--host-us", "100"])
        .stdin(Stdio::null())
        // Not piped: an orphaned command would hold the pipe, and the test would wait on it.
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gputrace runs");
    // The command's pid, as soon as gputrace has started it.
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let job = loop {
        // Not the first child: gputrace runs short helpers before it starts the command.
        let listed = std::fs::read_to_string(&children).unwrap_or_default();
        let command = listed.split_whitespace().find(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.windows(7).any(|w| w == b"fakejob")));
        if let Some(pid) = command {
            break pid.to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "gputrace started no command");
        std::thread::sleep(Duration::from_millis(1));
    };
    // SAFETY: sending a signal has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("gputrace exits");
    let left = Path::new(&format!("/proc/{job}")).exists();
    if left {
        let _ = std::process::Command::new("kill").args(["-9", &job]).status();
    }
    assert!(!left, "the command was left running ({status})");
}

#[test]
fn run_passes_stopping_signals_on_and_reports_how_the_command_ended() {
    require_root();
    for (signal, name) in [(libc::SIGTERM, 15), (libc::SIGINT, 2)] {
        let r = run_then_signal(signal);
        assert_eq!(r["window"]["stopped_by"], "signal");
        assert_eq!(r["target"]["exit_signal"], name, "{:#}", r["target"]);
        assert_eq!(r["target"]["exit_code"], 128 + name);
        let pid = num(&r, "/target/pid");
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the command was left running after signal {name}");
    }
    // A command killed by a signal is named so in the text report.
    let (code, stdout, stderr) = output(gt().args(["run", "--nvml-hz", "0", "--", "sh", "-c", "kill -SEGV $$"]));
    assert_eq!(code, 128 + libc::SIGSEGV, "run ends as its command did: {stderr}");
    let text = String::from_utf8_lossy(&stdout);
    assert!(text.contains("killed by signal 11 (SIGSEGV)"), "{text}");
}

#[test]
fn flags_are_bounded_and_say_their_limits() {
    require_root();
    let started = Instant::now();
    let (code, _, stderr) = output(gt().args(["record", "--pid", "1", "-o", "/tmp/never.gtr", "--max-size", "64K", "--keep", "4294967295"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("0..=1000"), "{stderr}");
    let (code, _, stderr) = output(gt().args(["attach", "--pid", "1", "--duration", "1e9"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("at most"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!Path::new("/tmp/never.gtr").exists());
}

#[test]
fn a_plain_user_under_hidepid_is_told_the_sweep_cannot_see_everyone() {
    require_root();
    let mut holder = Gated::start(&["--hold-ms", "60000"]);
    holder.release();
    holder.wait_for("holding");
    // A /proc of our own with hidepid=2 in a private mount namespace; the sweep runs as nobody.
    let script = format!(
        "mount --make-rprivate / && mount -t proc -o hidepid=2 proc /proc && exec setpriv --reuid=65534 --regid=65534 \
         --clear-groups --inh-caps=-all --bounding-set=-all {} sweep --json --duration 1",
        gputrace().display()
    );
    let (code, stdout, stderr) = output(Command::new("unshare").args(["--mount", "sh", "-c", &script]));
    let _ = holder.child.kill();
    let _ = holder.child.wait();
    assert_eq!(code, 0, "{stderr}");
    let r = gputrace_tests::report_json(&stdout);
    assert_eq!(r["tracer"]["processes_hidden"], true, "{:#}", r["tracer"]);
    assert_eq!(r["tracer"]["complete"], false);
    assert!(r["tracer"]["notes"].to_string().contains("hidepid"), "{:#}", r["tracer"]["notes"]);
    assert!(r["processes"].as_array().is_some_and(|p| p.iter().all(|p| p["pid"] != holder.pid)), "root's holder is invisible here");
}

#[test]
fn the_overhead_estimate_uses_trap_costs_measured_per_probe() {
    require_root();
    // The fake cuMemcpyDtoHAsync_v2 begins with a `mov` (single-stepped by the kernel),
    // cuStreamSynchronize with a `push` (emulated): the report must tell them apart.
    let (code, stdout, stderr) =
        output(gt().args(["run", "--json", "--nvml-hz", "0", "--"]).arg(fakejob()).args(["--steps", "500", "--item", "1"]));
    assert_eq!(code, 0, "{stderr}");
    let r = gputrace_tests::report_json(&stdout);
    let o = &r["tracer"]["overhead"];
    assert_eq!(o["basis"], "measured", "{o:#}");
    let probe = |symbol: &str| {
        o["per_probe"].as_array().expect("per_probe").iter().find(|p| p["symbol"] == symbol).cloned().unwrap_or_else(|| panic!("{symbol}: {o:#}"))
    };
    let (copy, sync) = (probe("cuMemcpyDtoHAsync_v2"), probe("cuStreamSynchronize"));
    assert_eq!(copy["entry"], "stepped");
    assert_eq!(sync["entry"], "push");
    assert_eq!(copy["hits"], 500);
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k}: {v:#}"));
    assert!(f(&o["measured"], "stepped_ns") > f(&o["measured"], "push_ns"), "a single-step costs more than an emulated push: {o:#}");
    assert!(f(&copy, "entry_ns") > f(&sync, "entry_ns"));
    assert!((f(&copy, "cost_s") - 500.0 * (f(&copy, "entry_ns") + f(&copy, "return_ns")) / 1e9).abs() < 1e-9);
    // The text report names the single-stepped probe.
    let (code, stdout, stderr) = output(gt().args(["run", "--nvml-hz", "0", "--"]).arg(fakejob()).args(["--steps", "500", "--item", "1"]));
    assert_eq!(code, 0, "{stderr}");
    // (Words compared without the wrapping.)
    let text = String::from_utf8_lossy(&stdout).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains("cuMemcpyDtoHAsync_v2 is single-stepped by the kernel"), "{text}");
}

/// Lines of the kernel log that say a uprobe was leaked (None where the log is unreadable).
fn leaked_uprobes() -> Option<usize> {
    let out = Command::new("dmesg").output().ok().filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains("leaking uprobe")).count())
}

#[test]
fn quick_runs_and_early_exits_leak_no_uprobe() {
    require_root();
    // Probes that gputrace puts on its own code (the return-probe check, the trap-cost
    // measurement) once were removed from a background thread; a process that exited first
    // left the kernel unable to unregister them ("failed to unregister, leaking uprobe"), and
    // the breakpoint stayed in the executable for every later run.
    let Some(before) = leaked_uprobes() else {
        eprintln!("the kernel log is not readable here; the leak check is skipped");
        return;
    };
    for _ in 0..5 {
        let (code, _, stderr) = output(gt().args(["attach", "--pid", "999999999"]));
        assert_eq!(code, 3, "{stderr}");
    }
    for _ in 0..3 {
        let (code, _, stderr) = output(gt().args(["run", "--json", "--nvml-hz", "0", "--"]).arg(fakejob()).args(["--steps", "20", "--item", "1"]));
        assert_eq!(code, 0, "{stderr}");
    }
    assert_eq!(leaked_uprobes(), Some(before), "the kernel leaked a uprobe");
}

#[test]
fn a_gpu_holder_with_a_name_that_is_not_utf8_is_still_named_by_the_sweep() {
    require_root();
    let dir = scratch("sweep-name");
    let link = dir.join(OsStr::from_bytes(b"idle\xff"));
    symlink(fakejob(), &link).expect("link");
    let mut idle = Gated::start_as(&link, &["--hold-ms", "60000"]);
    idle.release();
    idle.wait_for("holding");
    let (r, code, stderr) = Tracer::sweep(&["--duration", "1"], None).report();
    let pid = idle.pid;
    let _ = idle.child.kill();
    let _ = idle.child.wait();
    assert_eq!(code, 0, "{stderr}");
    let row = r["processes"].as_array().expect("processes").iter().find(|p| p["pid"] == pid).cloned().unwrap_or_else(|| panic!("{r:#}"));
    assert_eq!(row["state"], "idle", "{row:#}");
    assert_eq!(row["user"], "root", "{row:#}");
    assert!(
        r["diagnoses"].as_array().expect("diagnoses").iter().any(|d| d["id"] == "idle-gpu-holder" && d["pid"] == pid),
        "a holder does not escape the sweep by its name: {r:#}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn attaching_to_pid_1_says_it_traces_the_whole_namespace() {
    require_root();
    let (code, stdout, stderr) = output(gt().args(["attach", "--pid", "1", "--duration", "0.5", "--json", "--nvml-hz", "0"]));
    assert_eq!(code, 0, "{stderr}");
    let r = gputrace_tests::report_json(&stdout);
    assert!(r["tracer"]["notes"].to_string().contains("pid 1 is the init process"), "{:#}", r["tracer"]["notes"]);
}

#[test]
fn a_recorder_killed_while_starting_leaves_no_hidden_file() {
    require_root();
    let dir = scratch("killed-early");
    let file = dir.join("r.gtr");
    // SIGKILL 20–130 ms after start: while the probes load, before the recording is put in
    // place (a hidden temporary file was left there), and a little after. Each round waits out
    // the kernel's teardown of a killed tracer (~2 s): CI takes every third moment, `--long`
    // all twelve.
    let step = if gputrace_tests::long() { 1 } else { 3 };
    for round in (0..12u64).step_by(step) {
        let mut recorder = gt()
            .args(["record", "--nvml-hz", "0", "-o"])
            .arg(&file)
            .arg("--")
            .arg(fakejob())
            .args(["--steps", "20", "--driver-launches", "2"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gputrace record starts");
        std::thread::sleep(Duration::from_millis(20 + round * 10));
        let _ = recorder.kill();
        let _ = recorder.wait();
        let hidden: Vec<OsString> = entries(&dir).into_iter().filter(|n| n.as_bytes().starts_with(b".")).collect();
        assert!(hidden.is_empty(), "round {round}: a killed recorder left {hidden:?}");
        let _ = fs::remove_file(&file);
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn an_export_to_a_fifo_with_no_reader_says_it_waits_for_one() {
    use std::io::BufRead as _;
    require_root();
    let dir = scratch("fifo-wait");
    let rec = dir.join("job.gtr");
    recording(&rec);
    let fifo = dir.join("page");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut export =
        gt().arg("export").arg(&rec).arg("--html").arg(&fifo).stdin(Stdio::null()).stderr(Stdio::piped()).spawn().expect("export starts");
    let stderr = export.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let hint = rx.recv_timeout(Duration::from_secs(10));
    // Whatever was said, a reader lets the export finish.
    let mut page = String::new();
    fs::File::open(&fifo).expect("open the fifo").read_to_string(&mut page).expect("read");
    assert!(export.wait().expect("export exits").success());
    let hint = hint.unwrap_or_else(|_| panic!("no word on stderr while it waited for a reader"));
    assert!(hint.contains("no reader") && hint.contains(&fifo.display().to_string()), "{hint}");
    assert!(page.contains("<html"), "the page went through the FIFO");
    let _ = fs::remove_dir_all(&dir);
}
