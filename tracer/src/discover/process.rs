//! Reading processes from `/proc`: existence, identity (so a reused pid is never traced by
//! mistake), command, owner and the descendants of a process.

use std::{collections::HashMap, fs, path::Path};

use crate::error::{Result, TraceError};

/// Facts from `/proc/PID/stat` that identify a process instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    /// The process id, as the file gives it.
    pub pid: u32,
    /// Its parent's pid.
    pub ppid: u32,
    /// Start time in clock ticks since boot: with the pid, a unique process identity.
    pub start_ticks: u64,
    /// State letter (R, S, D, Z, ...).
    pub state: char,
    /// The kernel's short name of the command (15 bytes at most), as read between the parentheses.
    pub comm: String,
}

/// Parse `/proc/PID/stat`. The command name is in parentheses and may itself contain spaces
/// and parentheses, so fields are counted from the last `)`.
#[must_use]
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let pid = text[..open].trim().parse().ok()?;
    let comm = text[open + 1..close].to_owned();
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // After the comm: state(3) ppid(4) ... starttime(22), numbered from 1 as in proc(5).
    let state = fields.first()?.chars().next()?;
    let parent = fields.get(1)?.parse().ok()?;
    let start_ticks = fields.get(19)?.parse().ok()?;
    Some(ProcStat { pid, ppid: parent, start_ticks, state, comm })
}

/// Read `/proc/PID/stat`, or `None` if the process does not exist (any more).
#[must_use]
pub fn stat(pid: u32) -> Option<ProcStat> {
    let text = crate::discover::procfs::read_text(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// The live process `pid`, or a precise error.
pub fn require(pid: u32) -> Result<ProcStat> {
    match stat(pid) {
        Some(s) if s.state == 'Z' || s.state == 'X' => Err(TraceError::TargetExited { pid }),
        Some(s) => Ok(s),
        None => Err(TraceError::NoSuchProcess { pid }),
    }
}

/// The command line, arguments joined by spaces; the comm if it has none (kernel threads,
/// zombies). Bytes that are not UTF-8 are replaced, never trusted.
#[must_use]
pub fn command_line(pid: u32) -> String {
    // Bounded as the sweep's is: a command line may be megabytes, and what is shown is a line.
    match crate::discover::procfs::read_head(format!("/proc/{pid}/cmdline"), crate::discover::procfs::MAX_CMDLINE_BYTES) {
        Ok((bytes, _)) if !bytes.is_empty() => {
            bytes.split(|b| *b == 0).filter(|a| !a.is_empty()).map(String::from_utf8_lossy).collect::<Vec<_>>().join(" ")
        }
        _ => stat(pid).map(|s| s.comm).unwrap_or_default(),
    }
}

/// The process a thread id belongs to (`Tgid:` in `/proc/TID/status`; thread ids are
/// reachable under `/proc` even though they are not listed).
#[must_use]
pub fn tgid_of(tid: u32) -> Option<u32> {
    let text = crate::discover::procfs::read_text(format!("/proc/{tid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Tgid:")?.trim().parse().ok())
}

/// Real uid of a process, from `/proc/PID/status`.
#[must_use]
pub fn uid(pid: u32) -> Option<u32> {
    let text = crate::discover::procfs::read_text(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Uid:")?.split_whitespace().next()?.parse().ok())
}

/// Every live process on the host with its parent.
fn all_parents() -> HashMap<u32, u32> {
    let Ok(dir) = fs::read_dir("/proc") else { return HashMap::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()).filter_map(|pid| Some((pid, stat(pid)?.ppid))).collect()
}

/// `root` and all its live descendants.
#[must_use]
pub fn tree(root: u32) -> Vec<u32> {
    let parents = all_parents();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// Thread ids of a process.
#[must_use]
pub fn threads(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir(Path::new("/proc").join(pid.to_string()).join("task")) else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_hostile_comm() {
        let text = "4242 (evil) S (x) R) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1 2 3";
        let s = parse_stat(text).expect("parses");
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "evil) S (x) R");
        assert_eq!(s.state, 'S');
        assert_eq!(s.ppid, 17);
        assert_eq!(s.start_ticks, 987_654);
    }

    #[test]
    fn rejects_truncated_stat() {
        assert!(parse_stat("12 (x) S 1").is_none());
        assert!(parse_stat("").is_none());
        assert!(parse_stat(")(").is_none());
    }

    #[test]
    fn a_thread_id_leads_to_its_process() {
        let me = std::process::id();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(rustix::thread::gettid().as_raw_nonzero().get() as u32).expect("send");
            let _ = done_rx.recv();
        });
        let tid = rx.recv().expect("tid");
        assert_ne!(tid, me);
        assert_eq!(tgid_of(tid), Some(me));
        assert_eq!(tgid_of(me), Some(me));
        drop(done_tx);
        t.join().expect("thread");
    }

    #[test]
    fn finds_itself() {
        let me = std::process::id();
        let s = require(me).expect("own process");
        assert_eq!(s.pid, me);
        assert!(tree(me).contains(&me));
        assert!(threads(me).contains(&me));
    }
}
