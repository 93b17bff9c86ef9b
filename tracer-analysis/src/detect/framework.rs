//! Which framework the job runs, from what its stacks show (the native libraries its frames
//! are in, the Python files of its frames), so that each fix is said in that framework's
//! terms: its knobs, flags and environment variables (issue 35). From the stacks alone, so a
//! recording's offline report names it as the live one does; without stacks it is unknown.

use super::{
    definition::Words,
    diagnoses::{self, launch_bound},
};
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
/// memory note where PyTorch's caching allocator is not the one that holds the memory: the
/// words each diagnosis's definition gives that framework (`Definition::in_framework`).
pub fn speak(found: &mut [Diagnosis], framework: Option<Framework>) {
    let Some(fw) = framework else { return };
    for d in found {
        // A job that replays graphs already keeps the replay fix, except in JAX, whose own
        // text says the same in its terms.
        if d.id == DiagnosisId::LaunchBound && d.fix == launch_bound::REPLAYS_FIX && fw != Framework::Jax {
            continue;
        }
        let words = || diagnoses::of(d.id).in_framework.iter().filter(|(f, _)| *f == fw).map(|(_, w)| *w);
        if let Some(fix) = words().find_map(|w| if let Words::Fix(fix) = w { Some(fix) } else { None }) {
            d.fix = fix.into();
        }
        if let Some(why) = words().find_map(|w| if let Words::WhyHeld(why) = w { Some(why) } else { None }) {
            // "the job holds 100 GiB (75% of the GPU): <why>": the why is the framework's.
            if let Some((held, _)) = d.summary.split_once(": ") {
                d.summary = format!("{held}: {why}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::{Activity, Frame, Origin};

    fn stack(frames: Vec<Frame>) -> StackTime {
        StackTime { tid: 1, pid: 1, activity: Activity::Host, on_cpu: true, origin: Origin::Python, frames, count: 1, ns: 1, launch_ages: crate::stacks::LaunchAges::default() }
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
            // is made (`detect::ranks::fix_of`).
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
