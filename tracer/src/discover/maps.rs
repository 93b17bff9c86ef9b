//! A pure parser for `/proc/PID/maps`. Path names are untrusted (any process can name a file
//! anything), so the parser never interprets them beyond splitting off the first five fields.

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address of the mapping.
    pub start: u64,
    /// Address one past its last byte.
    pub end: u64,
    /// `rwxp`/`rwxs` permissions.
    pub perms: [u8; 4],
    /// Offset in the file where the mapping begins, bytes.
    pub offset: u64,
    /// Device as the kernel prints it, major and minor.
    pub dev_major: u32,
    /// Minor device number (see `dev_major`).
    pub dev_minor: u32,
    /// Inode of the mapped file; 0 for anonymous memory.
    pub inode: u64,
    /// Path or pseudo-name (`[heap]`, `/dev/zero (deleted)`), empty for anonymous memory.
    pub path: String,
}

impl Mapping {
    /// Whether the mapping is shared (`s`) rather than private (`p`).
    #[must_use]
    pub fn shared(&self) -> bool {
        self.perms[3] == b's'
    }

    /// The device number of the mapped file, as `stat` gives it (`st_dev`).
    #[must_use]
    pub fn dev(&self) -> u64 {
        libc::makedev(self.dev_major, self.dev_minor)
    }

    /// Whether the mapping is executable (code).
    #[must_use]
    pub fn executable(&self) -> bool {
        self.perms[2] == b'x'
    }

    /// Whether `addr` lies in the mapping.
    #[must_use]
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }

    /// The file name part of the path (after the last `/`), without a ` (deleted)` suffix.
    #[must_use]
    pub fn file_name(&self) -> &str {
        let path = self.path.strip_suffix(" (deleted)").unwrap_or(&self.path);
        path.rsplit('/').next().unwrap_or(path)
    }

    /// Memory from `cudaHostAlloc`/`cuMemHostAlloc` (what `pin_memory()` uses) shows as a
    /// shared mapping of `/dev/zero (deleted)` (seen with driver 580, see docs/facts.md).
    /// Ordinary `MAP_SHARED|MAP_ANONYMOUS` memory looks the same, which the classification
    /// evidence says.
    #[must_use]
    pub fn looks_pinned(&self) -> bool {
        self.shared() && self.path == "/dev/zero (deleted)"
    }
}

/// Parse a whole maps file; lines that do not parse are skipped and counted.
#[must_use]
pub fn parse(text: &str) -> (Vec<Mapping>, usize) {
    let mut out = Vec::new();
    let mut bad = 0;
    for line in text.lines() {
        match parse_line(line) {
            Some(m) => out.push(m),
            None => bad += 1,
        }
    }
    (out, bad)
}

/// Parse one line: `start-end perms offset major:minor inode   path`.
#[must_use]
pub fn parse_line(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || {
        let trimmed = rest.trim_start_matches(' ');
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (f, r) = trimmed.split_at(end);
        rest = r;
        (!f.is_empty()).then_some(f)
    };
    let range = field()?;
    let perms = field()?;
    let offset = field()?;
    let dev = field()?;
    let inode = field()?;
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    let perms: [u8; 4] = perms.as_bytes().try_into().ok()?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    if end < start {
        return None;
    }
    Some(Mapping {
        start,
        end,
        perms,
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev_major: u32::from_str_radix(major, 16).ok()?,
        dev_minor: u32::from_str_radix(minor, 16).ok()?,
        inode: inode.parse().ok()?,
        // The path starts after the run of spaces that pads the inode column.
        path: rest.trim_start_matches(' ').to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_library_line() {
        let m = parse_line(
            "7f1c2a000000-7f1c2a200000 r-xp 00010000 fd:01 1234567                    /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04",
        )
        .expect("parses");
        assert_eq!(m.start, 0x7f1c_2a00_0000);
        assert_eq!(m.end, 0x7f1c_2a20_0000);
        assert!(m.executable());
        assert!(!m.shared());
        assert_eq!((m.dev_major, m.dev_minor, m.inode), (0xfd, 1, 1_234_567));
        assert_eq!(m.file_name(), "libcuda.so.580.159.04");
    }

    #[test]
    fn pinned_memory_is_a_shared_dev_zero_mapping() {
        let m = parse_line("7f0000000000-7f0000400000 rw-s 00000000 00:01 5 /dev/zero (deleted)").expect("parses");
        assert!(m.looks_pinned());
        let private = parse_line("7f0000000000-7f0000400000 rw-p 00000000 00:00 0").expect("parses");
        assert!(!private.looks_pinned());
        assert_eq!(private.path, "");
    }

    #[test]
    fn hostile_paths_stay_opaque() {
        // Spaces, a fake " (deleted)" and newlines-free junk in the name are kept verbatim.
        let m = parse_line("1000-2000 r-xp 0 08:01 9 /tmp/evil lib libcuda.so.1 (deleted)").expect("parses");
        assert_eq!(m.path, "/tmp/evil lib libcuda.so.1 (deleted)");
        assert_eq!(m.file_name(), "evil lib libcuda.so.1");
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for line in ["", "zz", "1000-2000", "2000-1000 r-xp 0 08:01 9 /x", "1000-2000 rwx 0 08:01 9", "1000-2000 r-xp 0 0801 9 /x"] {
            assert!(parse_line(line).is_none(), "{line:?}");
        }
        let (maps, bad) = parse("1000-2000 r-xp 0 08:01 9 /x\nnonsense\n");
        assert_eq!((maps.len(), bad), (1, 1));
    }
}
