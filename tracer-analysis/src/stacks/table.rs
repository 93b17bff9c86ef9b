//! How stacks are written into snapshots: each distinct frame once, in a table, and each
//! stack as indexes into it. A Python training loop has a few hundred stacks that share most
//! of their frames; written whole, a recording's checkpoint (one a second) repeated every
//! frame's file name and function for every stack.

use std::collections::HashMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Activity, Frame, LaunchAges, Origin, StackTime};

#[derive(Serialize, Deserialize)]
struct Table {
    frames: Vec<Frame>,
    stacks: Vec<Row>,
}

#[derive(Serialize, Deserialize)]
struct Row {
    tid: u32,
    pid: u32,
    activity: Activity,
    on_cpu: bool,
    origin: Origin,
    frames: Vec<u32>,
    count: u64,
    ns: u64,
    /// Absent where no age is known, and in recordings made before they were kept.
    #[serde(default, skip_serializing_if = "LaunchAges::is_empty")]
    launch_ages: LaunchAges,
}

/// `#[serde(with = "crate::stacks::table")]` for a `Vec<StackTime>`.
pub fn serialize<S: Serializer>(stacks: &[StackTime], serializer: S) -> Result<S::Ok, S::Error> {
    let mut index: HashMap<&Frame, u32> = HashMap::new();
    let mut frames: Vec<Frame> = Vec::new();
    let rows = stacks
        .iter()
        .map(|s| Row {
            tid: s.tid,
            pid: s.pid,
            activity: s.activity,
            on_cpu: s.on_cpu,
            origin: s.origin,
            frames: s
                .frames
                .iter()
                .map(|f| {
                    *index.entry(f).or_insert_with(|| {
                        frames.push(f.clone());
                        (frames.len() - 1) as u32
                    })
                })
                .collect(),
            count: s.count,
            ns: s.ns,
            launch_ages: s.launch_ages,
        })
        .collect();
    Table { frames, stacks: rows }.serialize(serializer)
}

/// The inverse of [`serialize`]; an index out of the table (a damaged file) drops that frame.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<StackTime>, D::Error> {
    let t = Table::deserialize(deserializer)?;
    Ok(t.stacks
        .into_iter()
        .map(|r| StackTime {
            tid: r.tid,
            pid: r.pid,
            activity: r.activity,
            on_cpu: r.on_cpu,
            origin: r.origin,
            frames: r.frames.iter().filter_map(|&i| t.frames.get(i as usize).cloned()).collect(),
            count: r.count,
            ns: r.ns,
            launch_ages: r.launch_ages,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Holder {
        #[serde(with = "super")]
        stacks: Vec<StackTime>,
    }

    fn frame(function: &str) -> Frame {
        Frame { function: function.into(), file: Some("/w/train.py".into()), line: Some(3), module: None }
    }

    #[test]
    fn stacks_round_trip_and_shared_frames_are_written_once() {
        let shared = vec![frame("step"), frame("main")];
        let stacks = vec![
            StackTime { tid: 1, pid: 1, activity: Activity::Sync, on_cpu: false, origin: Origin::Python, frames: shared.clone(), count: 2, ns: 20, launch_ages: LaunchAges::default() },
            StackTime { tid: 1, pid: 1, activity: Activity::Host, on_cpu: true, origin: Origin::Python, frames: [vec![frame("load")], shared].concat(), count: 1, ns: 10, launch_ages: LaunchAges::default() },
        ];
        let h = Holder { stacks };
        let text = serde_json::to_string(&h).expect("serializes");
        assert_eq!(text.matches("\"main\"").count(), 1, "{text}");
        assert_eq!(serde_json::from_str::<Holder>(&text).expect("reads back"), h);
    }

    #[test]
    fn a_damaged_index_drops_the_frame_not_the_snapshot() {
        let text = r#"{"stacks":{"frames":[],"stacks":[{"tid":1,"pid":1,"activity":"host","on_cpu":true,"origin":"native","frames":[7],"count":1,"ns":5}]}}"#;
        let h: Holder = serde_json::from_str(text).expect("reads");
        assert!(h.stacks[0].frames.is_empty());
    }
}
