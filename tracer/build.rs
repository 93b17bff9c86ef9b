//! Builds the eBPF object (`tracer-ebpf`) with the dated nightly toolchain that `cargo xtask
//! setup` installs (named in `xtask/ebpf-nightly`) and bpf-linker, and places it in `OUT_DIR`
//! for `include_bytes_aligned!`. The nightly run itself is in `ebpf_build.rs`, which xtask
//! shares to start it early (that file says why).
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

#[path = "ebpf_build.rs"]
mod ebpf_build;

/// The nightly that `cargo xtask setup` installs, with its rust-src and a bpf-linker built
/// against its LLVM.
const NIGHTLY: &str = include_str!("../xtask/ebpf-nightly");

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=GPUTRACE_EBPF_STUB");
    println!("cargo:rerun-if-env-changed=GPUTRACE_LINTED_BUILD");
    println!("cargo:rerun-if-env-changed={}", ebpf_build::TARGET_DIR_ENV);
    println!("cargo:rerun-if-changed=../xtask/ebpf-nightly");
    println!("cargo:rerun-if-changed=ebpf_build.rs");
    // The programs and the wire types they share with user space: a change to either is a
    // new object.
    println!("cargo:rerun-if-changed=../tracer-ebpf");
    println!("cargo:rerun-if-changed=../tracer-common");
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR not set")?);
    let object_out = out_dir.join(ebpf_build::OBJECT);
    let under_clippy = env::var("RUSTC_WORKSPACE_WRAPPER").is_ok_and(|w| w.contains("clippy"));
    let linted_build = env::var_os("GPUTRACE_LINTED_BUILD").is_some();
    if env::var_os("GPUTRACE_EBPF_STUB").is_some() || (under_clippy && !linted_build) {
        fs::write(&object_out, []).context("writing the eBPF stub")?;
        return Ok(());
    }
    if which_bpf_linker().is_none() {
        return Err(anyhow!(
            "bpf-linker is not on PATH: run `cargo xtask setup` once (it installs the nightly's \
             rust-src and a bpf-linker built against the nightly's LLVM), then build again"
        ));
    }
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR not set")?);
    let workspace = manifest_dir.parent().context("the workspace's folder")?;
    // Built by the run that xtask may have started already into the agreed directory; cargo's
    // lock on that directory makes this run wait for that one and find the object fresh.
    // Otherwise it is built here, into OUT_DIR.
    let target_dir = env::var_os(ebpf_build::TARGET_DIR_ENV).map_or_else(|| out_dir.join("ebpf-target"), PathBuf::from);
    let arch = env::var("CARGO_CFG_TARGET_ARCH").context("CARGO_CFG_TARGET_ARCH not set")?;
    let endian = env::var("CARGO_CFG_TARGET_ENDIAN").context("CARGO_CFG_TARGET_ENDIAN not set")?;
    let mut build = ebpf_build::command(workspace, NIGHTLY.trim(), &target_dir, &arch, &endian);
    // Its messages go to our stderr, which cargo shows when the build fails; our stdout is
    // read by cargo as directives.
    build.stdout(std::io::stderr());
    let status = build.status().with_context(|| format!("running {build:?}"))?;
    anyhow::ensure!(status.success(), "building the eBPF object failed ({status}): {build:?}");
    let object = ebpf_build::object(&target_dir, &endian);
    fs::copy(&object, &object_out).with_context(|| format!("copying {} into OUT_DIR", object.display()))?;
    strip_debug_info(&object_out)
}

/// The eBPF crate's debug information (and any BTF a linker left) is stripped: loaded with
/// BTF, aya fixes up and loads the object's BTF and hands every program its line info, which
/// cost gputrace's start-up ~50 ms on the build machine (docs/benchmarks.md), and DWARF made
/// the object 20 times larger in the binary. Nothing here uses them (the programs read
/// offsets placed from the kernel's BTF by user space, not CO-RE relocations). The host
/// toolchain's own llvm-objcopy (`rust-objcopy`, shipped with rustc) does it.
fn strip_debug_info(object: &std::path::Path) -> anyhow::Result<()> {
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
