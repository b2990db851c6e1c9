//! # edgehook runtime
//!
//! The embedding API of the edgehook component: what a host needs to run the `.wasm` and
//! connect its imports. [`Runtime`] compiles the component once per process, pre-instantiated
//! on a pooling allocator, and runs every call (an HTTP request, `events.publish`,
//! `scheduler.tick`) in a fresh `Store`, or on an instance an earlier call ended with
//! ([`Warm`], what `serve` uses); a [`HostEnv`] says what that call is connected to:
//!
//! - a key-value store ([`store`]): [`store::MemoryStore`], the durable embedded
//!   [`embedded::FjallStore`], [`redisstore::RedisStore`] (one Redis),
//!   [`rediscluster::RedisClusterStore`] (a Redis Cluster),
//!   or any [`store::KvBackend`] / [`store::RemoteKv`] of the embedder's;
//! - `wasi:config` values (snake_case keys, `edgehook_component::model::config::KEYS`);
//! - outgoing HTTP ([`outbound::Outbound`]): the real sender [`net::NetOutbound`] (SSRF checks,
//!   DNS pinning, no redirects; optionally through an HTTP `CONNECT` proxy, [`proxy`]) or
//!   [`outbound::NoNetwork`];
//! - optionally clocks, seeded randomness and a captured guest log (the simulator's, crate
//!   `edgehook-sim`, are built on these), and [`metrics::Metrics`], the Prometheus registry
//!   the component's metrics events and the host's own edges feed.
//!
//! The component itself is embedded: [`COMPONENT_WASM`], built by this crate's build script.
//!
//! ```no_run
//! use edgehook_runtime::outbound::NoNetwork;
//! use edgehook_runtime::store::{KvStore, MemoryStore};
//! use edgehook_runtime::{HostEnv, Runtime};
//! use std::sync::Arc;
//!
//! let env = HostEnv {
//!     kv: KvStore::Local(Arc::new(MemoryStore::new())),
//!     config: Arc::default(),
//!     clock: None,
//!     outbound: Arc::new(NoNetwork),
//!     seed: None,
//!     guest_log: None,
//!     metrics: None,
//! };
//! let request = http::Request::get("http://localhost/healthz")
//!     .body(http_body_util::Full::new(bytes::Bytes::new()))?;
//! let tokio = tokio::runtime::Runtime::new()?;
//! let health = tokio.block_on(Runtime::embedded()?.handle(&env, request))?;
//! assert_eq!(health.status, 200);
//! # Ok::<(), anyhow::Error>(())
//! ```

mod bindings;
pub mod embedded;
pub mod env;
pub mod gate;
pub mod log;
pub mod metrics;
pub mod net;
pub mod otlp;
pub mod outbound;
pub mod proxy;
pub mod rediscluster;
pub mod redisstore;
pub mod runtime;
mod state;
pub mod store;
pub mod warm;

pub use env::{Clocks, GuestLog, HostEnv};
pub use runtime::{
    Baseline, COMPONENT_SIZE_BUDGET, COMPONENT_WASM, EMPTY_WASM, HttpResponse, KVPROBE_WASM,
    POOL_INSTANCES, PORTAL_SIZE_BUDGET, PORTAL_WASM, PublishError, PublishReceipt, Rest, Runtime,
    TickReport, Work,
};
pub use warm::Warm;
