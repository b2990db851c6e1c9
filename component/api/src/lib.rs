//! # edgehook API — the HTTP face of the service
//!
//! Owns every route and what it answers: the [`router`] (routes, 404/405/413, the request id
//! on every response), API keys and the operator token ([`auth`]), the operator's key routes
//! ([`keys`]), the partner rate limit
//! ([`limits`]), `Idempotency-Key` claims ([`idempotency`]), the partner API
//! `/v1/webhooks` ([`partner`]), the operator API `/internal/v1` ([`operator`]), test
//! deliveries for both ([`ping`]), delivery lists for both ([`deliveries`]), an event's and a
//! load id's deliveries for both ([`events`]), replays by range for both ([`replays`]),
//! the partner's delivery options: scheme, headers, secret rotation ([`options`]), its
//! notification endpoint ([`notify`]), and
//! the portal's links and sessions ([`portal`]), and the operator's re-seal of stored
//! secrets ([`secrets`]).
//!
//! May use: `edgehook-delivery`, `edgehook-subscriptions`, `edgehook-records`,
//! `edgehook-model`, `edgehook-storage` (everything below it). Nothing uses it but the
//! component's shell.

pub mod auth;
mod body;
pub mod ctx;
pub mod deliveries;
pub mod events;
pub mod idempotency;
pub mod keys;
pub mod limits;
pub mod notify;
pub mod operator;
pub mod options;
pub mod partner;
pub mod ping;
pub mod portal;
pub mod replays;
pub mod router;
pub mod secrets;
