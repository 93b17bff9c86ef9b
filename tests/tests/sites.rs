//! Diagnoses name the code that causes them: the fake job's named functions, from its
//! frame-pointer stacks (sampled on CPU, or taken as the thread went off it) and its DWARF
//! lines.
use gputrace_tests::{require_root, run_fakejob, run_fakejob_opts};
use serde_json::Value;

fn diagnosis<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["diagnoses"].as_array().expect("diagnoses").iter().find(|d| d["id"] == id).unwrap_or_else(|| panic!("no {id} in {:#}", r["diagnoses"]))
}

fn functions(d: &Value) -> Vec<&str> {
    d["sites"].as_array().expect("sites is a list").iter().map(|s| s["function"].as_str().expect("function")).collect()
}

#[test]
fn host_code_between_launches_is_charged_to_the_function_that_computes() {
    require_root();
    let (r, code, stderr) = run_fakejob(&["--steps", "60", "--driver-launches", "2", "--host-us", "20000", "--sync"]);
    assert_eq!(code, 0, "{stderr}");
    let d = diagnosis(&r, "host-bound");
    assert_eq!(functions(d).first(), Some(&"compute_on_host"), "{d:#}");
    let top = &d["sites"][0];
    assert!(top["file"].as_str().is_some_and(|f| f.ends_with("fakejob.c")), "{top:#}");
    assert!(top["line"].as_u64().is_some_and(|l| l > 0), "{top:#}");
    assert!(top["frame"].as_str().is_some_and(|f| f.contains("fakejob.c:") && f.ends_with("in compute_on_host")), "{top:#}");
    // ~1.2 s of host work, sampled at 99 Hz: the site holds most of it.
    assert!(top["share"].as_f64().is_some_and(|s| s > 0.8), "{top:#}");
    assert!(top["seconds"].as_f64().is_some_and(|s| s > 0.6), "{top:#}");
}

#[test]
fn a_scalar_read_is_charged_to_the_function_that_reads_it() {
    require_root();
    let (r, code, stderr) = run_fakejob(&["--steps", "200", "--driver-launches", "20", "--kernel-us", "150", "--item", "1", "--host-us", "2000"]);
    assert_eq!(code, 0, "{stderr}");
    let d = diagnosis(&r, "host-sync");
    assert_eq!(functions(d).first(), Some(&"read_scalar"), "{d:#}");
}

#[test]
fn no_stacks_means_no_sites() {
    require_root();
    let (r, code, stderr) = run_fakejob_opts(&["--no-stacks"], &["--steps", "60", "--driver-launches", "2", "--host-us", "20000", "--sync"]);
    assert_eq!(code, 0, "{stderr}");
    let d = diagnosis(&r, "host-bound");
    assert!(functions(d).is_empty(), "{d:#}");
}

#[test]
fn a_stripped_program_gets_addresses_and_a_report() {
    require_root();
    let dir = std::env::temp_dir().join(format!("gputrace-stripped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let stripped = dir.join("fakejob");
    let status = std::process::Command::new("strip").arg("-o").arg(&stripped).arg(gputrace_tests::fakejob()).status().expect("strip runs");
    assert!(status.success());
    let out = std::process::Command::new(gputrace_tests::gputrace())
        .env("LD_LIBRARY_PATH", gputrace_tests::fake_cuda_dir())
        .args(["run", "--json", "--"])
        .arg(&stripped)
        .args(["--steps", "40", "--driver-launches", "2", "--host-us", "20000", "--sync", "--lib-dir"])
        .arg(gputrace_tests::fake_cuda_dir())
        .output()
        .expect("gputrace runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = gputrace_tests::report_json(&out.stdout);
    let d = diagnosis(&r, "host-bound");
    // No symbol names the spinning function: the site is whatever the stripped file still
    // names (its dynamic symbols) or an address, never the function's real name.
    assert!(!functions(d).contains(&"compute_on_host"), "{d:#}");
}

#[test]
fn a_recording_keeps_the_sites_for_the_report_made_later() {
    require_root();
    let r = gputrace_tests::record_then_report("sites-rec", &["--steps", "200", "--driver-launches", "20", "--kernel-us", "150", "--item", "1", "--host-us", "2000"]);
    assert_eq!(functions(diagnosis(&r, "host-sync")).first(), Some(&"read_scalar"), "{:#}", r["diagnoses"]);
}
