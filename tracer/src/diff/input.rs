//! Each argument of `diff` made into a report: a recording (compressed or not) is replayed
//! and reported as `report FILE` does; anything else must be a `--json` report.

use std::{
    fs::OpenOptions,
    io::{BufReader, Read as _, Seek as _, SeekFrom},
    os::unix::fs::OpenOptionsExt as _,
    path::Path,
};

use crate::{model::Report, record};

/// Why an argument gave no report: said with its path, in words for the user.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct Unreadable {
    /// The argument, as given.
    pub path: String,
    /// What was wrong.
    pub why: String,
    /// Whether it was a recording that is damaged (exit code 6) rather than a file that is
    /// missing or not a report at all.
    pub damaged_recording: bool,
}

/// A JSON report larger than this is refused before it is read (reports are tens of KB; the
/// whole document is parsed in memory, where a crafted one takes many times its size).
const MAX_JSON_BYTES: u64 = 8 << 20;

/// A run read for `diff`: its report, and for a recording, where reading stopped early.
#[derive(Debug)]
pub struct Loaded {
    /// The report.
    pub report: Report,
    /// Damage or a cut that ended the reading of a recording early.
    pub damage: Option<record::reader::Damage>,
}

/// The report of the recording or JSON report at `path`.
pub fn report_of(path: &Path) -> Result<Loaded, Unreadable> {
    let shown = path.display().to_string();
    let fail = |why: String, damaged_recording: bool| Unreadable { path: shown.clone(), why, damaged_recording };
    // Opened without blocking: a FIFO or a terminal named as BEFORE is refused, not waited on.
    let mut file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(|e| fail(format!("cannot open it: {e}"), false))?;
    let meta = file.metadata().map_err(|e| fail(format!("cannot read it: {e}"), false))?;
    if !meta.is_file() {
        return Err(fail("not a regular file: give a recording or a `--json` report".into(), false));
    }
    let mut head = [0u8; 8];
    let got = file.read(&mut head).map_err(|e| fail(format!("cannot read it: {e}"), false))?;
    let head = &head[..got];
    let is_recording = head.starts_with(record::format::MAGIC) || head.starts_with(&record::reader::ZSTD_MAGIC);
    if is_recording {
        let replayed = record::replay(path).map_err(|e| fail(e.to_string(), true))?;
        return Ok(Loaded { report: crate::report::build::build(&replayed.outcome), damage: replayed.damage });
    }
    if meta.len() > MAX_JSON_BYTES {
        return Err(fail(format!("{} MB: too large for a JSON report (a report is some tens of KB); give the recording instead", meta.len() >> 20), false));
    }
    file.seek(SeekFrom::Start(0)).map_err(|e| fail(format!("cannot read it: {e}"), false))?;
    let value: serde_json::Value = serde_json::from_reader(BufReader::new(file))
        .map_err(|e| fail(format!("neither a gputrace recording nor a JSON report ({e})"), false))?;
    let schema = value.get("schema").and_then(serde_json::Value::as_str).unwrap_or("").to_owned();
    if schema != crate::model::SCHEMA {
        let found = if schema.is_empty() { "no `schema` field".to_owned() } else { format!("schema `{schema}`") };
        return Err(fail(format!("a JSON document with {found}: diff compares `{}` reports (from `--json`) and recordings", crate::model::SCHEMA), false));
    }
    let report = serde_json::from_value(value).map_err(|e| fail(format!("a `{schema}` report this gputrace cannot read ({e}): compare reports of one gputrace version"), false))?;
    Ok(Loaded { report, damage: None })
}
