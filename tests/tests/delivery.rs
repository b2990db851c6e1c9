//! The delivery engine through the real component: fan-out, signed deliveries, history,
//! replay and concurrent ticks (the retry schedule and disabling: `retries.rs`).

use crate::common;

use common::*;
use edgehook_sim::sim::Simulation;
use edgehook_sim::simnet::{Received, Reply};
use serde_json::Value;
use std::time::Duration;

/// The endpoint most tests subscribe.
pub(crate) const URL: &str = "https://hooks.example.com/loads";

/// Verifies a delivery's signature with our own HMAC code (not the component's).
fn verify(secret: &str, r: &Received) -> bool {
    let header = |name| r.header(name);
    edgehook_testkit::signature::verifies(
        secret,
        header("x-service-timestamp"),
        header("x-service-signature"),
        &r.body,
    )
}

/// A simulation with one client's key, for the delivery tests.
pub(crate) struct World {
    pub(crate) sim: Simulation,
    pub(crate) key: String,
}

impl World {
    pub(crate) fn new(seed: u64) -> World {
        Self::with(builder(seed))
    }

    pub(crate) fn with(b: edgehook_sim::sim::SimBuilder) -> World {
        let mut sim = b.build().expect("sim");
        let key = issue_key(&mut sim, "acme");
        World { sim, key }
    }

    pub(crate) fn subscribe(
        &mut self,
        url: &str,
        types: &[&str],
        script: Vec<Reply>,
    ) -> (String, String) {
        self.sim.net().endpoint(url, script);
        let data = create(&mut self.sim, &self.key, url, types);
        (
            data["id"].as_str().expect("id").to_owned(),
            data["signingSecret"].as_str().expect("secret").to_owned(),
        )
    }

    pub(crate) fn ingest(
        &mut self,
        event_type: &str,
        body: &[u8],
        extra: &[(&str, &str)],
    ) -> edgehook_runtime::HttpResponse {
        ingest(&mut self.sim, event_type, body, extra)
    }

    pub(crate) fn operator(&mut self, method: &str, path: &str) -> edgehook_runtime::HttpResponse {
        call(&mut self.sim, method, path, ADMIN)
    }

    pub(crate) fn delivery(&mut self, id: &str) -> Value {
        let resp = self.operator("GET", &format!("/internal/v1/deliveries/{id}"));
        assert_eq!(resp.status, 200, "{}", resp.json());
        resp.json()["data"].clone()
    }
}

#[test]
fn a_delivery_is_the_published_bytes_signed_with_exact_headers() {
    let mut w = World::new(1);
    let (_, secret) = w.subscribe(URL, &["load.created"], vec![Reply::Status(204)]);
    let load = "{ \"status\":\"ASSIGNED\",\n  \"id\" : \"L-1\", \"note\":\"caf\\u00e9 ☕\", \"createdAt\":1700000000000 }";
    let resp = w.ingest("load.created", load.as_bytes(), &[]);
    assert_eq!(resp.status, 202, "{}", resp.json());
    assert_eq!(resp.json()["data"]["deliveries"], 1);
    let got = w.sim.net().received_by(URL);
    assert_eq!(got.len(), 1, "attempt 1 runs at once");
    let r = &got[0];
    assert_eq!(r.method, "POST");
    assert_eq!(
        r.body,
        load.as_bytes(),
        "the body is the published bytes, verbatim"
    );
    assert!(
        verify(&secret, r),
        "signature verifies with an independent HMAC"
    );
    assert!(!verify("whsec_other", r));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-service-event"), Some("load.created"));
    assert_eq!(
        r.header("x-service-timestamp"),
        Some((w.sim.now_ms() / 1000).to_string().as_str())
    );
    assert!(
        r.header("x-service-delivery-id")
            .is_some_and(|d| d.starts_with("dlv_"))
    );
    // docs/design/http.md: deliveries carry Content-Length and User-Agent: edgehook/<version>.
    assert_eq!(
        r.header("user-agent"),
        Some(concat!("edgehook/", env!("CARGO_PKG_VERSION")))
    );
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
    let names: Vec<&str> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
    for name in &names {
        assert!(
            [
                "content-type",
                "content-length",
                "user-agent",
                "host",
                "x-service-delivery-id",
                "x-service-event",
                "x-service-timestamp",
                "x-service-signature"
            ]
            .contains(name),
            "unexpected header {name}"
        );
    }
    let sig = r.header("x-service-signature").expect("sig");
    assert!(
        sig.len() == 64
            && sig
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "lowercase hex"
    );
}

#[test]
fn the_publish_export_does_what_ingest_does() {
    let mut w = World::new(2);
    w.subscribe(URL, &["load.updated"], vec![Reply::Status(200)]);
    w.subscribe(
        "https://other.example.com/x",
        &["load.created"],
        vec![Reply::Status(200)],
    );
    let receipt = w
        .sim
        .publish("load.updated", br#"{"id":"L-2"}"#)
        .expect("runs")
        .expect("accepted");
    assert_eq!(
        receipt.deliveries, 1,
        "only subscriptions listening to the type"
    );
    assert!(receipt.event_id.starts_with("evt_"));
    assert!(
        w.sim.net().received().is_empty(),
        "the receipt comes before any attempt"
    );
    assert_eq!(receipt.next_due_ms, Some(w.sim.now_ms()));
    w.sim.advance(Duration::ZERO).expect("advance");
    assert_eq!(w.sim.net().received_by(URL).len(), 1);
    assert!(
        w.sim
            .net()
            .received_by("https://other.example.com/x")
            .is_empty()
    );

    use edgehook_runtime::PublishError;
    assert!(matches!(
        w.sim
            .publish("load.deleted", b"{\"id\":\"x\"}")
            .expect("runs"),
        Err(PublishError::UnknownEventType(_))
    ));
    assert!(matches!(
        w.sim.publish("load.created", b"[1]").expect("runs"),
        Err(PublishError::InvalidLoad(_))
    ));
}

#[test]
fn ingest_validates_and_is_idempotent_by_key() {
    let mut w = World::new(3);
    w.subscribe(URL, &["load.created"], vec![Reply::Status(200)]);
    assert_error(
        &w.ingest("load.nope", br#"{"id":"1"}"#, &[]),
        422,
        "validation_failed",
    );
    assert_error(
        &w.ingest("load.created", br#"{"id":1}"#, &[]),
        422,
        "validation_failed",
    );
    assert_error(
        &w.ingest("load.created", b"not json", &[]),
        422,
        "validation_failed",
    );
    let big = format!(r#"{{"id":"x","pad":"{}"}}"#, "a".repeat(300 * 1024));
    assert_error(
        &w.ingest("load.created", big.as_bytes(), &[]),
        413,
        "payload_too_large",
    );
    // A partner key may not publish (only the admin token and ingest keys may).
    let key = issue_key(&mut w.sim, "partner");
    assert_error(
        &call(&mut w.sim, "POST", "/internal/v1/events", &key),
        403,
        "forbidden",
    );
    assert!(w.sim.net().received().is_empty());

    let first = w.ingest(
        "load.created",
        br#"{"id":"L-3"}"#,
        &[("idempotency-key", "evt-1")],
    );
    let again = w.ingest(
        "load.created",
        br#"{"id":"L-3"}"#,
        &[("idempotency-key", "evt-1")],
    );
    assert_eq!(
        first.json()["data"]["eventId"],
        again.json()["data"]["eventId"]
    );
    assert_eq!(w.sim.net().received_by(URL).len(), 1, "no second delivery");
    assert_error(
        &w.ingest(
            "load.created",
            br#"{"id":"L-4"}"#,
            &[("idempotency-key", "evt-1")],
        ),
        409,
        "idempotency_conflict",
    );
}

#[test]
fn history_covers_every_attempt_and_outlives_deletion_until_retention() {
    let mut w = World::new(10);
    let (id, _) = w.subscribe(
        URL,
        &["load.created", "load.updated"],
        vec![Reply::Status(500), Reply::Status(200)],
    );
    for n in 0..3 {
        w.ingest(
            if n % 2 == 0 {
                "load.created"
            } else {
                "load.updated"
            },
            format!(r#"{{"id":"L{n}"}}"#).as_bytes(),
            &[],
        );
    }
    w.sim.advance(Duration::from_secs(600)).expect("advance");
    assert_eq!(
        call(
            &mut w.sim,
            "DELETE",
            &format!("/v1/webhooks/{id}"),
            &w.key.clone()
        )
        .status,
        200
    );
    let page = w.operator(
        "GET",
        &format!("/internal/v1/subscriptions/{id}/deliveries?limit=2"),
    );
    assert_eq!(page.status, 200);
    let page = page.json();
    assert_eq!(page["data"].as_array().map(Vec::len), Some(2));
    assert_eq!(page["hasMore"], true);
    let cursor = page["nextCursor"].as_str().expect("cursor").to_owned();
    let rest = w
        .operator(
            "GET",
            &format!("/internal/v1/subscriptions/{id}/deliveries?limit=2&cursor={cursor}"),
        )
        .json();
    assert_eq!(rest["data"].as_array().map(Vec::len), Some(1));
    let first = &page["data"][0];
    assert_eq!(first["eventType"], "load.created");
    assert_eq!(first["subscriptionId"], id.as_str());
    let attempts = first["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2, "attempt 1 failed, attempt 2 succeeded");
    for a in attempts {
        assert!(a["startedAt"].is_u64() && a["latencyMs"].is_u64());
        assert!(a["statusCode"].is_u64() || a["error"].is_string());
    }
    let dlv = first["id"].as_str().expect("id").to_owned();
    assert_eq!(
        w.delivery(&dlv)["attempts"].as_array().map(Vec::len),
        Some(2)
    );
    assert_error(
        &w.operator(
            "GET",
            "/internal/v1/deliveries/dlv_000000000000000000000000",
        ),
        404,
        "not_found",
    );

    // Records stay for the retention period (30 days by default), then tick purges them.
    w.sim
        .advance(Duration::from_secs(29 * 86400))
        .expect("advance");
    w.sim.tick().expect("tick");
    assert_eq!(
        w.operator("GET", &format!("/internal/v1/deliveries/{dlv}"))
            .status,
        200
    );
    w.sim
        .advance(Duration::from_secs(2 * 86400))
        .expect("advance");
    w.sim.tick().expect("tick");
    assert_error(
        &w.operator("GET", &format!("/internal/v1/deliveries/{dlv}")),
        404,
        "not_found",
    );
    let leftovers: Vec<String> = w
        .sim
        .store()
        .snapshot()
        .keys()
        .filter(|k| k.starts_with(keys::DELIVERY_PREFIX) || k.starts_with(keys::EVENT_PREFIX))
        .cloned()
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn replay_resends_the_same_delivery_freshly_signed() {
    let mut w = World::new(11);
    let (id, secret) = w.subscribe(
        URL,
        &["load.created"],
        vec![
            Reply::Status(500),
            Reply::Status(500),
            Reply::Status(500),
            Reply::Status(200),
        ],
    );
    w.ingest("load.created", br#"{"id":"L-11"}"#, &[]);
    w.sim.advance(Duration::from_secs(3600)).expect("advance");
    let sent = w.sim.net().received_by(URL);
    assert_eq!(sent.len(), 3);
    let dlv = delivery_id_of(&sent[0]);
    assert_eq!(w.delivery(&dlv)["status"], "failed");

    let resp = w.operator("POST", &format!("/internal/v1/deliveries/{dlv}/replay"));
    assert_eq!(resp.status, 202, "{}", resp.json());
    let sent = w.sim.net().received_by(URL);
    assert_eq!(sent.len(), 4, "the replay's first attempt runs at once");
    let replayed = &sent[3];
    assert_eq!(replayed.header("x-service-delivery-id"), Some(dlv.as_str()));
    assert_eq!(replayed.body, sent[0].body);
    assert_eq!(replayed.header("x-service-event"), Some("load.created"));
    assert_ne!(
        replayed.header("x-service-timestamp"),
        sent[0].header("x-service-timestamp")
    );
    assert!(verify(&secret, replayed));
    let d = w.delivery(&dlv);
    assert_eq!(d["status"], "succeeded");
    assert_eq!(d["replays"], 1);
    assert_eq!(d["attempts"][3]["run"], 1);
    assert_eq!(d["attempts"][3]["number"], 1);

    // A replay that fails again gets its own three attempts, no more.
    w.sim.net().endpoint(URL, vec![Reply::Status(500)]);
    w.operator("POST", &format!("/internal/v1/deliveries/{dlv}/replay"));
    // Only a finished delivery is replayed: this one waits for its second attempt.
    assert_eq!(w.delivery(&dlv)["status"], "pending");
    let busy = w.operator("POST", &format!("/internal/v1/deliveries/{dlv}/replay"));
    assert_error(&busy, 409, "conflict");
    assert!(
        busy.json()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("in progress"))
    );
    w.sim.advance(Duration::from_secs(3600)).expect("advance");
    assert_eq!(w.sim.net().received_by(URL).len(), 7);

    assert_eq!(
        call(
            &mut w.sim,
            "DELETE",
            &format!("/v1/webhooks/{id}"),
            &w.key.clone()
        )
        .status,
        200
    );
    let refused = w.operator("POST", &format!("/internal/v1/deliveries/{dlv}/replay"));
    assert_error(&refused, 409, "conflict");
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("disabled"))
    );
}

#[test]
fn two_instances_ticking_one_store_never_send_an_attempt_twice() {
    let mut a = sim_with(12, &[("max_concurrency", "4")]);
    let key = issue_key(&mut a, "acme");
    let urls: Vec<String> = (0..40)
        .map(|i| format!("https://h{i}.example.com/x"))
        .collect();
    for (i, url) in urls.iter().enumerate() {
        a.net().endpoint(
            url,
            vec![if i % 3 == 0 {
                Reply::Status(500)
            } else {
                Reply::Status(200)
            }],
        );
        create(&mut a, &key, url, &["load.created"]);
    }
    for n in 0..5 {
        a.publish("load.created", format!(r#"{{"id":"L{n}"}}"#).as_bytes())
            .expect("runs")
            .expect("ok");
    }
    // Both instances tick at the same instants from their own threads.
    let b = builder(13)
        .config("max_concurrency", "4")
        .sharing(&a)
        .build()
        .expect("twin");
    let instants = [0u64, 66, 400];
    let clock_start = a.now_ms();
    let mut sims = vec![a, b];
    for at in instants {
        let target = clock_start + at * 1000;
        let now = sims[0].now_ms();
        if target > now {
            // Move the shared clock once; both then tick concurrently.
            sims[0].advance(Duration::from_millis(target - now)).ok();
        }
        let handles: Vec<_> = sims
            .drain(..)
            .map(|mut s| {
                std::thread::spawn(move || {
                    let r = s.tick().expect("tick");
                    (s, r)
                })
            })
            .collect();
        for h in handles {
            let (s, _) = h.join().expect("thread");
            sims.push(s);
        }
    }
    // Whatever a contended tick left is picked up by the next one.
    sims[0].advance(Duration::from_secs(3600)).expect("advance");
    let received = sims[0].net().received();
    let mut seen = std::collections::BTreeMap::new();
    for r in &received {
        *seen
            .entry((
                r.header("x-service-delivery-id").unwrap_or("").to_owned(),
                r.at_ms,
            ))
            .or_insert(0) += 1;
    }
    let dupes: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dupes.is_empty(), "attempts sent twice: {dupes:?}");
    let ok = urls.len() * 5 - 14 * 5;
    let failing = 14 * 5;
    assert_eq!(
        received.len(),
        ok + failing * 3,
        "every attempt sent exactly once"
    );
}

#[test]
fn the_attempts_of_one_tick_run_concurrently_up_to_the_configured_bound() {
    let run = |concurrency: &str, subs: usize, gate: usize| -> (usize, usize) {
        let mut w = World::with(builder(14).config("max_concurrency", concurrency));
        for i in 0..subs {
            w.subscribe(
                &format!("https://c{i}.example.com/x"),
                &["load.created"],
                vec![Reply::Status(200)],
            );
        }
        w.sim
            .net()
            .hold_until_in_flight(gate, Duration::from_millis(300));
        w.sim
            .publish("load.created", br#"{"id":"L"}"#)
            .expect("runs")
            .expect("ok");
        w.sim.advance(Duration::ZERO).expect("advance");
        (w.sim.net().received().len(), w.sim.net().gate_timeouts())
    };
    assert_eq!(run("8", 8, 8), (8, 0), "eight requests in flight at once");
    // Negative controls: the barrier notices when fewer are in flight than it waits for.
    let (sent, timeouts) = run("4", 8, 8);
    assert_eq!(sent, 8);
    assert!(timeouts > 0, "a bound of 4 never has 8 in flight");
    let (_, timeouts) = run("1", 2, 2);
    assert!(timeouts > 0, "a bound of 1 sends one at a time");
}

#[test]
fn publishing_costs_grow_with_matching_subscriptions_not_with_all_keys() {
    let mut w = World::new(15);
    w.subscribe(URL, &["load.created"], vec![Reply::Status(200)]);
    let publish_ops = |w: &mut World| {
        let before = w.sim.store().ops();
        w.sim
            .publish("load.created", br#"{"id":"L"}"#)
            .expect("runs")
            .expect("ok");
        w.sim.store().ops() - before
    };
    publish_ops(&mut w); // first use of this second's queue, this day's retention list
    let base = publish_ops(&mut w);
    // 200 more subscriptions (other clients, another event type) and their keys.
    for c in 0..2 {
        let key = issue_key(&mut w.sim, &format!("other-{c}"));
        for i in 0..100 {
            let url = format!("https://o{c}-{i}.example.com/x");
            w.sim.net().endpoint(&url, vec![Reply::Status(200)]);
            create(&mut w.sim, &key, &url, &["load.updated"]);
        }
    }
    assert_eq!(
        publish_ops(&mut w),
        base,
        "non-matching subscriptions cost nothing"
    );
    for i in 0..10 {
        let url = format!("https://m{i}.example.com/x");
        w.subscribe(&url, &["load.created"], vec![Reply::Status(200)]);
    }
    let grown = publish_ops(&mut w);
    assert!(
        grown > base && grown < base * 12,
        "{base} -> {grown} for 1 -> 11 matching"
    );
}
