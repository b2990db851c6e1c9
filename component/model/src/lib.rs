//! # edgehook model — the vocabulary every layer speaks
//!
//! Owns what a request is made of and what every layer above passes around: the request
//! environment [`env::Env`] (the time, the randomness, the store, the settings: the core
//! never reads them itself), [`config::Settings`], prefixed [`ids`], plain HTTP values
//! ([`http`]) and the one error type with its JSON envelope ([`error`]), the event types and
//! load rules ([`events`]), the subscription URL rules ([`validate`]), the HMAC
//! signature ([`signing`]), the sealing of secrets at rest ([`seal`]) and the W3C trace
//! context an event carries to its attempts ([`trace`]).
//!
//! May use: `edgehook-storage` (the store an [`env::Env`] holds; store errors become API
//! errors). Knows no stored record and no route.

pub mod config;
pub mod env;
pub mod error;
pub mod events;
pub mod http;
pub mod ids;
pub mod seal;
pub mod signing;
pub mod trace;
pub mod validate;
#[cfg(test)]
mod validate_tests;
