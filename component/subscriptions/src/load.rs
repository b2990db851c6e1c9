//! Reading subscription records: one, many at once, an owner's, and an event type's listeners.

use crate::index::fanout_index;
use crate::{ApiError, Env, Kv, Status, Subscription};
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::applog::Entry;
use edgehook_storage::keys::{self, Key};

/// Reads one subscription record.
pub fn load<K: Kv>(
    env: &Env<'_, K>,
    id: &SubscriptionId,
) -> Result<Option<Subscription>, ApiError> {
    match env.kv.get(&keys::subscription(id))? {
        None => Ok(None),
        Some(b) => Subscription::decode(&b).map(Some).map_err(|e| {
            ApiError::internal(format!("subscription {id}: {}", e.log.unwrap_or(e.message)))
        }),
    }
}

/// Reads many subscription records (missing and unreadable ones are `None`).
pub fn load_many<K: Kv>(
    env: &Env<'_, K>,
    ids: &[SubscriptionId],
) -> Result<Vec<Option<Subscription>>, ApiError> {
    let keys: Vec<Key> = ids.iter().map(keys::subscription).collect();
    Ok(env
        .kv
        .get_many(&keys)?
        .into_iter()
        .map(|v| v.and_then(|b| Subscription::decode(&b).ok()))
        .collect())
}

/// Ids of the subscriptions listening to `event_type` (may include ones no longer active),
/// each once: an enable cut short before its commit point may leave a second entry for an
/// id (see [`crate::enable`]).
pub fn fanout_ids<K: Kv>(
    env: &Env<'_, K>,
    event_type: &str,
) -> Result<Vec<SubscriptionId>, ApiError> {
    let entries: Vec<Entry<String>> = fanout_index(event_type).read(env.kv, 0, usize::MAX)?;
    // Not a `BTreeSet` of those seen (several KiB of code for it) nor a hash set (the core
    // uses no hashing with a random seed: its randomness comes through `Env` only).
    let ids: Vec<&str> = entries.iter().map(|e| e.item.as_str()).collect();
    let mut firsts = edgehook_storage::sort::firsts(&ids).into_iter();
    Ok(entries
        .into_iter()
        .filter(|_| firsts.next() == Some(true))
        .map(|e| SubscriptionId::trusted(e.item))
        .collect())
}

/// The caller's active subscription `id`, or 404 (also for other clients' ids).
pub fn owned_active<K: Kv>(
    env: &Env<'_, K>,
    id: &SubscriptionId,
    client_id: &ClientId,
) -> Result<Subscription, ApiError> {
    let not_found = || ApiError::not_found("Subscription");
    match load(env, id)? {
        Some(sub) if sub.client_id == client_id && sub.status == Status::Active => Ok(sub),
        _ => Err(not_found()),
    }
}

/// The caller's subscription `id` as its owner may see it: active or disabled, but not
/// pending (a create in flight) and not deleted (gone for its owner, as Stripe and Svix
/// treat deleted endpoints). Otherwise, and for other clients' ids, 404.
pub fn owned<K: Kv>(
    env: &Env<'_, K>,
    id: &SubscriptionId,
    client_id: &ClientId,
) -> Result<Subscription, ApiError> {
    let not_found = || ApiError::not_found("Subscription");
    match load(env, id)? {
        Some(sub)
            if sub.client_id == client_id
                && (sub.status == Status::Active
                    || (sub.status == Status::Disabled
                        && sub.disabled_reason.as_deref() != Some(crate::DELETED))) =>
        {
            Ok(sub)
        }
        _ => Err(not_found()),
    }
}
