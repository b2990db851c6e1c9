//! Retention: events, deliveries and idempotency records past the retention period are purged by day.

use edgehook_model::env::Env;
use edgehook_records::delivery::{EventRecord, delivery_id};
use edgehook_records::idempotency;
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, KvError};
use edgehook_storage::retention::{self, DAY_MS};

/// Deletes events and deliveries older than the retention period (whole days at a time), and
/// the idempotency records listed with them that have expired.
pub(crate) fn purge_expired<K: Kv>(env: &Env<'_, K>) -> Result<(), KvError> {
    let keep_from_day = env
        .now_ms
        .saturating_sub(u64::from(env.settings.retention_days) * DAY_MS)
        / DAY_MS;
    retention::purge_before(env.kv, keep_from_day, |item| {
        // An idempotency record's key, listed on the day it was claimed; else an event.
        if item.starts_with(keys::IDEMPOTENCY_PREFIX) {
            return idempotency::purge(env.kv, env.now_ms, &Key::from_stored(item));
        }
        if let Some(bytes) = env.kv.get(&keys::event(item))? {
            let event = EventRecord::decode(&bytes)?;
            for sub in &event.subscriptions {
                env.kv.delete(&keys::delivery(&delivery_id(item, sub)))?;
            }
        }
        env.kv.delete(&keys::event_body(item))?;
        env.kv.delete(&keys::event(item))
    })
}
