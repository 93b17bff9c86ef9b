//! `input-starved`: the GPU waits for input: the training thread sleeps on its loader (its
//! workers busy, on the disk or short of CPUs, another thread, the network), or loads its own
//! input (a `host-bound` whose host time the stacks put in data loading, `sites`). Its fix
//! is loader workers that keep up.

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
use crate::{
    detect::thresholds::{GPU_WAITING, RUNQUEUE_STARVED, SLEEP_STARVED, WORKER_BLOCKED, WORKER_BUSY},
    evidence::waits::WaitKind,
    model::TimeBucket as Bucket,
};

/// What woke the launching threads most, outside CUDA calls and timers: (kind, who, site).
fn top_waker(a: &Account) -> Option<(WaitKind, String, String)> {
    let t = a.time.as_ref()?;
    // A hand-off inside the critical path is no wait for input (`TimeAccount::handoff`).
    let w = t.wakers.iter().find(|w| !w.in_cuda && w.kind != WaitKind::Timer && w.kind != WaitKind::Gpu && !t.handoff(w))?;
    Some((w.kind, w.who(), w.site.clone()))
}

fn detect(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let h = a.host.as_ref()?;
    // Sleeping in the time account is time when none of the threads on the critical path
    // was doing anything (threads that take turns are added up, `evidence::time_account`), so it
    // is unambiguous: nobody was launching, the GPU was not being fed. A sleep that a timer
    // ended is the program's own pause, not a wait for input (`host_sleep`).
    let (_, sleeping) = a.sleep_shares();
    if sleeping < SLEEP_STARVED || a.gpu_time_busy().is_some_and(|g| g >= GPU_WAITING) {
        return None;
    }
    let waker = top_waker(a);
    let (cause, fix) = if h.workers_blocked >= WORKER_BLOCKED && h.workers > 0 {
        ("its data-loading workers wait on the disk".to_owned(), "read faster: keep the data in memory or on local SSD, use a packed format (WebDataset, TFRecord-like shards), more workers to overlap reads, pin_memory=True")
    } else if h.workers_on_cpu >= WORKER_BUSY && h.workers > 0 {
        ("its data-loading workers are busy on the CPU (decoding, augmenting) and cannot keep up".to_owned(), "raise num_workers (up to the free cores), prefetch_factor, persistent_workers=True, pin_memory=True; make decoding cheaper or move augmentation to the GPU")
    } else if h.workers_runqueue >= RUNQUEUE_STARVED && h.workers > 0 {
        ("its data-loading workers wait for a CPU".to_owned(), "free CPUs for the workers, or lower their number to the cores available")
    } else {
        match &waker {
            Some((WaitKind::InputWorker, who, _)) => (
                format!("the training thread waits for worker process {who}, which hands it the input"),
                "raise num_workers and prefetch_factor, set persistent_workers=True and pin_memory=True",
            ),
            Some((WaitKind::Thread, who, site)) => (
                format!("the training thread waits on another thread of the job, {who} ({site}): a queue or a lock"),
                "find what that thread produces late (a prefetch queue, a lock held across work); make it run ahead, or hold the lock for less",
            ),
            Some((WaitKind::Network, _, _)) => (
                "the training thread waits on the network (a remote data source or parameter server)".to_owned(),
                "prefetch remote data ahead of the step, cache it locally, or overlap the fetch with compute",
            ),
            _ if h.workers == 0 => (
                "the training thread sleeps outside CUDA calls while the GPU has nothing to do".to_owned(),
                "find what the training loop waits for between steps (a queue, a lock); for a DataLoader use num_workers > 0 with persistent_workers=True",
            ),
            _ => ("the training thread waits on its data loader".to_owned(), "raise num_workers and prefetch_factor, set persistent_workers=True and pin_memory=True"),
        }
    };
    let mut evidence = vec![format!("the launching threads all slept outside CUDA calls, waiting, {} of the active time", pct(sleeping))];
    if let Some((kind, who, site)) = &waker {
        let how = if site.is_empty() { String::new() } else { format!(" through {site}") };
        evidence.push(format!("most often woken by {who}{how} ({})", kind.name()));
    }
    if h.workers > 0 {
        evidence.push(format!(
            "{} worker processes: on CPU {} of the time on average, blocked on I/O up to {}, waiting for a CPU up to {}",
            h.workers,
            pct(h.workers_on_cpu),
            pct(h.workers_blocked),
            pct(h.workers_runqueue)
        ));
    }
    if ev.io.total.counts.reads > 0 {
        evidence.push(format!("the job read {} bytes in {} requests", ev.io.total.counts.read_bytes, ev.io.total.counts.reads));
    }
    evidence.extend(gpu_line(a));
    Some(diagnosis(DiagnosisId::InputStarved, TimeBucket::Sleeping, sleeping, format!("the GPU waits for input: {cause}"), evidence, fix))
}

fn fix(d: &Diagnosis, m: &StepModel) -> (Fix, String) {
    let (pinned, words) = whatif::fixes::pinned_input(m);
    if d.bucket == Some(Bucket::LaunchingAndHost) {
        // The training thread loads its own input (`sites::relabel_as_input`).
        let user = m.idle.user + m.overlap.user;
        let host = user + m.idle.launch + m.overlap.launch;
        let share = if user > 0.0 { (m.loading_share * host / user).clamp(0.0, 1.0) } else { 0.0 };
        return (Fix { offload_user: share, loader_paces: false, ..Fix::NONE }.and(&pinned), format!("loading moved into DataLoader workers runs on {}{words}", whatif::fixes::free_cores(m)));
    }
    (Fix { refill_input: true, ..Fix::NONE }.and(&pinned), format!("workers that keep up leave no wait for input; they need the cores for it{words}"))
}

/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Tensorflow, Words::Fix(TENSORFLOW)),
    (Framework::Deepspeed, Words::Fix(DEEPSPEED)),
    (Framework::Accelerate, Words::Fix(ACCELERATE)),
    (Framework::Jax, Words::Fix(JAX)),
    (Framework::Lightning, Words::Fix(LIGHTNING)),
    (Framework::HfTrainer, Words::Fix(HF_TRAINER)),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::InputStarved,
    found_by: FoundBy::Time(detect),
    stacks: Some((&[Activity::Host], None)),
    effort: 1,
    fix: Some(|d, m, _| Some(fix(d, m))),
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::Numa],
};

/// The words for loading in each framework that says it its own way, for `input-starved` and
/// `host-bound` alike (the host work between launches is mostly loading).
pub(super) const TENSORFLOW: &str = "in TensorFlow: feed the step from tf.data in parallel and ahead of it — dataset.map(..., num_parallel_calls=tf.data.AUTOTUNE)\
             .prefetch(tf.data.AUTOTUNE), .cache() where the data fits; in Keras, model.compile(..., steps_per_execution=32) runs several \
             steps per call";
/// See [`TENSORFLOW`].
pub(super) const DEEPSPEED: &str = "in DeepSpeed: load in workers — pass your own DataLoader(num_workers > 0, pin_memory=True) rather than training_data to \
             deepspeed.initialize — and keep \
             per-step host work off the step: \"wall_clock_breakdown\": false and a large \"steps_per_print\" in the config";
/// See [`TENSORFLOW`].
pub(super) const ACCELERATE: &str = "with Accelerate: the DataLoader given to accelerator.prepare(...) with num_workers > 0 and pin_memory=True; gather metrics \
             (accelerator.gather_for_metrics) every N steps, not each step";
/// See [`TENSORFLOW`].
pub(super) const JAX: &str = "give each dispatch more work: a larger batch, or several steps in one jitted call (jax.lax.scan over steps); \
             check for retracing (jax.log_compiles, or jax.config.update(\"jax_explain_cache_misses\", True)); \
             prefetch the next batch to the device while the step runs (jax.device_put ahead of time)";
/// See [`TENSORFLOW`].
pub(super) const LIGHTNING: &str = "in Lightning: give the DataLoaders workers (DataLoader(num_workers > 0, persistent_workers=True, pin_memory=True) in the \
             LightningDataModule); log less per step (self.log(..., on_step=False, on_epoch=True), Trainer(log_every_n_steps=50)); \
             a progress bar refresh every step costs host time too (Trainer(enable_progress_bar=False) or a larger refresh_rate)";
/// See [`TENSORFLOW`].
pub(super) const HF_TRAINER: &str = "in the HF Trainer: TrainingArguments(dataloader_num_workers > 0, dataloader_pin_memory=True, \
             dataloader_persistent_workers=True); log less often (logging_steps); tokenize ahead (dataset.map(..., batched=True))";
