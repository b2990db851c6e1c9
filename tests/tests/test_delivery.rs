//! Test deliveries: `POST /v1/webhooks/{id}/test` sends one signed
//! `webhook.ping` now and answers with how the receiver answered; nothing is stored, retried
//! or counted toward disabling. The operator has the same for any client's subscription.

use crate::common::*;
use edgehook_sim::simnet::Reply;
use std::time::Duration;

const URL: &str = "https://hooks.example.com/ping";

#[test]
fn a_test_delivery_is_a_signed_ping_answered_with_the_receivers_outcome() {
    let mut sim = sim(51);
    let key = issue_key(&mut sim, "acme");
    sim.net().endpoint(
        URL,
        [
            Reply::Status(204),
            Reply::Status(500),
            Reply::Refused,
            Reply::Delayed {
                delay: Duration::from_secs(60),
                status: 200,
            },
            Reply::Status(200),
        ],
    );
    let created = create(&mut sim, &key, URL, &["load.created"]);
    let id = created["id"].as_str().expect("id").to_owned();
    let secret = created["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    let path = format!("/v1/webhooks/{id}/test");
    let mut outcomes = Vec::new();
    for _ in 0..4 {
        let resp = call(&mut sim, "POST", &path, &key);
        assert_eq!(resp.status, 200, "{}", resp.json());
        let data = resp.json()["data"].clone();
        assert_eq!(data["eventType"], "webhook.ping");
        assert_eq!(data["subscriptionId"], id.as_str());
        assert!(data["durationMs"].as_u64().is_some());
        outcomes.push((
            data["succeeded"].as_bool().expect("succeeded"),
            data["statusCode"].as_u64(),
            data["errorClass"].as_str().map(str::to_owned),
        ));
    }
    let class = |c: &str| Some(c.to_owned());
    assert_eq!(
        outcomes,
        [
            (true, Some(204), None),
            (false, Some(500), class("http_status")),
            (false, None, class("connection")),
            (false, None, class("timeout")),
        ]
    );
    let received = sim.net().received_by(URL);
    assert_eq!(received.len(), 4, "one request per test, never retried");
    let first = &received[0];
    assert_eq!(first.header("x-service-event"), Some("webhook.ping"));
    let body: serde_json::Value = serde_json::from_slice(&first.body).expect("a JSON body");
    assert_eq!(body["type"], "webhook.ping");
    assert_eq!(body["subscriptionId"], id.as_str());
    assert!(
        edgehook_testkit::signature::verifies(
            &secret,
            first.header("x-service-timestamp"),
            first.header("x-service-signature"),
            &first.body
        ),
        "signed like a delivery"
    );
    let ids: Vec<String> = received.iter().map(delivery_id_of).collect();
    let mut distinct = ids.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "a new delivery id per test: {ids:?}");
    assert!(ids.iter().all(|d| d.starts_with("dlv_")));

    // Nothing stored, nothing counted: no delivery listed, the streak untouched, active.
    let deliveries = call(
        &mut sim,
        "GET",
        &format!("/internal/v1/subscriptions/{id}/deliveries"),
        ADMIN,
    );
    assert_eq!(deliveries.json()["data"], serde_json::json!([]));
    let seen = call(&mut sim, "GET", &format!("/v1/webhooks/{id}"), &key).json()["data"].clone();
    assert_eq!(
        (&seen["status"], &seen["consecutiveFailures"]),
        (&serde_json::json!("active"), &serde_json::json!(0))
    );
    sim.advance(Duration::from_secs(900)).expect("advance");
    assert_eq!(sim.net().received_by(URL).len(), 4, "no retry of a test");
}

#[test]
fn a_disabled_subscription_can_be_tested_but_not_another_clients_or_a_deleted_one() {
    let mut sim = sim(52);
    let key = issue_key(&mut sim, "acme");
    let other = issue_key(&mut sim, "globex");
    sim.net()
        .endpoint(URL, [Reply::Status(410), Reply::Status(200)]);
    let created = create(&mut sim, &key, URL, &["load.created"]);
    let id = created["id"].as_str().expect("id").to_owned();
    assert_eq!(
        ingest(&mut sim, "load.created", br#"{"id":"L"}"#, &[]).status,
        202
    );
    sim.advance(Duration::from_secs(5)).expect("advance");
    let path = format!("/v1/webhooks/{id}/test");
    // Disabled (410): its owner checks the receiver before enabling it again.
    let resp = call(&mut sim, "POST", &path, &key);
    assert_eq!(resp.status, 200, "{}", resp.json());
    assert_eq!(resp.json()["data"]["statusCode"], 200);
    let seen = call(&mut sim, "GET", &format!("/v1/webhooks/{id}"), &key).json()["data"].clone();
    assert_eq!(seen["status"], "disabled", "a test enables nothing");
    call_fails(&mut sim, "POST", &path, &other, 404, "not_found");
    call_fails(&mut sim, "GET", &path, &key, 405, "method_not_allowed");
    call_fails(
        &mut sim,
        "POST",
        "/v1/webhooks/sub_nope/test",
        &key,
        404,
        "not_found",
    );
    // The operator's test of it, then of a deleted one: 409, nothing sent.
    let op = format!("/internal/v1/subscriptions/{id}/test");
    let resp = call(&mut sim, "POST", &op, ADMIN);
    assert_eq!(resp.status, 200, "{}", resp.json());
    let sent = sim.net().received_by(URL).len();
    assert_eq!(
        call(&mut sim, "DELETE", &format!("/v1/webhooks/{id}"), &key).status,
        200
    );
    call_fails(&mut sim, "POST", &path, &key, 404, "not_found");
    call_fails(&mut sim, "POST", &op, ADMIN, 409, "subscription_deleted");
    assert_eq!(sim.net().received_by(URL).len(), sent);
}
