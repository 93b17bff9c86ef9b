//! A client of `gputrace serve` for the suites that scrape it (`tests/tests/serve*.rs`): the
//! server started on a free loopback port with the fake NVML, its expositions parsed as
//! Prometheus parses them.
#![allow(clippy::float_cmp, reason = "the values compared are whole numbers of bytes, counts and 0/1, exact in an f64")]
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{SocketAddr, TcpStream},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use openmetrics_parser::{MetricsExposition, OpenMetricsType, OpenMetricsValue};

use crate::{gputrace, FakeNvml};

/// Connections the server lets one client hold at once (`serve::clients::MAX_PER_CLIENT`).
pub const PER_CLIENT: usize = gputrace::serve::clients::MAX_PER_CLIENT;

/// One scrape: the exposition parsed, and as it was sent.
#[derive(Debug)]
pub struct Scraped {
    /// The exposition, parsed.
    pub parsed: MetricsExposition<OpenMetricsType, OpenMetricsValue>,
    /// The exposition, as sent.
    pub text: String,
}

impl std::fmt::Display for Scraped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A running `gputrace -v serve`, and where it listens.
#[derive(Debug)]
pub struct Server {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    stderr: mpsc::Receiver<String>,
}

impl Server {
    /// `gputrace -v serve --listen 127.0.0.1:0 ARGS` with the fake NVML, once it says where it listens.
    #[must_use]
    pub fn start(nvml: &FakeNvml, args: &[&str]) -> Self {
        Self::start_with(nvml, args, &[])
    }

    /// As [`Server::start`], with more environment (the fake NVML's knobs).
    #[must_use]
    pub fn start_with(nvml: &FakeNvml, args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Self {
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
    #[must_use]
    pub fn get(&self, path: &str) -> (u16, String, String) {
        request(self.addr, &format!("GET {path} HTTP/1.1\r\nHost: gputrace\r\nConnection: close\r\n\r\n"))
    }

    /// The next exposition that shows more than `sweeps` windows judged.
    #[must_use]
    pub fn metrics_after(&self, sweeps: f64) -> Scraped {
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

    /// SIGTERM, then its exit code and every line it wrote to stderr.
    #[must_use]
    pub fn stop(mut self) -> (i32, String) {
        // SAFETY: sending a signal has no memory-safety preconditions.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().expect("serve exits");
        // Until the reader thread has seen the pipe close: every line the server wrote.
        (status.code().unwrap_or(-1), self.stderr.iter().collect::<Vec<_>>().join("\n"))
    }
}

/// One HTTP/1.1 exchange: the status, the head and the body.
#[must_use]
pub fn request(addr: SocketAddr, text: &str) -> (u16, String, String) {
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
#[must_use]
pub fn value(m: &Scraped, family: &str, labels: &[(&str, &str)]) -> f64 {
    sample(m, family, labels).unwrap_or_else(|| panic!("no {family} {labels:?} in:\n{m}"))
}

/// The value of the sample of `family` whose labels include `labels`, if there is one.
#[must_use]
pub fn sample(m: &Scraped, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    m.parsed.families.get(family)?.iter_samples().find_map(|s| {
        let set = s.get_labelset().ok()?;
        labels.iter().all(|(k, v)| set.get_label_value(k) == Some(*v)).then(|| match &s.value {
            OpenMetricsValue::Gauge(v) | OpenMetricsValue::Unknown(v) => v.as_f64(),
            OpenMetricsValue::Counter(c) => c.value.as_f64(),
            other => panic!("{family}: unexpected {other:?}"),
        })
    })
}
