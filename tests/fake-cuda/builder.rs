//! Builds the fake CUDA (libcuda.so.1, libcudart.so.13), the fake NCCL (libnccl.so.2), the fake caching allocator
//! (`c10/libc10.so` and `c10/libc10_cuda.so`, C++), the `fakejob` workload, the fake GPU's own check (`queue_check`) and the fake NVML (`nvml/libnvidia-ml.so.1`) with the system C compiler. Shared by `tests/build.rs` and `cargo xtask demo` through `#[path]`,
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
    // A shared library of the fake GPU's, linked against the fake driver where `link`.
    let library = |name: &str, source: &str, link: bool| -> Vec<String> {
        let mut args = vec!["-O2".into(), "-shared".into(), "-fPIC".into(), format!("-Wl,-soname,{name}"), "-o".into(), o(name), s(source)];
        args.extend(if link { vec![format!("-L{}", out.display()), "-l:libcuda.so.1".into(), "-Wl,-rpath,$ORIGIN".into()] } else { Vec::new() });
        args
    };
    let steps: [Vec<String>; 6] = [
        [library("libcuda.so.1", "libcuda.c", false), vec!["-lpthread".into()]].concat(),
        library("libcudart.so.13", "libcudart.c", true),
        library("libnccl.so.2", "libnccl.c", true),
        vec!["-O2".into(), "-o".into(), o("fakejob"), s("fakejob.c"), "-ldl".into(), "-lpthread".into()],
        // The framework's CPU library, for batches made through it (`fakejob --torch-prep-us`).
        library("libtorch_cpu.so", "libtorch_cpu.c", false),
        // The fake GPU's own check (tests/tests/fake_gpu.rs), linked against the fake driver.
        vec![
            "-O2".into(),
            format!("-I{}", src.display()),
            "-o".into(),
            o("queue_check"),
            s("queue_check.c"),
            format!("-L{}", out.display()),
            "-l:libcuda.so.1".into(),
            "-Wl,-rpath,$ORIGIN".into(),
        ],
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

/// PyTorch's caching allocator, faked (C++: its symbols are the real ones' mangled names):
/// `c10/libc10.so` (the profiler hook, `libc10.cpp`) and `c10/libc10_cuda.so` (the allocator
/// that reports to it, `libc10_cuda.cpp`); and both again in `c10-other/` with the hook's
/// signature changed, as another release might have it.
fn build_fake_c10(src: &Path, out: &Path) -> Result<(), String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    for (dir, defines) in [("c10", &[][..]), ("c10-other", &["-DFAKE_OTHER_SIGNATURE"][..])] {
        let dir = out.join(dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let compile = |name: &str, source: &str, link: &[String]| -> Result<(), String> {
            let status = Command::new(&cxx)
                .args(["-O2", "-g", "-fno-omit-frame-pointer", "-shared", "-fPIC", "-fvisibility=hidden"])
                .args(defines)
                .arg(format!("-Wl,-soname,{name}"))
                .arg("-o")
                .arg(dir.join(name))
                .arg(src.join(source))
                .args(link)
                .status()
                .map_err(|e| format!("running {cxx}: {e} (install a C++ compiler)"))?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("{cxx} {source} failed: {status}"))
            }
        };
        compile("libc10.so", "libc10.cpp", &[])?;
        let link = [format!("-L{}", dir.display()), format!("-L{}", out.display()), "-l:libc10.so".into(), "-l:libcuda.so.1".into(), "-Wl,-rpath,$ORIGIN:$ORIGIN/..".into()];
        compile("libc10_cuda.so", "libc10_cuda.cpp", &link)?;
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
