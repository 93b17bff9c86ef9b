//! What a person at a terminal sees while tracing: a start line, then one status line
//! rewritten each second. Only when stderr is a terminal (never in `--json` stdout, never in
//! a log file), and not with `-v`, whose log lines would tear it.

use std::{
    io::{IsTerminal as _, Write as _},
    time::Instant,
};

/// Counters as the status line shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Status {
    /// CUDA calls counted so far (launches included).
    pub calls: u64,
    /// Kernel and graph launches counted so far.
    pub launches: u64,
    /// The busiest GPU's utilization at the last NVML tick, percent.
    pub gpu_util_pct: Option<f64>,
    /// Events lost so far.
    pub lost: u64,
}

/// The live lines on stderr.
#[derive(Debug)]
pub struct Progress {
    enabled: bool,
    began: Instant,
    last: Option<(Instant, u64)>,
    /// A status line is on screen (to be cleared before anything else is written).
    shown: bool,
}

impl Progress {
    /// On when stderr is a terminal and the log is quiet.
    #[must_use]
    pub fn for_terminal() -> Self {
        Self::new(std::io::stderr().is_terminal() && !log::log_enabled!(log::Level::Info))
    }

    /// Lines shown when `enabled`, none otherwise (tests, `-v`, a log file).
    #[must_use]
    pub fn new(enabled: bool) -> Self {
        Self { enabled, began: Instant::now(), last: None, shown: false }
    }

    /// Whether the lines are shown.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The start line: what is traced and how to stop.
    pub fn started(&mut self, line: &str) {
        if self.enabled {
            self.began = Instant::now();
            write_err(&format!("{line}\n"));
        }
    }

    /// Rewrite the status line.
    pub fn tick(&mut self, status: Status) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        let rate = self.last.map(|(at, launches)| {
            let secs = now.duration_since(at).as_secs_f64();
            if secs > 0.0 {
                status.launches.saturating_sub(launches) as f64 / secs
            } else {
                0.0
            }
        });
        self.last = Some((now, status.launches));
        write_err(&format!("\r\x1b[K{}", status_line(now.duration_since(self.began).as_secs(), status, rate)));
        self.shown = true;
    }

    /// Clear the status line (before the report or any message).
    pub fn clear(&mut self) {
        if self.shown {
            write_err("\r\x1b[K");
            self.shown = false;
        }
    }
}

/// `12 s · 48,210 CUDA calls · 3,950 launches/s · GPU 41% · 0 lost`
#[must_use]
pub fn status_line(elapsed_s: u64, status: Status, launches_per_s: Option<f64>) -> String {
    let mut parts = vec![format!("{elapsed_s} s"), format!("{} CUDA calls", thousands(status.calls))];
    if let Some(rate) = launches_per_s {
        parts.push(format!("{} launches/s", thousands(rate.round() as u64)));
    }
    if let Some(u) = status.gpu_util_pct {
        parts.push(format!("GPU {u:.0}%"));
    }
    parts.push(format!("{} lost", thousands(status.lost)));
    parts.join(" · ")
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One write, so that the line is never torn by another writer's bytes.
fn write_err(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_says_time_calls_rate_gpu_and_loss() {
        let s = Status { calls: 48_210, launches: 40_000, gpu_util_pct: Some(41.2), lost: 0 };
        assert_eq!(status_line(12, s, Some(3950.4)), "12 s · 48,210 CUDA calls · 3,950 launches/s · GPU 41% · 0 lost");
        assert_eq!(status_line(0, Status::default(), None), "0 s · 0 CUDA calls · 0 lost");
    }

    #[test]
    fn a_disabled_progress_writes_nothing_and_keeps_no_line() {
        let mut p = Progress::new(false);
        p.started("tracing");
        p.tick(Status::default());
        assert!(!p.shown);
    }
}
