//! The `gputrace` binary: parse the command line, set up logging, run, exit with the code.
use clap::Parser as _;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(gputrace::session::GATE_ARG) {
        // `gputrace run` holding its command until the probes are armed.
        let fd = args.get(2).and_then(|f| f.parse().ok()).unwrap_or(-1);
        std::process::exit(gputrace::session::gate_then_exec(fd, args.get(4..).unwrap_or_default()));
    }
    let cli = gputrace::cli::Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level)).format_timestamp(None).init();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gputrace: starting the async runtime: {e}");
            std::process::exit(gputrace::error::exit::FAILURE);
        }
    };
    let code = runtime.block_on(gputrace::cli::execute(cli.job()));
    std::process::exit(code);
}
