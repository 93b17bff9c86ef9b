//! The timeline's lanes as SVG. Every lane shares one x axis, in bins (`timeline::Lanes`),
//! and a y axis of 0..100; the page stretches each lane to its box (`preserveAspectRatio`
//! none) and zooms by narrowing the shared `viewBox`, so the drawing is made once, here,
//! and strokes keep their width (`vector-effect`).

use std::fmt::Write as _;

use super::{lanes::Lanes, markup::esc};
use crate::evidence::waits::WaitKind;

/// One lane: its title, the largest value it shows (for the label), and its shapes.
#[derive(Debug)]
pub struct Lane {
    pub title: &'static str,
    pub scale: String,
    pub svg: String,
    /// Legend entries: colour and name.
    pub legend: Vec<(&'static str, String)>,
}

const GREEN: &str = "#2e9e44";
const BLUE: &str = "#2f6fbf";
const RED: &str = "#d0342c";
const ORANGE: &str = "#e58a00";
const PURPLE: &str = "#8a4fbf";
const GREY: &str = "#b8b8b8";
const DARK: &str = "#444";
/// Colours of `WaitKind::ALL`.
const WAIT_COLOURS: [&str; 7] = [RED, ORANGE, GREY, PURPLE, "#1a9a9a", BLUE, DARK];

/// All lanes, top to bottom.
#[must_use]
pub fn lanes(l: &Lanes) -> Vec<Lane> {
    let bin_s = l.bin_ns as f64 / 1e9;
    let mut out = Vec::new();
    if !l.gpu_util.is_empty() || !l.sm_active.is_empty() {
        let mut svg = String::new();
        let mut legend = Vec::new();
        for (i, (device, v)) in l.gpu_util.iter().enumerate() {
            let colour = [GREEN, BLUE, ORANGE, PURPLE][i % 4];
            svg.push_str(&line(v, 100.0, colour, false));
            legend.push((colour, format!("GPU {device} utilization")));
        }
        for (i, (device, v)) in l.sm_active.iter().enumerate() {
            let colour = [GREEN, BLUE, ORANGE, PURPLE][i % 4];
            svg.push_str(&line(v, 100.0, colour, true));
            legend.push((colour, format!("GPU {device} SM active (GPM, dashed)")));
        }
        out.push(Lane { title: "GPU activity", scale: "100 %".into(), svg, legend });
    }
    let launches: Vec<Option<f64>> = l.launches_per_s.clone();
    let top = launches.iter().flatten().copied().fold(0.0, f64::max);
    out.push(Lane {
        title: "kernel launches/s",
        scale: human(top, "/s"),
        svg: line(&launches, top, BLUE, false),
        legend: vec![(BLUE, "launches per second (per checkpoint)".into())],
    });
    let sync: Vec<f64> = l.sync_ns.iter().map(|&ns| ns as f64 / l.bin_ns as f64).collect();
    out.push(Lane {
        title: "synchronizing",
        scale: "100 % of time".into(),
        svg: stacked(&[(&sync, ORANGE)]),
        legend: vec![(ORANGE, format!("time in synchronizing calls ({} calls)", l.syncs.iter().map(|&n| u64::from(n)).sum::<u64>()))],
    });
    let max_bytes = l.copy_bytes.iter().copied().max().unwrap_or(0).max(1) as f64;
    let pageable: Vec<f64> = l.pageable_bytes.iter().map(|&b| b as f64 / max_bytes).collect();
    let pinned: Vec<f64> = l.copy_bytes.iter().zip(&l.pageable_bytes).map(|(&all, &p)| all.saturating_sub(p) as f64 / max_bytes).collect();
    out.push(Lane {
        title: "copies",
        scale: human(max_bytes / bin_s, "B/s"),
        svg: stacked(&[(&pinned, BLUE), (&pageable, RED)]),
        legend: vec![(BLUE, "bytes copied".into()), (RED, "of them pageable host memory".into())],
    });
    let empty: Vec<f64> = l.queue_empty_ns.iter().map(|&ns| ns as f64 / l.bin_ns as f64).collect();
    out.push(Lane {
        title: "GPU queue empty",
        scale: "100 % of time".into(),
        svg: stacked(&[(&empty, RED)]),
        legend: vec![(RED, "a launching thread's queue had no work".into())],
    });
    if l.thread_state.iter().any(Option::is_some) {
        let part = |i: usize| -> Vec<f64> { l.thread_state.iter().map(|s| s.map_or(0.0, |s| s[i])).collect() };
        let (on, runnable, io, asleep) = (part(0), part(1), part(2), part(3));
        out.push(Lane {
            title: "main thread",
            scale: "100 % of time".into(),
            svg: stacked(&[(&on, GREEN), (&runnable, ORANGE), (&io, PURPLE), (&asleep, GREY)]),
            legend: vec![
                (GREEN, "on CPU".into()),
                (ORANGE, "runnable, not running".into()),
                (PURPLE, "uninterruptible (I/O)".into()),
                (GREY, "asleep".into()),
            ],
        });
    }
    if l.woken_by.iter().any(|w| w.iter().any(|&ns| ns > 0)) {
        let kinds: Vec<Vec<f64>> = (0..WaitKind::ALL.len()).map(|k| l.woken_by.iter().map(|w| w[k] as f64 / l.bin_ns as f64).collect()).collect();
        let parts: Vec<(&[f64], &str)> = kinds.iter().zip(WAIT_COLOURS).map(|(v, c)| (v.as_slice(), c)).collect();
        out.push(Lane {
            title: "main thread woken by",
            scale: "100 % of time".into(),
            svg: stacked(&parts),
            legend: WaitKind::ALL.iter().zip(WAIT_COLOURS).map(|(k, c)| (c, k.name().replace('_', " "))).collect(),
        });
    }
    if l.steps.iter().any(|&n| n > 0) {
        let top = f64::from(l.steps.iter().copied().max().unwrap_or(1));
        let steps: Vec<f64> = l.steps.iter().map(|&n| f64::from(n) / top).collect();
        out.push(Lane { title: "steps", scale: format!("{top:.0} per bin"), svg: stacked(&[(&steps, DARK)]), legend: vec![(DARK, "step markers".into())] });
    }
    out
}

/// A line through the bins' centres, broken where a bin has no value.
fn line(values: &[Option<f64>], top: f64, colour: &str, dashed: bool) -> String {
    let mut d = String::new();
    let mut pen_down = false;
    for (x, v) in values.iter().enumerate() {
        match v {
            Some(v) => {
                let y = 100.0 - (v / top.max(f64::MIN_POSITIVE) * 100.0).clamp(0.0, 100.0);
                let _ = write!(d, "{}{:.1} {y:.1}", if pen_down { "L" } else { "M" }, x as f64 + 0.5);
                pen_down = true;
            }
            None => pen_down = false,
        }
    }
    let dash = if dashed { r#" stroke-dasharray="4 3""# } else { "" };
    format!(r#"<path d="{d}" fill="none" stroke="{colour}" stroke-width="1.5" vector-effect="non-scaling-stroke"{dash}/>"#)
}

/// Bars of fractions (0..1 of the lane), the parts stacked bottom up in the order given.
fn stacked(parts: &[(&[f64], &str)]) -> String {
    let bins = parts.first().map_or(0, |p| p.0.len());
    let mut base = vec![0.0f64; bins];
    let mut svg = String::new();
    for (values, colour) in parts {
        let mut d = String::new();
        for (x, (&v, b)) in values.iter().zip(base.iter_mut()).enumerate() {
            let h = (v.clamp(0.0, 1.0) * 100.0).min(100.0 - *b * 100.0);
            if h >= 0.05 {
                let _ = write!(d, "M{x} {:.1}h1v{h:.1}h-1z", 100.0 - *b * 100.0 - h);
            }
            *b += h / 100.0;
        }
        if !d.is_empty() {
            let _ = write!(svg, r#"<path d="{d}" fill="{colour}"/>"#);
        }
    }
    svg
}

/// `12.3k/s`, `1.2 GB/s`.
#[must_use]
pub fn human(v: f64, unit: &str) -> String {
    let (v, prefix) = match v {
        v if v >= 1e9 => (v / 1e9, "G"),
        v if v >= 1e6 => (v / 1e6, "M"),
        v if v >= 1e3 => (v / 1e3, "k"),
        v => (v, ""),
    };
    let space = if unit.starts_with('/') { "" } else { " " };
    // Three significant digits.
    let digits = if v >= 100.0 { 0 } else if v >= 10.0 { 1 } else { 2 };
    let text = format!("{v:.digits$}");
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    esc(text) + space + prefix + unit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacked_parts_never_exceed_the_lane() {
        let svg = stacked(&[(&[0.8, 0.0], "a"), (&[0.5, 0.2], "b")]);
        assert!(svg.contains("M0 20.0h1v80.0h-1z"), "{svg}");
        // The second part gets only what is left of the first bin.
        assert!(svg.contains("M0 0.0h1v20.0h-1z"), "{svg}");
        assert!(svg.contains("M1 80.0h1v20.0h-1z"), "{svg}");
    }

    #[test]
    fn a_line_breaks_at_missing_bins() {
        let svg = line(&[Some(50.0), None, Some(100.0)], 100.0, "c", false);
        assert!(svg.contains(r#"d="M0.5 50.0M2.5 0.0""#), "{svg}");
    }

    #[test]
    fn human_units() {
        assert_eq!(human(12_300.0, "/s"), "12.3k/s");
        assert_eq!(human(2.0e9, "B/s"), "2 GB/s");
        assert_eq!(human(0.5, "/s"), "0.5/s");
        assert_eq!(human(99.467, "/s"), "99.5/s");
        assert_eq!(human(3_269.4, "/s"), "3.27k/s");
        assert_eq!(human(200.0, "B"), "200 B");
    }
}
