//! The project's own `spin.toml` under a real `spin up` (Spin 4), the same `.wasm` the other
//! tests run ([`edgehook_runtime::COMPONENT_WASM`]; see [`edgehook_sim::spin`] for how the
//! manifest is copied), walked over real HTTP the way a partner and an operator use it: once on
//! Spin's default key-value store (SQLite, in a temporary state directory) and once on Redis
//! (a `redis-server` of this test's own, the Redis runtime config of `deploy/` with its URL
//! replaced). A third keeps that runtime config as deployed, `block_networks` included:
//! Spin refuses a delivery to a private address at send, and under the default settings the
//! component refuses such URLs at create (`spin/production.rs`).
//!
//! Each walk is one test, so each store costs one Spin start-up (Spin compiles the component
//! first). A walk goes on past a failed step where it can and fails at the end naming every
//! failed step, its store, the status it got and the body ("list page 1 on spin-sqlite:
//! expected 200, got 503 {...}"), then the tail of Spin's output.
//!
//! Spin is found at `$SPIN_BIN`, else at `<repo>/../shared/tools/spin`; `redis-server` on
//! `PATH`. Without them a test prints `SKIPPED: ...` and passes, unless `CI` is set: then it
//! fails. Everything talks over loopback only, and every wait is a condition with a deadline.
//!
//! Deliveries go to an HTTPS receiver on 127.0.0.1 with a certificate from a CA made by the
//! test, trusted through Spin's runtime-config `[[client_tls]]` (for component `edgehook`,
//! host `127.0.0.1`) — rather than a plain-http receiver and an added `http://` entry in
//! `allowed_outbound_hosts`: the manifest's own `https://*:*` and Spin's real TLS client are
//! what get exercised, and the manifest is the project's but for `source`. The receiver is on
//! loopback, so the walks set `allow_private_targets = true` (a development setting).
//!
//! The walks begin with the web portal's files (`spin/portal_files.rs`: `spin.toml`'s second
//! component on `/portal/...`) and end with the delivery options (`spin/options.rs`): Standard Webhooks signatures
//! with a partner's header, both secrets of a rotation verifying, and FIFO ordering; then
//! the portal, and last the store's bytes (`spin/at_rest.rs`): under the manifest's required
//! `seal_key`, Spin's SQLite files and Redis's dump file hold no secret in any form.
//!
//! Retries: in the walks attempt 2 is due about 60 s after attempt 1 failed (SPEC's delays),
//! and the walk checks that the tick route reports it due then and does not send it early.
//! [`spin_retries_through_the_tick_route`] runs a retry for real: with `retry_delays_ms` at
//! one second and the opportunistic tick off, only the tick route sends attempt 2.
//! `spin/recovery.rs` runs `auto_recover` the same way, its probes a second apart.

mod at_rest;
mod counters;
mod harness;
mod lookups;
mod notices;
mod options;
mod portal;
mod portal_files;
mod production;
mod recovery;
mod rotation;

use edgehook_sim::spin;
use edgehook_testkit::rt;
use edgehook_testkit::spin::binary_or_skip;
use harness::*;
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The loopback receiver is a private target: a development setting.
const LOOPBACK_TARGETS: &[(&str, &str)] = &[("allow_private_targets", "true")];

#[test]
fn spin_sqlite_walks_the_partner_and_operator_story() {
    let Some(binary) = binary_or_skip() else {
        return;
    };
    let rt = rt();
    let receiver = Receiver::start(&rt);
    // No key-value table: the `default` store is Spin's SQLite file in the state directory.
    let app = start_spin("sqlite", binary, &receiver, "", LOOPBACK_TARGETS);
    let walk = Walk::new("spin-sqlite", app, rt);
    story(walk, &receiver, at_rest::Store::Sqlite);
}

#[test]
fn spin_redis_walks_the_partner_and_operator_story() {
    let Some((binary, redis)) = spin_and_redis() else {
        return;
    };
    let rt = rt();
    let receiver = Receiver::start(&rt);
    let config = spin::redis_runtime_config(&redis.url()).expect("runtime config");
    let app = start_spin("redis", binary, &receiver, &config, LOOPBACK_TARGETS);
    let walk = Walk::new("spin-redis", app, rt);
    story(walk, &receiver, at_rest::Store::Redis(&redis));
}

/// Spin itself refuses a delivery to a private address under the shipped runtime config
/// (`block_networks`), and the component refuses such URLs at create under the default
/// settings (`spin/production.rs`).
#[test]
fn spin_with_the_production_runtime_config_refuses_private_targets() {
    let Some((binary, redis)) = spin_and_redis() else {
        return;
    };
    production::refused_at_send(binary.clone(), &redis.url());
    production::refused_at_create(binary, &redis.url());
}

// ---------------------------------------------------------------------------------------
// The story

/// What the first steps made, for the later ones.
struct Made {
    acme: String,
    globex: String,
    /// The subscriptions' ids and secrets, in creation order: `/ok/1` (load.created),
    /// `/fail/1` (load.updated), `/gone/1`, `/ok/2`, `/ok/3` (load.status_changed).
    subs: Vec<(String, String)>,
}

impl Made {
    fn id(&self, i: usize) -> &str {
        &self.subs[i].0
    }
}

/// The partner and operator story, step by step, on `store`.
fn story(mut w: Walk, receiver: &Receiver, store: at_rest::Store<'_>) {
    let made = keys_and_subscriptions(&mut w, receiver);
    listing(&mut w, &made);
    idempotency_and_validation(&mut w, &made, receiver);
    notices::around(&mut w, &made, receiver, deliveries);
    recovery(&mut w, &made, receiver);
    options::delivery_options(&mut w, &made.acme, made.id(4), &made.subs[4].1, receiver);
    portal::index_pages(&mut w, receiver);
    portal::session(&mut w);
    lookups::changed_and_found(&mut w, &made, receiver);
    at_rest::sealed(&mut w, store, &made.subs);
    w.report();
}

/// Health, the operator API's door, API keys, and five subscriptions.
fn keys_and_subscriptions(w: &mut Walk, receiver: &Receiver) -> Made {
    if let Some(h) = w.call("healthz", 200, get("/healthz", Who::Nobody)) {
        let ok = h.json["status"] == "ok";
        w.check("healthz", ok, format!("status not ok: {}", h.text));
    }
    portal_files::files(w);
    let keys = "/internal/v1/clients/acme/keys";
    let unauthorized = (401, "unauthorized");
    w.refused(
        "issue key without the admin token",
        unauthorized,
        post(keys, Who::Nobody),
    );
    let wrong = Who::Bearer("not-the-token");
    w.refused(
        "tick with a wrong token",
        unauthorized,
        post("/internal/v1/tick", wrong),
    );

    let mut keys = Vec::new();
    for client in ["acme", "globex"] {
        let step = format!("issue key for {client}");
        let path = format!("/internal/v1/clients/{client}/keys");
        let Some(r) = w.call(&step, 201, post(path, Who::Operator)) else {
            w.stop("an API key");
        };
        let key = r.data()["apiKey"].as_str().unwrap_or_default().to_owned();
        let ok = key.starts_with("ehk_") && r.data()["clientId"] == client;
        w.check(&step, ok, format!("apiKey, clientId: {}", r.text));
        keys.push(key);
    }
    let unknown = get("/v1/webhooks", Who::Bearer("ehk_not-a-key"));
    w.refused("list with an unknown key", unauthorized, unknown);

    // One the receiver accepts, one it fails, one it says is gone, and two more.
    let mut subs = Vec::new();
    for (path, event) in [
        ("/ok/1", "load.created"),
        ("/fail/1", "load.updated"),
        ("/gone/1", "load.status_changed"),
        ("/ok/2", "load.status_changed"),
        ("/ok/3", "load.status_changed"),
    ] {
        let url = receiver.url(path);
        let step = format!("create {path} for {event}");
        let body = json!({"url": url, "eventTypes": [event]});
        let Some(r) = w.call(
            &step,
            201,
            post("/v1/webhooks", Who::Bearer(&keys[0])).json(&body),
        ) else {
            w.stop("the subscriptions");
        };
        let d = r.data();
        let id = d["id"].as_str().unwrap_or_default().to_owned();
        let secret = d["signingSecret"].as_str().unwrap_or_default().to_owned();
        let location = format!("/v1/webhooks/{id}");
        w.check(
            &step,
            id.starts_with("sub_")
                && secret.starts_with("whsec_")
                && secret.len() == 6 + 43
                && r.header("location") == Some(location.as_str())
                && d["url"] == url.as_str()
                && d["eventTypes"] == json!([event]),
            format!(
                "id, signingSecret, url, eventTypes, Location {:?}: {}",
                r.header("location"),
                r.text
            ),
        );
        subs.push((id, secret));
    }
    let globex = keys.pop().unwrap_or_default();
    let acme = keys.pop().unwrap_or_default();
    Made { acme, globex, subs }
}

/// List with paging (2 + 2 + 1, in creation order, never a secret), and tenant isolation.
fn listing(w: &mut Walk, made: &Made) {
    let acme = Who::Bearer(&made.acme);
    let (mut listed, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    for (page, want_len, more) in [(1, 2, true), (2, 2, true), (3, 1, false)] {
        let step = format!("list page {page} (limit=2)");
        let path = match &cursor {
            None => "/v1/webhooks?limit=2".to_owned(),
            Some(c) => format!("/v1/webhooks?limit=2&cursor={c}"),
        };
        let Some(r) = w.call(&step, 200, get(path, acme)) else {
            break;
        };
        pages += 1;
        let items = r.data().as_array().cloned().unwrap_or_default();
        cursor = r.json["nextCursor"].as_str().map(str::to_owned);
        w.check(
            &step,
            items.len() == want_len && r.json["hasMore"] == more && cursor.is_some() == more,
            format!(
                "{want_len} items, hasMore {more}, a nextCursor {more}: {}",
                r.text
            ),
        );
        // Framed by its length (the component says it), not in chunks.
        let length = r.text.len().to_string();
        let framed = r.header("content-length") == Some(length.as_str())
            && r.header("transfer-encoding").is_none();
        let head = format!(
            "content-length {length}, not chunked: {:?}, {:?}",
            r.header("content-length"),
            r.header("transfer-encoding")
        );
        w.check(&step, framed, head);
        let secretless = !r.text.contains("signingSecret") && !r.text.contains("whsec_");
        w.check(&step, secretless, "a list shows a signing secret");
        listed.extend(
            items
                .iter()
                .filter_map(|i| i["id"].as_str().map(str::to_owned)),
        );
        if cursor.is_none() {
            break;
        }
    }
    let ids: Vec<String> = made.subs.iter().map(|(id, _)| id.clone()).collect();
    if pages == 3 {
        let what = format!("listed {listed:?}, created {ids:?}");
        w.check("list pages", listed == ids, what);
    }
    let bad = get("/v1/webhooks?limit=0", acme);
    w.refused("list with limit=0", (422, "validation_failed"), bad);
    let step = "list as another partner";
    if let Some(r) = w.call(step, 200, get("/v1/webhooks", Who::Bearer(&made.globex))) {
        let empty = r.data().as_array().is_some_and(Vec::is_empty);
        w.check(step, empty, format!("sees: {}", r.text));
    }
}

/// Idempotent creates, and what validation refuses.
fn idempotency_and_validation(w: &mut Walk, made: &Made, receiver: &Receiver) {
    let acme = Who::Bearer(&made.acme);
    let url = receiver.url("/ok/idem");
    let body = json!({"url": url, "eventTypes": ["load.created"]});
    let keyed = || {
        post("/v1/webhooks", acme)
            .json(&body)
            .header("idempotency-key", "spin-42")
    };
    let step = "idempotent create";
    let first = w.call(step, 201, keyed());
    if let Some(f) = &first {
        let replayed = f.header("idempotent-replayed");
        let what = format!("the first answer has Idempotent-Replayed: {replayed:?}");
        w.check(step, replayed.is_none(), what);
    }
    let step = "idempotent create, same key again";
    if let Some(again) = w.call(step, 201, keyed()) {
        let replayed = again.header("idempotent-replayed");
        let what = format!("Idempotent-Replayed: {replayed:?}");
        w.check(step, replayed == Some("true"), what);
        if let Some(f) = &first {
            let (a, b) = (f.data(), again.data());
            w.check(
                step,
                a["id"] == b["id"] && a["signingSecret"] == b["signingSecret"],
                format!("not the same id and secret: {} vs {}", f.text, again.text),
            );
        }
    }
    let other = json!({"url": url, "eventTypes": ["load.updated"]});
    let conflict = post("/v1/webhooks", acme)
        .json(&other)
        .header("idempotency-key", "spin-42");
    let step = "idempotent create, same key, other body";
    w.refused(step, (409, "idempotency_conflict"), conflict);
    if let Some(f) = &first {
        // Out of the way of the fan-out and the list further on.
        let path = format!("/v1/webhooks/{}", f.data()["id"].as_str().unwrap_or("-"));
        w.call("delete the idempotent one", 200, delete(path, acme));
    }

    for (what, body, field) in [
        (
            "a fragment in the url",
            json!({"url": "https://hooks.example.com/#x", "eventTypes": ["load.created"]}),
            "url",
        ),
        (
            "an unknown event type",
            json!({"url": "https://hooks.example.com/", "eventTypes": ["load.nope"]}),
            "eventTypes",
        ),
        (
            "no event types",
            json!({"url": "https://hooks.example.com/"}),
            "eventTypes",
        ),
    ] {
        let step = format!("create with {what}");
        let create = post("/v1/webhooks", acme).json(&body);
        if let Some(r) = w.refused(&step, (422, "validation_failed"), create) {
            // An item of a list is named with its index: `eventTypes[0]`.
            let got = r.json["error"]["details"][0]["field"].as_str();
            let about = got.is_some_and(|f| f == field || f.starts_with(&format!("{field}[")));
            w.check(&step, about, format!("not about {field}: {}", r.text));
        }
    }
    let not_json = post("/v1/webhooks", acme).raw_json(b"{not json");
    w.refused(
        "create with a body that is not JSON",
        (400, "invalid_json"),
        not_json,
    );
}

const LOAD: &[u8] =
    br#"{"id":"L-spin-1","status":"ASSIGNED","note":"caf\u00e9 \u2615","eligibleForTracking":true}"#;

fn publish(event: &'static str) -> harness::Req<'static> {
    post("/internal/v1/events", Who::Operator)
        .raw_json(LOAD)
        .header("x-service-event", event)
}

fn now_s() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    now.expect("after 1970").as_secs()
}

/// Publish, signed deliveries, a failing receiver and the tick route, replay, 410 Gone,
/// disable by DELETE.
fn deliveries(w: &mut Walk, made: &Made, receiver: &Receiver) {
    let step = "publish load.created";
    let published = w.call(step, 202, publish("load.created"));
    if let Some(r) = &published {
        let d = r.data();
        w.check(
            step,
            d["deliveries"] == 1
                && d["eventType"] == "load.created"
                && d["eventId"].as_str().is_some_and(|e| e.starts_with("evt_")),
            format!("1 delivery of an evt_: {}", r.text),
        );
    }
    let ok_delivery = match published {
        Some(_) => signed_delivery(w, made, receiver),
        None => {
            w.skip(
                "signed delivery to /ok/1, its operator view, its replay",
                step,
            );
            None
        }
    };

    // A failing receiver: attempt 1 fails, the retry is scheduled ~60 s later, and the tick
    // route reports it due then (and does not send it now).
    let step = "publish load.updated";
    let fail_delivery = match w.call(step, 202, publish("load.updated")) {
        Some(_) => {
            let got = receiver.wait_for("/fail/1", 1);
            let id = got.first().and_then(|r| r.header("x-service-delivery-id"));
            let what = format!("received {} requests", got.len());
            w.check("attempt 1 to /fail/1", got.len() == 1 && id.is_some(), what);
            id.map(str::to_owned)
        }
        None => {
            w.skip("attempt 1 to /fail/1, its retry, its cancellation", step);
            None
        }
    };
    let next_attempt_at = fail_delivery.as_deref().and_then(|d| retry_scheduled(w, d));
    let step = "tick (the retry is not due yet)";
    if let Some(r) = w.call(step, 200, post("/internal/v1/tick", Who::Operator)) {
        let d = r.data();
        let due = d["nextDueMs"].as_u64();
        w.check(
            step,
            d["attempted"] == 0 && (next_attempt_at.is_none() || due == next_attempt_at),
            format!(
                "nothing attempted, next due at {next_attempt_at:?}: {}",
                r.text
            ),
        );
    }
    if fail_delivery.is_some() {
        let sent = receiver.on("/fail/1").len();
        w.check(step, sent == 1, format!("/fail/1 got {sent} requests"));
        let path = format!(
            "/internal/v1/deliveries/{}/replay",
            fail_delivery.as_deref().unwrap_or("-")
        );
        let pending = post(path, Who::Operator);
        w.refused(
            "replay while the delivery is pending",
            (409, "conflict"),
            pending,
        );
    }

    if let Some(dlv) = &ok_delivery {
        replay(w, made, receiver, dlv);
    }

    // 410 Gone disables at once; the other two listeners get theirs.
    let step = "publish load.status_changed";
    if let Some(r) = w.call(step, 202, publish("load.status_changed")) {
        let n = &r.data()["deliveries"];
        w.check(step, *n == 3, format!("3 deliveries: {}", r.text));
        for path in ["/gone/1", "/ok/2", "/ok/3"] {
            let n = receiver.wait_for(path, 1).len();
            w.check(
                &format!("delivery to {path}"),
                n == 1,
                format!("received {n}"),
            );
        }
        let gone = format!("/internal/v1/subscriptions/{}", made.id(2));
        w.poll("410 Gone disables the subscription", &gone, |d| {
            d["status"] == "disabled" && d["disabledReason"] == "gone"
        });
    } else {
        w.skip(
            "deliveries to /gone/1, /ok/2, /ok/3; 410 Gone disabling",
            step,
        );
    }

    disable(w, made, fail_delivery.as_deref());
}

/// The delivery of `load.created` at `/ok/1`: its bytes, headers and signature, and the
/// operator's view of it. Its id, if it came.
fn signed_delivery(w: &mut Walk, made: &Made, receiver: &Receiver) -> Option<String> {
    let step = "signed delivery to /ok/1";
    let sent_after = now_s();
    let got = receiver.wait_for("/ok/1", 1);
    if !w.check(
        step,
        got.len() == 1,
        format!("received {} requests", got.len()),
    ) {
        return None;
    }
    let r = &got[0];
    let secret = &made.subs[0].1;
    let ts = r.header("x-service-timestamp");
    let ts = ts.and_then(|t| t.parse::<u64>().ok()).unwrap_or(0);
    w.check(step, r.method == "POST", format!("method {}", r.method));
    w.check(
        step,
        r.body[..] == LOAD[..],
        "the body is not the published bytes",
    );
    let sig = r.header("x-service-signature");
    let what = format!("the signature {sig:?} does not verify with timestamp {ts}");
    w.check(step, signed_by(secret, r), what);
    w.check(step, !signed_by("whsec_other", r), "any secret verifies");
    w.check(
        step,
        r.header("content-type") == Some("application/json")
            && r.header("x-service-event") == Some("load.created"),
        format!("headers: {:?}", r.headers),
    );
    let what = format!("X-Service-Timestamp {ts} is not now ({sent_after})");
    w.check(step, ts.abs_diff(sent_after) <= 300, what);
    let id = r
        .header("x-service-delivery-id")
        .filter(|d| d.starts_with("dlv_"));
    let what = format!("X-Service-Delivery-Id: {id:?}");
    let id = w
        .check(step, id.is_some(), what)
        .then(|| id.unwrap_or_default().to_owned())?;

    let step = "the delivery succeeded (operator view)";
    let path = format!("/internal/v1/deliveries/{id}");
    if let Some(r) = w.poll(step, &path, |d| d["status"] == "succeeded") {
        let a = &r.data()["attempts"];
        let one = a.as_array().map(Vec::len) == Some(1) && a[0]["statusCode"] == 200;
        w.check(step, one, format!("one attempt, 200: {}", r.text));
    }
    Some(id)
}

/// The failed attempt 1 of `dlv` as the operator sees it: pending, attempt 2 due ~60 s later.
/// That due time.
fn retry_scheduled(w: &mut Walk, dlv: &str) -> Option<u64> {
    let step = "the failed attempt is recorded, a retry scheduled";
    let path = format!("/internal/v1/deliveries/{dlv}");
    let one = |d: &Value| d["attempts"].as_array().is_some_and(|a| a.len() == 1);
    let r = w.poll(step, &path, one)?;
    let d = r.data();
    let started = d["attempts"][0]["startedAt"].as_u64().unwrap_or(0);
    let next = d["nextAttemptAt"].as_u64();
    // 60 s + up to 10 % jitter after the failure (start + latency), on a whole second.
    let delay = next.map(|n| n.saturating_sub(started));
    w.check(
        step,
        d["status"] == "pending"
            && d["attempts"][0]["statusCode"] == 500
            && delay.is_some_and(|ms| (60_000..=77_000).contains(&ms)),
        format!(
            "pending, attempt 1 answered 500, attempt 2 ~60 s later: {}",
            r.text
        ),
    );
    next
}

/// Replays the delivered `dlv`: the receiver gets it again, same id and body, freshly signed.
fn replay(w: &mut Walk, made: &Made, receiver: &Receiver, dlv: &str) {
    let step = "replay";
    let path = format!("/internal/v1/deliveries/{dlv}/replay");
    if let Some(r) = w.call(step, 202, post(path, Who::Operator)) {
        w.check(step, r.data()["id"] == dlv, format!("id: {}", r.text));
    }
    let got = receiver.wait_for("/ok/1", 2);
    let step = "the replayed delivery at /ok/1";
    if w.check(
        step,
        got.len() == 2,
        format!("received {} requests", got.len()),
    ) {
        let r = &got[1];
        w.check(
            step,
            r.header("x-service-delivery-id") == Some(dlv)
                && r.body[..] == LOAD[..]
                && signed_by(&made.subs[0].1, r),
            format!("same id, same body, valid signature: {:?}", r.headers),
        );
    }
}

/// Disable by DELETE: 404 after, also to another partner; the pending retry is cancelled and
/// cannot be replayed; the list shows the rest.
fn disable(w: &mut Walk, made: &Made, fail_delivery: Option<&str>) {
    let acme = Who::Bearer(&made.acme);
    let failing = format!("/v1/webhooks/{}", made.id(1));
    let step = "delete (disable) the failing subscription";
    if let Some(r) = w.call(step, 200, delete(&failing, acme)) {
        let want = json!({"id": made.id(1), "status": "disabled"});
        w.check(step, *r.data() == want, format!("data: {}", r.text));
    }
    let not_found = (404, "not_found");
    w.refused("delete it again", not_found, delete(&failing, acme));
    let theirs = delete(
        format!("/v1/webhooks/{}", made.id(0)),
        Who::Bearer(&made.globex),
    );
    w.refused("delete another partner's subscription", not_found, theirs);
    let path = format!("/internal/v1/subscriptions/{}", made.id(1));
    w.poll("the deleted subscription (operator view)", &path, |d| {
        d["status"] == "disabled" && d["disabledReason"] == "deleted"
    });
    if let Some(dlv) = fail_delivery {
        let path = format!("/internal/v1/deliveries/{dlv}");
        w.poll("its pending delivery is cancelled", &path, |d| {
            d["status"] == "cancelled"
        });
        let replay = post(format!("{path}/replay"), Who::Operator);
        w.refused(
            "replay on a disabled subscription",
            (409, "conflict"),
            replay,
        );
    }
    let step = "list after the deletes";
    if let Some(r) = w.call(step, 200, get("/v1/webhooks", acme)) {
        let left: Vec<&str> = r.data().as_array().map_or(Vec::new(), |a| {
            a.iter().filter_map(|i| i["id"].as_str()).collect()
        });
        let want = [made.id(0), made.id(3), made.id(4)];
        w.check(step, left == want, format!("expected {want:?}: {}", r.text));
    }
}

/// The lifecycle on Spin: a test delivery from the handler itself (outbound HTTP inside a
/// request); an event published while the subscription is disabled is a skipped delivery,
/// listed for its owner; an enable with `replaySince` starts a replay job, which the tick
/// route runs, and the receiver gets the missed event under its id.
fn recovery(w: &mut Walk, made: &Made, receiver: &Receiver) {
    let acme = Who::Bearer(&made.acme);
    let id = made.id(0);
    let step = "test delivery to /ok/1";
    if let Some(r) = w.call(step, 200, post(format!("/v1/webhooks/{id}/test"), acme)) {
        w.check(step, r.data()["succeeded"] == true, &r.text);
        let got = receiver.wait_for("/ok/1", 3);
        let ping = got.get(2);
        w.check(
            step,
            ping.is_some_and(|p| {
                p.header("x-service-event") == Some("webhook.ping") && signed_by(&made.subs[0].1, p)
            }),
            format!("a signed webhook.ping: {:?}", ping.map(|p| &p.headers)),
        );
    }
    let since = now_s().saturating_sub(60) * 1000;
    let disable = post(
        format!("/internal/v1/subscriptions/{id}/disable"),
        Who::Operator,
    );
    if w.call("operator disables /ok/1", 200, disable).is_none() {
        return w.skip("skipped delivery and its replay", "the disable");
    }
    let step = "publish load.created while disabled";
    if let Some(r) = w.call(step, 202, publish("load.created")) {
        w.check(
            step,
            r.data()["deliveries"] == 0,
            format!("none to attempt: {}", r.text),
        );
    }
    let step = "the owner lists the skipped delivery";
    let listed = format!("/v1/webhooks/{id}/deliveries?status=skipped");
    let skipped = w
        .call(step, 200, get(listed, acme))
        .and_then(|r| r.data()[0]["id"].as_str().map(str::to_owned));
    let Some(skipped) = skipped else {
        return w.fail(step, "no skipped delivery");
    };
    let step = "enable with replaySince";
    let enable =
        post(format!("/v1/webhooks/{id}/enable"), acme).json(&json!({"replaySince": since}));
    if let Some(r) = w.call(step, 200, enable) {
        w.check(
            step,
            r.json["replay"]["id"].is_string(),
            format!("a job: {}", r.text),
        );
    }
    for _ in 0..2 {
        w.call(
            "tick (the replay job)",
            200,
            post("/internal/v1/tick", Who::Operator),
        );
    }
    let got = receiver.wait_for("/ok/1", 4);
    let step = "the skipped delivery replayed to /ok/1";
    w.check(
        step,
        got.get(3).is_some_and(|r| {
            r.header("x-service-delivery-id") == Some(skipped.as_str())
                && signed_by(&made.subs[0].1, r)
        }),
        format!("received {} requests", got.len()),
    );
}

/// A failing receiver is retried through the tick route: attempt 1 answers 500, and attempt
/// 2, due a second later (`retry_delays_ms`), is sent by a call of `POST /internal/v1/tick`
/// (the opportunistic tick is off, so nothing else sends it), with the same delivery id and a
/// valid signature; the delivery then shows two attempts and `succeeded`.
#[test]
fn spin_retries_through_the_tick_route() {
    let Some(binary) = binary_or_skip() else {
        return;
    };
    let rt = rt();
    let receiver = Receiver::start(&rt);
    let vars = [
        ("allow_private_targets", "true"),
        ("retry_delays_ms", "1000,1000"),
        ("opportunistic_tick_s", "0"),
    ];
    let app = start_spin("retry", binary, &receiver, "", &vars);
    let mut w = Walk::new("spin-retry", app, rt);
    let Some(r) = w.call(
        "issue key",
        201,
        post("/internal/v1/clients/acme/keys", Who::Operator),
    ) else {
        w.stop("an API key");
    };
    let key = r.data()["apiKey"].as_str().unwrap_or_default().to_owned();
    let body = json!({"url": receiver.url("/flaky/1"), "eventTypes": ["load.created"]});
    let create = post("/v1/webhooks", Who::Bearer(&key)).json(&body);
    let Some(r) = w.call("create /flaky/1", 201, create) else {
        w.stop("the subscription");
    };
    let secret = r.data()["signingSecret"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if w.call("publish", 202, publish("load.created")).is_none() {
        w.stop("an event");
    }
    let first = receiver.wait_for("/flaky/1", 1);
    let Some(dlv) = first
        .first()
        .and_then(|r| r.header("x-service-delivery-id"))
        .map(str::to_owned)
    else {
        w.stop("attempt 1");
    };
    // Tick until it sends the retry (due about a second after attempt 1 failed).
    let ticked = edgehook_testkit::poll(WAIT, Duration::from_millis(100), || {
        // A tick that fails is a failure of its own: the wait ends.
        let Some(r) = w.call("tick", 200, post("/internal/v1/tick", Who::Operator)) else {
            return Ok(None);
        };
        match r.data()["attempted"].as_u64().unwrap_or(0) {
            0 => Err(r.text),
            _ => Ok(Some(r)),
        }
    });
    match ticked {
        Ok(Some(r)) => {
            let ok = r.data()["succeeded"] == 1;
            w.check("the tick sent the retry", ok, format!("tick: {}", r.text));
        }
        Ok(None) => {}
        Err(last) => w.fail(
            "the tick sent the retry",
            format!("not within {WAIT:?}: {}", last.unwrap_or_default()),
        ),
    }
    let got = receiver.wait_for("/flaky/1", 2);
    let retry = got.get(1);
    w.check(
        "attempt 2: same delivery id, signed",
        retry.is_some_and(|r| {
            r.header("x-service-delivery-id") == Some(dlv.as_str()) && signed_by(&secret, r)
        }),
        format!("received {} requests", got.len()),
    );
    let path = format!("/internal/v1/deliveries/{dlv}");
    w.poll("the delivery succeeded on attempt 2", &path, |d| {
        d["status"] == "succeeded"
            && d["attempts"].as_array().is_some_and(|a| {
                a.len() == 2 && a[0]["statusCode"] == 500 && a[1]["statusCode"] == 200
            })
    });
    w.report();
}
