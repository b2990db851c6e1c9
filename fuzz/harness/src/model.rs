//! What must hold across requests, checked after every one of them:
//!
//! - **Authentication.** Without the admin token no `/internal/` call succeeds, with it none
//!   is a 401; without a live API key no `/v1/` call succeeds, with one none is a 401. A
//!   revoked key is dead; a read-only (`partner_read`) key's writes never succeed.
//! - **Ownership.** A partner only ever sees, reads or deletes its own subscriptions; lists
//!   are in creation order and never carry `signingSecret`; an own active subscription can be
//!   read and deleted (unless a tick may have disabled it).
//! - **Disabled until enabled** (SPEC §3.1): a deleted or operator-disabled
//!   subscription is never listed, deleted again, replayed, or delivered to until an enable
//!   answers 200; its owner reads it as `disabled` (a deleted one is 404 to its owner and
//!   never enabled again), and an enabled one lists after those created before the enable.
//! - **Secrets.** A signing secret appears only in its own create response (and its
//!   replays, until a delete erases it); an API key only in its issue response; the admin
//!   token nowhere.
//! - **Idempotency** (DESIGN.md §3). Create: the same client, key and body within 24 h gets
//!   the first response again (same `data`, `Idempotent-Replayed: true`); another body gets
//!   no 201; a 409 needs a reason. Ingest: the same key and body gets the same event.
//! - **Deliveries** (SPEC §4.4, §5.2). Every request the core sends is https, carries a body
//!   that was published byte for byte, the SPEC headers, the current timestamp, and a
//!   signature that verifies with the secret of an active subscription of that event type.

use crate::check::is_id;
use crate::world::{ADMIN_TOKEN, Reply};
use edgehook_component::delivery::{Outgoing, SendResult};
use edgehook_component::model::http::Request;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use std::collections::{BTreeMap, BTreeSet};

mod events;
mod partner;

/// How long a create's `Idempotency-Key` is kept (DESIGN.md §3).
pub const IDEMPOTENCY_TTL_MS: u64 = 24 * 60 * 60 * 1000;
/// How long an unfinished claim on a key blocks others (docs/design/http.md, "Idempotency").
pub const STALE_CLAIM_MS: u64 = 60 * 1000;

/// An API key the model knows.
#[derive(Debug, Clone)]
pub struct KeyInfo {
    /// The client it acts for.
    pub client: String,
    /// Its id (`key_...`).
    pub id: String,
    /// Whether the operator revoked it.
    pub revoked: bool,
    /// Whether its scope is `partner_read`: it may only read.
    pub read_only: bool,
}

/// A subscription the model knows.
#[derive(Debug, Clone)]
pub struct SubInfo {
    /// The owning client.
    pub client: String,
    /// Its signing secret.
    pub secret: String,
    /// The URL it was created with.
    pub url: String,
    /// Its event types.
    pub event_types: Vec<String>,
    /// Known to be disabled (deleted, or disabled by the operator).
    pub disabled: bool,
    /// Deleted by its owner: never enabled again.
    pub deleted: bool,
}

/// A create that answered 201 under an idempotency key.
#[derive(Debug, Clone)]
struct Created {
    at: u64,
    body: Vec<u8>,
    data: Value,
}

/// A create under an idempotency key that failed under a store fault: it may have stored
/// its response before the fault (the response is then kept, never released), and a retry
/// with the same body replays it and finishes the create.
#[derive(Debug, Clone)]
struct Unfinished {
    /// When it ran: its subscription's `createdAt` if it made one.
    at: u64,
    body: Vec<u8>,
    /// Its place in creation order ([`Model::order`]), among every create observed.
    rank: u64,
}

/// An ingest that answered 202 under an idempotency key.
#[derive(Debug, Clone)]
struct Ingested {
    at: u64,
    event_type: Vec<u8>,
    body: Vec<u8>,
    event_id: String,
}

/// The model: what the harness knows the service has done.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// API keys by token.
    pub keys: BTreeMap<String, KeyInfo>,
    /// Subscriptions by id.
    pub subs: BTreeMap<String, SubInfo>,
    /// Subscription ids in creation order (all clients).
    pub order: Vec<String>,
    /// Loads accepted by ingest (what a delivery body may be).
    pub bodies: BTreeSet<Vec<u8>>,
    /// A tick got a failure from an endpoint, so a subscription may have been disabled
    /// automatically (410 at once, or a failure streak) without the model knowing which.
    pub maybe_auto_disabled: bool,
    /// Subscriptions whose place in list order the model cannot know: enabled while they
    /// may have been disabled automatically (the enable then moved them to the end, or not).
    pub unordered: BTreeSet<String>,
    /// The latest subscription created (`$LASTSUB`).
    pub last_sub: Option<String>,
    /// The latest event accepted (`$EVT`).
    pub last_event: Option<String>,
    /// The latest API key issued (`$NEWKEY`) and its id (`$KEYID`).
    pub last_key: Option<String>,
    /// Id of [`Model::last_key`].
    pub last_key_id: Option<String>,
    /// The latest `nextCursor` seen (`$CUR`).
    pub last_cursor: Option<String>,
    /// Every text the inputs supplied so far (request paths, header values but credentials,
    /// bodies, scripted network errors): a secret found in a response is only a leak if
    /// it does not appear here (the fuzzer learns tokens from comparisons and may store
    /// them in a URL or an error message that is echoed later).
    supplied: Vec<u8>,
    creates: BTreeMap<(String, Vec<u8>), Created>,
    maybe_created: BTreeMap<(String, Vec<u8>), Created>,
    create_faults: BTreeMap<(String, Vec<u8>), u64>,
    unfinished: BTreeMap<(String, Vec<u8>), Vec<Unfinished>>,
    /// Creates observed so far; a subscription's rank is the number of the create that
    /// made it.
    creates_seen: u64,
    ranks: BTreeMap<String, u64>,
    ingests: BTreeMap<Vec<u8>, Ingested>,
    ingest_faults: BTreeSet<Vec<u8>>,
}

/// `1..=255` printable ASCII characters: the `Idempotency-Key` rule, written independently.
pub fn valid_idempotency_key(raw: &[u8]) -> bool {
    (1..=255).contains(&raw.len()) && raw.iter().all(|b| (0x20..=0x7e).contains(b))
}

/// The raw value of the first header `name`.
pub fn first_header<'a>(req: &'a Request, name: &str) -> Option<&'a [u8]> {
    req.headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
}

/// The bearer token of a request, read independently of the core: the first
/// `Authorization` header, `Bearer` in any case, one space, the token trimmed.
fn bearer_token(req: &Request) -> Option<String> {
    let raw = first_header(req, "authorization")?;
    let value = std::str::from_utf8(raw).ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

/// A failed request never says `Idempotent-Replayed`.
fn never_replayed(replayed: bool, reply: &Reply, what: &dyn Fn() -> String) {
    assert!(
        !replayed,
        "Idempotent-Replayed on a {}: {}",
        reply.status,
        what()
    );
}

fn hmac_hex(secret: &str, timestamp: &str, body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => panic!("HMAC takes keys of any length"),
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

impl Model {
    /// Forgets the "latest" pointers (after seeding, so placeholders start from the seed).
    pub fn forget_recent(&mut self) {
        self.last_sub = None;
        self.last_event = None;
        self.last_key = None;
        self.last_key_id = None;
        self.last_cursor = None;
    }

    /// The ids of `client`'s subscriptions that are not known to be disabled, in creation
    /// order.
    pub fn active_of(&self, client: &str) -> Vec<String> {
        self.order
            .iter()
            .filter(|id| {
                self.subs
                    .get(*id)
                    .is_some_and(|s| s.client == client && !s.disabled)
            })
            .cloned()
            .collect()
    }

    /// Checks `reply` (to `req`, at `now`, with `sent` the deliveries the call made) against
    /// the model, then learns from it.
    pub fn observe(
        &mut self,
        req: &Request,
        reply: &Reply,
        now: u64,
        faulted: bool,
        sent: &[(Outgoing, SendResult)],
    ) {
        let what = || {
            format!(
                "{} {}{} -> {} {}",
                req.method,
                req.path,
                req.query
                    .as_deref()
                    .map(|q| format!("?{q}"))
                    .unwrap_or_default(),
                reply.status,
                reply.text
            )
        };
        self.check_leaks(req, reply, &what);
        let token = bearer_token(req);
        let admin = token.as_deref() == Some(ADMIN_TOKEN);
        let client = token
            .as_deref()
            .and_then(|t| self.keys.get(t))
            .filter(|k| !k.revoked)
            .map(|k| k.client.clone());
        if req.path.starts_with("/internal/") {
            assert!(
                admin || !reply.ok(),
                "operator call without the admin token: {}",
                what()
            );
            assert!(
                !admin || reply.status != 401,
                "the admin token was refused: {}",
                what()
            );
        }
        if req.path.starts_with("/v1/") {
            assert!(
                client.is_some() || !reply.ok(),
                "partner call without a live key: {}",
                what()
            );
            assert!(
                client.is_none() || reply.status != 401,
                "a live key was refused: {}",
                what()
            );
        }
        // A read-only key's write never succeeds (403 once routed), and changes nothing the
        // model tracks.
        let read_only = token
            .as_deref()
            .and_then(|t| self.keys.get(t))
            .is_some_and(|k| !k.revoked && k.read_only);
        let client = if read_only && req.method != "GET" {
            assert!(!reply.ok(), "a read-only key wrote: {}", what());
            None
        } else {
            client
        };
        // Only a path that starts with `/` names a route (the router answers 404 to any
        // other, e.g. control bytes before the slash).
        let segments: Vec<&str> = match req.path.strip_prefix('/') {
            Some(rest) => rest.split('/').collect(),
            None => Vec::new(),
        };
        let method = req.method.as_str();
        match (method, segments.as_slice()) {
            ("POST", ["v1", "webhooks"]) => {
                if let Some(client) = &client {
                    self.on_create(req, reply, client, now, faulted, &what);
                }
            }
            ("GET", ["v1", "webhooks"]) => {
                if let Some(client) = &client {
                    match req.query_param("status") {
                        Ok(Some(s)) if s == "disabled" => {
                            self.on_list_disabled(reply, client, &what)
                        }
                        _ => self.on_list(reply, client, &what),
                    }
                }
            }
            ("GET", ["v1", "webhooks", id]) => {
                if let Some(client) = &client {
                    self.on_read(reply, client, id, faulted, &what);
                }
            }
            ("DELETE", ["v1", "webhooks", id]) => {
                if let Some(client) = &client {
                    self.on_delete(reply, client, id, faulted, &what);
                    if reply.status == 200 {
                        assert_eq!(reply.body["data"]["status"], "disabled", "{}", what());
                        self.disable(id);
                        if let Some(s) = self.subs.get_mut(*id) {
                            s.deleted = true;
                        }
                    }
                }
            }
            ("POST", ["v1", "webhooks", id, "enable"]) => {
                if let Some(client) = &client
                    && reply.status == 200
                {
                    let known = self.subs.get(*id);
                    assert!(
                        known.is_some_and(|s| s.client == *client && !s.deleted),
                        "enabled a subscription not its own or deleted: {}",
                        what()
                    );
                    self.on_enabled(id, &what);
                }
            }
            ("POST", ["internal", "v1", "events"]) if admin => {
                self.on_ingest(req, reply, now, faulted, &what);
            }
            _ if !admin || !reply.ok() => {}
            ("POST", ["internal", "v1", "clients", client, "keys"]) => {
                let key = reply.body["data"]["apiKey"].as_str().unwrap_or("");
                let id = reply.body["data"]["id"].as_str().unwrap_or("");
                assert!(key.starts_with("ehk_") && is_id(id, "key_"), "{}", what());
                assert_eq!(
                    reply.body["data"]["clientId"].as_str(),
                    Some(*client),
                    "{}",
                    what()
                );
                assert!(
                    !self.keys.contains_key(key),
                    "a key was issued twice: {}",
                    what()
                );
                self.keys.insert(
                    key.to_owned(),
                    KeyInfo {
                        client: (*client).to_owned(),
                        id: id.to_owned(),
                        revoked: false,
                        read_only: reply.body["data"]["scope"] == "partner_read",
                    },
                );
                self.last_key = Some(key.to_owned());
                self.last_key_id = Some(id.to_owned());
            }
            ("DELETE", ["internal", "v1", "clients", client, "keys", key_id]) => {
                let known = self.keys.values_mut().find(|k| k.id == *key_id);
                let Some(known) = known else {
                    panic!("revoked a key nobody issued: {}", what());
                };
                assert!(
                    known.client == *client && !known.revoked,
                    "revoked another client's or a dead key: {}",
                    what()
                );
                known.revoked = true;
            }
            ("POST", ["internal", "v1", "subscriptions", id, "disable"]) => {
                let known = self.subs.get(*id);
                assert!(
                    known.is_some_and(|s| !s.disabled),
                    "disabled a subscription that was not active: {}",
                    what()
                );
                self.disable(id);
            }
            ("POST", ["internal", "v1", "subscriptions", id, "enable"]) => {
                assert!(
                    self.subs.get(*id).is_some_and(|s| !s.deleted),
                    "enabled a deleted or unknown subscription: {}",
                    what()
                );
                self.on_enabled(id, &what);
            }
            ("GET", ["internal", "v1", "subscriptions", id]) => {
                assert_eq!(reply.body["data"]["id"].as_str(), Some(*id), "{}", what());
                assert!(
                    reply.body["data"].get("signingSecret").is_none(),
                    "{}",
                    what()
                );
                if self.subs.get(*id).is_some_and(|s| s.disabled) {
                    assert_eq!(reply.body["data"]["status"], "disabled", "{}", what());
                }
            }
            ("POST", ["internal", "v1", "deliveries", _, "replay"]) => {
                let sub = reply.body["data"]["subscriptionId"].as_str().unwrap_or("");
                assert!(
                    self.subs.get(sub).is_some_and(|s| !s.disabled),
                    "replayed a delivery of a disabled subscription: {}",
                    what()
                );
            }
            _ => {}
        }
        // After the route: a publish's own attempts (run once its response is out) carry
        // the body it has just recorded.
        for (out, result) in sent {
            self.check_delivery(out, result, now, &what);
        }
        if let Some(cursor) = reply.body["nextCursor"].as_str() {
            self.last_cursor = Some(cursor.to_owned());
        }
    }

    /// An enable answered 200: active again, and (if it was disabled) last in list order.
    fn on_enabled(&mut self, id: &str, what: &dyn Fn() -> String) {
        let Some(s) = self.subs.get_mut(id) else {
            panic!("enabled an unknown subscription: {}", what());
        };
        let was_disabled = std::mem::replace(&mut s.disabled, false);
        if was_disabled {
            self.order.retain(|o| o != id);
            self.order.push(id.to_owned());
            self.creates_seen += 1;
            self.ranks.insert(id.to_owned(), self.creates_seen);
        } else if self.maybe_auto_disabled {
            self.unordered.insert(id.to_owned());
        }
    }

    fn disable(&mut self, id: &str) {
        if let Some(s) = self.subs.get_mut(id) {
            s.disabled = true;
        }
    }

    /// Records text the network will answer with (scripted transport errors), which the
    /// service may store and show.
    pub fn supplied_by_network(&mut self, text: &str) {
        self.supplied.extend_from_slice(text.as_bytes());
        self.supplied.push(0);
    }

    /// No response carries a secret, key or token it has no business carrying (unless an
    /// input supplied that text: error messages and stored fields may quote it).
    fn check_leaks(&mut self, req: &Request, reply: &Reply, what: &dyn Fn() -> String) {
        let supplied = &mut self.supplied;
        for part in [
            req.path.as_bytes(),
            req.query.as_deref().unwrap_or("").as_bytes(),
        ] {
            supplied.extend_from_slice(part);
            supplied.push(0);
        }
        for (name, value) in &req.headers {
            if name != "authorization" {
                supplied.extend_from_slice(value);
                supplied.push(0);
            }
        }
        supplied.extend_from_slice(&req.body);
        supplied.push(0);
        let supplied = &self.supplied;
        let in_request = |s: &str| supplied.windows(s.len()).any(|w| w == s.as_bytes());
        if reply.text.contains(ADMIN_TOKEN) {
            assert!(
                in_request(ADMIN_TOKEN),
                "the admin token leaked: {}",
                what()
            );
        }
        for (id, sub) in &self.subs {
            if reply.text.contains(&sub.secret) && !in_request(&sub.secret) {
                let own = req.method == "POST"
                    && req.path == "/v1/webhooks"
                    && reply.status == 201
                    && reply.body["data"]["id"].as_str() == Some(id);
                assert!(own, "the signing secret of {id} leaked: {}", what());
            }
        }
        for (key, info) in &self.keys {
            if reply.text.contains(key) && !in_request(key) {
                panic!("API key {} leaked: {}", info.id, what());
            }
        }
    }
}
