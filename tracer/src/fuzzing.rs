//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz, `cargo xtask fuzz`): one per
//! parser of untrusted bytes. Each must return, never panic, for every input. CI replays the
//! seeds below, many mutations of them, and any inputs kept under `fuzz/corpus/` through the
//! same entry points (`tests` at the end of this file).

use std::path::Path;

use crate::{
    decode::{decode, encode, Event},
    discover::{cgroup, maps, process, symbols},
    probes::btf::Btf,
    record::{
        format::{self, kind},
        reader::Reader,
        replay::{replay_from, ReplayError},
    },
    report,
    stacks::unwind::{walk_raw, FileUnwindInfo, Regs, MAX_STEPS},
};

/// The names of the targets, as `fuzz/fuzz_targets/NAME.rs`.
pub const TARGETS: &[&str] = &["decode_event", "read_recording", "replay_frames", "parse_proc", "parse_elf", "unwind_cfi"];

/// Run target `name` on `data`.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "decode_event" => decode_event(data),
        "read_recording" => read_recording(data),
        "replay_frames" => replay_frames(data),
        "parse_proc" => parse_proc(data),
        "parse_elf" => parse_elf(data),
        "unwind_cfi" => unwind_cfi(data),
        _ => {}
    }
}

/// A ring-buffer record (what the kernel, or a recording, hands us).
pub fn decode_event(data: &[u8]) {
    if let Ok(e) = decode(data) {
        assert_eq!(decode(&encode(&e)), Ok(e), "a decoded event re-encodes to itself");
    }
}

/// A whole recording file, framing and checksums included, through to the report.
pub fn read_recording(data: &[u8]) {
    let open = || Reader::new(data, Some(data.len() as u64)).map_err(|_| ReplayError::NoStart { path: "fuzz".into(), why: "no preamble".into() });
    if let Ok(replayed) = replay_from(open, Path::new("fuzz")) {
        let r = report::build::build(&replayed.outcome);
        let _ = report::text::render(&r, false);
        let _ = serde_json::to_string(&r);
    }
}

/// Frames with valid checksums around fuzzed payloads, so the fuzzer reaches the JSON and
/// the evidence fold behind the CRC: the input is a list of `[u16 kind][u16 len][payload]`.
pub fn replay_frames(data: &[u8]) {
    let mut file = format::preamble().to_vec();
    let mut rest = data;
    while rest.len() >= 4 {
        let kind = u16::from_le_bytes([rest[0], rest[1]]);
        let len = usize::from(u16::from_le_bytes([rest[2], rest[3]])).min(rest.len() - 4);
        file.extend(format::frame(kind, &rest[4..4 + len]));
        rest = &rest[4 + len..];
    }
    read_recording(&file);
}

/// The `/proc` texts and kernel blobs we parse: maps, stat, `cpu.stat`, the kernel's BTF.
pub fn parse_proc(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (mappings, _) = maps::parse(&text);
    for m in &mappings {
        let _ = (m.file_name(), m.looks_pinned(), m.contains(0));
    }
    let _ = process::parse_stat(&text);
    let _ = cgroup::parse_cpu_stat(&text);
    let _ = cgroup::candidates(&text);
    if let Ok(btf) = Btf::parse(data.to_vec()) {
        let _ = crate::probes::layout::read(&btf);
    }
}

/// An ELF file's dynamic symbols (a library the target maps could be anything).
pub fn parse_elf(data: &[u8]) {
    let _ = symbols::offsets_in(data, &["cuLaunchKernel", "cuMemcpyHtoD_v2"]);
}

/// Unwind tables and a copied stack, both the traced process's to make:
/// `[u64 .eh_frame address][u32 length][.eh_frame][u64 bias][u64 ip][u64 sp][u64 bp][stack bytes]`.
/// The walk must end, within its step limit, reading only the stack given.
pub fn unwind_cfi(data: &[u8]) {
    let word = |at: usize| data.get(at..at + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
    let len = data.get(8..12).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize).min(data.len().saturating_sub(12));
    let start = data.len().min(12);
    let eh_frame = &data[start..start + len];
    let at = start + len;
    let regs = Regs { ip: word(at + 8), sp: word(at + 16), bp: word(at + 24) };
    let stack = data.get(at + 32..).unwrap_or_default();
    let unwound = walk_raw(eh_frame, word(0), word(at), regs, stack);
    assert!(unwound.ips.len() <= MAX_STEPS);
}

/// This test binary's own `.eh_frame` and a copy of its own stack, in `unwind_cfi`'s layout.
fn seed_unwind() -> Vec<u8> {
    let (regs, stack) = crate::stacks::unwind_cost::copy_at_depth(8);
    let Ok(text) = crate::discover::procfs::read_text("/proc/self/maps") else { return Vec::new() };
    let Some(m) = maps::parse(&text).0.into_iter().find(|m| m.executable() && m.contains(regs.ip)) else { return Vec::new() };
    let Some(info) = std::fs::read(&m.path).ok().and_then(|bytes| FileUnwindInfo::parse(&bytes[..]).ok()) else { return Vec::new() };
    let (Some(bias), Some((address, eh_frame))) = (info.bias(&m), info.eh_frame()) else { return Vec::new() };
    let mut out = address.to_le_bytes().to_vec();
    out.extend((eh_frame.len() as u32).to_le_bytes());
    out.extend(eh_frame);
    for w in [bias, regs.ip, regs.sp, regs.bp] {
        out.extend(w.to_le_bytes());
    }
    out.extend(stack);
    out
}

/// Seed inputs per target, built here rather than checked in.
#[must_use]
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        "decode_event" => seed_events().iter().map(encode).collect(),
        "read_recording" => vec![seed_recording()],
        "replay_frames" => vec![seed_frames()],
        "parse_proc" => vec![
            b"7f0000000000-7f0000100000 rw-s 00000000 00:01 1234 /dev/zero (deleted)\n\
              55d0c0000000-55d0c0021000 r-xp 00000000 fd:01 99 /usr/lib/libcuda.so.1\n"
                .to_vec(),
            b"1234 (py thon) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 12345 0 0".to_vec(),
            b"nr_periods 10\nnr_throttled 2\nthrottled_usec 5000\n".to_vec(),
            b"\tfield:long prev_state;\toffset:24;\tsize:8;\tsigned:1;\n".to_vec(),
        ],
        "parse_elf" => std::env::current_exe().ok().and_then(|p| std::fs::read(p).ok()).into_iter().collect(),
        "unwind_cfi" => vec![seed_unwind()],
        _ => Vec::new(),
    }
}

fn seed_events() -> Vec<Event> {
    use gputrace_common::{CallEvent, EventHeader, IdleEndEvent, IoEvent, TaskEvent, KIND_CALL, KIND_IDLE_END, KIND_IO, KIND_TASK_EXIT};
    let h = |kind, probe| EventHeader { kind, probe, tgid: 100, tid: 101, ts_ns: 2_000_000 };
    let copy = gputrace_common::PROBES.iter().find(|p| p.symbol == "cuMemcpyHtoD_v2").map_or(0, |p| p.id);
    let sync = gputrace_common::PROBES.iter().find(|p| p.symbol == "cuCtxSynchronize").map_or(0, |p| p.id);
    vec![
        Event::Call(CallEvent { header: h(KIND_CALL, copy), start_ns: 1_000_000, args: [0x1000, 0x7f00_0000_0000, 4096, 0, 0], ret: 0, out: 0 }),
        Event::Call(CallEvent { header: h(KIND_CALL, sync), start_ns: 1_500_000, args: [0; 5], ret: 0, out: 0 }),
        Event::IdleEnd(IdleEndEvent { header: h(KIND_IDLE_END, 0), drained_at_ns: 1_900_000 }),
        Event::Io(IoEvent { header: h(KIND_IO, 0), start_ns: 1_000_000, dev: 1, bytes: 4096, rwbs: u32::from(b'R'), error: 0 }),
        Event::TaskExit(TaskEvent { header: h(KIND_TASK_EXIT, 0), ..TaskEvent::default() }),
    ]
}

/// The frames of a small, complete recording: start, checkpoints, events, an exit, samples, end.
fn seed_frame_list() -> Vec<(u16, Vec<u8>)> {
    let start = format::Start { format: "gputrace.recording/1".into(), start_ns: 1_000_000, target_pid: 100, from_session_start: true, ..Default::default() };
    let mut cp = format::Checkpoint::default();
    cp.snapshot.at_ns = 1_000_000;
    let mut last = cp.clone();
    last.snapshot.at_ns = 3_000_000;
    last.snapshot.threads.push(crate::evidence::snapshot::ThreadHits { tid: 101, tgid: 100, hits: vec![(1, 42)] });
    let end = format::End { end_ns: 3_000_000, stopped_by: "target-exited".into(), checkpoint: last, ..Default::default() };
    let mut frames = vec![(kind::START, json(&start)), (kind::CHECKPOINT, json(&cp))];
    for e in seed_events() {
        frames.push((kind::HOST_CLASS, format::HostAnswer { pid: 100, class: 2, addr: 0x7f00_0000_0000, at_ns: 1 }.to_bytes().to_vec()));
        frames.push((kind::EVENT, encode(&e)));
    }
    frames.push((kind::GPU_SAMPLES, b"[{\"at_ns\":2000000,\"device\":0,\"util_pct\":50.0,\"mem_used_bytes\":1,\"sm_pct\":null,\"tensor_pct\":null}]".to_vec()));
    frames.push((kind::END, json(&end)));
    frames
}

fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// A small, whole recording (preamble, start, checkpoint, events with their host answers,
/// NVML samples, end): the seed of the `read_recording` target.
#[must_use]
pub fn seed_recording() -> Vec<u8> {
    let mut file = format::preamble().to_vec();
    for (k, p) in seed_frame_list() {
        file.extend(format::frame(k, &p));
    }
    file
}

fn seed_frames() -> Vec<u8> {
    let mut out = Vec::new();
    for (k, p) in seed_frame_list() {
        out.extend_from_slice(&k.to_le_bytes());
        out.extend_from_slice(&(p.len().min(usize::from(u16::MAX)) as u16).to_le_bytes());
        out.extend_from_slice(&p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic mutations: truncations, bit flips, byte runs, splices.
    fn mutations(seed: &[u8], count: usize, mut state: u64) -> Vec<Vec<u8>> {
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        (0..count)
            .map(|round| {
                let mut bytes = seed.to_vec();
                if bytes.is_empty() {
                    return vec![next() as u8; round % 64];
                }
                let len = bytes.len();
                match round % 4 {
                    0 => bytes.truncate(next() as usize % len),
                    1 => {
                        for _ in 0..=(round % 7) {
                            let at = next() as usize % len;
                            bytes[at] ^= 1 << (next() % 8);
                        }
                    }
                    2 => {
                        let at = next() as usize % len;
                        let run = (next() % 16) as usize;
                        let byte = [0u8, 0xff, b'{', b'"', b'9'][round % 5];
                        bytes.splice(at..at, std::iter::repeat_n(byte, run));
                    }
                    _ => {
                        let (from, to) = (next() as usize % len, next() as usize % len);
                        bytes.drain(from.min(to)..from.max(to));
                    }
                }
                bytes
            })
            .collect()
    }

    #[test]
    fn the_seed_recording_reads_back_whole() {
        let seed = seed_recording();
        let replayed = replay_from(|| Ok(Reader::new(&seed[..], None).expect("preamble")), Path::new("seed")).expect("replays");
        assert_eq!(replayed.damage, None);
        assert_eq!(replayed.outcome.evidence.copies.h2d.count, 1);
        assert_eq!(replayed.outcome.evidence.copies.h2d.pageable, 1, "classified by the recorded answer");
        assert_eq!(replayed.outcome.evidence.threads[&101].hits[1], 42);
    }

    #[test]
    fn seeds_mutations_and_the_kept_corpus_never_panic() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        for (t, name) in TARGETS.iter().enumerate() {
            // The ELF seed is this test binary: large, so fewer mutations.
            let n = if *name == "parse_elf" { 20 } else { 400 };
            if *name == "unwind_cfi" {
                // The seed walks: its own tables and stack unwind past a few frames.
                let seed = seeds(name).concat();
                let word = |at: usize| u64::from_le_bytes(seed[at..at + 8].try_into().expect("a word"));
                let at = 12 + u32::from_le_bytes(seed[8..12].try_into().expect("length")) as usize;
                let regs = Regs { ip: word(at + 8), sp: word(at + 16), bp: word(at + 24) };
                let unwound = walk_raw(&seed[12..at], word(0), word(at), regs, &seed[at + 32..]);
                assert!(unwound.ips.len() > 5 && unwound.complete, "{unwound:?}");
            }
            for seed in seeds(name) {
                run(name, &seed);
                for m in mutations(&seed, n, 0x9e37_79b9_7f4a_7c15 ^ t as u64) {
                    run(name, &m);
                }
            }
            for entry in std::fs::read_dir(corpus.join(name)).into_iter().flatten().flatten() {
                if let Ok(bytes) = std::fs::read(entry.path()) {
                    run(name, &bytes);
                }
            }
        }
    }

    /// `cargo xtask fuzz` writes the seeds with this (`GPUTRACE_FUZZ_SEEDS=DIR`).
    #[test]
    #[ignore = "run by `cargo xtask fuzz` to write seed corpora"]
    fn write_seeds() {
        let Some(dir) = std::env::var_os("GPUTRACE_FUZZ_SEEDS") else { return };
        for name in TARGETS {
            let d = Path::new(&dir).join(name);
            std::fs::create_dir_all(&d).expect("seed dir");
            for (i, s) in seeds(name).iter().enumerate() {
                std::fs::write(d.join(format!("seed-{i}")), s).expect("seed");
            }
        }
    }
}
