//! A recording as a timeline in the Chrome trace-event JSON format, which ui.perfetto.dev
//! (and `chrome://tracing`, and Perfetto's SQL trace processor) open:
//! <https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU>.
//!
//! Tracks: one per traced thread with its CUDA calls (copies, syncs, allocations …), the
//! periods its GPU queue sat empty, its block I/O and its lifecycle; per process, counter
//! tracks of kernel launches per second and of each thread's scheduler states; per GPU,
//! NVML counter tracks; the time of each thread's stacks (`crate::stacks`) as sample events
//! at each checkpoint, their frames in `stackFrames`; and the diagnoses, with their sites, as
//! global annotations at the end. Timestamps are microseconds since the recording's start.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs::File,
    io::{self, BufWriter, Write as _},
    path::Path,
};

use gputrace_common::{spec_of, Family};
use serde_json::{json, Value};

use super::walk::{launches_since, walk, Item};
use crate::{
    decode::Event,
    evidence::{
        sched_io::op_of,
        snapshot::{Snapshot, ThreadHits},
    },
    gpu::Sample,
    output::{self, Destination},
    record::Replayed,
    report::Report,
};

/// GPUs get pids of their own, far above real ones, so their tracks never mix with a process.
const GPU_PID_BASE: u64 = 4_000_000_000;

/// Write the timeline of the recording at `file` to `out`; returns how many events it holds.
/// A file appears at `out` only once the whole timeline was written.
pub fn write(file: &Path, replayed: &Replayed, report: &Report, out: &Destination) -> io::Result<u64> {
    let (opened, mut placement) = output::open(out, 0o600).map_err(|e| io::Error::other(e.to_string()))?;
    let mut w = TraceWriter::new(opened)?;
    let start_ns = replayed.start.start_ns;
    let mut timeline = Timeline { start_ns, ..Timeline::default() };
    walk(file, |item| match item {
        Item::Event(event) => timeline.event(&mut w, &event),
        Item::ThreadExit(tid, c) => {
            timeline.exited.push(ThreadHits::of(tid, &c));
            Ok(())
        }
        Item::Checkpoint(snapshot) => timeline.checkpoint(&mut w, &snapshot),
        Item::GpuSamples(samples) => samples.iter().try_for_each(|s| timeline.gpu_sample(&mut w, s)),
        Item::Trigger(t) => {
            let what = t.diagnosis.map_or_else(|| format!("flight recorder written out ({})", t.reason), |d| format!("flight recorder: {d} fired"));
            w.put(&json!({"ph": "i", "s": "g", "name": what, "ts": timeline.us(t.at_ns), "pid": 0, "tid": 0}))
        }
        Item::HostClass(_) => Ok(()),
    })?;
    let end_ts = report.window.duration_s * 1e6;
    for (rank, d) in report.diagnoses.iter().enumerate() {
        w.put(&json!({
            "ph": "i", "s": "g", "name": format!("{}: {}", d.id, d.severity), "ts": end_ts, "pid": 0, "tid": 0,
            "args": {"rank": rank + 1, "impact": d.impact, "summary": d.summary, "evidence": d.evidence, "fix": d.fix,
                     "sites": d.sites.iter().map(|s| format!("{} ({:.2} s, {:.0}%)", s.frame, s.seconds, s.share * 100.0)).collect::<Vec<_>>()},
        }))?;
    }
    w.put(&json!({"ph": "i", "s": "g", "name": format!("verdict: {}", report.verdict), "ts": end_ts, "pid": 0, "tid": 0}))?;
    timeline.names(&mut w, replayed)?;
    let count = w.finish(&timeline.frames)?;
    if let Some(p) = placement.as_mut() {
        p.publish()?;
    }
    Ok(count)
}

/// Streams `{"traceEvents": [ … ]}` without holding the events in memory.
struct TraceWriter {
    out: BufWriter<File>,
    count: u64,
}

impl TraceWriter {
    fn new(file: File) -> io::Result<Self> {
        let mut out = BufWriter::new(file);
        out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
        Ok(Self { out, count: 0 })
    }

    fn put(&mut self, event: &Value) -> io::Result<()> {
        if self.count > 0 {
            self.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut self.out, event)?;
        self.count += 1;
        Ok(())
    }

    fn finish(mut self, frames: &StackFrames) -> io::Result<u64> {
        self.out.write_all(b"\n],\"stackFrames\":")?;
        serde_json::to_writer(&mut self.out, &frames.table)?;
        self.out.write_all(b"}\n")?;
        self.out.flush()?;
        Ok(self.count)
    }
}

#[derive(Debug, Default)]
struct Timeline {
    start_ns: u64,
    /// Threads and processes seen, for their track names.
    threads: BTreeSet<(u32, u32)>,
    gpus: BTreeSet<u32>,
    /// The previous checkpoint, for rates over the interval.
    previous: Option<Snapshot>,
    /// Threads that exited since: their last launches count in this interval.
    exited: Vec<ThreadHits>,
    frames: StackFrames,
}

/// The trace format's `stackFrames`: each frame once per caller chain, `{name, parent}`.
#[derive(Debug, Default)]
struct StackFrames {
    ids: BTreeMap<(u64, String), u64>,
    table: serde_json::Map<String, Value>,
}

impl StackFrames {
    /// The id of the innermost frame of `frames` (innermost first), adding what is new.
    fn id(&mut self, frames: &[crate::stacks::Frame]) -> Option<u64> {
        let mut parent = 0;
        for f in frames.iter().rev() {
            let name = f.location();
            let next = self.ids.len() as u64 + 1;
            let id = *self.ids.entry((parent, name.clone())).or_insert(next);
            if id == next {
                let mut frame = json!({"name": name});
                if parent != 0 {
                    frame["parent"] = json!(parent.to_string());
                }
                self.table.insert(id.to_string(), frame);
            }
            parent = id;
        }
        (parent != 0).then_some(parent)
    }
}

impl Timeline {
    fn us(&self, ns: u64) -> f64 {
        (ns as f64 - self.start_ns as f64) / 1e3
    }

    fn event(&mut self, w: &mut TraceWriter, event: &Event) -> io::Result<()> {
        let h = event.header();
        let (pid, tid) = (h.tgid, h.tid);
        self.threads.insert((pid, tid));
        let slice = |name: String, cat: &str, from: u64, to: u64, args: Value| {
            json!({"ph": "X", "name": name, "cat": cat, "ts": self.us(from), "dur": to.saturating_sub(from) as f64 / 1e3, "pid": pid, "tid": tid, "args": args})
        };
        let e = match event {
            Event::Call(c) => {
                let Some(spec) = spec_of(c.header.probe) else { return Ok(()) };
                let mut args = serde_json::Map::new();
                if let Some(i) = spec.size_arg {
                    args.insert("bytes".into(), json!(c.args[usize::from(i)]));
                }
                args.insert("result".into(), json!(c.ret));
                slice(spec.symbol.into(), family_name(spec.family), c.start_ns, c.header.ts_ns, Value::Object(args))
            }
            Event::IdleEnd(e) => slice("GPU queue empty".into(), "gpu-idle", e.drained_at_ns, e.header.ts_ns, json!({})),
            Event::Io(e) => {
                let op = format!("block {:?}", op_of(e.rwbs)).to_lowercase();
                slice(op, "block-io", e.start_ns, e.header.ts_ns, json!({"bytes": e.bytes, "dev": e.dev, "error": e.error}))
            }
            Event::TaskNew(e) => json!({"ph": "i", "s": "t", "name": "clone", "ts": self.us(h.ts_ns), "pid": pid, "tid": tid, "args": {"child": e.child_tid}}),
            Event::TaskExit(_) => json!({"ph": "i", "s": "t", "name": "exit", "ts": self.us(h.ts_ns), "pid": pid, "tid": tid}),
            Event::TaskExec(_) => json!({"ph": "i", "s": "t", "name": "exec", "ts": self.us(h.ts_ns), "pid": pid, "tid": tid}),
            Event::LongSleep(e) => {
                let what = if e.blocked != 0 { "off CPU (uninterruptible)" } else { "off CPU (asleep)" };
                slice(what.into(), "off-cpu", e.start_ns, h.ts_ns, json!({"waker_pid": e.wake.waker_tgid, "in_cuda": e.wake.in_cuda != 0}))
            }
            Event::SchedFinal(_) => return Ok(()),
        };
        w.put(&e)
    }

    /// Counter tracks from the change since the previous checkpoint.
    fn checkpoint(&mut self, w: &mut TraceWriter, s: &Snapshot) -> io::Result<()> {
        let exited = std::mem::take(&mut self.exited);
        let Some(prev) = self.previous.replace(s.clone()) else { return Ok(()) };
        let span_ns = s.at_ns.saturating_sub(prev.at_ns);
        if span_ns == 0 {
            return Ok(());
        }
        let ts = self.us(prev.at_ns);
        let launches = launches_since(&prev, s, &exited);
        let prev_sched: BTreeMap<u32, &crate::evidence::snapshot::SchedRaw> = prev.sched.iter().map(|t| (t.tid, &t.sched)).collect();
        for (pid, n) in launches {
            w.put(&json!({"ph": "C", "name": "kernel launches/s", "ts": ts, "pid": pid, "args": {"launches": n as f64 * 1e9 / span_ns as f64}}))?;
        }
        self.stack_samples(w, s, &prev, ts)?;
        for t in &s.sched {
            let now = t.sched.closed_at(s.at_ns);
            let then = prev_sched.get(&t.tid).map(|r| r.closed_at(prev.at_ns)).unwrap_or_default();
            let d = now.since(&then);
            let f = |ns: u64| (ns as f64 / span_ns as f64 * 100.0).min(100.0);
            w.put(&json!({
                "ph": "C", "name": format!("cpu state % (thread {})", t.tid), "ts": ts, "pid": t.sched.tgid,
                "args": {"running": f(d.on_cpu_ns), "runnable": f(d.runqueue_ns), "blocked": f(d.blocked_ns), "sleeping": f(d.sleep_ns)},
            }))?;
        }
        Ok(())
    }

    /// One sample event per stack that gained time since the previous checkpoint, weighted by
    /// that time (Python stacks for processes that have them, as in the sites).
    fn stack_samples(&mut self, w: &mut TraceWriter, s: &Snapshot, prev: &Snapshot, ts: f64) -> io::Result<()> {
        for st in crate::stacks::sites::preferred(&s.stacks) {
            let before = prev.stacks.iter().find(|b| b.same_key(st)).map_or(0, |b| b.ns);
            let ns = st.ns.saturating_sub(before);
            let Some(sf) = (ns > 0).then(|| self.frames.id(&st.frames)).flatten() else { continue };
            self.threads.insert((st.pid, st.tid));
            w.put(&json!({
                "ph": "P", "name": format!("{:?}{}", st.activity, if st.on_cpu { "" } else { " (off CPU)" }).to_lowercase(),
                "ts": ts, "pid": st.pid, "tid": st.tid, "sf": sf.to_string(), "args": {"seconds": ns as f64 / 1e9},
            }))?;
        }
        Ok(())
    }

    fn gpu_sample(&mut self, w: &mut TraceWriter, s: &Sample) -> io::Result<()> {
        self.gpus.insert(s.device);
        let pid = GPU_PID_BASE + u64::from(s.device);
        let ts = self.us(s.at_ns);
        let mut activity = serde_json::Map::new();
        for (name, v) in [("utilization", s.util_pct), ("sm_active", s.sm_pct), ("tensor_active", s.tensor_pct)] {
            if let Some(v) = v {
                activity.insert(name.into(), json!(v));
            }
        }
        if !activity.is_empty() {
            w.put(&json!({"ph": "C", "name": "activity %", "ts": ts, "pid": pid, "args": activity}))?;
        }
        if let Some(m) = s.mem_used_bytes {
            w.put(&json!({"ph": "C", "name": "memory used MiB", "ts": ts, "pid": pid, "args": {"used": m as f64 / 1_048_576.0}}))?;
        }
        Ok(())
    }

    /// Name the tracks: processes by pid and command, GPUs by index and model.
    fn names(&self, w: &mut TraceWriter, replayed: &Replayed) -> io::Result<()> {
        let target = replayed.outcome.target_pid;
        let pids: BTreeSet<u32> = self.threads.iter().map(|(p, _)| *p).chain([target]).collect();
        for pid in pids {
            let name = if pid == target { format!("{} (pid {pid})", replayed.outcome.command) } else { format!("pid {pid}") };
            w.put(&json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}))?;
        }
        for (pid, tid) in &self.threads {
            w.put(&json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": format!("thread {tid}")}}))?;
        }
        let devices = replayed.start.gpu.as_ref().map(|g| g.devices.as_slice()).unwrap_or_default();
        for index in &self.gpus {
            let model = devices.iter().find(|d| d.index == *index).map_or("", |d| d.name.as_str());
            w.put(&json!({"ph": "M", "name": "process_name", "pid": GPU_PID_BASE + u64::from(*index), "tid": 0, "args": {"name": format!("GPU {index} {model}")}}))?;
        }
        w.put(&json!({"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "gputrace diagnoses"}}))
    }
}

fn family_name(f: Family) -> &'static str {
    match f {
        Family::Launch | Family::GraphLaunch => "launch",
        Family::Copy => "copy",
        Family::Memset => "memset",
        Family::Sync => "sync",
        Family::Alloc | Family::Free | Family::Map | Family::Unmap => "device-memory",
        Family::HostPin | Family::HostUnpin => "host-pinning",
        Family::Block => "tensor-memory",
        Family::Context => "context",
        Family::Collective => "collective",
        Family::Comm => "communicator",
    }
}
