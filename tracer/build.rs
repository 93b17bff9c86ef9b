//! Builds the eBPF object (`tracer-ebpf`) with aya-build and the dated nightly toolchain that
//! `cargo xtask setup` installs (named in `xtask/ebpf-nightly`), and places it in `OUT_DIR`
//! for `include_bytes_aligned!`.
//!
//! For editors, `cargo check` and clippy on a machine without the eBPF toolchain, set
//! `GPUTRACE_EBPF_STUB=1`: an empty object is written instead, and the binary then refuses
//! to trace with a message that says how to build it properly. Clippy runs get the stub
//! automatically. A normal build never falls back silently.
//!
//! CI's builds are linted as they compile (`cargo xtask test` sets clippy-driver as the
//! workspace's rustc wrapper and `GPUTRACE_LINTED_BUILD=1`): those get the real object, and
//! the eBPF crate's own cargo run is spared the wrapper, which belongs to the stable toolchain.
use std::{env, fs, path::PathBuf, process::Command};

use anyhow::{anyhow, Context as _};

const EBPF_PACKAGE: &str = "gputrace-ebpf";
/// The binary target name in `tracer-ebpf/Cargo.toml`; aya-build names the object after it.
const EBPF_OBJECT: &str = "gputrace";
/// The nightly that `cargo xtask setup` installs, with its rust-src and a bpf-linker built
/// against its LLVM.
const NIGHTLY: &str = include_str!("../xtask/ebpf-nightly");

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=GPUTRACE_EBPF_STUB");
    println!("cargo:rerun-if-env-changed=GPUTRACE_LINTED_BUILD");
    println!("cargo:rerun-if-changed=../xtask/ebpf-nightly");
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
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR not set")?);
    let root_dir = manifest_dir.parent().context("the workspace's folder")?.join("tracer-ebpf");
    let root_dir = root_dir.to_str().ok_or_else(|| anyhow!("the eBPF crate's path is not UTF-8: {}", root_dir.display()))?;
    // The nightly cargo that aya-build runs inherits this process's environment; aya-build
    // clears the wrapper itself, and this keeps clippy's arguments away as well.
    for wrapper in ["RUSTC_WORKSPACE_WRAPPER", "CLIPPY_ARGS"] {
        env::remove_var(wrapper);
    }
    let package = aya_build::Package { name: EBPF_PACKAGE, root_dir, ..aya_build::Package::default() };
    aya_build::build_ebpf([package], aya_build::Toolchain::Custom(NIGHTLY.trim()))?;
    strip_btf_and_debug_info(&out_dir.join(EBPF_OBJECT))
}

/// aya-build 0.2 links the object with BTF and DWARF (its `-Cdebuginfo=2 -Clink-arg=--btf`
/// cannot be turned off). Loaded with BTF, aya fixes up and loads the object's BTF and hands
/// every program its line info: gputrace's start-up took ~50 ms more on the build machine
/// (docs/benchmarks.md), and the DWARF made the object 20 times larger in the binary. The
/// object had neither before, and nothing here uses them (CO-RE relocations read the
/// kernel's BTF, not the object's): both are stripped, by the host toolchain's own
/// llvm-objcopy (`rust-objcopy`, shipped with rustc).
fn strip_btf_and_debug_info(object: &std::path::Path) -> anyhow::Result<()> {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc).args(["--print", "sysroot"]).output().context("rustc --print sysroot")?;
    anyhow::ensure!(sysroot.status.success(), "rustc --print sysroot failed");
    let sysroot = PathBuf::from(String::from_utf8(sysroot.stdout).context("the sysroot is not UTF-8")?.trim());
    let host = env::var("HOST").context("HOST not set")?;
    let objcopy = sysroot.join("lib/rustlib").join(host).join("bin/rust-objcopy");
    let status = Command::new(&objcopy)
        // Its libLLVM lies in the toolchain's lib folder, which is on no loader path of its own.
        .env("LD_LIBRARY_PATH", sysroot.join("lib"))
        .args(["--strip-debug", "--remove-section=.BTF", "--remove-section=.BTF.ext", "--remove-section=.rel.BTF", "--remove-section=.rel.BTF.ext"])
        .arg(object)
        .status()
        .with_context(|| format!("running {}", objcopy.display()))?;
    anyhow::ensure!(status.success(), "{} failed on the eBPF object: {status}", objcopy.display());
    Ok(())
}

fn which_bpf_linker() -> Option<PathBuf> {
    env::split_paths(&env::var_os("PATH")?).map(|dir| dir.join("bpf-linker")).find(|p| p.is_file())
}
