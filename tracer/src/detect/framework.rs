//! Which framework the job runs, from what its stacks show (the native libraries its frames
//! are in, the Python files of its frames), so that each fix is said in that framework's
//! terms: its knobs, flags and environment variables (issue 35). From the stacks alone, so a
//! recording's offline report names it as the live one does; without stacks it is unknown.

use crate::{
    model::{Diagnosis, DiagnosisId},
    stacks::StackTime,
};

pub use crate::model::Framework;

impl Framework {
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pytorch => "pytorch",
            Self::Lightning => "lightning",
            Self::HfTrainer => "hf-trainer",
            Self::Accelerate => "accelerate",
            Self::Deepspeed => "deepspeed",
            Self::Vllm => "vllm",
            Self::Sglang => "sglang",
            Self::Jax => "jax",
            Self::Tensorflow => "tensorflow",
        }
    }
}

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

/// The framework the stacks show, if any.
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

/// Say each fix in `framework`'s terms where they differ from plain PyTorch's.
pub fn speak(found: &mut [Diagnosis], framework: Option<Framework>) {
    let Some(fw) = framework else { return };
    for d in found {
        if let Some(fix) = fix_in(fw, d) {
            d.fix = fix.into();
        }
    }
}

fn fix_in(fw: Framework, d: &Diagnosis) -> Option<&'static str> {
    use DiagnosisId::{HostBound, InputStarved, LaunchBound, MemoryReserved};
    Some(match (fw, d.id) {
        (Framework::Jax, HostBound | InputStarved) => {
            "give each dispatch more work: a larger batch, or several steps in one jitted call (jax.lax.scan over steps); \
             check for retracing (jax.log_compiles, or jax.config.update(\"jax_explain_cache_misses\", True)); \
             prefetch the next batch to the device while the step runs (jax.device_put ahead of time)"
        }
        (Framework::Jax, LaunchBound) => {
            "fuse more per dispatch: jit the whole step (not pieces of it), scan several steps in one call (jax.lax.scan), and keep Python out of the loop"
        }
        (Framework::Jax, MemoryReserved) => {
            "JAX preallocates 75 % of the GPU at start: XLA_PYTHON_CLIENT_PREALLOCATE=false (allocate on demand), or \
             XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 for a fixed share, when the GPU is shared"
        }
        (Framework::Tensorflow, MemoryReserved) => {
            "TensorFlow maps nearly all GPU memory at start: tf.config.experimental.set_memory_growth(gpu, True), or a memory_limit \
             through tf.config.set_logical_device_configuration, when the GPU is shared"
        }
        (Framework::Lightning, InputStarved | HostBound) => {
            "in Lightning: give the DataLoaders workers (DataLoader(num_workers > 0, persistent_workers=True, pin_memory=True) in the \
             LightningDataModule); log less per step (self.log(..., on_step=False, on_epoch=True), Trainer(log_every_n_steps=50)); \
             a progress bar refresh every step costs host time too (Trainer(enable_progress_bar=False) or a larger refresh_rate)"
        }
        (Framework::Lightning, LaunchBound) => {
            "in Lightning: launch fewer, larger kernels — a larger batch_size in the DataLoader (with accumulate_grad_batches to keep the \
             effective batch), the module compiled (torch.compile(model) before trainer.fit, mode=\"reduce-overhead\" for CUDA graphs), \
             Trainer(precision=\"bf16-mixed\") for fewer, fused kernels; self.log(..., on_step=False) keeps logging off the step"
        }
        (Framework::HfTrainer, LaunchBound) => {
            "in the HF Trainer: launch fewer, larger kernels — TrainingArguments(torch_compile=True, torch_compile_mode=\"reduce-overhead\"), \
             a larger per_device_train_batch_size (gradient_accumulation_steps to keep the effective batch), bf16=True"
        }
        (Framework::HfTrainer, InputStarved | HostBound) => {
            "in the HF Trainer: TrainingArguments(dataloader_num_workers > 0, dataloader_pin_memory=True, \
             dataloader_persistent_workers=True); log less often (logging_steps); tokenize ahead (dataset.map(..., batched=True))"
        }
        _ => return None,
    })
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
        let mut found = vec![d(DiagnosisId::HostBound), d(DiagnosisId::MemoryReserved), d(DiagnosisId::HostSync)];
        speak(&mut found, Some(Framework::Jax));
        assert!(found[0].fix.contains("jax.lax.scan") && !found[0].fix.contains("DataLoader"), "{}", found[0].fix);
        assert!(found[1].fix.contains("XLA_PYTHON_CLIENT_PREALLOCATE"), "{}", found[1].fix);
        assert_eq!(found[2].fix, "load in DataLoader workers", "a fix with no JAX wording of its own is kept");
        let mut lightning = vec![d(DiagnosisId::InputStarved), d(DiagnosisId::LaunchBound)];
        speak(&mut lightning, Some(Framework::Lightning));
        assert!(lightning[0].fix.contains("log_every_n_steps"), "{}", lightning[0].fix);
        assert!(lightning[1].fix.contains("trainer.fit") && lightning[1].fix.contains("torch.compile"), "{}", lightning[1].fix);
        let mut hf = vec![d(DiagnosisId::LaunchBound)];
        speak(&mut hf, Some(Framework::HfTrainer));
        assert!(hf[0].fix.contains("TrainingArguments(torch_compile=True"), "{}", hf[0].fix);
    }
}
