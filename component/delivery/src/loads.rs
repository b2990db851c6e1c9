//! Where did a load go: an event looked up by its id, and the events of a load id within
//! the retention period, each with the deliveries it made (status and attempts).
//!
//! **The index.** Every publish adds its event id to `loadevt:{day}:{hash}` (the day of the
//! event, the hex SHA-256 of the load's `id`): one compare-and-swap of a short value, the
//! ids one per line, oldest first, at most [`MAX_PER_DAY`] (past that the oldest of the day
//! drop out). It is written after the event is listed for retention, with the hash in the
//! event's retention item (`{event id} {hash}`), and before anything else of the event: a
//! publish cut short leaves an index entry that names no event (readers skip it), never one
//! the purge cannot find. The purge deletes the key with the day's events.
//!
//! **The lookup** reads the index keys of every day of the retention period in one batch,
//! then each event's record and its deliveries' records. A partner's lookup shows only the
//! deliveries to its own subscriptions, and no event that made none.

use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::ids::{ClientId, EventId, SubscriptionId};
use edgehook_records::delivery::{Delivery, DeliveryView, EventRecord, delivery_id};
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, KvError, Update, update};
use edgehook_storage::retention::DAY_MS;
use edgehook_subscriptions as subscriptions;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Most events of one load id a day's index keeps (the latest).
pub const MAX_PER_DAY: usize = 100;

/// Most events a lookup by load id shows (the latest).
pub const MAX_FOUND: usize = 50;

/// The hex hash of a load id its index keys are named by (16 bytes of SHA-256).
pub fn load_hash(load_id: &str) -> String {
    let digest = Sha256::new()
        .chain_update("load/")
        .chain_update(load_id)
        .finalize();
    edgehook_model::ids::hex(&digest[..16])
}

/// The retention item of an event of load hash `hash`: the event id, a space, the hash.
pub(crate) fn retention_item(event_id: &EventId, hash: &str) -> String {
    let mut item = String::with_capacity(event_id.len() + 1 + hash.len());
    item.push_str(event_id);
    item.push(' ');
    item.push_str(hash);
    item
}

/// A retention item read back: the event id, and the load hash if it has one.
pub(crate) fn parse_retention_item(item: &str) -> (&str, Option<&str>) {
    match item.split_once(' ') {
        Some((id, hash)) => (id, Some(hash)),
        None => (item, None),
    }
}

/// Adds `event_id`, published at `at_ms`, to the index of load hash `hash`.
pub(crate) fn index<K: Kv>(
    kv: &K,
    at_ms: u64,
    hash: &str,
    event_id: &EventId,
) -> Result<(), KvError> {
    let key = keys::load_events(at_ms / DAY_MS, hash);
    update(kv, &key, &mut |cur| {
        let text = cur
            .map(std::str::from_utf8)
            .transpose()
            .ok()
            .flatten()
            .unwrap_or("");
        if text.lines().any(|l| l == event_id.as_str()) {
            return Ok::<_, KvError>(Update::Keep(()));
        }
        let kept: Vec<&str> = text.lines().collect();
        let from = (kept.len() + 1).saturating_sub(MAX_PER_DAY);
        let mut out = String::with_capacity(text.len() + event_id.len() + 1);
        for line in &kept[from..] {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(event_id);
        out.push('\n');
        Ok(Update::Write(out.into_bytes(), ()))
    })
    .map_err(KvError::from)
}

/// The purge's part: the index key an event's retention item names, on `day`.
pub(crate) fn purge_key(day: u64, item: &str) -> Option<Key> {
    parse_retention_item(item)
        .1
        .map(|hash| keys::load_events(day, hash))
}

/// One event as a lookup shows it: what was published, and each delivery it made.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView<'a> {
    created_at: u64,
    deliveries: Vec<DeliveryView<'a>>,
    event_type: &'a str,
    id: &'a str,
    load_id: &'a str,
}

/// An event found, with what its view borrows.
pub struct Found {
    event: EventRecord,
    load_id: String,
    deliveries: Vec<Delivery>,
}

impl Found {
    /// Its view.
    pub fn view(&self) -> EventView<'_> {
        EventView {
            created_at: self.event.created_at,
            deliveries: self.deliveries.iter().map(Delivery::view).collect(),
            event_type: &self.event.event_type,
            id: &self.event.id,
            load_id: &self.load_id,
        }
    }
}

/// Event `id` with its deliveries (only those to `client_id`'s subscriptions, if given:
/// then `None` if it made none). `None` if there is no such event.
pub fn event<K: Kv>(
    env: &Env<'_, K>,
    id: &EventId,
    client_id: Option<&ClientId>,
) -> Result<Option<Found>, ApiError> {
    let got = env.kv.get_many(&[keys::event(id), keys::event_body(id)])?;
    let mut got = got.into_iter();
    let (Some(Some(record)), body) = (got.next(), got.next().flatten()) else {
        return Ok(None);
    };
    let event = EventRecord::decode(&record)?;
    let mut subs: Vec<SubscriptionId> = event.all_subscriptions().cloned().collect();
    if let Some(client) = client_id {
        let records = subscriptions::load_many(env, &subs)?;
        subs = subs
            .into_iter()
            .zip(records)
            .filter(|(_, r)| {
                r.as_ref().is_some_and(|r| {
                    r.client_id == client
                        && r.disabled_reason.as_deref() != Some(subscriptions::DELETED)
                })
            })
            .map(|(id, _)| id)
            .collect();
        if subs.is_empty() {
            return Ok(None);
        }
    }
    let record_keys: Vec<Key> = subs
        .iter()
        .map(|s| keys::delivery(&delivery_id(id, s)))
        .collect();
    let deliveries = env
        .kv
        .get_many(&record_keys)?
        .into_iter()
        .flatten()
        .filter_map(|b| Delivery::decode(&b).ok())
        .collect();
    let load_id = body
        .and_then(|b| edgehook_model::events::load_id(&event.event_type, &b).ok())
        .unwrap_or_default();
    Ok(Some(Found {
        event,
        load_id,
        deliveries,
    }))
}

/// The events of load id `load_id` published within the retention period, newest first
/// (at most [`MAX_FOUND`]), as [`event`] shows each.
pub fn by_load<K: Kv>(
    env: &Env<'_, K>,
    load_id: &str,
    client_id: Option<&ClientId>,
) -> Result<Vec<Found>, ApiError> {
    let hash = load_hash(load_id);
    let today = env.now_ms / DAY_MS;
    let retention_days = u64::from(env.settings.retention_days);
    let first = today.saturating_sub(retention_days);
    let index_keys: Vec<Key> = (first..=today)
        .map(|day| keys::load_events(day, &hash))
        .collect();
    let mut ids: Vec<String> = Vec::new();
    for value in env.kv.get_many(&index_keys)?.into_iter().flatten() {
        let text = String::from_utf8_lossy(&value);
        ids.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_owned));
    }
    let mut found = Vec::new();
    for id in ids.iter().rev() {
        if found.len() == MAX_FOUND {
            break;
        }
        let Some(id) = EventId::parse(id) else {
            continue;
        };
        // A second load under the same hash (never seen in practice) is told apart here.
        match event(env, &id, client_id)? {
            Some(f) if f.load_id == load_id => found.push(f),
            _ => {}
        }
    }
    Ok(found)
}
