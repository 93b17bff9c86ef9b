//! tracefs: where the kernel publishes tracepoint ids and record layouts. Classic tracepoints
//! need it for their ids; it is not mounted on a fresh machine (docs/facts.md), so it is mounted
//! here when missing. Layouts are read, not assumed, because they change between kernels.

use std::{fs, path::PathBuf};

/// Why there are no tracepoints: the notes say it, once for each group left out.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// A sweep watches every process's CUDA calls and attaches no tracepoint at all.
    #[error("no tracepoints are attached in a sweep")]
    Sweep,
    /// Without tracefs the tracepoints cannot be named; mounting it was tried and refused.
    #[error(
        "tracefs is not mounted and mounting it at /sys/kernel/tracing failed ({0}); \
         mount it with `mount -t tracefs nodev /sys/kernel/tracing`"
    )]
    MountFailed(std::io::Error),
}

/// The tracefs root, mounting it at `/sys/kernel/tracing` if no mount is found.
pub fn ensure_mounted() -> Result<PathBuf, Unavailable> {
    for root in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        if fs::metadata(format!("{root}/events")).is_ok() {
            return Ok(root.into());
        }
    }
    rustix::mount::mount(c"nodev", c"/sys/kernel/tracing", c"tracefs", rustix::mount::MountFlags::empty(), None::<&std::ffi::CStr>)
        .map_err(|e| Unavailable::MountFailed(e.into()))?;
    log::info!("mounted tracefs at /sys/kernel/tracing (it was not mounted)");
    Ok("/sys/kernel/tracing".into())
}

/// Offset of `field` in a tracepoint's format text, or `None` if it has no such field.
#[must_use]
pub fn field_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?;
        let (decl, rest) = decl.split_once(';')?;
        // The declaration ends with the name, possibly followed by an array size: `char comm[16]`.
        let name = decl.split_whitespace().last()?.split('[').next()?;
        if name != field {
            return None;
        }
        rest.split(';').find_map(|kv| kv.trim().strip_prefix("offset:")?.trim().parse().ok())
    })
}

/// Read a tracepoint's format file.
pub fn format(root: &std::path::Path, category: &str, name: &str) -> std::io::Result<String> {
    fs::read_to_string(root.join("events").join(category).join(name).join("format"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEWTASK: &str = "name: task_newtask\nID: 140\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:pid_t pid;\toffset:8;\tsize:4;\tsigned:1;\n\
\tfield:char comm[16];\toffset:12;\tsize:16;\tsigned:0;\n\
\tfield:unsigned long clone_flags;\toffset:32;\tsize:8;\tsigned:0;\n";

    #[test]
    fn reads_field_offsets() {
        assert_eq!(field_offset(NEWTASK, "pid"), Some(8));
        assert_eq!(field_offset(NEWTASK, "comm"), Some(12));
        assert_eq!(field_offset(NEWTASK, "clone_flags"), Some(32));
        assert_eq!(field_offset(NEWTASK, "common_pid"), Some(4));
        assert_eq!(field_offset(NEWTASK, "nope"), None);
        assert_eq!(field_offset("", "pid"), None);
    }
}
