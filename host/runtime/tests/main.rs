//! The runtime's integration tests: the real outbound sender against loopback servers, a
//! remote store awaited without holding a thread, the Redis store against a real
//! `redis-server` (and a Redis Cluster, and Redis over TLS), the key-value conformance suite on every store (ours, and Spin's), and what
//! a pool slot keeps when its instance ends (`slots`, measured in child processes).
//! One test binary with a module per area (`cargo test -p edgehook-runtime --test runtime
//! <module>::`), so wasmtime is linked once rather than once per file.

mod counters;
mod embedded;
mod kv_conformance;
mod net;
mod proxy;
mod redis;
mod rediscluster;
mod remote;
mod slots;
