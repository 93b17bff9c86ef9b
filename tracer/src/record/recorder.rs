//! The recorder the session writes to: frames go to a file as they come (flushed at every
//! checkpoint, about once a second, and rotated by size), or, as a flight recorder, into a
//! bounded in-memory buffer of the last minutes that is written out on a signal, when a
//! diagnosis fires, and at the end.

use std::{collections::VecDeque, path::PathBuf, time::Duration};

use gputrace_common::ThreadCounters;

use super::{
    file::{self, Output},
    format::{self, kind, Checkpoint, End, HostAnswer, Start, Trigger},
};
use crate::{
    outcome::Written,
    gpu::Sample,
    output::{Destination, Refused},
};

/// Where and how much to record.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Where the recording goes, vetted (`crate::output::resolve`).
    pub destination: Destination,
    /// The file's path, for rotation and messages (`-` for standard output).
    pub path: PathBuf,
    /// Rotate (file) or cap the buffer (flight) at this many bytes.
    pub max_bytes: Option<u64>,
    /// Older files kept by rotation, besides the current one.
    pub keep: u32,
    /// Flight recorder: keep only this much of the past in memory.
    pub flight: Option<Duration>,
    /// File mode bits (0600 unless asked otherwise).
    pub mode: u32,
}

/// Writes a session's frames to its recording: to a file as they come, or, as a flight
/// recorder, to a bounded buffer dumped on triggers.
#[derive(Debug)]
pub struct Recorder {
    plan: Plan,
    start: Option<Start>,
    sink: Sink,
    written: Written,
    /// Frames handed to the file so far, and the time of the last checkpoint or end record
    /// among them: what the files hold once the next flush succeeds (`Written` says what
    /// they hold now).
    frames_put: u64,
    boundary_ns: Option<u64>,
}

#[derive(Debug)]
enum Sink {
    /// `closed_bytes`: what earlier, rotated files hold.
    File { out: Option<Output>, segment: u32, closed_bytes: u64 },
    Flight(Flight),
}

/// The flight recorder's memory: chunks of frames, each beginning with the checkpoint that
/// opened it (its baseline), oldest first.
#[derive(Debug, Default)]
struct Flight {
    chunks: VecDeque<(u64, Vec<u8>)>,
    bytes: u64,
    /// Whether the oldest chunk is the session's first (nothing was dropped yet).
    from_session_start: bool,
    dumps: u32,
}

impl Recorder {
    /// Prepare a recording. A file is opened now under a temporary name, so a place that
    /// cannot take one fails before tracing starts, and is put in place by [`Recorder::begin`]
    /// once the session has started: a session that cannot start leaves the path as it was.
    pub fn new(plan: Plan) -> Result<Self, Refused> {
        let sink = if plan.flight.is_some() {
            // Fail now, not at the first dump, if the place cannot take a file; dropped
            // unpublished, the probe leaves nothing behind.
            drop(Output::open(&plan.destination, plan.mode, &[])?);
            Sink::Flight(Flight { from_session_start: true, ..Flight::default() })
        } else {
            Sink::File { out: Some(Output::open(&plan.destination, plan.mode, &format::preamble())?), segment: 0, closed_bytes: 0 }
        };
        let written = Written { files: vec![plan.path.clone()], ..Written::default() };
        Ok(Self { plan, start: None, sink, written, frames_put: 0, boundary_ns: None })
    }

    /// Open the recording with its start record.
    pub fn begin(&mut self, start: Start) {
        let mut start = start;
        start.mode = if self.plan.flight.is_some() { "flight" } else { "file" }.into();
        start.from_session_start = true;
        if matches!(self.sink, Sink::File { .. }) {
            self.put(kind::START, &json(&start));
            self.flush();
        }
        self.start = Some(start);
    }

    /// Record how a host address was classified, ahead of the event it answers for.
    pub fn host_answer(&mut self, a: HostAnswer) {
        self.put(kind::HOST_CLASS, &a.to_bytes());
    }

    /// Record one ring-buffer record, byte for byte as the kernel wrote it.
    pub fn event(&mut self, bytes: &[u8]) {
        self.put(kind::EVENT, bytes);
    }

    /// Record an exited thread's final counters (`kind::THREAD_EXIT`).
    pub fn thread_exit(&mut self, tid: u32, c: &ThreadCounters) {
        let mut payload = Vec::with_capacity(8 + size_of::<ThreadCounters>());
        payload.extend_from_slice(&tid.to_le_bytes());
        payload.extend_from_slice(&[0; 4]);
        payload.extend_from_slice(&c.tgid.to_le_bytes());
        payload.extend_from_slice(&[0; 4]);
        payload.extend_from_slice(&c.drained_at_ns.to_le_bytes());
        for h in &c.hits {
            payload.extend_from_slice(&h.to_le_bytes());
        }
        self.put(kind::THREAD_EXIT, &payload);
    }

    /// A checkpoint: NVML samples since the last one, then the kernel counters. Files are
    /// flushed here (the crash-safety interval) and rotated once over their size.
    pub fn checkpoint(&mut self, mut cp: Checkpoint, samples: &[Sample]) {
        if !samples.is_empty() {
            self.put(kind::GPU_SAMPLES, &json(&samples));
        }
        cp.frames_dropped = self.written.frames_dropped;
        let frame = format::frame(kind::CHECKPOINT, &json(&cp));
        match &mut self.sink {
            Sink::File { .. } => {
                self.put_frame(&frame);
                self.boundary_ns = Some(cp.snapshot.at_ns);
                self.flush();
                self.rotate_if_full(&cp);
            }
            Sink::Flight(f) => {
                f.bytes += frame.len() as u64;
                f.chunks.push_back((cp.snapshot.at_ns, frame));
                f.trim(cp.snapshot.at_ns, self.plan.flight.unwrap_or_default(), self.plan.max_bytes);
            }
        }
    }

    /// NVML samples outside a checkpoint (the last ones, at the end).
    pub fn samples(&mut self, samples: &[Sample]) {
        if !samples.is_empty() {
            self.put(kind::GPU_SAMPLES, &json(&samples));
        }
    }

    /// The recording's path, as given.
    #[must_use]
    pub fn path(&self) -> &std::path::Path {
        &self.plan.path
    }

    /// Whether this is a flight recorder (`--flight-recorder`) rather than a file written as it goes.
    #[must_use]
    pub fn is_flight(&self) -> bool {
        matches!(self.sink, Sink::Flight(_))
    }

    /// A flight recorder writes its buffer out (a file recorder notes the trigger in-line).
    pub fn trigger(&mut self, trigger: &Trigger) {
        let frame = format::frame(kind::TRIGGER, &json(trigger));
        if matches!(self.sink, Sink::File { .. }) {
            self.put_frame(&frame);
            return;
        }
        self.dump(&frame, None);
    }

    /// Close the recording with its end record.
    #[must_use]
    pub fn end(mut self, end: &End) -> Written {
        let frame = format::frame(kind::END, &json(end));
        if matches!(self.sink, Sink::File { .. }) {
            self.put_frame(&frame);
            self.boundary_ns = Some(end.end_ns);
            if let Sink::File { out: Some(out), .. } = &mut self.sink {
                out.sync();
            }
            self.flush();
            if self.plan.destination.is_file() {
                self.written.files = file::existing_segments(&self.plan.path, self.plan.keep);
            }
        } else {
            let trigger = Trigger { at_ns: end.end_ns, reason: "end".into(), ..Trigger::default() };
            self.dump(&format::frame(kind::TRIGGER, &json(&trigger)), Some(&frame));
        }
        self.written
    }

    fn put(&mut self, kind: u16, payload: &[u8]) {
        self.put_frame(&format::frame(kind, payload));
    }

    fn put_frame(&mut self, frame: &[u8]) {
        if frame.len() > format::MAX_PAYLOAD + format::FRAME_HEAD + format::FRAME_TAIL {
            // A reader would take it for damage and stop there: drop it, and count it.
            log::warn!("a recording frame of {} bytes exceeds the format's limit; dropped", frame.len());
            self.written.frames_dropped += 1;
            return;
        }
        match &mut self.sink {
            Sink::File { out: Some(out), .. } => {
                if out.write(frame) {
                    self.frames_put += 1;
                } else {
                    self.written.frames_dropped += 1;
                }
            }
            Sink::File { out: None, .. } => self.written.frames_dropped += 1,
            Sink::Flight(f) => {
                // Frames before the first checkpoint have no chunk to go to: open one.
                if f.chunks.is_empty() {
                    f.chunks.push_back((0, Vec::new()));
                }
                if let Some((_, chunk)) = f.chunks.back_mut() {
                    chunk.extend_from_slice(frame);
                    f.bytes += frame.len() as u64;
                }
                self.written.frames += 1;
            }
        }
    }

    /// Hand the buffer to the kernel; once it has taken it, the files hold every frame put
    /// so far (after a failure they keep what the last good flush left, `file::Output`).
    fn flush(&mut self) {
        if let Sink::File { out: Some(out), closed_bytes, .. } = &mut self.sink {
            out.flush();
            if out.failed.is_none() {
                self.written.bytes = *closed_bytes + out.flushed;
                self.written.frames = self.frames_put;
                self.written.until_ns = self.boundary_ns;
            }
        }
        self.note_failure();
    }

    /// Put the first file in place, claiming its name: the session has started and its
    /// command has not run yet. Something at the path meanwhile (another recorder that
    /// claimed it first, without `--force`) is refused: the caller stops the session before
    /// the command runs.
    pub fn publish(&mut self) -> Result<(), std::io::Error> {
        match &mut self.sink {
            Sink::File { out: Some(o), .. } => o.publish(),
            Sink::File { out: None, .. } => Ok(()),
            // A flight recorder writes its file at its first dump; the name must still be
            // free now, or that dump would fail (or replace a file another recorder made).
            Sink::Flight(_) => match &self.plan.destination {
                crate::output::Destination::File { path, replace: false } if std::fs::symlink_metadata(path).is_ok() => {
                    Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "a file appeared there after gputrace started"))
                }
                _ => Ok(()),
            },
        }
    }

    fn note_failure(&mut self) {
        if let Sink::File { out: Some(out), .. } = &self.sink {
            if let (Some(e), None) = (&out.failed, &self.written.error) {
                let msg = format!("writing {}: {e}; the recording stops here (what was written before stays readable)", out.path.display());
                log::warn!("{msg}");
                self.written.error = Some(msg);
            }
        }
    }

    /// Past its size, the file ends here (an end record marks it as rotated) and a new one
    /// starts with a start record and this checkpoint as its baseline.
    fn rotate_if_full(&mut self, cp: &Checkpoint) {
        let Some(max) = self.plan.max_bytes else { return };
        let Sink::File { out, segment, closed_bytes } = &mut self.sink else { return };
        if out.as_ref().is_none_or(|o| o.bytes < max || o.failed.is_some()) {
            return;
        }
        let end = End { end_ns: cp.snapshot.at_ns, stopped_by: "rotated".into(), checkpoint: cp.clone(), ..End::default() };
        if let Some(mut o) = out.take() {
            o.write(&format::frame(kind::END, &json(&end)));
            // A flush, not a sync: waiting for the disk here would stall draining the ring.
            o.flush();
            *closed_bytes += o.flushed;
        }
        *segment += 1;
        let next = file::rotate(&self.plan.path, self.plan.keep).and_then(|()| Output::create(&self.plan.path, self.plan.mode, &format::preamble()));
        match next {
            Ok(o) => *out = Some(o),
            Err(e) => {
                let msg = format!("rotating {}: {e}; the recording stops here", self.plan.path.display());
                log::warn!("{msg}");
                self.written.error.get_or_insert(msg);
                return;
            }
        }
        let mut start = self.start.clone().unwrap_or_default();
        start.segment = *segment;
        start.from_session_start = false;
        start.start_ns = cp.snapshot.at_ns;
        self.put(kind::START, &json(&start));
        self.put(kind::CHECKPOINT, &json(cp));
    }

    /// Write the flight buffer out as a file of its own, rotating earlier dumps.
    fn dump(&mut self, trigger: &[u8], end: Option<&[u8]>) {
        let Sink::Flight(f) = &mut self.sink else { return };
        let mut start = self.start.clone().unwrap_or_default();
        start.segment = f.dumps;
        start.from_session_start = f.from_session_start;
        if !f.from_session_start {
            start.start_ns = f.chunks.front().map_or(start.start_ns, |(at, _)| *at);
        }
        let first = f.dumps == 0;
        f.dumps += 1;
        let result = (|| {
            if !first {
                file::rotate(&self.plan.path, self.plan.keep)?;
            }
            let mut out = if first {
                Output::open(&self.plan.destination, self.plan.mode, &format::preamble()).map_err(|e| std::io::Error::other(e.to_string()))?
            } else {
                Output::create(&self.plan.path, self.plan.mode, &format::preamble())?
            };
            out.write(&format::frame(kind::START, &json(&start)));
            for (_, chunk) in &f.chunks {
                out.write(chunk);
            }
            out.write(trigger);
            if let Some(end) = end {
                out.write(end);
                out.sync();
            } else {
                // Mid-session: a flush; waiting for the disk would stall draining the ring.
                out.flush();
            }
            if let Some(e) = out.failed.take() {
                return Err(e);
            }
            out.publish()?;
            Ok(out.flushed)
        })();
        match result {
            Ok(bytes) => {
                self.written.bytes += bytes;
                self.written.until_ns = f.chunks.back().map(|(at, _)| *at).filter(|&at| at > 0);
                log::info!("flight recorder: wrote the last {:.0} s to {}", f.span_s(), self.plan.path.display());
            }
            Err(e) => {
                let msg = format!("writing the flight recorder to {}: {e}", self.plan.path.display());
                log::warn!("{msg}");
                self.written.error.get_or_insert(msg);
            }
        }
    }
}

impl Flight {
    /// Drop the oldest chunks beyond `keep` of time before `now_ns` or beyond `max_bytes`;
    /// the newest chunk always stays.
    fn trim(&mut self, now_ns: u64, keep: Duration, max_bytes: Option<u64>) {
        let keep_ns = u64::try_from(keep.as_nanos()).unwrap_or(u64::MAX);
        while self.chunks.len() > 1 {
            let (at, ref chunk) = self.chunks[0];
            let too_old = now_ns.saturating_sub(at) > keep_ns;
            let too_big = max_bytes.is_some_and(|m| self.bytes > m);
            if !(too_old || too_big) {
                break;
            }
            self.bytes -= chunk.len() as u64;
            self.chunks.pop_front();
            self.from_session_start = false;
        }
    }

    fn span_s(&self) -> f64 {
        let first = self.chunks.iter().map(|(at, _)| *at).find(|&at| at != 0).unwrap_or(0);
        let last = self.chunks.back().map_or(0, |(at, _)| *at);
        last.saturating_sub(first) as f64 / 1e9
    }
}

fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Serialising plain data structs to memory cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flight_buffer_keeps_the_last_minutes_and_its_newest_chunk() {
        let mut f = Flight { from_session_start: true, ..Flight::default() };
        for s in 1..=10u64 {
            f.chunks.push_back((s * 1_000_000_000, vec![0; 100]));
            f.bytes += 100;
            f.trim(s * 1_000_000_000, Duration::from_secs(3), None);
        }
        assert_eq!(f.chunks.iter().map(|(at, _)| at / 1_000_000_000).collect::<Vec<_>>(), vec![7, 8, 9, 10]);
        assert!(!f.from_session_start);
        f.trim(10_000_000_000, Duration::from_secs(3), Some(150));
        assert_eq!(f.chunks.len(), 1, "over the byte cap only the newest chunk stays");
        assert_eq!(f.bytes, 100);
    }
}
