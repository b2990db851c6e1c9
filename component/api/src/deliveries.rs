//! Delivery lists: a partner's deliveries of its own subscription
//! (`GET /v1/webhooks/{id}/deliveries`) and the operator's of any
//! (`GET /internal/v1/subscriptions/{id}/deliveries`), oldest first, each with its
//! attempts (time, status code, duration, error class). Both page through the
//! subscription's history (`subdlv:{id}`, the index that serves them) with `limit` and
//! `cursor`, and filter by `status`, `eventType`, `since` and `until` (ms since the epoch,
//! `until` excluded). A page reads at most `limit` history entries, or 4 × `limit` with a
//! filter, whatever the history's length: a filtered page may hold fewer than `limit`
//! deliveries, and `nextCursor` reads on.

use crate::body::invalid;
use crate::partner;
use edgehook_delivery::{self as delivery, HistoryFilter};
use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::events::is_event_type;
use edgehook_model::http::{Request, Response};
use edgehook_records::delivery::Status;
use edgehook_storage::kv::Kv;
use edgehook_subscriptions as subscriptions;

/// The statuses a list filters by, as deliveries show them.
const STATUSES: [(&str, Status); 5] = [
    ("pending", Status::Pending),
    ("succeeded", Status::Succeeded),
    ("failed", Status::Failed),
    ("cancelled", Status::Cancelled),
    ("skipped", Status::Skipped),
];

/// The filter of a list request (422 for a bad value).
fn filter(req: &Request) -> Result<HistoryFilter, ApiError> {
    let param = |name: &str| {
        req.query_param(name)
            .map_err(|_| invalid(name, "invalid", "not valid percent-encoding"))
    };
    let time = |name: &str| -> Result<Option<u64>, ApiError> {
        match param(name)? {
            None => Ok(None),
            Some(t) => t.parse().map(Some).map_err(|_| {
                invalid(
                    name,
                    "invalid_time",
                    "a time in milliseconds since the Unix epoch",
                )
            }),
        }
    };
    let status = match param("status")? {
        None => None,
        Some(s) => Some(
            STATUSES
                .iter()
                .find(|(n, _)| *n == s)
                .map(|(_, st)| *st)
                .ok_or_else(|| {
                    invalid(
                        "status",
                        "invalid_status",
                        "status is one of pending, succeeded, failed, cancelled, skipped",
                    )
                })?,
        ),
    };
    let event_type = match param("eventType")? {
        Some(t) if !is_event_type(&t) => {
            return Err(invalid(
                "eventType",
                "unknown_event_type",
                "eventType is one of load.created, load.updated, load.status_changed",
            ));
        }
        t => t,
    };
    Ok(HistoryFilter {
        status,
        event_type,
        since: time("since")?,
        until: time("until")?,
    })
}

/// A page of `sub_id`'s deliveries as `req` asks.
fn page<K: Kv>(
    env: &Env<'_, K>,
    req: &Request,
    sub_id: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    let (limit, after) = partner::list_params(req)?;
    let filter = filter(req)?;
    let (found, next) = delivery::history(env, sub_id, after, limit, &filter)?;
    let views: Vec<_> = found.iter().map(|(_, d)| d.view()).collect();
    Ok(partner::page_json(&views, next.is_some(), next, request_id))
}

/// `GET /v1/webhooks/{id}/deliveries`: the caller's subscription (active or disabled).
pub fn partner_list<K: Kv>(
    env: &Env<'_, K>,
    req: &Request,
    id: &str,
    client_id: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    let sub = subscriptions::owned(env, id, client_id)?;
    page(env, req, &sub.id, request_id)
}

/// `GET /internal/v1/subscriptions/{id}/deliveries`: any subscription's, deleted ones too.
pub fn operator_list<K: Kv>(
    env: &Env<'_, K>,
    req: &Request,
    id: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    if !edgehook_model::ids::IdKind::Subscription.matches(id)
        || subscriptions::load(env, id)?.is_none()
    {
        return Err(ApiError::not_found("Subscription"));
    }
    page(env, req, id, request_id)
}
