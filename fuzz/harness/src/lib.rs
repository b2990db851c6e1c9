//! # edgehook fuzz harness
//!
//! Everything the fuzz targets do, as plain functions over bytes: each target module has a
//! `run(data: &[u8])` that decodes the input, drives the component core natively (no wasm,
//! no host) and **panics when an invariant breaks**. The libFuzzer binaries in
//! `fuzz/fuzz_targets/` call these functions and nothing else, and the corpus replay test
//! (`component/tests/fuzz_corpus.rs`, part of `cargo test --workspace`) runs every seed in
//! `fuzz/corpus/<target>/` through the same functions, so the harness cannot rot.
//!
//! | target | drives | input |
//! |---|---|---|
//! | [`route`] | `router::handle`: any request, partner and operator API, ticks | requests as text |
//! | [`url`] | `validate::target_url` against the `url` crate (WHATWG) | the URL |
//! | [`load`] | event ingest, load validation, delivery of the exact bytes | type line + body |
//! | [`cursor`] | list paging: partner list and delivery history | numbers + two queries |
//! | [`idempotency_key`] | `Idempotency-Key` on create and ingest: replay, conflict, expiry | one step per line |
//!
//! Every request goes through [`world::World::request`], which checks the response envelope
//! ([`check`]) and feeds the [`model::Model`]: the invariants that hold across requests
//! (ownership, secrets, disabled stays disabled, idempotent replays, what is delivered).
//!
//! The core takes time and randomness as inputs: the world's clock starts at a fixed instant
//! and moves only when an input says so, and randomness is a fixed-seed generator, so every
//! input replays exactly.

pub mod check;
pub mod cursor;
pub mod idempotency_key;
pub mod load;
pub mod model;
pub mod route;
pub mod text;
pub mod url;
pub mod world;

/// A target's entry point.
pub type Target = fn(&[u8]);

/// Every target by name (the names of the libFuzzer binaries and of the corpus directories).
pub const TARGETS: &[(&str, Target)] = &[
    ("route", route::run),
    ("url", url::run),
    ("load", load::run),
    ("cursor", cursor::run),
    ("idempotency_key", idempotency_key::run),
];
