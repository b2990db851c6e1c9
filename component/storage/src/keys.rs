//! Every key-value key the service uses is built here, and nowhere else.
//!
//! Layout (values are JSON unless noted):
//! - `health` — never written; read by `/healthz` to probe the store.
//! - `apikey:{sha256(key) hex}` — an API key record (client, key id, revoked?; binary,
//!   `ApiKeyRecord::encode`), found by
//!   hashing the presented bearer token. Keys themselves are never stored.
//! - `keyid:{key id}` — the hash of a key, so the operator can revoke it by id.
//! - `client:{client id}:keys:...` — an [`AppendLog`](crate::applog::AppendLog) of the hashes
//!   of the client's API keys in the order they were issued (revoked ones stay), for the
//!   operator's key list; `ingestkeys:...` — the same for ingest keys, which belong to no
//!   client. Appended before the key's records are written: every usable key is listed.
//! - `sub:{id}` — a subscription record (the only place its signing secret is stored);
//!   binary (`Subscription::encode`).
//! - `client:{client id}:subs:...` — an [`AppendLog`](crate::applog::AppendLog) of the
//!   client's subscriptions in creation order, each entry its listing state, id and list
//!   item (see `subscriptions`); an entry's number is the subscription's `seq`, used by list
//!   cursors.
//! - `client:{client id}:live` — a counter of the client's live subscriptions, checked
//!   against the subscription cap.
//! - `client:{client id}:disabled:...` — an append log of the client's disabled
//!   subscriptions (ids, in the order they were disabled; deleted ones are not in it), for
//!   `GET /v1/webhooks?status=disabled`; `disabled:...` — an append log of every disabled
//!   subscription (ids), for the operator's `GET /internal/v1/subscriptions?status=disabled`.
//!   Written by a disable before its commit point; an entry counts only while the
//!   subscription record names it (see `subscriptions`).
//! - `fanout:{event type}:...` — an append log of ids of subscriptions listening to that type.
//! - `...:d` under the prefix of each subscription index (the client lists, the disabled
//!   lists, the fan-out lists) — the log's page directory: which of its pages a reader must
//!   read; the pages it no longer lists are sealed (`applog::pagedir`).
//! - `...:n`, `...:p{k}` and `...:p{k}.{j}` under the prefix of every append log — its
//!   counter, page `k` (or its first part) and part `j` of page `k` (the logs made with
//!   `AppendLog::new`; see `applog`).
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
//! - `fifodir` — the FIFO subscriptions with deliveries to release, one id per line;
//!   `fifo:{subscription id}` — how far its history is done with (binary; `delivery::fifo`).
//! - `pace:{subscription id}` — a paced subscription's attempts in flight (who holds them,
//!   until when) and when its rate lets the next one start (binary; `delivery::pace`).
//! - `subdlv:{subscription id}:...` — an append log of the subscription's deliveries;
//!   `subdlv:{subscription id}:f` — how many of its leading pages the retention purge has
//!   dropped (see `delivery::history`).
//! - `rpl:{job id}` — a replay job (its filters, cursor and progress; binary,
//!   `ReplayJob::encode`); `rpl:{job id}:s{n}` — the delivery ids its selecting step `n`
//!   found, one per line (a step run again rewrites its own record; deleted once the job no
//!   longer runs); `rpldir` — the ids of the running jobs, one per line, read by every tick.
//! - `authfail:{address}:{minute}` — how many authentications failed (decimal) from a source
//!   address in that minute (the one before is deleted when a minute's first is counted). In
//!   the `counters` bucket, as `rate:` (`Env::counters`).
//! - `loadevt:{day}:{sha256(load id) hex}` — the ids of the events of one load id published
//!   that day, one per line, oldest first, at most a bounded number (`delivery::loads`);
//!   deleted by the retention purge with the day's events (their retention items name it).
//! - `retdir` — the days that have events or idempotency records, each with how far its log
//!   has been purged (binary, as `duedir`);
//!   `ret:{day}:...` — an append log of that day's event ids (each with its load id's hash
//!   after a space) and idempotency record keys.
//! - `ticklease` — when the last opportunistic tick began (decimal ms, a space, the
//!   instance's random nonce), so that one instance at a time runs it (see `scheduler`).
//! - `notify:{endpoint id}` — a client's notification endpoint (URL, signing secret; binary,
//!   `NotificationEndpoint::encode`); the id is the `sub_...` id its notices are delivered
//!   under, derived from the client id (`subscriptions::notify`).
//! - `notifydir:...` — an append log of the clients that registered a notification endpoint
//!   (an entry stays after a removal), walked by the re-seal pass (`subscriptions::reseal`).
//! - `rate:{client id}:{minute}` — a counter of the client's partner API requests in that
//!   clock minute (see `limits`), in the `counters` bucket: a host may keep it in memory.

use crate::ids::{ApiKeyId, ClientId, DeliveryId, EventId, ReplayJobId, SubscriptionId};
use std::borrow::Cow;

/// A store key. Only this module builds one (its field is private), so every key the
/// component reads or writes comes from a builder here: the compiler checks what a test of
/// the source text used to. [`Key::from_stored`] takes a key read back from the store itself
/// (an item of a retention log).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Cow<'static, str>);

impl Key {
    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as an owned string (what a host call that takes keys by value wants).
    pub fn into_string(self) -> String {
        self.0.into_owned()
    }

    /// A key the store gave back (written there by a builder of this module earlier).
    pub fn from_stored(key: impl Into<String>) -> Key {
        Key(Cow::Owned(key.into()))
    }

    const fn fixed(key: &'static str) -> Key {
        Key(Cow::Borrowed(key))
    }
}

impl std::ops::Deref for Key {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<Key> for String {
    fn eq(&self, other: &Key) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<str> for Key {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Something a store call takes as a key: a [`Key`], and in the component's own unit tests
/// a plain string too.
pub trait AsKey {
    /// The key as text.
    fn key_str(&self) -> &str;
}

impl AsKey for Key {
    fn key_str(&self) -> &str {
        &self.0
    }
}

#[cfg(any(test, feature = "testing"))]
impl AsKey for str {
    fn key_str(&self) -> &str {
        self
    }
}

#[cfg(any(test, feature = "testing"))]
impl AsKey for String {
    fn key_str(&self) -> &str {
        self
    }
}

fn owned(key: String) -> Key {
    Key(Cow::Owned(key))
}

/// The key made of `parts`, in order. Keys are built on every store call (a fan-out 1 event
/// builds about twenty), and `format!` costs a walk through `core::fmt` for each: this is
/// one allocation of the right size and a copy of each part (numbers written by `itoa`).
fn joined(parts: &[&str]) -> Key {
    let mut key = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        key.push_str(part);
    }
    owned(key)
}

// What the keys of each kind begin with. The builders below start their keys with these;
// tests and tools that look through a store by kind (every subscription record, a client's
// rate counters) match these instead of spelling a prefix of their own.

/// What [`api_key`] keys begin with.
pub const API_KEY_PREFIX: &str = "apikey:";
/// What [`api_key_id`] keys begin with.
pub const API_KEY_ID_PREFIX: &str = "keyid:";
/// What a client's keys begin with ([`client_keys`], [`client_subscriptions`],
/// [`client_live`], [`client_disabled`]).
pub const CLIENT_PREFIX: &str = "client:";
/// What [`subscription`] keys begin with.
pub const SUBSCRIPTION_PREFIX: &str = "sub:";
/// What [`fanout`] keys begin with.
pub const FANOUT_PREFIX: &str = "fanout:";
/// What [`event`] and [`event_body`] keys begin with.
pub const EVENT_PREFIX: &str = "evt:";
/// What [`delivery`] keys begin with.
pub const DELIVERY_PREFIX: &str = "dlv:";
/// What [`due`] keys begin with.
pub const DUE_PREFIX: &str = "due:";
/// What [`subscription_deliveries`] keys begin with.
pub const SUBSCRIPTION_DELIVERIES_PREFIX: &str = "subdlv:";
/// What [`fifo`] keys begin with.
pub const FIFO_PREFIX: &str = "fifo:";
/// What [`pace`] keys begin with.
pub const PACE_PREFIX: &str = "pace:";
/// What [`retention`] keys begin with.
pub const RETENTION_PREFIX: &str = "ret:";
/// What [`rate`] keys begin with.
pub const RATE_PREFIX: &str = "rate:";
/// What [`auth_failures`] keys begin with.
pub const AUTH_FAILURES_PREFIX: &str = "authfail:";
/// What [`notification_endpoint`] keys begin with.
pub const NOTIFY_PREFIX: &str = "notify:";

/// What [`load_events`] keys begin with.
pub const LOAD_EVENTS_PREFIX: &str = "loadevt:";

/// Every prefix a key of a kind begins with (the keys without one are the fixed keys:
/// [`TICK_LEASE`], [`DUE_DIRECTORY`], ...).
pub const PREFIXES: [&str; 18] = [
    API_KEY_PREFIX,
    API_KEY_ID_PREFIX,
    CLIENT_PREFIX,
    SUBSCRIPTION_PREFIX,
    FANOUT_PREFIX,
    IDEMPOTENCY_PREFIX,
    EVENT_PREFIX,
    DELIVERY_PREFIX,
    DUE_PREFIX,
    SUBSCRIPTION_DELIVERIES_PREFIX,
    REPLAY_PREFIX,
    FIFO_PREFIX,
    PACE_PREFIX,
    RETENTION_PREFIX,
    RATE_PREFIX,
    AUTH_FAILURES_PREFIX,
    NOTIFY_PREFIX,
    LOAD_EVENTS_PREFIX,
];

/// When the last opportunistic tick began: `{ms} {nonce}` (see `scheduler`).
pub const TICK_LEASE: Key = Key::fixed("ticklease");

/// Read by `/healthz` to check that the store answers. Never written.
pub const HEALTH_PROBE: Key = Key::fixed("health");

/// An API key record, by the hex SHA-256 of the key.
pub fn api_key(hash_hex: &str) -> Key {
    joined(&[API_KEY_PREFIX, hash_hex])
}

/// Key id to key hash.
pub fn api_key_id(key_id: &ApiKeyId) -> Key {
    joined(&[API_KEY_ID_PREFIX, key_id])
}

/// Prefix of a client's index of API keys (an append log of key hashes).
pub fn client_keys(client_id: &ClientId) -> Key {
    joined(&[CLIENT_PREFIX, client_id, ":keys"])
}

/// Prefix of the index of ingest keys (an append log of key hashes; they have no client).
pub const INGEST_KEYS: Key = Key::fixed("ingestkeys");

/// A client's notification endpoint, by the id its notices are delivered under.
pub fn notification_endpoint(id: &SubscriptionId) -> Key {
    joined(&[NOTIFY_PREFIX, id])
}

/// The append log of clients that registered a notification endpoint.
pub const NOTIFY_DIRECTORY: Key = Key::fixed("notifydir");

/// A subscription record.
pub fn subscription(id: &SubscriptionId) -> Key {
    joined(&[SUBSCRIPTION_PREFIX, id])
}

/// Prefix of a client's subscription index (an append log).
pub fn client_subscriptions(client_id: &ClientId) -> Key {
    joined(&[CLIENT_PREFIX, client_id, ":subs"])
}

/// A client's live-subscription counter.
pub fn client_live(client_id: &ClientId) -> Key {
    joined(&[CLIENT_PREFIX, client_id, ":live"])
}

/// Prefix of a client's list of disabled subscriptions (an append log).
pub fn client_disabled(client_id: &ClientId) -> Key {
    joined(&[CLIENT_PREFIX, client_id, ":disabled"])
}

/// Prefix of the append log of every disabled subscription (operator).
pub const DISABLED_LOG: Key = Key::fixed("disabled");

/// Prefix of the fan-out index of one event type (an append log).
pub fn fanout(event_type: &str) -> Key {
    joined(&[FANOUT_PREFIX, event_type])
}

/// What every idempotency record's key begins with (no event id does: those are `evt_...`).
pub const IDEMPOTENCY_PREFIX: &str = "idem:";

/// An idempotency record.
pub fn idempotency(client_id: &ClientId, key_hash_hex: &str) -> Key {
    joined(&[IDEMPOTENCY_PREFIX, client_id, ":", key_hash_hex])
}

/// The raw bytes of a published load.
pub fn event_body(event_id: &EventId) -> Key {
    joined(&[EVENT_PREFIX, event_id, ":body"])
}

/// An event record.
pub fn event(event_id: &EventId) -> Key {
    joined(&[EVENT_PREFIX, event_id])
}

/// A delivery record.
pub fn delivery(delivery_id: &DeliveryId) -> Key {
    joined(&[DELIVERY_PREFIX, delivery_id])
}

/// The set of seconds with queued attempts.
pub const DUE_DIRECTORY: Key = Key::fixed("duedir");

/// Prefix of the due queue of one second (an append log of delivery ids).
pub fn due(second: u64) -> Key {
    joined(&[DUE_PREFIX, itoa::Buffer::new().format(second)])
}

/// Prefix of a subscription's delivery history (an append log of delivery ids).
pub fn subscription_deliveries(subscription_id: &SubscriptionId) -> Key {
    joined(&[SUBSCRIPTION_DELIVERIES_PREFIX, subscription_id])
}

/// The prefix of a replay job's keys (the retention purge knows a finished job's record by it).
pub const REPLAY_PREFIX: &str = "rpl:";

/// A replay job's record (`rpl_...`).
pub fn replay(job_id: &ReplayJobId) -> Key {
    joined(&[REPLAY_PREFIX, job_id])
}

/// Selection `n` of a replay job: the delivery ids one selecting step found, one per line.
pub fn replay_selection(job_id: &ReplayJobId, n: u32) -> Key {
    joined(&[REPLAY_PREFIX, job_id, ":s", itoa::Buffer::new().format(n)])
}

/// The running replay jobs: their ids, one per line; every tick reads it.
pub const REPLAY_DIRECTORY: Key = Key::fixed("rpldir");

/// The FIFO subscriptions with deliveries still to release: their ids, one per line; every
/// tick reads it.
pub const FIFO_DIRECTORY: Key = Key::fixed("fifodir");

/// A FIFO subscription's place in its history: how many entries are done with (binary).
pub fn fifo(subscription_id: &SubscriptionId) -> Key {
    joined(&[FIFO_PREFIX, subscription_id])
}

/// A paced subscription's attempts in flight and its rate state (binary; `delivery::pace`).
pub fn pace(subscription_id: &SubscriptionId) -> Key {
    joined(&[PACE_PREFIX, subscription_id])
}

/// Prefix of one day's retention log (an append log of event ids and idempotency keys).
pub fn retention(day: u64) -> Key {
    joined(&[RETENTION_PREFIX, itoa::Buffer::new().format(day)])
}

/// The counter of a client's partner API requests in one clock minute (`window` = minutes
/// since the epoch).
pub fn rate(client_id: &ClientId, window: u64) -> Key {
    joined(&[
        RATE_PREFIX,
        client_id,
        ":",
        itoa::Buffer::new().format(window),
    ])
}

/// The counter of failed authentications from one source address in one clock minute.
/// The address is the host's (Spin's `spin-client-addr`, `serve`'s peer), shortened to
/// what an address can hold.
pub fn auth_failures(address: &str, window: u64) -> Key {
    let address: String = address
        .chars()
        .filter(|c| c.is_ascii_hexdigit() || matches!(c, '.' | ':'))
        .take(45)
        .collect();
    joined(&[
        AUTH_FAILURES_PREFIX,
        &address,
        ":",
        itoa::Buffer::new().format(window),
    ])
}

/// The entry counter of the append log under `prefix`.
pub fn log_counter(prefix: &Key) -> Key {
    joined(&[prefix.as_str(), ":n"])
}

/// Page `page` (0-based) of the append log under `prefix`.
pub fn log_page(prefix: &Key, page: u64) -> Key {
    joined(&[prefix.as_str(), ":p", itoa::Buffer::new().format(page)])
}

/// Part `part` (1 or more) of page `page` of the append log under `prefix`: a page of a log
/// kept in parts holds its first part under [`log_page`] and each later one under its own
/// key (`applog`).
pub fn log_page_part(prefix: &Key, page: u64, part: u64) -> Key {
    joined(&[
        prefix.as_str(),
        ":p",
        itoa::Buffer::new().format(page),
        ".",
        itoa::Buffer::new().format(part),
    ])
}

/// How many leading pages of the append log under `prefix` were dropped (decimal; absent:
/// none). Only logs trimmed from the front have one (a subscription's delivery history).
pub fn log_dropped(prefix: &Key) -> Key {
    joined(&[prefix.as_str(), ":f"])
}

/// The page directory of the append log under `prefix` (binary; absent: every page is
/// read). Only logs whose entries are removed have one (the subscription indexes; see
/// `applog::pagedir`).
pub fn log_directory(prefix: &Key) -> Key {
    joined(&[prefix.as_str(), ":d"])
}

/// The events of one load id published on one day (`day` since the epoch), found by the
/// hex hash of the load id: their ids, one per line, oldest first (`delivery::loads`).
pub fn load_events(day: u64, load_hash_hex: &str) -> Key {
    joined(&[
        LOAD_EVENTS_PREFIX,
        itoa::Buffer::new().format(day),
        ":",
        load_hash_hex,
    ])
}

/// The set of days with events (for retention).
pub const RETENTION_DIRECTORY: Key = Key::fixed("retdir");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_their_parts_in_order_with_numbers_in_decimal() {
        // The stored layout (the module doc): a key built any other way is another key,
        // and what was stored under the old one is lost to every reader.
        let due = due(1_767_225_600);
        assert_eq!(due.as_str(), "due:1767225600");
        assert_eq!(log_page(&due, 12).as_str(), "due:1767225600:p12");
        assert_eq!(log_page_part(&due, 12, 3).as_str(), "due:1767225600:p12.3");
        assert_eq!(log_counter(&due).as_str(), "due:1767225600:n");
        assert_eq!(
            event_body(&EventId::from("evt_1")).as_str(),
            "evt:evt_1:body"
        );
        assert_eq!(
            idempotency(&ClientId::from("acme"), "ab").as_str(),
            "idem:acme:ab"
        );
        assert_eq!(
            replay_selection(&ReplayJobId::from("rpl_1"), 3).as_str(),
            "rpl:rpl_1:s3"
        );
        assert_eq!(
            rate(&ClientId::from("acme"), 29_000_000).as_str(),
            "rate:acme:29000000"
        );
        assert_eq!(auth_failures("::1; drop", 5).as_str(), "authfail:::1d:5");
    }

    #[test]
    fn every_key_of_a_kind_begins_with_its_prefix_and_no_prefix_begins_another() {
        let kinds: [(Key, &str); 20] = [
            (api_key("ab"), API_KEY_PREFIX),
            (api_key_id(&ApiKeyId::from("key_1")), API_KEY_ID_PREFIX),
            (client_keys(&ClientId::from("acme")), CLIENT_PREFIX),
            (client_subscriptions(&ClientId::from("acme")), CLIENT_PREFIX),
            (client_live(&ClientId::from("acme")), CLIENT_PREFIX),
            (client_disabled(&ClientId::from("acme")), CLIENT_PREFIX),
            (
                subscription(&SubscriptionId::from("sub_1")),
                SUBSCRIPTION_PREFIX,
            ),
            (fanout("load.created"), FANOUT_PREFIX),
            (
                idempotency(&ClientId::from("acme"), "ab"),
                IDEMPOTENCY_PREFIX,
            ),
            (event(&EventId::from("evt_1")), EVENT_PREFIX),
            (delivery(&DeliveryId::from("dlv_1")), DELIVERY_PREFIX),
            (due(1), DUE_PREFIX),
            (
                subscription_deliveries(&SubscriptionId::from("sub_1")),
                SUBSCRIPTION_DELIVERIES_PREFIX,
            ),
            (replay(&ReplayJobId::from("rpl_1")), REPLAY_PREFIX),
            (fifo(&SubscriptionId::from("sub_1")), FIFO_PREFIX),
            (pace(&SubscriptionId::from("sub_1")), PACE_PREFIX),
            (retention(1), RETENTION_PREFIX),
            (load_events(1, "ab"), LOAD_EVENTS_PREFIX),
            (rate(&ClientId::from("acme"), 1), RATE_PREFIX),
            (
                notification_endpoint(&SubscriptionId::from("sub_1")),
                NOTIFY_PREFIX,
            ),
        ];
        for (key, prefix) in &kinds {
            assert!(key.starts_with(prefix), "{key} under {prefix}");
            let others = PREFIXES.iter().filter(|p| key.starts_with(**p)).count();
            assert_eq!(others, 1, "{key} begins with one prefix only");
        }
        assert!(auth_failures("::1", 1).starts_with(AUTH_FAILURES_PREFIX));
        for prefix in PREFIXES {
            let built = kinds.iter().any(|(_, p)| *p == prefix);
            assert!(
                built || prefix == AUTH_FAILURES_PREFIX,
                "{prefix}: no builder"
            );
        }
    }
}
