//! Idempotency records as stored (`idem:{client}:{key hash}`, JSON): the claim a request
//! takes on an `Idempotency-Key`, and the response kept for replays. The claim protocol is
//! the API's (`edgehook-api`, module `idempotency`); expiry is here, so the retention purge
//! can delete expired records without knowing the protocol.

use edgehook_storage::ids::SubscriptionId;
use edgehook_storage::keys::Key;
use edgehook_storage::kv::{Kv, KvError};
use serde::Serialize;
use serde_json::Value;

/// How long a completed request's response is kept for replays.
pub const TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// A stored idempotency record.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

/// The state of an idempotency record.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
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
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StoredResponse {
    /// Status code.
    pub status: u16,
    /// The `Location` header, if any.
    pub location: Option<String>,
    /// The resource the request created (to finish it on replay if needed).
    pub subscription_id: SubscriptionId,
    /// A digest of what the request created, as the API computes it (the partner API: of
    /// the created subscription with its secret), so a replay can tell whether it changed
    /// since. Absent in records of earlier versions: a replay takes them for changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
}

impl Record {
    /// Reads a stored record (JSON, as [`Record`] serializes it; fields it does not know, such
    /// as the `data` copy of earlier versions, are ignored). `None` if it is not a record.
    ///
    /// Read through a [`Value`] rather than a derived `Deserialize`: a derived one reports
    /// type errors with serde's `Unexpected`, whose formatting of floats costs the component
    /// about 20 KiB of code.
    pub fn decode(bytes: &[u8]) -> Option<Record> {
        let value: Value = serde_json::from_slice(bytes).ok()?;
        let state = match value.get("state")?.as_str()? {
            "pending" => State::Pending,
            "done" => State::Done,
            "released" => State::Released,
            _ => return None,
        };
        let response = match value.get("response") {
            None | Some(Value::Null) => None,
            Some(r) => Some(StoredResponse {
                status: u16::try_from(r.get("status")?.as_u64()?).ok()?,
                location: optional_str(r.get("location"))?,
                subscription_id: SubscriptionId::trusted(r.get("subscriptionId")?.as_str()?),
                created: optional_str(r.get("created"))?,
            }),
        };
        Some(Record {
            state,
            fingerprint: value.get("fingerprint")?.as_str()?.to_owned(),
            created_at: value.get("createdAt")?.as_u64()?,
            response,
            claim: optional_str(value.get("claim"))?,
        })
    }
}

/// An optional string field: absent or null is `Some(None)`, another type is `None`.
fn optional_str(value: Option<&Value>) -> Option<Option<String>> {
    match value {
        None | Some(Value::Null) => Some(None),
        Some(v) => Some(Some(v.as_str()?.to_owned())),
    }
}

/// Deletes the idempotency record at `store_key` if it has expired (the retention purge lists
/// it on the day it was claimed; a key used again since then has a newer record, which stays
/// until its own day is purged). A record that cannot be read is deleted: it is unusable.
pub fn purge<K: Kv>(kv: &K, now_ms: u64, store_key: &Key) -> Result<(), KvError> {
    let Some(bytes) = kv.get(store_key)? else {
        return Ok(());
    };
    let expired = Record::decode(&bytes).is_none_or(|r| now_ms >= r.created_at + TTL_MS);
    if expired {
        kv.delete(store_key)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_reads_what_serialize_writes_and_records_of_earlier_versions() {
        let record = Record {
            state: State::Done,
            fingerprint: "f1".into(),
            created_at: 1_700_000_000_000,
            response: Some(StoredResponse {
                status: 201,
                location: Some("/v1/webhooks/sub_1".into()),
                subscription_id: "sub_1".into(),
                created: Some("d1".into()),
            }),
            claim: Some("c1".into()),
        };
        let bytes = serde_json::to_vec(&record).expect("serializes");
        assert_eq!(Record::decode(&bytes), Some(record));
        // An earlier version's record: no claim, a `data` copy in its response.
        let old = br#"{"state":"pending","fingerprint":"f2","createdAt":5,"response":{"status":200,"location":null,"subscriptionId":"sub_2","data":{"x":1}}}"#;
        assert_eq!(
            Record::decode(old),
            Some(Record {
                state: State::Pending,
                fingerprint: "f2".into(),
                created_at: 5,
                response: Some(StoredResponse {
                    status: 200,
                    location: None,
                    subscription_id: "sub_2".into(),
                    created: None,
                }),
                claim: None,
            })
        );
        let released = br#"{"state":"released","fingerprint":"f","createdAt":1,"response":null}"#;
        assert_eq!(
            Record::decode(released).expect("reads").state,
            State::Released
        );
        for bad in [
            &b"[]"[..],
            b"{",
            br#"{"state":"gone","fingerprint":"f","createdAt":1}"#,
            br#"{"state":"done","fingerprint":"f","createdAt":-1}"#,
            br#"{"state":"done","fingerprint":"f","createdAt":1.5}"#,
            br#"{"state":"done","fingerprint":7,"createdAt":1}"#,
            br#"{"state":"done","fingerprint":"f","createdAt":1,"claim":3}"#,
            br#"{"state":"done","fingerprint":"f","createdAt":1,"response":{"status":70000,"subscriptionId":"s"}}"#,
        ] {
            assert_eq!(Record::decode(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
