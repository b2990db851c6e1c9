//! Header injection: no response or delivery header can be made to carry CR, LF or other
//! invalid bytes, whether the attempt comes in with a request (event type, idempotency key,
//! ids and parameters in the path) or sits in stored data (a tampered record). Bad input
//! gets the JSON error envelope with a code and the requestId, never a 500 or a panic.

use crate::common;
use edgehook_component::model::ids::{ClientId, DeliveryId};

use common::*;
use edgehook_component::api::auth::sha256_hex;
use edgehook_component::delivery::Delivery;
use edgehook_component::storage::keys;
use edgehook_runtime::HttpResponse;
use edgehook_runtime::store::KvBackend;
use edgehook_sim::simnet::Reply;
use serde_json::{Value, json};
use std::time::Duration;

/// Every header a response of ours may carry.
const RESPONSE_HEADERS: [&str; 9] = [
    "content-type",
    "content-length",
    "x-request-id",
    "location",
    "allow",
    "retry-after",
    "www-authenticate",
    "idempotent-replayed",
    "transfer-encoding",
];

/// A header value a client can receive safely: visible ASCII and spaces only.
fn clean_value(v: &[u8]) -> bool {
    v.iter().all(|b| (0x20..0x7f).contains(b))
}

/// The response has only our headers, each with a clean value; an error is the JSON
/// envelope with a code and the requestId of `X-Request-Id`; nothing is a 500.
fn assert_clean(what: &str, r: &HttpResponse) {
    assert!(r.status < 500, "{what}: {} {}", r.status, r.json());
    for (name, value) in &r.headers {
        assert!(
            RESPONSE_HEADERS.contains(&name.as_str()),
            "{what}: unexpected header {name}: {value}"
        );
        assert!(clean_value(value.as_bytes()), "{what}: {name}: {value:?}");
    }
    let rid = r.header("x-request-id").expect("X-Request-Id");
    assert_eq!(r.json()["requestId"], rid, "{what}");
    if r.status >= 400 {
        let code = r.json()["error"]["code"].as_str().unwrap_or("").to_owned();
        assert!(!code.is_empty(), "{what}: {}", r.json());
    }
}

#[test]
fn request_data_never_reaches_a_response_header() {
    let (mut sim, key, sub) = acme_subscribed(41);
    // Header values a client can send (HTTP itself forbids raw CR and LF in them): tabs,
    // obs-text bytes, Unicode line separators, an injected-looking tail.
    let evil_values = [
        "load.created\tX-Injected: 1",
        "load.created X-Injected: 1",
        "load.cr\u{e9}ated",
        "load.created\u{85}X-Injected: 1",
        "load.created\u{2028}X-Injected: 1",
    ];
    for v in evil_values {
        let r = ingest(&mut sim, v, br#"{"id":"L-1"}"#, &[]);
        assert_clean(&format!("X-Service-Event {v:?}"), &r);
        assert_error(&r, 422, "validation_failed");
        let r = ingest(
            &mut sim,
            "load.created",
            br#"{"id":"L-1"}"#,
            &[("idempotency-key", v)],
        );
        assert_clean(&format!("ingest Idempotency-Key {v:?}"), &r);
        let r = create_with(
            &mut sim,
            &key,
            &json!({"url": "https://hooks.example.com/y", "eventTypes": ["load.created"]}),
            &[("idempotency-key", v)],
        );
        assert_clean(&format!("create Idempotency-Key {v:?}"), &r);
        let r = create_with(
            &mut sim,
            &key,
            &json!({"url": "https://hooks.example.com/y", "eventTypes": [v]}),
            &[],
        );
        assert_clean(&format!("eventTypes [{v:?}]"), &r);
        assert_error(&r, 422, "validation_failed");
    }
    let long = "k".repeat(300);
    let r = create_with(
        &mut sim,
        &key,
        &json!({"url": "https://hooks.example.com/y", "eventTypes": ["load.created"]}),
        &[("idempotency-key", &long)],
    );
    assert_clean("a 300-character Idempotency-Key", &r);
    assert!(r.status >= 400);
    // Ids and parameters in the path, with encoded CR LF.
    let crlf = "%0D%0ASet-Cookie:%20injected=1";
    for (method, path, who) in [
        ("GET", format!("/v1/webhooks/sub_{crlf}"), key.as_str()),
        ("DELETE", format!("/v1/webhooks/{sub}{crlf}"), &key),
        ("GET", format!("/v1/webhooks?cursor={crlf}"), &key),
        ("GET", format!("/v1/webhooks?limit=1{crlf}"), &key),
        ("GET", "/v1/webhooks/sub_%E2%80%A8".to_owned(), &key),
        ("GET", format!("/internal/v1/deliveries/dlv_{crlf}"), ADMIN),
        (
            "POST",
            format!("/internal/v1/deliveries/dlv_{crlf}/replay"),
            ADMIN,
        ),
        (
            "GET",
            format!("/internal/v1/subscriptions/{sub}{crlf}"),
            ADMIN,
        ),
        (
            "POST",
            format!("/internal/v1/subscriptions/sub_{crlf}/disable"),
            ADMIN,
        ),
        (
            "GET",
            format!("/internal/v1/subscriptions/{sub}/deliveries?cursor={crlf}"),
            ADMIN,
        ),
        (
            "POST",
            format!("/internal/v1/clients/acme{crlf}/keys"),
            ADMIN,
        ),
        (
            "DELETE",
            format!("/internal/v1/clients/acme/keys/key_{crlf}"),
            ADMIN,
        ),
        ("GET", format!("/nope{crlf}"), &key),
    ] {
        let r = call(&mut sim, method, &path, who);
        assert_clean(&format!("{method} {path}"), &r);
        assert!(r.status >= 400, "{method} {path}: {}", r.status);
    }
    // The events export refuses an event type with CR LF outright.
    let published = sim
        .publish("load.created\r\nX-Injected: 1", br#"{"id":"L-1"}"#)
        .expect("runs");
    assert!(published.is_err(), "{published:?}");
    // A target URL with an encoded CR LF in its path is delivered with it still encoded.
    let url = format!("https://hooks.example.com/in{crlf}");
    sim.net().endpoint(&url, [Reply::Status(200)]);
    create(&mut sim, &key, &url, &["load.updated"]);
    ingest(&mut sim, "load.updated", br#"{"id":"L-2"}"#, &[]);
    let got = sim.net().received_by(&url);
    assert_eq!(got.len(), 1);
    assert!(got[0].header("set-cookie").is_none());
    for (name, value) in &got[0].headers {
        assert!(clean_value(value), "{name}: {value:?}");
    }
}

fn read_json(sim: &edgehook_sim::sim::Simulation, key: &str) -> Value {
    let bytes = sim.store().get(key).expect("store").expect("record");
    serde_json::from_slice(&bytes).expect("json record")
}

fn write_json(sim: &edgehook_sim::sim::Simulation, key: &str, value: &Value) {
    sim.store()
        .set(key, value.to_string().as_bytes())
        .expect("store");
}

#[test]
fn a_stored_location_with_cr_lf_is_dropped_not_sent_and_takes_no_other_header_with_it() {
    let mut sim = sim(42);
    let key = issue_key(&mut sim, "acme");
    let body = json!({"url": "https://hooks.example.com/x", "eventTypes": ["load.created"]});
    let idem = [("idempotency-key", "once")];
    let first = create_with(&mut sim, &key, &body, &idem);
    assert_eq!(first.status, 201);
    // Tamper the stored response: its Location now tries to add a header.
    let acme = ClientId::trusted("acme");
    let record_key = keys::idempotency(&acme, &sha256_hex("once"));
    let mut record = read_json(&sim, &record_key);
    record["response"]["location"] = json!("/v1/webhooks/x\r\nSet-Cookie: injected=1");
    write_json(&sim, &record_key, &record);
    let replay = create_with(&mut sim, &key, &body, &idem);
    assert_clean("replay of a tampered response", &replay);
    assert_eq!(replay.status, 201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("content-type"), Some("application/json"));
    assert!(
        replay.header("location").is_none(),
        "the bad value is dropped"
    );
    assert_eq!(replay.json()["data"]["id"], first.json()["data"]["id"]);
}

#[test]
fn stored_delivery_fields_with_cr_lf_never_become_delivery_headers() {
    let mut sim = sim(43);
    let key = issue_key(&mut sim, "acme");
    let url = "https://hooks.example.com/x";
    sim.net()
        .endpoint(url, [Reply::Status(500), Reply::Status(200)]);
    create(&mut sim, &key, url, &["load.created"]);
    ingest(&mut sim, "load.created", br#"{"id":"L-1"}"#, &[]);
    let first = sim.net().received_by(url);
    assert_eq!(first.len(), 1, "attempt 1 failed with a 500");
    let dlv = delivery_id_of(&first[0]);
    // Tamper the record before attempt 2: its event type now tries to add a header.
    let record_key = keys::delivery(&DeliveryId::trusted(dlv.as_str()));
    let bytes = sim
        .store()
        .get(&record_key)
        .expect("store")
        .expect("record");
    let mut record = Delivery::decode(&bytes).expect("delivery record");
    record.event_type = "load.created\r\nX-Injected: 1".into();
    sim.store()
        .set(&record_key, &record.encode())
        .expect("store");
    sim.advance(Duration::from_secs(120))
        .expect("attempt 2 runs");
    for r in sim.net().received() {
        assert!(r.header("x-injected").is_none());
        for (name, value) in &r.headers {
            assert!(clean_value(value), "{name}: {value:?}");
        }
    }
    assert_eq!(
        sim.net().received_by(url).len(),
        1,
        "the tampered attempt was not sent"
    );
    let shown = call(
        &mut sim,
        "GET",
        &format!("/internal/v1/deliveries/{dlv}"),
        ADMIN,
    );
    assert_clean("the tampered delivery", &shown);
    let attempts = shown.json()["data"]["attempts"].clone();
    assert_eq!(attempts[1]["error"], "invalid header", "{attempts}");
}
