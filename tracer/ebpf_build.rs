//! The eBPF object's build: one nightly cargo run over `tracer-ebpf`, shared by
//! `tracer/build.rs` (which embeds the object) and xtask (which starts the same run at once,
//! beside the host build).
//!
//! Why xtask starts it early: inside the host build, cargo gave gputrace's build script a
//! slot only after most dependencies were compiled (130 s into a 229 s build on CI's 2 cores,
//! `cargo build --timings`, 2026-12-07), and the gputrace crate then waited the nested build's
//! 43 s with one core idle. Started by xtask at once into the same target directory, it
//! overlaps the dependencies; the build script's own run then waits on cargo's lock of that
//! directory and finds the object fresh. Without xtask (a plain `cargo build`) the build
//! script runs it alone, as before.
//!
//! The run: `rustup run NIGHTLY cargo build` of the eBPF package's binary for
//! `bpfel-unknown-none`, `-Z build-std=core` (the nightly's `rust-src`), released, with
//! `--cfg bpf_target_arch="ARCH"` (what aya-ebpf reads to pick the traced architecture's
//! register layout). No `-Cdebuginfo` and no `--btf` link argument: the object is loaded
//! without BTF (its DWARF and BTF were stripped before loading when aya-build added them:
//! `build.rs`), and dropping them spared ~5 s of CPU on the 2-core build machine
//! (`core` compiled with full debug information).

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Command,
};

/// The eBPF crate.
pub const PACKAGE: &str = "gputrace-ebpf";
/// Its binary target, after which the object is named.
pub const OBJECT: &str = "gputrace";
/// Where xtask and the build script agree to build it (under cargo's target directory);
/// a build script without it builds into its own `OUT_DIR`.
pub const TARGET_DIR_ENV: &str = "GPUTRACE_EBPF_TARGET_DIR";

/// The BPF target of a host of `endian` ("little" or "big"), as rustc names it.
#[must_use]
pub fn bpf_target(endian: &str) -> &'static str {
    if endian == "big" {
        "bpfeb-unknown-none"
    } else {
        "bpfel-unknown-none"
    }
}

/// The command that builds the object of the workspace at `workspace` into `target_dir`
/// with `nightly`, for programs that trace `arch` (`CARGO_CFG_TARGET_ARCH`'s spelling) on a
/// host of `endian`. The caller's rustc wrappers are removed: they belong to the host
/// toolchain (clippy-driver in CI's linted builds).
#[must_use]
pub fn command(workspace: &Path, nightly: &str, target_dir: &Path, arch: &str, endian: &str) -> Command {
    let mut cmd = Command::new("rustup");
    cmd.current_dir(workspace)
        .args(["run", nightly, "cargo", "build", "--package", PACKAGE, "--bins", "--release", "-Z", "build-std=core"])
        .args(["--target", bpf_target(endian), "--message-format=short"])
        .arg("--target-dir")
        .arg(target_dir);
    let mut flags = OsString::from("--cfg=bpf_target_arch=\"");
    flags.push(arch);
    flags.push("\"");
    cmd.env("CARGO_ENCODED_RUSTFLAGS", flags);
    for inherited in ["RUSTC", "RUSTC_WORKSPACE_WRAPPER", "RUSTC_WRAPPER", "CLIPPY_ARGS", "RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS"] {
        cmd.env_remove(inherited);
    }
    cmd
}

/// Where `command` leaves the object.
#[must_use]
pub fn object(target_dir: &Path, endian: &str) -> PathBuf {
    target_dir.join(bpf_target(endian)).join("release").join(OBJECT)
}
