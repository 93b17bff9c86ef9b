#![no_main]
//! Fuzz target: see `gputrace::fuzzing::replay_frames`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| gputrace::fuzzing::replay_frames(data));
