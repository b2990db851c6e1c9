//! Partners' notices: a client registers one notification endpoint (`PUT
//! /v1/notification-endpoint`, its signing secret shown once) and receives signed
//! `subscription.disabled`, `subscription.enabled` and `secret.rotation_ending` notices about
//! its own subscriptions, retried like any delivery; another client hears nothing of them.

use crate::common::*;
use edgehook_runtime::HttpResponse;
use edgehook_sim::Simulation;
use edgehook_sim::simnet::{Received, Reply};
use serde_json::{Value, json};
use std::time::Duration;

const URL: &str = "https://hooks.example.com/x";
const NOTICES: &str = "https://ops.acme.example/notices";
const PATH: &str = "/v1/notification-endpoint";

/// A partner request with a JSON body.
fn send_json(
    sim: &mut Simulation,
    method: &str,
    path: &str,
    key: &str,
    body: &Value,
) -> HttpResponse {
    let auth = bearer(key);
    sim.request(
        method,
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
    .expect("request runs")
}

/// Registers `url` as `key`'s client's notification endpoint; its signing secret.
fn register(sim: &mut Simulation, key: &str, url: &str) -> String {
    let resp = send_json(sim, "PUT", PATH, key, &json!({ "url": url }));
    assert_eq!(resp.status, 201, "{}", String::from_utf8_lossy(&resp.body));
    resp.json()["data"]["signingSecret"]
        .as_str()
        .expect("the secret, once")
        .to_owned()
}

fn notice(r: &Received) -> Value {
    serde_json::from_slice(&r.body).expect("a notice is JSON")
}

fn signed_with(secret: &str, r: &Received) -> bool {
    edgehook_testkit::signature::verifies(
        secret,
        r.header("x-service-timestamp"),
        r.header("x-service-signature"),
        &r.body,
    )
}

#[test]
fn the_endpoint_is_registered_changed_read_and_removed_its_secret_shown_once() {
    let mut sim = sim(71);
    let key = issue_key(&mut sim, "acme");
    let other = issue_key(&mut sim, "globex");
    call_fails(&mut sim, "GET", PATH, &key, 404, "not_found");
    let secret = register(&mut sim, &key, NOTICES);
    assert!(secret.starts_with("whsec_"));
    let read = call(&mut sim, "GET", PATH, &key);
    assert_eq!(read.status, 200);
    let data = &read.json()["data"];
    assert_eq!(data["url"], NOTICES);
    assert_eq!(
        data["eventTypes"],
        json!([
            "subscription.disabled",
            "subscription.enabled",
            "secret.rotation_ending"
        ])
    );
    assert!(data.get("signingSecret").is_none(), "shown once only");
    call_fails(&mut sim, "GET", PATH, &other, 404, "not_found");

    let moved = send_json(&mut sim, "PUT", PATH, &key, &json!({"url": URL}));
    assert_eq!(moved.status, 200, "a change keeps the endpoint");
    assert!(moved.json()["data"].get("signingSecret").is_none());
    assert_eq!(call(&mut sim, "GET", PATH, &key).json()["data"]["url"], URL);
    for bad in [
        json!({"url": "http://ops.acme.example/n"}),
        json!({"url": 5}),
        json!({}),
    ] {
        let resp = send_json(&mut sim, "PUT", PATH, &key, &bad);
        assert_error(&resp, 422, "validation_failed");
    }
    let typo = send_json(
        &mut sim,
        "PUT",
        PATH,
        &key,
        &json!({"url": URL, "uri": URL}),
    );
    assert_error(&typo, 422, "validation_failed");

    assert_eq!(call(&mut sim, "DELETE", PATH, &key).status, 204);
    call_fails(&mut sim, "DELETE", PATH, &key, 404, "not_found");
    call_fails(&mut sim, "GET", PATH, &key, 404, "not_found");
    let again = register(&mut sim, &key, NOTICES);
    assert_ne!(again, secret, "a new endpoint has a new secret");
}

#[test]
fn a_disable_and_an_enable_reach_the_owner_signed_with_its_own_secret() {
    let mut sim = sim(72);
    sim.net().endpoint(NOTICES, [Reply::Status(200)]);
    sim.net()
        .endpoint(URL, [Reply::Status(410), Reply::Status(200)]);
    let key = issue_key(&mut sim, "acme");
    let secret = register(&mut sim, &key, NOTICES);
    let id = create_id(&mut sim, &key, URL, &["load.created"]);
    // Another client with an endpoint of its own, whose subscription stays healthy.
    let globex = issue_key(&mut sim, "globex");
    let theirs = "https://ops.globex.example/notices";
    register(&mut sim, &globex, theirs);
    assert_eq!(
        ingest(&mut sim, "load.created", br#"{"id":"L"}"#, &[]).status,
        202
    );
    sim.advance(Duration::from_secs(5)).expect("advance");
    let got = sim.net().received_by(NOTICES);
    assert_eq!(got.len(), 1, "the 410's disable");
    let first = notice(&got[0]);
    assert_eq!(
        (
            &first["type"],
            &first["subscriptionId"],
            &first["reason"],
            &first["status"]
        ),
        (
            &json!("subscription.disabled"),
            &json!(id),
            &json!("gone"),
            &json!("disabled")
        )
    );
    assert!(first["at"].as_u64().is_some_and(|at| at > 0));
    assert_eq!(
        got[0].header("x-service-event"),
        Some("subscription.disabled")
    );
    assert!(
        signed_with(&secret, &got[0]),
        "signed with the endpoint's secret"
    );
    assert!(!String::from_utf8_lossy(&got[0].body).contains("whsec_"));

    assert_eq!(
        call(&mut sim, "POST", &format!("/v1/webhooks/{id}/enable"), &key).status,
        200
    );
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(2)).expect("advance");
    let got = sim.net().received_by(NOTICES);
    assert_eq!(got.len(), 2);
    let enabled = notice(&got[1]);
    assert_eq!(
        (&enabled["type"], &enabled["reason"], &enabled["status"]),
        (
            &json!("subscription.enabled"),
            &json!("owner"),
            &json!("active")
        )
    );
    // The operator's disable names its reason; the owner's delete sends nothing.
    let path = format!("/internal/v1/subscriptions/{id}/disable");
    assert_eq!(
        operator_post_json(&mut sim, &path, &json!({"reason": "abuse_review"})).status,
        200
    );
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(2)).expect("advance");
    assert_eq!(
        notice(&sim.net().received_by(NOTICES)[2])["reason"],
        "abuse_review"
    );
    let gone = create_id(&mut sim, &key, URL, &["load.created"]);
    assert_eq!(
        call(&mut sim, "DELETE", &format!("/v1/webhooks/{gone}"), &key).status,
        200
    );
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(600)).expect("advance");
    assert_eq!(
        sim.net().received_by(NOTICES).len(),
        3,
        "a delete sends none"
    );
    assert!(
        sim.net().received_by(theirs).is_empty(),
        "only the owner hears"
    );
}

#[test]
fn a_failing_notification_endpoint_is_retried_and_disables_nothing() {
    let mut sim = sim_with(73, &[("disable_after_failures", "1")]);
    sim.net().endpoint(
        NOTICES,
        [Reply::Status(500), Reply::Status(503), Reply::Status(410)],
    );
    sim.net().endpoint(URL, [Reply::Status(410)]);
    let key = issue_key(&mut sim, "acme");
    register(&mut sim, &key, NOTICES);
    create_id(&mut sim, &key, URL, &["load.created"]);
    ingest(&mut sim, "load.created", br#"{"id":"L"}"#, &[]);
    sim.advance(Duration::from_secs(3600)).expect("advance");
    let got = sim.net().received_by(NOTICES);
    assert_eq!(got.len(), 3, "attempts on the schedule, as any delivery");
    let ids: Vec<String> = got.iter().map(delivery_id_of).collect();
    assert!(ids.iter().all(|d| *d == ids[0]), "one delivery: {ids:?}");
    assert_eq!(
        call(&mut sim, "GET", PATH, &key).status,
        200,
        "still registered"
    );
    assert_eq!(
        sim.guest_log().matches("\"subscription.disabled\"").count(),
        1,
        "its failures disabled nothing"
    );
    // Removed, its pending notices are cancelled, not sent.
    assert_eq!(call(&mut sim, "DELETE", PATH, &key).status, 204);
}

#[test]
fn a_rotation_ending_is_told_an_hour_before_and_only_for_the_rotation_in_force() {
    let mut sim = sim(74);
    sim.net().endpoint(NOTICES, [Reply::Status(200)]);
    let key = issue_key(&mut sim, "acme");
    let secret = register(&mut sim, &key, NOTICES);
    let id = create_id(&mut sim, &key, URL, &["load.created"]);
    let rotate = format!("/v1/webhooks/{id}/rotate-secret");
    let rotated = send_json(
        &mut sim,
        "POST",
        &rotate,
        &key,
        &json!({"overlapSeconds": 7200}),
    );
    assert_eq!(rotated.status, 200);
    let until = rotated.json()["data"]["previousSecretExpiresAt"]
        .as_u64()
        .expect("until");
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(3590)).expect("advance");
    assert!(
        sim.net().received_by(NOTICES).is_empty(),
        "not before the last hour"
    );
    sim.advance(Duration::from_secs(20)).expect("advance");
    let got = sim.net().received_by(NOTICES);
    assert_eq!(got.len(), 1);
    let ending = notice(&got[0]);
    assert_eq!(
        (
            &ending["type"],
            &ending["subscriptionId"],
            &ending["reason"]
        ),
        (
            &json!("secret.rotation_ending"),
            &json!(id),
            &json!("rotation_overlap_ending")
        )
    );
    assert_eq!(ending["previousSecretExpiresAt"], json!(until));
    assert!(signed_with(&secret, &got[0]));

    // A rotation replaced by another before its notice is due sends none; an overlap of
    // an hour or less is told at once.
    let first = send_json(
        &mut sim,
        "POST",
        &rotate,
        &key,
        &json!({"overlapSeconds": 86400}),
    );
    assert_eq!(first.status, 200);
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(60)).expect("advance");
    let second = send_json(
        &mut sim,
        "POST",
        &rotate,
        &key,
        &json!({"overlapSeconds": 600}),
    );
    assert_eq!(second.status, 200);
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(5)).expect("advance");
    assert_eq!(
        sim.net().received_by(NOTICES).len(),
        2,
        "the short one at once"
    );
    sim.advance(Duration::from_secs(2 * 86400))
        .expect("advance");
    assert_eq!(
        sim.net().received_by(NOTICES).len(),
        2,
        "the replaced one never"
    );
}
