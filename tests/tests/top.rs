//! `gputrace top` against fake-CUDA processes: an idle holder and a busy job with two forked
//! children that sleep. On a terminal (a pseudo-terminal made by `script`) it draws and `q`
//! ends it, with the terminal given back; through a pipe it prints each window as text.
use std::{
    io::{Read, Write},
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use gputrace_tests::{fakejob, gputrace, require_root, Gated};

/// Read `from` on a thread; the chunks come through the channel.
fn reader(mut from: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || tx.send(String::from_utf8_lossy(&buf[..n]).into_owned()).is_err() {
                return;
            }
        }
    });
    rx
}

/// What `rx` sent until `done` says enough, or 30 s.
fn read_until(rx: &mpsc::Receiver<String>, seen: &mut String, done: impl Fn(&str) -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(seen) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(chunk) => seen.push_str(&chunk),
            Err(_) => return false,
        }
    }
    true
}

fn jobs() -> (Gated, Gated) {
    let mut idle = Gated::start(&["--hold-ms", "60000"]);
    idle.release();
    idle.wait_for("holding");
    let mut busy = Gated::start(&["--idle-children", "2", "--steps", "100000", "--driver-launches", "10", "--kernel-us", "100", "--sync"]);
    busy.release();
    (idle, busy)
}

#[test]
fn through_a_pipe_each_window_is_text_with_workers_folded() {
    require_root();
    let (idle, busy) = jobs();
    let mut top = Command::new(gputrace()).args(["top", "--interval", "1"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("top starts");
    let rx = reader(top.stdout.take().expect("piped"));
    let mut seen = String::new();
    // Two windows: the second has seen the busy job launch for a whole second.
    let two = read_until(&rx, &mut seen, |s| s.matches("gputrace top — window").count() >= 3);
    // SAFETY: sending a signal has no memory-safety preconditions.
    unsafe { libc::kill(top.id() as i32, libc::SIGTERM) };
    let status = top.wait().expect("top exits");
    let (idle_pid, busy_pid) = (idle.pid, busy.pid);
    let children: Vec<u32> = std::fs::read_to_string(format!("/proc/{busy_pid}/task/{busy_pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    idle.stop();
    busy.stop();
    assert!(two, "no second window in 30 s:\n{seen}");
    assert_eq!(status.code(), Some(0), "{seen}");
    let frame = seen.split("gputrace top — window").nth(2).expect("a second frame");
    assert!(!frame.contains('\u{1b}'), "plain text, no escape sequences: {frame:?}");
    let row = |pid: u32| frame.lines().find(|l| l.trim_start().starts_with(&format!("{pid} "))).unwrap_or_else(|| panic!("no row for {pid}:\n{frame}")).to_owned();
    let idle_row = row(idle_pid);
    assert!(idle_row.contains("idle") && idle_row.contains("idle-gpu-holder"), "{idle_row}");
    let busy_row = row(busy_pid);
    assert!(busy_row.contains("active") && busy_row.contains(" +2 "), "{busy_row}");
    assert!(!busy_row.contains("idle-gpu-holder"), "{busy_row}");
    // The workers are folded: no row of their own.
    assert_eq!(children.len(), 2, "{children:?}");
    for child in &children {
        assert!(!frame.lines().any(|l| l.trim_start().starts_with(&format!("{child} "))), "worker {child} has a row:\n{frame}");
    }
}

#[test]
fn a_command_named_with_escapes_reaches_the_text_cleaned() {
    use std::os::unix::ffi::OsStrExt;
    require_root();
    let dir = gputrace_tests::scratch("top", "esc");
    // A program whose name retitles the window and clears the screen, were it printed raw.
    let link = dir.join(std::ffi::OsStr::from_bytes(b"job\x1b]0;pwned\x07\x1b[2J"));
    std::os::unix::fs::symlink(fakejob(), &link).expect("a link");
    let mut job = Gated::start_as(&link, &["--steps", "100000000", "--driver-launches", "10", "--kernel-us", "100", "--sync"]);
    job.release();
    let mut top = Command::new(gputrace()).args(["top", "--interval", "1"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("top starts");
    let rx = reader(top.stdout.take().expect("piped"));
    let mut seen = String::new();
    // This job's row, by its pid: `top` shows every GPU process of the host, and a suite
    // beside this one may run a job of such a name too (`terminal`).
    let job_pid = job.pid;
    let is_row = |l: &str| l.trim_start().starts_with(&format!("{job_pid} ")) && l.contains("pwned");
    let shown = read_until(&rx, &mut seen, |s| s.lines().any(is_row) && s.matches("gputrace top — window").count() >= 2);
    // SAFETY: sending a signal has no memory-safety preconditions.
    unsafe { libc::kill(top.id() as i32, libc::SIGTERM) };
    let status = top.wait().expect("top exits");
    job.stop();
    assert!(shown, "the job's row never came:\n{seen}");
    assert_eq!(status.code(), Some(0), "{seen}");
    assert!(!seen.chars().any(|c| c.is_control() && c != '\n'), "a control character reached the text: {seen:?}");
    let row = seen.lines().find(|l| is_row(l)).expect("the row");
    assert!(row.contains("job?]0;pwned??[2J"), "{row}");
}

#[test]
fn on_a_terminal_it_draws_and_q_quits() {
    require_root();
    let (idle, busy) = jobs();
    // `script` gives top a pseudo-terminal of 40 × 160 and passes our keys to it.
    let command = format!("stty rows 40 cols 160; exec {} top --interval 1", gputrace().display());
    let mut script = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script starts");
    let rx = reader(script.stdout.take().expect("piped"));
    let mut seen = String::new();
    // The screen is written by cursor moves, word by word: look for words.
    let drawn = read_until(&rx, &mut seen, |s| s.contains("processes") && s.contains("idle-gpu-holder"));
    script.stdin.as_mut().expect("piped").write_all(b"l").expect("a key");
    let sorted = read_until(&rx, &mut seen, |s| s.contains("launches/s)"));
    script.stdin.as_mut().expect("piped").write_all(b"q").expect("q");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = script.try_wait().expect("waits") {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = script.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The rest of what it wrote, to the end.
    while let Ok(chunk) = rx.recv_timeout(Duration::from_secs(5)) {
        seen.push_str(&chunk);
    }
    idle.stop();
    busy.stop();
    assert!(drawn, "no frame in 30 s: {seen:?}");
    assert!(sorted, "the sort key did not redraw: {seen:?}");
    let status = status.unwrap_or_else(|| panic!("q did not end top in 10 s: {seen:?}"));
    assert_eq!(status.code(), Some(0), "{seen:?}");
    // The alternate screen was entered and left: the terminal is given back.
    assert!(seen.contains("\u{1b}[?1049h") && seen.contains("\u{1b}[?1049l") && seen.contains("\u{1b}[?25h"), "{seen:?}");
    // The screen's own figures say what NVML's absence means; no log line is drawn over it.
    assert!(!seen.contains("WARN"), "{seen:?}");
}

#[test]
fn a_too_short_interval_is_a_usage_error() {
    let out = Command::new(gputrace()).args(["top", "--interval", "100ms"]).output().expect("gputrace runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("too short"));
}
