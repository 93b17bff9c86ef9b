//! Colour on a person's terminal, one policy for every text report: `--color auto` (the
//! default) colours stdout only when it is a terminal and honours `NO_COLOR`,
//! `CLICOLOR_FORCE` and `TERM=dumb` (anstream's rules); `--color always` and `never` decide
//! outright. Strings from the traced process are made printable first
//! ([`crate::printable::clean`]), so the only escapes written are these styles.

use anstyle::{AnsiColor, Style};

/// Bold: titles and section headings.
pub const BOLD: Style = Style::new().bold();
/// Red: warnings that counts are incomplete (events lost, a cut recording).
pub const RED: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Red)));
/// Yellow: lesser warnings (medium severity, an idle holder, estimated launch counts).
pub const YELLOW: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Yellow)));
/// Bold red: the gravest marks (high severity, a zombie holder, a command killed by a signal).
pub const BOLD_RED: Style = RED.bold();
/// Bold yellow: the verdict.
pub const BOLD_YELLOW: Style = YELLOW.bold();

/// `--color`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
#[expect(missing_docs, reason = "clap makes a variant's doc comment its help text: `--help` says what they mean once, on the option")]
pub enum When {
    #[default]
    Auto,
    Always,
    Never,
}

/// Set the process's colour choice once, from the command line.
pub fn choose(when: When) {
    let choice = match when {
        When::Auto => anstream::ColorChoice::Auto,
        When::Always => anstream::ColorChoice::Always,
        When::Never => anstream::ColorChoice::Never,
    };
    choice.write_global();
}

/// Whether the text written to stdout is coloured.
#[must_use]
pub fn on_stdout() -> bool {
    anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never
}

/// `s` in `style` when `color`, else as it is.
#[must_use]
pub fn paint(color: bool, style: Style, s: &str) -> String {
    if color {
        format!("{style}{s}{style:#}")
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn styles_are_the_usual_escapes_and_nothing_without_colour() {
        assert_eq!(paint(true, BOLD_RED, "x"), "\x1b[1m\x1b[31mx\x1b[0m");
        assert_eq!(paint(false, BOLD_RED, "x"), "x");
    }
}
