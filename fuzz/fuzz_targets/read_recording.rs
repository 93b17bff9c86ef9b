#![no_main]
//! Fuzz target: see `gputrace::fuzzing::read_recording`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| gputrace::fuzzing::read_recording(data));
