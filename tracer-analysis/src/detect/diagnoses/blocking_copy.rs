//! `blocking-copy`: copies the host waits for by their own doing (synchronous copy calls,
//! asynchronous ones then waited for). Its fix makes them asynchronous into pinned memory.

use crate::{
    detect::{
        definition::{Bearing, Definition, FoundBy, Words},
        diagnosis::{diagnosis, pct},
        whatif::{self, Fix, StepModel},
        Account,
    },
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, Framework, TimeBucket},
    stacks::Activity,
};
use crate::detect::LOW;

/// Copies that stall the host by their own doing: synchronous copy APIs, and async copies
/// the program then waited for (`non_blocking=False`, `.cpu()`). Scalar reads (`.item()`)
/// are `host-sync`'s: what they cost is the GPU idling afterwards, not the read.
///
/// The synchronize after a copy waits for everything queued before it. In a GPU-bound loop
/// ending each step with `.cpu()`, that is the step's compute: the GPU is working, and
/// making the copy non-blocking would not make it finish sooner. Only the copy's transfer
/// (bytes over the bus, estimated per call, `evidence::cost`) is the copy's cost — and
/// where NVML says the GPU was busy, at most the time it was not. So a GPU-bound loop
/// stays `gpu-bound`, and a large blocking transfer with little compute is `blocking-copy`.
fn detect(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    let c = &ev.copies;
    let then_synced = c.h2d.then_synced + c.d2h.then_synced;
    let sync_api = c.h2d.sync_api + c.d2h.sync_api;
    if then_synced + sync_api == 0 || a.window_s == 0.0 {
        return None;
    }
    let transfer = a.share(|t| t.copy_transfer_waits_ns + t.sync_copy_transfer_ns);
    let impact = transfer.min(a.gpu_idle_cap());
    if impact < LOW {
        return None;
    }
    let waited = (c.h2d.then_synced_wait_ns + c.d2h.then_synced_wait_ns) as f64 / 1e9;
    Some(diagnosis(
        DiagnosisId::BlockingCopy,
        TimeBucket::WaitingOnGpu,
        impact,
        format!("{} copies made the host wait for them ({then_synced} async copies followed by a synchronize, {sync_api} synchronous copy calls)", then_synced + sync_api),
        vec![
            format!("H2D then synchronize (non_blocking=False): {} times, {:.3} s waiting", c.h2d.then_synced, c.h2d.then_synced_wait_ns as f64 / 1e9),
            format!("D2H then synchronize (.cpu()): {} times, {:.3} s waiting", c.d2h.then_synced, c.d2h.then_synced_wait_ns as f64 / 1e9),
            format!(
                "of the {waited:.3} s waited, the transfers themselves account for about {} of the time; the rest was the GPU finishing earlier work",
                pct(transfer)
            ),
        ],
        "copy with non_blocking=True into pinned memory and wait on an event only when the data is needed, so the transfer overlaps the next step; fetch results to the host (.cpu(), .item()) only when needed",
    ))
}

fn fix(m: &StepModel) -> (Fix, String) {
    let share = m.drains.share(m.drains.after_bulk_copy);
    (
        Fix { drop_drains: share, keep: whatif::fixes::keep_all_but(|s| s.transfer = 0.0), bus_floor: true, ..Fix::NONE },
        "copies made asynchronous into pinned memory overlap the step; they still take their time on the bus".into(),
    )
}

/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Jax, Words::Fix(
        "JAX: read results back less often (jax.device_get and np.asarray of a device array wait for it), and put the next \
             inputs on the device with jax.device_put ahead of the step so that the copy overlaps the one running",
    )),
    (Framework::Tensorflow, Words::Fix(
        "in TensorFlow: read tensors back less often (.numpy() waits for the GPU), and let tf.data copy batches to the GPU ahead \
             of the step (tf.data.experimental.prefetch_to_device)",
    )),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::BlockingCopy,
    found_by: FoundBy::Time(detect),
    stacks: Some((&[Activity::Copy], None)),
    effort: 1,
    fix: Some(|_, m, _| Some(fix(m))),
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::PcieLink, Bearing::Numa],
};
