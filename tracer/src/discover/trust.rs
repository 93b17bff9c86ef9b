//! Whose library files root may parse and probe.
//!
//! A library is found by its file name in any process's memory map, so any user can offer
//! root a file called `libcuda.so.1`: root would parse it (the ELF reader trusts its headers)
//! and put uprobes in it for the rest of the session. Only files owned by root, or by the
//! user gputrace works for (who may trace their own job's libraries, such as an NCCL in their
//! virtual environment), are taken; their size is capped as well (issue 56).

use std::path::Path;

use crate::error::{Result, TraceError};

/// The largest library file probed. libcuda 580 is about 100 MB and NCCL 2.28 under 300 MB;
/// a file of gigabytes named like one is a sparse decoy, not a driver.
pub const MAX_LIBRARY_FILE_BYTES: u64 = 2 << 30;

/// The user gputrace works for: the one who ran `sudo gputrace` (`SUDO_UID`) when it runs as
/// root, else the user it runs as.
#[must_use]
pub fn invoking_uid() -> u32 {
    invoker(rustix::process::geteuid().as_raw(), std::env::var("SUDO_UID").ok().as_deref())
}

/// Pure part of [`invoking_uid`]. `SUDO_UID` counts only for root: anyone else could set it.
#[must_use]
pub fn invoker(euid: u32, sudo_uid: Option<&str>) -> u32 {
    if euid != 0 {
        return euid;
    }
    sudo_uid.and_then(|u| u.trim().parse().ok()).unwrap_or(0)
}

/// Whether root may parse and probe a library file owned by `owner` of `size` bytes, for
/// `invoker`. `library`: its name, for the error.
pub fn check(library: &Path, owner: u32, size: u64, invoker: u32) -> Result<()> {
    if owner != 0 && owner != invoker {
        return Err(TraceError::UntrustedLibrary { library: library.to_owned(), owner, invoker });
    }
    if size > MAX_LIBRARY_FILE_BYTES {
        return Err(TraceError::LibraryTooLarge { library: library.to_owned(), size, limit: MAX_LIBRARY_FILE_BYTES });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sudo_uid_names_the_invoker_only_for_root() {
        assert_eq!(invoker(0, None), 0);
        assert_eq!(invoker(0, Some("1000")), 1000);
        assert_eq!(invoker(0, Some("nonsense")), 0);
        // A plain user cannot make gputrace trust someone else by setting the variable.
        assert_eq!(invoker(1000, Some("65534")), 1000);
    }

    #[test]
    fn only_root_and_the_invoker_own_probed_libraries() {
        let lib = Path::new("/home/nobody/libcuda.so.1");
        assert!(check(lib, 0, 100 << 20, 0).is_ok());
        assert!(check(lib, 1000, 100 << 20, 1000).is_ok(), "a user's own NCCL, traced under sudo");
        let e = check(lib, 65534, 100 << 20, 0).expect_err("nobody's file, root's sweep");
        assert!(matches!(e, TraceError::UntrustedLibrary { owner: 65534, invoker: 0, .. }), "{e}");
        assert!(matches!(check(lib, 65534, 1, 1000), Err(TraceError::UntrustedLibrary { .. })));
        let e = check(lib, 0, 24 << 30, 0).expect_err("the issue's sparse 24 GB file");
        assert!(matches!(e, TraceError::LibraryTooLarge { size, .. } if size == 24 << 30), "{e}");
        assert!(check(lib, 0, MAX_LIBRARY_FILE_BYTES, 0).is_ok());
    }
}
