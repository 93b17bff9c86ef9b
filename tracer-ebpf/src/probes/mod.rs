//! One file per kind of hook: CUDA launches (entry-only, counted), other CUDA calls
//! (entry + return, one record each), the task tracepoints that follow the process tree, and
//! the scheduler and block tracepoints that say what the host threads were doing.
mod bench;
mod block;
mod call;
mod launch;
mod layout;
mod sched;
mod task;
