//! From stacks to call sites: the code location each stack is charged to (the innermost
//! frame of the user's own code, not of a library), summed, most costly first.

use std::collections::BTreeMap;

use super::{Activity, Frame, Origin, StackTime};

pub use crate::model::{Inside, InsidePart, Site};

/// How many of a framework's parts a site lists.
pub const INSIDE_PARTS: usize = 3;

/// Python packages whose entry calls hide the user's knobs: a training loop, a trainer, a
/// compiler's dispatch. PyTorch itself is not one: beneath `loss.backward()` are its
/// kernels, which the diagnosis already names.
const FRAMEWORKS: [&str; 13] =
    ["lightning", "pytorch_lightning", "lightning_fabric", "transformers", "accelerate", "deepspeed", "jax", "flax", "optax", "keras", "tensorflow", "vllm", "sglang"];

/// Below this many stacks a site's share is a guess (at 99 Hz, 10 samples are 0.1 s).
pub const FEW_STACKS: u64 = 10;

/// Which stacks a diagnosis is about.
#[derive(Clone, Copy, Debug)]
pub struct Wanted<'a> {
    /// The activities admitted (a sync, a copy, host code, …).
    pub activities: &'a [Activity],
    /// Some(true): on-CPU only; Some(false): off-CPU only; None: both.
    pub on_cpu: Option<bool>,
    /// Only these threads (the launching threads); empty: all.
    pub tids: &'a [u32],
}

impl Wanted<'_> {
    /// Whether the stack `s` is one the diagnosis is about: its activity, on or off the CPU,
    /// and its thread.
    #[must_use]
    pub fn admits(&self, s: &StackTime) -> bool {
        self.activities.contains(&s.activity) && self.on_cpu.is_none_or(|c| c == s.on_cpu) && (self.tids.is_empty() || self.tids.contains(&s.tid))
    }
}

/// The `n` costliest sites of the stacks `wanted` admits. Where a process has Python frames
/// they are used, not its native ones (the interpreter's native frames name no user code).
/// Only usable stacks count (`usable`): a stack cut short in libc would otherwise take a share
/// its real caller should have.
#[must_use]
pub fn top(stacks: &[StackTime], wanted: &Wanted<'_>, n: usize) -> Vec<Site> {
    let admitted = preferred(stacks).filter(|s| wanted.admits(s) && is_usable(&s.frames) && !is_importing(&s.frames));
    rank(admitted.map(|s| (s.frames.as_slice(), s.ns, s.count)), Unit::Nanoseconds, n)
}

/// What the weights given to [`rank`] are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Time on the stacks, ns.
    Nanoseconds,
    /// Bytes the stacks allocated or asked for.
    Bytes,
}

/// The `n` heaviest sites of weighted stacks (frames, weight, stacks counted): each stack's
/// weight is charged to its site frame (`site_frame`), heaviest first; `share` is of all the
/// weight given.
pub fn rank<'a>(weighted: impl Iterator<Item = (&'a [Frame], u64, u64)>, unit: Unit, n: usize) -> Vec<Site> {
    let mut by_site: BTreeMap<String, Charged> = BTreeMap::new();
    let mut total = 0u64;
    for (frames, weight, count) in weighted {
        total = total.saturating_add(weight);
        let Some(at) = site_index(frames) else { continue };
        let frame = &frames[at];
        let charged = by_site.entry(frame.location()).or_insert_with(|| Charged { frame: frame.clone(), ..Charged::default() });
        charged.weight = charged.weight.saturating_add(weight);
        charged.count = charged.count.saturating_add(count);
        if let Some((package, part)) = framework_part(&frames[..at]) {
            let inside = charged.inside.entry(package).or_default().entry(part).or_default();
            inside.0 = inside.0.saturating_add(weight);
            inside.1 = inside.1.saturating_add(count);
        }
    }
    if total == 0 {
        return Vec::new();
    }
    let mut sites: Vec<(u64, Site)> = by_site
        .into_iter()
        .filter(|(_, c)| c.weight > 0)
        .map(|(location, c)| {
            let site = Site {
                frame: location,
                file: c.frame.file.clone(),
                line: c.frame.line,
                function: c.frame.function.clone(),
                seconds: if unit == Unit::Nanoseconds { c.weight as f64 / 1e9 } else { 0.0 },
                share: c.weight as f64 / total as f64,
                bytes: (unit == Unit::Bytes).then_some(c.weight),
                stacks: Some(c.count),
                inside: c.inside(),
            };
            (c.weight, site)
        })
        .collect();
    sites.sort_by(|(wa, a), (wb, b)| wb.cmp(wa).then_with(|| a.frame.cmp(&b.frame)));
    sites.into_iter().take(n).map(|(_, s)| s).collect()
}

/// What is charged to one site while ranking.
#[derive(Default)]
struct Charged {
    frame: Frame,
    weight: u64,
    count: u64,
    /// Framework package -> part -> (weight, stacks).
    inside: BTreeMap<String, BTreeMap<String, (u64, u64)>>,
}

impl Charged {
    /// The split inside the framework that holds most of the site's weight, where a
    /// framework holds at least half of it (else the site is mostly the user's own work).
    fn inside(&self) -> Option<Inside> {
        let (package, parts) = self.inside.iter().max_by_key(|(_, parts)| parts.values().map(|p| p.0).sum::<u64>())?;
        let in_framework: u64 = parts.values().map(|p| p.0).sum();
        if self.weight == 0 || in_framework * 2 < self.weight {
            return None;
        }
        let mut parts: Vec<InsidePart> = parts
            .iter()
            .map(|(frame, (weight, stacks))| InsidePart { frame: frame.clone(), share: *weight as f64 / self.weight as f64, stacks: *stacks })
            .collect();
        parts.sort_by(|a, b| b.share.total_cmp(&a.share).then_with(|| a.frame.cmp(&b.frame)));
        parts.truncate(INSIDE_PARTS);
        Some(Inside { package: package.clone(), parts })
    }
}

/// The Python package an installed file belongs to: the path's component after
/// `site-packages/` or `dist-packages/` (`lightning` for `…/site-packages/lightning/pytorch/trainer/trainer.py`).
fn package_of(f: &Frame) -> Option<&str> {
    let package = installed_path(f)?.split('/').next()?;
    Some(package.strip_suffix(".py").unwrap_or(package))
}

/// An installed file's path beneath its `site-packages/` (or `dist-packages/`) folder, the
/// last such folder in the path.
fn installed_path(f: &Frame) -> Option<&str> {
    let file = f.file.as_deref()?;
    file.rsplit_once("/site-packages/").or_else(|| file.rsplit_once("/dist-packages/")).map(|(_, rest)| rest)
}

/// The framework part a stack spends its time in, given the frames beneath its site
/// (innermost first): when the site called straight into a framework ([`FRAMEWORKS`]), its
/// innermost frame still in that framework, and the package that frame called into where it
/// is another. None where the site called no framework.
fn framework_part(beneath: &[Frame]) -> Option<(String, String)> {
    let package = package_of(beneath.last()?).filter(|p| FRAMEWORKS.contains(p))?;
    let innermost = beneath.iter().position(|f| package_of(f) == Some(package))?;
    let mut part = beneath[innermost].location();
    let callee = beneath[..innermost].iter().rev().find_map(|f| package_of(f).map(|p| (p, f)));
    match callee {
        Some((other, f)) if other != package => {
            // `torch/utils` says more than `torch`: the callee's first directory beneath its
            // package (read past `site-packages/`: the path above may hold the same name).
            let sub = installed_path(f).and_then(|rest| rest.split('/').nth(1)).filter(|d| std::path::Path::new(d).extension().is_none());
            part.push_str(&sub.map_or_else(|| format!(" → {other}"), |d| format!(" → {other}/{d}")));
        }
        _ => {}
    }
    Some((package.to_owned(), part))
}

/// The stacks that speak for their process: its Python ones where it has any (the
/// interpreter's native frames name no user code, and both cover the same time), else its
/// native ones.
pub fn preferred(stacks: &[StackTime]) -> impl Iterator<Item = &StackTime> {
    let python_pids: std::collections::BTreeSet<u32> = stacks.iter().filter(|s| s.origin == Origin::Python).map(|s| s.pid).collect();
    stacks.iter().filter(move |s| s.origin == Origin::Python || !python_pids.contains(&s.pid))
}

/// The frame a stack is charged to: the innermost of the user's own code, else the innermost
/// named one that is neither the system's nor CUDA's (a framework's: libtorch, libc10), else
/// the innermost named one.
#[must_use]
pub fn site_frame(frames: &[Frame]) -> Option<&Frame> {
    site_index(frames).map(|at| &frames[at])
}

/// Where in `frames` the site frame ([`site_frame`]) is.
fn site_index(frames: &[Frame]) -> Option<usize> {
    let named = |f: &Frame| !f.function.starts_with("0x");
    frames
        .iter()
        .position(|f| !is_library(f))
        // A stack all in libraries (a framework's own thread): the innermost frame that is
        // not the system's or the CUDA driver's or runtime's says what the framework was doing.
        .or_else(|| frames.iter().position(|f| named(f) && !is_system_or_cuda(f)))
        .or_else(|| frames.iter().position(|f| named(f) && !is_cuda_library(f)))
        .or_else(|| frames.iter().position(named))
}

/// The object file a native frame is in (`libc.so.6`), empty for others.
fn object_of(f: &Frame) -> &str {
    f.module.as_deref().unwrap_or_default().rsplit('/').next().unwrap_or_default()
}

/// A frame of the CUDA driver or runtime: in their shared objects, or the runtime linked
/// statically into the job's own binary (nvcc's default, `-cudart static`), which only its
/// names give away.
fn is_cuda_library(f: &Frame) -> bool {
    let object = object_of(f);
    object.starts_with("libcuda") || object.starts_with("libcudart") || object.starts_with("libnvidia-") || is_static_cuda_runtime(&f.function)
}

/// A function of the statically linked CUDA runtime: its entry points (`cudaMemcpy`,
/// `cudaMalloc`, `__cudaRegisterFatBinary`) and its internals (`libcudart_static_<hash>`,
/// `cudart::…`). A user's own `cudaxyz` helper is lower-case after the prefix and stays.
fn is_static_cuda_runtime(function: &str) -> bool {
    let api = |prefix: &str| function.strip_prefix(prefix).and_then(|rest| rest.chars().next()).is_some_and(|c| c.is_ascii_uppercase());
    function.starts_with("libcudart_static_") || function.starts_with("cudart::") || function.starts_with("__cuda") || api("cuda") || api("cu")
}

/// A frame of the C runtime, the dynamic loader, the vDSO, the C++ runtime or the CUDA driver
/// and runtime: code every job passes through on its way to wait or allocate, never the site.
#[must_use]
pub fn is_system_or_cuda(f: &Frame) -> bool {
    const SYSTEM_OBJECTS: [&str; 12] =
        ["libc.so", "libc-", "libpthread", "ld-linux", "ld-", "libstdc++", "libgcc_s", "libm.so", "libdl", "librt", "libatomic", "linux-vdso"];
    let object = object_of(f);
    f.module.as_deref().is_some_and(|m| m.starts_with('[')) || SYSTEM_OBJECTS.iter().any(|o| object.starts_with(o)) || is_cuda_library(f)
}

/// Functions a thread's stack begins in: a walk that reaches one has the whole stack.
const THREAD_ROOTS: [&str; 8] = ["_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone", "clone3", "__clone", "__clone3"];

/// How far a stack can be trusted to name its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usability {
    /// Frames beyond the system's and CUDA's, or a whole stack of theirs (a library's own
    /// thread, down to its root).
    Usable,
    /// Only system or CUDA frames, not down to a thread's root: the walk stopped before the
    /// code that called them (a frame without frame pointer or unwind information).
    CutShort,
    /// No frame at all (the stack could not be taken, or its process was gone).
    Failed,
}

/// How usable a stack is (see [`Usability`]).
#[must_use]
pub fn usability(frames: &[Frame]) -> Usability {
    let Some(outermost) = frames.last() else { return Usability::Failed };
    let only_system = frames.iter().all(|f| f.function.starts_with("0x") || is_system_or_cuda(f));
    if only_system && !THREAD_ROOTS.contains(&outermost.function.as_str()) {
        Usability::CutShort
    } else {
        Usability::Usable
    }
}

/// Whether a stack may name a site ([`Usability::Usable`]).
#[must_use]
pub fn is_usable(frames: &[Frame]) -> bool {
    usability(frames) == Usability::Usable
}

/// Whether a frame belongs to a library rather than to the user's code: the interpreter's
/// standard library and installed packages, the system's shared objects, the CUDA driver
/// and runtime, the Rust and C++ standard libraries.
#[must_use]
pub fn is_library(f: &Frame) -> bool {
    const LIBRARY_DIRS: [&str; 7] = ["/site-packages/", "/dist-packages/", "/lib/python3", "/usr/lib/", "/lib/x86_64-linux-gnu/", "/lib64/", "/rustc/"];
    const LIBRARY_OBJECTS: [&str; 10] = ["libcuda", "libcudart", "libc.so", "libc-", "ld-linux", "libstdc++", "libpython", "libtorch", "libc10", "libnccl"];
    if is_system_or_cuda(f) {
        return true;
    }
    if f.function.starts_with("0x") || f.function.starts_with('<') && f.file.as_deref().is_some_and(|p| p.starts_with('<')) {
        return true;
    }
    let file = f.file.as_deref().unwrap_or_default();
    if file.starts_with("<frozen") || file.starts_with('/') && LIBRARY_DIRS.iter().any(|d| file.contains(d)) {
        return true;
    }
    let module = f.module.as_deref().unwrap_or_default();
    if module.starts_with('[') {
        return true; // [vdso], [heap]: the kernel's and the allocator's, never the user's
    }
    let object = module.rsplit('/').next().unwrap_or_default();
    LIBRARY_OBJECTS.iter().any(|o| object.starts_with(o)) || LIBRARY_DIRS.iter().any(|d| module.contains(d)) || f.function.starts_with("std::") || f.function.starts_with("core::")
}

/// Whether a Python stack is importing a module: a one-time cost (a library imported lazily at
/// the first optimizer step took 3.3 s of a 10.8 s window on the H200), never a site to fix in
/// the step. Deep import chains also lose the user's frame to the depth limit, so such a stack
/// would be charged to `<frozen importlib._bootstrap>` itself.
#[must_use]
pub fn is_importing(frames: &[Frame]) -> bool {
    frames.iter().any(|f| f.file.as_deref().is_some_and(|p| p.starts_with("<frozen importlib")))
}

/// Whether a stack is in data loading: a PyTorch loader, TensorFlow's `tf.data`, JAX's
/// Grain, a dataset's `__getitem__`, a collate function (Hugging Face's `data_collator`), or
/// an image or audio decoding library — not importing one (every process that imports torch
/// passes through `torch/utils/data/`).
#[must_use]
pub fn is_data_loading(frames: &[Frame]) -> bool {
    const MARKS: [&str; 10] =
        ["torch/utils/data/", "tensorflow/python/data/", "/grain/", "__getitem__", "collate", "data_collator", "PIL/", "torchvision/io", "torchaudio/", "cv2"];
    !is_importing(frames)
        && frames.iter().any(|f| {
            let file = f.file.as_deref().unwrap_or_default();
            MARKS.iter().any(|m| file.contains(m) || f.function.contains(m))
        })
}

/// Of the launching threads' on-CPU host time, the share whose stacks are in data loading.
#[must_use]
pub fn loading_share(stacks: &[StackTime], threads: &[u32]) -> f64 {
    let host = preferred(stacks).filter(|s| s.activity == Activity::Host && s.on_cpu && (threads.is_empty() || threads.contains(&s.tid)));
    let (mut loading, mut all) = (0u64, 0u64);
    for s in host {
        all += s.ns;
        if is_data_loading(&s.frames) {
            loading += s.ns;
        }
    }
    if all == 0 {
        0.0
    } else {
        loading as f64 / all as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(file: &str, line: u32, function: &str) -> Frame {
        Frame { function: function.into(), file: Some(file.into()), line: Some(line), module: None }
    }

    fn stack(tid: u32, activity: Activity, frames: Vec<Frame>, ms: u64) -> StackTime {
        StackTime { tid, pid: 1, activity, on_cpu: true, origin: Origin::Python, frames, count: 1, ns: ms * 1_000_000, launch_ages: crate::stacks::LaunchAges::default() }
    }

    #[test]
    fn the_statically_linked_cuda_runtime_is_skipped_for_the_jobs_own_frame() {
        let job = "/home/me/unwind_job";
        let frames = vec![
            native("libcudart_static_4d8b33a106dceb3c07a1e3ba2f8aa6a4f8c6d2b5", job),
            native("cudart::cudaApiMemcpy", job),
            native("cudaMemcpy", job),
            native("trainer::read_loss", job),
            native("main", job),
        ];
        assert_eq!(site_frame(&frames).map(|f| f.function.as_str()), Some("trainer::read_loss"));
        // A user's function that merely begins with the letters stays the user's.
        assert!(!is_library(&native("cudaxpy_reference", job)));
        assert!(!is_library(&native("cuteness", job)));
    }

    #[test]
    fn a_stack_is_charged_to_the_users_innermost_frame() {
        let frames = vec![
            py("/usr/lib/python3/dist-packages/torch/_tensor.py", 10, "item"),
            py("/home/me/train.py", 42, "train_step"),
            py("/home/me/train.py", 90, "main"),
        ];
        assert_eq!(site_frame(&frames).map(Frame::location).as_deref(), Some("me/train.py:42 in train_step"));
    }

    #[test]
    fn importing_a_module_is_no_site() {
        // A library imported at the first optimizer step, its chain deeper than the sampler
        // keeps: only importlib's frames are left, and they must not take the sites.
        let import = vec![py("<frozen importlib._bootstrap>", 488, "_call_with_frames_removed"), py("<frozen importlib._bootstrap_external>", 999, "exec_module")];
        let stacks = vec![stack(1, Activity::Host, import, 40), stack(1, Activity::Host, vec![py("/w/train.py", 42, "step")], 10)];
        let wanted = Wanted { activities: &[Activity::Host], on_cpu: Some(true), tids: &[] };
        let sites = top(&stacks, &wanted, 3);
        assert_eq!(sites.len(), 1, "{sites:?}");
        assert_eq!(sites[0].frame, "w/train.py:42 in step");
        assert!((sites[0].share - 1.0).abs() < 1e-9);
    }

    #[test]
    fn sites_rank_by_time_and_share_the_wanted_activity_only() {
        let stacks = vec![
            stack(1, Activity::Sync, vec![py("/w/train.py", 42, "step")], 30),
            stack(1, Activity::Sync, vec![py("/w/train.py", 50, "log")], 10),
            stack(1, Activity::Host, vec![py("/w/train.py", 7, "load")], 500),
        ];
        let sites = top(&stacks, &Wanted { activities: &[Activity::Sync], on_cpu: None, tids: &[] }, 3);
        assert_eq!(sites.len(), 2);
        assert_eq!(sites[0].line, Some(42));
        assert!((sites[0].share - 0.75).abs() < 1e-9);
        assert!((sites[0].seconds - 0.03).abs() < 1e-9);
    }

    #[test]
    fn python_frames_replace_the_same_processs_native_ones() {
        let mut native = stack(1, Activity::Host, vec![Frame { function: "_PyEval_EvalFrameDefault".into(), file: None, line: None, module: Some("/usr/bin/python3.12".into()) }], 900);
        native.origin = Origin::Native;
        let stacks = vec![native, stack(1, Activity::Host, vec![py("/w/train.py", 7, "load")], 100)];
        let sites = top(&stacks, &Wanted { activities: &[Activity::Host], on_cpu: Some(true), tids: &[] }, 3);
        assert_eq!(sites.len(), 1);
        assert_eq!(sites[0].function, "load");
    }

    fn native(function: &str, module: &str) -> Frame {
        Frame { function: function.into(), file: None, line: None, module: Some(module.into()) }
    }

    #[test]
    fn system_and_cuda_frames_are_skipped_for_the_jobs_own_and_frameworks_stay() {
        let job = Frame { function: "read_scalar".into(), file: Some("/w/fakejob.c".into()), line: Some(244), module: Some("/w/fakejob".into()) };
        let cut = vec![native("__GI___clock_nanosleep", "/usr/lib/x86_64-linux-gnu/libc.so.6"), native("cuStreamSynchronize", "/opt/cuda/libcuda.so.1")];
        let whole = [cut.clone(), vec![native("cudaStreamSynchronize", "/opt/cuda/libcudart.so.13"), job.clone(), native("__libc_start_main", "/lib/libc.so.6")]].concat();
        assert_eq!(site_frame(&whole), Some(&job));
        assert_eq!(usability(&whole), Usability::Usable);
        assert_eq!(usability(&cut), Usability::CutShort);
        assert_eq!(usability(&[]), Usability::Failed);
        // A framework's own frames name what it did, before libc's or the driver's.
        let framework = vec![native("clock_gettime", "[vdso]"), native("c10::cuda::sync", "/x/site-packages/torch/lib/libc10_cuda.so"), native("start_thread", "/lib/libc.so.6")];
        assert_eq!(site_frame(&framework).map(|f| f.function.as_str()), Some("c10::cuda::sync"));
        // A library's own thread, walked down to its root: usable, though all system.
        assert_eq!(usability(&[native("epoll_wait", "/lib/libc.so.6"), native("clone3", "/lib/libc.so.6")]), Usability::Usable);
    }

    #[test]
    fn shares_are_of_usable_stacks_only() {
        let mut cut = stack(1, Activity::Sync, vec![native("__GI___clock_nanosleep", "/usr/lib/libc.so.6")], 900);
        cut.origin = Origin::Native;
        let stacks = vec![cut, stack(1, Activity::Sync, vec![py("/w/train.py", 42, "step")], 100)];
        let sites = top(&stacks, &Wanted { activities: &[Activity::Sync], on_cpu: None, tids: &[] }, 3);
        assert_eq!(sites.len(), 1);
        assert!((sites[0].share - 1.0).abs() < 1e-9, "{sites:?}");
        assert_eq!(sites[0].stacks, Some(1));
    }

    #[test]
    fn a_site_that_calls_a_framework_shows_where_inside_it_the_time_goes() {
        let lightning = "/venv/lib/python3.12/site-packages/lightning/pytorch";
        let fit = py("/w/train.py", 70, "<module>");
        let under_fit = |inner: Vec<Frame>| [inner, vec![py(&format!("{lightning}/trainer/trainer.py"), 538, "fit"), fit.clone()]].concat();
        let progress = under_fit(vec![
            py("/venv/lib/python3.12/site-packages/tqdm/std.py", 1195, "refresh"),
            py(&format!("{lightning}/callbacks/progress/tqdm_progress.py"), 280, "on_train_batch_end"),
            py(&format!("{lightning}/loops/training_epoch_loop.py"), 250, "advance"),
        ]);
        let collate = under_fit(vec![
            py("/venv/lib/python3.12/site-packages/torch/utils/data/_utils/collate.py", 150, "collate"),
            py("/venv/lib/python3.12/site-packages/torch/utils/data/dataloader.py", 700, "__next__"),
            py(&format!("{lightning}/loops/fetchers.py"), 134, "_fetch_next_batch"),
        ]);
        let stacks = vec![stack(1, Activity::Host, progress, 400), stack(1, Activity::Host, collate, 200), stack(1, Activity::Host, vec![fit.clone()], 100)];
        let sites = top(&stacks, &Wanted { activities: &[Activity::Host], on_cpu: Some(true), tids: &[] }, 3);
        assert_eq!(sites.len(), 1);
        let inside = sites[0].inside.as_ref().expect("a split inside lightning");
        assert_eq!(inside.package, "lightning");
        let parts: Vec<(&str, u64)> = inside.parts.iter().map(|p| (p.frame.as_str(), (p.share * 700.0).round() as u64)).collect();
        assert_eq!(parts, [("progress/tqdm_progress.py:280 in on_train_batch_end → tqdm", 400), ("loops/fetchers.py:134 in _fetch_next_batch → torch/utils", 200)]);
        // A virtual environment inside a folder named like a package names the package's own
        // folder, not the environment's (seen on the H200: `→ torch/.venv`).
        let nested = [py("/root/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py", 9, "_engine_run_backward"), py(&format!("{lightning}/core/module.py"), 1137, "backward")];
        assert_eq!(framework_part(&nested).map(|p| p.1), Some("core/module.py:1137 in backward → torch/autograd".into()));
        // A site whose time is its own code, or PyTorch's kernels, gets no split.
        let backward = vec![py("/venv/lib/python3.12/site-packages/torch/_tensor.py", 600, "backward"), py("/w/train.py", 50, "step")];
        let own = top(&[stack(1, Activity::Host, backward, 100)], &Wanted { activities: &[Activity::Host], on_cpu: Some(true), tids: &[] }, 3);
        assert_eq!(own[0].inside, None);
    }

    #[test]
    fn a_process_importing_torch_is_not_loading_data() {
        let import = vec![
            py("/venv/lib/python3.12/site-packages/torch/utils/data/__init__.py", 1, "<module>"),
            py("<frozen importlib._bootstrap>", 488, "_call_with_frames_removed"),
            py("/venv/lib/python3.12/site-packages/torch/__init__.py", 2000, "<module>"),
        ];
        assert!(!is_data_loading(&import));
    }

    #[test]
    fn loaders_are_recognized_by_their_frames() {
        assert!(is_data_loading(&[py("/x/site-packages/torch/utils/data/dataloader.py", 1, "__next__")]));
        assert!(is_data_loading(&[py("/w/train.py", 3, "__getitem__")]));
        assert!(!is_data_loading(&[py("/w/train.py", 3, "forward")]));
    }
}
