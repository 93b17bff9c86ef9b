//! The HTML page of a recording (`export --html`), opened in headless Chromium as a user
//! would: it must show something (a screenshot that is not blank), hold the verdict, the
//! timeline and a flamegraph naming the planted function, run its script under its own
//! Content-Security-Policy, and make no network request.
//!
//! Chromium comes from Debian's package (`cargo xtask test` installs it); the browser's own
//! background traffic is told apart from the page's by the request's initiator, and a control
//! page that does make a request proves the check can see one.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use gputrace_tests::{gputrace, record_fakejob, report_json, require_root};

fn scratch(name: &str) -> gputrace_tests::Scratch {
    gputrace_tests::scratch("html", name)
}

fn chromium() -> PathBuf {
    let path = std::env::var_os("GPUTRACE_CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    assert!(path.exists(), "{} is missing: `apt-get install chromium` (cargo xtask test does it)", path.display());
    path
}

/// Chromium, headless and quiet (no sync, no component updates), in a fresh profile.
fn browser(dir: &Path, page: &Path, extra: &[&str]) -> std::process::Output {
    let profile = dir.join(format!("profile-{}", extra.len()));
    Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1300,2400",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs")
}

/// The URLs the page itself asked for (not the browser's own background requests, whose
/// initiator is "not an origin"), from a net log.
fn page_requests(net_log: &Path) -> Vec<String> {
    let log: serde_json::Value = serde_json::from_slice(&std::fs::read(net_log).expect("net log written")).expect("net log is JSON");
    let start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"].as_u64().expect("event type known");
    log["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"].as_u64() == Some(start_job))
        .filter(|e| e["params"]["initiator"].as_str() != Some("not an origin"))
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_owned))
        .filter(|url| !url.starts_with("file:") && !url.starts_with("data:"))
        .collect()
}

/// Shares of the screenshot's pixels that are not white, and how many distinct colours.
fn ink(png_file: &Path) -> (f64, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png_file).expect("screenshot written")));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("a frame");
    let channels = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(channels).collect();
    let inked = pixels.iter().filter(|p| p.iter().take(3).any(|&c| c < 0xf0)).count();
    let colours: std::collections::BTreeSet<&[u8]> = pixels.iter().copied().collect();
    (inked as f64 / pixels.len() as f64, colours.len())
}

#[test]
fn the_page_shows_the_verdict_the_timeline_and_a_flamegraph_and_asks_no_server() {
    require_root();
    let dir = scratch("page");
    // A scalar read back every step: host-sync, charged to read_scalar (as in sites.rs).
    let recording = record_fakejob(&dir, &["--steps", "200", "--driver-launches", "20", "--kernel-us", "150", "--item", "1", "--host-us", "2000"]);
    let page = dir.join("job.html");
    let out = Command::new(gputrace()).args(["report", "--json", "--html"]).arg(&page).arg(&recording).output().expect("report runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report = report_json(&out.stdout);
    let verdict = report["verdict"].as_str().expect("verdict");
    let html = std::fs::read_to_string(&page).expect("page written");

    // The file itself: the verdict, a diagnosis with its flamegraph naming the planted
    // function, the timeline's lanes, nothing that points off the page.
    assert!(html.contains(&format!("VERDICT: {verdict}")), "verdict {verdict} not on the page");
    assert!(report["diagnoses"].as_array().expect("diagnoses").iter().any(|d| d["id"] == "host-sync"), "{:#}", report["diagnoses"]);
    let flamegraph = html.split(r#"<img alt="flamegraph of host-sync" src=""#).nth(1).expect("a flamegraph of host-sync");
    let flamegraph = &flamegraph[..flamegraph.find('"').expect("the image ends")];
    assert!(flamegraph.starts_with("data:image/svg+xml"), "the flamegraph is inline");
    assert!(flamegraph.contains("in read_scalar"), "the flamegraph names the planted function");
    assert!(html.matches(r#"<svg class="lane""#).count() >= 4, "the timeline has its lanes");
    assert!(html.contains("default-src 'none'"), "the page forbids every request");
    for attr in ["src=\"http", "href=\"http", "src=\"//", "@import"] {
        assert!(!html.contains(attr), "the page refers elsewhere: {attr}");
    }
    // CSS and SVG `url(…)`: only to fragments of the same document (a gradient).
    for (at, _) in html.match_indices("url(") {
        let target = &html[at + 4..];
        assert!(target.starts_with('#') || target.starts_with("%23"), "the page refers elsewhere: {}", &target[..target.len().min(40)]);
    }
    assert!(html.len() < 2 << 20, "a one-second recording's page is small: {} bytes", html.len());

    // In the browser: the script ran (it draws the time axis), something is drawn, and the
    // page made no request.
    let dom = browser(&dir, &page, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("<div id=\"ticks\"><b"), "the page's script did not run under its policy");
    assert!(dom.contains(&format!("VERDICT: {verdict}")));
    let shot = dir.join("page.png");
    let net_log = dir.join("net.json");
    let shown = browser(&dir, &page, &[&format!("--screenshot={}", shot.display()), &format!("--log-net-log={}", net_log.display())]);
    assert!(shot.exists(), "no screenshot: {}", String::from_utf8_lossy(&shown.stderr));
    let (inked, colours) = ink(&shot);
    assert!(inked > 0.05 && colours > 50, "the screenshot is blank: {:.1}% inked, {colours} colours", inked * 100.0);
    let requests = page_requests(&net_log);
    assert!(requests.is_empty(), "the page made requests: {requests:?}");

    // The control: a page that does ask for something is seen asking.
    let control = dir.join("control.html");
    std::fs::write(&control, r#"<!DOCTYPE html><img src="http://127.0.0.1:9/probe.png">"#).expect("control page");
    let control_log = dir.join("control-net.json");
    browser(&dir, &control, &[&format!("--screenshot={}", dir.join("control.png").display()), &format!("--log-net-log={}", control_log.display())]);
    assert_eq!(page_requests(&control_log), vec!["http://127.0.0.1:9/probe.png".to_owned()], "the request check sees nothing");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn html_and_perfetto_at_once_and_refusals() {
    require_root();
    let dir = scratch("both");
    let recording = record_fakejob(&dir, &["--steps", "50", "--driver-launches", "10", "--sync"]);
    let (json, page) = (dir.join("t.json"), dir.join("t.html"));
    let out = Command::new(gputrace()).arg("export").arg(&recording).arg("--perfetto").arg(&json).arg("--html").arg(&page).output().expect("export runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(json.exists() && page.exists());
    // Neither kept file is replaced without --force, and nothing is written then.
    let before = std::fs::read(&page).expect("page");
    let out = Command::new(gputrace()).arg("export").arg(&recording).arg("--html").arg(&page).output().expect("export runs");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&page).expect("page"), before);
    // The recording is never an output, even with --force.
    let out = Command::new(gputrace()).arg("export").arg(&recording).arg("--html").arg(&recording).arg("--force").output().expect("export runs");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    // Two outputs to one place are refused.
    let out = Command::new(gputrace()).arg("export").arg(&recording).args(["--html", "-", "--perfetto", "-"]).output().expect("export runs");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    // Export needs a format.
    let out = Command::new(gputrace()).arg("export").arg(&recording).output().expect("export runs");
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_refuses_to_mix_the_page_with_its_report_on_stdout() {
    require_root();
    let dir = scratch("mix");
    let recording = record_fakejob(&dir, &["--steps", "20", "--driver-launches", "2", "--sync"]);
    for json in [false, true] {
        let mut cmd = Command::new(gputrace());
        cmd.arg("report").arg(&recording).args(["--html", "-"]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().expect("report runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "json {json}: {stderr}");
        assert!(out.stdout.is_empty(), "json {json}: nothing written to stdout");
        assert!(stderr.contains("export FILE --html -"), "json {json}: the message says what to do: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
