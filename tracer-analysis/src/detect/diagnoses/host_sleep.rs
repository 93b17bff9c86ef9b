//! `host-sleep`: the training loop sleeps on a timer between steps (`time.sleep`, a polling
//! loop) while the GPU has nothing to do. Pauses of a second or more are not counted: they are
//! phases of the window, left out of the account; sleeps that do not recur are no per-step
//! cost. Its fix removes the sleep.

use crate::{
    detect::{
        definition::{Definition, FoundBy},
        diagnosis::{diagnosis, gpu_line, pct},
        thresholds::{GPU_WAITING, SLEEP_STARVED},
        whatif::{self, Fix},
        Account,
    },
    evidence::{waits::WaitKind, Evidence},
    model::{Diagnosis, DiagnosisId, TimeBucket},
    stacks::Activity,
};

/// Timed sleeps in the window below which they are one-off spells, not the loop's rhythm.
const MIN_RECURRING_SLEEPS: u64 = 3;

fn detect(_ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    a.host.as_ref()?;
    let (timer, _) = a.sleep_shares();
    if timer < SLEEP_STARVED || a.gpu_time_busy().is_some_and(|g| g >= GPU_WAITING) {
        return None;
    }
    let mut evidence = vec![format!("the launching threads slept {} of the active time in spells a timer ended", pct(timer))];
    if let Some(t) = a.time.as_ref() {
        let n: u64 = t.wakers.iter().filter(|w| w.kind == WaitKind::Timer && !w.in_cuda).map(|w| w.count).sum();
        // A sleep is the loop's only where it recurs: one or two long spells (a start-up's
        // wait, a one-off pause) are no per-step cost, and "remove the sleep from the loop"
        // was told to a job that slept once for 0.6 s and then launched 150 000 kernels.
        if n < MIN_RECURRING_SLEEPS {
            return None;
        }
        evidence.push(format!("{n} timed sleeps, {:.1} ms each on average", timer * a.window_s * 1e3 / n.max(1) as f64));
    }
    evidence.extend(gpu_line(a));
    Some(diagnosis(
        DiagnosisId::HostSleep,
        TimeBucket::Sleeping,
        timer,
        format!("the training loop sleeps on a timer {} of the time while the GPU waits", pct(timer)),
        evidence,
        "remove the sleep from the loop, or wait on the data itself (a blocking queue get) instead of polling with sleeps",
    ))
}

fn fix() -> (Fix, String) {
    (Fix { keep: whatif::fixes::keep_all_but(|s| s.timer = 0.0), ..Fix::NONE }, "without the sleep the loop launches as soon as it can".into())
}


/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::HostSleep,
    found_by: FoundBy::Time(detect),
    stacks: Some((&[Activity::Host], Some(false))),
    effort: 0,
    fix: Some(|_, _, _| Some(fix())),
    forms: None,
    in_framework: &[],
    bears_on: &[],
};
