//! # edgehook simulator
//!
//! The edgehook component for tests and scenarios, on the embedding API
//! (`edgehook-runtime`): [`Simulation`] runs the real `.wasm` on virtual clocks
//! ([`VirtualClock`]) with an in-memory key-value store with fault injection, seeded
//! randomness and scripted endpoints ([`SimNet`]): no sockets, no sleeps, and the same seed
//! replays exactly. [`scenario`] runs whole-system scenarios on it and audits the ledger of
//! every delivery (`cargo run --release -p edgehook-sim`); [`spin`] runs the project's Spin
//! application under a real `spin up`, for the Spin suite and the benchmark.
//!
//! ```no_run
//! use edgehook_sim::Simulation;
//!
//! let mut sim = Simulation::new(42)?;
//! let health = sim.request("GET", "/healthz", &[], b"")?;
//! assert_eq!(health.status, 200);
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod clock;
pub mod scenario;
pub mod sim;
pub mod simnet;
pub mod spin;

pub use clock::VirtualClock;
pub use sim::{SimBuilder, Simulation};
pub use simnet::{Received, Reply, SimNet};
