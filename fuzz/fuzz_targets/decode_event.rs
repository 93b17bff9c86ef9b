#![no_main]
//! Fuzz target: see `gputrace::fuzzing::decode_event`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| gputrace::fuzzing::decode_event(data));
