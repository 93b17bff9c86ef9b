//! How much of the critical path's host time is launching: the launch calls and the
//! framework's dispatch around them (what CUDA graphs and fusion remove), against the
//! program's own code (what they leave). The stacks say it; without them, the launches
//! times what one launch costs the host.
//!
//! Two views of the same on-CPU host time, each a lower bound of the launching part:
//! - **native** (the kernel's CPU samples): a stack with a frame in the CUDA driver or
//!   runtime, a math library or a framework's native library (`ATen`, `c10`, XLA) is
//!   dispatch. The sampled instruction alone decides where frame pointers cut the stack,
//!   so the view holds without unwinding. It misses a framework's Python-level overhead:
//!   the interpreter running `nn.Module.__call__` shows only libpython frames.
//! - **Python** (py-spy): a stack with a frame of the framework's Python package below
//!   the user's code (`torch/nn/modules/module.py` around a `forward`, `torch/optim`,
//!   `torch/autograd`) is producing launches: a graph replay would run none of it. The
//!   framework's launchers and data loading (`torch/distributed/`, `torch/utils/data/`)
//!   are not dispatch. It misses a user line that calls an op directly.
//!
//! The larger of the two is taken, with one exception: the Python frames decide first. A
//! sample whose Python stack is in data loading (a `__getitem__`, a collate, a DataLoader's
//! fetch) is loading whatever native library runs below it, so the native view's share is
//! capped by the share of Python samples that are not loading: `torch.from_numpy`,
//! `torch.stack` and `pin_memory` in a training thread's own loader run in `libtorch` and
//! were counted as dispatch (a DataLoader with `num_workers=0` was offered CUDA graphs at
//! x15 where 12 workers measured x5.4, issue 57).
//!
//! And in both views, time says what no frame can: dispatch is the launch stream, so a
//! sample of host code taken long after its thread's latest launch (`StackTime::launch_ages`,
//! [`APART_PACES`] times the threads' host time per launch) is the program's own work, in
//! whatever library it runs. Data prepared through `torch` on the training thread outside any
//! loader (a `get_batch` of `torch.stack`s, per-sample transforms of CPU tensors) runs in
//! `libtorch` for milliseconds between steps without a launch, and was taken for dispatch.

use std::collections::HashSet;

use super::range::Range;
use crate::{
    evidence::Evidence,
    stacks::{Activity, Frame, Origin, StackTime},
};

/// What one kernel launch costs the host, where stacks do not say: from an empty kernel
/// through `cuLaunchKernel` (5.9 µs untraced, docs/facts.md) to a launch inside an eager
/// PyTorch training step with its Python and dispatch (20–32 µs on the H200: launching share
/// of host time times host time over launches, in the eager jobs of docs/validation.md).
const LAUNCH_COST_S: Range = Range { lo: 3e-6, point: 20e-6, hi: 40e-6 };
/// Fewer samples than this in a view: the view says nothing.
const MIN_SAMPLES: u64 = 8;
/// Host code sampled this many paces of the launch stream (its host time per launch,
/// [`apart_after_ns`]) after its thread's latest launch is apart from the stream. Dispatch
/// runs within about a pace of a launch, the pace being its mean; a sample sixteen paces on is
/// in work that launched nothing meanwhile. The ages come in classes twice apart
/// (`gputrace_common::host::launch_age`), taken as spread evenly within each.
pub const APART_PACES: f64 = 16.0;

/// Where the launching share of host time comes from (the report's `launching_source`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShareBasis {
    /// On-CPU stacks of the launching threads.
    Stacks,
    /// Launches times a launch's host cost.
    #[default]
    LaunchCost,
}

impl ShareBasis {
    /// The name the report uses: `stacks` or `launch-cost`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Stacks => "stacks",
            Self::LaunchCost => "launch-cost",
        }
    }
}

/// The launching share of host time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Dispatch {
    /// The share of the launching threads' on-CPU host time spent launching (0..1), as a range.
    pub share: Range,
    /// Which view gave `share`.
    pub source: ShareBasis,
    /// Samples the stacks view rests on.
    pub samples: u64,
}

/// The launching share of the `threads`' host time (`host_s` seconds, `launches` launches).
#[must_use]
pub fn share(ev: &Evidence, threads: &[u32], host_s: f64, launches: f64) -> Dispatch {
    let not_loading = 1.0 - python_loading_share(ev, threads);
    let apart = apart_after_ns(ev, threads, host_s, launches);
    let views: Vec<(f64, u64)> = [Origin::Native, Origin::Python]
        .into_iter()
        .filter_map(|origin| view(on_cpu_host(ev, threads, origin), origin, apart))
        .map(|(share, samples)| (share.min(not_loading), samples))
        .collect();
    if let Some(&(point, samples)) = views.iter().max_by(|a, b| a.0.total_cmp(&b.0)) {
        // Two standard errors of a sampled share.
        let spread = 2.0 * (point * (1.0 - point) / samples.max(1) as f64).sqrt();
        let lo = views.iter().map(|v| v.0).fold(point, f64::min);
        return Dispatch {
            share: Range { lo: (lo - spread).clamp(0.0, 1.0), point, hi: (point + spread).clamp(0.0, 1.0) },
            source: ShareBasis::Stacks,
            samples,
        };
    }
    let of = |cost: f64| if host_s > 0.0 { (launches * cost / host_s).clamp(0.0, 1.0) } else { 0.0 };
    Dispatch {
        share: Range { lo: of(LAUNCH_COST_S.lo), point: of(LAUNCH_COST_S.point), hi: of(LAUNCH_COST_S.hi) },
        source: ShareBasis::LaunchCost,
        samples: 0,
    }
}

/// Of the `threads`' on-CPU Python samples of host work, the share in data loading
/// (`stacks::sites::is_data_loading`); 0 with too few samples.
fn python_loading_share(ev: &Evidence, threads: &[u32]) -> f64 {
    let (mut loading, mut all, mut samples) = (0u64, 0u64, 0u64);
    for s in on_cpu_host(ev, threads, Origin::Python) {
        all += s.ns;
        samples += s.count;
        if is_loading_outside_the_framework(&s.frames) {
            loading += s.ns;
        }
    }
    if samples < MIN_SAMPLES || all == 0 {
        0.0
    } else {
        loading as f64 / all as f64
    }
}

/// A Python stack in data loading by a frame of the program's or a loader's own (a dataset's
/// `__getitem__`, a collate, `torch/utils/data/`), not a framework's (a JAX array's
/// `__getitem__` is dispatch).
fn is_loading_outside_the_framework(frames: &[Frame]) -> bool {
    !crate::stacks::sites::is_importing(frames) && frames.iter().any(|f| !is_framework_frame(f) && crate::stacks::sites::is_data_loading(std::slice::from_ref(f)))
}

/// The `threads`' on-CPU samples of host work, of one origin.
fn on_cpu_host<'a>(ev: &'a Evidence, threads: &'a [u32], origin: Origin) -> impl Iterator<Item = &'a StackTime> {
    ev.stacks.iter().filter(move |s| s.activity == Activity::Host && s.on_cpu && s.origin == origin && threads.contains(&s.tid))
}

/// How long after its thread's latest launch a sample of host code is apart from the launch
/// stream: [`APART_PACES`] paces of the stream, its host time per launch. The pace of all the
/// host time (`host_s` over `launches`) counts the work apart from the stream too, which a
/// step of few launches and much of it makes longer than the work itself (20 ms of batch
/// making and 30 launches: a pace of 0.7 ms, apart only after 11 ms); so the pace is taken
/// again without the time found apart, until it settles, never below what a launch costs the
/// host at least. Never apart without launches. The threads' native samples say it, or their
/// Python ones where they have no native samples with ages.
#[must_use]
pub fn apart_after_ns(ev: &Evidence, threads: &[u32], host_s: f64, launches: f64) -> u64 {
    if launches < 1.0 || host_s <= 0.0 {
        return u64::MAX;
    }
    let aged = |origin| on_cpu_host(ev, threads, origin).filter(|s| !s.launch_ages.is_empty()).collect::<Vec<_>>();
    let stacks = Some(aged(Origin::Native)).filter(|v| !v.is_empty()).unwrap_or_else(|| aged(Origin::Python));
    let all: u64 = stacks.iter().map(|s| s.ns).sum();
    let mut pace = host_s / launches;
    if all > 0 {
        for _ in 0..PACE_ROUNDS {
            let after = (APART_PACES * pace * 1e9) as u64;
            let apart: u64 = stacks.iter().map(|s| apart_ns(s, after)).sum();
            let next = (host_s * (1.0 - apart as f64 / all as f64) / launches).max(LAUNCH_COST_S.lo);
            let settled = (next - pace).abs() <= 0.01 * pace;
            pace = next;
            if settled {
                break;
            }
        }
    }
    (APART_PACES * pace * 1e9) as u64
}

/// Rounds of [`apart_after_ns`]'s pace at most: each leaves the next some of the work apart;
/// a pace that has not settled by then is close to where it would.
const PACE_ROUNDS: usize = 12;

/// Of the `threads`' on-CPU native host time, the share that runs in a framework's native
/// code (the view's dispatch objects) apart from the launch stream (`apart_after` ns after a
/// launch): the framework's CPU kernels doing the program's own work, which on a training
/// thread is making the next batch (`torch.stack`, transforms of CPU tensors, `from_numpy`).
/// The step model counts it with the data loading (`StepModel::loading_share`): work that the
/// next step needs, which workers can make ahead, and no bookkeeping that logging every N steps
/// would drop. 0 with too few samples, or where no age is known.
#[must_use]
pub fn framework_work_apart_share(ev: &Evidence, threads: &[u32], apart_after: u64) -> f64 {
    let (mut apart, mut all, mut samples) = (0u64, 0u64, 0u64);
    for s in on_cpu_host(ev, threads, Origin::Native).filter(|s| !crate::stacks::sites::is_importing(&s.frames)) {
        all += s.ns;
        samples += s.count;
        if native_is_dispatch(&s.frames) == Some(true) {
            apart += apart_ns(s, apart_after);
        }
    }
    if samples < MIN_SAMPLES || all == 0 {
        0.0
    } else {
        apart as f64 / all as f64
    }
}

/// Of `s`'s time, the part sampled at least `apart_after` ns after its thread's latest launch.
fn apart_ns(s: &StackTime, apart_after: u64) -> u64 {
    if s.count == 0 {
        return 0;
    }
    let apart = s.launch_ages.at_least(apart_after).min(s.count as f64);
    (s.ns as f64 * apart / s.count as f64) as u64
}

/// The dispatch share of one view's stacks and the samples it rests on; None with too few.
/// A dispatch stack's time apart from the launch stream (`apart_after` ns after a launch) is
/// the program's own.
fn view<'a>(stacks: impl Iterator<Item = &'a StackTime>, origin: Origin, apart_after: u64) -> Option<(f64, u64)> {
    let (mut dispatch, mut all, mut samples) = (0u64, 0u64, 0u64);
    // Importing a module is neither: a one-time cost (`sites::is_importing`).
    let stacks: Vec<&StackTime> = stacks.filter(|s| !crate::stacks::sites::is_importing(&s.frames)).collect();
    let calling = if origin == Origin::Python { launching_lines(&stacks) } else { HashSet::new() };
    for s in stacks {
        let Some(is_dispatch) = (match origin {
            Origin::Native => native_is_dispatch(&s.frames),
            Origin::Python => Some(python_is_dispatch(&s.frames) || s.frames.first().is_some_and(|f| calling.contains(&line_of(f)))),
        }) else {
            continue;
        };
        all += s.ns;
        samples += s.count;
        if is_dispatch {
            dispatch += s.ns - apart_ns(s, apart_after);
        }
    }
    (samples >= MIN_SAMPLES && all > 0).then(|| (dispatch as f64 / all as f64, samples))
}

/// Native objects whose code is launching or dispatch.
const DISPATCH_OBJECTS: [&str; 14] = [
    "libcuda.", "libcudart", "libnvidia-", "libcublas", "libcudnn", "libnvrtc", "libnvJitLink", "libtorch", "libc10", "libxla", "xla_extension", "libtensorflow", "libtriton", "libnccl",
];
/// Native objects that say nothing of who called them (a stack cut at them is unknown).
const SYSTEM_OBJECTS: [&str; 7] = ["libc.so", "libc-", "ld-linux", "libpthread", "libgcc", "libstdc++", "libm."];

fn object(f: &Frame) -> &str {
    f.module.as_deref().unwrap_or_default().rsplit('/').next().unwrap_or_default()
}

/// Some(true) for a dispatch stack, Some(false) for the program's own code, None for a
/// stack that names only system objects (or nothing).
fn native_is_dispatch(frames: &[Frame]) -> Option<bool> {
    if frames.iter().any(|f| {
        let o = object(f);
        DISPATCH_OBJECTS.iter().any(|d| o.starts_with(d)) || f.module.as_deref().is_some_and(|m| m.contains("/torch/") || m.contains("/jaxlib/"))
    }) {
        return Some(true);
    }
    let known = frames.iter().any(|f| {
        let o = object(f);
        !o.is_empty() && !o.starts_with('[') && !SYSTEM_OBJECTS.iter().any(|s| o.starts_with(s))
    });
    known.then_some(false)
}

/// What PyTorch's caching allocator's functions are named with (`c10::cuda::
/// CUDACachingAllocator::…`).
const CACHING_ALLOCATOR: &str = "CachingAllocator";
/// Functions of a caching allocator's slow path: asking the driver for memory, giving it
/// back, emptying the cache. With the cache left warm they no longer run; its fast path (a
/// free block found in the pool) stays and is dispatch.
const ALLOCATOR_SLOW_PATH: [&str; 9] = [
    "alloc_block",
    "release_block",
    "release_cached_blocks",
    "release_available_cached_blocks",
    "emptyCache",
    "garbage_collect_cached_blocks",
    "synchronize_and_free_events",
    "map_block",
    "release_expandable_segment",
];
/// The driver's own allocation calls: their time is measured by the probes (the `alloc`
/// segment), so a stack inside one is no host time.
const DRIVER_ALLOC_CALLS: [&str; 6] = ["cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree", "cuMemMap", "cuMemUnmap"];

/// Whether a caching allocator (PyTorch's) made the device allocations: a native frame of
/// it in the allocations' stacks or the host's samples. A graph's replay then allocates
/// nothing (its memory is the graph's own pool); plain allocation calls cannot be captured.
#[must_use]
pub fn caching_allocator(ev: &Evidence) -> bool {
    let named = |frames: &[Frame]| frames.iter().any(|f| f.function.contains(CACHING_ALLOCATOR));
    ev.alloc_stacks.iter().any(|s| named(&s.frames)) || ev.stacks.iter().any(|s| s.origin == Origin::Native && named(&s.frames))
}

/// Of the `threads`' on-CPU native host time outside the driver's allocation calls, the
/// share in a caching allocator's slow path (PyTorch's `CUDACachingAllocator` walking and
/// splitting its pools after an `empty_cache()`): host time that allocation churn costs
/// beyond the driver's calls, counted as dispatch by [`share`] because it lives in `libc10`.
/// 0 with too few samples.
#[must_use]
pub fn allocator_share(ev: &Evidence, threads: &[u32]) -> f64 {
    let (mut slow, mut all, mut samples) = (0u64, 0u64, 0u64);
    for s in on_cpu_host(ev, threads, Origin::Native) {
        let named = |names: &[&str]| s.frames.iter().any(|f| names.iter().any(|n| f.function.contains(n)));
        if named(&DRIVER_ALLOC_CALLS) {
            continue;
        }
        all += s.ns;
        samples += s.count;
        if s.frames.iter().any(|f| f.function.contains(CACHING_ALLOCATOR) && ALLOCATOR_SLOW_PATH.iter().any(|n| f.function.contains(n))) {
            slow += s.ns;
        }
    }
    if samples < MIN_SAMPLES || all == 0 {
        0.0
    } else {
        slow as f64 / all as f64
    }
}

/// A Python frame's place: its file and line.
fn line_of(f: &Frame) -> (&str, Option<u32>) {
    (f.file.as_deref().unwrap_or_default(), f.line)
}

/// The program's lines that call into the framework's launching code: in some sample the
/// frame just inside theirs is the framework's. Their own time, the interpreter running
/// `model(x).square().mean().backward()`, produces launches as the framework's does, and a
/// graph's replay runs none of it (on the H200, 7 % of `launch_bound`'s host time, ~2 µs
/// an op, that the Python view had counted as the program's work). A line that loops over
/// text calls no framework and stays the program's.
fn launching_lines<'a>(stacks: &[&'a StackTime]) -> HashSet<(&'a str, Option<u32>)> {
    let mut lines = HashSet::new();
    for s in stacks {
        for pair in s.frames.windows(2) {
            if is_framework_frame(&pair[0]) && !is_framework_frame(&pair[1]) {
                lines.insert(line_of(&pair[1]));
            }
        }
    }
    lines
}

fn is_framework_frame(f: &Frame) -> bool {
    let file = f.file.as_deref().unwrap_or_default();
    FRAMEWORK_DIRS.iter().any(|d| file.contains(d)) && !NOT_DISPATCH.iter().any(|d| file.contains(d))
}

/// Python packages whose frames below the user's code produce launches.
const FRAMEWORK_DIRS: [&str; 8] = ["/torch/", "/jax/", "/jaxlib/", "/flax/", "/optax/", "/triton/", "/tensorflow/", "/keras/"];
/// Parts of those packages that launch processes or load data, not kernels.
const NOT_DISPATCH: [&str; 5] = ["/torch/utils/data/", "/torch/distributed/", "/torch/multiprocessing/", "/torch/utils/tensorboard/", "/tensorflow/python/data/"];

/// A stack in the framework's code, unless it is in a data loader's: a Keras `fit` that maps
/// its `tf.data` input on the main thread has framework frames above the loader's. By path
/// only (a JAX array's `__getitem__` is dispatch, a dataset's is not).
fn python_is_dispatch(frames: &[Frame]) -> bool {
    const LOADERS: [&str; 3] = ["/torch/utils/data/", "/tensorflow/python/data/", "/grain/"];
    let loading = frames.iter().any(|f| f.file.as_deref().is_some_and(|file| LOADERS.iter().any(|l| file.contains(l))));
    frames.iter().any(is_framework_frame) && !loading
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(module: &str) -> Frame {
        Frame { function: "f".into(), file: None, line: None, module: Some(module.into()) }
    }

    fn py(file: &str) -> Frame {
        Frame { function: "f".into(), file: Some(file.into()), line: Some(1), module: None }
    }

    #[test]
    fn native_stacks_are_dispatch_where_a_framework_or_driver_frame_is_in_them() {
        assert_eq!(native_is_dispatch(&[native("/usr/lib/libcuda.so.1"), native("/w/job")]), Some(true));
        assert_eq!(native_is_dispatch(&[native("/venv/torch/lib/libtorch_cpu.so"), native("/usr/bin/python3.12")]), Some(true));
        assert_eq!(native_is_dispatch(&[native("/w/job"), native("/lib/x86_64-linux-gnu/libc.so.6")]), Some(false));
        assert_eq!(native_is_dispatch(&[native("/lib/x86_64-linux-gnu/libc.so.6")]), None, "a stack cut in libc says nothing");
    }

    #[test]
    fn python_stacks_under_the_frameworks_module_calls_are_dispatch_but_its_loader_is_not() {
        assert!(python_is_dispatch(&[py("/w/model.py"), py("/venv/torch/nn/modules/module.py"), py("/w/train.py")]));
        assert!(!python_is_dispatch(&[py("/w/bookkeeping.py"), py("/w/train.py")]));
        assert!(!python_is_dispatch(&[py("/w/data.py"), py("/venv/torch/utils/data/dataloader.py"), py("/w/train.py")]));
        assert!(!python_is_dispatch(&[py("/w/train.py"), py("/venv/torch/distributed/run.py")]), "a launcher below the loop");
        let keras_fit_mapping_its_input = [py("/venv/tensorflow/python/data/ops/dataset_ops.py"), py("/venv/keras/src/trainers/trainer.py"), py("/w/train.py")];
        assert!(!python_is_dispatch(&keras_fit_mapping_its_input), "tf.data under Keras's fit is loading");
    }

    fn host_stack(tid: u32, functions: &[&str], count: u64) -> StackTime {
        let frames = functions.iter().map(|f| Frame { function: (*f).into(), file: None, line: None, module: Some("/venv/torch/lib/libc10_cuda.so".into()) }).collect();
        StackTime { tid, frames, ns: count * 10_000_000, count, on_cpu: true, origin: Origin::Native, activity: Activity::Host, pid: tid, launch_ages: crate::stacks::LaunchAges::default() }
    }

    #[test]
    fn the_allocators_slow_path_outside_the_drivers_calls_is_its_share() {
        let slow = "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::release_block(Block*)";
        let fast = "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)";
        let mut ev = Evidence {
            stacks: vec![
                host_stack(1, &["free", slow], 2),
                // inside the driver's call: timed by the probes, neither side of the share
                host_stack(1, &["cudaFree", slow], 5),
                host_stack(1, &["get_free_block", fast], 3),
                host_stack(1, &["at::native::add"], 5),
                // another process's thread
                host_stack(9, &["free", slow], 50),
            ],
            ..Evidence::default()
        };
        assert!((allocator_share(&ev, &[1]) - 0.2).abs() < 1e-9, "2 of 10 samples: {}", allocator_share(&ev, &[1]));
        ev.stacks.truncate(2);
        assert!(allocator_share(&ev, &[1]).abs() < 1e-9, "two samples say nothing");
    }

    fn python_stack(frames: &[(&str, u32)], count: u64) -> StackTime {
        let frames = frames.iter().map(|&(file, line)| Frame { function: "f".into(), file: Some(file.into()), line: Some(line), module: None }).collect();
        StackTime { tid: 1, pid: 1, frames, ns: count * 10_000_000, count, on_cpu: true, origin: Origin::Python, activity: Activity::Host, launch_ages: crate::stacks::LaunchAges::default() }
    }

    #[test]
    fn a_line_that_calls_the_framework_is_launching_even_when_the_interpreter_is_on_it() {
        let module = "/venv/torch/nn/modules/module.py";
        let stacks = [
            // inside the model's forward, called from train.py:10
            python_stack(&[(module, 1), ("/w/train.py", 10), ("/w/train.py", 20)], 6),
            // the interpreter on line 10 itself (the op calls that have no Python frame)
            python_stack(&[("/w/train.py", 10), ("/w/train.py", 20)], 2),
            // a tokenizer's loop: it calls no framework
            python_stack(&[("/w/tokens.py", 5), ("/w/train.py", 12), ("/w/train.py", 20)], 2),
        ];
        let (share, samples) = view(stacks.iter(), Origin::Python, u64::MAX).expect("ten samples");
        assert_eq!(samples, 10);
        assert!((share - 0.8).abs() < 1e-9, "the model's 6 and line 10's 2 of 10: {share}");
    }

    #[test]
    fn without_stacks_the_launches_times_their_cost_are_the_share() {
        let d = share(&Evidence::default(), &[1], 1.0, 20_000.0);
        assert_eq!(d.source, ShareBasis::LaunchCost);
        assert!((d.share.point - 0.4).abs() < 1e-9, "20,000 launches at 20 µs: {d:?}");
        assert!(d.share.lo < d.share.point && d.share.point < d.share.hi);
    }

    /// Issue 57: data preparation through torch on the training thread (`torch.stack` under
    /// a dataset's `__getitem__`) runs in `libtorch`; the native view took it for dispatch.
    /// The Python frames say it is loading, and they decide.
    #[test]
    fn loading_through_the_framework_on_the_training_thread_is_not_dispatch() {
        let native_stack = |ns| StackTime {
            tid: 1,
            pid: 1,
            activity: Activity::Host,
            on_cpu: true,
            origin: Origin::Native,
            frames: vec![native("/venv/torch/lib/libtorch_cpu.so"), native("/usr/bin/python3.12")],
            count: 10,
            ns,
            launch_ages: crate::stacks::LaunchAges::default(),
        };
        let py_stack = |frames: Vec<Frame>, ns| StackTime { tid: 1, pid: 1, activity: Activity::Host, on_cpu: true, origin: Origin::Python, frames, count: 10, ns, launch_ages: crate::stacks::LaunchAges::default() };
        let getitem = Frame { function: "__getitem__".into(), file: Some("/w/data.py".into()), line: Some(9), module: None };
        let forward = vec![py("/w/model.py"), py("/venv/torch/nn/modules/module.py"), py("/w/train.py")];
        // Every native sample in libtorch; the Python samples: 80 % a dataset's __getitem__
        // (over torch.stack), 20 % the model's forward.
        let mut ev = Evidence {
            stacks: vec![
                native_stack(1_000_000_000),
                py_stack(vec![py("/venv/torch/functional.py"), getitem, py("/venv/torch/utils/data/dataloader.py"), py("/w/train.py")], 800_000_000),
                py_stack(forward, 200_000_000),
            ],
            ..Evidence::default()
        };
        let d = share(&ev, &[1], 1.0, 1000.0);
        assert_eq!(d.source, ShareBasis::Stacks);
        assert!((d.share.point - 0.2).abs() < 1e-9, "the loading is not dispatch: {d:?}");
        // Without Python samples the native view stands.
        ev.stacks.truncate(1);
        assert!((share(&ev, &[1], 1.0, 1000.0).share.point - 1.0).abs() < 1e-9);
    }

    /// The brief's case (2026-12-07): batches made through `torch` on the training thread by
    /// a function of the program's, no loader frame to say so. Every native sample is in
    /// `libtorch`; the time since the thread's latest launch tells the batch's making (tens of
    /// ms after one) from the step's dispatch (within microseconds of one).
    #[test]
    fn host_work_long_after_the_threads_latest_launch_is_not_dispatch_whatever_library_runs_it() {
        use gputrace_common::host::launch_age;
        let mut making = crate::stacks::LaunchAges::default();
        making.add(launch_age::of(20_000_000), 80);
        let mut launching = crate::stacks::LaunchAges::default();
        launching.add(launch_age::of(3_000), 20);
        let stack = |launch_ages, count: u64| StackTime {
            tid: 1,
            pid: 1,
            activity: Activity::Host,
            on_cpu: true,
            origin: Origin::Native,
            frames: vec![native("/venv/torch/lib/libtorch_cpu.so"), native("/usr/bin/python3.12")],
            count,
            ns: count * 10_000_000,
            launch_ages,
        };
        let ev = Evidence { stacks: vec![stack(making, 80), stack(launching, 20)], ..Evidence::default() };
        // 1 s of host time for 1 000 launches: a pace of 1 ms, 0.2 ms once the 80 % of it
        // made 20 ms after a launch is left out; apart after 16 paces.
        let after = apart_after_ns(&ev, &[1], 1.0, 1000.0);
        assert!((after as f64 - 16.0 * 0.2e-3 * 1e9).abs() < 1e3, "{after}");
        let d = share(&ev, &[1], 1.0, 1000.0);
        assert!((d.share.point - 0.2).abs() < 1e-9, "only the launch stream is dispatch: {d:?}");
        // Ages unknown (an older recording): every libtorch sample is dispatch, as before.
        let unknown = Evidence { stacks: vec![stack(crate::stacks::LaunchAges::default(), 100)], ..Evidence::default() };
        assert!((share(&unknown, &[1], 1.0, 1000.0).share.point - 1.0).abs() < 1e-9);
        // A thread at a launch every 10 ms of its host time keeps 20 ms-old samples as
        // dispatch: they are within sixteen of its paces.
        assert!((share(&ev, &[1], 10.0, 1000.0).share.point - 1.0).abs() < 1e-9);
    }
}
