//! # edgehook storage — the bottom layer
//!
//! Owns how edgehook talks to a key-value store and lays out its data: the [`kv::Kv`]
//! interface (the host's `wasi:keyvalue` seen from the core) and its compare-and-swap loops,
//! every store key ([`keys`]: only this crate builds a [`keys::Key`]), the binary record
//! encoding ([`codec`]), paged append-only lists ([`applog`]), the sorted directories
//! ([`directory`]), the retention directory that purges by day ([`retention`]) and the one
//! small sort every list uses ([`sort`]).
//!
//! May use: nothing of edgehook's (it is the bottom of the dependency order; see
//! ARCHITECTURE.md). It knows no record type and no HTTP.

pub mod applog;
pub mod codec;
pub mod directory;
pub mod ids;
pub mod keys;
pub mod kv;
pub mod retention;
pub mod sort;
