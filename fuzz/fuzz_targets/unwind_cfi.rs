#![no_main]
//! Fuzz target: see `gputrace::fuzzing::unwind_cfi`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| gputrace::fuzzing::unwind_cfi(data));
