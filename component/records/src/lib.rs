//! # edgehook records — what is stored, and how
//!
//! Owns every stored record type and its versioned encoding: [`subscription`] (0xB2, 0xB1
//! read), [`delivery`] (deliveries 0xD1, events 0xE5/0xE6), [`api_key`] (0xA2; 0xA1 read),
//! [`replay`] jobs (0xC1), [`notify`] (a client's notification endpoint, 0xF1) and
//! [`idempotency`] (JSON). A binary record starts with its
//! version byte; readers accept exactly the formats that exist and take anything else for
//! damage (an error, never a guess). Also the JSON views of a record that every audience
//! shares (the operator views).
//!
//! May use: `edgehook-storage` (codec, keys), `edgehook-model` (ids, errors). Knows no index,
//! queue or route: where a record is kept and when it changes belong to the layers above.

pub mod api_key;
pub mod delivery;
pub mod idempotency;
pub mod notify;
pub mod replay;
pub mod secret;
pub mod subscription;
