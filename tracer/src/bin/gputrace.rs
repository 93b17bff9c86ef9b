//! The `gputrace` binary: parse the command line, set up logging, run, exit with the code.
//! Arguments are taken as `OsString`s: a file name or a command argument need not be UTF-8.
use clap::Parser as _;

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == gputrace::session::GATE_ARG) {
        // `gputrace run` holding its command until the probes are armed.
        let fd = args.get(2).and_then(|f| f.to_str()?.parse().ok()).unwrap_or(-1);
        std::process::exit(gputrace::session::gate_then_exec(fd, args.get(4..).unwrap_or_default()));
    }
    let cli = gputrace::cli::Cli::parse_from(args);
    gputrace::output::style::choose(cli.color);
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    // py-spy and its process reader log every attempt at -v; only their warnings are ours.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .filter_module("py_spy", log::LevelFilter::Warn)
        .filter_module("remoteprocess", log::LevelFilter::Warn)
        .format_timestamp(None)
        // The default layout, with the message made printable: log lines quote library
        // paths and names that came from the traced process.
        .format(|buf, record| {
            use std::io::Write as _;
            let level = buf.default_level_style(record.level());
            let message = gputrace::output::clean_lines(&record.args().to_string());
            writeln!(buf, "[{level}{:<5}{level:#} {}] {message}", record.level(), record.target())
        })
        .init();
    let job = match cli.job() {
        Ok(job) => job,
        Err(why) => {
            eprintln!("gputrace: {why}");
            std::process::exit(gputrace::error::exit::USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gputrace: starting the async runtime: {e}");
            std::process::exit(gputrace::error::exit::FAILURE);
        }
    };
    let code = runtime.block_on(gputrace::cli::execute(job));
    std::process::exit(code);
}
