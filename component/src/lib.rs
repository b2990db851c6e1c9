//! # edgehook component
//!
//! The edgehook webhook service as one WebAssembly component. The crate is the top of a stack
//! of layer crates that make up the **functional core** (plain Rust that compiles and
//! unit-tests natively), plus one **thin shell** module, compiled only for `wasm32`, that
//! turns WIT calls into core calls. The layers, top down (each uses only those below it):
//!
//! - [`api`] — routes, authentication, rate limits, idempotency, partner and operator API;
//! - [`delivery`] — fan-out, the due queue, ticks, attempts, health, retention, replay;
//! - [`subscriptions`] — subscription storage: records, indexes, the per-client cap;
//! - [`records`] — every stored record type and its versioned encoding;
//! - [`model`] — the request environment, settings, ids, HTTP values, errors, event types,
//!   URL rules, signatures;
//! - [`storage`] — the key-value interface, typed keys, codec, append logs, directories.
//!
//! The core never reads a clock, a random source or the network by itself: every entry point
//! takes a [`model::env::Env`] holding the time, the randomness, the store and the settings.
//!
//! ```
//! use edgehook_component::{api::router, delivery::NoNetwork, model::config::Settings,
//!     model::env::{Env, SeededEntropy}, model::http::Request, storage::kv::MemoryKv};
//!
//! let (kv, settings, entropy) = (MemoryKv::new(), Settings::default(), SeededEntropy::new(1));
//! let env = Env::new(1_700_000_000_000, &kv, &settings, &entropy);
//! let handled = router::handle(&env, &Request::new("GET", "/healthz"), &NoNetwork);
//! assert_eq!(handled.response.status, 200);
//! ```

pub use edgehook_api as api;
pub use edgehook_delivery as delivery;
pub use edgehook_model as model;
pub use edgehook_records as records;
pub use edgehook_storage as storage;
pub use edgehook_subscriptions as subscriptions;

#[cfg(any(target_arch = "wasm32", test))]
#[allow(
    unsafe_code,
    reason = "a global allocator is unsafe to implement; the module says why each part holds"
)]
mod alloc;

#[cfg(any(target_arch = "wasm32", test))]
mod stream;

#[cfg(target_arch = "wasm32")]
#[allow(
    unsafe_code,
    reason = "wit-bindgen's generated glue and `export!` expand to unsafe code; the shell writes none itself"
)]
mod shell;
