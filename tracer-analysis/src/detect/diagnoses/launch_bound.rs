//! `launch-bound`: the host launch path (Python, the framework's dispatch, the driver) paces
//! the GPU: many cheap launches (eager PyTorch), or few that each cost a framework's whole
//! dispatch (a jitted call). Its fix captures the step as one CUDA graph (or compiles several
//! steps into one call); a job that already replays graphs is told to put more in each replay.

use crate::{
    detect::{
        definition::{Bearing, Definition, FoundBy, Words},
        diagnosis::{diagnosis, gpu_line, pct},
        whatif::{self, Fix, StepModel},
        Account,
    },
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, Framework, TimeBucket},
    stacks::Activity,
};
use crate::detect::thresholds::{HOST_WAIT_LOW, LAUNCH_BOUND_RATE};
use crate::detect::MEDIUM;

/// Launch-bound's fix for a job whose launches are mostly graph replays: it has graphs
/// already (a framework's "capture graphs" text is not said to it, `framework::speak`).
pub(crate) const REPLAYS_FIX: &str =
    "put more work in each replay: capture the whole step (optimizer included) in one graph, a larger batch, or several steps per call (jax.lax.scan); fewer replays per step";

/// Launches a step taken where no step marker was found: a graph of this many kernels
/// replayed as one launch.
const LAUNCHES_PER_GRAPH_WITHOUT_STEPS: f64 = 50.0;

/// What one replay of a captured graph costs the host, at most: an eager PyTorch launch's
/// cost with its dispatch on the H200 (`dispatch::LAUNCH_COST_S`'s point; a bare
/// `cudaGraphLaunch` costs less).
const REPLAY_HOST_S: f64 = 20e-6;

fn detect(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let blocked = a.share(|t| t.waiting_on_gpu_ns + t.in_copies_ns);
    if blocked >= HOST_WAIT_LOW || a.gpu_busy() == Some(true) {
        return None;
    }
    // Launch overhead is launches times their cost: many cheap ones (eager PyTorch), or few
    // that each cost a framework's whole dispatch (a jitted JAX call: argument checks, cache
    // lookup, the executable's launch). The stacks tell the second from the program's own
    // host work; without them only a rate that tiny kernels alone sustain says it.
    let threads = a.time.as_ref().map(|t| t.threads.clone()).unwrap_or_default();
    let all_host = a.share(|t| t.launching_and_host_ns);
    let dispatch = whatif::dispatch::share(ev, &threads, all_host * a.window_s, a.launch_rate * a.window_s);
    let dispatch_heavy = dispatch.source == whatif::dispatch::ShareBasis::Stacks && dispatch.share.point * all_host >= MEDIUM;
    if a.launch_rate < LAUNCH_BOUND_RATE && !dispatch_heavy {
        return None;
    }
    // The critical path's host work, less the part after a sync that host-sync is charged
    // with. NVML, where present, caps it by how idle the GPU really was.
    let host_share = a.share(|t| t.launching_and_host_ns - t.host_while_queue_empty_ns);
    let impact = host_share.min(a.gpu_idle_cap());
    // A job that already replays graphs (torch.compile's reduce-overhead, CUDA graphs, JAX's
    // XLA command buffers) is told to put more in each replay, not to capture graphs.
    let replays = a.graph_rate >= 0.5 * a.launch_rate;
    let mut evidence = vec![
        format!("{:.0} launches/s over {:.2} s ({:.0} kernel launches/s, {:.0} graph replays/s)", a.launch_rate, a.window_s, a.launch_rate - a.graph_rate, a.graph_rate),
        format!("the launching threads ran host code {} of the time and were blocked on the GPU {}", pct(host_share), pct(blocked)),
    ];
    if dispatch.source == whatif::dispatch::ShareBasis::Stacks {
        evidence.push(format!("the stacks put {} of that host time in launching and the framework's dispatch", pct(dispatch.share.point)));
    }
    evidence.extend(gpu_line(a));
    let per_launch_ms = dispatch.share.point * all_host * a.window_s * 1e3 / (a.launch_rate * a.window_s).max(1.0);
    let summary = if replays {
        format!("the host replays {:.0} graphs per second, each costing it {per_launch_ms:.2} ms, and the GPU waits for it", a.graph_rate)
    } else if a.launch_rate >= LAUNCH_BOUND_RATE {
        format!("the host launches {:.0} small kernels per second and the GPU waits for it", a.launch_rate)
    } else {
        format!("each launch costs the host {per_launch_ms:.2} ms of the framework's dispatch and the GPU waits for it")
    };
    let fix = if replays {
        REPLAYS_FIX
    } else {
        "launch fewer, larger kernels: a larger batch, CUDA graphs (torch.compile(mode=\"reduce-overhead\") or torch.cuda.graphs), or fused ops"
    };
    Some(diagnosis(DiagnosisId::LaunchBound, TimeBucket::LaunchingAndHost, impact, summary, evidence, fix))
}

fn fix(m: &StepModel, sm_over_util: Option<f64>) -> (Fix, String) {
    let per_step = m.launches_per_step.unwrap_or(LAUNCHES_PER_GRAPH_WITHOUT_STEPS).max(1.0);
    // One replay costs the host what one cheap launch does, not what a framework's
    // whole dispatch does: a jitted call of milliseconds scanned over many steps
    // (jax.lax.scan) or captured shrinks to it too.
    let per_launch = m.launch_host_s.unwrap_or(REPLAY_HOST_S);
    let replay = if per_launch > REPLAY_HOST_S { REPLAY_HOST_S / per_launch } else { 1.0 };
    // A replay allocates nothing where a caching allocator serves the step: its memory
    // is the graph's own pool. Plain allocation calls cannot be captured: they stay.
    let (keep, churn) = if m.caching_allocator { (whatif::fixes::keep_all_but(|s| s.alloc = 0.0), whatif::fixes::churn_device_work(m, sm_over_util)) } else { (Fix::NONE.keep, 1.0) };
    (
        Fix { launch_scale: replay / per_step, keep, gpu_scale: churn * whatif::fixes::back_to_back(m), ..Fix::NONE },
        format!(
            "captured as one CUDA graph (or several steps in one compiled call), the step's {per_step:.0} launches and their dispatch ({:.0} µs a launch now) become one replay{}; the program's own host work and its syncs stay",
            per_launch * 1e6,
            if m.caching_allocator { ", which allocates nothing" } else { "" }
        ),
    )
}

/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Tensorflow, Words::Fix(
        "in TensorFlow: fewer, larger kernels — compile the step with XLA (tf.function(jit_compile=True), or model.compile(jit_compile=True)), \
             several steps per call (model.compile(steps_per_execution=32)), a larger batch",
    )),
    (Framework::Deepspeed, Words::Fix(
        "in DeepSpeed: launch fewer, larger kernels — a larger \"train_micro_batch_size_per_gpu\" (\"gradient_accumulation_steps\" keeps \
             the effective batch), \"bf16\": {\"enabled\": true}, the engine compiled (model_engine.compile())",
    )),
    (Framework::Accelerate, Words::Fix(
        "with Accelerate: launch fewer, larger kernels — Accelerator(mixed_precision=\"bf16\", dynamo_backend=\"inductor\"), a larger batch \
             with Accelerator(gradient_accumulation_steps=N) to keep the effective batch",
    )),
    (Framework::Vllm, Words::Fix(VLLM)),
    (Framework::Sglang, Words::Fix(SGLANG)),
    (Framework::Jax, Words::Fix(
        "fuse more per dispatch: jit the whole step (not pieces of it), scan several steps in one call (jax.lax.scan), and keep Python out of the loop",
    )),
    (Framework::Lightning, Words::Fix(
        "in Lightning: launch fewer, larger kernels — a larger batch_size in the DataLoader (with accumulate_grad_batches to keep the \
             effective batch), the module compiled (torch.compile(model) before trainer.fit, mode=\"reduce-overhead\" for CUDA graphs), \
             Trainer(precision=\"bf16-mixed\") for fewer, fused kernels; self.log(..., on_step=False) keeps logging off the step",
    )),
    (Framework::HfTrainer, Words::Fix(
        "in the HF Trainer: launch fewer, larger kernels — TrainingArguments(torch_compile=True, torch_compile_mode=\"reduce-overhead\"), \
             a larger per_device_train_batch_size (gradient_accumulation_steps to keep the effective batch), bf16=True",
    )),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::LaunchBound,
    found_by: FoundBy::Time(detect),
    stacks: Some((&[Activity::Host], Some(true))),
    effort: 2,
    fix: Some(|_, m, sm_over_util| Some(fix(m, sm_over_util))),
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::Numa],
};

/// vLLM's and `SGLang`'s words for launching and for host work alike (`host_bound`'s too).
pub(super) const VLLM: &str = "in vLLM: keep CUDA graphs on (no enforce_eager=True) and batch more requests at once (max_num_seqs, more concurrent clients); \
             the scheduler's host time per step is paid per batch, not per request";
/// See [`VLLM`].
pub(super) const SGLANG: &str = "in SGLang: keep CUDA graphs on (no --disable-cuda-graph) with --cuda-graph-max-bs at least the running batch, and send more \
             requests at once";
