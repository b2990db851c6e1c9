//! The partner API, `/v1/webhooks`: create (with `Idempotency-Key`), list, read, delete,
//! enable.
//! Requests are validated and answered here; the storage is `edgehook-subscriptions`'s.
//!
//! A create takes the idempotency claim first, then the subscription's pending record,
//! then stores the idempotency response, and last commits the subscription (see
//! [`subscriptions::create`]): a retry after any failure either finds nothing or finishes
//! the same subscription.

use crate::ctx::Ctx;
use crate::idempotency::{self, Start, StoredResponse};
use edgehook_delivery as delivery;
use edgehook_model::env::Env;
use edgehook_model::error::{ApiError, FieldError};
use edgehook_model::http::{Request, Response};
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_model::validate;
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::{self as subscriptions, Listed, NewSubscription, Subscription};
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Default page size of list.
pub const DEFAULT_LIMIT: usize = 50;
/// Largest page size of list.
pub const MAX_LIMIT: usize = 100;

/// The fields a create body may have.
const CREATE_FIELDS: [&str; 8] = [
    "url",
    "eventTypes",
    "signatureScheme",
    "headers",
    "ordering",
    "maxInFlight",
    "rateLimit",
    "traceparent",
];

/// Validates a create body. Unknown fields are refused (422 `unknown_field`), so a typo such
/// as `eventType` is caught instead of silently creating a subscription without it. Every
/// problem is reported: unknown fields, the delivery options, `url`, `eventTypes`.
fn validate_create(
    body: &Value,
    policy: validate::TargetPolicy,
) -> Result<NewSubscription, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::validation(vec![FieldError::new(
            "body",
            "invalid_type",
            "the body must be a JSON object with url and eventTypes",
        )]));
    };
    let mut details = unknown_fields(obj);
    let options = delivery_options(obj, &mut details);
    let url = crate::options::target_url(obj.get("url"), policy, &mut details);
    let event_types = match validate::event_types(obj.get("eventTypes")) {
        Ok(t) => Some(t),
        Err(errs) => {
            details.extend(errs);
            None
        }
    };
    match (url, event_types) {
        (Some(url), Some(event_types)) if details.is_empty() => Ok(NewSubscription {
            url,
            event_types,
            options,
        }),
        _ => Err(ApiError::validation(details)),
    }
}

/// A 422 detail for each field a create body does not know.
fn unknown_fields(obj: &Map<String, Value>) -> Vec<FieldError> {
    obj.keys()
        .filter(|key| !CREATE_FIELDS.contains(&key.as_str()))
        .map(|key| {
            FieldError::new(
                key.clone(),
                "unknown_field",
                format!(
                    "unknown field {}; a subscription has url, eventTypes, signatureScheme, headers, ordering, maxInFlight, rateLimit and traceparent",
                    edgehook_model::error::quoted(key)
                ),
            )
        })
        .collect()
}

/// The delivery options of a create body (each absent one its default).
fn delivery_options(
    obj: &Map<String, Value>,
    details: &mut Vec<FieldError>,
) -> subscriptions::DeliveryOptions {
    use crate::options::{MAX_IN_FLIGHT, MAX_RATE, headers, limit, ordering, scheme, traceparent};
    subscriptions::DeliveryOptions {
        scheme: scheme(obj, details).unwrap_or_default(),
        headers: headers(obj, details).unwrap_or_default(),
        ordering: ordering(obj, details).unwrap_or_default(),
        max_in_flight: limit(obj, "maxInFlight", MAX_IN_FLIGHT, details).map_or(0, |n| n as u16),
        rate_limit: limit(obj, "rateLimit", MAX_RATE, details).unwrap_or(0),
        previous_secret: None,
        slow_until: None,
        traceparent: traceparent(obj, details).unwrap_or(false),
    }
}

/// `POST /v1/webhooks`.
pub fn create<K: Kv>(cx: &Ctx<'_, K>, client_id: &ClientId) -> Result<Response, ApiError> {
    let body = crate::body::json(cx.req)?;
    let input = validate_create(&body, cx.env.settings.target_policy())?;
    let idempotency_key = match cx.req.headers.iter().find(|(n, _)| n == "idempotency-key") {
        None => None,
        Some((_, raw)) => {
            Some(String::from_utf8(raw.clone()).map_err(|_| idempotency::invalid_key())?)
        }
    };
    let claim = match &idempotency_key {
        None => None,
        Some(key) => {
            let mut h = Sha256::new();
            h.update(b"POST /v1/webhooks\n");
            h.update(&cx.req.body);
            match idempotency::begin(
                cx.env,
                client_id,
                key,
                &edgehook_model::ids::hex(&h.finalize()),
            )? {
                Start::Replay(stored) => return replay(cx, stored),
                Start::Fresh(claim) => Some(claim),
            }
        }
    };
    // A failure gives the claim up only until the response is stored (in `create_fresh`).
    let (data, id) = create_fresh(cx.env, input, client_id, claim.as_ref())?;
    Ok(created_response(
        201,
        &data,
        Some(location(&id)),
        cx.request_id,
        false,
    ))
}

/// The `data` of a create's 201: the partner view and, this once, the signing secret. A
/// replay writes the same from the subscription record.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Created<'a> {
    created_at: u64,
    event_types: &'a [String],
    header_names: Vec<&'a str>,
    id: &'a str,
    max_in_flight: Option<u16>,
    ordering: &'static str,
    rate_limit: Option<u32>,
    signature_scheme: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    signing_secret: Option<&'a str>,
    status: &'static str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    traceparent: bool,
    url: &'a str,
}

/// Creates the subscription; returns the `data` of its 201, written, and its id.
///
/// Under an idempotency `claim`, a failure before the response is stored releases the
/// claim, so a retry need not wait for it to go stale. Once [`idempotency::finish`] has
/// stored it, the key answers with this subscription whatever fails after (a retry's replay
/// finishes the create), so it is never released then.
fn create_fresh<K: Kv>(
    env: &Env<'_, K>,
    input: NewSubscription,
    client_id: &ClientId,
    claim: Option<&idempotency::Claim>,
) -> Result<(Vec<u8>, SubscriptionId), ApiError> {
    let made = subscriptions::create_pending(env, input, client_id).and_then(|(sub, pending)| {
        let data = created_data(env, &sub)?;
        Ok((sub, pending, data))
    });
    let (sub, pending, data) = match made {
        Ok(made) => made,
        Err(e) => {
            if let Some(claim) = claim {
                idempotency::release(env, claim);
            }
            return Err(e);
        }
    };
    let id = sub.id.clone();
    if let Some(claim) = claim {
        // The replay writes its data from the subscription record: the record is the only
        // place the secret is stored, and the idempotency record keeps none of it.
        let stored = StoredResponse {
            status: 201,
            location: Some(location(&id)),
            subscription_id: id.clone(),
            created: Some(created_digest(env, &sub)?),
        };
        if let Err(e) = idempotency::finish(env, claim, stored) {
            // The swap may have applied though the store reported an error: release
            // touches the record only if it still holds our claim, not the response.
            idempotency::release(env, claim);
            return Err(e);
        }
    }
    subscriptions::activate(env, &id, Some((&sub, &pending)))?;
    Ok((data, id))
}

/// 409 `subscription_deleted`: an idempotent create replayed after its subscription was
/// deleted. Its secret is not shown again, and the key cannot make another one.
fn subscription_deleted() -> ApiError {
    ApiError::new(
        409,
        "subscription_deleted",
        "The subscription this Idempotency-Key created has been deleted; use a new key to create another.",
    )
}

/// The `data` of the 201 that created `sub`, written: its status as it is now (`active`,
/// or `disabled` for a replay after a disable other than a delete), its secret opened.
fn created_data<K: Kv>(env: &Env<'_, K>, sub: &Subscription) -> Result<Vec<u8>, ApiError> {
    let secret = (sub.signing_secret)
        .open(&env.settings.seal, &sub.seal_context())
        .map_err(ApiError::internal)?;
    created_json(sub, Some(&secret), None)
}

/// What an idempotent create's replay compares to tell whether its subscription changed
/// since: the SHA-256 (hex) of the 201's `data` with its secret, its status left out (a
/// replay shows the status as it is now). The secret is 32 random bytes, so the digest says
/// nothing of it; a rotation, a new scheme, other headers, URL or event types all change it.
fn created_digest<K: Kv>(env: &Env<'_, K>, sub: &Subscription) -> Result<String, ApiError> {
    let secret = (sub.signing_secret)
        .open(&env.settings.seal, &sub.seal_context())
        .map_err(ApiError::internal)?;
    let data = created_json(sub, Some(&secret), Some(""))?;
    Ok(edgehook_model::ids::hex(&Sha256::digest(&data)))
}

/// The 201's `data` for `sub`, with `secret` if given, and its status (as it is now unless
/// `status` says otherwise).
fn created_json(
    sub: &Subscription,
    secret: Option<&str>,
    status: Option<&'static str>,
) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(&Created {
        created_at: sub.created_at,
        event_types: &sub.event_types,
        header_names: sub
            .options
            .headers
            .iter()
            .map(|(n, _)| n.as_str())
            .collect(),
        id: &sub.id,
        max_in_flight: (sub.options.max_in_flight > 0).then_some(sub.options.max_in_flight),
        ordering: sub.options.ordering.name(),
        rate_limit: (sub.options.rate_limit > 0).then_some(sub.options.rate_limit),
        signature_scheme: sub.options.scheme.name(),
        signing_secret: secret,
        status: status.unwrap_or(match sub.status {
            subscriptions::Status::Disabled => "disabled",
            _ => "active",
        }),
        traceparent: sub.options.traceparent,
        url: &sub.url,
    })
    .map_err(ApiError::internal)
}

/// The `Location` of a subscription.
fn location(id: &str) -> String {
    format!("/v1/webhooks/{id}")
}

/// Answers a retried create from its stored response, finishing the create if the first
/// attempt stored its response but failed before the commit point. Once the subscription
/// has changed since (a rotated secret, a new scheme, other headers, URL or event types)
/// the replay shows it as it is now without a secret: a replay never hands out a secret
/// other than the one the first answer gave, nor a configuration it did not make.
fn replay<K: Kv>(cx: &Ctx<'_, K>, stored: StoredResponse) -> Result<Response, ApiError> {
    let sub = subscriptions::activate(cx.env, &stored.subscription_id, None)?;
    // Never the secret of a deleted subscription, nor "active" for a disabled one.
    if sub.disabled_reason.as_deref() == Some(subscriptions::DELETED) {
        return Err(subscription_deleted());
    }
    let unchanged = stored.created.as_ref() == Some(&created_digest(cx.env, &sub)?);
    let data = match unchanged {
        true => created_data(cx.env, &sub)?,
        false => created_json(&sub, None, None)?,
    };
    // The stored response as it was, its `Location` included.
    Ok(created_response(
        stored.status,
        &data,
        stored.location,
        cx.request_id,
        true,
    ))
}

fn created_response(
    status: u16,
    data: &[u8],
    location: Option<String>,
    request_id: &str,
    replayed: bool,
) -> Response {
    let mut resp = Response::data_json(status, data, request_id);
    if let Some(location) = location {
        resp = resp.with_header("location", location);
    }
    if replayed {
        resp = resp.with_header("idempotent-replayed", "true");
    }
    resp
}

/// Decodes a list cursor (`cur_<hex seq>`): hex digits only (`from_str_radix` alone would
/// also take a leading `+`).
fn parse_cursor(cursor: &str) -> Option<u64> {
    cursor
        .strip_prefix("cur_")
        .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|h| u64::from_str_radix(h, 16).ok())
}

/// The `limit` and `cursor` of a list request: `(limit, the index number to resume after)`.
pub fn list_params(req: &Request) -> Result<(usize, u64), ApiError> {
    let mut details = Vec::new();
    let limit = match req.query_param("limit") {
        Ok(None) => DEFAULT_LIMIT,
        Ok(Some(l)) => match l.parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) && l.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => {
                details.push(FieldError::new(
                    "limit",
                    "out_of_range",
                    format!("limit must be a whole number from 1 to {MAX_LIMIT}"),
                ));
                DEFAULT_LIMIT
            }
        },
        Err(_) => {
            details.push(FieldError::new(
                "limit",
                "invalid",
                "limit is not valid percent-encoding",
            ));
            DEFAULT_LIMIT
        }
    };
    let after = match req.query_param("cursor") {
        Ok(None) => 0,
        Ok(Some(c)) => parse_cursor(&c).unwrap_or_else(|| {
            details.push(FieldError::new(
                "cursor",
                "invalid_cursor",
                "cursor must be a nextCursor value returned by list",
            ));
            0
        }),
        Err(_) => {
            details.push(FieldError::new(
                "cursor",
                "invalid_cursor",
                "cursor is not valid percent-encoding",
            ));
            0
        }
    };
    if details.is_empty() {
        Ok((limit, after))
    } else {
        Err(ApiError::validation(details))
    }
}

/// `GET /v1/webhooks/{id}`.
pub fn get<K: Kv>(cx: &Ctx<'_, K>, id: &str, client_id: &ClientId) -> Result<Response, ApiError> {
    let sub = subscriptions::owned(cx.env, &crate::ctx::subscription_id(id)?, client_id)?;
    let last = delivery::last_attempt(cx.env, &sub.id)?;
    let mut detail = subscriptions::partner_detail(&sub);
    if let Some((delivery_id, a)) = &last {
        detail = detail.with_last_attempt(subscriptions::LastAttempt {
            at: a.started_at,
            delivery_id,
            duration_ms: a.latency_ms,
            error_class: edgehook_records::delivery::error_class(a.status_code, a.error.as_deref()),
            status_code: a.status_code,
            succeeded: a.succeeded,
        });
    }
    Ok(cx.data(200, detail))
}

/// `POST /v1/webhooks/{id}/enable`: makes the caller's disabled subscription active again
/// (its failure streak reset), under the cap; an active one is answered as it is (200, no
/// change). A deleted one is a 404, as for read.
pub fn enable<K: Kv>(
    cx: &Ctx<'_, K>,
    id: &str,
    client_id: &ClientId,
) -> Result<Response, ApiError> {
    // The body is read before anything changes: a bad one enables nothing.
    let replay_since = crate::replays::replay_since(cx.req)?;
    match delivery::enable(cx.env, &crate::ctx::subscription_id(id)?, Some(client_id))? {
        Some(subscriptions::Enabled::Now(sub) | subscriptions::Enabled::Already(sub)) => {
            let data = subscriptions::partner_detail(&sub);
            let Some(since) = replay_since else {
                return Ok(cx.data(200, data));
            };
            let job = crate::replays::after_enable(cx.env, &sub.id, Some(client_id), since)?;
            #[derive(Serialize)]
            #[serde(rename_all = "camelCase")]
            struct Enabled<'a> {
                data: subscriptions::PartnerDetail<'a>,
                replay: crate::replays::JobView<'a>,
                request_id: &'a str,
            }
            let body = Enabled {
                data,
                replay: crate::replays::view(&job),
                request_id: cx.request_id,
            };
            Ok(Response::json(200, &body))
        }
        Some(subscriptions::Enabled::Deleted(_)) | None => Err(ApiError::not_found("Subscription")),
    }
}

/// `DELETE /v1/webhooks/{id}`: disables the subscription (reason `deleted`); the record and
/// its delivery history stay.
pub fn delete<K: Kv>(
    cx: &Ctx<'_, K>,
    id: &str,
    client_id: &ClientId,
) -> Result<Response, ApiError> {
    match subscriptions::disable(
        cx.env,
        &crate::ctx::subscription_id(id)?,
        Some(client_id),
        subscriptions::DELETED,
    )? {
        Some(sub) => {
            // Committed; deliveries this misses are cancelled when they come due.
            let cancelled = delivery::cancel_pending(cx.env, &sub.id);
            cx.env
                .best_effort("cancel on delete (delivery records)", cancelled);
            #[derive(Serialize)]
            struct Deleted<'a> {
                id: &'a str,
                status: &'static str,
            }
            let deleted = Deleted {
                id: &sub.id,
                status: "disabled",
            };
            Ok(cx.data(200, deleted))
        }
        None => Err(ApiError::not_found("Subscription")),
    }
}

/// Whether a list asks for `status=disabled` (`status=active`, the default, or nothing:
/// `false`); anything else is a 422 naming `status`.
pub fn wants_disabled(req: &Request) -> Result<bool, ApiError> {
    match req.query_param("status") {
        Ok(None) => Ok(false),
        Ok(Some(s)) if s == "active" => Ok(false),
        Ok(Some(s)) if s == "disabled" => Ok(true),
        _ => Err(ApiError::validation(vec![FieldError::new(
            "status",
            "invalid_status",
            "status must be active or disabled",
        )])),
    }
}

/// A list page's JSON: `{"data": [...], "hasMore", "nextCursor", "requestId"}`.
pub fn page_json<T: Serialize>(
    data: &[T],
    has_more: bool,
    last_seq: Option<u64>,
    request_id: &str,
) -> Response {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Page<'a, T> {
        data: &'a [T],
        has_more: bool,
        next_cursor: Option<String>,
        request_id: &'a str,
    }
    let next_cursor = match last_seq {
        Some(seq) if has_more => Some(format!("cur_{seq:x}")),
        _ => None,
    };
    Response::json(
        200,
        &Page {
            data,
            has_more,
            next_cursor,
            request_id,
        },
    )
}

/// `GET /v1/webhooks`: the caller's active subscriptions in creation order, paged (the
/// items as the client index stores them; see [`subscriptions::list`]); with
/// `status=disabled`, its disabled ones (not the deleted) in the order they were disabled,
/// each as a read shows it.
pub fn list<K: Kv>(cx: &Ctx<'_, K>, client_id: &ClientId) -> Result<Response, ApiError> {
    let (limit, after) = list_params(cx.req)?;
    if wants_disabled(cx.req)? {
        let (found, has_more) =
            subscriptions::disabled_page(cx.env, Some(client_id), limit, after)?;
        let data: Vec<_> = found
            .iter()
            .map(|(_, s)| subscriptions::partner_detail(s))
            .collect();
        let last = found.last().map(|(seq, _)| *seq);
        return Ok(page_json(&data, has_more, last, cx.request_id));
    }
    let (found, has_more) = subscriptions::list_page(cx.env, client_id, limit, after)?;
    // `{"data": [...], "hasMore", "nextCursor", "requestId"}`, the items as stored.
    let items = found.iter().map(Listed::view);
    let mut body = Vec::with_capacity(64 + items.clone().map(|v| v.len() + 1).sum::<usize>());
    body.extend_from_slice(b"{\"data\":[");
    for (i, view) in items.enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(view);
    }
    body.extend_from_slice(b"],\"hasMore\":");
    body.extend_from_slice(if has_more { b"true" } else { b"false" });
    body.extend_from_slice(b",\"nextCursor\":");
    match found.last() {
        Some(last) if has_more => {
            body.extend_from_slice(format!("\"cur_{:x}\"", last.seq).as_bytes())
        }
        _ => body.extend_from_slice(b"null"),
    }
    body.extend_from_slice(b",\"requestId\":");
    serde_json::to_writer(&mut body, cx.request_id).map_err(ApiError::internal)?;
    body.push(b'}');
    Ok(Response::json_bytes(200, body))
}

#[cfg(test)]
mod tests;
