//! Operator alerts: a disable (410, failure streak, operator) writes a
//! structured log line and, with `alert_url` set, delivers a signed `subscription.disabled`
//! to the operator, retried like any delivery and never disabling anything itself; an
//! enable raises `subscription.enabled`; a partner's delete raises nothing.

use crate::common::*;
use edgehook_sim::simnet::{Received, Reply};
use serde_json::{Value, json};
use std::time::Duration;

const URL: &str = "https://hooks.example.com/x";
const OPS: &str = "https://ops.example.com/alerts";
const OPS_SECRET: &str = "whsec_operator-alerts-0123456789";

fn body(r: &Received) -> Value {
    serde_json::from_slice(&r.body).expect("an alert is JSON")
}

fn verified(r: &Received) -> bool {
    edgehook_testkit::signature::verifies(
        OPS_SECRET,
        r.header("x-service-timestamp"),
        r.header("x-service-signature"),
        &r.body,
    )
}

#[test]
fn a_disable_and_an_enable_reach_the_operator_signed_and_logged() {
    let mut sim = sim_with(61, &[("alert_url", OPS), ("alert_secret", OPS_SECRET)]);
    sim.net().endpoint(OPS, [Reply::Status(200)]);
    sim.net()
        .endpoint(URL, [Reply::Status(410), Reply::Status(200)]);
    let key = issue_key(&mut sim, "acme");
    let created = create(&mut sim, &key, URL, &["load.created"]);
    let id = created["id"].as_str().expect("id").to_owned();
    assert_eq!(
        ingest(&mut sim, "load.created", br#"{"id":"L"}"#, &[]).status,
        202
    );
    sim.advance(Duration::from_secs(5)).expect("advance");
    let alerts = sim.net().received_by(OPS);
    assert_eq!(alerts.len(), 1, "the 410's disable, sent by the next tick");
    let alert = body(&alerts[0]);
    assert_eq!(
        (
            &alert["type"],
            &alert["subscriptionId"],
            &alert["clientId"],
            &alert["disabledReason"]
        ),
        (
            &json!("subscription.disabled"),
            &json!(id),
            &json!("acme"),
            &json!("gone")
        )
    );
    assert_eq!(
        alerts[0].header("x-service-event"),
        Some("subscription.disabled")
    );
    assert!(verified(&alerts[0]), "signed with alert_secret");
    assert!(alert.get("signingSecret").is_none());
    let log = sim.guest_log();
    let line = log
        .lines()
        .find(|l| l.contains("\"subscription.disabled\""))
        .expect("a log line");
    let line: Value = serde_json::from_str(line).expect("the line is JSON");
    assert_eq!(
        (&line["subscriptionId"], &line["disabledReason"]),
        (&json!(id), &json!("gone"))
    );

    let enabled = call(&mut sim, "POST", &format!("/v1/webhooks/{id}/enable"), &key);
    assert_eq!(enabled.status, 200);
    let again = call(&mut sim, "POST", &format!("/v1/webhooks/{id}/enable"), &key);
    assert_eq!(again.status, 200, "already active: no second alert");
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(2)).expect("advance");
    let alerts = sim.net().received_by(OPS);
    assert_eq!(alerts.len(), 2);
    let alert = body(&alerts[1]);
    assert_eq!(
        (&alert["type"], &alert["status"]),
        (&json!("subscription.enabled"), &json!("active"))
    );
    assert!(verified(&alerts[1]));

    // The operator's own disable is one more; the owner's delete is none.
    let path = format!("/internal/v1/subscriptions/{id}/disable");
    assert_eq!(call(&mut sim, "POST", &path, ADMIN).status, 200);
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(2)).expect("advance");
    assert_eq!(
        body(&sim.net().received_by(OPS)[2])["disabledReason"],
        "operator"
    );
    let other = create(&mut sim, &key, URL, &["load.created"]);
    let other = other["id"].as_str().expect("id").to_owned();
    assert_eq!(
        call(&mut sim, "DELETE", &format!("/v1/webhooks/{other}"), &key).status,
        200
    );
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(600)).expect("advance");
    assert_eq!(
        sim.net().received_by(OPS).len(),
        3,
        "a delete raises no alert"
    );
}

#[test]
fn a_failing_alert_endpoint_is_retried_and_disables_nothing() {
    let mut sim = sim_with(
        62,
        &[
            ("alert_url", OPS),
            ("alert_secret", OPS_SECRET),
            ("disable_after_failures", "1"),
        ],
    );
    sim.net().endpoint(
        OPS,
        [Reply::Status(500), Reply::Status(503), Reply::Status(410)],
    );
    sim.net().endpoint(URL, [Reply::Status(410)]);
    let key = issue_key(&mut sim, "acme");
    create(&mut sim, &key, URL, &["load.created"]);
    assert_eq!(
        ingest(&mut sim, "load.created", br#"{"id":"L"}"#, &[]).status,
        202
    );
    sim.advance(Duration::from_secs(3600)).expect("advance");
    let alerts = sim.net().received_by(OPS);
    assert_eq!(
        alerts.len(),
        3,
        "three attempts on the schedule, as any delivery"
    );
    let ids: Vec<String> = alerts.iter().map(delivery_id_of).collect();
    assert!(ids.iter().all(|d| *d == ids[0]), "one delivery id: {ids:?}");
    // Its failures raised no alert of their own, and its 410 disabled nothing.
    assert_eq!(
        sim.guest_log().matches("\"subscription.disabled\"").count(),
        1,
        "{}",
        sim.guest_log()
    );
}

#[test]
fn without_an_alert_url_a_disable_is_a_log_line_only() {
    let mut sim = sim(63);
    sim.net().endpoint(URL, [Reply::Status(410)]);
    let key = issue_key(&mut sim, "acme");
    create(&mut sim, &key, URL, &["load.created"]);
    assert_eq!(
        ingest(&mut sim, "load.created", br#"{"id":"L"}"#, &[]).status,
        202
    );
    sim.advance(Duration::from_secs(600)).expect("advance");
    assert_eq!(sim.net().received_by(URL).len(), 1);
    assert!(sim.guest_log().contains("\"subscription.disabled\""));
}
