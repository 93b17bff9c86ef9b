//! Builds the fake CUDA (libcuda.so.1, libcudart.so.13), the fake caching allocator
//! (`c10/libc10_cuda.so`, C++), the `fakejob` workload and the fake NVML (`nvml/libnvidia-ml.so.1`) with the system C compiler. Shared by `tests/build.rs` and `cargo xtask demo` through `#[path]`,
//! so there is one recipe.

use std::{path::Path, process::Command};

/// Compile everything from `src` (this folder) into `out`.
pub fn build_fake_cuda(src: &Path, out: &Path) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = |name: &str| out.join(name).display().to_string();
    let s = |name: &str| src.join(name).display().to_string();
    // Frame pointers and line tables, as a user's debug build has: the kernel unwinds user
    // stacks by frame pointer, and the sites name file:line from DWARF.
    let debuggable = ["-g", "-fno-omit-frame-pointer"];
    let steps: [Vec<String>; 3] = [
        vec![
            "-O2".into(),
            "-shared".into(),
            "-fPIC".into(),
            "-Wl,-soname,libcuda.so.1".into(),
            "-o".into(),
            o("libcuda.so.1"),
            s("libcuda.c"),
            "-lpthread".into(),
        ],
        vec![
            "-O2".into(),
            "-shared".into(),
            "-fPIC".into(),
            "-Wl,-soname,libcudart.so.13".into(),
            "-o".into(),
            o("libcudart.so.13"),
            s("libcudart.c"),
            format!("-L{}", out.display()),
            "-l:libcuda.so.1".into(),
            "-Wl,-rpath,$ORIGIN".into(),
        ],
        vec!["-O2".into(), "-o".into(), o("fakejob"), s("fakejob.c"), "-ldl".into(), "-lpthread".into()],
    ];
    // The same pair in `unprobeable/`, with one symbol the kernel cannot probe (libcuda.c).
    let variant = out.join("unprobeable");
    std::fs::create_dir_all(&variant).map_err(|e| format!("creating {}: {e}", variant.display()))?;
    let v = |name: &str| variant.join(name).display().to_string();
    let variant_steps: [Vec<String>; 2] = [
        vec![
            "-O2".into(),
            "-DFAKE_UNPROBEABLE_UNMAP".into(),
            "-shared".into(),
            "-fPIC".into(),
            "-Wl,-soname,libcuda.so.1".into(),
            "-o".into(),
            v("libcuda.so.1"),
            s("libcuda.c"),
            "-lpthread".into(),
        ],
        vec![
            "-O2".into(),
            "-shared".into(),
            "-fPIC".into(),
            "-Wl,-soname,libcudart.so.13".into(),
            "-o".into(),
            v("libcudart.so.13"),
            s("libcudart.c"),
            format!("-L{}", variant.display()),
            "-l:libcuda.so.1".into(),
            "-Wl,-rpath,$ORIGIN".into(),
        ],
    ];
    // The fake NVML in `nvml/`, a folder of its own: only a test that puts it on the loader
    // path gives gputrace an NVML (fake_nvml.c); the others keep seeing none.
    let nvml = out.join("nvml");
    std::fs::create_dir_all(&nvml).map_err(|e| format!("creating {}: {e}", nvml.display()))?;
    let nvml_step: Vec<String> = vec![
        "-O2".into(),
        "-shared".into(),
        "-fPIC".into(),
        "-Wl,-soname,libnvidia-ml.so.1".into(),
        "-o".into(),
        nvml.join("libnvidia-ml.so.1").display().to_string(),
        s("fake_nvml.c"),
        "-lpthread".into(),
    ];
    for args in steps.into_iter().chain(variant_steps).chain([nvml_step]) {
        let status = Command::new(&cc).args(debuggable).args(&args).status().map_err(|e| format!("running {cc}: {e} (install a C compiler)"))?;
        if !status.success() {
            return Err(format!("{cc} {} failed: {status}", args.join(" ")));
        }
    }
    build_fake_c10(src, out)?;
    build_optimized(&cc, src, &out.join("o2"))
}

/// PyTorch's caching allocator, faked (`libc10_cuda.cpp`, C++: its symbols are the real
/// one's mangled names) into `c10/libc10_cuda.so`, and the same with its symbol table
/// stripped into `c10-stripped/`, as a torch build without the symbols would be.
fn build_fake_c10(src: &Path, out: &Path) -> Result<(), String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let (dir, stripped) = (out.join("c10"), out.join("c10-stripped"));
    for d in [&dir, &stripped] {
        std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
    }
    let lib = dir.join("libc10_cuda.so");
    let status = Command::new(&cxx)
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-shared", "-fPIC", "-fvisibility=hidden", "-o"])
        .arg(&lib)
        .arg(src.join("libc10_cuda.cpp"))
        .arg(format!("-L{}", out.display()))
        .args(["-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN/.."])
        .status()
        .map_err(|e| format!("running {cxx}: {e} (install a C++ compiler)"))?;
    if !status.success() {
        return Err(format!("{cxx} libc10_cuda.cpp failed: {status}"));
    }
    let status = Command::new("strip").arg("--strip-all").arg("-o").arg(stripped.join("libc10_cuda.so")).arg(&lib).status().map_err(|e| format!("running strip: {e}"))?;
    if !status.success() {
        return Err(format!("strip --strip-all failed: {status}"));
    }
    Ok(())
}

/// The job and its fake CUDA again in `o2/`, as a plain optimized build has them: `-O2 -g`
/// without frame pointers (`-fomit-frame-pointer` said outright, for compilers whose default
/// keeps them), so stacks must be unwound by the call frame information; the fake driver
/// without unwind tables either (`-fno-asynchronous-unwind-tables`), as a stripped vendor
/// library may be, so a wait inside it is named from the stack its call was entered with;
/// and `fakejob-nodebug`, the job with its debug information stripped (its symbols kept).
fn build_optimized(cc: &str, src: &Path, out: &Path) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let o = |name: &str| out.join(name).display().to_string();
    let s = |name: &str| src.join(name).display().to_string();
    let steps: [Vec<String>; 3] = [
        vec![
            "-fno-asynchronous-unwind-tables".into(),
            "-fno-unwind-tables".into(),
            "-shared".into(),
            "-fPIC".into(),
            "-Wl,-soname,libcuda.so.1".into(),
            "-o".into(),
            o("libcuda.so.1"),
            s("libcuda.c"),
            "-lpthread".into(),
        ],
        vec![
            "-shared".into(),
            "-fPIC".into(),
            "-Wl,-soname,libcudart.so.13".into(),
            "-o".into(),
            o("libcudart.so.13"),
            s("libcudart.c"),
            format!("-L{}", out.display()),
            "-l:libcuda.so.1".into(),
            "-Wl,-rpath,$ORIGIN".into(),
        ],
        vec!["-o".into(), o("fakejob"), s("fakejob.c"), "-ldl".into(), "-lpthread".into()],
    ];
    for args in steps {
        let status = Command::new(cc).args(["-O2", "-g", "-fomit-frame-pointer"]).args(&args).status().map_err(|e| format!("running {cc}: {e} (install a C compiler)"))?;
        if !status.success() {
            return Err(format!("{cc} {} failed: {status}", args.join(" ")));
        }
    }
    let status = Command::new("strip").args(["--strip-debug", "-o"]).arg(o("fakejob-nodebug")).arg(o("fakejob")).status().map_err(|e| format!("running strip: {e}"))?;
    if !status.success() {
        return Err(format!("strip --strip-debug failed: {status}"));
    }
    Ok(())
}
