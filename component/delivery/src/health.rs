//! Subscription health: the failure streak, disabling (after a streak, on `410 Gone`, by an operator), enabling, the notices and probes each starts, and cancelling what a disabled subscription still has pending.

use crate::alert;
use crate::history::history_log;
use crate::{notify, timers};
use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::ids::{ClientId, DeliveryId, SubscriptionId};
use edgehook_records::delivery::{Delivery, Status};
use edgehook_storage::applog::Entry;
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, Update, update};
use edgehook_subscriptions::{self as subscriptions, Status as SubStatus, Subscription};

/// How far back a disable looks for pending deliveries to cancel.
const CANCEL_LOOKBACK: u64 = 2048;

/// Resets (success) or extends (a delivery ended failed) a subscription's failure streak,
/// disabling it when the streak reaches the configured limit.
pub(crate) fn record_streak<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &SubscriptionId,
    success: bool,
) -> Result<(), ApiError> {
    let limit = env.settings.disable_after_failures;
    let reached = update(env.kv, &keys::subscription(sub_id), &mut |cur| {
        let Some(bytes) = cur else {
            return Ok(Update::Keep(false));
        };
        let mut sub = Subscription::decode(bytes)?;
        if sub.status != SubStatus::Active {
            return Ok(Update::Keep(false));
        }
        if success {
            if sub.consecutive_failures == 0 {
                return Ok(Update::Keep(false));
            }
            sub.consecutive_failures = 0;
        } else {
            sub.consecutive_failures += 1;
        }
        let reached = sub.consecutive_failures >= limit;
        Ok(Update::Write(sub.encode(), reached))
    })?;
    if reached {
        disable(env, sub_id, timers::REPEATED_FAILURES)?;
    }
    Ok(())
}

/// Disables a subscription (any owner) and cancels its pending deliveries.
pub fn disable<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &SubscriptionId,
    reason: &str,
) -> Result<Option<Subscription>, ApiError> {
    let sub = subscriptions::disable(env, sub_id, None, reason)?;
    if let Some(sub) = &sub {
        // Committed; deliveries this misses are cancelled when they come due.
        env.best_effort(
            "cancel on disable (delivery records)",
            cancel_pending(env, sub_id),
        );
        if reason != subscriptions::DELETED {
            alert::raise(env, alert::SUBSCRIPTION_DISABLED, sub);
            notify::send(env, alert::SUBSCRIPTION_DISABLED, sub, reason);
            timers::schedule_first_probe(env, sub, reason);
        }
    }
    Ok(sub)
}

/// Enables a disabled subscription again (its owner's, if `client_id` is given; see
/// [`subscriptions::enable`]), and raises `subscription.enabled` when it was disabled: to
/// the operator, and to the owner's notification endpoint (reason `owner` or `operator`).
pub fn enable<K: Kv>(
    env: &Env<'_, K>,
    id: &SubscriptionId,
    client_id: Option<&ClientId>,
) -> Result<Option<subscriptions::Enabled>, ApiError> {
    let reason = match client_id {
        Some(_) => "owner",
        None => "operator",
    };
    enable_because(env, id, client_id, reason)
}

/// [`enable`], the partner's notice giving `reason`.
pub(crate) fn enable_because<K: Kv>(
    env: &Env<'_, K>,
    id: &SubscriptionId,
    client_id: Option<&ClientId>,
    reason: &str,
) -> Result<Option<subscriptions::Enabled>, ApiError> {
    let enabled = subscriptions::enable(env, id, client_id)?;
    if let Some(subscriptions::Enabled::Now(sub)) = &enabled {
        alert::raise(env, alert::SUBSCRIPTION_ENABLED, sub);
        notify::send(env, alert::SUBSCRIPTION_ENABLED, sub, reason);
    }
    Ok(enabled)
}

/// Marks the subscription's pending deliveries cancelled (the recent ones: older ones have
/// long finished). Deliveries this misses are cancelled when they come due.
pub fn cancel_pending<K: Kv>(env: &Env<'_, K>, sub_id: &SubscriptionId) -> Result<u32, ApiError> {
    let log = history_log(sub_id);
    let len = log.len(env.kv)?;
    let entries: Vec<Entry<DeliveryId>> =
        log.read_ids(env.kv, len.saturating_sub(CANCEL_LOOKBACK), usize::MAX)?;
    let keys: Vec<Key> = entries.iter().map(|e| keys::delivery(&e.item)).collect();
    let now = env.now_ms;
    let mut cancelled = 0;
    for (key, value) in keys.iter().zip(env.kv.get_many(&keys)?) {
        let pending = value
            .and_then(|b| Delivery::decode(&b).ok())
            .is_some_and(|d| d.status == Status::Pending && d.lease_until.is_none_or(|u| u <= now));
        if !pending {
            continue;
        }
        let done = update(env.kv, key, &mut |cur| {
            let Some(bytes) = cur else {
                return Ok(Update::Keep(false));
            };
            let mut d: Delivery = Delivery::decode(bytes).map_err(ApiError::internal)?;
            if d.status != Status::Pending || d.lease_until.is_some_and(|u| u > now) {
                return Ok(Update::Keep(false));
            }
            d.status = Status::Cancelled;
            d.next_attempt_at = None;
            d.finished_at = Some(now);
            Ok(Update::Write(d.encode(), true))
        })?;
        cancelled += u32::from(done);
    }
    crate::report::TickReport {
        cancelled,
        ..Default::default()
    }
    .emit(env.log, false);
    Ok(cancelled)
}
