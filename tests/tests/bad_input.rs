//! Bad input: clear messages and documented exit codes, never a panic.
use std::process::Command;

use gputrace_tests::{gputrace, require_root};

fn gputrace_output(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(gputrace()).args(args).output().expect("gputrace runs");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn a_pid_that_does_not_exist() {
    require_root();
    let (code, stdout, stderr) = gputrace_output(&["attach", "--pid", "999999999"]);
    assert_eq!(code, 3, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("no process with pid 999999999"), "{stderr}");
    assert!(!stderr.contains("panicked"));
}

#[test]
fn not_root_names_the_missing_capabilities() {
    require_root();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(gputrace())
        .args(["attach", "--pid", "1", "--duration", "1"])
        .output()
        .expect("setpriv runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("CAP_BPF") && stderr.contains("CAP_PERFMON"), "{stderr}");
}

#[test]
fn a_command_that_cannot_be_run() {
    require_root();
    let (code, stdout, stderr) = gputrace_output(&["run", "--json", "--", "/nonexistent/program"]);
    assert_eq!(code, 127, "run ends as its command did (as a shell would: 127): {stderr}");
    let r = gputrace_tests::report_json(&stdout);
    assert_eq!(r["target"]["exit_code"], 127, "{r}");
    assert!(stderr.contains("cannot run `/nonexistent/program`"), "{stderr}");
}

#[test]
fn a_process_without_cuda_is_reported_as_such() {
    require_root();
    let (code, stdout, stderr) = gputrace_output(&["run", "--json", "--", "sleep", "0.3"]);
    assert_eq!(code, 0, "{stderr}");
    let r = gputrace_tests::report_json(&stdout);
    let started = r["started_at"].as_str().expect("started_at");
    assert!(started.len() == 24 && started.ends_with('Z') && started.as_bytes()[10] == b'T', "RFC 3339, UTC: {started}");
    assert!(r["host"].as_str().is_some_and(|h| !h.is_empty()), "{r}");
    assert_eq!(r["target"]["cuda_loaded"], false);
    assert_eq!(r["verdict"], "no-cuda-work");
    assert_eq!(r["cuda"]["launches"]["kernels"], 0);
}

#[test]
fn bad_flags_are_usage_errors() {
    require_root();
    let (code, _, stderr) = gputrace_output(&["attach", "--pid", "1", "--duration=-3"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("must be positive"), "{stderr}");
    let (code, _, stderr) = gputrace_output(&["attach", "--pid", "1", "--duration", "soon"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a duration"), "{stderr}");
    let (code, _, stderr) = gputrace_output(&["attach", "--pid", "1", "--duration", "5x"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("unknown unit"), "{stderr}");
    let (code, _, stderr) = gputrace_output(&["run", "--json"]);
    assert_eq!(code, 2, "a command is required: {stderr}");
}

#[test]
fn completions_and_the_man_page_come_from_the_command_line_definitions() {
    let (code, bash, stderr) = gputrace_output(&["completions", "bash"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(bash.contains("gputrace") && bash.contains("--no-stacks") && bash.contains("attach"), "{bash}");
    let (code, _, stderr) = gputrace_output(&["completions", "tcsh"]);
    assert_eq!(code, 2, "an unknown shell is a usage error: {stderr}");
    let (code, man, stderr) = gputrace_output(&["man"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(man.starts_with(".ie") || man.contains(".TH gputrace"), "roff: {}", &man[..man.len().min(200)]);
    assert!(man.contains("attach") && man.contains("sweep"), "the subcommands are listed");
}

#[test]
fn every_man_page_the_main_one_refers_to_is_there() {
    require_root();
    let (code, man, stderr) = gputrace_output(&["man"]);
    assert_eq!(code, 0, "{stderr}");
    let referred: Vec<&str> = man.split("gputrace\\-").skip(1).filter_map(|rest| rest.split_once("(1)").map(|(name, _)| name)).collect();
    for sub in ["attach", "run", "record", "report", "export", "sweep", "doctor", "completions", "man"] {
        assert!(referred.contains(&sub), "gputrace(1) lists gputrace-{sub}(1): {referred:?}");
    }
    for sub in referred {
        let (code, page, stderr) = gputrace_output(&["man", sub]);
        assert_eq!(code, 0, "gputrace-{sub}(1): {stderr}");
        assert!(page.contains(&format!(".TH gputrace-{sub} 1")), "gputrace-{sub}(1): {}", &page[..page.len().min(300)]);
        assert!(page.contains(".SH OPTIONS") && page.contains("\\-\\-help"), "gputrace-{sub}(1) documents its options");
    }
    let (_, attach, _) = gputrace_output(&["man", "attach"]);
    assert!(attach.contains("\\-\\-pid") && attach.contains("\\-\\-max\\-overhead"), "{attach}");
    let (_, record, _) = gputrace_output(&["man", "record"]);
    assert!(record.contains("\\-\\-flight\\-recorder") && record.contains("\\-\\-keep"), "{record}");
    let (code, _, stderr) = gputrace_output(&["man", "nope"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("attach, run"), "the message lists the pages: {stderr}");
    // A stdout that refuses the page: the message names what was being written.
    let full = std::fs::File::options().write(true).open("/dev/full").expect("/dev/full");
    let out = Command::new(gputrace()).arg("man").stdout(full).output().expect("gputrace runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("writing the man page") && !stderr.contains("report"), "{stderr}");
}

#[test]
fn messages_name_what_is_wrong() {
    require_root();
    let dir = std::env::temp_dir().join(format!("gputrace-messages-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    // A directory given as the command: not "Permission denied".
    let (code, _, stderr) = gputrace_output(&["run", "--json", "--nvml-hz", "0", "--", dir.to_str().expect("utf-8")]);
    assert_eq!(code, 126, "{stderr}");
    assert!(stderr.contains("is a directory") && !stderr.contains("Permission denied"), "{stderr}");
    // A script whose interpreter is missing: not "No such file" of a file that is there.
    let script = dir.join("job.sh");
    std::fs::write(&script, "#!/nonexistent/python3 -u\nprint(1)\n").expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let (code, _, stderr) = gputrace_output(&["run", "--json", "--nvml-hz", "0", "--", script.to_str().expect("utf-8")]);
    assert_eq!(code, 127, "{stderr}");
    assert!(stderr.contains("interpreter `/nonexistent/python3`"), "{stderr}");
    // A recording that is not there is no damaged recording: exit 1, not 6.
    let (code, _, stderr) = gputrace_output(&["report", dir.join("missing.gtr").to_str().expect("utf-8")]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("No such file"), "{stderr}");
    // Budgets: a negative one reaches the check (not clap's "unexpected argument"), a tiny
    // one is refused in a short line, and a small one is said as given.
    let (code, _, stderr) = gputrace_output(&["run", "--max-overhead", "-1", "--", "true"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("must be above 0") && !stderr.contains("unexpected argument"), "{stderr}");
    let (code, _, stderr) = gputrace_output(&["run", "--max-overhead", "1e-300", "--", "true"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("at least 0.0001") && stderr.lines().all(|l| l.len() < 200), "{stderr}");
    let (r, code, stderr) = gputrace_tests::run_fakejob_opts(&["--max-overhead", "0.0001", "--nvml-hz", "0"], &["--steps", "2000", "--driver-launches", "20", "--sync"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(r["tracer"]["sampling"]["max_overhead_pct"], 0.0001, "{:#}", r["tracer"]["sampling"]);
    for note in r["tracer"]["notes"].as_array().expect("notes") {
        let note = note.as_str().expect("a note");
        assert!(!note.contains("0.0000999") && note.len() < 400, "{note}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_privileges_the_first_word_is_the_privilege_error() {
    require_root();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .arg(gputrace())
        .args(["run", "--", "true"])
        .output()
        .expect("setpriv runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(first.starts_with("gputrace: tracing needs root"), "the privilege error comes first, nothing before it: {stderr}");
    assert!(!stderr.contains("NVML") && !stderr.contains("gputrace: gputrace"), "{stderr}");
}
