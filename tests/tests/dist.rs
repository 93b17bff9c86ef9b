//! The release artifacts (`cargo xtask dist`, which `cargo xtask test` runs first): the
//! tarball's binary traces a job from a bare directory with no Rust toolchain on `PATH`, its
//! glibc floor is the one docs/install.md states, and the `.deb` installs and removes cleanly
//! (into a scratch root, never the host's own package database).
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use gputrace_tests::{hits, require_root, Gated};

/// `target/dist` of the workspace, or of `CARGO_TARGET_DIR` where set (relative to the
/// workspace, as cargo and xtask take it): a run with it set looked in `target/` and failed.
fn dist_dir() -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()).map_or_else(|| workspace.join("target"), |d| workspace.join(d));
    let dir = target.join("dist");
    assert!(dir.is_dir(), "{} is missing: run `cargo xtask dist` (cargo xtask test does)", dir.display());
    dir
}

fn one_with_suffix(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dist dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(suffix)))
        .collect();
    assert_eq!(found.len(), 1, "one *{suffix} in {}: {found:?}", dir.display());
    found.into_iter().next().expect("one")
}

fn scratch(name: &str) -> gputrace_tests::Scratch {
    gputrace_tests::scratch("dist", name)
}

#[test]
fn the_tarball_traces_a_job_without_any_toolchain() {
    require_root();
    let tarball = one_with_suffix(&dist_dir(), ".tar.gz");
    let dir = scratch("tarball");
    let status = Command::new("tar").arg("-C").arg(&dir).arg("-xzf").arg(&tarball).status().expect("tar");
    assert!(status.success());
    let unpacked = std::fs::read_dir(&dir).expect("unpacked").next().expect("one folder").expect("entry").path();
    for file in ["gputrace", "README.md", "LICENSE", "man/gputrace.1", "completions/gputrace.bash", "completions/_gputrace", "completions/gputrace.fish"] {
        assert!(unpacked.join(file).is_file(), "{file} in the tarball");
    }
    // No cargo, no rustc: only the system's own folders on PATH, and an empty environment.
    let mut job = Gated::start(&["--steps", "20", "--driver-launches", "10", "--sync"]);
    let tracer = gputrace_tests::Tracer::start(
        Command::new(unpacked.join("gputrace"))
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .args(["-v", "attach", "--json", "--pid"])
            .arg(job.pid.to_string()),
    );
    job.release();
    job.finish();
    let (r, code, stderr) = tracer.report();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(hits(&r, "cuLaunchKernel"), 200);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_binary_needs_no_newer_glibc_than_documented() {
    let tarball = one_with_suffix(&dist_dir(), ".tar.gz");
    let dir = scratch("glibc");
    assert!(Command::new("tar").arg("-C").arg(&dir).arg("-xzf").arg(&tarball).status().expect("tar").success());
    let binary = std::fs::read_dir(&dir).expect("unpacked").next().expect("one").expect("entry").path().join("gputrace");
    let out = Command::new("objdump").arg("-T").arg(&binary).output().expect("objdump (binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    let newest = text
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        })
        .max()
        .expect("glibc symbol versions");
    assert!(newest <= (2, 34), "needs glibc {}.{}; docs/install.md says 2.34", newest.0, newest.1);
    // The stripped binary names its debug information, which sits beside the tarball.
    let debug = one_with_suffix(&dist_dir(), ".debug");
    let debuglink = Command::new("readelf").args(["-p", ".gnu_debuglink"]).arg(&binary).output().expect("readelf (binutils)");
    let name = debug.file_name().and_then(|n| n.to_str()).expect("a name");
    assert!(String::from_utf8_lossy(&debuglink.stdout).contains(name), "the binary names {name} in .gnu_debuglink");
    assert!(debug.metadata().expect("debug file").len() > binary.metadata().expect("binary").len(), "the debug information is kept");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_deb_installs_and_removes_cleanly_with_its_man_page() {
    require_root();
    let deb = one_with_suffix(&dist_dir(), ".deb");
    // A scratch root with a package database of its own.
    let root = scratch("deb");
    for dir in ["var/lib/dpkg/info", "var/lib/dpkg/updates"] {
        std::fs::create_dir_all(root.join(dir)).expect("dpkg dirs");
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").expect("status");
    let dpkg = |args: &[&str]| {
        let out = Command::new("dpkg").arg(format!("--root={}", root.display())).args(args).output().expect("dpkg");
        assert!(out.status.success(), "dpkg {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    // libc6 is not in the scratch database: the dependency is the host's.
    dpkg(&["--force-depends", "-i", deb.to_str().expect("utf-8 path")]);
    let installed = root.join("usr/bin/gputrace");
    let version = Command::new(&installed).arg("--version").output().expect("installed gputrace runs");
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("gputrace "), "{version:?}");
    let man = root.join("usr/share/man/man1/gputrace.1.gz");
    let page = Command::new("man").arg("-l").arg(&man).env("MANPAGER", "cat").env("PAGER", "cat").output().expect("man");
    let page = String::from_utf8_lossy(&page.stdout);
    assert!(page.contains("attach") && page.contains("sweep"), "man page:\n{page}");
    // The pages it refers to are shipped too, in the .deb and in the tarball.
    for sub in ["attach", "run", "record", "report", "export", "sweep", "doctor", "completions", "man"] {
        let sub_page = root.join(format!("usr/share/man/man1/gputrace-{sub}.1.gz"));
        let shown = Command::new("man").arg("-l").arg(&sub_page).env("MANPAGER", "cat").env("PAGER", "cat").output().expect("man");
        assert!(String::from_utf8_lossy(&shown.stdout).contains(&format!("gputrace-{sub}(1)")), "{}: {shown:?}", sub_page.display());
    }
    let tarball = one_with_suffix(&dist_dir(), ".tar.gz");
    let listing = Command::new("tar").arg("-tzf").arg(&tarball).output().expect("tar");
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("/man/gputrace-record.1"), "{listing}");
    assert!(root.join("usr/share/bash-completion/completions/gputrace").is_file());
    dpkg(&["-r", "gputrace"]);
    assert!(!installed.exists() && !man.exists(), "removed");
    let _ = std::fs::remove_dir_all(&root);
}
