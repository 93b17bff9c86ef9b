#![no_main]
//! Fuzz target: see `gputrace::fuzzing::parse_proc`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| gputrace::fuzzing::parse_proc(data));
