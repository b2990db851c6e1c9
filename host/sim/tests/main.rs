//! The simulator crate's integration tests: `edgehook-sim`'s command-line conventions, and
//! the Spin suite (the project's `spin.toml` under a real `spin up`). One test binary with a
//! module per area (`cargo test -p edgehook-sim --test sim <module>::`), so wasmtime is
//! linked once.

mod conventions;
mod spin;
