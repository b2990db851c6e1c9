//! libFuzzer target `route`: see `edgehook_fuzz_harness::route` for the input format and the
//! invariants it checks (docs/fuzzing.md).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| edgehook_fuzz_harness::route::run(data));
