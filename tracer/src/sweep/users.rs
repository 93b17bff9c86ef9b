//! Who owns a process: user names through the C library's NSS lookup (`getpwuid_r`, so
//! LDAP and SSSD users resolve as `ls -l` shows them, not only `/etc/passwd`), each uid once
//! per sweep. A uid with no entry (a container's user) is shown as its number.

use std::collections::HashMap;

use nix::unistd::{Uid, User};

/// uid → name for each of `uids` that NSS knows.
#[must_use]
pub fn resolve(uids: impl IntoIterator<Item = u32>) -> HashMap<u32, String> {
    let mut out = HashMap::new();
    // Each uid is asked once, found or not: a miss may have waited on an LDAP timeout.
    let mut asked = std::collections::HashSet::new();
    for uid in uids {
        if !asked.insert(uid) {
            continue;
        }
        // An error (NSS unreachable) or no entry both leave the number.
        if let Ok(Some(user)) = User::from_uid(Uid::from_raw(uid)) {
            out.insert(uid, user.name);
        }
    }
    out
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
        // uid 0 is root on every system NSS serves; 4242424 is nobody's.
        let users = resolve([0, 0, 4_242_424]);
        assert_eq!(name(&users, Some(0)), "root");
        assert_eq!(name(&users, Some(4_242_424)), "4242424");
        assert_eq!(name(&users, None), "?");
        assert_eq!(users.len(), 1);
    }
}
