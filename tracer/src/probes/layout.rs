//! What the raw tracepoints read, placed for the running kernel: member offsets from its BTF
//! into the object's `LAYOUT` global, and each tracepoint's argument count checked against the
//! one its program is written for. Nothing is assumed that the kernel can tell us: the layouts
//! change between kernels and configurations (`task_struct` is randomized on some).

use gputrace_common::Layout;

use super::btf::Btf;

/// The kernel's layout, with what it lacks said in words.
#[derive(Clone, Debug)]
pub struct KernelLayout {
    /// The offsets, `Layout::NONE` for what the kernel lacks.
    pub layout: Layout,
    /// `struct.member`s this kernel does not have.
    pub missing: Vec<String>,
    /// Argument counts of the tracepoints gputrace attaches, where the kernel has them.
    args: Vec<(&'static str, usize)>,
}

/// The tracepoints read, and how many arguments each program is written for (empty: it reads
/// none of them).
const ARGUMENTS: &[(&str, &[usize])] = &[
    ("task_newtask", &[2]),
    ("sched_process_exec", &[]),
    ("sched_process_exit", &[]),
    // `prev_state` became the fourth argument in 5.18.
    ("sched_switch", &[3, 4]),
    ("sched_wakeup", &[1]),
    ("sched_wakeup_new", &[1]),
    ("sched_waking", &[1]),
    ("block_rq_insert", &[1]),
    ("block_rq_issue", &[1]),
    ("block_io_start", &[1]),
    ("block_rq_complete", &[3]),
];

/// The layout of the kernel `btf` describes.
#[must_use]
pub fn read(btf: &Btf) -> KernelLayout {
    let mut missing = Vec::new();
    let mut at = |structure: &str, member: &str| {
        let Some(m) = btf.member(structure, member) else {
            missing.push(format!("{structure}.{member}"));
            return (Layout::NONE, 0);
        };
        (m.offset, btf.size_of(m.type_id).unwrap_or(0))
    };
    let mut l = Layout::UNKNOWN;
    l.task_pid = at("task_struct", "pid").0;
    l.task_exit_state = at("task_struct", "exit_state").0;
    // `long state` until 5.14, `unsigned int __state` since.
    let (state, size) = match btf.member("task_struct", "__state") {
        Some(m) => (m.offset, btf.size_of(m.type_id).unwrap_or(0)),
        None => at("task_struct", "state"),
    };
    (l.task_state, l.task_state_size) = (state, size);
    l.switch_passes_state = u32::from(btf.tracepoint_args("sched_switch") == Some(4));
    // The request's disk: through its queue since 5.16 (`rq_disk` went), directly before.
    if btf.member("request", "rq_disk").is_some() {
        l.rq_disk = at("request", "rq_disk").0;
    } else {
        l.rq_q = at("request", "q").0;
        l.queue_disk = at("request_queue", "disk").0;
    }
    l.disk_major = at("gendisk", "major").0;
    l.disk_first_minor = at("gendisk", "first_minor").0;
    l.rq_sector = at("request", "__sector").0;
    l.rq_data_len = at("request", "__data_len").0;
    l.rq_cmd_flags = at("request", "cmd_flags").0;
    let args = ARGUMENTS.iter().filter_map(|(tp, _)| Some((*tp, btf.tracepoint_args(tp)?))).collect();
    KernelLayout { layout: l, missing, args }
}

/// What a group of tracepoints needs of the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Task pids: following children, wakeups.
    Tasks,
    /// Task pids and states: the scheduler's accounting.
    Scheduler,
    /// A request's disk, sector, size and operation.
    Requests,
}

impl KernelLayout {
    /// Why `tracepoints` cannot be read on this kernel, if they cannot: a member they need
    /// that it lacks, or an argument count their programs are not written for.
    #[must_use]
    pub fn unreadable(&self, tracepoints: &[&str], needs: Needs) -> Option<String> {
        let l = &self.layout;
        let known = |offsets: &[u32]| offsets.iter().all(|o| *o != Layout::NONE);
        let readable = match needs {
            Needs::Tasks => known(&[l.task_pid]),
            Needs::Scheduler => known(&[l.task_pid, l.task_exit_state]) && (l.switch_passes_state == 1 || (known(&[l.task_state]) && matches!(l.task_state_size, 4 | 8))),
            Needs::Requests => {
                let disk = known(&[l.rq_disk]) || known(&[l.rq_q, l.queue_disk]);
                disk && known(&[l.disk_major, l.disk_first_minor, l.rq_sector, l.rq_data_len, l.rq_cmd_flags])
            }
        };
        if !readable {
            return Some(format!("this kernel's BTF does not describe what they read (missing: {})", self.missing.join(", ")));
        }
        for tp in tracepoints {
            let written_for = ARGUMENTS.iter().find(|(t, _)| t == tp).map_or(&[][..], |(_, n)| *n);
            if let Some((_, n)) = self.args.iter().find(|(t, _)| t == tp) {
                if !written_for.is_empty() && !written_for.contains(n) {
                    return Some(format!("{tp} passes {n} arguments on this kernel; gputrace reads it as passing {written_for:?}"));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::btf::tests::Builder;
    use super::*;

    /// A kernel of 6.x shape: `__state`, the queue's disk, a four-argument `sched_switch`.
    fn six(b: &mut Builder, switch_args: usize) -> Vec<u8> {
        let int = b.int("int", 4);
        let uint = b.int("unsigned int", 4);
        let u64t = b.int("u64", 8);
        let task = b.structure("task_struct", false, 4096, &[("__state", uint, 24), ("exit_state", int, 1200), ("pid", int, 1480)]);
        let disk = b.structure("gendisk", false, 512, &[("major", int, 0), ("first_minor", int, 4)]);
        let disk_ptr = b.pointer(disk);
        let queue = b.structure("request_queue", false, 1024, &[("disk", disk_ptr, 96)]);
        let queue_ptr = b.pointer(queue);
        let rq = b.structure("request", false, 300, &[("q", queue_ptr, 0), ("cmd_flags", uint, 24), ("__data_len", uint, 40), ("__sector", u64t, 48)]);
        let task_ptr = b.pointer(task);
        let rq_ptr = b.pointer(rq);
        let boolean = b.int("_Bool", 1);
        let switch: Vec<u32> = [boolean, task_ptr, task_ptr, uint].into_iter().take(switch_args).collect();
        b.tracepoint("sched_switch", &switch);
        b.tracepoint("block_rq_issue", &[rq_ptr]);
        b.tracepoint("block_rq_complete", &[rq_ptr, int, uint]);
        b.build()
    }

    #[test]
    fn a_six_series_kernel_is_read_whole() {
        let k = read(&Btf::parse(six(&mut Builder::new(), 4)).expect("parses"));
        let l = k.layout;
        assert_eq!((l.task_pid, l.task_exit_state, l.task_state, l.task_state_size, l.switch_passes_state), (1480, 1200, 24, 4, 1));
        assert_eq!((l.rq_q, l.queue_disk, l.rq_disk), (0, 96, Layout::NONE));
        assert_eq!((l.disk_major, l.disk_first_minor, l.rq_sector, l.rq_data_len, l.rq_cmd_flags), (0, 4, 48, 40, 24));
        assert!(k.missing.is_empty(), "{:?}", k.missing);
        for needs in [Needs::Tasks, Needs::Scheduler, Needs::Requests] {
            assert_eq!(k.unreadable(&["sched_switch", "block_rq_issue", "block_rq_complete"], needs), None);
        }
    }

    #[test]
    fn an_older_sched_switch_reads_the_state_from_the_task() {
        let k = read(&Btf::parse(six(&mut Builder::new(), 3)).expect("parses"));
        assert_eq!(k.layout.switch_passes_state, 0);
        assert_eq!(k.unreadable(&["sched_switch"], Needs::Scheduler), None);
    }

    #[test]
    fn what_a_kernel_lacks_turns_its_group_off_with_the_reason() {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        let task = b.structure("task_struct", false, 64, &[("pid", int, 8)]);
        let task_ptr = b.pointer(task);
        b.tracepoint("sched_waking", &[task_ptr, int]);
        let k = read(&Btf::parse(b.build()).expect("parses"));
        assert_eq!(k.layout.task_pid, 8);
        assert_eq!(k.unreadable(&["task_newtask"], Needs::Tasks), None);
        let why = k.unreadable(&["sched_switch"], Needs::Scheduler).expect("no exit_state");
        assert!(why.contains("task_struct.exit_state"), "{why}");
        let why = k.unreadable(&["block_rq_issue"], Needs::Requests).expect("no request");
        assert!(why.contains("request.__sector"), "{why}");
        let why = k.unreadable(&["sched_waking"], Needs::Tasks).expect("two arguments");
        assert!(why.contains("sched_waking passes 2 arguments"), "{why}");
    }

    #[test]
    fn this_kernel_is_read_whole() {
        let Ok(Ok(btf)) = Btf::kernel() else { return };
        let k = read(&btf);
        for needs in [Needs::Tasks, Needs::Scheduler, Needs::Requests] {
            let all: Vec<&str> = ARGUMENTS.iter().map(|(t, _)| *t).collect();
            assert_eq!(k.unreadable(&all, needs), None, "{:?}", k.missing);
        }
    }
}
