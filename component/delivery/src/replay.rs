//! Replay: a finished (or skipped) delivery re-run under the same id, its first attempt due
//! now.

use crate::history::load;
use crate::queue::{enqueue, second_of};
use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_records::delivery::{Delivery, Status};
use edgehook_storage::keys::{self};
use edgehook_storage::kv::{Kv, Update, update};
use edgehook_subscriptions::{self as subscriptions, Status as SubStatus};
use std::collections::BTreeMap;

/// Re-runs a finished delivery: same id, body and event; fresh timestamps and signatures;
/// up to [`MAX_ATTEMPTS`](crate::retry::MAX_ATTEMPTS) attempts again, the first due now.
pub fn replay<K: Kv>(env: &Env<'_, K>, id: &str) -> Result<Delivery, ApiError> {
    let d = load(env, id)?.ok_or_else(|| ApiError::not_found("Delivery"))?;
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
    let mut queue = BTreeMap::new();
    queue.insert(second_of(now), vec![id.to_owned()]);
    enqueue(env.kv, &queue, None)?;
    let replayed = update(env.kv, &keys::delivery(id), |cur| {
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
