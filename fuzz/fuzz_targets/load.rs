//! libFuzzer target `load`: see `edgehook_fuzz_harness::load` for the input format and the
//! invariants it checks (docs/fuzzing.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| edgehook_fuzz_harness::load::run(data));
