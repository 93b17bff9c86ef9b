//! Benchmark helper: the user-space cost of unwinding one copied stack (`stacks::unwind_cost`),
//! printed as `frames N complete B ns_per_stack X` for each depth given (default 10 30).
//! Usage: gputrace-unwind-cost [DEPTH...]
use std::io::Write as _;

fn main() {
    let depths: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let mut out = std::io::stdout();
    for depth in if depths.is_empty() { vec![10, 30] } else { depths } {
        let c = gputrace::stacks::unwind_cost::measure(depth, 20_000);
        let _ = writeln!(out, "depth {depth} frames {} complete {} ns_per_stack {:.0}", c.frames, c.complete, c.ns_per_stack);
    }
}
