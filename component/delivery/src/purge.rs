//! Retention: events (and their load ids' indexes), deliveries, idempotency records,
//! finished replay jobs and delivery history past the retention period are purged, a
//! bounded batch per tick.

use crate::history::trim_history;
use edgehook_model::env::Env;
use edgehook_model::ids::{EventId, SubscriptionId};
use edgehook_records::delivery::{EventRecord, delivery_id};
use edgehook_records::idempotency;
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, KvError};
use edgehook_storage::retention::{self, DAY_MS};
use edgehook_storage::sort::sort;

/// Items (events, idempotency records) a tick purges at most. An event's purge costs one
/// delete per delivery (as its publish cost one write per delivery) and a history trim per
/// subscription it went to ([`trim_history`], at most a few pages each).
pub const PURGE_ITEMS_PER_TICK: usize = 64;

/// Delivery records past retention that history trims may delete per tick, besides the
/// purge's own: records the purge of their event did not reach (a key-less publish that
/// failed before listing its event), or of later days when several are past at once.
pub const TRIM_EXPIRED_PER_TICK: usize = 128;

/// Deletes events and deliveries older than the retention period (whole days at a time, a
/// batch of [`PURGE_ITEMS_PER_TICK`] per call), the idempotency records listed with them
/// that have expired, and the pages of the subscriptions' histories that only list purged
/// deliveries. A failure leaves the batch to be purged again by the next call.
pub(crate) fn purge_expired<K: Kv>(env: &Env<'_, K>) -> Result<(), KvError> {
    let keep_from_day = env
        .now_ms
        .saturating_sub(u64::from(env.settings.retention_days) * DAY_MS)
        / DAY_MS;
    let keep_from_ms = keep_from_day * DAY_MS;
    retention::purge_before(env.kv, keep_from_day, PURGE_ITEMS_PER_TICK, |day, items| {
        let mut touched: Vec<SubscriptionId> = Vec::new();
        for item in items {
            // An idempotency record's key, listed on the day it was claimed; else an event.
            if item.starts_with(keys::IDEMPOTENCY_PREFIX) {
                idempotency::purge(env.kv, env.now_ms, &Key::from_stored(item.as_str()))?;
                continue;
            }
            // A replay job's record, listed on the day it finished.
            if item.starts_with(keys::REPLAY_PREFIX) {
                env.kv.delete(&Key::from_stored(item.as_str()))?;
                continue;
            }
            // An event: its id, and its load id's index key of that day (`loads`).
            if let Some(key) = crate::loads::purge_key(day, item) {
                env.kv.delete(&key)?;
            }
            let event_id = EventId::trusted(crate::loads::parse_retention_item(item).0);
            if let Some(bytes) = env.kv.get(&keys::event(&event_id))? {
                let event = EventRecord::decode(&bytes)?;
                for sub in event.all_subscriptions() {
                    env.kv
                        .delete(&keys::delivery(&delivery_id(&event_id, sub)))?;
                    touched.push(sub.clone());
                }
                // Each subscription once, in id order (a set, as small as the tree was).
                sort(&mut touched);
                touched.dedup();
            }
            env.kv.delete(&keys::event_body(&event_id))?;
            env.kv.delete(&keys::event(&event_id))?;
        }
        // Then the histories that listed what was just purged.
        let mut expired_budget = TRIM_EXPIRED_PER_TICK;
        for sub in &touched {
            trim_history(env.kv, sub, keep_from_ms, &mut expired_budget)?;
        }
        Ok(())
    })
}
