//! `/internal/v1/secrets/reseal`: the operator's pass that seals every stored signing
//! secret under the current key, a bounded batch a call (the `edgehook reseal` command
//! calls it until the pass is done). After a key rotation the pass ends with nothing left
//! under the previous key, which can then be dropped; once a key is first set on a store of
//! plain secrets, it seals them all.

use crate::body;
use crate::ctx::Ctx;
use edgehook_model::error::ApiError;
use edgehook_model::http::Response;
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::{ResealCursor, reseal_batch};
use serde::Serialize;

/// Records a call looks at when the body names no `limit`.
pub const DEFAULT_LIMIT: u64 = 200;
/// The most records one call looks at.
pub const MAX_LIMIT: u64 = 1000;

/// What a call did, and where the next starts.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Batch {
    scanned: u32,
    resealed: u32,
    unreadable: Vec<String>,
    unreadable_notification_endpoints: Vec<String>,
    next_cursor: Option<String>,
    done: bool,
}

/// `POST /internal/v1/secrets/reseal` (`{"cursor": "...", "limit": n}`, both optional):
/// seals the secrets of up to `limit` subscriptions from `cursor` (the start without one)
/// (and then of up to `limit` notification endpoints) under `seal_key`. Without a
/// `seal_key` set: 409 `seal_key_missing`. The answer counts what was looked at and
/// re-sealed, names the subscriptions (and the clients whose notification endpoint) whose
/// secret opens under neither key (each also a `secret.unreadable` log line), and gives
/// `nextCursor`, `null` once the pass is done.
pub fn reseal<K: Kv>(cx: &Ctx<'_, K>) -> Result<Response, ApiError> {
    let obj = body::optional_object(cx.req, &["cursor", "limit"])?.unwrap_or_default();
    let from = match obj.get("cursor") {
        None => ResealCursor::default(),
        Some(v) => v.as_str().and_then(ResealCursor::parse).ok_or_else(|| {
            body::invalid(
                "cursor",
                "invalid_cursor",
                "cursor must be a nextCursor an earlier call answered",
            )
        })?,
    };
    let limit = match obj.get("limit") {
        None => DEFAULT_LIMIT,
        Some(v) => body::whole_number(v)
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                body::invalid(
                    "limit",
                    "out_of_range",
                    "limit is a whole number from 1 to 1000",
                )
            })?,
    };
    if cx.env.settings.seal.current.is_none() {
        return Err(ApiError::new(
            409,
            "seal_key_missing",
            "No seal_key is set: there is no key to seal secrets under.",
        ));
    }
    let batch = reseal_batch(cx.env, from, limit as usize)?;
    for id in &batch.unreadable {
        edgehook_delivery::attempt::report_unreadable(cx.env, id);
    }
    for client in &batch.unreadable_endpoints {
        cx.env.log.line(&format!(
            "{{\"type\":\"secret.unreadable\",\"notificationEndpointOf\":{}}}",
            edgehook_model::error::quoted(client)
        ));
        cx.env
            .log
            .event(edgehook_delivery::attempt::UNREADABLE_EVENT);
    }
    Ok(cx.data(
        200,
        Batch {
            scanned: batch.scanned,
            resealed: batch.resealed,
            unreadable: batch.unreadable.iter().map(|id| id.to_string()).collect(),
            unreadable_notification_endpoints: batch
                .unreadable_endpoints
                .iter()
                .map(|c| c.to_string())
                .collect(),
            next_cursor: batch.next.map(ResealCursor::text),
            done: batch.next.is_none(),
        },
    ))
}
