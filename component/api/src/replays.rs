//! Replays by range through the API: a partner's for its own subscription
//! (`POST /v1/webhooks/{id}/replays`, `GET /v1/replays/{job}`, `POST /v1/replays/{job}/cancel`,
//! and `replaySince` on enable) and the operator's across subscriptions and clients
//! (`POST /internal/v1/replays` with `subscriptionIds`, `GET /internal/v1/replays/{job}`,
//! `POST /internal/v1/replays/{job}/cancel`). A request only records the job (202); the
//! ticks run it (`edgehook_delivery::replays`).

use crate::body;
use crate::ctx::Ctx;
use edgehook_delivery::replays::{self, NewReplay, ReplayJob, STATUS_NAMES};
use edgehook_model::env::Env;
use edgehook_model::error::{ApiError, FieldError};
use edgehook_model::events::is_event_type;
use edgehook_model::http::{Request, Response};
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_records::delivery::Status;
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::{self as subscriptions, DELETED, Status as SubStatus};
use serde::Serialize;
use serde_json::{Map, Value};

/// Subscriptions one operator job may name.
pub const MAX_SUBSCRIPTIONS: usize = 100;

/// A job as the API shows it (`ReplayJob` in the OpenAPI document).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JobView<'a> {
    id: &'a str,
    state: &'static str,
    subscription_ids: &'a [SubscriptionId],
    #[serde(skip_serializing_if = "Option::is_none")]
    client_id: Option<&'a str>,
    since: u64,
    until: u64,
    statuses: Vec<&'static str>,
    event_types: &'a [String],
    total: u64,
    done: u64,
    failed: u64,
    created_at: u64,
    finished_at: Option<u64>,
}

pub(crate) fn view(job: &ReplayJob) -> JobView<'_> {
    JobView {
        id: &job.id,
        state: job.state.name(),
        subscription_ids: &job.subscriptions,
        client_id: job.search_client.as_deref(),
        since: job.since,
        until: job.until,
        statuses: job
            .statuses
            .iter()
            .filter_map(|s| STATUS_NAMES.iter().find(|(_, t)| t == s).map(|(n, _)| *n))
            .collect(),
        event_types: &job.event_types,
        total: job.total,
        done: job.done,
        failed: job.failed,
        created_at: job.created_at,
        finished_at: job.finished_at,
    }
}

/// The filters of a replay request: `since` (required, ms since the epoch), `until`
/// (excluded; default: just after now), `status` (default `["failed","skipped"]`),
/// `eventTypes` (default all). Every problem is reported, in that order.
fn filters(
    env_now: u64,
    obj: &Map<String, Value>,
) -> Result<(u64, u64, Vec<Status>, Vec<String>), ApiError> {
    let mut errors = Vec::new();
    let (since, until) = range(env_now, obj, &mut errors);
    let statuses = statuses(obj.get("status"), &mut errors);
    let event_types = event_types(obj.get("eventTypes"), &mut errors);
    match (since, errors.is_empty()) {
        (Some(since), true) => Ok((since, until, statuses, event_types)),
        _ => Err(ApiError::validation(errors)),
    }
}

/// A time field (ms since the epoch), `None` when it is absent or null, or not a time
/// (reported).
fn time(obj: &Map<String, Value>, field: &str, errors: &mut Vec<FieldError>) -> Option<u64> {
    let v = obj.get(field).filter(|v| !v.is_null())?;
    let t = body::whole_number(v);
    if t.is_none() {
        errors.push(FieldError::new(
            field,
            "invalid_type",
            "Expected a time in milliseconds since the Unix epoch.",
        ));
    }
    t
}

/// `since` (required) and `until` (by default up to and including this millisecond),
/// which must be after it.
fn range(
    env_now: u64,
    obj: &Map<String, Value>,
    errors: &mut Vec<FieldError>,
) -> (Option<u64>, u64) {
    let since = time(obj, "since", errors);
    if since.is_none() && !errors.iter().any(|e| e.field == "since") {
        errors.push(FieldError::new(
            "since",
            "required",
            "Required: where the range starts (ms since the Unix epoch).",
        ));
    }
    let until = time(obj, "until", errors).unwrap_or(env_now + 1);
    if since.is_some_and(|s| s >= until) {
        errors.push(FieldError::new(
            "until",
            "invalid_range",
            "`until` must be after `since`.",
        ));
    }
    (since, until)
}

/// `status`: a non-empty array of status names, each once (default: failed and skipped).
fn statuses(value: Option<&Value>, errors: &mut Vec<FieldError>) -> Vec<Status> {
    match value {
        None | Some(Value::Null) => vec![Status::Failed, Status::Skipped],
        Some(Value::Array(names)) if !names.is_empty() => {
            let mut statuses = Vec::new();
            for name in names {
                match STATUS_NAMES.iter().find(|(n, _)| Some(*n) == name.as_str()) {
                    Some((_, s)) if !statuses.contains(s) => statuses.push(*s),
                    Some(_) => {}
                    None => errors.push(FieldError::new(
                        "status",
                        "invalid_value",
                        "Each status is one of failed, skipped, delivered, cancelled.",
                    )),
                }
            }
            statuses
        }
        Some(_) => {
            errors.push(FieldError::new(
                "status",
                "invalid_type",
                "Expected a non-empty array of statuses (failed, skipped, delivered, cancelled).",
            ));
            Vec::new()
        }
    }
}

/// `eventTypes`: an array of event types, each once (default: empty, every type).
fn event_types(value: Option<&Value>, errors: &mut Vec<FieldError>) -> Vec<String> {
    match value {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(types)) => {
            let mut out: Vec<String> = Vec::new();
            for t in types {
                match t.as_str() {
                    Some(t) if is_event_type(t) => {
                        if !out.iter().any(|o| o == t) {
                            out.push(t.to_owned());
                        }
                    }
                    _ => errors.push(FieldError::new(
                        "eventTypes",
                        "invalid_value",
                        "Each event type is one of load.created, load.updated, load.status_changed.",
                    )),
                }
            }
            out
        }
        Some(_) => {
            errors.push(FieldError::new(
                "eventTypes",
                "invalid_type",
                "Expected an array of event types.",
            ));
            Vec::new()
        }
    }
}

/// 202 with the new job, and `Location` where its progress is read (`{prefix}/{job id}`).
fn accepted<K: Kv>(cx: &Ctx<'_, K>, new: NewReplay, prefix: &str) -> Result<Response, ApiError> {
    let job = replays::start(cx.env, new)?;
    let mut resp = cx.data(202, view(&job));
    resp.headers
        .push(("location".into(), format!("{prefix}/{}", job.id)));
    Ok(resp)
}

/// `POST /v1/webhooks/{id}/replays`: the owner's replay of its subscription's deliveries.
/// The subscription may be disabled (the job replays once it is enabled: until then its
/// deliveries count as failed), not deleted.
pub fn partner_start<K: Kv>(
    cx: &Ctx<'_, K>,
    id: &str,
    client_id: &ClientId,
) -> Result<Response, ApiError> {
    let sub = subscriptions::owned(cx.env, &crate::ctx::subscription_id(id)?, client_id)?;
    let obj = body::object(cx.req, &["since", "until", "status", "eventTypes"])?;
    let (since, until, statuses, event_types) = filters(cx.env.now_ms, &obj)?;
    let new = NewReplay {
        client_id: Some(client_id.clone()),
        subscriptions: vec![sub.id],
        since,
        until,
        statuses,
        event_types,
        search_client: None,
    };
    accepted(cx, new, "/v1/replays")
}

/// Starts the owner's replay of everything `failed` or `skipped` since `since` (the
/// `replaySince` of an enable): [`replays::after_enable`].
pub fn after_enable<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &SubscriptionId,
    client_id: Option<&ClientId>,
    since: u64,
) -> Result<ReplayJob, ApiError> {
    replays::after_enable(env, sub_id, client_id, since)
}

/// The `replaySince` of an enable's optional body (`{"replaySince": ms}`): `None` without a
/// body.
pub fn replay_since(req: &Request) -> Result<Option<u64>, ApiError> {
    let Some(obj) = body::optional_object(req, &["replaySince"])? else {
        return Ok(None);
    };
    let invalid = body::invalid;
    match obj.get("replaySince") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => body::whole_number(v).map(Some).ok_or_else(|| {
            invalid(
                "replaySince",
                "invalid_type",
                "Expected a time in milliseconds since the Unix epoch.",
            )
        }),
    }
}

/// `POST /internal/v1/replays`: the operator's replay over `subscriptionIds` (1 to
/// [`MAX_SUBSCRIPTIONS`], any clients'; a deleted or unknown one is a 422).
pub fn operator_start<K: Kv>(cx: &Ctx<'_, K>) -> Result<Response, ApiError> {
    let fields = [
        "since",
        "until",
        "status",
        "eventTypes",
        "subscriptionIds",
        "clientId",
    ];
    let obj = body::object(cx.req, &fields)?;
    let (since, until, statuses, event_types) = filters(cx.env.now_ms, &obj)?;
    let mut new = NewReplay {
        client_id: None,
        subscriptions: Vec::new(),
        since,
        until,
        statuses,
        event_types,
        search_client: None,
    };
    match (obj.get("subscriptionIds"), obj.get("clientId")) {
        (Some(_), Some(_)) => {
            return Err(invalid_ids("Give subscriptionIds or clientId, not both."));
        }
        // Every subscription's deliveries in the range, or one client's.
        (None, client) => {
            new.search_client = match client {
                None => None,
                Some(Value::String(c)) if ClientId::parse(c).is_some() => ClientId::parse(c),
                Some(_) => {
                    return Err(body::invalid(
                        "clientId",
                        "invalid_client_id",
                        "clientId is 1 to 64 of A-Z a-z 0-9 _ . -",
                    ));
                }
            };
        }
        (Some(ids), None) => {
            let ids = match ids.as_array() {
                Some(ids) if (1..=MAX_SUBSCRIPTIONS).contains(&ids.len()) => ids,
                _ => {
                    return Err(invalid_ids(
                        "An array of 1 to 100 subscription ids (sub_...).",
                    ));
                }
            };
            for id in ids {
                let Some(id) = id.as_str().and_then(SubscriptionId::parse) else {
                    return Err(invalid_ids("Each id is a subscription id (sub_...)."));
                };
                if !new.subscriptions.contains(&id) {
                    new.subscriptions.push(id);
                }
            }
            let subs = subscriptions::load_many(cx.env, &new.subscriptions)?;
            for (id, sub) in new.subscriptions.iter().zip(subs) {
                let replayable = sub.is_some_and(|s| {
                    s.status != SubStatus::Pending && s.disabled_reason.as_deref() != Some(DELETED)
                });
                if !replayable {
                    return Err(invalid_ids(&format!(
                        "{id}: no such subscription, or its owner deleted it."
                    )));
                }
            }
        }
    }
    accepted(cx, new, "/internal/v1/replays")
}

fn invalid_ids(message: &str) -> ApiError {
    body::invalid("subscriptionIds", "invalid_value", message)
}

/// `GET /v1/replays/{job}` (the caller's own) and `GET /internal/v1/replays/{job}` (any).
pub fn get<K: Kv>(
    cx: &Ctx<'_, K>,
    id: &str,
    client_id: Option<&ClientId>,
) -> Result<Response, ApiError> {
    match replays::load(cx.env, &crate::ctx::replay_job_id(id)?, client_id)? {
        Some(job) => Ok(cx.data(200, view(&job))),
        None => Err(ApiError::not_found("Replay")),
    }
}

/// `POST /v1/replays/{job}/cancel` and `POST /internal/v1/replays/{job}/cancel`: stops a
/// running job between steps (a finished one is answered as it is).
pub fn cancel<K: Kv>(
    cx: &Ctx<'_, K>,
    id: &str,
    client_id: Option<&ClientId>,
) -> Result<Response, ApiError> {
    match replays::cancel(cx.env, &crate::ctx::replay_job_id(id)?, client_id)? {
        Some(job) => Ok(cx.data(200, view(&job))),
        None => Err(ApiError::not_found("Replay")),
    }
}
