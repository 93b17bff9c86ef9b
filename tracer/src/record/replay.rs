//! A recording played back into the same [`Outcome`] a live session hands the report, by the
//! same code: events are folded into the evidence in order (host-address lookups answered
//! from the recorded answers), then the last checkpoint's kernel counters are folded in as
//! the live session folds in its final reading.

use std::{
    collections::{BTreeSet, VecDeque},
    path::{Path, PathBuf},
    time::Duration,
};

use gputrace_common::{probe::PROBE_SLOTS, ThreadCounters, PROBES};

use super::{
    format::{kind, Checkpoint, End, GpuSamples, HostAnswer, Start, Trigger},
    reader::{Damage, RecordFrame, OpenError, Reader},
};
use crate::{
    decode::{decode, Event},
    discover::libraries::Library,
    evidence::{snapshot::Snapshot, Evidence, HostClass, HostMemory},
    gpu::sampler::Finished,
    probes::AttachedLibrary,
    outcome::{Outcome, RecordingNote, StopReason},
};

/// Why a recording gave no report at all.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The file could not be opened, or is not a recording this gputrace reads.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The file does not begin with a readable start record.
    #[error("{}: {why}", .path.display())]
    NoStart {
        /// The recording.
        path: PathBuf,
        /// What the file holds instead, for the message.
        why: String,
    },
}

/// A played-back recording.
#[derive(Debug)]
pub struct Replayed {
    /// What the report is made from, as a live session would hand it.
    pub outcome: Outcome,
    /// The file's start record.
    pub start: Start,
    /// Where reading stopped early, if it did.
    pub damage: Option<Damage>,
    /// The flight-recorder trigger records read, in file order.
    pub triggers: Vec<Trigger>,
}

/// The host-memory answers given live for the next event, found again by address. (A replay
/// may ask about an address the live session did not — a file that starts mid-session lacks
/// the pins and allocations made before it — so answers are matched, not handed out in turn.)
#[derive(Debug, Default)]
struct RecordedAnswers(VecDeque<HostAnswer>);

/// The most answers one event can have: a copy asks about its host side, a 2D/3D copy
/// between host buffers about both (`evidence::copies`). More in a row is a damaged or
/// crafted file, and holding them would let it grow our memory without bound.
const MAX_ANSWERS_PER_EVENT: usize = 8;

/// No counter of a real session comes near this (2^60 calls, or 36 years in nanoseconds):
/// a larger one is damage, and would wrap once summed with others.
const MAX_COUNT: u64 = 1 << 60;

impl HostMemory for RecordedAnswers {
    fn classify(&mut self, pid: u32, addr: u64, _at_ns: u64) -> HostClass {
        match self.0.iter().position(|a| a.pid == pid && a.addr == addr) {
            Some(i) => self.0.remove(i).map_or(HostClass::Unmapped, |a| class_of(a.class)),
            // Not asked live: say we do not know.
            None => HostClass::Unmapped,
        }
    }
}

/// The recorded number of a host class.
#[must_use]
pub fn class_number(c: HostClass) -> u32 {
    match c {
        HostClass::PinnedMapping => 1,
        HostClass::Pageable => 2,
        HostClass::Unmapped => 3,
    }
}

fn class_of(n: u32) -> HostClass {
    match n {
        1 => HostClass::PinnedMapping,
        2 => HostClass::Pageable,
        _ => HostClass::Unmapped,
    }
}

/// Everything read so far.
#[derive(Debug, Default)]
struct State {
    evidence: Evidence,
    answers: RecordedAnswers,
    baseline: Option<Snapshot>,
    from_session_start: bool,
    last: Option<Checkpoint>,
    /// Threads whose exit records came after the last checkpoint: that checkpoint still
    /// holds them, and they are counted already.
    exited_since_last: BTreeSet<u32>,
    samples: GpuSamples,
    end: Option<End>,
    triggers: Vec<Trigger>,
    /// The start record's time: nothing of the file comes before it.
    start_ns: u64,
    frames: u64,
    unknown_frames: u64,
    ended_with_trigger: bool,
    /// The file's format version (its preamble).
    format_version: u32,
    /// Trigger records since the last checkpoint or end record (they carry no evidence, so
    /// they need no second reading).
    triggers_since_checkpoint: u64,
}

/// Play back the recording at `path`.
pub fn replay(path: &Path) -> Result<Replayed, ReplayError> {
    replay_from(|| Ok(Reader::open(path)?), path)
}

/// Play back frames from any source (`path` names it in messages and the report); `open`
/// gives a reader from the first byte each time it is called.
///
/// The window ends at the last checkpoint read (or the end record): that is where the
/// kernel's counters stop. Events after it would lengthen the window and add calls the
/// counters do not have (a cut file charged the rest as sleeping, and its launches per step
/// fell short), so a file with frames after its last checkpoint — cut between checkpoints,
/// or damaged there — is read a second time, up to that checkpoint only.
pub fn replay_from<R: std::io::Read>(open: impl Fn() -> Result<Reader<R>, ReplayError>, path: &Path) -> Result<Replayed, ReplayError> {
    let whole = play(open()?, path, None)?;
    if whole.after_last_checkpoint == 0 {
        return Ok(whole.replayed);
    }
    let prefix = play(open()?, path, Some(whole.through_last_checkpoint))?;
    let mut replayed = prefix.replayed;
    // The second reading stops where the first found damage, if it did.
    replayed.damage = whole.replayed.damage;
    if let Some(note) = replayed.outcome.recording.as_mut() {
        note.damage = replayed.damage.as_ref().map(ToString::to_string);
    }
    let at_s = replayed.outcome.end_ns.saturating_sub(replayed.outcome.start_ns) as f64 / 1e9;
    replayed.outcome.notes.insert(
        0,
        format!(
            "{} frames after the last checkpoint ({at_s:.2} s into the window) were left out: the kernel's counters end there, so the window does too",
            whole.after_last_checkpoint
        ),
    );
    Ok(replayed)
}

/// One reading of a recording.
struct Played {
    replayed: Replayed,
    /// Frames read up to and including the last checkpoint or end record (the start record
    /// counted), and good frames after it that carry evidence.
    through_last_checkpoint: u64,
    after_last_checkpoint: u64,
}

/// Read frames in order; with `limit`, fold in only the first `limit` (later trigger
/// records are still noted: they carry no evidence).
fn play<R: std::io::Read>(mut reader: Reader<R>, path: &Path, limit: Option<u64>) -> Result<Played, ReplayError> {
    let no_start = |why: String| ReplayError::NoStart { path: path.to_owned(), why };
    let start: Start = match reader.next_frame() {
        Some(Ok(RecordFrame { kind: kind::START, payload, .. })) => {
            serde_json::from_slice(&payload).map_err(|e| no_start(format!("its start record does not parse ({e})")))?
        }
        Some(Ok(f)) => return Err(no_start(format!("it begins with a frame of kind {} instead of a start record", f.kind))),
        Some(Err(d)) => return Err(no_start(format!("its start record is unreadable: {d}"))),
        None => return Err(no_start("it holds no start record (empty recording)".into())),
    };
    let mut st = State { from_session_start: start.from_session_start, start_ns: start.start_ns, frames: 1, format_version: reader.version(), ..State::default() };
    let (mut damage, mut read, mut through_last_checkpoint) = (None, 1u64, 1u64);
    while let Some(frame) = reader.next_frame() {
        let frame = match frame {
            Ok(f) => f,
            Err(d) => {
                damage = Some(d);
                break;
            }
        };
        read += 1;
        if limit.is_some_and(|l| read > l) {
            if frame.kind == kind::TRIGGER {
                st.triggers.push(parse(&frame).unwrap_or_default());
            }
            st.ended_with_trigger = frame.kind == kind::TRIGGER;
            continue;
        }
        match st.apply(&frame) {
            Ok(()) => st.frames += 1,
            Err(d) => {
                damage = Some(d);
                break;
            }
        }
        if matches!(frame.kind, kind::CHECKPOINT | kind::END) {
            through_last_checkpoint = read;
        }
    }
    let after_last_checkpoint = if limit.is_some() { 0 } else { st.frames - through_last_checkpoint - st.triggers_since_checkpoint };
    let triggers = std::mem::take(&mut st.triggers);
    let outcome = st.finish(&start, path, damage.as_ref());
    Ok(Played { replayed: Replayed { outcome, start, damage, triggers }, through_last_checkpoint, after_last_checkpoint })
}

fn parse<T: serde::de::DeserializeOwned>(f: &RecordFrame) -> Result<T, Damage> {
    serde_json::from_slice(&f.payload).map_err(|e| Damage::Payload { offset: f.offset, kind: f.kind, why: e.to_string() })
}

impl State {
    fn apply(&mut self, f: &RecordFrame) -> Result<(), Damage> {
        let damage = |why: String| Damage::Payload { offset: f.offset, kind: f.kind, why };
        // A file ends with its end record: anything after it was not written by a recorder.
        if self.end.is_some() {
            return Err(damage(if f.kind == kind::END { "a second end record".into() } else { "a frame after the end record".into() }));
        }
        match f.kind {
            kind::EVENT => self.event(&f.payload),
            kind::HOST_CLASS => {
                let a = HostAnswer::from_bytes(&f.payload).ok_or(Damage::Payload {
                    offset: f.offset,
                    kind: f.kind,
                    why: format!("{} bytes, expected {}", f.payload.len(), HostAnswer::LEN),
                })?;
                if self.answers.0.len() >= MAX_ANSWERS_PER_EVENT {
                    return Err(Damage::Payload {
                        offset: f.offset,
                        kind: f.kind,
                        why: format!("more than {MAX_ANSWERS_PER_EVENT} host-memory answers for one event"),
                    });
                }
                self.answers.0.push_back(a);
            }
            kind::THREAD_EXIT => {
                let (tid, c) = thread_exit(&f.payload).ok_or(Damage::Payload { offset: f.offset, kind: f.kind, why: "wrong length".into() })?;
                if let Some(n) = c.hits.iter().copied().find(|&n| n > MAX_COUNT) {
                    return Err(damage(format!("a thread's hit counter reads {n}, more than any session counts")));
                }
                self.evidence.add_counters(tid, &Snapshot::exited_counters(self.baseline.as_ref(), tid, &c));
                self.exited_since_last.insert(tid);
            }
            kind::CHECKPOINT => {
                let cp: Checkpoint = parse(f)?;
                self.checkpoint(cp).map_err(damage)?;
            }
            kind::GPU_SAMPLES => self.samples.extend(parse::<GpuSamples>(f)?),
            kind::TRIGGER => {
                self.triggers.push(parse(f)?);
                self.ended_with_trigger = true;
                self.triggers_since_checkpoint += 1;
                return Ok(());
            }
            kind::END => {
                let end: End = parse(f)?;
                if end.end_ns < self.start_ns {
                    return Err(damage(format!("the end record ({} ns) is before the start record ({} ns)", end.end_ns, self.start_ns)));
                }
                self.checkpoint(end.checkpoint.clone()).map_err(damage)?;
                self.end = Some(end);
            }
            kind::START => return Err(Damage::Payload { offset: f.offset, kind: f.kind, why: "a second start record".into() }),
            // A newer writer's frame: skipped, as docs/recording.md promises.
            _ => self.unknown_frames += 1,
        }
        self.ended_with_trigger = false;
        if matches!(f.kind, kind::CHECKPOINT | kind::END) {
            self.triggers_since_checkpoint = 0;
        }
        Ok(())
    }

    /// Take a checkpoint's counters; why not, where they cannot be a recorder's.
    fn checkpoint(&mut self, cp: Checkpoint) -> Result<(), String> {
        let at = cp.snapshot.at_ns;
        if at < self.start_ns {
            return Err(format!("a checkpoint ({at} ns) is before the start record ({} ns)", self.start_ns));
        }
        if let Some(before) = self.last.as_ref().map(|c| c.snapshot.at_ns).filter(|&b| at < b) {
            return Err(format!("a checkpoint ({at} ns) is earlier than the one before it ({before} ns)"));
        }
        if let Some(n) = cp.snapshot.largest_counter().filter(|&n| n > MAX_COUNT) {
            // Summed with others, such a count would wrap (lost_events 18446744073709551610).
            return Err(format!("a counter reads {n}, more than any session counts"));
        }
        if self.baseline.is_none() && !self.from_session_start {
            self.baseline = Some(cp.snapshot.clone());
        }
        cp.snapshot.mark(&mut self.evidence, self.baseline.as_ref());
        for &(pid, uid) in &cp.uids {
            self.evidence.learn_uid(pid, || uid);
        }
        self.last = Some(cp);
        self.exited_since_last.clear();
        Ok(())
    }

    fn event(&mut self, bytes: &[u8]) {
        let event = match decode(bytes) {
            Ok(e) => e,
            Err(e) => {
                log::debug!("undecodable recorded event: {e}");
                self.evidence.undecodable();
                return;
            }
        };
        self.evidence.apply(&event, &mut self.answers);
        // The answers belonged to this event: none carries over to the next.
        self.answers.0.clear();
        if let Event::SchedFinal(e) = event {
            // The exit reading is cumulative since the thread began: a segment keeps its part.
            let tid = e.header.tid;
            if let Some(before) = self.baseline.as_ref().and_then(|b| b.sched_of(tid)) {
                self.evidence.rebase_sched(tid, &before);
            }
            self.exited_since_last.insert(tid);
        }
    }

    fn finish(mut self, start: &Start, path: &Path, damage: Option<&Damage>) -> Outcome {
        let mut notes = Vec::new();
        let last = self.last.take().unwrap_or_default();
        last.snapshot.apply(&mut self.evidence, self.baseline.as_ref(), &self.exited_since_last);
        let stopped_by = match (&self.end, self.ended_with_trigger) {
            (Some(end), _) => StopReason::parse(&end.stopped_by),
            (None, true) => StopReason::FlightDump,
            (None, false) => StopReason::RecordingCut,
        };
        if let Some(d) = damage {
            notes.push(format!("the recording is incomplete: {d}; this report covers what was read before it"));
        } else if self.end.is_none() && !self.ended_with_trigger {
            notes.push("the recording has no end record (the recorder stopped without closing it); this report covers what it holds".into());
        }
        if self.unknown_frames > 0 {
            notes.push(format!("{} frames of kinds this gputrace does not know were skipped (written by a newer version)", self.unknown_frames));
        }
        notes.extend(last.notes.iter().cloned());
        // Where the evidence ends: the counters stop at the last checkpoint (`replay_from`).
        let end_ns = self.end.as_ref().map_or_else(|| last.snapshot.at_ns.max(start.start_ns), |e| e.end_ns);
        let gpu = start.gpu.as_ref().map(|g| {
            let devices = self.end.as_ref().and_then(|e| e.gpu_devices.clone()).unwrap_or_else(|| g.devices.clone());
            let holders = self.end.as_ref().map(|e| e.gpu_holders.clone()).unwrap_or_default();
            let finished = Finished { devices, samples: std::mem::take(&mut self.samples), driver_version: g.driver_version.clone(), holders };
            (finished, Duration::from_secs_f64(g.sample_interval_s.clamp(0.001, 60.0)))
        });
        Outcome {
            losses: last.snapshot.losses_since(self.baseline.as_ref()),
            evidence: self.evidence,
            target_pid: start.target_pid,
            command: start.command.clone(),
            exit_status: self.end.as_ref().and_then(|e| e.exit_status),
            exit_signal: self.end.as_ref().and_then(|e| e.exit_signal),
            trap_costs: self.end.as_ref().and_then(|e| e.trap_costs.clone()),
            start_ns: start.start_ns,
            end_ns,
            stopped_by,
            libraries: last.libraries.iter().map(library).collect(),
            attach_ms: start.attach_ms,
            startup: start.startup,
            uprobe_links: start.uprobe_links,
            notes,
            maps_reads: last.maps_reads,
            sched_traced: start.sched_traced,
            io_traced: start.io_traced,
            probes: None,
            gpu,
            written: None,
            cuda_env: start.cuda_env.clone(),
            peak_rss_bytes: self.end.as_ref().and_then(|e| e.peak_rss_bytes),
            cpu_s: self.end.as_ref().and_then(|e| e.cpu_s),
            entry_only: start.entry_only,
            started_unix_s: start.started_unix_s,
            host: start.host.clone(),
            cpus: start.cpus,
            placement: start.placement.clone(),
            // `record` refuses --max-overhead: a recording's counts are exact.
            sampling: None,
            recording: Some(RecordingNote {
                file: path.display().to_string(),
                mode: start.mode.clone(),
                segment: start.segment,
                from_session_start: start.from_session_start,
                frames: self.frames,
                frames_dropped: last.frames_dropped,
                damage: damage.map(ToString::to_string),
                closed: self.end.is_some() || self.ended_with_trigger,
                format_version: self.format_version,
            }),
        }
    }
}

/// A `THREAD_EXIT` payload: the thread and its counters.
#[must_use]
pub fn thread_exit(p: &[u8]) -> Option<(u32, ThreadCounters)> {
    if p.len() != 8 + 16 + 8 * PROBE_SLOTS {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
    let u64_at = |i: usize| p.get(i..i + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes);
    let mut c = ThreadCounters { tgid: u32_at(8), drained_at_ns: u64_at(16), ..ThreadCounters::ZERO };
    for (i, h) in c.hits.iter_mut().enumerate() {
        *h = u64_at(24 + 8 * i);
    }
    Some((u32_at(0), c))
}

fn library(l: &super::format::LibraryRecord) -> AttachedLibrary {
    AttachedLibrary {
        library: Library { dev: l.dev, inode: l.inode, open_path: PathBuf::from(&l.path), name: l.path.clone() },
        // Names this build does not probe are dropped: their hits could not be shown anyway.
        symbols: l.symbols.iter().filter_map(|s| PROBES.iter().find(|p| p.symbol == s).map(|p| p.symbol)).collect(),
        mapped_by: l.mapped_by.iter().copied().collect(),
        probed_late_for: l.probed_late_for.iter().copied().collect(),
        entry: l.entry.iter().filter_map(|(s, k)| PROBES.iter().find(|p| p.symbol == s).map(|p| (p.symbol, *k))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::format::{self, kind};

    fn replay_bytes(bytes: &[u8], name: &str) -> Replayed {
        let open = || Ok(Reader::new(std::io::Cursor::new(bytes), Some(bytes.len() as u64)).expect("preamble"));
        replay_from(open, Path::new(name)).expect("a start record")
    }

    /// A recording of a start record followed by `n` host-memory answers and no event.
    fn answers_only(n: usize) -> Vec<u8> {
        let mut bytes = format::preamble().to_vec();
        bytes.extend(format::frame(kind::START, &serde_json::to_vec(&Start::default()).expect("json")));
        let answer = HostAnswer { pid: 1, class: 2, addr: 0x1000, at_ns: 1 }.to_bytes();
        for _ in 0..n {
            bytes.extend(format::frame(kind::HOST_CLASS, &answer));
        }
        bytes
    }

    #[test]
    fn a_flood_of_host_answers_is_damage_not_memory() {
        let bytes = answers_only(100_000);
        let replayed = replay_bytes(&bytes, "flood.gtr");
        let damage = replayed.damage.expect("the flood is damage").to_string();
        assert!(damage.contains("host-memory answers"), "{damage}");
        // Reading stopped at the first answer past the bound: the rest was never held.
        let (preamble, start) = (format::PREAMBLE_LEN, format::frame(kind::START, &serde_json::to_vec(&Start::default()).expect("json")).len());
        let answer = format::FRAME_HEAD + HostAnswer::LEN + format::FRAME_TAIL;
        assert!(damage.contains(&format!("at byte {} ", preamble + start + MAX_ANSWERS_PER_EVENT * answer)), "{damage}");
        // No checkpoint: nothing after the start record is folded in.
        assert_eq!(replayed.outcome.recording.expect("note").frames, 1);
    }

    /// A start record at `start_ns`, then `frames`.
    fn file_of(start_ns: u64, frames: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut bytes = format::preamble().to_vec();
        bytes.extend(format::frame(kind::START, &serde_json::to_vec(&Start { start_ns, ..Start::default() }).expect("json")));
        for (k, p) in frames {
            bytes.extend(format::frame(*k, p));
        }
        bytes
    }

    fn checkpoint_at(at_ns: u64) -> Vec<u8> {
        let mut cp = Checkpoint::default();
        cp.snapshot.at_ns = at_ns;
        serde_json::to_vec(&cp).expect("json")
    }

    fn end_at(end_ns: u64) -> Vec<u8> {
        let mut end = End { end_ns, ..End::default() };
        end.checkpoint.snapshot.at_ns = end_ns;
        serde_json::to_vec(&end).expect("json")
    }

    #[test]
    fn records_no_recorder_writes_are_damage() {
        let cases = [
            ("an end before the start", vec![(kind::END, end_at(5))], "before the start record"),
            ("two ends", vec![(kind::END, end_at(20)), (kind::END, end_at(30))], "a second end record"),
            ("a frame after the end", vec![(kind::END, end_at(20)), (kind::CHECKPOINT, checkpoint_at(30))], "after the end record"),
            ("a checkpoint going back", vec![(kind::CHECKPOINT, checkpoint_at(30)), (kind::CHECKPOINT, checkpoint_at(20))], "earlier than the one before"),
        ];
        for (what, frames, why) in cases {
            let bytes = file_of(10, &frames);
            let damage = replay_bytes(&bytes, "x.gtr").damage.map(|d| d.to_string()).unwrap_or_default();
            assert!(damage.contains(why), "{what}: {damage:?}");
        }
        let mut cp = Checkpoint::default();
        cp.snapshot.at_ns = 20;
        cp.snapshot.losses = vec![u64::MAX - 5, 10];
        let bytes = file_of(10, &[(kind::CHECKPOINT, serde_json::to_vec(&cp).expect("json"))]);
        let replayed = replay_bytes(&bytes, "x.gtr");
        assert!(replayed.damage.is_some_and(|d| d.to_string().contains("more than any session counts")));
        assert_eq!(replayed.outcome.losses[0], 0, "the counter was not taken");
    }

    #[test]
    fn a_window_without_an_end_record_ends_at_its_last_checkpoint() {
        let samples = br#"[{"at_ns":500,"device":0,"util_pct":50,"mem_used_bytes":1}]"#.to_vec();
        let bytes = file_of(10, &[(kind::CHECKPOINT, checkpoint_at(100)), (kind::GPU_SAMPLES, samples)]);
        let replayed = replay_bytes(&bytes, "x.gtr");
        assert_eq!(replayed.outcome.end_ns, 100);
        assert!(replayed.outcome.notes[0].contains("1 frames after the last checkpoint"), "{:?}", replayed.outcome.notes);
    }

    #[test]
    fn answers_up_to_the_bound_are_fine() {
        let bytes = answers_only(MAX_ANSWERS_PER_EVENT);
        let replayed = replay_bytes(&bytes, "ok.gtr");
        assert!(replayed.damage.is_none(), "{:?}", replayed.damage);
    }
}
