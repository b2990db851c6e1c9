//! The load of a soak run: the partner API clients and the event publishers, and what they
//! share ([`Ctx`]: the receivers, the counting client, what was created and published).
//! Everything talks to 127.0.0.1 only.

use crate::api::{Api, Op};
use crate::receivers::Receivers;
use crate::records::{Behavior, DeliveryView, Event, Sub, SubState};
use crate::shared::lock;
use anyhow::{Context as _, Result};
use bytes::Bytes;
use edgehook_runtime::log::now_ms;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::MissedTickBehavior;

/// The event types of SPEC §6.
pub const EVENT_TYPES: [&str; 3] = ["load.created", "load.updated", "load.status_changed"];

/// What the load's tasks share.
pub struct Ctx {
    /// The client of the server.
    pub api: Api,
    /// The receivers.
    pub receivers: Receivers,
    /// The operator token.
    pub admin: String,
    /// Share of new subscriptions that point at a failing receiver, in percent.
    pub failing_percent: u32,
    /// Every subscription created.
    pub subs: Mutex<Vec<Sub>>,
    /// Every event published.
    pub events: Mutex<Vec<Event>>,
    /// Set when the load must stop.
    pub stop: AtomicBool,
}

impl Ctx {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn mark_deleted(&self, id: &str, sent_ms: u64, resp_ms: u64) {
        if let Some(s) = lock(&self.subs).iter_mut().find(|s| s.id == id) {
            s.deleted_ms = Some((sent_ms, resp_ms));
        }
    }

    /// Issues an API key for `client`.
    pub async fn issue_key(&self, client: &str) -> Result<String> {
        let reply = self
            .api
            .call(
                Op::IssueKey,
                "POST",
                &format!("/internal/v1/clients/{client}/keys"),
                &self.admin,
                &[],
                None,
            )
            .await
            .context("issuing a key: no answer")?;
        reply.json["data"]["apiKey"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("issuing a key: {} {}", reply.status, reply.json))
    }

    /// Creates a subscription for `key`'s client with URL path `path` on the `behavior`
    /// receiver; records it. `None` if the create did not answer 201 (counted).
    async fn create(
        &self,
        key: &str,
        idempotency_key: &str,
        behavior: Behavior,
        path: &str,
        event_types: Vec<String>,
    ) -> Option<(Sub, String)> {
        let body = json!({"url": self.receivers.url(behavior, path), "eventTypes": event_types})
            .to_string();
        let headers = [
            ("content-type", "application/json"),
            ("idempotency-key", idempotency_key),
        ];
        let r = self
            .api
            .call(
                Op::Create,
                "POST",
                "/v1/webhooks",
                key,
                &headers,
                Some(body.clone()),
            )
            .await?;
        if r.status != 201 {
            return None;
        }
        let id = r.json["data"]["id"].as_str();
        let secret = r.json["data"]["signingSecret"].as_str();
        let (Some(id), Some(secret)) = (id, secret) else {
            self.api.problem(format!(
                "create answered 201 without id and secret: {}",
                r.json
            ));
            return None;
        };
        let sub = Sub {
            id: id.to_owned(),
            behavior,
            path: path.to_owned(),
            secret: secret.to_owned(),
            event_types,
            created_sent_ms: r.sent_ms,
            created_resp_ms: r.resp_ms,
            deleted_ms: None,
            state: None,
        };
        lock(&self.subs).push(sub.clone());
        Some((sub, body))
    }

    /// Creates the `n` subscriptions that live through the whole run, spread over `keys`:
    /// `failing_percent` of them (evenly spread) on failing receivers, in turn 500, 503,
    /// refused, timeout.
    pub async fn create_fixed(&self, keys: &[String], n: usize, rng: &mut StdRng) -> Result<()> {
        let p = f64::from(self.failing_percent) / 100.0;
        let mut failing = 0usize;
        for i in 0..n {
            let behavior = if ((i + 1) as f64 * p).floor() > (i as f64 * p).floor() {
                failing += 1;
                Behavior::FAILING[(failing - 1) % Behavior::FAILING.len()]
            } else {
                Behavior::Ok
            };
            let key = &keys[i % keys.len()];
            let types = pick_types(rng);
            self.create(
                key,
                &format!("soak-fixed-{i}"),
                behavior,
                &format!("/f/{i}"),
                types,
            )
            .await
            .with_context(|| format!("creating fixed subscription {i}"))?;
        }
        Ok(())
    }

    fn pick_behavior(&self, rng: &mut StdRng) -> Behavior {
        if rng.random_range(0..100) < self.failing_percent {
            Behavior::FAILING[rng.random_range(0..Behavior::FAILING.len())]
        } else {
            Behavior::Ok
        }
    }

    /// Reads a subscription's state through the operator API.
    pub async fn sub_state(&self, id: &str) -> Option<SubState> {
        let r = self
            .api
            .call(
                Op::OperatorRead,
                "GET",
                &format!("/internal/v1/subscriptions/{id}"),
                &self.admin,
                &[],
                None,
            )
            .await?;
        if r.status != 200 {
            return None;
        }
        serde_json::from_value(r.json["data"].clone()).ok()
    }

    /// Reads every delivery of a subscription through the operator API (pages of 100).
    pub async fn history(&self, id: &str) -> Option<Vec<DeliveryView>> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                None => format!("/internal/v1/subscriptions/{id}/deliveries?limit=100"),
                Some(c) => {
                    format!("/internal/v1/subscriptions/{id}/deliveries?limit=100&cursor={c}")
                }
            };
            let r = self
                .api
                .call(Op::OperatorRead, "GET", &path, &self.admin, &[], None)
                .await?;
            if r.status != 200 {
                return None;
            }
            let mut page: Vec<DeliveryView> = match serde_json::from_value(r.json["data"].clone()) {
                Ok(p) => p,
                Err(e) => {
                    self.api.problem(format!("{path}: unreadable page: {e}"));
                    return None;
                }
            };
            for d in &mut page {
                d.read_at_ms = r.sent_ms;
            }
            out.extend(page);
            match r.json["nextCursor"].as_str() {
                Some(c) if r.json["hasMore"] == true => cursor = Some(c.to_owned()),
                _ => return Some(out),
            }
        }
    }

    /// Reads one delivery through the operator API.
    pub async fn delivery(&self, id: &str) -> Option<DeliveryView> {
        let r = self
            .api
            .call(
                Op::OperatorRead,
                "GET",
                &format!("/internal/v1/deliveries/{id}"),
                &self.admin,
                &[],
                None,
            )
            .await?;
        let mut d: DeliveryView = serde_json::from_value(r.json["data"].clone()).ok()?;
        d.read_at_ms = r.sent_ms;
        Some(d)
    }
}

/// A random non-empty set of event types.
fn pick_types(rng: &mut StdRng) -> Vec<String> {
    let mask = rng.random_range(1..8u8);
    EVENT_TYPES
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, t)| (*t).to_owned())
        .collect()
}

/// A paced loop: one request per `interval`, until the context says stop.
fn pace(interval: Duration) -> tokio::time::Interval {
    let mut p = tokio::time::interval(interval);
    p.set_missed_tick_behavior(MissedTickBehavior::Delay);
    p
}

/// Subscriptions one API client keeps; creating one more deletes its oldest.
const KEEP_LIVE: usize = 5;

/// One partner API client: create (with an `Idempotency-Key`, sometimes sent twice), read
/// one, list every page, delete the oldest beyond `KEEP_LIVE` and read it again (404); every
/// tenth round also an invalid create (422). One request per `interval`.
pub async fn api_client(ctx: Arc<Ctx>, no: usize, key: String, interval: Duration, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pace = pace(interval);
    let mut live: VecDeque<String> = VecDeque::new();
    let json = ("content-type", "application/json");
    let mut n = 0u64;
    while !ctx.stopped() {
        n += 1;
        if n.is_multiple_of(10) {
            pace.tick().await;
            let body = json!({"url": ctx.receivers.url(Behavior::Ok, "/invalid"), "eventTypes": ["load.deleted"]});
            ctx.api
                .call(
                    Op::CreateInvalid,
                    "POST",
                    "/v1/webhooks",
                    &key,
                    &[json],
                    Some(body.to_string()),
                )
                .await;
        }
        pace.tick().await;
        let behavior = ctx.pick_behavior(&mut rng);
        let types = pick_types(&mut rng);
        let idem = format!("soak-c{no}-{n}");
        let path = format!("/c{no}/{n}");
        if let Some((sub, body)) = ctx.create(&key, &idem, behavior, &path, types).await {
            live.push_back(sub.id.clone());
            if rng.random_bool(0.2) {
                pace.tick().await;
                let headers = [json, ("idempotency-key", idem.as_str())];
                if let Some(r) = ctx
                    .api
                    .call(
                        Op::CreateReplay,
                        "POST",
                        "/v1/webhooks",
                        &key,
                        &headers,
                        Some(body),
                    )
                    .await
                    && r.status == 201
                    && (!r.replayed
                        || r.json["data"]["id"] != sub.id.as_str()
                        || r.json["data"]["signingSecret"] != sub.secret.as_str())
                {
                    ctx.api.problem(format!(
                        "create replayed with key {idem} did not return {} (replayed: {})",
                        sub.id, r.replayed
                    ));
                }
            }
        }
        if !live.is_empty() {
            pace.tick().await;
            let pick = live[rng.random_range(0..live.len())].clone();
            if let Some(r) = ctx
                .api
                .call(
                    Op::Get,
                    "GET",
                    &format!("/v1/webhooks/{pick}"),
                    &key,
                    &[],
                    None,
                )
                .await
                && r.status == 200
                && (r.json["data"]["id"] != pick.as_str()
                    || r.json["data"].get("signingSecret").is_some())
            {
                ctx.api
                    .problem(format!("GET {pick} answered another or with a secret"));
            }
        }
        list_all(&ctx, &key, &live, &mut pace).await;
        if live.len() > KEEP_LIVE
            && let Some(old) = live.pop_front()
        {
            pace.tick().await;
            let path = format!("/v1/webhooks/{old}");
            match ctx
                .api
                .call(Op::Delete, "DELETE", &path, &key, &[], None)
                .await
            {
                Some(r) if r.status == 200 => ctx.mark_deleted(&old, r.sent_ms, r.resp_ms),
                _ => {
                    live.push_front(old);
                    continue;
                }
            }
            pace.tick().await;
            ctx.api
                .call(Op::GetDeleted, "GET", &path, &key, &[], None)
                .await;
        }
    }
}

/// Lists every page (2 per page) and checks the list is exactly the client's live set.
async fn list_all(ctx: &Ctx, key: &str, live: &VecDeque<String>, pace: &mut tokio::time::Interval) {
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..=KEEP_LIVE + 2 {
        pace.tick().await;
        let path = match &cursor {
            None => "/v1/webhooks?limit=2".to_owned(),
            Some(c) => format!("/v1/webhooks?limit=2&cursor={c}"),
        };
        let Some(r) = ctx.api.call(Op::List, "GET", &path, key, &[], None).await else {
            return;
        };
        if r.status != 200 {
            return;
        }
        for item in r.json["data"].as_array().into_iter().flatten() {
            if item.get("signingSecret").is_some() {
                ctx.api.problem("list shows a signingSecret".into());
            }
            seen.extend(item["id"].as_str().map(str::to_owned));
        }
        match r.json["nextCursor"].as_str() {
            Some(c) if r.json["hasMore"] == true => cursor = Some(c.to_owned()),
            _ => break,
        }
    }
    let mut want: Vec<&String> = live.iter().collect();
    want.sort();
    seen.sort();
    if seen.iter().collect::<Vec<_>>() != want {
        ctx.api.problem(format!(
            "list shows {seen:?}, the client's active subscriptions are {want:?}"
        ));
    }
}

/// A load object (SPEC §2.3), unique per publisher and number.
fn load_body(no: usize, n: u64, rng: &mut StdRng) -> String {
    let status = ["ASSIGNED", "IN_TRANSIT", "DELIVERED"][rng.random_range(0..3)];
    let at = now_ms();
    format!(
        r#"{{"id":"L-{no}-{n}","externalId":"EXT-{:08x}","orderNumber":"ORD-{}","status":"{status}","eligibleForTracking":{},"customerId":"C-{}","carrierId":"K-{}","createdAt":{},"updatedAt":{at}}}"#,
        rng.random::<u32>(),
        100_000 + n,
        status == "ASSIGNED",
        rng.random_range(1..50),
        rng.random_range(1..20),
        at - rng.random_range(0..86_400_000),
    )
}

/// One publisher: an event of a random type per `interval`; one in ten with an
/// `Idempotency-Key`, half of those published twice (the second must answer the same event).
pub async fn publisher(ctx: Arc<Ctx>, no: usize, interval: Duration, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut pace = pace(interval);
    let mut n = 0u64;
    while !ctx.stopped() {
        n += 1;
        pace.tick().await;
        let event_type = EVENT_TYPES[rng.random_range(0..EVENT_TYPES.len())];
        let body = load_body(no, n, &mut rng);
        let key = rng.random_bool(0.1).then(|| format!("soak-p{no}-{n}"));
        let mut headers = vec![
            ("content-type", "application/json"),
            ("x-service-event", event_type),
        ];
        if let Some(k) = &key {
            headers.push(("idempotency-key", k.as_str()));
        }
        let Some(r) = ctx
            .api
            .call(
                Op::Publish,
                "POST",
                "/internal/v1/events",
                &ctx.admin,
                &headers,
                Some(body.clone()),
            )
            .await
        else {
            continue;
        };
        let data = &r.json["data"];
        let (Some(id), Some(deliveries)) = (data["eventId"].as_str(), data["deliveries"].as_u64())
        else {
            if r.status == 202 {
                ctx.api
                    .problem(format!("publish answered 202 without eventId: {}", r.json));
            }
            continue;
        };
        lock(&ctx.events).push(Event {
            id: id.to_owned(),
            event_type: event_type.to_owned(),
            body: Bytes::from(body.clone()),
            sent_ms: r.sent_ms,
            resp_ms: r.resp_ms,
            deliveries,
        });
        if key.is_some() && rng.random_bool(0.5) {
            pace.tick().await;
            if let Some(again) = ctx
                .api
                .call(
                    Op::PublishReplay,
                    "POST",
                    "/internal/v1/events",
                    &ctx.admin,
                    &headers,
                    Some(body),
                )
                .await
                && again.status == 202
                && (!again.replayed
                    || again.json["data"]["eventId"] != id
                    || again.json["data"]["deliveries"] != deliveries)
            {
                ctx.api.problem(format!(
                    "publish replayed with the same key did not answer {id} ({} deliveries): {}",
                    deliveries, again.json
                ));
            }
        }
    }
}
