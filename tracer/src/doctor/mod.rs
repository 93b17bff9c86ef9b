//! `gputrace doctor`: is this machine fit to trace, and is its GPU path sound? Each check
//! says pass, warn, fail or skip, and why; only a fail makes the command exit non-zero
//! (docs/cli.md, "gputrace doctor").
//!
//! Two stages, as the rest of the tool: gather the facts (`host_checks::facts`, `gpu::facts`, each
//! reading the system once), then judge them with pure rules (`host_checks::judge`, `gpu::judge`),
//! which the unit tests drive with planted facts.

pub mod bearing;
pub mod gpu;
pub mod host_checks;

use serde::Serialize;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Checked and sound.
    Pass,
    /// Tracing works, or the job runs, but something costs time or evidence.
    Warn,
    /// Tracing cannot work, or the job cannot run as it is.
    Fail,
    /// Not checked here, and why (no GPU, no NVML, a figure the driver does not report).
    Skip,
}

impl Status {
    /// The name the text and `--json` use: `pass`, `warn`, `fail` or `skip`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Warn => "warn",
            Self::Fail => "fail",
            Self::Skip => "skip",
        }
    }
}

/// One check's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// A stable name (`uprobes`, `pcie-link`, …; docs/cli.md lists them).
    pub name: String,
    /// How it came out.
    pub status: Status,
    /// What was found, and for a warn or fail what to do.
    pub detail: String,
}

impl Check {
    /// A check named `name` that came out `status`, with what was found.
    #[must_use]
    pub fn new(name: &str, status: Status, detail: impl Into<String>) -> Self {
        Self { name: name.into(), status, detail: detail.into() }
    }
}

/// Everything `doctor` found, as `--json` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct Findings {
    /// The process the job checks were about (`--pid`), if any.
    pub pid: Option<u32>,
    /// Every check, in the order they were made (the host's, then the GPU's).
    pub checks: Vec<Check>,
    /// How many checks failed; any makes the command exit non-zero.
    pub fails: usize,
    /// How many checks warned.
    pub warns: usize,
}

/// Run every check; `pid`: the job whose CPUs and CUDA runtime are checked against the GPU.
#[must_use]
pub fn run(pid: Option<u32>) -> Findings {
    let mut checks = host_checks::judge(&host_checks::facts());
    checks.extend(gpu::judge(&gpu::facts(pid)));
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    Findings { pid, fails: count(Status::Fail), warns: count(Status::Warn), checks }
}

/// The text face: one line a check, in the order they were made, then the count.
#[must_use]
pub fn render(f: &Findings) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let width = f.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in &f.checks {
        let _ = writeln!(out, "{:<4}  {:<width$}  {}", c.status.as_str(), c.name, c.detail);
    }
    let _ = match (f.fails, f.warns) {
        (0, 0) => writeln!(out, "\nall checks passed or were skipped"),
        (0, w) => writeln!(out, "\n{w} warning(s), no failure"),
        (n, w) => writeln!(out, "\n{n} failure(s), {w} warning(s)"),
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_lists_every_check_and_counts_the_failures() {
        let checks = vec![Check::new("uprobes", Status::Pass, "available"), Check::new("pcie-link", Status::Warn, "Gen3 x16 of Gen5 x16")];
        let text = render(&Findings { pid: None, fails: 0, warns: 1, checks });
        assert!(text.contains("pass  uprobes    available"), "{text}");
        assert!(text.contains("warn  pcie-link  Gen3"), "{text}");
        assert!(text.ends_with("1 warning(s), no failure\n"), "{text}");
    }
}
