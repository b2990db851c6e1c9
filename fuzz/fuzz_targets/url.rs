//! libFuzzer target `url`: see `edgehook_fuzz_harness::url` for the input format and the
//! invariants it checks (docs/fuzzing.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| edgehook_fuzz_harness::url::run(data));
