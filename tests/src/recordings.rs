//! `gputrace record` of a fake job and `gputrace report` of the file, for the recording suites.

use std::{
    path::Path,
    process::{Command, Output},
};

use serde_json::Value;

use crate::{fake_cuda_dir, fakejob, gputrace};

/// `gputrace record --nvml-hz 0 -o FILE EXTRA -- fakejob JOB`.
#[must_use]
pub fn record(file: &Path, extra: &[&str], job: &[&str]) -> Output {
    Command::new(gputrace())
        .env("LD_LIBRARY_PATH", fake_cuda_dir())
        .args(["record", "--nvml-hz", "0", "-o"])
        .arg(file)
        .args(extra)
        .arg("--")
        .arg(fakejob())
        .args(job)
        .output()
        .expect("gputrace record runs")
}

/// `gputrace report FILE --json`: the report (Null when stdout is not JSON) and exit code.
#[must_use]
pub fn report(file: &Path) -> (Value, i32, String) {
    let out = Command::new(gputrace()).args(["report", "--json"]).arg(file).output().expect("gputrace report runs");
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    // A damaged recording's report too keeps to the published schema.
    if !report.is_null() {
        crate::assert_valid(&report);
    }
    (report, out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}
