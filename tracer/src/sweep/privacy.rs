//! What a sweep may show about other people's processes. A command line can carry secrets
//! (tokens, passwords in arguments), so another user's is shown only to root or when asked
//! for with `--show-commands`; otherwise only the short process name (`comm`) is shown and
//! the row says the command line was hidden.

/// The command to show for a process, and whether its command line was withheld.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shown {
    pub command: String,
    pub hidden: bool,
}

/// `cmdline` is the full command line if it could be read (None for kernel threads,
/// zombies, or when unreadable); `comm` the kernel's short name; `owner` the process's uid;
/// `viewer` our effective uid.
#[must_use]
pub fn command(cmdline: Option<&str>, comm: &str, owner: Option<u32>, viewer: u32, show_all: bool) -> Shown {
    let allowed = viewer == 0 || show_all || owner == Some(viewer);
    match cmdline.filter(|c| !c.is_empty()) {
        Some(line) if allowed => Shown { command: line.to_owned(), hidden: false },
        // Nothing to hide when there is no command line to show.
        None => Shown { command: comm.to_owned(), hidden: false },
        Some(_) => Shown { command: comm.to_owned(), hidden: true },
    }
}

/// A name from another process made safe for prose and terminals: control characters
/// (escape sequences, newlines) are written as `\u{…}` escapes, so a hostile command name
/// can neither forge lines in the text output nor drive the terminal.
#[must_use]
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_users_command_lines_are_hidden_unless_allowed() {
        const LINE: &str = "python train.py --token=SECRET";
        let line = Some(LINE);
        // Not root, someone else's process: comm only, and it says so.
        assert_eq!(command(line, "python", Some(1001), 1000, false), Shown { command: "python".into(), hidden: true });
        // Own process, root, or the explicit flag: the whole line.
        for (owner, viewer, flag) in [(Some(1000), 1000, false), (Some(1001), 0, false), (Some(1001), 1000, true)] {
            assert_eq!(command(line, "python", owner, viewer, flag), Shown { command: LINE.into(), hidden: false });
        }
        // Unknown owner: hidden from non-root.
        assert!(command(line, "python", None, 1000, false).hidden);
        // No command line at all (kernel thread, zombie): the comm, nothing hidden.
        assert_eq!(command(None, "kworker", Some(0), 1000, false), Shown { command: "kworker".into(), hidden: false });
        assert_eq!(command(Some(""), "z", Some(7), 1000, false), Shown { command: "z".into(), hidden: false });
    }

    #[test]
    fn hostile_names_are_escaped() {
        assert_eq!(escape("evil\x1b[2J\nrm -rf"), "evil\\u{1b}[2J\\u{a}rm -rf");
        assert_eq!(escape("python3 train.py ünï"), "python3 train.py ünï");
        assert_eq!(escape(""), "");
        assert!(!escape("a\u{7}\u{9b}b\r").chars().any(char::is_control));
    }
}
