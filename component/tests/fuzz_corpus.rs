//! Replays every seed of the fuzz corpus (`fuzz/corpus/<target>/`) through the fuzz harness,
//! the same functions the libFuzzer targets call, so the harness and its seeds cannot rot.
//! A seed that breaks an invariant fails here exactly as it would crash the fuzzer.
//!
//! To replay one file (a crash artifact, say): `FUZZ_INPUT=path cargo test -p
//! edgehook-component --test fuzz_corpus -- --nocapture` with `FUZZ_TARGET=<target>`.

use std::path::{Path, PathBuf};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

#[test]
fn every_seed_of_every_target_passes_the_harness() {
    let mut total = 0;
    for (target, run) in edgehook_fuzz_harness::TARGETS {
        let dir = corpus_dir(target);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(
            files.len() >= 5,
            "{target}: the seed corpus has {} files",
            files.len()
        );
        for file in &files {
            let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(outcome.is_ok(), "{target}: seed {} fails", file.display());
            total += 1;
        }
    }
    assert!(total > 0);
}

/// `FUZZ_TARGET=<target> FUZZ_INPUT=<file>`: replays one input (e.g. a crash artifact) with
/// the panic message and backtrace visible. Does nothing without them.
#[test]
fn replay_one_input_from_the_environment() {
    let (Ok(target), Ok(input)) = (std::env::var("FUZZ_TARGET"), std::env::var("FUZZ_INPUT"))
    else {
        return;
    };
    let Some((_, run)) = edgehook_fuzz_harness::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
    else {
        panic!("no fuzz target {target:?}");
    };
    let data = std::fs::read(&input).unwrap_or_else(|e| panic!("{input}: {e}"));
    run(&data);
}
