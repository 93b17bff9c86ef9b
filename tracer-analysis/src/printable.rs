//! Text for a person that every stage may write, pure and at the bottom of the house: one
//! escaping policy, and sizes in binary units.
//!
//! One escaping policy for every string that came from a traced process (command lines,
//! thread, file and frame names, library paths) or from a recording on its way to a terminal.
//!
//! Two layers: [`clean`] at each place such a string enters a text, and [`terminal_safe`]
//! over each whole text before it is written, so that a string a renderer forgot to clean
//! still cannot clear the screen or retitle the window.

/// Make a string from the traced process safe to print: no control characters reach the
/// terminal (a hostile command name could otherwise move the cursor or recolour output).
/// Bidirectional overrides are replaced too: they reorder what a person reads.
#[must_use]
pub fn clean(s: &str) -> String {
    s.chars().map(|c| if unsafe_char(c) { '?' } else { c }).collect()
}

/// [`clean`], line by line: a message of several lines keeps its line breaks.
#[must_use]
pub fn clean_lines(s: &str) -> String {
    s.split('\n').map(clean).collect::<Vec<_>>().join("\n")
}

/// A whole text for a terminal: line breaks stay, and so do the colour escapes the text
/// reports write themselves (`ESC [ digits/; m`, [`super::style`]); every other control
/// character becomes `?`.
#[must_use]
pub fn terminal_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '\x1b' {
            if let Some(len) = colour_escape_len(rest) {
                out.push_str(&rest[..len]);
                rest = &rest[len..];
                continue;
            }
        }
        out.push(if c != '\n' && unsafe_char(c) { '?' } else { c });
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The length of the colour escape (SGR) at the start of `s`, if one is there.
fn colour_escape_len(s: &str) -> Option<usize> {
    let body = s.strip_prefix("\x1b[")?;
    let params = body.bytes().take_while(|b| b.is_ascii_digit() || *b == b';').count();
    (body.as_bytes().get(params) == Some(&b'm')).then_some(2 + params + 1)
}

fn unsafe_char(c: char) -> bool {
    // `is_control` is C0, DEL and C1 (CSI 0x9b included); the rest are the bidirectional
    // embeddings, overrides and isolates.
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A size in bytes, in the largest binary unit under 1,024 of it (`1.5 MiB`).
#[must_use]
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_overrides_become_question_marks() {
        assert_eq!(clean("a\x1b[2Jb\nc\u{9b}d\u{202e}e"), "a?[2Jb?c?d?e");
        assert_eq!(clean_lines("one\x07\ntwo"), "one?\ntwo");
    }

    #[test]
    fn a_whole_text_keeps_its_lines_and_colours_only() {
        let text = "\x1b[1mVERDICT\x1b[0m\nat e\x1b[2J\x1b]0;pwned\x07d\r\n\x1b[31";
        assert_eq!(terminal_safe(text), "\x1b[1mVERDICT\x1b[0m\nat e?[2J?]0;pwned?d?\n?[31");
    }
}
