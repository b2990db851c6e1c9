//! The operator API (`/internal/v1/...`): authenticated with the admin token from
//! `wasi:config` (`admin_token`); of the API keys only an ingest key, on event ingest (the
//! router decides that). The key routes are [`crate::keys`]'s.

use crate::auth::{self, bearer};
use crate::ctx::Ctx;
use crate::idempotency;
use crate::partner;
use edgehook_delivery as delivery;
use edgehook_model::env::Env;
use edgehook_model::error::{ApiError, FieldError};
use edgehook_model::events::{EVENT_TYPES, PublishError};
use edgehook_model::http::{Request, Response};
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::{self as subscriptions, Subscription};
use serde::Serialize;
use serde_json::Value;

/// Accepts the request only if it carries the configured admin token (compared in constant
/// time). With no admin token configured, every operator call is refused.
pub fn authorize<K: Kv>(env: &Env<'_, K>, req: &Request) -> Result<(), ApiError> {
    let expected = env
        .settings
        .admin_token
        .as_deref()
        .ok_or_else(ApiError::unauthorized_operator)?;
    let given = bearer(req).ok_or_else(ApiError::unauthorized_operator)?;
    if auth::secret_eq(given, expected) {
        Ok(())
    } else {
        Err(ApiError::unauthorized_operator())
    }
}

/// `GET /internal/v1/settings`: the settings this instance runs with (the admin token is
/// never shown, only whether it is set).
pub fn settings<K: Kv>(cx: &Ctx<'_, K>) -> Response {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct View {
        allow_http: bool,
        allow_private_targets: bool,
        attempt_timeout_ms: u64,
        disable_after_failures: u32,
        max_concurrency: u32,
        rate_limit_per_minute: u32,
        retention_days: u32,
        subscription_limit: u32,
    }
    let s = cx.env.settings;
    let view = View {
        allow_http: s.allow_http,
        allow_private_targets: s.allow_private_targets,
        attempt_timeout_ms: s.attempt_timeout_ms,
        disable_after_failures: s.disable_after_failures,
        max_concurrency: s.max_concurrency,
        rate_limit_per_minute: s.rate_limit_per_minute,
        retention_days: s.retention_days,
        subscription_limit: s.subscription_limit,
    };
    cx.data(200, view)
}

/// `POST /internal/v1/events`: ingest one load event. The body is the raw load JSON, the
/// event type is the `X-Service-Event` header, `Idempotency-Key` makes retries safe.
/// Answers 202 with the event id, and names the deliveries to run at once.
pub fn ingest<K: Kv>(cx: &Ctx<'_, K>) -> Result<(Response, delivery::RunNow), ApiError> {
    let content_type = cx.req.header_str("content-type").unwrap_or("");
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::unsupported_media_type());
    }
    let Some(event_type) = cx.req.header_str("x-service-event") else {
        return Err(ApiError::validation(vec![FieldError::new(
            "X-Service-Event",
            "required",
            format!(
                "X-Service-Event is required; one of {}",
                edgehook_model::error::comma_list(EVENT_TYPES.iter().copied())
            ),
        )]));
    };
    let key = match cx.req.headers.iter().find(|(n, _)| n == "idempotency-key") {
        None => None,
        Some((_, raw)) => {
            let key = std::str::from_utf8(raw).map_err(|_| idempotency::invalid_key())?;
            idempotency::check_key(key)?;
            Some(key)
        }
    };
    match delivery::publish_prepared(cx.env, event_type, &cx.req.body, key) {
        Ok((receipt, prepared)) => {
            /// Keys sorted, as `serde_json::json!` writes them.
            #[derive(serde::Serialize)]
            #[serde(rename_all = "camelCase")]
            struct Accepted<'a> {
                deliveries: u32,
                event_id: &'a str,
                event_type: &'a str,
            }
            let accepted = Accepted {
                deliveries: receipt.deliveries,
                event_id: &receipt.event_id,
                event_type,
            };
            let resp = cx.data(202, accepted);
            let resp = if receipt.replayed {
                resp.with_header("idempotent-replayed", "true")
            } else {
                resp
            };
            let run = match prepared {
                Some(p) => delivery::RunNow::Prepared(Box::new(p)),
                None => delivery::RunNow::Event(receipt.event_id),
            };
            Ok((resp, run))
        }

        Err(PublishError::UnknownEventType(t)) => Err(ApiError::validation(vec![FieldError::new(
            "X-Service-Event",
            "unknown_event_type",
            format!(
                "unknown event type {}; valid event types are {}",
                edgehook_model::error::quoted(&t),
                edgehook_model::error::comma_list(EVENT_TYPES.iter().copied())
            ),
        )])),
        Err(PublishError::InvalidLoad(m)) => Err(ApiError::validation(vec![FieldError::new(
            "body",
            "invalid_load",
            m,
        )])),
        Err(PublishError::Conflict(m)) => Err(ApiError::idempotency_conflict(m)),
        Err(PublishError::StoreUnavailable(m)) => Err(ApiError::store_unavailable(m)),
    }
}

/// `POST /internal/v1/tick`: run due attempts now (for hosts without a timer, e.g. a cron).
pub fn tick<K: Kv>(cx: &Ctx<'_, K>) -> Response {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct View {
        attempted: u32,
        failed: u32,
        next_due_ms: Option<u64>,
        succeeded: u32,
    }
    let r = delivery::tick(cx.env, cx.sender);
    let view = View {
        attempted: r.attempted,
        failed: r.failed,
        next_due_ms: r.next_due_ms,
        succeeded: r.succeeded,
    };
    cx.data(200, view)
}

fn subscription_any<K: Kv>(env: &Env<'_, K>, id: &str) -> Result<Subscription, ApiError> {
    subscriptions::load(env, &crate::ctx::subscription_id(id)?)?
        .ok_or_else(|| ApiError::not_found("Subscription"))
}

/// `GET /internal/v1/subscriptions?status=disabled`: every client's disabled subscriptions
/// (deleted ones included), in the order they were disabled, with their reason and since
/// when; with `clientId`, that client's (deleted ones not: its own disabled list); paged like
/// the partner list (`limit`, `cursor`). `status=active` needs a `clientId`: a client's
/// active subscriptions in creation order (there is no index of every active subscription
/// across clients; each client's is its list).
pub fn subscriptions_list<K: Kv>(cx: &Ctx<'_, K>) -> Result<Response, ApiError> {
    let (limit, after) = partner::list_params(cx.req)?;
    let client = match cx.req.query_param("clientId") {
        Ok(None) => None,
        Ok(Some(c)) if ClientId::parse(&c).is_some() => ClientId::parse(&c),
        _ => return Err(crate::keys::invalid_client_id()),
    };
    let active = match cx.req.query_param("status") {
        Ok(None) => false,
        Ok(Some(s)) if s == "disabled" => false,
        Ok(Some(s)) if s == "active" && client.is_some() => true,
        _ => {
            return Err(ApiError::validation(vec![FieldError::new(
                "status",
                "invalid_status",
                "status must be disabled, or active with a clientId (active subscriptions are listed per client)",
            )]));
        }
    };
    let (records, has_more, last) = match (active, client.as_ref()) {
        (true, Some(client)) => {
            let (found, has_more) = subscriptions::list_page(cx.env, client, limit, after)?;
            let ids: Vec<SubscriptionId> = found
                .iter()
                .filter_map(|l| l.id().map(SubscriptionId::trusted))
                .collect();
            let records: Vec<_> = subscriptions::load_many(cx.env, &ids)?
                .into_iter()
                .flatten()
                .filter(|s| s.status == subscriptions::Status::Active)
                .collect();
            (records, has_more, found.last().map(|l| l.seq))
        }
        (_, client) => {
            let (found, has_more) = subscriptions::disabled_page(cx.env, client, limit, after)?;
            let last = found.last().map(|(seq, _)| *seq);
            (found.into_iter().map(|(_, s)| s).collect(), has_more, last)
        }
    };
    let data: Vec<_> = records.iter().map(|s| s.operator_view()).collect();
    Ok(partner::page_json(&data, has_more, last, cx.request_id))
}

/// `GET /internal/v1/subscriptions/{id}`: any client's subscription, with its state and
/// disable reason (never its secret).
pub fn subscription<K: Kv>(cx: &Ctx<'_, K>, id: &str) -> Result<Response, ApiError> {
    let sub = subscription_any(cx.env, id)?;
    Ok(cx.data(200, sub.operator_view()))
}

/// `POST /internal/v1/subscriptions/{id}/disable`: disables it and cancels its pending
/// deliveries. The body is empty (reason `operator`) or `{"reason": "..."}`: a reason code
/// of 1 to 64 characters `a-z`, `0-9`, `_`, other than `deleted` (a partner's own, which no
/// enable undoes). An already disabled one is a 409.
pub fn disable_subscription<K: Kv>(cx: &Ctx<'_, K>, id: &str) -> Result<Response, ApiError> {
    let reason = disable_reason(cx.req)?;
    subscription_any(cx.env, id)?;
    match delivery::disable(cx.env, &crate::ctx::subscription_id(id)?, &reason)? {
        Some(sub) => Ok(cx.data(200, sub.operator_view())),
        None => Err(ApiError::conflict("The subscription is already disabled.")),
    }
}

/// The reason of an operator's disable (see [`disable_subscription`]).
fn disable_reason(req: &Request) -> Result<String, ApiError> {
    let Some(obj) = crate::body::optional_object(req, &["reason"])? else {
        return Ok("operator".to_owned());
    };
    let invalid = crate::body::invalid;
    match obj.get("reason") {
        None => Ok("operator".to_owned()),
        Some(Value::String(r))
            if (1..=64).contains(&r.len())
                && r.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                && r != subscriptions::DELETED =>
        {
            Ok(r.clone())
        }
        Some(_) => Err(invalid(
            "reason",
            "invalid_reason",
            "reason must be 1 to 64 characters of a-z, 0-9 and '_', and not \"deleted\"",
        )),
    }
}

/// `POST /internal/v1/subscriptions/{id}/enable`: makes a disabled subscription active
/// again (failure streak reset; under its client's cap); an active one is answered as it
/// is. One its owner deleted is a 409 `subscription_deleted`. With `{"replaySince": ms}`
/// it also starts a replay of what failed or was skipped since then (`replay` in the body).
pub fn enable_subscription<K: Kv>(cx: &Ctx<'_, K>, id: &str) -> Result<Response, ApiError> {
    // The body is read before anything changes: a bad one enables nothing.
    let replay_since = crate::replays::replay_since(cx.req)?;
    match delivery::enable(cx.env, &crate::ctx::subscription_id(id)?, None)? {
        Some(subscriptions::Enabled::Now(sub) | subscriptions::Enabled::Already(sub)) => {
            let Some(since) = replay_since else {
                return Ok(cx.data(200, sub.operator_view()));
            };
            let job = crate::replays::after_enable(cx.env, &sub.id, None, since)?;
            #[derive(serde::Serialize)]
            #[serde(rename_all = "camelCase")]
            struct Enabled<'a> {
                data: edgehook_records::subscription::OperatorView<'a>,
                replay: crate::replays::JobView<'a>,
                request_id: &'a str,
            }
            let body = Enabled {
                data: sub.operator_view(),
                replay: crate::replays::view(&job),
                request_id: cx.request_id,
            };
            Ok(Response::json(200, &body))
        }
        Some(subscriptions::Enabled::Deleted(_)) => Err(ApiError::new(
            409,
            "subscription_deleted",
            "Its owner deleted this subscription; it cannot be enabled again.",
        )),
        None => Err(ApiError::not_found("Subscription")),
    }
}

/// `GET /internal/v1/deliveries/{id}`: one delivery with every attempt.
pub fn delivery<K: Kv>(cx: &Ctx<'_, K>, id: &str) -> Result<Response, ApiError> {
    let d = delivery::load(cx.env, &crate::ctx::delivery_id(id)?)?
        .ok_or_else(|| ApiError::not_found("Delivery"))?;
    Ok(cx.data(200, d.view()))
}

/// `POST /internal/v1/deliveries/{id}/replay`: runs a finished delivery again, and names
/// it to run at once.
pub fn replay<K: Kv>(cx: &Ctx<'_, K>, id: &str) -> Result<(Response, delivery::RunNow), ApiError> {
    let id = crate::ctx::delivery_id(id)?;
    let d = delivery::replay(cx.env, &id, None)?;
    Ok((cx.data(202, d.view()), delivery::RunNow::Delivery(id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(content_type: Option<&str>, body: &str) -> Result<String, (u16, &'static str)> {
        let mut req = Request::new("POST", "/internal/v1/subscriptions/x/disable").body(body);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        disable_reason(&req).map_err(|e| {
            let code = e.details.first().map_or(e.code, |d| d.code);
            (e.status, code)
        })
    }

    /// An operator's disable takes an optional reason code; a bad one is a
    /// 422 naming `reason` (and nothing is disabled: it is read before anything else).
    #[test]
    fn a_disable_reason_is_a_short_code_and_never_deleted() {
        let json = Some("application/json");
        assert_eq!(reason(None, ""), Ok("operator".to_owned()));
        assert_eq!(reason(json, "{}"), Ok("operator".to_owned()));
        assert_eq!(
            reason(json, r#"{"reason":"abuse_report_2"}"#),
            Ok("abuse_report_2".to_owned())
        );
        let long = format!(r#"{{"reason":"{}"}}"#, "a".repeat(64));
        assert!(reason(json, &long).is_ok(), "64 characters");
        let too_long = format!(r#"{{"reason":"{}"}}"#, "a".repeat(65));
        for bad in [
            r#"{"reason":"deleted"}"#,
            r#"{"reason":""}"#,
            r#"{"reason":"Maintenance"}"#,
            r#"{"reason":"two words"}"#,
            r#"{"reason":7}"#,
            too_long.as_str(),
        ] {
            assert_eq!(reason(json, bad), Err((422, "invalid_reason")), "{bad}");
        }
        assert_eq!(reason(json, r#"{"why":"x"}"#), Err((422, "unknown_field")));
        assert_eq!(reason(json, "[]"), Err((422, "invalid_type")));
        assert_eq!(reason(json, "{"), Err((400, "invalid_json")));
        assert_eq!(
            reason(Some("text/plain"), "reason=x"),
            Err((415, "unsupported_media_type"))
        );
    }
}
