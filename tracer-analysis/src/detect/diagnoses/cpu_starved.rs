//! `cpu-starved`: the threads feeding the GPU are runnable but not running: other processes,
//! or a cgroup's CPU limit, hold the cores. Its fix gives the job its CPUs.

use crate::{
    detect::{
        definition::{Bearing, Definition, FoundBy, Words},
        diagnosis::{diagnosis, pct},
        whatif::{self, Fix},
        Account,
    },
    evidence::Evidence,
    model::{Diagnosis, DiagnosisId, Framework, TimeBucket},
    stacks::Activity,
};
use crate::detect::thresholds::RUNQUEUE_STARVED;

fn top_preemptors(ev: &Evidence) -> Option<String> {
    let mut by_command: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for p in &ev.preempted_by {
        *by_command.entry(if p.command.is_empty() { "(exited)" } else { p.command.as_str() }).or_default() += p.count;
    }
    let mut v: Vec<(&str, u64)> = by_command.into_iter().collect();
    v.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    (!v.is_empty()).then(|| v.iter().take(4).map(|(c, n)| format!("{c} ({n}×)")).collect::<Vec<_>>().join(", "))
}

fn detect(ev: &Evidence, a: &Account) -> Option<Diagnosis> {
    a.host.as_ref()?;
    let runqueue = a.share(|t| t.waiting_for_cpu_ns);
    if runqueue < RUNQUEUE_STARVED {
        return None;
    }
    let mut evidence = vec![format!("the launching threads were runnable but not running {} of the window", pct(runqueue))];
    if let Some(who) = top_preemptors(ev) {
        evidence.push(format!("the CPU went to: {who}"));
    }
    for (file, s) in ev.cgroups.iter().filter(|(_, s)| s.nr_throttled > 0) {
        evidence.push(format!(
            "cgroup {file}: throttled in {} of {} periods, {:.3} s",
            s.nr_throttled,
            s.nr_periods,
            s.throttled_usec as f64 / 1e6
        ));
    }
    Some(diagnosis(
        DiagnosisId::CpuStarved,
        TimeBucket::WaitingForCpu,
        runqueue,
        format!("the threads feeding the GPU wait for a CPU {} of the time", pct(runqueue)),
        evidence,
        "give the job its CPUs: stop or move competing processes, raise the cgroup/container CPU limit, and keep DataLoader workers + training threads within the cores you have",
    ))
}

fn fix() -> (Fix, String) {
    (Fix { keep: whatif::fixes::keep_all_but(|s| s.cpu_wait = 0.0), ..Fix::NONE }, "with its CPUs the training thread runs when it is ready".into())
}

/// Its words in the frameworks that say it their own way.
#[rustfmt::skip]
const IN_FRAMEWORK: &[(Framework, Words)] = &[
    (Framework::Jax, Words::Fix(
        "give the job its CPUs: stop or move competing processes, raise the cgroup/container CPU limit, and keep input workers \
             (Grain's worker_count, tf.data's parallelism) and XLA's threads within the cores you have",
    )),
    (Framework::Tensorflow, Words::Fix(
        "give the job its CPUs: stop or move competing processes, raise the cgroup/container CPU limit, and bound tf.data's \
             threads (tf.data.Options().threading.private_threadpool_size) and TensorFlow's (tf.config.threading) to the cores you have",
    )),
];

/// See the module's documentation.
pub(crate) const DEFINITION: Definition = Definition {
    id: DiagnosisId::CpuStarved,
    found_by: FoundBy::Time(detect),
    stacks: Some((&[Activity::Host], Some(true))),
    effort: 1,
    fix: Some(|_, _, _| Some(fix())),
    forms: None,
    in_framework: IN_FRAMEWORK,
    bears_on: &[Bearing::Numa],
};
