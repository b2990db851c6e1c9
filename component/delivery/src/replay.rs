//! Replay: a finished (or skipped) delivery re-run under the same id, its first attempt due
//! now.

use crate::history::load;
use crate::queue::{enqueue, second_of};
use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::ids::{DeliveryId, SubscriptionId};
use edgehook_records::delivery::{Delivery, Status};
use edgehook_storage::keys::{self};
use edgehook_storage::kv::{Kv, Update, update};
use edgehook_subscriptions::{self as subscriptions, Status as SubStatus};

/// Re-runs a finished delivery: same id, body and event; fresh timestamps and signatures;
/// up to [`MAX_ATTEMPTS`](crate::retry::MAX_ATTEMPTS) attempts again, the first due now.
/// With `of_subscription` (a partner's replay), a delivery of any other subscription is a
/// 404, as if it did not exist.
pub fn replay<K: Kv>(
    env: &Env<'_, K>,
    id: &DeliveryId,
    of_subscription: Option<&SubscriptionId>,
) -> Result<Delivery, ApiError> {
    let d = load(env, id)?
        .filter(|d| of_subscription.is_none_or(|s| s == d.subscription_id))
        .ok_or_else(|| ApiError::not_found("Delivery"))?;
    let sub = subscriptions::load(env, &d.subscription_id)?;
    if sub.as_ref().is_none_or(|s| s.status != SubStatus::Active) {
        return Err(ApiError::conflict(
            "The delivery's subscription is disabled, so it cannot be replayed. Enable it \
             (POST /v1/webhooks/{id}/enable) once the endpoint is fixed, then replay.",
        ));
    }
    if d.status == Status::Pending {
        return Err(ApiError::conflict(
            "The delivery is still in progress; replay it once it has finished.",
        ));
    }
    let now = env.now_ms;
    enqueue(env.kv, &[(second_of(now), vec![id.clone()])], None)?;
    let replayed = update(env.kv, &keys::delivery(id), &mut |cur| {
        let Some(bytes) = cur else {
            return Err(ApiError::not_found("Delivery"));
        };
        let mut d: Delivery = Delivery::decode(bytes).map_err(ApiError::internal)?;
        if d.status == Status::Pending {
            return Err(ApiError::conflict(
                "The delivery is already being replayed.",
            ));
        }
        d.status = Status::Pending;
        d.run += 1;
        d.next_attempt_at = Some(now);
        d.finished_at = None;
        Ok(Update::Write(d.encode(), d))
    })?;
    Ok(replayed)
}

/// How replaying one delivery of a batch ([`replay_batch`]) went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replayed {
    /// A new run is queued (or one already was: the delivery is in progress).
    Queued,
    /// It cannot be replayed: its subscription is not active, or the record is gone.
    Refused,
}

/// Replays many deliveries at once, as [`replay`] does each: their queue entries in one
/// append, each subscription read once, then each record made pending by compare-and-swap.
/// A store failure stops the batch (what was done before stays done: replays are
/// idempotent enough to be tried again, a pending one counts as queued).
pub(crate) fn replay_batch<K: Kv>(
    env: &Env<'_, K>,
    ids: &[DeliveryId],
) -> Result<Vec<Replayed>, ApiError> {
    let now = env.now_ms;
    let record_keys: Vec<_> = ids.iter().map(keys::delivery).collect();
    let records: Vec<Option<Delivery>> = env
        .kv
        .get_many(&record_keys)?
        .into_iter()
        .map(|b| b.and_then(|b| Delivery::decode(&b).ok()))
        .collect();
    let mut sub_ids: Vec<SubscriptionId> = records
        .iter()
        .flatten()
        .map(|d| d.subscription_id.clone())
        .collect();
    edgehook_storage::sort::sort(&mut sub_ids);
    sub_ids.dedup();
    let active: Vec<SubscriptionId> = subscriptions::load_many(env, &sub_ids)?
        .into_iter()
        .flatten()
        .filter(|s| s.status == SubStatus::Active)
        .map(|s| s.id)
        .collect();
    let replayable = |d: &Delivery| active.binary_search(&d.subscription_id).is_ok();
    let queued: Vec<DeliveryId> = records
        .iter()
        .flatten()
        .filter(|d| replayable(d) && d.status != Status::Pending)
        .map(|d| d.id.clone())
        .collect();
    enqueue(env.kv, &[(second_of(now), queued)], None)?;
    let mut outcomes = Vec::with_capacity(ids.len());
    for (key, record) in record_keys.iter().zip(&records) {
        let outcome = match record {
            Some(d) if replayable(d) => update(env.kv, key, &mut |cur| {
                let Some(bytes) = cur else {
                    return Ok(Update::Keep(Replayed::Refused));
                };
                let mut d = Delivery::decode(bytes).map_err(ApiError::internal)?;
                if d.status == Status::Pending {
                    return Ok(Update::Keep(Replayed::Queued));
                }
                d.status = Status::Pending;
                d.run += 1;
                d.next_attempt_at = Some(now);
                d.finished_at = None;
                Ok::<_, ApiError>(Update::Write(d.encode(), Replayed::Queued))
            })?,
            _ => Replayed::Refused,
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}
