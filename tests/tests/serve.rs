//! `gputrace serve` against the fake CUDA and the fake NVML: an idle holder (its 64 MiB are
//! what the fake NVML lists) and a busy job with two forked children that sleep (DataLoader
//! workers). Scraped over HTTP, parsed by an OpenMetrics parser, compared with a JSON sweep
//! of the same host; and the server's conduct towards bad clients and bad arguments.
#![allow(clippy::float_cmp, reason = "the values compared are whole numbers of bytes, counts and 0/1, exact in an f64")]
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use gputrace_tests::{fakejob, gputrace, require_root, FakeNvml, Gated};
use openmetrics_parser::{MetricsExposition, OpenMetricsType, OpenMetricsValue};
use serde_json::Value;

/// Connections the server lets one client hold at once (`serve::clients::MAX_PER_CLIENT`).
const PER_CLIENT: usize = gputrace::serve::clients::MAX_PER_CLIENT;

/// One scrape: the exposition parsed, and as it was sent.
struct Scraped {
    parsed: MetricsExposition<OpenMetricsType, OpenMetricsValue>,
    text: String,
}

impl std::fmt::Display for Scraped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A running `gputrace -v serve`, and where it listens.
struct Server {
    child: Child,
    addr: SocketAddr,
    stderr: mpsc::Receiver<String>,
}

impl Server {
    fn start(nvml: &FakeNvml, args: &[&str]) -> Self {
        Self::start_with(nvml, args, &[])
    }

    /// As [`Server::start`], with more environment (the fake NVML's knobs).
    fn start_with(nvml: &FakeNvml, args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Self {
        let mut command = Command::new(gputrace());
        nvml.apply(&mut command);
        command.envs(env.iter().copied());
        let mut child = command
            .args(["-v", "serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gputrace starts");
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = String::new();
        let addr = loop {
            let line = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).unwrap_or_else(|_| panic!("serve never said where it listens:\n{seen}"));
            if let Some(rest) = line.split("serving http://").nth(1) {
                break rest.split('/').next().expect("an address").parse().expect("an address");
            }
            seen.push_str(&line);
            seen.push('\n');
        };
        Self { child, addr, stderr: rx }
    }

    /// `GET path`: the status and the body.
    fn get(&self, path: &str) -> (u16, String, String) {
        request(self.addr, &format!("GET {path} HTTP/1.1\r\nHost: gputrace\r\nConnection: close\r\n\r\n"))
    }

    /// The next exposition that shows more than `sweeps` windows judged.
    fn metrics_after(&self, sweeps: f64) -> Scraped {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, head, body) = self.get("/metrics");
            if status == 200 {
                assert!(head.to_ascii_lowercase().contains("content-type: application/openmetrics-text"), "{head}");
                let parsed = openmetrics_parser::openmetrics::parse_openmetrics(&body).unwrap_or_else(|e| panic!("not OpenMetrics ({e:?}):\n{body}"));
                let scraped = Scraped { parsed, text: body };
                if value(&scraped, "gputrace_sweeps", &[]) > sweeps {
                    return scraped;
                }
            } else {
                assert_eq!(status, 503, "{head}\n{body}");
            }
            assert!(Instant::now() < deadline, "no new window in 30 s: the last answer was {status}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn stop(mut self) -> (i32, String) {
        // SAFETY: sending a signal has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().expect("serve exits");
        // Until the reader thread has seen the pipe close: every line the server wrote.
        (status.code().unwrap_or(-1), self.stderr.iter().collect::<Vec<_>>().join("\n"))
    }
}

/// One HTTP/1.1 exchange: the status, the head and the body.
fn request(addr: SocketAddr, text: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream.set_read_timeout(Some(Duration::from_secs(20))).expect("a timeout");
    stream.write_all(text.as_bytes()).expect("request sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

/// The value of the sample of `family` whose labels include `labels`; panics if none.
fn value(m: &Scraped, family: &str, labels: &[(&str, &str)]) -> f64 {
    sample(m, family, labels).unwrap_or_else(|| panic!("no {family} {labels:?} in:\n{m}"))
}

fn sample(m: &Scraped, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    m.parsed.families.get(family)?.iter_samples().find_map(|s| {
        let set = s.get_labelset().ok()?;
        labels.iter().all(|(k, v)| set.get_label_value(k) == Some(*v)).then(|| match &s.value {
            OpenMetricsValue::Gauge(v) | OpenMetricsValue::Unknown(v) => v.as_f64(),
            OpenMetricsValue::Counter(c) => c.value.as_f64(),
            other => panic!("{family}: unexpected {other:?}"),
        })
    })
}

fn kill(mut job: Gated) {
    let _ = job.child.kill();
    let _ = job.child.wait();
}

#[test]
fn serve_is_scraped_twice_and_agrees_with_the_sweep() {
    require_root();
    let nvml = FakeNvml::new();
    // The idle holder writes the fake GPU's ledger: NVML lists it with its 64 MiB.
    let mut idle = {
        let mut c = Command::new(fakejob());
        nvml.apply(&mut c);
        Gated::spawn(c.args(["--gate", "--hold-ms", "120000"]))
    };
    idle.release();
    idle.wait_for("holding");
    let mut busy = Gated::start(&["--idle-children", "2", "--steps", "200000", "--driver-launches", "10", "--kernel-us", "100", "--sync"]);
    busy.release();
    // A job fed by a worker process through a pipe: input-starved.
    let mut fed = Gated::start(&["--steps", "1000000", "--driver-launches", "5", "--pipe-worker-us", "2000"]);
    fed.release();

    let server = Server::start(&nvml, &["--interval", "2"]);
    let first = server.metrics_after(0.0);
    let second = server.metrics_after(value(&first, "gputrace_sweeps", &[]));
    let (idle_pid_n, busy_pid_n) = (idle.pid, busy.pid);
    let (idle_pid, busy_pid) = (idle_pid_n.to_string(), busy_pid_n.to_string());

    // A JSON sweep of the same host meanwhile: the same judgement.
    let mut sweep = Command::new(gputrace());
    nvml.apply(&mut sweep);
    let out = sweep.args(["sweep", "--json", "--duration", "2"]).output().expect("sweep runs");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let third = server.metrics_after(value(&second, "gputrace_sweeps", &[]));
    let children: Vec<String> = json["processes"].as_array().expect("rows").iter().filter(|p| p["worker_of"] == busy.pid).map(|p| p["pid"].to_string()).collect();
    let fed_pid = fed.pid.to_string();
    kill(fed);
    kill(busy);
    kill(idle);
    let (code, stderr) = server.stop();
    assert_eq!(code, 0, "serve ends cleanly on SIGTERM: {stderr}");

    let row = |pid: u32| json["processes"].as_array().expect("rows").iter().find(|p| p["pid"] == pid).unwrap_or_else(|| panic!("{pid}: {json:#}")).clone();
    assert_eq!(row(idle_pid_n)["state"], "idle", "{json:#}");
    assert_eq!(row(busy_pid_n)["state"], "active", "{json:#}");
    assert_eq!(children.len(), 2, "the busy job's two children are its workers: {json:#}");
    let held = row(idle_pid_n)["gpu_memory_bytes"].as_f64().expect("NVML lists the idle holder");
    assert_eq!(held, f64::from(64 << 20));

    for m in [&second, &third] {
        // The contract's names, each with the sweep's values.
        assert_eq!(value(m, "gputrace_process_active", &[("pid", &busy_pid), ("state", "active")]), 1.0, "{m}");
        assert_eq!(value(m, "gputrace_process_active", &[("pid", &idle_pid), ("state", "idle")]), 0.0, "{m}");
        assert_eq!(value(m, "gputrace_idle_gpu_holder_bytes", &[("pid", &idle_pid), ("user", "root"), ("command", "fakejob")]), held, "{m}");
        assert_eq!(value(m, "gputrace_process_gpu_memory_bytes", &[("pid", &idle_pid), ("gpu", "0")]), held, "{m}");
        assert!(sample(m, "gputrace_idle_gpu_holder_bytes", &[("pid", &busy_pid)]).is_none(), "the busy job is no idle holder: {m}");
        for child in &children {
            assert!(sample(m, "gputrace_idle_gpu_holder_bytes", &[("pid", child)]).is_none(), "a sleeping worker is no idle holder: {m}");
        }
        // The fake GPU ran nothing of the idle holder's, and the fake NVML says so.
        assert_eq!(value(m, "gputrace_gpu_utilization_ratio", &[("gpu", "0")]), 0.0, "{m}");
        let used = json["gpu"]["devices"][0]["memory_used_bytes"].as_f64().expect("NVML's memory");
        assert_eq!(value(m, "gputrace_gpu_memory_used_bytes", &[("gpu", "0")]), used, "{m}");
        let launches = value(m, "gputrace_process_kernel_launches_per_second", &[("pid", &busy_pid)]);
        assert!(launches > 100.0, "the busy job launches ~9,000 kernels a second: {launches}");
        assert_eq!(value(m, "gputrace_lost_events", &[]), 0.0, "{m}");
        let window = value(m, "gputrace_sweep_duration_seconds", &[]);
        assert!((1.9..3.0).contains(&window), "windows of --interval 2: {window}");
        assert_eq!(value(m, "gputrace_cuda_probes", &[]), 1.0);
        // Each job's judgement: the busy one waits for its GPU, the fed one for its input; the
        // idle holder and the workers are not judged.
        assert_eq!(value(m, "gputrace_job_verdict", &[("pid", &busy_pid), ("verdict", "gpu-bound")]), 1.0, "{m}");
        assert_eq!(value(m, "gputrace_job_verdict", &[("pid", &fed_pid), ("verdict", "input-starved")]), 1.0, "{m}");
        assert!(value(m, "gputrace_job_diagnosis_ratio", &[("pid", &fed_pid), ("id", "input-starved")]) > 0.5, "{m}");
        assert!(value(m, "gputrace_job_time_ratio", &[("pid", &busy_pid), ("part", "waiting_on_gpu")]) > 0.5, "{m}");
        for pid in children.iter().chain([&idle_pid]) {
            assert!(sample(m, "gputrace_job_verdict", &[("pid", pid)]).is_none(), "{pid} is no job: {m}");
        }
    }
    // The JSON sweep judged them alike.
    assert_eq!(row(busy_pid_n)["judgement"]["verdict"], "gpu-bound", "{json:#}");
    let fed_row = row(fed_pid.parse().expect("a pid"));
    assert_eq!(fed_row["judgement"]["verdict"], "input-starved", "{json:#}");
    assert!(fed_row["judgement"]["diagnoses"][0]["ratio"].as_f64() > Some(0.5), "{json:#}");
    // Counters only grow; each scrape saw a new window.
    assert!(value(&third, "gputrace_sweeps", &[]) > value(&second, "gputrace_sweeps", &[]));
    assert!(value(&third, "gputrace_probe_hits", &[]) > value(&second, "gputrace_probe_hits", &[]));
}

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
    kill(job);
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
    kill(job);
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
