//! `cargo xtask dist`: what a user installs, built from `target/release/gputrace`.
//!
//! - `target/dist/gputrace-VERSION-x86_64-linux.tar.gz`: the stripped binary (the eBPF object
//!   is inside it), README, licence, shell completions and the man pages (gputrace(1) and
//!   one per subcommand, gputrace-attach(1) …);
//! - `target/dist/gputrace-VERSION-x86_64-linux.debug`: the debug information stripped from it
//!   (the binary names it in `.gnu_debuglink`, so gdb and addr2line find it beside it);
//! - `target/dist/gputrace_VERSION_amd64.deb`: the same files where Debian puts them.
//!
//! The glibc floor is the newest symbol version the binary asks for (2.34 today, from Rust's
//! std): this machine's glibc is 2.36, and building against an older one would need an older
//! sysroot, which is not here. `docs/install.md` says so, and the tests check the floor.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

const TARGET: &str = "x86_64-linux";

/// The paths `dist` made.
pub struct Artifacts {
    pub tarball: PathBuf,
    pub debug: PathBuf,
    pub deb: PathBuf,
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// `gputrace ARGS`, its stdout.
fn output_of(gputrace: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new(gputrace).args(args).output().with_context(|| format!("running gputrace {args:?}"))?;
    if !out.status.success() {
        bail!("gputrace {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out.stdout)
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// Build the artifacts from `gputrace` (a release build) into `root/target/dist`.
pub fn dist(root: &Path, gputrace: &Path) -> Result<Artifacts> {
    let version = String::from_utf8(output_of(gputrace, &["--version"])?)?.split_whitespace().nth(1).context("gputrace --version")?.to_owned();
    let out = super::target_dir().join("dist");
    let _ = fs::remove_dir_all(&out);
    let name = format!("gputrace-{version}-{TARGET}");
    let stage = out.join(&name);
    fs::create_dir_all(&stage)?;

    // The binary, stripped, with its debug information beside it.
    let debug = out.join(format!("{name}.debug"));
    let binary = stage.join("gputrace");
    run(Command::new("objcopy").arg("--only-keep-debug").arg(gputrace).arg(&debug))?;
    run(Command::new("objcopy").args(["--strip-debug", "--strip-unneeded"]).arg(format!("--add-gnu-debuglink={}", debug.display())).arg(gputrace).arg(&binary))?;

    // What the user reads and what the shells load, generated from the same clap definitions.
    fs::copy(root.join("README.md"), stage.join("README.md"))?;
    fs::copy(root.join("LICENSE"), stage.join("LICENSE"))?;
    let man = output_of(gputrace, &["man"])?;
    write(&stage.join("man/gputrace.1"), &man)?;
    // Every page the main one refers to (`gputrace-attach(1)` …), so none is missing.
    for sub in subcommand_pages(&String::from_utf8_lossy(&man)) {
        write(&stage.join(format!("man/gputrace-{sub}.1")), &output_of(gputrace, &["man", &sub])?)?;
    }
    for (shell, file) in [("bash", "gputrace.bash"), ("zsh", "_gputrace"), ("fish", "gputrace.fish")] {
        write(&stage.join("completions").join(file), &output_of(gputrace, &["completions", shell])?)?;
    }
    let tarball = out.join(format!("{name}.tar.gz"));
    run(Command::new("tar").arg("-C").arg(&out).args(["--owner=0", "--group=0", "-czf"]).arg(&tarball).arg(&name))?;

    let deb = debian(&out, &stage, &version)?;
    Ok(Artifacts { tarball, debug, deb })
}

/// The subcommands whose pages the main man page lists (`gputrace\-attach(1)` in roff).
fn subcommand_pages(main: &str) -> Vec<String> {
    main.split("gputrace\\-")
        .skip(1)
        .filter_map(|rest| rest.split_once("(1)").map(|(name, _)| name.to_owned()))
        .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase()))
        .collect()
}

/// The `.deb`, laid out by hand and packed by `dpkg-deb` (no cargo-deb needed).
fn debian(out: &Path, stage: &Path, version: &str) -> Result<PathBuf> {
    let tree = out.join("deb");
    let copy = |from: &str, to: &str| -> Result<()> {
        let to = tree.join(to);
        fs::create_dir_all(to.parent().context("a folder")?)?;
        fs::copy(stage.join(from), &to).with_context(|| format!("copying {from}"))?;
        Ok(())
    };
    copy("gputrace", "usr/bin/gputrace")?;
    copy("completions/gputrace.bash", "usr/share/bash-completion/completions/gputrace")?;
    copy("completions/_gputrace", "usr/share/zsh/vendor-completions/_gputrace")?;
    copy("completions/gputrace.fish", "usr/share/fish/vendor_completions.d/gputrace.fish")?;
    copy("README.md", "usr/share/doc/gputrace/README.md")?;
    copy("LICENSE", "usr/share/doc/gputrace/copyright")?;
    for page in fs::read_dir(stage.join("man"))? {
        let name = page?.file_name().to_string_lossy().into_owned();
        let to = format!("usr/share/man/man1/{name}");
        copy(&format!("man/{name}"), &to)?;
        run(Command::new("gzip").args(["-9n"]).arg(tree.join(&to)))?;
    }
    let control = format!(
        "Package: gputrace\n\
         Version: {version}\n\
         Architecture: amd64\n\
         Maintainer: gputrace developers <gputrace@localhost>\n\
         Depends: libc6 (>= 2.34)\n\
         Section: devel\n\
         Priority: optional\n\
         Description: why the GPU sits idle: eBPF tracing of CUDA jobs, with a diagnosis\n \
         Attaches eBPF uprobes to the CUDA driver of a running job, without touching its code,\n \
         and says which bottleneck keeps the GPU idle, what it costs, and the fix.\n"
    );
    write(&tree.join("DEBIAN/control"), control.as_bytes())?;
    let deb = out.join(format!("gputrace_{version}_amd64.deb"));
    run(Command::new("dpkg-deb").args(["--root-owner-group", "--build"]).arg(&tree).arg(&deb))?;
    Ok(deb)
}
