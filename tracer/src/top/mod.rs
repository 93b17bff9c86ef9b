//! `gputrace top`: the sweep's windows, one a second, as a live terminal view.
//!
//! Stages: `sweep::engine` (a window every `--interval`) → `view` (the window as a frame) →
//! the terminal. Keys (`keys`) are read on a thread of their own and handled while a window
//! runs: a sort redraws the last window at once, `q` quits. Where standard output is no
//! terminal (a pipe, a log, `ssh` without `-t`), each window is printed as plain text instead,
//! as wide as its rows need, and the view runs until SIGINT or SIGTERM.

pub mod keys;
pub mod view;

use std::{
    io::{self, IsTerminal, Write},
    sync::mpsc,
    time::Duration,
};

use crossterm::{
    event,
    terminal::{disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen},
    ExecutableCommand,
};
use ratatui::{backend::CrosstermBackend, Terminal};

use crate::{
    error::{Result, TraceError},
    sweep::{
        engine::{Engine, Signals, Stopped},
        model::SweepReport,
    },
};

/// A validated `top` command line.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long each window lasts (`--interval`).
    pub interval: Duration,
    /// Show other users' command lines without being root (`--show-commands`).
    pub show_commands: bool,
}

/// Width of a plain-text frame: wide enough for the command column to say something.
const TEXT_WIDTH: u16 = 160;

/// Arm the sweep's probes and show its windows until `q`, SIGINT or SIGTERM: a live view on a
/// terminal, else each window as plain text on stdout until a signal or a closed pipe.
pub async fn top(options: &Options) -> Result<()> {
    let mut signals = Signals::install()?;
    if !io::stdout().is_terminal() {
        return text_frames(options, &mut signals).await;
    }
    // Armed before the screen is taken, so that what arming says stays readable.
    let mut engine = Engine::arm(options.show_commands, true, options.interval);
    engine.quiet();
    let mut screen = Screen::open().map_err(|e| TraceError::io("preparing", "the terminal", e))?;
    let keys = key_reader();
    let mut status = view::Status::default();
    let mut last: Option<SweepReport> = None;
    loop {
        // Keys are handled while the window runs; `None`: quit.
        let judged = {
            let window = engine.window(options.interval, &mut signals);
            tokio::pin!(window);
            loop {
                tokio::select! {
                    done = &mut window => break Some(done?),
                    () = tokio::time::sleep(Duration::from_millis(50)) => {
                        let mut quit = false;
                        for action in keys.try_iter().map(|e| keys::action(&e)) {
                            match action {
                                keys::Action::Quit => quit = true,
                                keys::Action::Sort(s) => status.sort = s,
                                keys::Action::Redraw | keys::Action::Nothing => {}
                            }
                            if let Some(r) = &last {
                                screen.draw(r, &status)?;
                            }
                        }
                        if quit {
                            break None;
                        }
                    }
                }
            }
        };
        let Some((report, stopped)) = judged else { break };
        status.windows += 1;
        status.age_s += report.window.duration_s;
        screen.draw(&report, &status)?;
        last = Some(report);
        if stopped == Stopped::Signal {
            break;
        }
    }
    screen.close();
    if let Some(kernel) = engine.into_probes() {
        kernel.detach();
    }
    Ok(())
}

/// Without a terminal: each window as plain text, until a signal.
async fn text_frames(options: &Options, signals: &mut Signals) -> Result<()> {
    let mut engine = Engine::arm(options.show_commands, true, options.interval);
    let mut status = view::Status::default();
    loop {
        let (report, stopped) = engine.window(options.interval, signals).await?;
        status.windows += 1;
        status.age_s += report.window.duration_s;
        let text = render_text(&report, &status);
        let mut out = io::stdout().lock();
        // A closed pipe (`gputrace top | head`) ends the view.
        if writeln!(out, "{text}").and_then(|()| out.flush()).is_err() || stopped == Stopped::Signal {
            break;
        }
    }
    if let Some(kernel) = engine.into_probes() {
        kernel.detach();
    }
    Ok(())
}

/// One frame as plain text, every row shown. The view cleans what it shows; the whole text
/// is cleaned once more here (plain text has no colours, so no escape at all), so that a name
/// the view forgot to clean still reaches no terminal raw (`top | less` shows this text).
#[must_use]
pub fn render_text(report: &SweepReport, status: &view::Status) -> String {
    let height = view::height(report);
    let Ok(mut terminal) = Terminal::new(ratatui::backend::TestBackend::new(TEXT_WIDTH, height)) else { return String::new() };
    if terminal.draw(|f| view::draw(f, report, status)).is_err() {
        return String::new();
    }
    let buffer = terminal.backend().buffer();
    let text = (0..height)
        .map(|y| (0..TEXT_WIDTH).map(|x| buffer[(x, y)].symbol()).collect::<String>().trim_end().to_owned())
        .collect::<Vec<_>>()
        .join("\n");
    crate::output::clean_lines(&text)
}

/// Terminal events, read on a thread of their own (reading blocks).
fn key_reader() -> mpsc::Receiver<event::Event> {
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new().name("gputrace-keys".into()).spawn(move || {
        while let Ok(e) = event::read() {
            if tx.send(e).is_err() {
                return;
            }
        }
    });
    if let Err(e) = spawned {
        log::warn!("reading keys: {e}; only SIGINT and SIGTERM end top");
    }
    rx
}

/// The terminal in raw mode on its alternate screen, given back as it was on every way out
/// (`close`, an error, a panic unwinding through `Drop`).
struct Screen {
    terminal: Terminal<CrosstermBackend<io::Stdout>>,
    open: bool,
}

impl Screen {
    fn open() -> io::Result<Self> {
        enable_raw_mode()?;
        let mut stdout = io::stdout();
        if let Err(e) = stdout.execute(EnterAlternateScreen) {
            let _ = disable_raw_mode();
            return Err(e);
        }
        let terminal = Terminal::new(CrosstermBackend::new(stdout)).inspect_err(|_| restore())?;
        Ok(Self { terminal, open: true })
    }

    fn draw(&mut self, report: &SweepReport, status: &view::Status) -> Result<()> {
        self.terminal.draw(|f| view::draw(f, report, status)).map(|_| ()).map_err(|e| TraceError::io("drawing on", "the terminal", e))
    }

    fn close(mut self) {
        self.open = false;
        restore();
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        if self.open {
            restore();
        }
    }
}

fn restore() {
    let _ = disable_raw_mode();
    let mut stdout = io::stdout();
    let _ = stdout.execute(LeaveAlternateScreen);
    let _ = stdout.execute(crossterm::cursor::Show);
}
