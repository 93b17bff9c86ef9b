//! One file per kind of hook: CUDA launches (entry-only, counted), other CUDA calls
//! (entry + return, one record each), the task tracepoints that follow the process tree, and
//! the scheduler and block tracepoints that say what the host threads were doing, and the
//! CPU sampler that says which code they ran.
mod bench;
mod block;
mod call;
mod launch;
mod layout;
mod sample;
mod sched;
mod task;
