//! Delivery lists and search: a partner's deliveries of its own subscription
//! (`GET /v1/webhooks/{id}/deliveries`) and the operator's of any
//! (`GET /internal/v1/subscriptions/{id}/deliveries`), oldest first, each with its
//! attempts (time, status code, duration, error class). Both page through the
//! subscription's history (`subdlv:{id}`, the index that serves them) with `limit` and
//! `cursor`, and filter by `status`, `eventType`, `since` and `until` (ms since the epoch,
//! `until` excluded). A page reads at most `limit` history entries, or 4 × `limit` with a
//! filter, whatever the history's length: a filtered page may hold fewer than `limit`
//! deliveries, and `nextCursor` reads on.

use crate::body::invalid;
use crate::ctx::{Ctx, subscription_id};
use crate::partner;
use edgehook_delivery::{self as delivery, HistoryFilter};
use edgehook_model::error::ApiError;
use edgehook_model::events::is_event_type;
use edgehook_model::http::{Request, Response};
use edgehook_model::ids::{ClientId, SubscriptionId};
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

/// A query parameter (422 if it is not valid percent-encoding).
fn param(req: &Request, name: &str) -> Result<Option<String>, ApiError> {
    req.query_param(name)
        .map_err(|_| invalid(name, "invalid", "not valid percent-encoding"))
}

/// The filter of a list request (422 for a bad value).
fn filter(req: &Request) -> Result<HistoryFilter, ApiError> {
    let time = |name: &str| -> Result<Option<u64>, ApiError> {
        match param(req, name)? {
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
    let status = match param(req, "status")? {
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
    let event_type = match param(req, "eventType")? {
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
fn page<K: Kv>(cx: &Ctx<'_, K>, sub_id: &SubscriptionId) -> Result<Response, ApiError> {
    let (limit, after) = partner::list_params(cx.req)?;
    let filter = filter(cx.req)?;
    let (found, next) = delivery::history(cx.env, sub_id, after, limit, &filter)?;
    let views: Vec<_> = found.iter().map(|(_, d)| d.view()).collect();
    Ok(partner::page_json(
        &views,
        next.is_some(),
        next,
        cx.request_id,
    ))
}

/// `GET /v1/webhooks/{id}/deliveries`: the caller's subscription (active or disabled).
pub fn partner_list<K: Kv>(
    cx: &Ctx<'_, K>,
    id: &str,
    client_id: &ClientId,
) -> Result<Response, ApiError> {
    let sub = subscriptions::owned(cx.env, &subscription_id(id)?, client_id)?;
    page(cx, &sub.id)
}

/// `POST /v1/webhooks/{id}/deliveries/{delivery}/replay`: the operator's replay of one
/// delivery ([`edgehook_delivery::replay`]), for a delivery of the caller's own subscription
/// `id`. Another client's subscription, and a delivery that is not `id`'s, are 404s, as
/// if they did not exist.
pub fn partner_replay<K: Kv>(
    cx: &Ctx<'_, K>,
    id: &str,
    delivery_id: &str,
    client_id: &ClientId,
) -> Result<(Response, delivery::RunNow), ApiError> {
    let sub = subscriptions::owned(cx.env, &subscription_id(id)?, client_id)?;
    let delivery_id = crate::ctx::delivery_id(delivery_id)?;
    let d = edgehook_delivery::replay(cx.env, &delivery_id, Some(&sub.id))?;
    let run = delivery::RunNow::Delivery(delivery_id);
    Ok((cx.data(202, d.view()), run))
}

/// `GET /internal/v1/subscriptions/{id}/deliveries`: any subscription's, deleted ones too.
pub fn operator_list<K: Kv>(cx: &Ctx<'_, K>, id: &str) -> Result<Response, ApiError> {
    let id = subscription_id(id)?;
    if subscriptions::load(cx.env, &id)?.is_none() {
        return Err(ApiError::not_found("Subscription"));
    }
    page(cx, &id)
}

/// `GET /internal/v1/deliveries`: the operator's search across subscriptions and clients,
/// by `subscriptionId` (served by its history) or else by `clientId` and time (served by
/// the retention day logs, `edgehook_delivery::search`), with the list filters.
pub fn operator_search<K: Kv>(cx: &Ctx<'_, K>) -> Result<Response, ApiError> {
    let (limit, cursor) = partner::list_params(cx.req)?;
    let filter = filter(cx.req)?;
    let client = match param(cx.req, "clientId")? {
        None => None,
        Some(c) => Some(ClientId::parse(&c).ok_or_else(|| {
            invalid(
                "clientId",
                "invalid_client_id",
                "clientId is 1 to 64 of A-Z a-z 0-9 _ . -",
            )
        })?),
    };
    let (found, next) = match param(cx.req, "subscriptionId")? {
        Some(sub_id) => {
            let Some(sub_id) = SubscriptionId::parse(&sub_id) else {
                return Err(invalid(
                    "subscriptionId",
                    "invalid_id",
                    "subscriptionId is a subscription id (sub_...)",
                ));
            };
            let owner_ok = match &client {
                None => true,
                Some(c) => subscriptions::load(cx.env, &sub_id)?.is_some_and(|s| s.client_id == *c),
            };
            match owner_ok {
                true => delivery::history(cx.env, &sub_id, cursor, limit, &filter)?,
                false => (Vec::new(), None),
            }
        }
        None => delivery::search::search(cx.env, client.as_ref(), &filter, cursor, limit)?,
    };
    let views: Vec<_> = found.iter().map(|(_, d)| d.view()).collect();
    Ok(partner::page_json(
        &views,
        next.is_some(),
        next,
        cx.request_id,
    ))
}
