//! Idempotency records as stored (`idem:{client}:{key hash}`, JSON): the claim a request
//! takes on an `Idempotency-Key`, and the response kept for replays. The claim protocol is
//! the API's (`edgehook-api`, module `idempotency`); expiry is here, so the retention purge
//! can delete expired records without knowing the protocol.

use edgehook_storage::keys::Key;
use edgehook_storage::kv::{Kv, KvError};
use serde::{Deserialize, Serialize};

/// How long a completed request's response is kept for replays.
pub const TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// A stored idempotency record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// `pending` while the first request runs, `done` once its response is stored.
    pub state: State,
    /// SHA-256 of the request (method, path, body).
    pub fingerprint: String,
    /// When the key was first used (ms since the epoch).
    pub created_at: u64,
    /// The stored response, once done.
    pub response: Option<StoredResponse>,
    /// A random token of the request that took the claim. Two requests' claims never have
    /// the same bytes, so the API's `finish` and `release` act only on their own claim, and a host
    /// whose compare-and-swap can report failure after applying (Spin 4.0.2's Redis store)
    /// is told apart by reading the key back. Absent in records of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

/// The state of an idempotency record.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum State {
    /// The first request is still running (or failed without releasing the claim).
    Pending,
    /// The first request finished; its response is stored.
    Done,
    /// The first request failed before storing a response and gave its claim up: the key
    /// is free (earlier versions, which do not know this state, take the record for none).
    Released,
}

/// A response kept for replays. Its body is not kept: a replay writes it again from the
/// subscription record (records of earlier versions also hold a `data` copy, ignored).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StoredResponse {
    /// Status code.
    pub status: u16,
    /// The `Location` header, if any.
    pub location: Option<String>,
    /// The resource the request created (to finish it on replay if needed).
    pub subscription_id: String,
}

/// Deletes the idempotency record at `store_key` if it has expired (the retention purge lists
/// it on the day it was claimed; a key used again since then has a newer record, which stays
/// until its own day is purged). A record that cannot be read is deleted: it is unusable.
pub fn purge<K: Kv>(kv: &K, now_ms: u64, store_key: &Key) -> Result<(), KvError> {
    let Some(bytes) = kv.get(store_key)? else {
        return Ok(());
    };
    let expired =
        serde_json::from_slice::<Record>(&bytes).map_or(true, |r| now_ms >= r.created_at + TTL_MS);
    if expired {
        kv.delete(store_key)?;
    }
    Ok(())
}
