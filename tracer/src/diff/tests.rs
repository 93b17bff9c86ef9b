use super::*;
use crate::model::Report;

/// A real report: `planted.py item` on an H100, traced by `attach` (docs/validation.md,
/// session 27): host-sync ×1.42 and host-bound ×1.40, 55.7 steps/s.
fn item() -> Report {
    serde_json::from_str(include_str!("testdata/item_h100.json")).expect("the fixture parses")
}

/// `item` after a change that ran it `times` faster and took away `gone`.
fn fixed(times: f64, gone: &[DiagnosisId]) -> Report {
    let mut r = item();
    if let Some(s) = r.steps.as_mut() {
        s.per_second *= times;
    }
    r.cuda.launches.kernels = (r.cuda.launches.kernels as f64 * times) as u64;
    r.diagnoses.retain(|d| !gone.contains(&d.id));
    r.verdict = r.diagnoses.first().map_or(DiagnosisId::GpuBound, |d| d.id);
    r
}

#[test]
fn a_fix_that_took_a_diagnosis_away_is_checked_against_its_promise() {
    let before = item();
    let after = fixed(1.38, &[DiagnosisId::HostSync]);
    let d = compare((&before, "before.gtr"), (&after, "after.json"), false).expect("compares");
    assert_eq!(d.basis, "steps");
    assert!((d.speedup - 1.38).abs() < 1e-9, "{}", d.speedup);
    assert_eq!(d.gone, vec![DiagnosisId::HostSync]);
    assert!(d.new.is_empty());
    assert_eq!(d.kept, vec![DiagnosisId::HostBound]);
    let p = d.predictions.iter().find(|p| p.id == "host-sync").expect("host-sync's promise is checked");
    assert!((p.predicted - 1.4215).abs() < 1e-3 && p.held == Some(true), "{p:?}");
    // Its promise and the time account appear in the text, the figures as measured.
    let text = diff_text::render(&d, Some(1.1));
    assert!(text.contains("host-sync promised ×1.42"), "{text}");
    assert!(text.contains("measured ×1.38: held"), "{text}");
    assert!(text.contains("--fail-below 1.1: passes"), "{text}");
    assert!(text.contains("waiting on gpu") || text.contains("launching and host"), "{text}");
    assert_eq!(d.time_account.len(), before.time_account.as_ref().map_or(0, |t| t.buckets.len()));
}

#[test]
fn a_promise_far_from_the_measurement_is_a_miss_and_both_going_checks_the_pair() {
    let before = item();
    let after = fixed(2.5, &[DiagnosisId::HostSync, DiagnosisId::HostBound]);
    let d = compare((&before, "b"), (&after, "a"), false).expect("compares");
    assert_eq!(d.gone, vec![DiagnosisId::HostBound, DiagnosisId::HostSync]);
    // Each alone is not checked against what both bought; their pair is, and misses.
    let pair = d.predictions.iter().find(|p| p.id == "host-sync+host-bound").unwrap_or_else(|| panic!("the best pair is checked: {:?}", d.predictions));
    assert_eq!(pair.held, Some(false), "×2.5 against a pair's ×1.42: {pair:?}");
    assert!(d.predictions.iter().filter(|p| !p.id.contains('+')).all(|p| p.held.is_none()), "{:?}", d.predictions);
    assert!(d.notes.iter().any(|n| n.contains("went away together")), "{:?}", d.notes);
}

#[test]
fn a_slower_after_is_said_and_new_diagnoses_are_listed() {
    let before = fixed(1.0, &[DiagnosisId::HostBound]);
    let after = fixed(0.5, &[]);
    let d = compare((&before, "b"), (&after, "a"), false).expect("compares");
    assert!((d.speedup - 0.5).abs() < 1e-9);
    assert_eq!(d.new, vec![DiagnosisId::HostBound]);
    assert!(d.predictions.is_empty());
    let text = diff_text::render(&d, Some(0.9));
    assert!(text.contains("×0.50 (slower") && text.contains("--fail-below 0.9: FAILS"), "{text}");
}

#[test]
fn without_steps_the_launch_rate_compares_and_says_so() {
    let before = item();
    let mut after = fixed(1.2, &[DiagnosisId::HostSync]);
    after.steps = None;
    let d = compare((&before, "b"), (&after, "a"), false).expect("compares");
    assert_eq!(d.basis, "launch-rate");
    assert!((d.speedup - 1.2).abs() < 1e-3, "{}", d.speedup);
    assert!(d.notes.iter().any(|n| n.contains("AFTER has no steps") && n.contains("launch rate")), "{:?}", d.notes);
    assert!(d.time_account.iter().all(|r| r.after_ms_per_step.is_none()));
    assert!(d.predictions.iter().all(|p| p.held.is_none()), "a step's promise is not checked against launches: {:?}", d.predictions);
    // One run replaying graphs and no steps in the other: launch rates are no common measure.
    after.cuda.launches.graphs = 1000;
    assert!(matches!(compare((&before, "b"), (&after, "a"), false), Err(Refusal::NoCommonMeasure)));
}

/// A sync read every 100 steps instead of every step is still found as the step, 100 times
/// rarer: the steps hold 100 times the launches, and the launch rate compares instead.
#[test]
fn steps_that_hold_other_work_are_not_compared() {
    let before = item();
    let mut after = fixed(1.3, &[DiagnosisId::HostSync]);
    if let Some(s) = after.steps.as_mut() {
        s.per_second = before.steps.as_ref().map_or(1.0, |b| b.per_second) * 1.3 / 100.0;
    }
    let d = compare((&before, "b"), (&after, "a"), false).expect("compares");
    assert_eq!(d.basis, "launch-rate", "{:?}", d.notes);
    assert!((d.speedup - 1.3).abs() < 1e-3, "{}", d.speedup);
    assert!(d.notes.iter().any(|n| n.contains("hold different work")), "{:?}", d.notes);
}

#[test]
fn two_programs_other_schemas_and_runs_without_launches_are_refused() {
    let before = item();
    let mut other = item();
    other.target.command = "python3 serve.py --port 80".into();
    let refused = compare((&before, "b"), (&other, "a"), false).expect_err("two programs");
    assert!(refused.to_string().contains("two different programs") && refused.to_string().contains("--allow-different"), "{refused}");
    assert!(compare((&before, "b"), (&other, "a"), true).is_ok(), "--allow-different compares them");
    let mut newer = item();
    newer.schema = "gputrace.report/2".into();
    assert!(matches!(compare((&before, "b"), (&newer, "a"), false), Err(Refusal::Schema { which: "AFTER", .. })));
    let mut idle = item();
    (idle.cuda.launches.kernels, idle.cuda.launches.graphs) = (0, 0);
    assert!(matches!(compare((&idle, "b"), (&before, "a"), false), Err(Refusal::NoLaunches { which: "BEFORE", .. })));
}

#[test]
fn the_program_is_the_script_an_interpreter_runs() {
    assert_eq!(program("python3 train.py --lr 3e-4"), "train.py");
    assert_eq!(program("/usr/bin/python3.12 -u /home/me/run/train.py"), "train.py");
    assert_eq!(program("python -m torch.distributed.run --nproc 8 train.py"), "torch.distributed.run");
    assert_eq!(program("./fakejob --steps 30"), "fakejob");
    assert_eq!(program("python3 -c import torch"), "python3 -c");
    assert_eq!(program(""), "");
}

#[test]
fn arguments_that_are_no_report_are_refused_with_why() {
    let dir = crate::test_support::scratch("diff", "input");
    let missing = input::report_of(&dir.join("nothing")).expect_err("missing");
    assert!(missing.why.contains("cannot open") && !missing.damaged_recording, "{missing}");
    let garbage = dir.join("garbage");
    std::fs::write(&garbage, b"\x00\x01 not json").expect("write");
    assert!(input::report_of(&garbage).expect_err("garbage").why.contains("neither a gputrace recording nor a JSON report"));
    let sweep = dir.join("sweep.json");
    std::fs::write(&sweep, br#"{"schema": "gputrace.sweep/1", "processes": []}"#).expect("write");
    assert!(input::report_of(&sweep).expect_err("a sweep").why.contains("schema `gputrace.sweep/1`"));
    let fifo = dir.join("fifo");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from_raw_mode(0o600), 0).expect("mkfifo");
    assert!(input::report_of(&fifo).expect_err("a FIFO is not waited on").why.contains("not a regular file"));
    let damaged = dir.join("damaged.gtr");
    let mut bytes = crate::record::format::preamble().to_vec();
    bytes.extend_from_slice(b"junk after the preamble");
    std::fs::write(&damaged, bytes).expect("write");
    assert!(input::report_of(&damaged).expect_err("no start record").damaged_recording);
    let good = dir.join("item.json");
    std::fs::write(&good, include_str!("testdata/item_h100.json")).expect("write");
    assert_eq!(input::report_of(&good).expect("a report").report.verdict, DiagnosisId::HostSync);
}
