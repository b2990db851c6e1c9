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
use crate::codec::{Reader, Writer};
use crate::env::Env;
use crate::error::{ApiError, FieldError};
use crate::http::{Request, Response};
use crate::idempotency::{self, Start, StoredResponse};
use crate::ids::IdKind;
use crate::keys::{self, Key};
use crate::kv::{Kv, Update, update};
use crate::validate;
use base64::Engine as _;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Default page size of list.
pub const DEFAULT_LIMIT: usize = 50;
/// Largest page size of list.
pub const MAX_LIMIT: usize = 100;
/// A `pending` record older than this is a failed create, not one in progress.
const STALE_PENDING_MS: u64 = 60 * 1000;

/// A signing secret. Its `Debug` never shows the value.
#[derive(Clone, Serialize, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    /// Being created; invisible until it becomes active.
    Pending,
    /// Receives deliveries and shows in list.
    Active,
    /// Deleted or disabled; receives nothing, kept for support.
    Disabled,
}

/// A stored subscription. Stored binary ([`Subscription::encode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
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
    pub consecutive_failures: u32,
    /// The number of its entry in each event type's fan-out index, in the order of
    /// `event_types` (so a delete removes exactly those entries).
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

    /// The stored record: `SUBSCRIPTION_V1` (0xB1), then every field in declaration order
    /// (see [`crate::codec`]; a list is its length, then its items). A record is written
    /// twice by a create and read by every fan-out, so it is copied rather than escaped.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(
            SUBSCRIPTION_V1,
            128 + self.url.len() + 24 * self.event_types.len(),
        );
        w.str(&self.id)
            .str(&self.client_id)
            .str(&self.url)
            .list(&self.event_types, |w, t| w.str(t))
            .str(&self.signing_secret.0)
            .u8(self.status.code())
            .opt(self.disabled_reason.as_deref(), Writer::str)
            .u64(self.created_at)
            .opt(self.disabled_at, Writer::u64)
            .u64(self.seq)
            .u32(self.consecutive_failures)
            .list(&self.fanout_seqs, |w, n| w.u64(*n));
        w.finish()
    }

    /// Reads a stored record ([`Subscription::encode`]). A damaged record is an error.
    pub fn decode(bytes: &[u8]) -> Result<Subscription, ApiError> {
        Self::decode_binary(bytes).ok_or_else(|| ApiError::internal("corrupt subscription record"))
    }

    fn decode_binary(bytes: &[u8]) -> Option<Subscription> {
        let mut r = Reader::new(bytes, SUBSCRIPTION_V1)?;
        let (id, client_id, url) = (r.str()?, r.str()?, r.str()?);
        let event_types = r.list(4, Reader::str)?;
        let signing_secret = Secret(r.str()?);
        let status = Status::from_code(r.u8()?)?;
        let disabled_reason = r.opt(Reader::str)?;
        let created_at = r.u64()?;
        let disabled_at = r.opt(Reader::u64)?;
        let seq = r.u64()?;
        let consecutive_failures = r.u32()?;
        let fanout_seqs = r.list(8, Reader::u64)?;
        r.end()?;
        Some(Subscription {
            id,
            client_id,
            url,
            event_types,
            signing_secret,
            status,
            disabled_reason,
            created_at,
            disabled_at,
            seq,
            consecutive_failures,
            fanout_seqs,
        })
    }
}

/// The first byte of a subscription record ([`Subscription::encode`]): its format's version.
const SUBSCRIPTION_V1: u8 = 0xB1;

impl Status {
    fn code(self) -> u8 {
        match self {
            Status::Pending => 0,
            Status::Active => 1,
            Status::Disabled => 2,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        [Status::Pending, Status::Active, Status::Disabled]
            .get(usize::from(code))
            .copied()
    }
}

/// Entries per page of the subscription indexes: a create or delete parses and rewrites one
/// page of each, and a full read (fan-out) takes one key per page.
const INDEX_PAGE: u64 = 32;

/// A client's subscription ids in creation order; an entry's number is the `seq`.
fn client_index(client_id: &str) -> AppendLog {
    AppendLog::with_page_size(keys::client_subscriptions(client_id), INDEX_PAGE)
}

/// How far list may trust a client-index entry's list item.
///
/// List shows a `Live` entry's item without reading the record; for any other entry (and for
/// entries written before items were stored, which are bare ids) it reads the record. So:
/// - create appends its entry `Joining`, and makes it `Live` only after the record is
///   active, and only if it is still `Joining`;
/// - every disable first marks the entry `Leaving`, then flips the record.
///
/// A `Live` entry therefore always has an active record; a create or delete cut short
/// leaves an entry that list checks against the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listing {
    /// Appended by a create not yet committed.
    Joining,
    /// The record is active: list shows the stored item as it is.
    Live,
    /// A disable has begun (or ended): list checks the record.
    Leaving,
}

impl Listing {
    /// The first byte of an encoded entry (never the `s` a bare id starts with).
    fn tag(self) -> u8 {
        match self {
            Listing::Joining => b'J',
            Listing::Live => b'L',
            Listing::Leaving => b'X',
        }
    }
}

/// A client-index item: `<listing tag><id> <list item as JSON>`.
fn encode_index_item(listing: Listing, id: &str, view: &[u8]) -> Vec<u8> {
    let mut item = Vec::with_capacity(2 + id.len() + view.len());
    item.push(listing.tag());
    item.extend_from_slice(id.as_bytes());
    item.push(b' ');
    item.extend_from_slice(view);
    item
}

/// Decodes a client-index item: its listing (`None` for a bare id written before items were
/// stored), the id, and the list item. `None` if it is neither.
fn decode_index_item(item: &[u8]) -> Option<(Option<Listing>, &str, &[u8])> {
    let listing = match item.first()? {
        b'J' => Listing::Joining,
        b'L' => Listing::Live,
        b'X' => Listing::Leaving,
        _ => return Some((None, std::str::from_utf8(item).ok()?, &[])),
    };
    let rest = &item[1..];
    let space = rest.iter().position(|b| *b == b' ')?;
    Some((
        Some(listing),
        std::str::from_utf8(&rest[..space]).ok()?,
        &rest[space + 1..],
    ))
}

/// Sets the listing of `sub`'s client-index entry to `to`, if `allowed` accepts its current
/// listing.
fn set_listing<K: Kv>(
    env: &Env<'_, K>,
    sub: &Subscription,
    allowed: fn(Listing) -> bool,
    to: Listing,
) -> Result<(), ApiError> {
    client_index(&sub.client_id).modify(env.kv, sub.seq, |item| {
        let (Some(listing), id, _) = decode_index_item(item)? else {
            return None;
        };
        if id != sub.id || !allowed(listing) || listing == to {
            return None;
        }
        let mut new = item.to_vec();
        new[0] = to.tag();
        Some(new)
    })?;
    Ok(())
}

/// The ids of subscriptions listening to one event type.
fn fanout_index(event_type: &str) -> AppendLog {
    AppendLog::with_page_size(keys::fanout(event_type), INDEX_PAGE)
}

/// Appends one item to an index; returns its entry number.
fn append_one<K: Kv>(env: &Env<'_, K>, index: &AppendLog, item: &[u8]) -> Result<u64, ApiError> {
    let seqs = index.append(env.kv, &[item])?;
    seqs.first()
        .copied()
        .ok_or_else(|| ApiError::internal("append returned no number"))
}

/// Reads one subscription record.
pub fn load<K: Kv>(env: &Env<'_, K>, id: &str) -> Result<Option<Subscription>, ApiError> {
    match env.kv.get(&keys::subscription(id))? {
        None => Ok(None),
        Some(b) => Subscription::decode(&b).map(Some).map_err(|e| {
            ApiError::internal(format!("subscription {id}: {}", e.log.unwrap_or(e.message)))
        }),
    }
}

/// Reads many subscription records (missing and unreadable ones are `None`).
pub fn load_many<K: Kv>(
    env: &Env<'_, K>,
    ids: &[String],
) -> Result<Vec<Option<Subscription>>, ApiError> {
    let keys: Vec<Key> = ids.iter().map(|id| keys::subscription(id)).collect();
    Ok(env
        .kv
        .get_many(&keys)?
        .into_iter()
        .map(|v| v.and_then(|b| Subscription::decode(&b).ok()))
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
fn validate_create(body: &Value, policy: validate::TargetPolicy) -> Result<CreateIn, ApiError> {
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
    let input = validate_create(&body, env.settings.target_policy())?;
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
            match idempotency::begin(env, client_id, key, &crate::ids::hex(&h.finalize()))? {
                Start::Replay(stored) => return replay(env, stored, request_id),
                Start::Fresh(claim) => Some(claim),
            }
        }
    };
    // A failure gives the claim up only until the response is stored (in `create_fresh`).
    let (data, id) = create_fresh(env, input, client_id, claim.as_ref())?;
    Ok(created_response(
        201,
        &data,
        Some(location(&id)),
        request_id,
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
    id: &'a str,
    signing_secret: &'a str,
    status: &'static str,
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
    input: CreateIn,
    client_id: &str,
    claim: Option<&idempotency::Claim>,
) -> Result<(Vec<u8>, String), ApiError> {
    let (sub, pending, data) = match create_pending(env, input, client_id) {
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
        };
        if let Err(e) = idempotency::finish(env, claim, stored) {
            // The swap may have applied though the store reported an error: release
            // touches the record only if it still holds our claim, not the response.
            idempotency::release(env, claim);
            return Err(e);
        }
    }
    activate(env, &id, Some((&sub, &pending)))?;
    Ok((data, id))
}

/// The first steps of a create, up to a pending record that holds a slot under the cap:
/// returns the record, its stored bytes and the `data` of the 201, written.
fn create_pending<K: Kv>(
    env: &Env<'_, K>,
    input: CreateIn,
    client_id: &str,
) -> Result<(Subscription, Vec<u8>, Vec<u8>), ApiError> {
    let id = IdKind::Subscription.generate(env.entropy);
    // The cap first: a refused create writes nothing, so refusals cannot grow the shared
    // fan-out lists every publish reads. A slot taken by a create that then fails is given
    // back by the recount when the cap next seems reached.
    take_slot(env, client_id, &id)?;
    let secret = Secret::generate(env.random_bytes::<32>());
    let mut fanout_seqs = Vec::with_capacity(input.event_types.len());
    for event_type in &input.event_types {
        fanout_seqs.push(append_one(env, &fanout_index(event_type), id.as_bytes())?);
    }
    let view = serde_json::to_vec(&ListItem {
        id: &id,
        url: &input.url,
        event_types: &input.event_types,
        status: "active",
        created_at: env.now_ms,
    })
    .map_err(ApiError::internal)?;
    let item = encode_index_item(Listing::Joining, &id, &view);
    let seq = append_one(env, &client_index(client_id), &item)?;
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
    let pending = sub.encode();
    env.kv.set(&keys::subscription(&id), &pending)?;
    let data = created_data(&sub)?;
    Ok((sub, pending, data))
}

/// The `data` of the 201 that created `sub`, written (its status as it was then: active).
fn created_data(sub: &Subscription) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(&Created {
        created_at: sub.created_at,
        event_types: &sub.event_types,
        id: &sub.id,
        signing_secret: &sub.signing_secret.0,
        status: "active",
        url: &sub.url,
    })
    .map_err(ApiError::internal)
}

/// The `Location` of a subscription.
fn location(id: &str) -> String {
    format!("/v1/webhooks/{id}")
}

/// Flips a pending record to active (the commit point of a create), then lets list trust
/// its client-index entry. Idempotent. `written` is the record this call wrote and its
/// exact bytes: a record still holding those bytes needs not be parsed. Returns the record
/// as it now is (active, or disabled if a delete came first).
fn activate<K: Kv>(
    env: &Env<'_, K>,
    id: &str,
    written: Option<(&Subscription, &[u8])>,
) -> Result<Subscription, ApiError> {
    let (active, now) = update(env.kv, &keys::subscription(id), |current| {
        let mut sub: Subscription = match current {
            None => {
                return Err(ApiError::internal(format!(
                    "subscription {id} vanished during create"
                )));
            }
            Some(b) => match written.filter(|(_, w)| *w == b) {
                Some((sub, _)) => sub.clone(),
                None => Subscription::decode(b)?,
            },
        };
        match sub.status {
            Status::Pending => {
                sub.status = Status::Active;
                Ok(Update::Write(sub.encode(), (true, sub)))
            }
            Status::Active => Ok(Update::Keep((true, sub))),
            Status::Disabled => Ok(Update::Keep((false, sub))),
        }
    })?;
    if active {
        // Committed: this is best effort. An entry left `Joining` is checked against its
        // record by list, and the create has succeeded whatever happens here.
        let _ = make_live(env, &now);
    }
    Ok(now)
}

/// Lets list trust the client-index entry of `sub` (whose record is active). Only a
/// `Joining` entry becomes `Live`: a `Leaving` one belongs to a disable that has begun, and
/// must stay checked against its record.
fn make_live<K: Kv>(env: &Env<'_, K>, sub: &Subscription) -> Result<(), ApiError> {
    set_listing(env, sub, |l| l == Listing::Joining, Listing::Live)
}

/// Answers a retried create from its stored response, finishing the create if the first
/// attempt stored its response but failed before the commit point.
fn replay<K: Kv>(
    env: &Env<'_, K>,
    stored: StoredResponse,
    request_id: &str,
) -> Result<Response, ApiError> {
    let sub = activate(env, &stored.subscription_id, None)?;
    let data = created_data(&sub)?;
    // The stored response as it was, its `Location` included.
    Ok(created_response(
        stored.status,
        &data,
        stored.location,
        request_id,
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
    let nonce = crate::ids::hex(&env.random_bytes::<8>());
    let taken = update(env.kv, &key, |current| {
        Ok::<_, ApiError>(match parse_live(current) {
            Some(n) if n < u64::from(cap) => Update::Write(encode_live(n + 1, &nonce), true),
            _ => Update::Keep(false), // at the cap (or unreadable): recount below
        })
    })?;
    if taken {
        return Ok(());
    }
    for _ in 0..4 {
        let (cas, _) = env.kv.cas_begin(&key)?;
        let entries = client_index(client_id).read_bytes(env.kv, 0, usize::MAX)?;
        let ids: Vec<String> = entries
            .iter()
            .filter_map(|e| decode_index_item(&e.item))
            .map(|(_, i, _)| i.to_owned())
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
        if env
            .kv
            .cas_swap(cas, &encode_live(live as u64 + 1, &nonce))?
        {
            return Ok(());
        }
    }
    Err(ApiError::store_unavailable(
        "the subscription count kept changing",
    ))
}

/// The client's live-subscription count as stored: decimal text, then a space and the
/// writer's random nonce. It is changed only by compare-and-swap (never `increment`: a
/// counter's bytes are the host's own, and the recount must replace it atomically), and the
/// nonce makes every write's bytes unique, so a host whose swap can report failure after
/// applying (Spin 4.0.2's Redis store) is told apart by reading the key back.
fn encode_live(n: u64, nonce: &str) -> Vec<u8> {
    format!("{n} {nonce}").into_bytes()
}

/// Reads [`encode_live`]: `Some(0)` when missing, `None` when unreadable (a value of
/// another format, e.g. an `increment`ed counter of an earlier version: recounted).
fn parse_live(value: Option<&[u8]>) -> Option<u64> {
    let Some(value) = value else {
        return Some(0);
    };
    let text = std::str::from_utf8(value).ok()?;
    text.split(' ').next()?.parse().ok()
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

impl Subscription {
    /// Its item in a list response (an active subscription's).
    fn list_item(&self) -> ListItem<'_> {
        ListItem {
            id: &self.id,
            url: &self.url,
            event_types: &self.event_types,
            status: "active",
            created_at: self.created_at,
        }
    }
}

/// One item of a list response, and the body of a read: the partner view of a subscription
/// (never the secret).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListItem<'a> {
    id: &'a str,
    url: &'a str,
    event_types: &'a [String],
    status: &'static str,
    created_at: u64,
}

/// `GET /v1/webhooks`: the caller's active subscriptions in creation order, paged.
///
/// Reads the client's index only: a `Live` entry carries its list item ready-made, and the
/// response is those items put together. Records are read just for the entries list cannot
/// trust (see `Listing`).
pub fn list<K: Kv>(
    env: &Env<'_, K>,
    req: &Request,
    client_id: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    let (limit, mut after) = list_params(req)?;
    let index = client_index(client_id);
    // Each item found: its number, and its list item as the bytes from an offset on (a
    // `Live` entry's item is kept whole, not copied: its list item is its tail).
    let mut found: Vec<(u64, Vec<u8>, usize)> = Vec::with_capacity(limit + 1);
    // Deleted subscriptions leave the index, so one round is the rule; more only when
    // entries point at records that are not active (a create or delete cut short).
    while found.len() <= limit {
        let asked = limit + 1 - found.len();
        let entries = index.read_bytes(env.kv, after, asked)?;
        // Fewer than asked: the index was read to its end, and this is the last round.
        let exhausted = entries.len() < asked;
        let Some(last) = entries.last() else {
            break;
        };
        after = last.seq;
        // Each entry decoded once; the ones list cannot trust are checked against their record.
        enum Seen {
            Live(usize),
            Unsure,
            Unreadable,
        }
        let mut unsure: Vec<Key> = Vec::new();
        let seen: Vec<Seen> = entries
            .iter()
            .map(|e| match decode_index_item(&e.item) {
                None => Seen::Unreadable,
                Some((Some(Listing::Live), _, view)) => Seen::Live(e.item.len() - view.len()),
                Some((_, id, _)) => {
                    unsure.push(keys::subscription(id));
                    Seen::Unsure
                }
            })
            .collect();
        let mut records = match unsure.is_empty() {
            true => Vec::new(),
            false => env.kv.get_many(&unsure)?,
        }
        .into_iter();
        for (entry, seen) in entries.into_iter().zip(seen) {
            let view = match seen {
                Seen::Unreadable => None,
                Seen::Live(at) => Some((entry.item, at)),
                Seen::Unsure => records
                    .next()
                    .flatten()
                    .and_then(|b| Subscription::decode(&b).ok())
                    .filter(|s| s.status == Status::Active && s.client_id == client_id)
                    .and_then(|s| serde_json::to_vec(&s.list_item()).ok())
                    .map(|view| (view, 0)),
            };
            if let Some((bytes, at)) = view {
                found.push((entry.seq, bytes, at));
            }
        }
        if exhausted {
            break;
        }
    }
    let has_more = found.len() > limit;
    found.truncate(limit);
    // `{"data": [...], "hasMore", "nextCursor", "requestId"}`, the items as stored.
    let items = found.iter().map(|(_, bytes, at)| &bytes[*at..]);
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
        Some((seq, ..)) if has_more => {
            body.extend_from_slice(format!("\"cur_{seq:x}\"").as_bytes())
        }
        _ => body.extend_from_slice(b"null"),
    }
    body.extend_from_slice(b",\"requestId\":");
    serde_json::to_writer(&mut body, request_id).map_err(ApiError::internal)?;
    body.push(b'}');
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
    Ok(Response::data(200, sub.list_item(), request_id))
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
    let key = keys::subscription(id);
    for _ in 0..crate::kv::CAS_ATTEMPTS {
        let (cas, current) = env.kv.cas_begin(&key)?;
        let Some(bytes) = current else {
            return Ok(None);
        };
        let mut sub = Subscription::decode(&bytes)?;
        if sub.status != Status::Active || client_id.is_some_and(|c| c != sub.client_id) {
            return Ok(None);
        }
        // The client-index entry is marked before the record flips (see [`Listing`]).
        set_listing(env, &sub, |_| true, Listing::Leaving)?;
        sub.status = Status::Disabled;
        sub.disabled_reason = Some(reason.to_owned());
        sub.disabled_at = Some(env.now_ms);
        if env.kv.cas_swap(cas, &sub.encode())? {
            // Committed; index clean-up is best effort (readers skip disabled records), and
            // so is giving back the slot (a counter left high is corrected by the next
            // recount).
            let _ = remove_from_indexes(env, &sub);
            let nonce = crate::ids::hex(&env.random_bytes::<8>());
            let _ = update(env.kv, &keys::client_live(&sub.client_id), |current| {
                Ok::<_, ()>(match parse_live(current) {
                    Some(n) if n > 0 => Update::Write(encode_live(n - 1, &nonce), ()),
                    _ => Update::Keep(()),
                })
            });
            return Ok(Some(sub));
        }
    }
    Err(ApiError::store_unavailable(
        "the subscription kept changing",
    ))
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
            #[derive(Serialize)]
            struct Deleted<'a> {
                id: &'a str,
                status: &'static str,
            }
            let deleted = Deleted {
                id: &sub.id,
                status: "disabled",
            };
            Ok(Response::data(200, deleted, request_id))
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
        // DESIGN: limit 1..100, default 50.
        assert_eq!(params("").ok(), Some((50, 0)));
        assert_eq!(params("limit=100").ok(), Some((100, 0)));
        assert_eq!(params("limit=1").ok(), Some((1, 0)));
        let code = |q: &str| params(q).err().map(|e| e.details[0].code);
        assert_eq!(code("limit=101"), Some("out_of_range"));
        assert_eq!(code("limit=%zz"), Some("invalid"), "not percent-encoding");
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

#[cfg(test)]
mod record_tests {
    use super::*;

    fn sample() -> Subscription {
        Subscription {
            id: "sub_000000000000000000000007".into(),
            client_id: "acme".into(),
            url: "https://hooks.example.com/in?x=\"é\"".into(),
            event_types: vec!["load.created".into(), "load.status_changed".into()],
            signing_secret: Secret("whsec_abc".into()),
            status: Status::Disabled,
            disabled_reason: Some("repeated_failures".into()),
            created_at: 1_767_225_600_000,
            disabled_at: Some(1_767_225_700_000),
            seq: 42,
            consecutive_failures: 5,
            fanout_seqs: vec![3, 9],
        }
    }

    #[test]
    fn a_subscription_record_is_binary_and_reads_back_whole() {
        let full = sample();
        let empty = Subscription {
            status: Status::Pending,
            disabled_reason: None,
            disabled_at: None,
            event_types: Vec::new(),
            fanout_seqs: Vec::new(),
            consecutive_failures: 0,
            ..sample()
        };
        let active = Subscription {
            status: Status::Active,
            ..empty.clone()
        };
        for sub in [full, empty, active] {
            let bytes = sub.encode();
            assert_eq!(bytes[0], SUBSCRIPTION_V1);
            assert_eq!(Subscription::decode(&bytes).expect("decode"), sub);
        }
    }

    /// Record codecs round-trip any record: a URL of the longest length allowed (2048), or
    /// many event types (the size hint must not underflow for either).
    #[test]
    fn a_subscription_record_with_a_long_url_or_many_event_types_reads_back_whole() {
        let long_url = Subscription {
            url: format!("https://hooks.example.com/{}", "a".repeat(2048 - 26)),
            ..sample()
        };
        assert_eq!(long_url.url.len(), 2048);
        let many_types = Subscription {
            url: "https://a.example/".into(),
            event_types: (0..20).map(|n| format!("load.type_{n}")).collect(),
            fanout_seqs: (0..20).collect(),
            ..sample()
        };
        for sub in [long_url, many_types] {
            let bytes = sub.encode();
            assert_eq!(Subscription::decode(&bytes).expect("decode"), sub);
        }
    }

    #[test]
    fn a_damaged_subscription_record_is_an_error_not_a_panic_or_a_guess() {
        let bytes = sample().encode();
        crate::codec::assert_only_whole_records_read(&bytes, |b| Subscription::decode(b).is_ok());
        // Offsets: the version byte, then each string is 4 bytes of length and its bytes.
        let sub = sample();
        let str_len = |v: &str| 4 + v.len();
        let types_at = 1 + str_len(&sub.id) + str_len(&sub.client_id) + str_len(&sub.url);
        let status_at = types_at
            + 4
            + sub.event_types.iter().map(|t| str_len(t)).sum::<usize>()
            + str_len(&sub.signing_secret.0);
        assert_eq!(bytes[status_at], Status::Disabled.code());
        let mut bad = bytes.clone();
        bad[status_at] = 9;
        assert!(Subscription::decode(&bad).is_err(), "an unknown status");
        let mut huge = bytes.clone();
        huge[types_at..types_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            Subscription::decode(&huge).is_err(),
            "an absurd list length"
        );
        assert!(Subscription::decode(b"not json").is_err());
    }

    /// Only the binary format is read: a record in the JSON no release wrote is damage.
    #[test]
    fn a_subscription_record_in_another_format_is_not_read() {
        let json = br#"{"id":"sub_1","clientId":"acme","url":"https://x.example","eventTypes":[],"signingSecret":"whsec_abc","status":"active","disabledReason":null,"createdAt":1,"disabledAt":null,"seq":1}"#;
        assert!(Subscription::decode(json).is_err());
    }
}

#[cfg(test)]
mod listing_tests {
    use super::*;
    use crate::config::Settings;
    use crate::env::SeededEntropy;
    use crate::kv::MemoryKv;

    fn env<'a>(
        kv: &'a MemoryKv,
        settings: &'a Settings,
        entropy: &'a SeededEntropy,
    ) -> Env<'a, MemoryKv> {
        Env {
            now_ms: 1_000,
            kv,
            settings,
            entropy,
        }
    }

    fn create_one(env: &Env<'_, MemoryKv>, n: usize) -> Result<String, ApiError> {
        let req = Request::new("POST", "/v1/webhooks")
            .header("content-type", "application/json")
            .body(format!(
                r#"{{"url":"https://h{n}.example.com/x","eventTypes":["load.created"]}}"#
            ));
        let resp = create(env, &req, "acme", "req_1")?;
        let v: Value = serde_json::from_slice(&resp.body).expect("json");
        Ok(v["data"]["id"].as_str().expect("id").to_owned())
    }

    fn list_ids(env: &Env<'_, MemoryKv>) -> Vec<String> {
        let resp = list(
            env,
            &Request::new("GET", "/v1/webhooks?limit=100"),
            "acme",
            "req_2",
        )
        .expect("list");
        let v: Value = serde_json::from_slice(&resp.body).expect("list is JSON");
        assert_eq!(v["requestId"], "req_2");
        v["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|s| s["id"].as_str().expect("id").to_owned())
            .collect()
    }

    /// The ids of acme's active records, in creation order.
    fn active_ids(kv: &MemoryKv) -> Vec<String> {
        let mut subs: Vec<Subscription> = kv
            .dump()
            .iter()
            .filter(|(k, _)| k.starts_with("sub:"))
            .map(|(_, v)| Subscription::decode(v).expect("record"))
            .filter(|s: &Subscription| s.status == Status::Active && s.client_id == "acme")
            .collect();
        subs.sort_by_key(|s| s.seq);
        subs.into_iter().map(|s| s.id).collect()
    }

    #[test]
    fn list_shows_live_entries_from_the_index_without_reading_records() {
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(1));
        let env = env(&kv, &settings, &entropy);
        let ids: Vec<String> = (0..3)
            .map(|n| create_one(&env, n).expect("create"))
            .collect();
        // Damage the records: list must not need them.
        for id in &ids {
            kv.set(&keys::subscription(id), b"not json").expect("set");
        }
        assert_eq!(list_ids(&env), ids);
    }

    #[test]
    fn a_create_or_delete_cut_short_anywhere_never_lists_what_is_not_active() {
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(2));
        let env = env(&kv, &settings, &entropy);
        create_one(&env, 0).expect("create");
        let mut cut_short = 0;
        for n in 1.. {
            let before = active_ids(&kv);
            kv.fail_at(Some(n));
            let done = create_one(&env, n as usize).is_ok();
            kv.fail_at(None);
            assert_eq!(list_ids(&env), active_ids(&kv), "create failing at op {n}");
            if !done {
                assert_eq!(
                    active_ids(&kv),
                    before,
                    "a create that answered an error made nothing"
                );
            }
            if done {
                break;
            }
            cut_short += 1;
        }
        assert!(
            cut_short > 5,
            "the create was cut short at each of its steps"
        );
        for n in 1.. {
            let victim = active_ids(&kv)[0].clone();
            kv.fail_at(Some(n));
            let done = delete(&env, &victim, "acme", "req_3").is_ok();
            kv.fail_at(None);
            assert_eq!(list_ids(&env), active_ids(&kv), "delete failing at op {n}");
            if done {
                assert!(!list_ids(&env).contains(&victim));
                break;
            }
        }
    }

    /// Stores `sub` as a disable would have left it.
    fn store_disabled(kv: &MemoryKv, sub: &Subscription) {
        let disabled = Subscription {
            status: Status::Disabled,
            ..sub.clone()
        };
        kv.set(&keys::subscription(&disabled.id), &disabled.encode())
            .expect("flip");
    }

    #[test]
    fn activate_trusts_what_the_create_wrote_only_while_the_store_holds_those_bytes() {
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(4));
        let env = env(&kv, &settings, &entropy);
        let id = create_one(&env, 0).expect("create");
        let pending = Subscription {
            status: Status::Pending,
            ..load(&env, &id).expect("load").expect("record")
        };
        let bytes = pending.encode();
        // Unchanged since written: activated from what the create holds.
        kv.set(&keys::subscription(&id), &bytes).expect("set");
        activate(&env, &id, Some((&pending, &bytes))).expect("activate");
        let stored = load(&env, &id).expect("load").expect("record");
        assert_eq!(stored.status, Status::Active);
        // Disabled between the write and the flip: the stored record decides, not the
        // create's copy, and a disabled record is never made active again.
        kv.set(&keys::subscription(&id), &bytes).expect("set");
        store_disabled(&kv, &pending);
        activate(&env, &id, Some((&pending, &bytes))).expect("activate");
        let stored = load(&env, &id).expect("load").expect("record");
        assert_eq!(stored.status, Status::Disabled);
    }

    /// A store whose first compare-and-swap on a subscription record applies the write and
    /// then reports an error (Redis does that when the connection breaks after the script
    /// ran).
    struct SwapAppliedThenFailed<'a> {
        inner: &'a MemoryKv,
        tripped: std::cell::Cell<bool>,
    }

    impl Kv for SwapAppliedThenFailed<'_> {
        type Cas = <MemoryKv as Kv>::Cas;
        fn get(
            &self,
            key: &(impl crate::keys::AsKey + ?Sized),
        ) -> Result<Option<Vec<u8>>, crate::kv::KvError> {
            let key = key.key_str();
            self.inner.get(key)
        }
        fn set(
            &self,
            key: &(impl crate::keys::AsKey + ?Sized),
            value: &[u8],
        ) -> Result<(), crate::kv::KvError> {
            let key = key.key_str();
            self.inner.set(key, value)
        }
        fn delete(
            &self,
            key: &(impl crate::keys::AsKey + ?Sized),
        ) -> Result<(), crate::kv::KvError> {
            let key = key.key_str();
            self.inner.delete(key)
        }
        fn get_many(
            &self,
            keys: &[impl crate::keys::AsKey],
        ) -> Result<Vec<Option<Vec<u8>>>, crate::kv::KvError> {
            self.inner.get_many(keys)
        }
        fn increment(
            &self,
            key: &(impl crate::keys::AsKey + ?Sized),
            delta: i64,
        ) -> Result<i64, crate::kv::KvError> {
            let key = key.key_str();
            self.inner.increment(key, delta)
        }
        fn cas_begin(
            &self,
            key: &(impl crate::keys::AsKey + ?Sized),
        ) -> Result<(Self::Cas, Option<Vec<u8>>), crate::kv::KvError> {
            let key = key.key_str();
            self.inner.cas_begin(key)
        }
        fn cas_swap(&self, cas: Self::Cas, value: &[u8]) -> Result<bool, crate::kv::KvError> {
            let trip = cas.0.starts_with("sub:") && !self.tripped.replace(true);
            let swapped = self.inner.cas_swap(cas, value)?;
            if trip {
                return Err(crate::kv::KvError("connection reset".into()));
            }
            Ok(swapped)
        }
    }

    #[test]
    fn a_create_whose_commit_reported_an_error_is_replayed_by_its_retry_not_made_twice() {
        // The create stored its response under the key, then its commit (pending -> active)
        // applied but the store answered with an error. The response stays: the retry with
        // the key replays it instead of creating a second subscription with a new secret.
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(6));
        let flaky = SwapAppliedThenFailed {
            inner: &kv,
            tripped: std::cell::Cell::new(false),
        };
        let req = Request::new("POST", "/v1/webhooks")
            .header("content-type", "application/json")
            .header("idempotency-key", "k")
            .body(r#"{"url":"https://h.example.com/x","eventTypes":["load.created"]}"#);
        let env_of = |kv| Env {
            now_ms: 1_000,
            kv,
            settings: &settings,
            entropy: &entropy,
        };
        let first = create(&env_of(&flaky), &req, "acme", "req_1");
        assert!(first.is_err(), "the commit reported an error");
        assert!(flaky.tripped.get());
        let made = active_ids(&kv);
        assert_eq!(made.len(), 1, "the commit did apply");
        let retry = create(&env_of(&flaky), &req, "acme", "req_2").expect("retry");
        assert_eq!(retry.status, 201);
        let v: Value = serde_json::from_slice(&retry.body).expect("json");
        assert_eq!(v["data"]["id"].as_str(), Some(made[0].as_str()), "replayed");
        assert!(
            retry
                .headers
                .iter()
                .any(|(n, v)| n == "idempotent-replayed" && v == "true")
        );
        assert_eq!(active_ids(&kv), made, "one subscription, not two");
    }

    #[test]
    fn a_create_never_makes_live_an_entry_a_disable_has_marked() {
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(3));
        let env = env(&kv, &settings, &entropy);
        let id = create_one(&env, 0).expect("create");
        let sub = load(&env, &id).expect("load").expect("record");
        // As if the create had activated the record but not yet made its entry live ...
        set_listing(&env, &sub, |_| true, Listing::Joining).expect("set");
        // ... when a disable marked the entry and flipped the record (and had not yet
        // removed the entry) ...
        set_listing(&env, &sub, |_| true, Listing::Leaving).expect("mark");
        store_disabled(&kv, &sub);
        // ... before the create's last step.
        make_live(&env, &sub).expect("set");
        assert_eq!(list_ids(&env), Vec::<String>::new());
    }

    /// One page of acme's list: the ids, `hasMore`, `nextCursor`.
    fn page(env: &Env<'_, MemoryKv>, query: &str) -> (Vec<String>, bool, Option<String>) {
        let resp = list(
            env,
            &Request::new("GET", &format!("/v1/webhooks?{query}")),
            "acme",
            "req_p",
        )
        .expect("list");
        assert!(
            !resp.body.contains(&b' '),
            "compact JSON, each item as stored: {}",
            String::from_utf8_lossy(&resp.body)
        );
        let v: Value = serde_json::from_slice(&resp.body).expect("list is JSON");
        let ids = v["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|s| s["id"].as_str().expect("id").to_owned())
            .collect();
        let has_more = v["hasMore"].as_bool().expect("hasMore");
        let next = v["nextCursor"].as_str().map(str::to_owned);
        assert_eq!(
            has_more,
            next.is_some(),
            "a cursor exactly when there is more"
        );
        (ids, has_more, next)
    }

    /// All of acme's pages with `limit`, following `nextCursor` to the end.
    fn walk(env: &Env<'_, MemoryKv>, limit: usize) -> Vec<Vec<String>> {
        let mut pages = Vec::new();
        let mut query = format!("limit={limit}");
        loop {
            let (ids, _, next) = page(env, &query);
            pages.push(ids);
            match next {
                Some(cursor) => query = format!("limit={limit}&cursor={cursor}"),
                None => return pages,
            }
            assert!(pages.len() < 100, "the walk ends");
        }
    }

    /// DESIGN §3 (List): `limit` items a page in creation order; `hasMore` and a `nextCursor`
    /// exactly when more follow (not when the last page is exactly full); following the
    /// cursors yields every active subscription once; entries of creates cut short (no
    /// active record) are skipped without shortening a page or ending the walk.
    #[test]
    fn paging_walks_every_active_subscription_once_in_creation_order() {
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(7));
        let env = env(&kv, &settings, &entropy);
        let mut ids: Vec<String> = Vec::new();
        for n in 0..5 {
            ids.push(create_one(&env, n).expect("create"));
        }
        assert_eq!(
            page(&env, "limit=5"),
            (ids.clone(), false, None),
            "exactly full"
        );
        assert_eq!(page(&env, "limit=6").0, ids);
        let (first, more, _) = page(&env, "limit=4");
        assert_eq!((first, more), (ids[..4].to_vec(), true));
        assert_eq!(
            walk(&env, 1),
            ids.iter().map(|id| vec![id.clone()]).collect::<Vec<_>>()
        );
        assert_eq!(
            walk(&env, 2),
            [ids[..2].to_vec(), ids[2..4].to_vec(), ids[4..].to_vec()]
        );
        // Creates cut short after appending their entry: entries with no active record.
        let index = client_index("acme");
        for n in 0..3 {
            let ghost = format!("sub_{n:024x}");
            index
                .append(&kv, &[encode_index_item(Listing::Joining, &ghost, b"{}")])
                .expect("append");
        }
        for n in 5..8 {
            ids.push(create_one(&env, n).expect("create"));
        }
        for limit in [1, 2, 3, 4, 5, 7, 8, 50] {
            let pages = walk(&env, limit);
            assert!(
                pages.iter().rev().skip(1).all(|p| p.len() == limit),
                "limit {limit}: every page but the last is full: {pages:?}"
            );
            assert_eq!(pages.concat(), ids, "limit {limit}");
        }
        assert_eq!(page(&env, "limit=8"), (ids.clone(), false, None));
    }

    /// DESIGN §3: the per-client cap counts active subscriptions. A disable gives its slot
    /// back in the client's live counter, once (the create at the cap would recount anyway,
    /// but the counter is what every create reads); a counter already at 0 stays there; a
    /// disable that finds nothing active (another client's, already disabled, not an id)
    /// gives back nothing.
    #[test]
    fn a_disabled_subscription_gives_its_slot_back_once() {
        let kv = MemoryKv::new();
        let settings = Settings {
            subscription_limit: 2,
            ..Settings::default()
        };
        let entropy = SeededEntropy::new(8);
        let env = env(&kv, &settings, &entropy);
        let live = || parse_live(kv.get(&keys::client_live("acme")).expect("get").as_deref());
        let a = create_one(&env, 0).expect("create");
        let b = create_one(&env, 1).expect("create");
        assert_eq!(live(), Some(2));
        let full = create_one(&env, 2).expect_err("the cap");
        assert_eq!(
            (full.status, full.code),
            (422, "subscription_limit_reached")
        );
        assert_eq!(
            disable(&env, &a, Some("globex"), "deleted").expect("disable"),
            None
        );
        assert_eq!(live(), Some(2), "another client's disable frees nothing");
        let disabled = disable(&env, &a, Some("acme"), "deleted")
            .expect("disable")
            .expect("was active");
        assert_eq!(disabled.status, Status::Disabled);
        assert_eq!(disabled.disabled_reason.as_deref(), Some("deleted"));
        assert_eq!(disabled.disabled_at, Some(env.now_ms));
        assert_eq!(live(), Some(1), "the slot is given back");
        assert_eq!(disable(&env, &a, None, "operator").expect("again"), None);
        assert_eq!(
            disable(&env, "not-an-id", None, "operator").expect("no such id"),
            None
        );
        assert_eq!(live(), Some(1), "once");
        create_one(&env, 4).expect("the slot is taken again");
        assert!(create_one(&env, 5).is_err(), "at the cap again");
        // A counter that is already 0 (written by an earlier version, or reset) stays 0.
        kv.set(&keys::client_live("acme"), &encode_live(0, "n"))
            .expect("set");
        disable(&env, &b, None, "operator")
            .expect("disable")
            .expect("was active");
        assert_eq!(live(), Some(0));
    }
}
