//! A flamegraph per diagnosis, from the stacks its call sites were ranked from
//! (`detect::code_sites::stacks_of`), drawn by inferno as SVG. Frames are the same locations the
//! report names (`train.py:42 in step`), outermost at the bottom; widths are time.

use crate::{detect::code_sites::stacks_of, evidence::Evidence, stacks::StackTime};

/// Pixels wide; the page scales it down to fit.
const WIDTH: usize = 1200;

/// The SVG of the flamegraph of diagnosis `id`, or None where it names no code or no stack
/// was charged to it.
#[must_use]
pub fn svg(ev: &Evidence, id: crate::model::DiagnosisId, threads: &[u32]) -> Option<String> {
    let stacks = stacks_of(ev, id, threads)?;
    let lines = folded(&stacks);
    if lines.is_empty() {
        return None;
    }
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!("{id}: where the time went");
    options.count_name = "µs".into();
    options.name_type = String::new();
    options.image_width = Some(WIDTH);
    options.deterministic = true;
    options.hash = true;
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut out).ok()?;
    String::from_utf8(out).ok()
}

/// inferno's folded lines: frames outermost first, `;`-separated, then the microseconds.
fn folded(stacks: &[&StackTime]) -> Vec<String> {
    stacks
        .iter()
        .filter(|s| s.ns >= 1_000 && !s.frames.is_empty())
        .map(|s| {
            let frames: Vec<String> = s.frames.iter().rev().map(|f| f.location().replace(';', ",")).collect();
            format!("{} {}", frames.join(";"), s.ns / 1_000)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::{Activity, Frame, Origin};

    fn frame(function: &str, line: u32) -> Frame {
        Frame { function: function.into(), file: Some("/job/train.py".into()), line: Some(line), module: None }
    }

    #[test]
    fn a_sync_stack_becomes_a_flamegraph_naming_its_frames() {
        let mut ev = Evidence::default();
        ev.stacks = vec![StackTime {
                tid: 7,
                pid: 7,
                activity: Activity::Sync,
                on_cpu: false,
                origin: Origin::Python,
                frames: vec![frame("step", 42), frame("main", 7)],
                count: 10,
                ns: 2_000_000_000,
                launch_ages: crate::stacks::LaunchAges::default(),
            }];
        let drawn = svg(&ev, crate::model::DiagnosisId::HostSync, &[7]).expect("a flamegraph");
        assert!(drawn.contains("train.py:42 in step"), "{drawn}");
        assert!(drawn.contains("train.py:7 in main"));
        assert!(svg(&ev, crate::model::DiagnosisId::HostSync, &[8]).is_none(), "another thread's stacks are not charged");
        assert!(svg(&ev, crate::model::DiagnosisId::GpuBound, &[7]).is_none(), "gpu-bound names no code");
    }

    #[test]
    fn semicolons_in_names_do_not_split_frames() {
        let mut f = frame("a;b", 1);
        f.file = None;
        f.line = None;
        let s = StackTime { tid: 1, pid: 1, activity: Activity::Host, on_cpu: true, origin: Origin::Native, frames: vec![f], count: 1, ns: 5_000, launch_ages: crate::stacks::LaunchAges::default() };
        assert_eq!(folded(&[&s]), vec!["a,b 5".to_owned()]);
    }
}
