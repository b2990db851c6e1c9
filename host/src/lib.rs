//! # edgehook host
//!
//! The wasmtime host for the edgehook component. One library, two modes:
//!
//! - **Simulation** ([`sim::Simulation`]): the real `.wasm` on virtual clocks, an in-memory
//!   key-value store with fault injection, seeded randomness and scripted endpoints. Tests and
//!   scenarios run here, with no sockets and no sleeps.
//! - **Production** (`edgehook serve`): the same component behind a real HTTP server.
//!
//! ```no_run
//! use edgehook_host::sim::Simulation;
//!
//! let mut sim = Simulation::new(42)?;
//! let health = sim.request("GET", "/healthz", &[], b"")?;
//! assert_eq!(health.status, 200);
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod bench;
mod bindings;
pub mod cli;
pub mod clock;
pub mod filestore;
pub mod listen;
pub mod log;
pub mod net;
pub mod outbound;
pub mod progress;
mod receiver;
pub mod redisstore;
pub mod runtime;
pub mod scenario;
pub mod serve;
pub mod sim;
pub mod soak;
pub mod spin;
pub mod store;

pub use runtime::{
    COMPONENT_WASM, GuestLog, HostEnv, HttpResponse, PublishError, PublishReceipt, Runtime,
    TickReport,
};
