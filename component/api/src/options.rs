//! Delivery options in the partner API: `signatureScheme` and `headers` on create and on
//! `PATCH /v1/webhooks/{id}` (which also changes `url` and `eventTypes` in place), and
//! `POST /v1/webhooks/{id}/rotate-secret`.
//!
//! A subscription's own headers: at most [`MAX_HEADERS`], each name an HTTP token of at
//! most [`MAX_HEADER_NAME`] characters that no delivery header of either scheme, no
//! hop-by-hop header and none the sender sets already ([`DENIED`], [`DENIED_PREFIXES`])
//! may take, each value printable ASCII of at most [`MAX_HEADER_VALUE`] bytes. Values are
//! write-only, like the secret: reads show the names only.

use crate::body;
use crate::ctx::Ctx;
use edgehook_delivery as delivery;
use edgehook_model::error::{ApiError, FieldError};
use edgehook_model::http::Response;
use edgehook_model::ids::ClientId;
use edgehook_model::validate;
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::{self as subscriptions, OptionsChange, Ordering, Scheme, Target};
use serde::Serialize;
use serde_json::{Map, Value};

/// Most headers a subscription may have.
pub const MAX_HEADERS: usize = 10;
/// Longest header name.
pub const MAX_HEADER_NAME: usize = 64;
/// Longest header value, in bytes.
pub const MAX_HEADER_VALUE: usize = 1024;
/// Header names a subscription may not set (lower case): hop-by-hop headers and those the
/// sender sets itself.
pub const DENIED: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "user-agent",
];
/// Name prefixes a subscription may not use: every id, timestamp and signature header of
/// either scheme.
pub const DENIED_PREFIXES: &[&str] = &["x-service-", "webhook-"];
/// Default overlap of a rotation: 24 hours.
pub const DEFAULT_OVERLAP_S: u64 = 86_400;
/// Longest overlap of a rotation: 7 days.
pub const MAX_OVERLAP_S: u64 = 7 * 86_400;

/// `signatureScheme` if `obj` has it (a bad one added to `details`).
pub(crate) fn scheme(obj: &Map<String, Value>, details: &mut Vec<FieldError>) -> Option<Scheme> {
    match obj.get("signatureScheme")? {
        Value::String(s) if s == "spec" => Some(Scheme::Spec),
        Value::String(s) if s == "standard" => Some(Scheme::Standard),
        _ => {
            details.push(FieldError::new(
                "signatureScheme",
                "invalid_value",
                "signatureScheme is \"spec\" (the default) or \"standard\" (Standard Webhooks)",
            ));
            None
        }
    }
}

/// `ordering` if `obj` has it (a bad one added to `details`).
pub(crate) fn ordering(
    obj: &Map<String, Value>,
    details: &mut Vec<FieldError>,
) -> Option<Ordering> {
    match obj.get("ordering")? {
        Value::String(s) if s == "unordered" => Some(Ordering::Unordered),
        Value::String(s) if s == "fifo" => Some(Ordering::Fifo),
        _ => {
            details.push(FieldError::new(
                "ordering",
                "invalid_value",
                "ordering is \"unordered\" (the default) or \"fifo\" (one at a time, in publish order)",
            ));
            None
        }
    }
}

/// `traceparent` if `obj` has it: `true` (deliveries carry the W3C `traceparent` of the
/// trace their event was published in) or `false`.
pub(crate) fn traceparent(obj: &Map<String, Value>, details: &mut Vec<FieldError>) -> Option<bool> {
    match obj.get("traceparent")? {
        Value::Bool(b) => Some(*b),
        _ => {
            details.push(FieldError::new(
                "traceparent",
                "invalid_value",
                "traceparent is true (deliveries carry the trace context their event was published with) or false",
            ));
            None
        }
    }
}

/// Largest `maxInFlight`.
pub const MAX_IN_FLIGHT: u64 = 256;
/// Largest `rateLimit` (attempts started per second).
pub const MAX_RATE: u64 = 1000;

/// `field` if `obj` has it: a whole number from 1 to `max`, or `null` (0: the default).
pub(crate) fn limit(
    obj: &Map<String, Value>,
    field: &'static str,
    max: u64,
    details: &mut Vec<FieldError>,
) -> Option<u32> {
    match obj.get(field)? {
        Value::Null => Some(0),
        v => match body::whole_number(v).filter(|n| (1..=max).contains(n)) {
            Some(n) => Some(n as u32),
            None => {
                details.push(FieldError::new(
                    field,
                    "out_of_range",
                    format!("{field} is a whole number from 1 to {max}, or null for the default"),
                ));
                None
            }
        },
    }
}

/// `headers` if `obj` has it: an object of names to string values (problems added to
/// `details`, one per bad header).
pub(crate) fn headers(
    obj: &Map<String, Value>,
    details: &mut Vec<FieldError>,
) -> Option<Vec<(String, String)>> {
    let given = obj.get("headers")?;
    let Value::Object(map) = given else {
        details.push(FieldError::new(
            "headers",
            "invalid_type",
            "headers is an object of header names to string values",
        ));
        return None;
    };
    let before = details.len();
    if map.len() > MAX_HEADERS {
        details.push(FieldError::new(
            "headers",
            "too_many_headers",
            format!("at most {MAX_HEADERS} headers"),
        ));
    }
    let mut out: Vec<(String, String)> = Vec::with_capacity(map.len());
    for (name, value) in map {
        let field = format!("headers.{name}");
        let lower = name.to_ascii_lowercase();
        let token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
        if name.is_empty() || name.len() > MAX_HEADER_NAME || !name.bytes().all(token) {
            details.push(FieldError::new(
                field,
                "invalid_header_name",
                format!(
                    "a header name is 1 to {MAX_HEADER_NAME} letters, digits or !#$%&'*+-.^_`|~"
                ),
            ));
        } else if DENIED.contains(&lower.as_str())
            || DENIED_PREFIXES.iter().any(|p| lower.starts_with(p))
        {
            details.push(FieldError::new(
                field,
                "header_not_allowed",
                "this header is set by the service (or is hop-by-hop) and cannot be replaced",
            ));
        } else if out.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            details.push(FieldError::new(
                field,
                "duplicate_header",
                "the same header name twice (names are case-insensitive)",
            ));
        } else {
            match value {
                Value::String(v)
                    if !v.is_empty()
                        && v.len() <= MAX_HEADER_VALUE
                        && v.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b)) =>
                {
                    out.push((name.clone(), v.clone()));
                }
                _ => details.push(FieldError::new(
                    field,
                    "invalid_header_value",
                    format!(
                        "a header value is a string of 1 to {MAX_HEADER_VALUE} printable ASCII characters"
                    ),
                )),
            }
        }
    }
    (details.len() == before).then_some(out)
}

/// `PATCH /v1/webhooks/{id}`: changes `url` and `eventTypes` (checked as at create; same
/// id, secret and history: see [`subscriptions::retarget`]), `signatureScheme`, `headers`,
/// `ordering`, `maxInFlight`, `rateLimit`; answers the read, with the new `signingSecret`
/// when the scheme changed (a new secret of its form; shown this once).
pub fn update<K: Kv>(
    cx: &Ctx<'_, K>,
    id: &str,
    client_id: &ClientId,
) -> Result<Response, ApiError> {
    // Another client's subscription is 404 whatever the body (as every partner route).
    subscriptions::owned(cx.env, &crate::ctx::subscription_id(id)?, client_id)?;
    let fields = [
        "url",
        "eventTypes",
        "signatureScheme",
        "headers",
        "ordering",
        "maxInFlight",
        "rateLimit",
        "traceparent",
    ];
    let obj = body::object(cx.req, &fields)?;
    let mut details = Vec::new();
    let change = OptionsChange {
        scheme: scheme(&obj, &mut details),
        headers: headers(&obj, &mut details),
        ordering: ordering(&obj, &mut details),
        max_in_flight: limit(&obj, "maxInFlight", MAX_IN_FLIGHT, &mut details).map(|n| n as u16),
        rate_limit: limit(&obj, "rateLimit", MAX_RATE, &mut details),
        traceparent: traceparent(&obj, &mut details),
        target: target(cx, &obj, &mut details),
    };
    if !details.is_empty() {
        return Err(ApiError::validation(details));
    }
    let (sub, secret) = subscriptions::update_options(
        cx.env,
        client_id,
        &crate::ctx::subscription_id(id)?,
        change,
    )?;
    let detail =
        serde_json::to_vec(&subscriptions::partner_detail(&sub)).map_err(ApiError::internal)?;
    let data = match secret {
        // The read's fields, the secret first.
        Some(secret) => [
            &b"{\"signingSecret\":\""[..],
            secret.as_bytes(),
            b"\",",
            &detail[1..],
        ]
        .concat(),
        None => detail,
    };
    Ok(Response::data_json(200, &data, cx.request_id))
}

/// The `url` and `eventTypes` of a `PATCH`, each if given, checked exactly as at create.
fn target<K: Kv>(
    cx: &Ctx<'_, K>,
    obj: &Map<String, Value>,
    details: &mut Vec<FieldError>,
) -> Target {
    let policy = cx.env.settings.target_policy();
    let url = obj
        .get("url")
        .and_then(|u| target_url(Some(u), policy, details));
    let event_types = obj
        .get("eventTypes")
        .and_then(|t| match validate::event_types(Some(t)) {
            Ok(t) => Some(t),
            Err(errs) => {
                details.extend(errs);
                None
            }
        });
    Target { url, event_types }
}

/// The `url` of a create body (and of a `PATCH`): required, a string, a target the policy
/// allows.
pub(crate) fn target_url(
    url: Option<&Value>,
    policy: validate::TargetPolicy,
    details: &mut Vec<FieldError>,
) -> Option<String> {
    match url {
        None => {
            details.push(FieldError::new("url", "required", "url is required"));
            None
        }
        Some(Value::String(u)) => match validate::target_url(u, policy) {
            Ok(_) => Some(u.clone()),
            Err(p) => {
                details.push(FieldError::new("url", p.code, p.message));
                None
            }
        },
        Some(_) => {
            details.push(FieldError::new(
                "url",
                "invalid_type",
                "url must be a string",
            ));
            None
        }
    }
}

/// The `data` of a rotation's 200.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Rotated<'a> {
    id: &'a str,
    previous_secret_expires_at: Option<u64>,
    signature_scheme: &'static str,
    signing_secret: &'a str,
}

/// `POST /internal/v1/subscriptions/{id}/rotate-secret`: the operator rotates any client's
/// subscription's secret (a leaked one, say), with the partner's body, overlap rules and
/// answer ([`rotate`]); a deleted or unknown subscription is 404.
pub fn operator_rotate<K: Kv>(cx: &Ctx<'_, K>, id: &str) -> Result<Response, ApiError> {
    let owner = match subscriptions::load(cx.env, &crate::ctx::subscription_id(id)?)? {
        Some(sub) if sub.disabled_reason.as_deref() != Some(subscriptions::DELETED) => {
            sub.client_id
        }
        _ => return Err(ApiError::not_found("Subscription")),
    };
    rotate(cx, id, &owner)
}

/// `POST /v1/webhooks/{id}/rotate-secret` (`{"overlapSeconds": n}`, optional, default 24 h,
/// at most 7 days; 0: the old secret stops at once): a new secret, shown this once.
pub fn rotate<K: Kv>(
    cx: &Ctx<'_, K>,
    id: &str,
    client_id: &ClientId,
) -> Result<Response, ApiError> {
    let obj = body::optional_object(cx.req, &["overlapSeconds"])?.unwrap_or_default();
    let overlap_s = match obj.get("overlapSeconds") {
        None => DEFAULT_OVERLAP_S,
        Some(v) => body::whole_number(v)
            .filter(|s| *s <= MAX_OVERLAP_S)
            .ok_or_else(|| {
                body::invalid(
                    "overlapSeconds",
                    "out_of_range",
                    "overlapSeconds is a whole number of seconds from 0 to 604800 (7 days)",
                )
            })?,
    };
    let overlap_ms = overlap_s * 1000;
    // The erasure is queued first: if the rotation then fails, the entry finds nothing to
    // erase; the other way round, a failure could leave an old secret with no erasure.
    let id = crate::ctx::subscription_id(id)?;
    if overlap_ms > 0 {
        delivery::schedule_secret_erasure(cx.env, &id, cx.env.now_ms + overlap_ms)?;
    }
    let (sub, secret) = subscriptions::rotate(cx.env, client_id, &id, overlap_ms)?;
    let data = serde_json::to_vec(&Rotated {
        id: &sub.id,
        previous_secret_expires_at: sub.options.previous_secret.as_ref().map(|(_, u)| *u),
        signature_scheme: sub.options.scheme.name(),
        signing_secret: &secret,
    })
    .map_err(ApiError::internal)?;
    Ok(Response::data_json(200, &data, cx.request_id))
}
