//! `io-stall`: the training thread itself waits on the disk (uninterruptible I/O). Its fix
//! moves the I/O off the training thread.

use crate::{
    detect::{
        definition::{Definition, FoundBy, Words},
        diagnosis::{diagnosis, pct},
        whatif::{self, Fix},
        Account,
    },
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, Framework, TimeBucket},
    stacks::Activity,
};
use crate::detect::thresholds::BLOCKED_STALL;

fn detect(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    a.host.as_ref()?;
    let blocked = a.share(|t| t.io_wait_ns);
    if blocked < BLOCKED_STALL {
        return None;
    }
    let io = &ev.io.total;
    let mut evidence = vec![format!("the launching threads were blocked in uninterruptible I/O wait {} of the window", pct(blocked))];
    if io.counts.reads + io.counts.writes > 0 {
        evidence.push(format!(
            "block I/O of the job: {} reads ({} bytes), {} writes ({} bytes), p95 latency {} µs",
            io.counts.reads,
            io.counts.read_bytes,
            io.counts.writes,
            io.counts.write_bytes,
            ev.io.latency_quantile_us(0.95).unwrap_or(0)
        ));
    }
    let writes = io.counts.write_bytes > io.counts.read_bytes;
    Some(diagnosis(
        DiagnosisId::IoStall,
        TimeBucket::IoWait,
        blocked,
        format!("the training thread itself waits on the disk {} of the time", pct(blocked)),
        evidence,
        if writes {
            "write checkpoints and logs asynchronously (a background thread or process), less often, or to faster local storage"
        } else {
            "read data in DataLoader workers instead of the training thread, prefetch, keep the dataset in memory or on faster storage"
        },
    ))
}

fn fix() -> (Fix, String) {
    (Fix { keep: whatif::fixes::keep_all_but(|s| s.io_wait = 0.0), ..Fix::NONE }, "I/O moved off the training thread overlaps the step".into())
}

/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Jax, Words::Fix(
        "read input ahead of the step in worker processes (grain.DataLoader(worker_count > 0), or tf.data with prefetch), \
             and keep the data in memory or on faster storage",
    )),
    (Framework::Tensorflow, Words::Fix(
        "in TensorFlow: read ahead in tf.data (interleave(..., num_parallel_calls=tf.data.AUTOTUNE), prefetch), and cache() \
             the data in memory or on faster storage",
    )),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::IoStall,
    found_by: FoundBy::Time(detect),
    stacks: Some((&[Activity::Host, Activity::Copy, Activity::Sync, Activity::Alloc, Activity::OtherCall], Some(false))),
    effort: 1,
    fix: Some(|_, _, _| Some(fix())),
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[],
};
