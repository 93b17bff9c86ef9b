//! `gputrace serve`: the sweep window after window, its last judgement at `/metrics`.
//!
//! Stages: `sweep::engine` (probes armed once; a window every `--interval`) → `metrics` (the
//! window as OpenMetrics text) → `http` (answers scrapes from the last exposition, on its own
//! thread). The engine never waits for a scrape and a scrape never waits for a window.

pub mod clients;
pub mod http;
pub mod metrics;

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use crate::{
    error::{Result, TraceError},
    sweep::engine::{Engine, Signals, Stopped},
};

/// A validated `serve` command line.
#[derive(Clone, Debug)]
pub struct Options {
    /// The address and port to answer scrapes on (`--listen`).
    pub listen: SocketAddr,
    /// How long each window lasts (`--interval`).
    pub interval: Duration,
    /// Label series with whole command lines, not program names (`metrics::command_label`).
    pub full_command: bool,
    /// Show other users' command lines without being root.
    pub show_commands: bool,
}

/// The default `--interval`: Prometheus's usual scrape interval, so each scrape sees a new
/// window.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);

/// Bind, arm, and judge windows until SIGINT or SIGTERM.
pub async fn serve(options: &Options) -> Result<()> {
    // Bound first: a port in use is the command's error, before any probe is loaded.
    let listener = std::net::TcpListener::bind(options.listen).map_err(|source| TraceError::Listen { addr: options.listen.to_string(), source })?;
    let bound = listener.local_addr().map_err(|e| TraceError::io("reading the address of", options.listen.to_string(), e))?;
    let latest = Arc::new(http::Latest::default());
    http::spawn(listener, latest.clone()).map_err(|e| TraceError::io("starting", "the HTTP server's thread", e))?;
    let mut signals = Signals::install()?;
    let mut engine = Engine::arm(options.show_commands, true, options.interval);
    // Scripts and tests wait for this line (with -v) to know where to scrape.
    log::info!("serving http://{bound}/metrics: a window every {:.0?}", options.interval);
    if !engine.probing() {
        eprintln!("gputrace: CUDA calls are not counted (see the notes at -v); processes and GPU memory are still served");
    }
    let mut totals = metrics::Totals::default();
    loop {
        let (report, stopped) = engine.window(options.interval, &mut signals).await?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        totals.add(&report, now);
        latest.publish(metrics::exposition(&report, &totals, options.full_command));
        log::debug!("window {} judged: {} processes, {} diagnoses", engine.windows, report.processes.len(), report.diagnoses.len());
        if stopped == Stopped::Signal {
            break;
        }
    }
    if let Some(kernel) = engine.into_probes() {
        kernel.detach();
    }
    Ok(())
}
