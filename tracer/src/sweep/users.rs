//! Who owns a process: user names from `/etc/passwd`, read once per sweep. A uid with no
//! entry (a container's user, LDAP without a local line) is shown as its number.

use std::collections::HashMap;

/// uid → name, from the text of a passwd file. Malformed lines are skipped; the first entry
/// for a uid wins, as in `getpwuid`.
#[must_use]
pub fn parse_passwd(text: &str) -> HashMap<u32, String> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let mut fields = line.split(':');
        let (Some(name), Some(_password), Some(uid)) = (fields.next(), fields.next(), fields.next()) else { continue };
        let Ok(uid) = uid.parse::<u32>() else { continue };
        if name.is_empty() || name.starts_with('#') {
            continue;
        }
        out.entry(uid).or_insert_with(|| name.to_owned());
    }
    out
}

/// The host's users (empty if `/etc/passwd` cannot be read: numbers are shown then).
#[must_use]
pub fn load() -> HashMap<u32, String> {
    std::fs::read_to_string("/etc/passwd").map(|t| parse_passwd(&t)).unwrap_or_default()
}

/// A uid as a person reads it: the name, else the number; `?` when the owner is unknown
/// (the process was gone before it could be read).
#[must_use]
pub fn name(users: &HashMap<u32, String>, uid: Option<u32>) -> String {
    match uid {
        Some(uid) => users.get(&uid).cloned().unwrap_or_else(|| uid.to_string()),
        None => "?".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numeric_fallback() {
        let users = parse_passwd(
            "root:x:0:0:root:/root:/bin/bash\nbad line\nalice:x:1000:1000::/home/alice:/bin/sh\nx:x:notanumber\nalias:x:0:0::/:/bin/sh\n",
        );
        assert_eq!(name(&users, Some(0)), "root");
        assert_eq!(name(&users, Some(1000)), "alice");
        assert_eq!(name(&users, Some(4242)), "4242");
        assert_eq!(name(&users, None), "?");
        assert_eq!(users.len(), 2);
        assert!(parse_passwd("").is_empty());
    }
}
