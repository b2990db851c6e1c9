//! # edgehook component
//!
//! The edgehook webhook service as one WebAssembly component. The crate is a **functional
//! core** (plain Rust that compiles and unit-tests natively) and one **thin shell** module,
//! compiled only for `wasm32`, that turns WIT calls into core calls.
//!
//! The core never reads a clock, a random source or the network by itself: every entry point
//! takes an [`env::Env`] holding the time, the randomness, the store and the settings.
//!
//! ```
//! use edgehook_component::{config::Settings, env::{Env, SeededEntropy}, http::Request,
//!     kv::MemoryKv, router};
//!
//! let (kv, settings, entropy) = (MemoryKv::new(), Settings::default(), SeededEntropy::new(1));
//! let env = Env { now_ms: 1_700_000_000_000, kv: &kv, settings: &settings, entropy: &entropy };
//! let handled = router::handle(&env, &Request::new("GET", "/healthz"), &edgehook_component::delivery::NoNetwork);
//! assert_eq!(handled.response.status, 200);
//! ```

pub mod applog;
pub mod auth;
pub mod codec;
pub mod config;
pub mod delivery;
pub mod directory;
pub mod env;
pub mod error;
pub mod events;
pub mod http;
pub mod idempotency;
pub mod ids;
pub mod keys;
pub mod kv;
pub mod limits;
pub mod operator;
pub mod router;
pub mod scheduler;
pub mod signing;
pub mod subscriptions;
pub mod validate;
#[cfg(test)]
mod validate_tests;

#[cfg(target_arch = "wasm32")]
#[allow(
    unsafe_code,
    reason = "wit-bindgen's generated glue and `export!` expand to unsafe code; the shell writes none itself"
)]
mod shell;
