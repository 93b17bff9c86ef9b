//! Benchmark helper: attach a bare counting uprobe to one function of one library, print
//! `armed`, wait for a line (or end of input) on stdin, print `hits N`, detach.
//! With `--like-gputrace` instead of a symbol: the same traps gputrace sets in that library
//! (entries, and returns but on launches), each only counting.
//! Usage: gputrace-uprobe-floor LIBRARY SYMBOL|--like-gputrace
use std::io::{BufRead as _, Write as _};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, library, symbol] = args.as_slice() else {
        eprintln!("usage: gputrace-uprobe-floor LIBRARY SYMBOL|--like-gputrace");
        std::process::exit(gputrace::error::exit::USAGE);
    };
    let attached = if symbol == "--like-gputrace" {
        gputrace::probes::floor::Floor::attach_like_gputrace(library.as_ref())
    } else {
        gputrace::probes::floor::Floor::attach(library.as_ref(), symbol).map(|f| (f, 1))
    };
    let (floor, symbols) = match attached {
        Ok(f) => f,
        Err(e) => {
            eprintln!("gputrace-uprobe-floor: {e}");
            std::process::exit(e.exit_code());
        }
    };
    let mut out = std::io::stdout();
    let _ = writeln!(out, "armed {symbols}");
    let _ = out.flush();
    let _ = std::io::stdin().lock().read_line(&mut String::new());
    let _ = writeln!(out, "hits {}", floor.hits());
}
