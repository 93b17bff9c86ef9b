//! What a key does in `top` (pure).

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::view::Sort;

/// What a key press (or a terminal event) asks `top` to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Leave `top` (`q`, Esc, Ctrl-C, Ctrl-D).
    Quit,
    /// Sort the process table by this column (`s`, `m`, `l`, `p`, `u`).
    Sort(Sort),
    /// The terminal changed size: draw again.
    Redraw,
    /// Ignore the event.
    Nothing,
}

/// The action of one terminal event. Raw mode turns Ctrl-C into a key, so it quits too.
#[must_use]
pub fn action(event: &Event) -> Action {
    match event {
        Event::Key(KeyEvent { code, modifiers, kind: KeyEventKind::Press | KeyEventKind::Repeat, .. }) => match code {
            KeyCode::Char('c' | 'd') if modifiers.contains(KeyModifiers::CONTROL) => Action::Quit,
            KeyCode::Char('q' | 'Q') | KeyCode::Esc => Action::Quit,
            KeyCode::Char('s') => Action::Sort(Sort::State),
            KeyCode::Char('m') => Action::Sort(Sort::Memory),
            KeyCode::Char('l') => Action::Sort(Sort::Launches),
            KeyCode::Char('p') => Action::Sort(Sort::Pid),
            KeyCode::Char('u') => Action::Sort(Sort::User),
            _ => Action::Nothing,
        },
        Event::Resize(..) => Action::Redraw,
        _ => Action::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode, modifiers: KeyModifiers) -> Event {
        Event::Key(KeyEvent::new(code, modifiers))
    }

    #[test]
    fn q_escape_and_ctrl_c_quit_and_letters_sort() {
        assert_eq!(action(&key(KeyCode::Char('q'), KeyModifiers::NONE)), Action::Quit);
        assert_eq!(action(&key(KeyCode::Esc, KeyModifiers::NONE)), Action::Quit);
        assert_eq!(action(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)), Action::Quit);
        assert_eq!(action(&key(KeyCode::Char('c'), KeyModifiers::NONE)), Action::Nothing);
        assert_eq!(action(&key(KeyCode::Char('m'), KeyModifiers::NONE)), Action::Sort(Sort::Memory));
        assert_eq!(action(&key(KeyCode::Char('l'), KeyModifiers::NONE)), Action::Sort(Sort::Launches));
        assert_eq!(action(&Event::Resize(80, 24)), Action::Redraw);
    }
}
