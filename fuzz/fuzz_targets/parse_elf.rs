#![no_main]
//! Fuzz target: see `gputrace::fuzzing::parse_elf`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| gputrace::fuzzing::parse_elf(data));
