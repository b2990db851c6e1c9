//! A subscription's delivery history (an append log of its delivery ids), and reading deliveries.

use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::ids::IdKind;
use edgehook_records::delivery::Delivery;
use edgehook_storage::applog::{AppendLog, Entry};
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::Kv;

pub(crate) fn history_log(subscription_id: &str) -> AppendLog {
    AppendLog::new(keys::subscription_deliveries(subscription_id))
}

/// Reads a delivery record.
pub fn load<K: Kv>(env: &Env<'_, K>, id: &str) -> Result<Option<Delivery>, ApiError> {
    if !IdKind::Delivery.matches(id) {
        return Ok(None);
    }
    match env.kv.get(&keys::delivery(id))? {
        None => Ok(None),
        Some(b) => Delivery::decode(&b).map(Some).map_err(ApiError::internal),
    }
}

/// A page of a subscription's deliveries, oldest first, after history position `after`.
pub fn history<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &str,
    after: u64,
    limit: usize,
) -> Result<(Vec<(u64, Delivery)>, bool), ApiError> {
    let entries: Vec<Entry<String>> = history_log(sub_id).read(env.kv, after, limit + 1)?;
    let has_more = entries.len() > limit;
    let entries = &entries[..entries.len().min(limit)];
    let keys: Vec<Key> = entries.iter().map(|e| keys::delivery(&e.item)).collect();
    let mut out: Vec<(u64, Delivery)> = Vec::new();
    for (e, v) in entries.iter().zip(env.kv.get_many(&keys)?) {
        if let Some(d) = v.and_then(|b| Delivery::decode(&b).ok()) {
            // A fan-out retried after a failure may have listed a delivery twice.
            if !out.iter().any(|(_, seen)| seen.id == d.id) {
                out.push((e.seq, d));
            }
        }
    }
    Ok((out, has_more))
}
