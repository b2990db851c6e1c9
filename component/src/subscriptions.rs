//! Subscriptions: the partner API (`/v1/webhooks`) and their storage.
//!
//! Storage (see [`crate::keys`]): the record `sub:{id}` is the truth; the client index and
//! the fan-out indexes point at it. Both indexes are paged append logs
//! ([`AppendLog`]), so a create or delete rewrites one small page of each, never a whole
//! index: its cost does not grow with the client's or the event type's subscriptions.
//!
//! A create writes, in order: the fan-out entries, the client index entry (its number is the
//! subscription's `seq`), the record as `pending` (holding every entry's number), one
//! increment of the client's live counter (checked against the cap), the idempotency
//! response, and last flips the record to `active` — the commit point. Readers skip entries
//! whose record is missing or not active, so a create that fails half-way leaves nothing
//! visible. A delete flips the record to `disabled` (its commit point), then removes its
//! index entries and decrements the live counter, best effort: entries it fails to remove
//! are skipped by readers. The live counter only ever errs high (a failed create or an
//! interrupted delete leaves it one too many); when it says the cap is reached, the create
//! recounts the client's live subscriptions and corrects it by compare-and-swap.

use crate::applog::{AppendLog, Entry};
use crate::env::Env;
use crate::error::{ApiError, FieldError};
use crate::http::{Request, Response};
use crate::idempotency::{self, Start, StoredResponse};
use crate::ids::IdKind;
use crate::keys;
use crate::kv::{Kv, Update, update};
use crate::validate;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Default page size of list.
pub const DEFAULT_LIMIT: usize = 50;
/// Largest page size of list.
pub const MAX_LIMIT: usize = 100;
/// A `pending` record older than this is a failed create, not one in progress.
const STALE_PENDING_MS: u64 = 60 * 1000;

/// A signing secret. Its `Debug` never shows the value.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Secret {
    /// A fresh secret: `whsec_` + 32 random bytes, base64url without padding.
    pub fn generate(random: [u8; 32]) -> Self {
        Secret(format!(
            "whsec_{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random)
        ))
    }
}

/// Lifecycle of a subscription record.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    /// Being created; invisible until it becomes active.
    Pending,
    /// Receives deliveries and shows in list.
    Active,
    /// Deleted or disabled; receives nothing, kept for support.
    Disabled,
}

/// A stored subscription.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    /// `sub_...`.
    pub id: String,
    /// The owning API client.
    pub client_id: String,
    /// Target URL, as given.
    pub url: String,
    /// Event types it listens to (deduplicated, in the order given).
    pub event_types: Vec<String>,
    /// The signing secret (only ever returned by create).
    pub signing_secret: Secret,
    /// Lifecycle state.
    pub status: Status,
    /// Why it was disabled (`deleted`, `gone`, `repeated_failures`, `operator`).
    pub disabled_reason: Option<String>,
    /// Creation time (ms since the epoch).
    pub created_at: u64,
    /// When it was disabled.
    pub disabled_at: Option<u64>,
    /// Position in the client's creation order.
    pub seq: u64,
    /// Deliveries in a row that ended failed (reset by any success).
    #[serde(default)]
    pub consecutive_failures: u32,
    /// The number of its entry in each event type's fan-out index, in the order of
    /// `event_types` (so a delete removes exactly those entries).
    #[serde(default)]
    pub fanout_seqs: Vec<u64>,
}

impl Subscription {
    /// The operator view: state and disable reason included, never the secret.
    pub fn operator_json(&self) -> Value {
        json!({
            "id": self.id,
            "clientId": self.client_id,
            "url": self.url,
            "eventTypes": self.event_types,
            "status": self.status,
            "disabledReason": self.disabled_reason,
            "disabledAt": self.disabled_at,
            "createdAt": self.created_at,
            "consecutiveFailures": self.consecutive_failures,
        })
    }

    /// The partner-facing view (never includes the secret).
    pub fn public_json(&self) -> Value {
        json!({
            "id": self.id,
            "url": self.url,
            "eventTypes": self.event_types,
            "status": match self.status { Status::Disabled => "disabled", _ => "active" },
            "createdAt": self.created_at,
        })
    }

    fn to_bytes(&self) -> Result<Vec<u8>, ApiError> {
        serde_json::to_vec(self).map_err(ApiError::internal)
    }
}

/// Entries per page of the subscription indexes: a create or delete parses and rewrites one
/// page of each, and a full read (fan-out) takes one key per page.
const INDEX_PAGE: u64 = 32;

/// A client's subscription ids in creation order; an entry's number is the `seq`.
fn client_index(client_id: &str) -> AppendLog {
    AppendLog::with_page_size(keys::client_subscriptions(client_id), INDEX_PAGE)
}

/// The ids of subscriptions listening to one event type.
fn fanout_index(event_type: &str) -> AppendLog {
    AppendLog::with_page_size(keys::fanout(event_type), INDEX_PAGE)
}

/// Appends one id to an index; returns its entry number.
fn append_id<K: Kv>(env: &Env<'_, K>, index: &AppendLog, id: &str) -> Result<u64, ApiError> {
    let seqs = index.append(env.kv, &[id.to_owned()])?;
    seqs.first()
        .copied()
        .ok_or_else(|| ApiError::internal("append returned no number"))
}

/// Reads one subscription record.
pub fn load<K: Kv>(env: &Env<'_, K>, id: &str) -> Result<Option<Subscription>, ApiError> {
    match env.kv.get(&keys::subscription(id))? {
        None => Ok(None),
        Some(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| ApiError::internal(format!("corrupt subscription {id}: {e}"))),
    }
}

/// Reads many subscription records (missing and unreadable ones are `None`).
pub fn load_many<K: Kv>(
    env: &Env<'_, K>,
    ids: &[String],
) -> Result<Vec<Option<Subscription>>, ApiError> {
    let keys: Vec<String> = ids.iter().map(|id| keys::subscription(id)).collect();
    Ok(env
        .kv
        .get_many(&keys)?
        .into_iter()
        .map(|v| v.and_then(|b| serde_json::from_slice(&b).ok()))
        .collect())
}

/// Ids of the subscriptions listening to `event_type` (may include ones no longer active).
pub fn fanout_ids<K: Kv>(env: &Env<'_, K>, event_type: &str) -> Result<Vec<String>, ApiError> {
    let entries: Vec<Entry<String>> = fanout_index(event_type).read(env.kv, 0, usize::MAX)?;
    Ok(entries.into_iter().map(|e| e.item).collect())
}

fn require_json(req: &Request) -> Result<Value, ApiError> {
    let content_type = req.header_str("content-type").unwrap_or("");
    let mime = content_type.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::unsupported_media_type());
    }
    serde_json::from_slice(&req.body).map_err(ApiError::invalid_json)
}

/// The create body, validated.
struct CreateIn {
    url: String,
    event_types: Vec<String>,
}

/// Validates a create body. Unknown fields are refused (422 `unknown_field`), so a typo such
/// as `eventType` is caught instead of silently creating a subscription without it.
fn validate_create(body: &Value, allow_private: bool) -> Result<CreateIn, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::validation(vec![FieldError::new(
            "body",
            "invalid_type",
            "the body must be a JSON object with url and eventTypes",
        )]));
    };
    let mut details = Vec::new();
    for key in obj.keys() {
        if key != "url" && key != "eventTypes" {
            details.push(FieldError::new(
                key.clone(),
                "unknown_field",
                format!("unknown field {key:?}; a subscription has url and eventTypes"),
            ));
        }
    }
    let url = match obj.get("url") {
        None => {
            details.push(FieldError::new("url", "required", "url is required"));
            None
        }
        Some(Value::String(u)) => match validate::target_url(u, allow_private) {
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
    };
    let event_types = match validate::event_types(obj.get("eventTypes")) {
        Ok(t) => Some(t),
        Err(errs) => {
            details.extend(errs);
            None
        }
    };
    match (url, event_types) {
        (Some(url), Some(event_types)) if details.is_empty() => Ok(CreateIn { url, event_types }),
        _ => Err(ApiError::validation(details)),
    }
}

/// `POST /v1/webhooks`.
pub fn create<K: Kv>(
    env: &Env<'_, K>,
    req: &Request,
    client_id: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    let body = require_json(req)?;
    let input = validate_create(&body, env.settings.allow_private_targets)?;
    let idempotency_key = match req.headers.iter().find(|(n, _)| n == "idempotency-key") {
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
            h.update(&req.body);
            match idempotency::begin(env, client_id, key, &hex::encode(h.finalize()))? {
                Start::Replay(stored) => return replay(env, stored, request_id),
                Start::Fresh(claim) => Some(claim),
            }
        }
    };
    let result = create_fresh(env, input, client_id, claim.as_ref());
    match result {
        Ok(stored) => Ok(created_response(stored, request_id, false)),
        Err(e) => {
            if let Some(claim) = &claim {
                idempotency::release(env, claim);
            }
            Err(e)
        }
    }
}

fn create_fresh<K: Kv>(
    env: &Env<'_, K>,
    input: CreateIn,
    client_id: &str,
    claim: Option<&idempotency::Claim>,
) -> Result<StoredResponse, ApiError> {
    let id = IdKind::Subscription.generate(env.entropy);
    let secret = Secret::generate(env.random_bytes::<32>());
    let mut fanout_seqs = Vec::with_capacity(input.event_types.len());
    for event_type in &input.event_types {
        fanout_seqs.push(append_id(env, &fanout_index(event_type), &id)?);
    }
    let seq = append_id(env, &client_index(client_id), &id)?;
    let sub = Subscription {
        id: id.clone(),
        client_id: client_id.to_owned(),
        url: input.url,
        event_types: input.event_types,
        signing_secret: secret,
        status: Status::Pending,
        disabled_reason: None,
        created_at: env.now_ms,
        disabled_at: None,
        seq,
        consecutive_failures: 0,
        fanout_seqs,
    };
    env.kv.set(&keys::subscription(&id), &sub.to_bytes()?)?;
    if let Err(e) = take_slot(env, client_id, &id) {
        // Refused (cap) or unknown: undo what is visible to nobody anyway, best effort.
        let _ = remove_from_indexes(env, &sub);
        let _ = env.kv.delete(&keys::subscription(&id));
        return Err(e);
    }
    let mut data = sub.public_json();
    data["signingSecret"] = json!(sub.signing_secret.0);
    let stored = StoredResponse {
        status: 201,
        data,
        location: Some(format!("/v1/webhooks/{id}")),
        subscription_id: id.clone(),
    };
    if let Some(claim) = claim {
        idempotency::finish(env, claim, stored.clone())?;
    }
    activate(env, &id)?;
    Ok(stored)
}

/// Flips a pending record to active (the commit point of a create). Idempotent.
fn activate<K: Kv>(env: &Env<'_, K>, id: &str) -> Result<(), ApiError> {
    update(env.kv, &keys::subscription(id), |current| {
        let mut sub: Subscription = match current {
            None => {
                return Err(ApiError::internal(format!(
                    "subscription {id} vanished during create"
                )));
            }
            Some(b) => serde_json::from_slice(b).map_err(ApiError::internal)?,
        };
        if sub.status != Status::Pending {
            return Ok(Update::Keep(()));
        }
        sub.status = Status::Active;
        Ok(Update::Write(sub.to_bytes()?, ()))
    })?;
    Ok(())
}

/// Answers a retried create from its stored response, finishing the create if the first
/// attempt stored its response but failed before the commit point.
fn replay<K: Kv>(
    env: &Env<'_, K>,
    stored: StoredResponse,
    request_id: &str,
) -> Result<Response, ApiError> {
    activate(env, &stored.subscription_id)?;
    Ok(created_response(stored, request_id, true))
}

fn created_response(stored: StoredResponse, request_id: &str, replayed: bool) -> Response {
    let mut resp = Response::json(
        stored.status,
        &json!({"data": stored.data, "requestId": request_id}),
    );
    if let Some(location) = stored.location {
        resp = resp.with_header("location", location);
    }
    if replayed {
        resp = resp.with_header("idempotent-replayed", "true");
    }
    resp
}

fn limit_reached(cap: u32) -> ApiError {
    ApiError::new(
        422,
        "subscription_limit_reached",
        format!("This API client already has {cap} active subscriptions; delete one first."),
    )
}

/// Counts subscription `id` (already in the client index, pending) against the client's cap.
///
/// The live counter is incremented; if that passes the cap, the increment is undone and the
/// client's live subscriptions are recounted from the index (the counter may be high after a
/// failed create or an interrupted delete). The recount is written by compare-and-swap, so a
/// concurrent change of the counter makes it start over rather than overwrite.
fn take_slot<K: Kv>(env: &Env<'_, K>, client_id: &str, id: &str) -> Result<(), ApiError> {
    let cap = env.settings.subscription_limit;
    let key = keys::client_live(client_id);
    if env.kv.increment(&key, 1)? <= i64::from(cap) {
        return Ok(());
    }
    env.kv.increment(&key, -1)?;
    for _ in 0..4 {
        let (cas, _) = env.kv.cas_begin(&key)?;
        let entries: Vec<Entry<String>> = client_index(client_id).read(env.kv, 0, usize::MAX)?;
        let ids: Vec<String> = entries
            .into_iter()
            .map(|e| e.item)
            .filter(|i| i != id)
            .collect();
        let now = env.now_ms;
        let live = load_many(env, &ids)?
            .into_iter()
            .flatten()
            .filter(|s| match s.status {
                Status::Active => true,
                Status::Pending => now < s.created_at + STALE_PENDING_MS,
                Status::Disabled => false,
            })
            .count();
        if live >= cap as usize {
            return Err(limit_reached(cap));
        }
        if env.kv.cas_swap(cas, (live + 1).to_string().as_bytes())? {
            return Ok(());
        }
    }
    Err(ApiError::store_unavailable(
        "the subscription count kept changing",
    ))
}

/// Decodes a list cursor (`cur_<hex seq>`): hex digits only (`from_str_radix` alone would
/// also take a leading `+`).
fn parse_cursor(cursor: &str) -> Option<u64> {
    cursor
        .strip_prefix("cur_")
        .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|h| u64::from_str_radix(h, 16).ok())
}

pub(crate) fn list_params(req: &Request) -> Result<(usize, u64), ApiError> {
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

/// What list reads of a stored record: the partner-facing fields and what decides whether
/// it is listed. The signing secret and the operator fields are skipped, not copied.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    id: String,
    client_id: String,
    url: String,
    event_types: Vec<String>,
    status: Status,
    created_at: u64,
}

/// One item of a list response (the same fields as [`Subscription::public_json`]).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListItem<'a> {
    id: &'a str,
    url: &'a str,
    event_types: &'a [String],
    status: &'static str,
    created_at: u64,
}

/// The list response body.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListPage<'a> {
    data: Vec<ListItem<'a>>,
    has_more: bool,
    next_cursor: Option<String>,
    request_id: &'a str,
}

/// `GET /v1/webhooks`: the caller's active subscriptions in creation order, paged.
pub fn list<K: Kv>(
    env: &Env<'_, K>,
    req: &Request,
    client_id: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    let (limit, mut after) = list_params(req)?;
    let index = client_index(client_id);
    let mut found: Vec<(u64, Listed)> = Vec::with_capacity(limit + 1);
    // Deleted subscriptions leave the index, so one round is the rule; more only when
    // entries point at records that are not active (a create or delete cut short).
    while found.len() <= limit {
        let entries: Vec<Entry<String>> = index.read(env.kv, after, limit + 1 - found.len())?;
        let Some(last) = entries.last() else {
            break;
        };
        after = last.seq;
        let keys: Vec<String> = entries
            .iter()
            .map(|e| keys::subscription(&e.item))
            .collect();
        let values = env.kv.get_many(&keys)?;
        for (entry, value) in entries.iter().zip(values) {
            let Some(sub) = value.and_then(|b| serde_json::from_slice::<Listed>(&b).ok()) else {
                continue;
            };
            if sub.status == Status::Active && sub.client_id == client_id {
                found.push((entry.seq, sub));
            }
        }
    }
    let has_more = found.len() > limit;
    found.truncate(limit);
    let page = ListPage {
        next_cursor: match found.last() {
            Some((seq, _)) if has_more => Some(format!("cur_{seq:x}")),
            _ => None,
        },
        data: found
            .iter()
            .map(|(_, s)| ListItem {
                id: &s.id,
                url: &s.url,
                event_types: &s.event_types,
                status: "active",
                created_at: s.created_at,
            })
            .collect(),
        has_more,
        request_id,
    };
    let body = serde_json::to_vec(&page).map_err(ApiError::internal)?;
    Ok(Response::json_bytes(200, body))
}

/// The caller's active subscription `id`, or 404 (also for other clients' ids).
fn own_active<K: Kv>(
    env: &Env<'_, K>,
    id: &str,
    client_id: &str,
) -> Result<Subscription, ApiError> {
    let not_found = || ApiError::not_found("Subscription");
    if !IdKind::Subscription.matches(id) {
        return Err(not_found());
    }
    match load(env, id)? {
        Some(sub) if sub.client_id == client_id && sub.status == Status::Active => Ok(sub),
        _ => Err(not_found()),
    }
}

/// `GET /v1/webhooks/{id}`.
pub fn get<K: Kv>(
    env: &Env<'_, K>,
    id: &str,
    client_id: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    let sub = own_active(env, id, client_id)?;
    Ok(Response::json(
        200,
        &json!({"data": sub.public_json(), "requestId": request_id}),
    ))
}

/// Disables subscription `id` (the caller's own, if `client_id` is given) with `reason`.
/// Returns the record as disabled, or `None` if it was not active (or not the caller's).
pub fn disable<K: Kv>(
    env: &Env<'_, K>,
    id: &str,
    client_id: Option<&str>,
    reason: &str,
) -> Result<Option<Subscription>, ApiError> {
    if !IdKind::Subscription.matches(id) {
        return Ok(None);
    }
    let now = env.now_ms;
    let disabled = update(env.kv, &keys::subscription(id), |current| {
        let Some(bytes) = current else {
            return Ok(Update::Keep(None));
        };
        let mut sub: Subscription = serde_json::from_slice(bytes).map_err(ApiError::internal)?;
        if sub.status != Status::Active || client_id.is_some_and(|c| c != sub.client_id) {
            return Ok(Update::Keep(None));
        }
        sub.status = Status::Disabled;
        sub.disabled_reason = Some(reason.to_owned());
        sub.disabled_at = Some(now);
        Ok(Update::Write(sub.to_bytes()?, Some(sub)))
    })?;
    if let Some(sub) = &disabled {
        // Committed; index clean-up is best effort (readers skip disabled records), and so
        // is giving back the slot (a counter left high is corrected by the next recount).
        let _ = remove_from_indexes(env, sub);
        let _ = env.kv.increment(&keys::client_live(&sub.client_id), -1);
    }
    Ok(disabled)
}

/// Removes a disabled (or refused) subscription's index entries. Callers treat it as best
/// effort: an entry left behind is skipped by readers.
fn remove_from_indexes<K: Kv>(env: &Env<'_, K>, sub: &Subscription) -> Result<(), ApiError> {
    for (event_type, seq) in sub.event_types.iter().zip(&sub.fanout_seqs) {
        fanout_index(event_type).remove(env.kv, *seq)?;
    }
    client_index(&sub.client_id).remove(env.kv, sub.seq)?;
    Ok(())
}

/// `DELETE /v1/webhooks/{id}`: disables the subscription (reason `deleted`); the record and
/// its delivery history stay.
pub fn delete<K: Kv>(
    env: &Env<'_, K>,
    id: &str,
    client_id: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    match disable(env, id, Some(client_id), "deleted")? {
        Some(sub) => {
            // Committed; deliveries this misses are cancelled when they come due.
            let _ = crate::delivery::cancel_pending(env, &sub.id);
            Ok(Response::json(
                200,
                &json!({"data": {"id": sub.id, "status": "disabled"}, "requestId": request_id}),
            ))
        }
        None => Err(ApiError::not_found("Subscription")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `cursor` fuzz target: `u64::from_str_radix` and `usize::from_str` take a
    /// leading `+`, so `cursor=cur_%2B5` and `limit=%2B5` were accepted.
    #[test]
    fn list_params_are_digits_and_hex_digits_only() {
        let params = |q: &str| list_params(&Request::new("GET", &format!("/v1/webhooks?{q}")));
        assert_eq!(params("limit=5&cursor=cur_1f").ok(), Some((5, 0x1f)));
        assert_eq!(params("limit=007").ok(), Some((7, 0)));
        assert_eq!(params("").ok(), Some((DEFAULT_LIMIT, 0)));
        for bad in [
            "limit=%2B5",
            "limit=+5",
            "limit=-1",
            "limit=0",
            "limit=101",
            "cursor=cur_%2B5",
            "cursor=cur_",
            "cursor=cur_-1",
            "cursor=cur_1g",
            "cursor=5",
        ] {
            assert!(params(bad).is_err(), "{bad} should be refused");
        }
    }
}
