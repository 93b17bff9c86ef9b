//! One file per kind of hook: CUDA launches (entry-only, counted), other CUDA calls
//! (entry + return, one record each), the task tracepoints that follow the process tree, and
//! the scheduler and block tracepoints that say what the host threads were doing, and the
//! CPU sampler that says which code they ran.
/// Each uprobe program twice, with one body: `$name` in a `uprobe` (or `uretprobe`) section
/// for perf-event uprobes, and `${name}_multi` in a `uprobe.multi` one for multi-uprobe links.
/// The kernel takes each kind of attachment only for a program loaded for it (the attach type
/// is fixed at load), and user space loads the copy of the kind this kernel allows
/// (`tracer/src/probes/uprobes.rs`).
macro_rules! uprobe_pair {
    ($(#[$doc:meta])* entry $name:ident($ctx:ident) $body:block) => {
        $(#[$doc])*
        #[aya_ebpf::macros::uprobe]
        pub fn $name($ctx: aya_ebpf::programs::ProbeContext) -> u32 $body

        $(#[$doc])*
        #[aya_ebpf::macros::uprobe(multi)]
        pub fn ${concat($name, _multi)}($ctx: aya_ebpf::programs::ProbeContext) -> u32 $body
    };
    ($(#[$doc:meta])* ret $name:ident($ctx:ident) $body:block) => {
        $(#[$doc])*
        #[aya_ebpf::macros::uretprobe]
        pub fn $name($ctx: aya_ebpf::programs::RetProbeContext) -> u32 $body

        $(#[$doc])*
        #[aya_ebpf::macros::uretprobe(multi)]
        pub fn ${concat($name, _multi)}($ctx: aya_ebpf::programs::RetProbeContext) -> u32 $body
    };
}

mod bench;
mod block;
mod call;
mod launch;
mod layout;
mod sample;
mod sched;
mod task;
