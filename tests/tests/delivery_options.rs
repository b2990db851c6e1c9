//! Delivery options: Standard Webhooks signatures, secret rotation with
//! an overlap, and a subscription's own headers, on the simulator with virtual time. Every
//! signature is checked here with an implementation other than the component's (the `hmac`
//! and `base64` crates); the official Standard Webhooks libraries check real deliveries in
//! `host/edgehook/tests/standard.rs`.

use crate::common::*;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use edgehook_sim::simnet::Received;
use serde_json::{Value, json};
use std::time::Duration;

const URL: &str = "https://hooks.example.com/options";

fn header(r: &Received, name: &str) -> Option<String> {
    r.headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
}

/// Standard Webhooks' check: the test kit's, written from the specification (the key is the
/// base64 after `whsec_`; any `v1,` entry of `webhook-signature` may match).
fn standard_verifies(secret: &str, r: &Received) -> bool {
    edgehook_testkit::signature::verifies_standard(
        secret,
        r.header("webhook-id"),
        r.header("webhook-timestamp"),
        r.header("webhook-signature"),
        &r.body,
    )
}

fn spec_verifies(secret: &str, signature: Option<&str>, r: &Received) -> bool {
    let ts = header(r, "x-service-timestamp");
    edgehook_testkit::signature::verifies(secret, ts.as_deref(), signature, &r.body)
}

fn send(
    sim: &mut edgehook_sim::Simulation,
    method: &str,
    path: &str,
    key: &str,
    body: &Value,
) -> edgehook_runtime::HttpResponse {
    let auth = bearer(key);
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    sim.request(method, path, &headers, body.to_string().as_bytes())
        .expect("request runs")
}

/// Publishes one `load.created` and returns what the endpoint received for it.
fn deliver(sim: &mut edgehook_sim::Simulation, load: &str) -> Received {
    let before = sim.net().received_by(URL).len();
    assert_eq!(
        ingest(sim, "load.created", load.as_bytes(), &[]).status,
        202
    );
    sim.advance(Duration::from_secs(1)).expect("advance");
    let got = sim.net().received_by(URL);
    assert_eq!(got.len(), before + 1, "one delivery");
    got[before].clone()
}

#[test]
fn standard_mode_signs_the_id_timestamp_and_body_as_the_standard_says() {
    let mut sim = sim(301);
    let key = issue_key(&mut sim, "acme");
    sim.net().endpoint(URL, []);
    let body = json!({"url": URL, "eventTypes": ["load.created"], "signatureScheme": "standard"});
    let created = create_with(&mut sim, &key, &body, &[]);
    assert_eq!(created.status, 201, "{}", created.json());
    let data = created.json()["data"].clone();
    assert_eq!(data["signatureScheme"], "standard");
    let secret = data["signingSecret"].as_str().expect("secret").to_owned();
    // whsec_ + base64 of 32 random bytes, with its padding: what the libraries decode.
    assert_eq!(STANDARD.decode(&secret[6..]).expect("base64").len(), 32);
    let r = deliver(&mut sim, r#"{"id":"L1"}"#);
    assert!(standard_verifies(&secret, &r), "{:?}", r.headers);
    let id = header(&r, "webhook-id").expect("webhook-id");
    assert!(id.starts_with("dlv_"), "the delivery id: {id}");
    assert_eq!(
        header(&r, "webhook-timestamp").as_deref(),
        Some(&*(r.at_ms / 1000).to_string())
    );
    assert_eq!(
        header(&r, "x-service-event").as_deref(),
        Some("load.created")
    );
    for spec_only in [
        "x-service-signature",
        "x-service-timestamp",
        "x-service-delivery-id",
    ] {
        assert_eq!(header(&r, spec_only), None, "{spec_only} in standard mode");
    }
    // The id is signed: the same signature over another id does not verify.
    let mut forged = r.clone();
    for (n, v) in &mut forged.headers {
        if n == "webhook-id" {
            *v = b"dlv_000000000000000000000000".to_vec();
        }
    }
    assert!(!standard_verifies(&secret, &forged));
    // The default stays SPEC's, header for header.
    sim.net().endpoint("https://hooks.example.com/spec", []);
    let spec = create(
        &mut sim,
        &key,
        "https://hooks.example.com/spec",
        &["load.created"],
    );
    assert_eq!(spec["signatureScheme"], "spec");
    let _ = deliver(&mut sim, r#"{"id":"L2"}"#);
    let r = sim
        .net()
        .received_by("https://hooks.example.com/spec")
        .pop()
        .expect("one");
    let names: Vec<&str> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "host",
            "content-type",
            "content-length",
            "user-agent",
            "x-service-delivery-id",
            "x-service-event",
            "x-service-timestamp",
            "x-service-signature"
        ]
    );
}

#[test]
fn a_rotation_signs_with_both_secrets_for_the_overlap_then_erases_the_old_one() {
    for scheme in ["spec", "standard"] {
        let mut sim = sim(302);
        let key = issue_key(&mut sim, "acme");
        sim.net().endpoint(URL, []);
        let body = json!({"url": URL, "eventTypes": ["load.created"], "signatureScheme": scheme});
        let created = create_with(&mut sim, &key, &body, &[]).json()["data"].clone();
        let (id, old) = (
            created["id"].as_str().expect("id").to_owned(),
            created["signingSecret"]
                .as_str()
                .expect("secret")
                .to_owned(),
        );
        let path = format!("/v1/webhooks/{id}/rotate-secret");
        let rotated = send(
            &mut sim,
            "POST",
            &path,
            &key,
            &json!({"overlapSeconds": 3600}),
        );
        assert_eq!(rotated.status, 200, "{}", rotated.json());
        let data = rotated.json()["data"].clone();
        let new = data["signingSecret"].as_str().expect("secret").to_owned();
        assert_ne!(new, old);
        let until = data["previousSecretExpiresAt"].as_u64().expect("until");
        let read = call(&mut sim, "GET", &format!("/v1/webhooks/{id}"), &key).json();
        assert_eq!(
            read["data"]["previousSecretExpiresAt"].as_u64(),
            Some(until)
        );
        assert!(!read.to_string().contains(&old) && !read.to_string().contains(&new));

        // In the overlap, a receiver with either secret verifies.
        let r = deliver(&mut sim, r#"{"id":"L1"}"#);
        let other = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        if scheme == "spec" {
            // SPEC §5.2 read literally: X-Service-Signature, with the old secret.
            let literal = header(&r, "x-service-signature");
            assert!(spec_verifies(&old, literal.as_deref(), &r));
            let list = header(&r, "x-service-signatures").expect("the list");
            let listed: Vec<&str> = list.split(',').collect();
            assert_eq!(listed.len(), 2, "{list}");
            assert!(
                spec_verifies(&new, Some(listed[0]), &r),
                "the new one first"
            );
            assert!(spec_verifies(&old, Some(listed[1]), &r));
            assert!(!listed.iter().any(|s| spec_verifies(other, Some(s), &r)));
        } else {
            assert!(standard_verifies(&new, &r) && standard_verifies(&old, &r));
            assert!(!standard_verifies(other, &r));
            let sigs = header(&r, "webhook-signature").expect("signature");
            assert_eq!(sigs.split(' ').count(), 2, "{sigs}");
        }

        // After the overlap: the new secret only, and the old one erased from the record.
        sim.advance(Duration::from_secs(3601)).expect("advance");
        let r = deliver(&mut sim, r#"{"id":"L2"}"#);
        if scheme == "spec" {
            let sig = header(&r, "x-service-signature");
            assert!(spec_verifies(&new, sig.as_deref(), &r));
            assert!(!spec_verifies(&old, sig.as_deref(), &r));
            assert_eq!(header(&r, "x-service-signatures"), None);
        } else {
            assert!(standard_verifies(&new, &r) && !standard_verifies(&old, &r));
        }
        let read = call(&mut sim, "GET", &format!("/v1/webhooks/{id}"), &key).json();
        assert_eq!(
            read["data"]["previousSecretExpiresAt"],
            Value::Null,
            "{read}"
        );
        let stored = sim.store().snapshot();
        assert!(
            !stored
                .values()
                .any(|v| v.windows(old.len()).any(|w| w == old.as_bytes())),
            "the old secret is still stored"
        );
    }
}

#[test]
fn a_rotation_without_overlap_stops_the_old_secret_at_once_and_bad_overlaps_change_nothing() {
    let mut sim = sim(303);
    let key = issue_key(&mut sim, "acme");
    sim.net().endpoint(URL, []);
    let created = create(&mut sim, &key, URL, &["load.created"]);
    let (id, old) = (
        created["id"].as_str().expect("id").to_owned(),
        created["signingSecret"]
            .as_str()
            .expect("secret")
            .to_owned(),
    );
    let path = format!("/v1/webhooks/{id}/rotate-secret");
    for bad in [
        json!({"overlapSeconds": -1}),
        json!({"overlapSeconds": 604801}),
        json!({"overlapSeconds": "1h"}),
        json!({"overlap": 5}),
    ] {
        let resp = send(&mut sim, "POST", &path, &key, &bad);
        assert_eq!(resp.status, 422, "{bad}: {}", resp.json());
        assert!(resp.json()["requestId"].as_str().is_some());
    }
    let r = deliver(&mut sim, r#"{"id":"L0"}"#);
    assert!(
        spec_verifies(&old, header(&r, "x-service-signature").as_deref(), &r),
        "unchanged"
    );
    let resp = send(&mut sim, "POST", &path, &key, &json!({"overlapSeconds": 0}));
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json()["data"]["previousSecretExpiresAt"], Value::Null);
    let new = resp.json()["data"]["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    let r = deliver(&mut sim, r#"{"id":"L1"}"#);
    let sig = header(&r, "x-service-signature");
    assert!(spec_verifies(&new, sig.as_deref(), &r) && !spec_verifies(&old, sig.as_deref(), &r));
    // Another client's subscription, or an unknown id: 404.
    let other = issue_key(&mut sim, "globex");
    assert_eq!(
        send(&mut sim, "POST", &path, &other, &json!({})).status,
        404
    );
}

#[test]
fn own_headers_are_sent_never_shown_and_bad_ones_are_refused_changing_nothing() {
    let mut sim = sim(304);
    let key = issue_key(&mut sim, "acme");
    sim.net().endpoint(URL, []);
    let body = json!({"url": URL, "eventTypes": ["load.created"], "headers": {"X-Receiver-Token": "tok-1234", "Authorization": "Bearer abc"}});
    let created = create_with(&mut sim, &key, &body, &[]);
    assert_eq!(created.status, 201, "{}", created.json());
    let id = created.json()["data"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(
        created.json()["data"]["headerNames"],
        json!(["Authorization", "X-Receiver-Token"])
    );
    let r = deliver(&mut sim, r#"{"id":"L1"}"#);
    assert_eq!(header(&r, "x-receiver-token").as_deref(), Some("tok-1234"));
    assert_eq!(header(&r, "authorization").as_deref(), Some("Bearer abc"));
    // Values are write-only: no read, list or log shows them.
    let read = call(&mut sim, "GET", &format!("/v1/webhooks/{id}"), &key).json();
    assert_eq!(
        read["data"]["headerNames"],
        json!(["Authorization", "X-Receiver-Token"])
    );
    let listed = call(&mut sim, "GET", "/v1/webhooks", &key).json();
    let op = call(
        &mut sim,
        "GET",
        &format!("/internal/v1/subscriptions/{id}"),
        ADMIN,
    )
    .json();
    for text in [
        read.to_string(),
        listed.to_string(),
        op.to_string(),
        sim.guest_log(),
    ] {
        assert!(
            !text.contains("tok-1234") && !text.contains("Bearer abc"),
            "{text}"
        );
    }
    // Bad headers: 422 naming each, and nothing changes.
    let path = format!("/v1/webhooks/{id}");
    let many: serde_json::Map<String, Value> =
        (0..11).map(|i| (format!("X-H{i}"), json!("v"))).collect();
    for (bad, code) in [
        (json!({"Content-Length": "1"}), "header_not_allowed"),
        (json!({"X-Service-Signature": "x"}), "header_not_allowed"),
        (json!({"webhook-id": "x"}), "header_not_allowed"),
        (json!({"Connection": "close"}), "header_not_allowed"),
        (json!({"Bad Name": "x"}), "invalid_header_name"),
        (json!({"X-Ok": "line\r\nbreak"}), "invalid_header_value"),
        (json!({"X-Ok": ""}), "invalid_header_value"),
        (json!({"X-Ok": "x".repeat(1025)}), "invalid_header_value"),
        (json!({"X-A": "1", "x-a": "2"}), "duplicate_header"),
        (Value::Object(many), "too_many_headers"),
    ] {
        let resp = send(&mut sim, "PATCH", &path, &key, &json!({"headers": bad}));
        assert_eq!(resp.status, 422, "{bad}: {}", resp.json());
        let details = resp.json()["error"]["details"].to_string();
        assert!(details.contains(code), "{bad}: {details}");
    }
    for (bad, code) in [
        (json!({"signatureScheme": "hmac"}), "invalid_value"),
        (
            json!({"url": "http://hooks.example.com/x"}),
            "https_required",
        ),
        (
            json!({"eventTypes": ["load.deleted"]}),
            "unknown_event_type",
        ),
        (json!({"ordering": "sorted"}), "invalid_value"),
        (json!({"paused": true}), "unknown_field"),
    ] {
        let resp = send(&mut sim, "PATCH", &path, &key, &bad);
        assert_eq!(resp.status, 422, "{bad}: {}", resp.json());
        assert!(
            resp.json()["error"]["details"].to_string().contains(code),
            "{bad}"
        );
    }
    let r = deliver(&mut sim, r#"{"id":"L2"}"#);
    assert_eq!(
        header(&r, "x-receiver-token").as_deref(),
        Some("tok-1234"),
        "unchanged"
    );
    // An update replaces the set; {} removes them.
    let resp = send(
        &mut sim,
        "PATCH",
        &path,
        &key,
        &json!({"headers": {"X-Other": "2"}}),
    );
    assert_eq!(resp.status, 200, "{}", resp.json());
    assert_eq!(resp.json()["data"]["headerNames"], json!(["X-Other"]));
    assert!(
        resp.json()["data"].get("signingSecret").is_none(),
        "no new secret"
    );
    let r = deliver(&mut sim, r#"{"id":"L3"}"#);
    assert_eq!(
        (
            header(&r, "x-receiver-token"),
            header(&r, "x-other").as_deref()
        ),
        (None, Some("2"))
    );
    assert_eq!(
        send(&mut sim, "PATCH", &path, &key, &json!({"headers": {}})).status,
        200
    );
    let r = deliver(&mut sim, r#"{"id":"L4"}"#);
    assert_eq!(header(&r, "x-other"), None);
    // A delete erases header values with the secrets (the names stay in the tombstone).
    let body = json!({"headers": {"X-Receiver-Token": "tok-5678"}});
    assert_eq!(send(&mut sim, "PATCH", &path, &key, &body).status, 200);
    let rotate = format!("{path}/rotate-secret");
    assert_eq!(
        send(&mut sim, "POST", &rotate, &key, &json!({})).status,
        200
    );
    assert_eq!(call(&mut sim, "DELETE", &path, &key).status, 200);
    let stored = sim.store().snapshot();
    let holds = |needle: &str| {
        stored
            .values()
            .any(|v| v.windows(needle.len()).any(|w| w == needle.as_bytes()))
    };
    assert!(
        !holds("tok-5678") && !holds("whsec_"),
        "a secret outlived the delete"
    );
}

#[test]
fn switching_the_scheme_gives_a_new_secret_of_its_form_at_once() {
    let mut sim = sim(305);
    let key = issue_key(&mut sim, "acme");
    sim.net().endpoint(URL, []);
    let id = create_id(&mut sim, &key, URL, &["load.created"]);
    let path = format!("/v1/webhooks/{id}");
    let resp = send(
        &mut sim,
        "PATCH",
        &path,
        &key,
        &json!({"signatureScheme": "standard"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.json());
    let data = resp.json()["data"].clone();
    assert_eq!(data["signatureScheme"], "standard");
    let secret = data["signingSecret"]
        .as_str()
        .expect("a new secret")
        .to_owned();
    let r = deliver(&mut sim, r#"{"id":"L1"}"#);
    assert!(standard_verifies(&secret, &r));
    // The same scheme again: nothing to change, no secret.
    let resp = send(
        &mut sim,
        "PATCH",
        &path,
        &key,
        &json!({"signatureScheme": "standard"}),
    );
    assert!(resp.json()["data"].get("signingSecret").is_none());
    let back = send(
        &mut sim,
        "PATCH",
        &path,
        &key,
        &json!({"signatureScheme": "spec"}),
    );
    let secret = back.json()["data"]["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    let r = deliver(&mut sim, r#"{"id":"L2"}"#);
    assert!(spec_verifies(
        &secret,
        header(&r, "x-service-signature").as_deref(),
        &r
    ));
}

/// A 429 or 503 with `Retry-After` holds the next attempt back at least that
/// long, within [the normal delay, 1 hour]; the attempt log shows the wait; anything else
/// is ignored.
#[test]
fn retry_after_holds_the_next_attempt_back_within_the_normal_delay_and_an_hour() {
    use edgehook_sim::simnet::Reply;
    // (first answer, earliest and latest second of the retry after attempt 1, shown wait)
    let date = "Thu, 01 Jan 2026 00:10:00 GMT"; // 600 s after the simulation starts
    let cases: [(Reply, u64, u64, Option<u64>); 6] = [
        (
            Reply::RetryAfter {
                status: 503,
                value: "120",
            },
            120,
            121,
            Some(120_000),
        ),
        (
            Reply::RetryAfter {
                status: 429,
                value: date,
            },
            600,
            601,
            Some(600_000),
        ),
        (
            Reply::RetryAfter {
                status: 503,
                value: "7200",
            },
            3600,
            3601,
            Some(3_600_000),
        ),
        (
            Reply::RetryAfter {
                status: 503,
                value: "10",
            },
            60,
            67,
            Some(10_000),
        ),
        (
            Reply::RetryAfter {
                status: 503,
                value: "soon",
            },
            60,
            67,
            None,
        ),
        (
            Reply::RetryAfter {
                status: 500,
                value: "120",
            },
            60,
            67,
            None,
        ),
    ];
    for (n, (first, earliest, latest, shown)) in cases.into_iter().enumerate() {
        let mut sim = sim(310);
        let key = issue_key(&mut sim, "acme");
        sim.net().endpoint(URL, [first, Reply::Status(200)]);
        let id = create_id(&mut sim, &key, URL, &["load.created"]);
        assert_eq!(
            ingest(&mut sim, "load.created", b"{\"id\":\"L\"}", &[]).status,
            202
        );
        sim.advance(Duration::from_secs(2 * 3600)).expect("advance");
        let got = sim.net().received_by(URL);
        assert_eq!(got.len(), 2, "case {n}: attempt 1 and its retry");
        let gap_s = (got[1].at_ms - got[0].at_ms) / 1000;
        assert!(
            (earliest..=latest).contains(&gap_s),
            "case {n}: retried after {gap_s} s, expected {earliest}..={latest}"
        );
        let page = call(
            &mut sim,
            "GET",
            &format!("/v1/webhooks/{id}/deliveries"),
            &key,
        )
        .json();
        let attempt = &page["data"][0]["attempts"][0];
        assert_eq!(
            attempt["retryAfterMs"].as_u64(),
            shown,
            "case {n}: {attempt}"
        );
    }
}

/// The operator rotates a partner's secret (a leaked one): with no overlap the old secret
/// stops signing at once and the new one, answered to the operator, signs; the partner's
/// rules on the overlap hold; a partner key may not, and a deleted subscription is 404.
#[test]
fn the_operator_rotates_a_partners_secret_and_the_leaked_one_stops_at_once() {
    let mut sim = sim(307);
    let key = issue_key(&mut sim, "acme");
    sim.net().endpoint(URL, []);
    let body = json!({"url": URL, "eventTypes": ["load.created"]});
    let created = create_with(&mut sim, &key, &body, &[]).json()["data"].clone();
    let id = created["id"].as_str().expect("id").to_owned();
    let leaked = created["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    let path = format!("/internal/v1/subscriptions/{id}/rotate-secret");
    for (overlap, code) in [
        (json!(700_000), "out_of_range"),
        (json!(1.5), "out_of_range"),
    ] {
        let refused = operator_post_json(&mut sim, &path, &json!({"overlapSeconds": overlap}));
        assert_error(&refused, 422, "validation_failed");
        assert_eq!(refused.json()["error"]["details"][0]["code"], code);
    }
    assert_error(
        &send(&mut sim, "POST", &path, &key, &json!({})),
        403,
        "forbidden",
    );

    let rotated = operator_post_json(&mut sim, &path, &json!({"overlapSeconds": 0.0}));
    assert_eq!(rotated.status, 200, "{}", rotated.json());
    let data = rotated.json()["data"].clone();
    assert_eq!(data["id"], created["id"]);
    assert_eq!(data["previousSecretExpiresAt"], Value::Null);
    let new = data["signingSecret"].as_str().expect("secret").to_owned();
    assert_ne!(new, leaked);
    let r = deliver(&mut sim, r#"{"id":"L1"}"#);
    let signature = header(&r, "x-service-signature");
    assert!(spec_verifies(&new, signature.as_deref(), &r));
    assert!(!spec_verifies(&leaked, signature.as_deref(), &r));
    assert_eq!(header(&r, "x-service-signatures"), None, "no overlap");

    // With an overlap, as the partner's: both sign until it ends.
    let rotated = operator_post_json(&mut sim, &path, &json!({"overlapSeconds": 3600}));
    assert_eq!(rotated.status, 200, "{}", rotated.json());
    assert!(rotated.json()["data"]["previousSecretExpiresAt"].is_u64());

    assert_eq!(
        call(&mut sim, "DELETE", &format!("/v1/webhooks/{id}"), &key).status,
        200
    );
    assert_error(
        &operator_post_json(&mut sim, &path, &json!({})),
        404,
        "not_found",
    );
    let unknown = "/internal/v1/subscriptions/sub_0123456789abcdef01234567/rotate-secret";
    assert_error(
        &operator_post_json(&mut sim, unknown, &json!({})),
        404,
        "not_found",
    );
}
