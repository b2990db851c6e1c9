//! Every key-value key the service uses is built here, and nowhere else.
//!
//! Layout (values are JSON unless noted):
//! - `health` — never written; read by `/healthz` to probe the store.
//! - `apikey:{sha256(key) hex}` — an API key record (client, key id, revoked?; binary,
//!   `ApiKeyRecord::encode`), found by
//!   hashing the presented bearer token. Keys themselves are never stored.
//! - `keyid:{key id}` — the hash of a key, so the operator can revoke it by id.
//! - `sub:{id}` — a subscription record (the only place its signing secret is stored);
//!   binary (`Subscription::encode`).
//! - `client:{client id}:subs:...` — an [`AppendLog`](crate::applog::AppendLog) of the
//!   client's subscriptions in creation order, each entry its listing state, id and list
//!   item (see `subscriptions`); an entry's number is the subscription's `seq`, used by list
//!   cursors.
//! - `client:{client id}:live` — a counter of the client's live subscriptions, checked
//!   against the subscription cap.
//! - `fanout:{event type}:...` — an append log of ids of subscriptions listening to that type.
//! - `idem:{client id}:{sha256(idempotency key) hex}` — an idempotency record: the request's
//!   fingerprint and the response to replay, without the signing secret (a replay reads it
//!   from `sub:{id}`). Listed in the retention log of the day it was claimed.
//! - `evt:{id}` — an event record (type, body hash, matched subscriptions); binary
//!   (`EventRecord::encode`).
//! - `evt:{id}:body` — the raw bytes of a published load (not JSON-wrapped).
//! - `dlv:{id}` — a delivery record with every attempt; binary (`Delivery::encode`).
//! - `duedir` — the seconds that have queued attempts, each with a watermark; binary and
//!   sorted (`directory`); `due:{second}:...` — an
//!   [`AppendLog`](crate::applog::AppendLog) of delivery ids due in that second.
//! - `subdlv:{subscription id}:...` — an append log of the subscription's deliveries.
//! - `retdir` — the days that have events or idempotency records (binary, as `duedir`);
//!   `ret:{day}:...` — an append log of that day's event ids and idempotency record keys.
//! - `ticklease` — when the last opportunistic tick began (decimal ms, a space, the
//!   instance's random nonce), so that one instance at a time runs it (see `scheduler`).
//! - `rate:{client id}:{minute}` — a counter of the client's partner API requests in that
//!   clock minute (see `limits`).

/// When the last opportunistic tick began: `{ms} {nonce}` (see `scheduler`).
pub const TICK_LEASE: &str = "ticklease";

/// Read by `/healthz` to check that the store answers. Never written.
pub const HEALTH_PROBE: &str = "health";

/// An API key record, by the hex SHA-256 of the key.
pub fn api_key(hash_hex: &str) -> String {
    format!("apikey:{hash_hex}")
}

/// Key id to key hash.
pub fn api_key_id(key_id: &str) -> String {
    format!("keyid:{key_id}")
}

/// A subscription record.
pub fn subscription(id: &str) -> String {
    format!("sub:{id}")
}

/// Prefix of a client's subscription index (an append log).
pub fn client_subscriptions(client_id: &str) -> String {
    format!("client:{client_id}:subs")
}

/// A client's live-subscription counter.
pub fn client_live(client_id: &str) -> String {
    format!("client:{client_id}:live")
}

/// Prefix of the fan-out index of one event type (an append log).
pub fn fanout(event_type: &str) -> String {
    format!("fanout:{event_type}")
}

/// What every idempotency record's key begins with (no event id does: those are `evt_...`).
pub const IDEMPOTENCY_PREFIX: &str = "idem:";

/// An idempotency record.
pub fn idempotency(client_id: &str, key_hash_hex: &str) -> String {
    format!("{IDEMPOTENCY_PREFIX}{client_id}:{key_hash_hex}")
}

/// The raw bytes of a published load.
pub fn event_body(event_id: &str) -> String {
    format!("evt:{event_id}:body")
}

/// An event record.
pub fn event(event_id: &str) -> String {
    format!("evt:{event_id}")
}

/// A delivery record.
pub fn delivery(delivery_id: &str) -> String {
    format!("dlv:{delivery_id}")
}

/// The set of seconds with queued attempts.
pub const DUE_DIRECTORY: &str = "duedir";

/// Prefix of the due queue of one second (an append log of delivery ids).
pub fn due(second: u64) -> String {
    format!("due:{second}")
}

/// Prefix of a subscription's delivery history (an append log of delivery ids).
pub fn subscription_deliveries(subscription_id: &str) -> String {
    format!("subdlv:{subscription_id}")
}

/// Prefix of one day's retention log (an append log of event ids and idempotency keys).
pub fn retention(day: u64) -> String {
    format!("ret:{day}")
}

/// The counter of a client's partner API requests in one clock minute (`window` = minutes
/// since the epoch).
pub fn rate(client_id: &str, window: u64) -> String {
    format!("rate:{client_id}:{window}")
}

/// The set of days with events (for retention).
pub const RETENTION_DIRECTORY: &str = "retdir";
