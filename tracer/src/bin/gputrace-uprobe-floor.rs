//! Benchmark helper: attach a bare counting uprobe to one function of one library, print
//! `armed`, wait for a line (or end of input) on stdin, print `hits N`, detach.
//! Usage: gputrace-uprobe-floor LIBRARY SYMBOL
use std::io::{BufRead as _, Write as _};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, library, symbol] = args.as_slice() else {
        eprintln!("usage: gputrace-uprobe-floor LIBRARY SYMBOL");
        std::process::exit(gputrace::error::exit::USAGE);
    };
    let floor = match gputrace::probes::floor::Floor::attach(library.as_ref(), symbol) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("gputrace-uprobe-floor: {e}");
            std::process::exit(e.exit_code());
        }
    };
    let mut out = std::io::stdout();
    let _ = writeln!(out, "armed");
    let _ = out.flush();
    let _ = std::io::stdin().lock().read_line(&mut String::new());
    let _ = writeln!(out, "hits {}", floor.hits());
}
