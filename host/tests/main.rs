//! The host's own integration tests: `edgehook serve` as a process, the real outbound
//! sender against loopback servers, and several servers on one Redis. One test binary with a
//! module per area (`cargo test -p edgehook-host --test system <module>::`), so wasmtime is
//! linked once rather than once per file.

mod common;

mod hardening;
mod net;
mod process;
mod redis;
mod remote;
mod spin;
