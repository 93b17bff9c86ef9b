//! One escaping policy for every string that came from a traced process (command lines,
//! thread and file names) on its way to a terminal.

/// Make a string from the traced process safe to print: no control characters reach the
/// terminal (a hostile command name could otherwise move the cursor or recolour output).
#[must_use]
pub fn clean(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}
