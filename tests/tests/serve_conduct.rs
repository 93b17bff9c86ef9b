//! `gputrace serve`'s conduct, which no judgement of time enters: a GPU lost and found again,
//! names that are not UTF-8 or that try to forge a series, bad clients, bad arguments. Beside
//! other suites (`xtask/src/suites.rs`); the judgements are `serve.rs`.
#![allow(clippy::float_cmp, reason = "the values compared are whole numbers of bytes, counts and 0/1, exact in an f64")]
use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    process::Command,
    time::{Duration, Instant},
};

use gputrace_tests::{
    fakejob, gputrace,
    metrics_server::{request, sample, value, Server, PER_CLIENT},
    require_root, FakeNvml, Gated,
};

#[test]
fn a_gpu_lost_mid_run_and_a_command_that_is_not_utf8_leave_it_serving() {
    use std::os::unix::ffi::OsStrExt;
    require_root();
    let nvml = FakeNvml::new();
    let dir = gputrace_tests::scratch("serve", "lost");
    // The fake NVML fails every device call with "GPU is lost" while this file exists.
    let lost = dir.join("gpu-lost");
    // A job whose program name is not UTF-8 (a link to the fakejob named so).
    let link = dir.join(std::ffi::OsStr::from_bytes(b"job-\xff\xfe"));
    std::os::unix::fs::symlink(fakejob(), &link).expect("a link");
    let mut job = Gated::start_as(&link, &["--steps", "100000000", "--driver-launches", "10", "--kernel-us", "100", "--sync"]);
    job.release();
    let pid = job.pid.to_string();
    let server = Server::start_with(&nvml, &["--interval", "1"], &[("FAKE_NVML_GONE", lost.as_os_str())]);
    let before = server.metrics_after(0.0);
    assert!(sample(&before, "gputrace_gpu_memory_total_bytes", &[("gpu", "0")]).is_some(), "{before}");
    std::fs::write(&lost, b"").expect("the GPU is lost");
    // A window that began before the loss may still hold readings: two windows on.
    let gone = server.metrics_after(value(&before, "gputrace_sweeps", &[]) + 1.0);
    std::fs::remove_file(&lost).expect("the GPU is back");
    let back = server.metrics_after(value(&gone, "gputrace_sweeps", &[]) + 1.0);
    job.stop();
    let (code, stderr) = server.stop();
    assert_eq!(code, 0, "serve outlived the lost GPU and ended cleanly on SIGTERM: {stderr}");
    assert!(sample(&gone, "gputrace_gpu_memory_total_bytes", &[("gpu", "0")]).is_none(), "no figure from a lost GPU: {gone}");
    assert!(sample(&back, "gputrace_gpu_memory_total_bytes", &[("gpu", "0")]).is_some(), "NVML is asked again each window: {back}");
    for m in [&before, &gone, &back] {
        // The job is still seen through its CUDA calls; its name comes out as valid text.
        assert_eq!(value(m, "gputrace_process_active", &[("pid", &pid), ("state", "active")]), 1.0, "{m}");
        let command = m.text.lines().find(|l| l.starts_with("gputrace_process_active{") && l.contains(&format!("pid=\"{pid}\""))).expect("its series");
        assert!(command.contains("command=\"job-\u{fffd}\u{fffd}\""), "{command}");
    }
    assert!(stderr.contains("NVML cannot reach GPU 0: device fell off the bus") && stderr.contains("NVML reaches every GPU again"), "the loss and the return are said: {stderr}");
}

#[test]
fn quotes_backslashes_and_newlines_in_a_command_cannot_break_or_forge_the_exposition() {
    use std::os::unix::ffi::OsStrExt;
    require_root();
    let nvml = FakeNvml::new();
    let dir = gputrace_tests::scratch("serve", "quoted");
    // A program whose name holds a quote, a backslash and a line that looks like a series.
    let link = dir.join(std::ffi::OsStr::from_bytes(b"job\"q\\b\ngputrace_sweeps_total 999"));
    std::os::unix::fs::symlink(fakejob(), &link).expect("a link");
    let mut job = Gated::start_as(&link, &["--steps", "100000000", "--driver-launches", "10", "--kernel-us", "100", "--sync"]);
    job.release();
    let pid = job.pid.to_string();
    // On the loopback address, --full-command needs no second flag.
    let server = Server::start(&nvml, &["--interval", "1", "--full-command"]);
    // Parsed as Prometheus would: the old exposition failed here at the quote.
    let m = server.metrics_after(0.0);
    job.stop();
    let (code, stderr) = server.stop();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(value(&m, "gputrace_process_active", &[("pid", &pid), ("state", "active")]), 1.0, "{m}");
    let series = m.text.lines().find(|l| l.starts_with("gputrace_process_active{") && l.contains(&format!("pid=\"{pid}\""))).expect("its series");
    assert!(series.contains(r#"job\"q\\b\ngputrace_sweeps_total 999"#), "{series}");
    assert_eq!(m.text.lines().filter(|l| l.starts_with("gputrace_sweeps_total ")).count(), 1, "a forged series:\n{m}");
}

/// A TCP connection to `to` from the local address `from` (another loopback address stands
/// for another client).
fn connect_from(from: std::net::Ipv4Addr, to: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(to) = to else { panic!("an IPv4 server") };
    let address = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(ip).to_be() },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a plain socket call; its descriptor is checked, then owned by the TcpStream.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is ours and open; the TcpStream closes it on every way out below.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    let (local, remote) = (address(from, 0), address(*to.ip(), to.port()));
    // SAFETY: both addresses are valid sockaddr_in values of `len` bytes that outlive the calls.
    let bound = unsafe { libc::bind(fd, std::ptr::from_ref(&local).cast(), len) };
    assert_eq!(bound, 0, "bind {from}: {}", std::io::Error::last_os_error());
    // SAFETY: as above.
    let connected = unsafe { libc::connect(fd, std::ptr::from_ref(&remote).cast(), len) };
    assert_eq!(connected, 0, "connect {to}: {}", std::io::Error::last_os_error());
    stream
}

#[test]
fn bad_clients_do_not_stop_the_server() {
    require_root();
    let nvml = FakeNvml::new();
    let server = Server::start(&nvml, &["--interval", "1"]);
    let _ = server.metrics_after(0.0);
    // Another client (127.0.0.2): one that connects and says nothing, one that sends half a
    // request, one that asks and never reads, and more that say nothing, up to its share.
    let other = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let mut held = vec![connect_from(other, server.addr)];
    let mut half = connect_from(other, server.addr);
    half.write_all(b"GET /metr").expect("sent");
    let mut unread = connect_from(other, server.addr);
    unread.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").expect("sent");
    held.extend([half, unread]);
    while held.len() < PER_CLIENT {
        held.push(connect_from(other, server.addr));
    }
    // One more from it is refused at once, and says why.
    let mut refused = String::new();
    let mut over = connect_from(other, server.addr);
    over.set_read_timeout(Some(Duration::from_secs(2))).expect("a timeout");
    let _ = over.read_to_string(&mut refused);
    assert!(refused.starts_with("HTTP/1.1 503") && refused.contains("from your address"), "{refused:?}");
    // Meanwhile this client's 100 scrapes, four at a time, are all answered.
    let addr = server.addr;
    let scrapes: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(move || (0..25).map(|_| request(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").0).collect::<Vec<u16>>()))
        .collect();
    let statuses: Vec<u16> = scrapes.into_iter().flat_map(|t| t.join().expect("scrapes")).collect();
    assert_eq!(statuses.len(), 100);
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(server.get("/nothing").0, 404);
    assert_eq!(request(server.addr, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").0, 405);
    // The held connections are cut when idle: the other client gets its share back.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        let mut again = connect_from(other, server.addr);
        again.set_read_timeout(Some(Duration::from_secs(20))).expect("a timeout");
        again.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("sent");
        let mut answer = String::new();
        let _ = again.read_to_string(&mut answer);
        let status = answer.split_whitespace().nth(1).unwrap_or_default().to_owned();
        // A refusal may also come as a reset (the request met a closed socket): try again.
        if status == "200" || Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(status, "200", "the idle connections were never cut");
    drop(held);
    let (code, stderr) = server.stop();
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn whole_command_lines_reach_the_network_only_when_said_twice() {
    let out = Command::new(gputrace()).args(["serve", "--listen", "0.0.0.0:0", "--full-command"]).output().expect("gputrace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--publish-full-command-to-network") && stderr.contains("loopback"), "{stderr}");
}

#[test]
fn bad_addresses_and_intervals_are_usage_errors() {
    let run = |args: &[&str]| {
        let out = Command::new(gputrace()).arg("serve").args(args).output().expect("gputrace runs");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, stderr) = run(&["--listen", "nowhere"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("IP:PORT"), "{stderr}");
    let (code, stderr) = run(&["--interval", "0.2"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("too short"), "{stderr}");
    // A port in use: said before anything is loaded.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().expect("bound").to_string();
    let (code, stderr) = run(&["--listen", &port]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("cannot listen on {port}")) && stderr.contains("in use"), "{stderr}");
}
