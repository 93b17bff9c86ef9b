//! Builds the eBPF object (`tracer-ebpf`) with aya-build and the nightly toolchain that
//! `cargo xtask setup` installs, and places it in `OUT_DIR` for `include_bytes_aligned!`.
//!
//! For editors, `cargo check` and clippy on a machine without the eBPF toolchain, set
//! `GPUTRACE_EBPF_STUB=1`: an empty object is written instead, and the binary then refuses
//! to trace with a message that says how to build it properly. Clippy runs get the stub
//! automatically. A normal build never falls back silently.
//!
//! CI's builds are linted as they compile (`cargo xtask test` sets clippy-driver as the
//! workspace's rustc wrapper and `GPUTRACE_LINTED_BUILD=1`): those get the real object, and
//! the eBPF crate's own cargo run is spared the wrapper, which belongs to the stable toolchain.
use std::{env, fs, path::PathBuf};

use anyhow::{anyhow, Context as _};
use aya_build::cargo_metadata;

const EBPF_PACKAGE: &str = "gputrace-ebpf";
/// The binary target name in `tracer-ebpf/Cargo.toml`; aya-build names the object after it.
const EBPF_OBJECT: &str = "gputrace";

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=GPUTRACE_EBPF_STUB");
    println!("cargo:rerun-if-env-changed=GPUTRACE_LINTED_BUILD");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR not set")?);
    let under_clippy = env::var("RUSTC_WORKSPACE_WRAPPER").is_ok_and(|w| w.contains("clippy"));
    let linted_build = env::var_os("GPUTRACE_LINTED_BUILD").is_some();
    if env::var_os("GPUTRACE_EBPF_STUB").is_some() || (under_clippy && !linted_build) {
        fs::write(out_dir.join(EBPF_OBJECT), []).context("writing the eBPF stub")?;
        return Ok(());
    }
    if which_bpf_linker().is_none() {
        return Err(anyhow!(
            "bpf-linker is not on PATH: run `cargo xtask setup` once (it installs the nightly's \
             rust-src and a bpf-linker built against the nightly's LLVM), then build again"
        ));
    }
    let cargo_metadata::Metadata { packages, .. } = cargo_metadata::MetadataCommand::new().no_deps().exec().context("cargo metadata")?;
    let ebpf = packages.into_iter().find(|p| p.name == EBPF_PACKAGE).ok_or_else(|| anyhow!("{EBPF_PACKAGE} is not a workspace member"))?;
    // The nightly cargo that aya-build runs inherits this process's environment; aya-build
    // clears the wrapper itself, and this keeps clippy's arguments away as well.
    for wrapper in ["RUSTC_WORKSPACE_WRAPPER", "CLIPPY_ARGS"] {
        env::remove_var(wrapper);
    }
    aya_build::build_ebpf([ebpf])
}

fn which_bpf_linker() -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?).map(|dir| dir.join("bpf-linker")).find(|p| p.is_file())
}
