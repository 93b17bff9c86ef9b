//! The eBPF toolchain, pinned in one place.
//!
//! Why these move together: aya-ebpf programs are compiled by a dated **nightly** toolchain
//! (`-Z build-std=core` for `bpfel-unknown-none` needs its `rust-src`), which emits LLVM
//! bitcode of the nightly's LLVM (22 here); **bpf-linker** links that bitcode with its own
//! LLVM, so it must be built against the very same LLVM — the nightly's `libLLVM.so`.
//! Change the nightly and bpf-linker must be rebuilt (and `BPF_LINKER_LLVM_FEATURE` may
//! change); change bpf-linker's version and check it supports that LLVM.
//! The aya crate versions that go with them are pinned in the workspace Cargo.toml; aya-ebpf
//! 0.3 declares rust-version 1.98, which the machines' own nightly (1.97, 2026-05-19) is not,
//! so the nightly is a dated one, named in `xtask/ebpf-nightly` (read by `tracer/build.rs`
//! too). Its LLVM is still 22 (22.1.7), which bpf-linker 0.13 takes.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

const BPF_LINKER_VERSION: &str = "0.13.0";
/// The cargo feature of bpf-linker that selects the nightly's LLVM major version.
const BPF_LINKER_LLVM_FEATURE: &str = "llvm-22";
/// The dated nightly that builds the eBPF object (and runs the fuzzers).
pub const NIGHTLY: &str = include_str!("../ebpf-nightly").trim_ascii();

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn home() -> PathBuf {
    env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from)
}

/// Where the link to the nightly's LLVM lives; bpf-linker's rpath points here, so it lasts.
fn llvm_prefix() -> PathBuf {
    home().join(".local/share/gputrace/llvm")
}

pub fn setup() -> Result<()> {
    if output(Command::new("rustc").args([&format!("+{NIGHTLY}"), "--version"])).is_none() {
        eprintln!("setup: installing the {NIGHTLY} toolchain (with rust-src)");
        let status = Command::new("rustup")
            .args(["toolchain", "install", NIGHTLY, "--profile", "minimal", "--component", "rust-src"])
            .status()?;
        if !status.success() {
            bail!("`rustup toolchain install {NIGHTLY}` failed");
        }
    }
    let sysroot = output(Command::new("rustc").args([&format!("+{NIGHTLY}"), "--print", "sysroot"]))
        .with_context(|| format!("the {NIGHTLY} toolchain is missing: install it with `rustup toolchain install {NIGHTLY}`"))?;
    let sysroot = PathBuf::from(sysroot.trim());
    if !sysroot.join("lib/rustlib/src/rust/library/core").exists() {
        eprintln!("setup: adding rust-src to the nightly toolchain");
        let status = Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", NIGHTLY]).status()?;
        if !status.success() {
            bail!("`rustup component add rust-src --toolchain {NIGHTLY}` failed");
        }
    }
    let installed = output(Command::new("bpf-linker").arg("--version")).unwrap_or_default();
    if installed.contains(BPF_LINKER_VERSION) {
        return Ok(());
    }
    let llvm = find_llvm(&sysroot)?;
    let prefix = llvm_prefix();
    fs::create_dir_all(prefix.join("lib"))?;
    let name = llvm.file_name().context("LLVM library has a name")?;
    for link in [prefix.join("lib/libLLVM.so"), prefix.join("lib").join(name)] {
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(&llvm, &link).with_context(|| format!("linking {}", link.display()))?;
    }
    eprintln!("setup: building bpf-linker {BPF_LINKER_VERSION} against {} (about half a minute)", llvm.display());
    // Unoptimized: bpf-linker is glue around the nightly's LLVM, which does the work, already
    // optimized. On 2 cores the debug build took 25 s where the release one took about 100 s,
    // and the eBPF object it links is byte for byte the same (2026-12-04).
    let status = Command::new("cargo")
        .env("LLVM_PREFIX", &prefix)
        .args([
            "install",
            &format!("bpf-linker@{BPF_LINKER_VERSION}"),
            "--debug",
            "--locked",
            "--no-default-features",
            "--features",
            BPF_LINKER_LLVM_FEATURE,
        ])
        .status()?;
    if !status.success() {
        bail!("building bpf-linker failed");
    }
    Ok(())
}

/// The nightly's own `libLLVM.so.*`.
fn find_llvm(sysroot: &Path) -> Result<PathBuf> {
    let lib = sysroot.join("lib");
    fs::read_dir(&lib)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libLLVM") && n.contains(".so")))
        .with_context(|| format!("no libLLVM in {}: is the nightly complete?", lib.display()))
}

/// Headless Chromium, which the HTML page's test opens the page in (tests/tests/html.rs):
/// Debian's package, installed when missing.
pub fn browser() -> Result<()> {
    if env::var_os("GPUTRACE_CHROMIUM").is_some() || Path::new("/usr/bin/chromium").exists() {
        return Ok(());
    }
    eprintln!("setup: installing Debian's chromium for the HTML page's test");
    // Quietly: it runs beside the build (`cargo xtask test`), whose log it would interleave;
    // what apt said is printed where it fails.
    let install = || Command::new("apt-get").env("DEBIAN_FRONTEND", "noninteractive").args(["install", "-y", "-qq", "chromium"]).output();
    let first = install()?;
    if !first.status.success() {
        // A fresh machine may have no package lists yet.
        let _ = Command::new("apt-get").args(["update", "-qq"]).output()?;
        let second = install()?;
        if !second.status.success() {
            bail!(
                "installing chromium failed ({}): install it (`apt-get install chromium`) or point GPUTRACE_CHROMIUM at a Chromium\n{}",
                second.status,
                String::from_utf8_lossy(&second.stderr)
            );
        }
    }
    Ok(())
}
