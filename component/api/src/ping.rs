//! Test deliveries through the API: `POST /v1/webhooks/{id}/test` (the owner, for an active
//! or disabled subscription, so a receiver can be checked before an enable) and
//! `POST /internal/v1/subscriptions/{id}/test` (the operator, any client's). Each sends one
//! signed `webhook.ping` now and answers 200 with how the receiver answered, whatever it
//! answered: the request succeeded even if the receiver did not (`succeeded`, `statusCode`,
//! `durationMs`, `error`, `errorClass`). Nothing is stored and nothing is counted.

use crate::ctx::Ctx;
use edgehook_delivery as delivery;
use edgehook_model::error::ApiError;
use edgehook_model::http::Response;
use edgehook_model::ids::ClientId;
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::{self as subscriptions, Status, Subscription};

/// `POST /v1/webhooks/{id}/test`: the caller's subscription, active or disabled (a deleted
/// one, or another client's, is 404).
pub fn partner<K: Kv>(
    cx: &Ctx<'_, K>,
    id: &str,
    client_id: &ClientId,
) -> Result<Response, ApiError> {
    let sub = subscriptions::owned(cx.env, &crate::ctx::subscription_id(id)?, client_id)?;
    Ok(send(cx, &sub))
}

/// `POST /internal/v1/subscriptions/{id}/test`: any client's subscription but a deleted one
/// (409: its secret is erased, nothing can sign for it).
pub fn operator<K: Kv>(cx: &Ctx<'_, K>, id: &str) -> Result<Response, ApiError> {
    let not_found = || ApiError::not_found("Subscription");
    let sub =
        subscriptions::load(cx.env, &crate::ctx::subscription_id(id)?)?.ok_or_else(not_found)?;
    match (sub.status, sub.disabled_reason.as_deref()) {
        (Status::Pending, _) => Err(not_found()),
        (Status::Disabled, Some(subscriptions::DELETED)) => Err(ApiError::new(
            409,
            "subscription_deleted",
            "The subscription was deleted by its owner: its secret is erased, so nothing can be sent to it.",
        )),
        _ => Ok(send(cx, &sub)),
    }
}

fn send<K: Kv>(cx: &Ctx<'_, K>, sub: &Subscription) -> Response {
    let ping = delivery::ping(cx.env, cx.sender, sub);
    cx.data(200, ping.view(sub))
}
