//! `host-sync`: a sync every step (`.item()`, `.cpu()`, `torch.cuda.synchronize()`) empties
//! the GPU queue, which then sits empty while the host works until its next launch. Its fix
//! has two forms: the sync alone removed (the work after it kept, overlapped), and the sync
//! with the per-step work that waits on its value, as logging every N steps does; the second
//! is the one ranked.

use crate::{
    detect::{
        definition::{Bearing, Definition, FoundBy, Words},
        diagnosis::{diagnosis, pct},
        whatif::{Fix, StepModel},
        Account,
    },
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, Framework, TimeBucket},
    stacks::Activity,
};
use crate::detect::thresholds::SYNCS_PER_S;

fn detect(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let empty = a.share(|t| t.queue_empty_ns);
    // The queue's empty spells less the other stalls that may lie in them, capped by the
    // time NVML saw no kernel running.
    // Only what GPU work could have hidden is the sync's doing (`Account::sync_hideable`).
    // What it costs is the step model's to say (`whatif`): a sync every step serializes the
    // host and the GPU even where the queue is empty only briefly.
    let impact = a.sync_hideable().min(a.gpu_util.map_or(1.0, |u| 1.0 - u));
    if a.sync_rate < SYNCS_PER_S || ev.threads.values().all(|t| t.queue_idle_ns == 0) {
        return None;
    }
    let (count, wait): (u64, u64) = ev.threads.values().fold((0, 0), |(c, w), t| (c + t.syncs, w + t.sync_wait_ns));
    let periods: u64 = ev.threads.values().map(|t| t.idle_periods).sum();
    Some(diagnosis(
        DiagnosisId::HostSync,
        TimeBucket::LaunchingAndHost,
        impact,
        format!(
            "the host synchronizes {:.0} times/s; after each, the GPU queue sits empty while the host works, until it launches again ({} of the time)",
            a.sync_rate,
            pct(impact)
        ),
        vec![
            format!("{count} synchronizing calls waited {:.3} s in total", wait as f64 / 1e9),
            format!("{periods} periods with an empty GPU queue, {} of the window (a lower bound on GPU idle)", pct(empty)),
        ],
        "synchronize less: avoid .item()/.cpu()/torch.cuda.synchronize() every step, log metrics every N steps, keep values on the GPU",
    ))
}

fn fix(m: &StepModel) -> (Fix, String) {
    let share = m.drains.share(m.drains.syncs);
    (Fix { drop_drains: share, ..Fix::NONE }, format!("without the per-step syncs ({:.0}% of the queue drains) the host runs ahead and its work after them overlaps the GPU", share * 100.0))
}

/// The sync alone removed, its bookkeeping kept and overlapped ("sync"); or the sync and the
/// host work that waits on its value removed, as logging every N steps does
/// ("sync-and-bookkeeping"). That work is the program's own host code between the sync's
/// return and the next launch, and its timed sleeps there, less the data loading (loading's
/// own fix; a batch made through the framework counts as loading, `StepModel::loading_share`).
/// The form's text tells the user to drop all of it, so its promise drops all of it: with the
/// sleeps kept, seeds 15 and 18 of the corpus (`.item()`, then 3 ms of bookkeeping asleep)
/// were promised x1.0–1.4 where logging every 100 steps measured x3.2–3.4.
fn forms(_: &Diagnosis, m: &StepModel) -> Vec<(&'static str, Fix, String)> {
    let share = m.drains.share(m.drains.syncs);
    let bookkeeping = (1.0 - m.loading_share).clamp(0.0, 1.0);
    vec![
        (
            "sync",
            Fix { drop_drains: share, ..Fix::NONE },
            format!("without the per-step syncs ({:.0}% of the queue drains) the host runs ahead and its work after them overlaps the GPU", share * 100.0),
        ),
        (
            "sync-and-bookkeeping",
            Fix { drop_drains: share, drop_idle_user: bookkeeping, drop_idle_timer: 1.0, ..Fix::NONE },
            format!(
                "without the per-step syncs ({:.0}% of the queue drains) and the host work that waits on their values (the program's code and its timed sleeps between a sync and the next launch{}), as logging every N steps does",
                share * 100.0,
                if bookkeeping < 1.0 { ", less its data loading" } else { "" }
            ),
        ),
    ]
}

/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Jax, Words::Fix(
        "JAX dispatches asynchronously until a value is read: keep metrics on the device and read them every N steps, not each step \
             (float(loss), .item(), jax.device_get and block_until_ready each wait for the GPU)",
    )),
    (Framework::Tensorflow, Words::Fix(
        "in TensorFlow: reading a tensor each step (.numpy(), print of a tensor, float(loss)) waits for the GPU: keep metrics in \
             tf.keras.metrics and read them at the end of an epoch, or every N steps",
    )),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::HostSync,
    found_by: FoundBy::Time(detect),
    stacks: Some((&[Activity::Sync, Activity::Copy], None)),
    effort: 0,
    fix: Some(|_, m, _| Some(fix(m))),
    forms: Some(forms),
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::Numa],
};
