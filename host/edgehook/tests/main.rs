//! The `edgehook` binary's integration tests: `edgehook serve` and the operator commands as
//! processes (README's quickstart as written, command-line conventions, start-up, signals,
//! hardening), several servers on one Redis, and on a Redis Cluster under failure. One test binary with a module per area
//! (`cargo test -p edgehook --test system <module>::`), so wasmtime is linked once rather
//! than once per file.

mod common;

mod backup;
mod cluster;
mod container;
mod contract;
mod conventions;
mod egress;
mod hardening;
mod lookups;
mod metrics;
mod operations;
mod options;
mod portal;
mod process;
mod quickstart;
mod recovery;
mod redis;
mod rotate;
mod sealing;
mod sessions;
mod standard;
mod startup;
mod tls;
mod traces;
