//! One file per kind of hook: CUDA launches (entry-only, counted), other CUDA calls
//! (entry + return, one record each), and the task tracepoints that follow the process tree.
mod call;
mod launch;
mod task;
