//! Which framework the job runs, from what its stacks show (the native libraries its frames
//! are in, the Python files of its frames), so that each fix is said in that framework's
//! terms: its knobs, flags and environment variables (issue 35). From the stacks alone, so a
//! recording's offline report names it as the live one does; without stacks it is unknown.

use crate::{
    model::{Diagnosis, DiagnosisId},
    stacks::StackTime,
};

pub use crate::model::Framework;

/// Python paths that mark a layer over PyTorch, the outermost first (a Lightning job may
/// also run Accelerate or `DeepSpeed` beneath it).
const LAYERS: [(&str, Framework); 8] = [
    ("/vllm/", Framework::Vllm),
    ("/sglang/", Framework::Sglang),
    ("/lightning/pytorch/", Framework::Lightning),
    ("/pytorch_lightning/", Framework::Lightning),
    ("/transformers/trainer.py", Framework::HfTrainer),
    ("/accelerate/", Framework::Accelerate),
    ("/deepspeed/", Framework::Deepspeed),
    ("/torch/", Framework::Pytorch),
];

/// The framework the stacks show, if any: the native libraries their frames are in (the
/// mapped libraries the job runs), and the Python files of their frames.
#[must_use]
pub fn of(stacks: &[StackTime]) -> Option<Framework> {
    let files = || stacks.iter().flat_map(|s| &s.frames).filter_map(|f| f.file.as_deref());
    let objects = || stacks.iter().flat_map(|s| &s.frames).filter_map(|f| f.module.as_deref()).map(|m| m.rsplit('/').next().unwrap_or(m));
    if objects().any(|o| o.starts_with("xla_extension") || o.starts_with("libjax")) || files().any(|f| f.contains("/jax/") || f.contains("/jaxlib/")) {
        return Some(Framework::Jax);
    }
    if objects().any(|o| o.starts_with("libtensorflow") || o.starts_with("_pywrap_tensorflow")) || files().any(|f| f.contains("/tensorflow/")) {
        return Some(Framework::Tensorflow);
    }
    if let Some(&(_, layer)) = LAYERS.iter().find(|(mark, _)| files().any(|f| f.contains(mark))) {
        return Some(layer);
    }
    objects().any(|o| o.starts_with("libtorch") || o.starts_with("libc10")).then_some(Framework::Pytorch)
}

/// Say each fix in `framework`'s terms where they differ from plain PyTorch's, and each
/// memory note where PyTorch's caching allocator is not the one that holds the memory.
pub fn speak(found: &mut [Diagnosis], framework: Option<Framework>) {
    let Some(fw) = framework else { return };
    for d in found {
        // A job that replays graphs already keeps the replay fix, except in JAX, whose own
        // text says the same in its terms.
        if d.id == DiagnosisId::LaunchBound && d.fix == super::rules::REPLAYS_FIX && fw != Framework::Jax {
            continue;
        }
        if let Some(fix) = fix_in(fw, d) {
            d.fix = fix.into();
        }
        if let (DiagnosisId::MemoryReserved, Some(holder)) = (d.id, holder_in(fw)) {
            // "the job holds 100 GiB (75% of the GPU): <why>": the why is the framework's.
            if let Some((held, _)) = d.summary.split_once(": ") {
                d.summary = format!("{held}: {holder}");
            }
        }
    }
}

/// Why a job of `fw` holds memory it is not using, where not PyTorch's caching allocator.
fn holder_in(fw: Framework) -> Option<&'static str> {
    Some(match fw {
        Framework::Jax => "XLA's allocator preallocates a share of the GPU at start (75 % by default) and keeps it, so nvidia-smi shows it used whatever the arrays in it",
        Framework::Tensorflow => "TensorFlow maps nearly all of the GPU's memory at start and keeps it, so nvidia-smi shows it used whatever the tensors in it",
        Framework::Vllm => "vLLM reserves gpu_memory_utilization of the GPU (0.9 by default) at start for the weights and the KV cache, and keeps it",
        Framework::Sglang => "SGLang reserves --mem-fraction-static of the GPU at start for the weights and the KV cache, and keeps it",
        _ => return None,
    })
}

/// Each framework's fix for the diagnoses it words its own way; the rest keep plain PyTorch's.
#[rustfmt::skip]
const FIXES: &[(Framework, &[DiagnosisId], &str)] = &[
    (Framework::Jax, &[DiagnosisId::BlockingCopy],
        "JAX: read results back less often (jax.device_get and np.asarray of a device array wait for it), and put the next \
             inputs on the device with jax.device_put ahead of the step so that the copy overlaps the one running"),
    (Framework::Jax, &[DiagnosisId::AllocChurn],
        "JAX: keep shapes and dtypes fixed so that XLA reuses its buffers (pad batches to a few sizes); leave \
             XLA_PYTHON_CLIENT_ALLOCATOR at its default (\"platform\" allocates and frees on every use)"),
    (Framework::Jax, &[DiagnosisId::SmallKernels],
        "give each dispatch more work: a larger batch, the whole step in one jax.jit, several steps in one call (jax.lax.scan), \
             small pieces batched with jax.vmap"),
    (Framework::Jax, &[DiagnosisId::CpuStarved],
        "give the job its CPUs: stop or move competing processes, raise the cgroup/container CPU limit, and keep input workers \
             (Grain's worker_count, tf.data's parallelism) and XLA's threads within the cores you have"),
    (Framework::Jax, &[DiagnosisId::IoStall],
        "read input ahead of the step in worker processes (grain.DataLoader(worker_count > 0), or tf.data with prefetch), \
             and keep the data in memory or on faster storage"),
    (Framework::Jax, &[DiagnosisId::CheckpointStall],
        "checkpoint asynchronously and less often (orbax.checkpoint's AsyncCheckpointer, or a CheckpointManager with async saves)"),
    (Framework::Jax, &[DiagnosisId::Fragmentation],
        "JAX: keep shapes fixed (pad to a few bucket sizes) so that XLA reuses its buffers, lower the peak (jax.checkpoint, \
             donate_argnums), and leave XLA the share it preallocates (XLA_PYTHON_CLIENT_MEM_FRACTION)"),
    (Framework::Jax, &[DiagnosisId::CommBound],
        "JAX: move fewer bytes between devices (bf16 gradients, sharding the state with jax.sharding instead of replicating \
             it), accumulate gradients over several micro-batches before each psum, or use a faster interconnect (NVLink rather than PCIe)"),
    (Framework::Tensorflow, &[DiagnosisId::CommBound],
        "in TensorFlow: move fewer bytes between devices (mixed precision, gradient accumulation before each all-reduce), pack \
             them (tf.distribute.experimental.CommunicationOptions(bytes_per_pack=...)), or use a faster interconnect (NVLink rather than PCIe)"),
    (Framework::Tensorflow, &[DiagnosisId::BlockingCopy],
        "in TensorFlow: read tensors back less often (.numpy() waits for the GPU), and let tf.data copy batches to the GPU ahead \
             of the step (tf.data.experimental.prefetch_to_device)"),
    (Framework::Tensorflow, &[DiagnosisId::AllocChurn, DiagnosisId::Fragmentation],
        "in TensorFlow: keep shapes fixed (padded_batch to a few sizes, a tf.function input_signature) so that the allocator \
             reuses its blocks; TF_GPU_ALLOCATOR=cuda_malloc_async lets the driver pool the memory"),
    (Framework::Tensorflow, &[DiagnosisId::SmallKernels],
        "in TensorFlow: fewer, larger kernels — XLA (tf.function(jit_compile=True)), a larger batch, several steps per call \
             (model.compile(steps_per_execution=32))"),
    (Framework::Tensorflow, &[DiagnosisId::CpuStarved],
        "give the job its CPUs: stop or move competing processes, raise the cgroup/container CPU limit, and bound tf.data's \
             threads (tf.data.Options().threading.private_threadpool_size) and TensorFlow's (tf.config.threading) to the cores you have"),
    (Framework::Tensorflow, &[DiagnosisId::IoStall],
        "in TensorFlow: read ahead in tf.data (interleave(..., num_parallel_calls=tf.data.AUTOTUNE), prefetch), and cache() \
             the data in memory or on faster storage"),
    (Framework::Tensorflow, &[DiagnosisId::CheckpointStall],
        "checkpoint less often and off the step: tf.train.CheckpointOptions(experimental_enable_async_checkpoint=True)"),
    (Framework::Jax, &[DiagnosisId::HostSync],
        "JAX dispatches asynchronously until a value is read: keep metrics on the device and read them every N steps, not each step \
             (float(loss), .item(), jax.device_get and block_until_ready each wait for the GPU)"),
    (Framework::Jax, &[DiagnosisId::Oom],
        "lower the peak: a smaller batch, activations rematerialized (jax.checkpoint), buffers donated to the step \
             (jax.jit(step, donate_argnums=...)); XLA_PYTHON_CLIENT_MEM_FRACTION above its 0.75 default gives XLA more of the GPU \
             where nothing else needs it"),
    (Framework::Jax, &[DiagnosisId::MemoryGrowth],
        "find the device arrays that outlive their step (a Python list of outputs or metrics: keep jax.device_get copies, or \
             drop the references); jax.live_arrays() lists what is held; a jitted function retraced for new shapes keeps each \
             compilation's executable: keep shapes fixed"),
    (Framework::Tensorflow, &[DiagnosisId::Oom],
        "lower the peak: a smaller batch, mixed precision (tf.keras.mixed_precision.set_global_policy(\"mixed_float16\")); \
             where another process shares the GPU, tf.config.experimental.set_memory_growth(gpu, True) lets TensorFlow take only what it uses"),
    (Framework::Tensorflow, &[DiagnosisId::MemoryGrowth],
        "find the tensors that outlive their step (a Python list of results: keep .numpy() copies, or drop them), and \
             retracing: a tf.function called with new shapes or Python values builds a new graph each time \
             (tf.function(reduce_retracing=True), an input_signature)"),
    (Framework::Jax, &[DiagnosisId::PageableCopy],
        "JAX copies numpy inputs from pageable memory: put the next batch on the device while the step runs (jax.device_put ahead \
             of time, as flax.jax_utils.prefetch_to_device does), or stage batches in pinned host memory (a sharding with \
             memory_kind=\"pinned_host\")"),
    (Framework::Tensorflow, &[DiagnosisId::PageableCopy],
        "in TensorFlow: let tf.data copy the next batch to the GPU while the step runs \
             (dataset.apply(tf.data.experimental.prefetch_to_device(\"/gpu:0\")), after .prefetch)"),
    (Framework::Tensorflow, &[DiagnosisId::HostBound, DiagnosisId::InputStarved],
        "in TensorFlow: feed the step from tf.data in parallel and ahead of it — dataset.map(..., num_parallel_calls=tf.data.AUTOTUNE)\
             .prefetch(tf.data.AUTOTUNE), .cache() where the data fits; in Keras, model.compile(..., steps_per_execution=32) runs several \
             steps per call"),
    (Framework::Tensorflow, &[DiagnosisId::LaunchBound],
        "in TensorFlow: fewer, larger kernels — compile the step with XLA (tf.function(jit_compile=True), or model.compile(jit_compile=True)), \
             several steps per call (model.compile(steps_per_execution=32)), a larger batch"),
    (Framework::Tensorflow, &[DiagnosisId::HostSync],
        "in TensorFlow: reading a tensor each step (.numpy(), print of a tensor, float(loss)) waits for the GPU: keep metrics in \
             tf.keras.metrics and read them at the end of an epoch, or every N steps"),
    (Framework::Deepspeed, &[DiagnosisId::LaunchBound],
        "in DeepSpeed: launch fewer, larger kernels — a larger \"train_micro_batch_size_per_gpu\" (\"gradient_accumulation_steps\" keeps \
             the effective batch), \"bf16\": {\"enabled\": true}, the engine compiled (model_engine.compile())"),
    (Framework::Deepspeed, &[DiagnosisId::HostBound, DiagnosisId::InputStarved],
        "in DeepSpeed: load in workers — pass your own DataLoader(num_workers > 0, pin_memory=True) rather than training_data to \
             deepspeed.initialize — and keep \
             per-step host work off the step: \"wall_clock_breakdown\": false and a large \"steps_per_print\" in the config"),
    (Framework::Accelerate, &[DiagnosisId::LaunchBound],
        "with Accelerate: launch fewer, larger kernels — Accelerator(mixed_precision=\"bf16\", dynamo_backend=\"inductor\"), a larger batch \
             with Accelerator(gradient_accumulation_steps=N) to keep the effective batch"),
    (Framework::Accelerate, &[DiagnosisId::HostBound, DiagnosisId::InputStarved],
        "with Accelerate: the DataLoader given to accelerator.prepare(...) with num_workers > 0 and pin_memory=True; gather metrics \
             (accelerator.gather_for_metrics) every N steps, not each step"),
    (Framework::Vllm, &[DiagnosisId::MemoryReserved],
        "a problem only where other jobs need the memory: LLM(..., gpu_memory_utilization=0.5) or vllm serve --gpu-memory-utilization 0.5 \
             (less KV cache: fewer sequences at once)"),
    (Framework::Vllm, &[DiagnosisId::LaunchBound, DiagnosisId::HostBound],
        "in vLLM: keep CUDA graphs on (no enforce_eager=True) and batch more requests at once (max_num_seqs, more concurrent clients); \
             the scheduler's host time per step is paid per batch, not per request"),
    (Framework::Sglang, &[DiagnosisId::MemoryReserved],
        "a problem only where other jobs need the memory: --mem-fraction-static 0.5 (less KV cache: fewer requests at once)"),
    (Framework::Sglang, &[DiagnosisId::LaunchBound, DiagnosisId::HostBound],
        "in SGLang: keep CUDA graphs on (no --disable-cuda-graph) with --cuda-graph-max-bs at least the running batch, and send more \
             requests at once"),
    (Framework::Jax, &[DiagnosisId::HostBound, DiagnosisId::InputStarved],
        "give each dispatch more work: a larger batch, or several steps in one jitted call (jax.lax.scan over steps); \
             check for retracing (jax.log_compiles, or jax.config.update(\"jax_explain_cache_misses\", True)); \
             prefetch the next batch to the device while the step runs (jax.device_put ahead of time)"),
    (Framework::Jax, &[DiagnosisId::LaunchBound],
        "fuse more per dispatch: jit the whole step (not pieces of it), scan several steps in one call (jax.lax.scan), and keep Python out of the loop"),
    (Framework::Jax, &[DiagnosisId::MemoryReserved],
        "JAX preallocates 75 % of the GPU at start: XLA_PYTHON_CLIENT_PREALLOCATE=false (allocate on demand), or \
             XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 for a fixed share, when the GPU is shared"),
    (Framework::Tensorflow, &[DiagnosisId::MemoryReserved],
        "TensorFlow maps nearly all GPU memory at start: tf.config.experimental.set_memory_growth(gpu, True), or a memory_limit \
             through tf.config.set_logical_device_configuration, when the GPU is shared"),
    (Framework::Lightning, &[DiagnosisId::InputStarved, DiagnosisId::HostBound],
        "in Lightning: give the DataLoaders workers (DataLoader(num_workers > 0, persistent_workers=True, pin_memory=True) in the \
             LightningDataModule); log less per step (self.log(..., on_step=False, on_epoch=True), Trainer(log_every_n_steps=50)); \
             a progress bar refresh every step costs host time too (Trainer(enable_progress_bar=False) or a larger refresh_rate)"),
    (Framework::Lightning, &[DiagnosisId::LaunchBound],
        "in Lightning: launch fewer, larger kernels — a larger batch_size in the DataLoader (with accumulate_grad_batches to keep the \
             effective batch), the module compiled (torch.compile(model) before trainer.fit, mode=\"reduce-overhead\" for CUDA graphs), \
             Trainer(precision=\"bf16-mixed\") for fewer, fused kernels; self.log(..., on_step=False) keeps logging off the step"),
    (Framework::HfTrainer, &[DiagnosisId::LaunchBound],
        "in the HF Trainer: launch fewer, larger kernels — TrainingArguments(torch_compile=True, torch_compile_mode=\"reduce-overhead\"), \
             a larger per_device_train_batch_size (gradient_accumulation_steps to keep the effective batch), bf16=True"),
    (Framework::HfTrainer, &[DiagnosisId::InputStarved, DiagnosisId::HostBound],
        "in the HF Trainer: TrainingArguments(dataloader_num_workers > 0, dataloader_pin_memory=True, \
             dataloader_persistent_workers=True); log less often (logging_steps); tokenize ahead (dataset.map(..., batched=True))"),
];

fn fix_in(fw: Framework, d: &Diagnosis) -> Option<&'static str> {
    FIXES.iter().find(|(f, ids, _)| *f == fw && ids.contains(&d.id)).map(|(_, _, fix)| *fix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::{Activity, Frame, Origin};

    fn stack(frames: Vec<Frame>) -> StackTime {
        StackTime { tid: 1, pid: 1, activity: Activity::Host, on_cpu: true, origin: Origin::Python, frames, count: 1, ns: 1 }
    }

    fn py(file: &str) -> Frame {
        Frame { function: "f".into(), file: Some(file.into()), line: Some(1), module: None }
    }

    fn native(module: &str) -> Frame {
        Frame { function: "g".into(), file: None, line: None, module: Some(module.into()) }
    }

    #[test]
    fn the_outermost_layer_names_the_framework() {
        let torch = py("/venv/lib/python3.12/site-packages/torch/nn/modules/module.py");
        let lightning = py("/venv/lib/python3.12/site-packages/lightning/pytorch/loops/fit_loop.py");
        assert_eq!(of(&[stack(vec![torch.clone()])]), Some(Framework::Pytorch));
        assert_eq!(of(&[stack(vec![torch.clone(), lightning])]), Some(Framework::Lightning));
        assert_eq!(of(&[stack(vec![torch, py("/venv/site-packages/transformers/trainer.py")])]), Some(Framework::HfTrainer));
        assert_eq!(of(&[stack(vec![native("/venv/site-packages/jaxlib/xla_extension.so")])]), Some(Framework::Jax));
        assert_eq!(of(&[stack(vec![native("/venv/site-packages/torch/lib/libtorch_cuda.so")])]), Some(Framework::Pytorch));
        assert_eq!(of(&[stack(vec![py("/home/me/train.py")])]), None);
        assert_eq!(of(&[]), None);
    }

    #[test]
    fn a_jax_job_is_told_jax_knobs_and_never_dataloader_workers() {
        let d = |id| Diagnosis {
            id,
            severity: crate::severity::Severity::High,
            impact: 0.5,
            summary: String::new(),
            evidence: Vec::new(),
            fix: "load in DataLoader workers".into(),
            bucket: None,
            saving: None,
            sites: Vec::new(),
        };
        let mut found = vec![d(DiagnosisId::HostBound), d(DiagnosisId::MemoryReserved), d(DiagnosisId::HostSync), d(DiagnosisId::PageableCopy)];
        found[1].summary = "the job holds 105 GiB (75% of the GPU): a caching allocator keeps what it reserved".into();
        speak(&mut found, Some(Framework::Jax));
        assert!(found[0].fix.contains("jax.lax.scan") && !found[0].fix.contains("DataLoader"), "{}", found[0].fix);
        assert!(found[1].fix.contains("XLA_PYTHON_CLIENT_PREALLOCATE"), "{}", found[1].fix);
        assert!(found[1].summary.starts_with("the job holds 105 GiB (75% of the GPU): XLA's allocator preallocates"), "{}", found[1].summary);
        assert!(found[2].fix.contains("block_until_ready"), "{}", found[2].fix);
        assert!(found[3].fix.contains("prefetch_to_device") && !found[3].fix.contains("DataLoader"), "{}", found[3].fix);
        let mut memory = vec![d(DiagnosisId::Oom), d(DiagnosisId::MemoryGrowth)];
        speak(&mut memory, Some(Framework::Jax));
        assert!(memory[0].fix.contains("jax.checkpoint") && memory[1].fix.contains("jax.live_arrays"), "{memory:?}");
        let mut kept = vec![d(DiagnosisId::GpuBound)];
        speak(&mut kept, Some(Framework::Jax));
        assert_eq!(kept[0].fix, "load in DataLoader workers", "a fix with no JAX wording of its own is kept");
        assert!(!found.iter().any(|f| f.fix.contains("  ")), "no runs of spaces from a broken line: {found:?}");
        let mut lightning = vec![d(DiagnosisId::InputStarved), d(DiagnosisId::LaunchBound)];
        speak(&mut lightning, Some(Framework::Lightning));
        assert!(lightning[0].fix.contains("log_every_n_steps"), "{}", lightning[0].fix);
        assert!(lightning[1].fix.contains("trainer.fit") && lightning[1].fix.contains("torch.compile"), "{}", lightning[1].fix);
        let mut hf = vec![d(DiagnosisId::LaunchBound)];
        speak(&mut hf, Some(Framework::HfTrainer));
        assert!(hf[0].fix.contains("TrainingArguments(torch_compile=True"), "{}", hf[0].fix);
        let mut vllm = vec![d(DiagnosisId::MemoryReserved), d(DiagnosisId::LaunchBound)];
        vllm[0].summary = "the job holds 125 GiB (90% of the GPU): a caching allocator keeps what it reserved".into();
        speak(&mut vllm, Some(Framework::Vllm));
        assert!(vllm[0].fix.contains("gpu_memory_utilization") && vllm[0].summary.contains("KV cache"), "{:?}", vllm[0]);
        assert!(vllm[1].fix.contains("enforce_eager"), "{}", vllm[1].fix);
        // Every diagnosis whose plain fix names PyTorch's APIs is said in JAX's and TensorFlow's
        // own terms, and none of theirs names PyTorch's.
        let worded = DiagnosisId::ALL.into_iter().filter(|id| {
            // A straggler's fix is its own cause's, worded without any framework's API where it
            // is made (`detect::nccl::fix_of`).
            ![DiagnosisId::HostSleep, DiagnosisId::GpuBound, DiagnosisId::NoCudaWork, DiagnosisId::NoBottleneckFound, DiagnosisId::Straggler].contains(id)
        });
        for fw in [Framework::Jax, Framework::Tensorflow] {
            let mut all: Vec<Diagnosis> = worded.clone().map(d).collect();
            speak(&mut all, Some(fw));
            for one in &all {
                assert_ne!(one.fix, "load in DataLoader workers", "{fw:?} {} keeps PyTorch's fix", one.id);
                assert!(!["torch", "PYTORCH", "non_blocking", "pin_memory", "num_workers"].iter().any(|w| one.fix.contains(w)), "{fw:?} {}: {}", one.id, one.fix);
            }
        }
        for fw in [Framework::Tensorflow, Framework::Deepspeed, Framework::Accelerate, Framework::Sglang] {
            let mut host = vec![d(DiagnosisId::HostBound), d(DiagnosisId::LaunchBound)];
            speak(&mut host, Some(fw));
            assert!(host.iter().all(|h| h.fix != "load in DataLoader workers"), "{fw:?}: {host:?}");
        }
    }
}
