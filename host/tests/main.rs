//! The host's own integration tests: `edgehook serve` as a process, the real outbound
//! sender against loopback servers, several servers on one Redis, and the key-value
//! conformance suite on every store. One test binary with a
//! module per area (`cargo test -p edgehook-host --test system <module>::`), so wasmtime is
//! linked once rather than once per file.

mod common;

mod conventions;
mod hardening;
mod kv_conformance;
mod net;
mod process;
mod quickstart;
mod redis;
mod remote;
mod spin;
mod startup;
