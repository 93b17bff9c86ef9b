//! HTML escaping, which every part of the page uses.

/// Text for HTML, attribute values included. Control characters (from names the traced
/// process chose) become `?`: a page written to `-` may be read on a terminal.
#[must_use]
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            c if c.is_control() && c != '\n' && c != '\t' => out.push('?'),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
