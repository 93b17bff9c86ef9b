//! Tracepoint field offsets for the kernel programs, read from tracefs format files: the
//! layouts change between kernels (`rwbs` grew from 8 to 10 bytes in 6.x), so nothing is
//! assumed that the running kernel can tell us.

use gputrace_common::Layout;

/// A tracepoint's format text, by category and name (`None` if it does not exist).
pub trait Formats {
    fn format(&self, category: &str, name: &str) -> Option<String>;
}

/// Offset and size of a field.
fn field(format: &str, name: &str) -> Option<(u32, u32)> {
    let offset = super::tracefs::field_offset(format, name)?;
    let size = format.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?;
        let (decl, rest) = decl.split_once(';')?;
        (decl.split_whitespace().last()?.split('[').next()? == name)
            .then(|| rest.split(';').find_map(|kv| kv.trim().strip_prefix("size:")?.trim().parse().ok()))?
    })?;
    Some((offset, size))
}

/// The layout of the running kernel; fields it does not describe keep their defaults, and
/// each such field is named in the returned list.
pub fn read(formats: &dyn Formats) -> (Layout, Vec<String>) {
    let mut l = Layout::DEFAULT;
    let mut missing = Vec::new();
    let mut set = |category: &str, name: &str, fields: &mut [(&str, &mut u32)]| {
        let Some(fmt) = formats.format(category, name) else {
            missing.push(format!("{category}:{name}"));
            return;
        };
        for (f, slot) in fields.iter_mut() {
            match field(&fmt, f) {
                Some((offset, _)) => **slot = offset,
                None => missing.push(format!("{category}:{name}.{f}")),
            }
        }
    };
    set(
        "sched",
        "sched_switch",
        &mut [("prev_pid", &mut l.switch_prev_pid), ("prev_state", &mut l.switch_prev_state), ("next_pid", &mut l.switch_next_pid)],
    );
    set("sched", "sched_wakeup", &mut [("pid", &mut l.wakeup_pid)]);
    set(
        "block",
        "block_rq_issue",
        &mut [("dev", &mut l.rq_dev), ("sector", &mut l.rq_sector), ("bytes", &mut l.rq_bytes), ("rwbs", &mut l.rq_rwbs)],
    );
    set(
        "block",
        "block_rq_complete",
        &mut [("dev", &mut l.done_dev), ("sector", &mut l.done_sector), ("nr_sector", &mut l.done_nr_sector), ("error", &mut l.done_error)],
    );
    if let Some((_, size)) = formats.format("sched", "sched_switch").and_then(|f| field(&f, "prev_state")) {
        l.switch_prev_state_size = size;
    }
    (l, missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(&'static [(&'static str, &'static str)]);
    impl Formats for Fake {
        fn format(&self, category: &str, name: &str) -> Option<String> {
            let key = format!("{category}:{name}");
            self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn reads_an_old_kernel_layout() {
        // A 5.4-era sched_switch with a 4-byte prev_state, and an 8-byte rwbs.
        let fake = Fake(&[
            (
                "sched:sched_switch",
                "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\n\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\n\
                 \tfield:int prev_prio;\toffset:28;\tsize:4;\n\tfield:unsigned int prev_state;\toffset:32;\tsize:4;\n\
                 \tfield:char next_comm[16];\toffset:36;\tsize:16;\n\tfield:pid_t next_pid;\toffset:52;\tsize:4;\n",
            ),
            ("sched:sched_wakeup", "\tfield:pid_t pid;\toffset:24;\tsize:4;\n"),
            (
                "block:block_rq_issue",
                "\tfield:dev_t dev;\toffset:8;\tsize:4;\n\tfield:sector_t sector;\toffset:16;\tsize:8;\n\
                 \tfield:unsigned int nr_sector;\toffset:24;\tsize:4;\n\tfield:unsigned int bytes;\toffset:28;\tsize:4;\n\
                 \tfield:char rwbs[8];\toffset:32;\tsize:8;\n",
            ),
        ]);
        let (l, missing) = read(&fake);
        assert_eq!((l.switch_prev_state, l.switch_prev_state_size, l.switch_next_pid), (32, 4, 52));
        assert_eq!(l.rq_rwbs, 32);
        assert_eq!(missing, vec!["block:block_rq_complete".to_owned()]);
        assert_eq!(l.done_error, Layout::DEFAULT.done_error, "missing fields keep their defaults");
    }
}
