//! Finding what to trace: processes of the target tree, the CUDA driver libraries they map
//! (by the inode actually mapped), and the file offsets of the symbols to probe.
pub mod cgroup;
pub mod cpus;
pub mod files;
pub mod kallsyms;
pub mod libraries;
pub mod maps;
pub mod process;
pub mod procfs;
pub mod symbols;
pub mod trust;
