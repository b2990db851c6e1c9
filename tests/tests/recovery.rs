//! Recovery by itself (`auto_recover`), on virtual time: a subscription disabled for a
//! failure streak is probed with a signed `webhook.ping` 10 minutes, then 1, 6 and 24 hours
//! on; a 2xx enables it, replays what it missed since the disable, shows the probe in its
//! history and tells the partner (`subscription.enabled`, reason `recovered`). One disabled
//! by a person or by a 410, or with the setting off, is never probed; after the fourth
//! failed probe, nothing more.

use crate::common::*;
use edgehook_runtime::HttpResponse;
use edgehook_sim::Simulation;
use edgehook_sim::simnet::{Received, Reply};
use serde_json::{Value, json};
use std::time::Duration;

const URL: &str = "https://hooks.example.com/x";
const NOTICES: &str = "https://ops.acme.example/notices";
const MIN: u64 = 60;
const HOUR: u64 = 3600;

fn recovering(seed: u64) -> Simulation {
    sim_with(
        seed,
        &[("auto_recover", "true"), ("disable_after_failures", "1")],
    )
}

fn pings(sim: &Simulation) -> Vec<Received> {
    pings_to(sim, URL)
}

fn pings_to(sim: &Simulation, url: &str) -> Vec<Received> {
    sim.net()
        .received_by(url)
        .into_iter()
        .filter(|r| r.header("x-service-event") == Some("webhook.ping"))
        .collect()
}

fn loads(sim: &Simulation) -> Vec<Value> {
    sim.net()
        .received_by(URL)
        .into_iter()
        .filter(|r| r.header("x-service-event") == Some("load.created"))
        .map(|r| serde_json::from_slice(&r.body).expect("JSON"))
        .collect()
}

fn status(sim: &mut Simulation, id: &str, key: &str) -> String {
    let resp: HttpResponse = call(sim, "GET", &format!("/v1/webhooks/{id}"), key);
    resp.json()["data"]["status"]
        .as_str()
        .expect("status")
        .to_owned()
}

/// When subscription `id` was disabled (the operator's view).
fn disabled_at(sim: &mut Simulation, id: &str) -> u64 {
    let view = call(
        sim,
        "GET",
        &format!("/internal/v1/subscriptions/{id}"),
        ADMIN,
    );
    view.json()["data"]["disabledAt"]
        .as_u64()
        .expect("disabledAt")
}

/// Runs the simulation on to `at_ms`.
fn advance_to(sim: &mut Simulation, at_ms: u64) {
    let by = at_ms.saturating_sub(sim.now_ms());
    sim.advance(Duration::from_millis(by)).expect("advance");
}

/// `acme` with one subscription to [`URL`] answering `script`, its first load failing it
/// for good (three attempts, a streak of one): disabled when this returns. The key, the
/// subscription's id and its signing secret.
fn disabled_by_failures(sim: &mut Simulation, script: Vec<Reply>) -> (String, String, String) {
    sim.net().endpoint(URL, script);
    let key = issue_key(sim, "acme");
    let created = create(sim, &key, URL, &["load.created"]);
    let id = created["id"].as_str().expect("id").to_owned();
    let secret = created["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    ingest(sim, "load.created", br#"{"id":"L-1"}"#, &[]);
    sim.advance(Duration::from_secs(7 * MIN)).expect("advance");
    assert_eq!(status(sim, &id, &key), "disabled");
    (key, id, secret)
}

#[test]
fn a_probe_answered_2xx_enables_replays_records_and_tells() {
    let mut sim = recovering(81);
    sim.net().endpoint(NOTICES, [Reply::Status(200)]);
    let failing = vec![Reply::Status(500); 4];
    let script = failing.into_iter().chain([Reply::Status(200)]).collect();
    let (key, id, secret) = disabled_by_failures(&mut sim, script);
    let auth = bearer(&key);
    let put = sim
        .request(
            "PUT",
            "/v1/notification-endpoint",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            json!({ "url": NOTICES }).to_string().as_bytes(),
        )
        .expect("request runs");
    assert_eq!(put.status, 201);
    // Missed while disabled: recorded as skipped.
    ingest(&mut sim, "load.created", br#"{"id":"L-2"}"#, &[]);
    ingest(&mut sim, "load.created", br#"{"id":"L-3"}"#, &[]);
    sim.tick().expect("tick");
    let disabled_at = disabled_at(&mut sim, &id);
    advance_to(&mut sim, disabled_at + (10 * MIN - 30) * 1000);
    assert!(pings(&sim).is_empty(), "not before 10 minutes");
    sim.advance(Duration::from_secs(MIN)).expect("advance");
    let first = pings(&sim);
    assert_eq!(first.len(), 1, "probe 1, 10 minutes after the disable");
    assert!(edgehook_testkit::signature::verifies(
        &secret,
        first[0].header("x-service-timestamp"),
        first[0].header("x-service-signature"),
        &first[0].body,
    ));
    assert_eq!(status(&mut sim, &id, &key), "disabled", "it failed (500)");
    advance_to(&mut sim, first[0].at_ms + (HOUR - 30) * 1000);
    assert_eq!(pings(&sim).len(), 1, "probe 2 an hour after probe 1");
    sim.advance(Duration::from_secs(MIN)).expect("advance");
    assert_eq!(pings(&sim).len(), 2);
    assert_eq!(status(&mut sim, &id, &key), "active", "a 2xx enables it");
    sim.advance(Duration::from_secs(2 * MIN)).expect("advance");
    let ids: Vec<Value> = loads(&sim).iter().map(|b| b["id"].clone()).collect();
    assert_eq!(
        ids.iter()
            .filter(|i| **i == json!("L-2") || **i == json!("L-3"))
            .count(),
        2,
        "what it missed since the disable, replayed: {ids:?}"
    );
    assert_eq!(
        ids.iter().filter(|i| **i == json!("L-1")).count(),
        3,
        "the load that failed it was before the disable: not replayed ({ids:?})"
    );
    let history = call(
        &mut sim,
        "GET",
        &format!("/v1/webhooks/{id}/deliveries"),
        &key,
    );
    let history = history.json()["data"].clone();
    let ping = history
        .as_array()
        .expect("a list")
        .iter()
        .find(|d| d["eventType"] == "webhook.ping")
        .expect("the probe in the history");
    assert_eq!(ping["status"], "succeeded");
    assert_eq!(ping["id"], json!(delivery_id_of(&pings(&sim)[1])));
    let notices: Vec<Value> = sim
        .net()
        .received_by(NOTICES)
        .iter()
        .map(|r| serde_json::from_slice(&r.body).expect("JSON"))
        .collect();
    let enabled = notices
        .iter()
        .find(|n| n["type"] == "subscription.enabled")
        .expect("the partner is told");
    assert_eq!(
        (&enabled["subscriptionId"], &enabled["reason"]),
        (&json!(id), &json!("recovered"))
    );
    assert!(sim.guest_log().contains("\"subscription.probe\""));
    sim.advance(Duration::from_secs(2 * 24 * HOUR))
        .expect("advance");
    assert_eq!(pings(&sim).len(), 2, "no probe once enabled");
}

#[test]
fn after_four_failed_probes_it_stays_disabled() {
    let mut sim = recovering(82);
    let (key, id, _) = disabled_by_failures(&mut sim, vec![Reply::Status(503)]);
    let view = call(
        &mut sim,
        "GET",
        &format!("/internal/v1/subscriptions/{id}"),
        ADMIN,
    );
    let disabled_at = view.json()["data"]["disabledAt"]
        .as_u64()
        .expect("disabledAt");
    sim.advance(Duration::from_secs(3 * 24 * HOUR))
        .expect("advance");
    let times: Vec<u64> = pings(&sim).iter().map(|p| p.at_ms).collect();
    assert_eq!(times.len(), 4, "four probes, then it stops: {times:?}");
    let mut before = disabled_at;
    for (at, delay) in times.iter().zip([10 * MIN, HOUR, 6 * HOUR, 24 * HOUR]) {
        let waited = at - before;
        assert!(
            (delay * 1000..delay * 1000 + 1000).contains(&waited),
            "{waited} ms for a wait of {delay} s"
        );
        before = *at;
    }
    sim.advance(Duration::from_secs(7 * 24 * HOUR))
        .expect("advance");
    assert_eq!(pings(&sim).len(), 4, "none after the fourth");
    assert_eq!(status(&mut sim, &id, &key), "disabled");
    assert!(sim.guest_log().contains("\"subscription.recovery_ended\""));
}

#[test]
fn a_person_a_410_or_the_setting_off_means_no_probe() {
    // The setting off (the default).
    let mut off = sim_with(83, &[("disable_after_failures", "1")]);
    let (key, id, _) = disabled_by_failures(&mut off, vec![Reply::Status(500)]);
    off.advance(Duration::from_secs(3 * 24 * HOUR))
        .expect("advance");
    assert!(pings(&off).is_empty());
    assert_eq!(status(&mut off, &id, &key), "disabled");

    // A 410, and an operator's disable, with the setting on.
    let mut gone = recovering(84);
    gone.net()
        .endpoint(URL, [Reply::Status(410), Reply::Status(200)]);
    let key = issue_key(&mut gone, "acme");
    let id = create_id(&mut gone, &key, URL, &["load.created"]);
    let elsewhere = "https://hooks.example.com/y";
    gone.net().endpoint(elsewhere, [Reply::Status(200)]);
    let other = create_id(&mut gone, &key, elsewhere, &["load.created"]);
    ingest(&mut gone, "load.created", br#"{"id":"L-1"}"#, &[]);
    gone.advance(Duration::from_secs(MIN)).expect("advance");
    let disable = format!("/internal/v1/subscriptions/{other}/disable");
    let resp = operator_post_json(&mut gone, &disable, &json!({}));
    assert_eq!(resp.status, 200);
    gone.advance(Duration::from_secs(3 * 24 * HOUR))
        .expect("advance");
    assert!(pings(&gone).is_empty() && pings_to(&gone, elsewhere).is_empty());
    assert_eq!(status(&mut gone, &id, &key), "disabled");
    assert_eq!(status(&mut gone, &other, &key), "disabled");
}

#[test]
fn a_subscription_enabled_meanwhile_is_not_probed() {
    let mut sim = recovering(85);
    let (key, id, _) = disabled_by_failures(&mut sim, vec![Reply::Status(500)]);
    let enable = format!("/v1/webhooks/{id}/enable");
    assert_eq!(call(&mut sim, "POST", &enable, &key).status, 200);
    sim.advance(Duration::from_secs(2 * 24 * HOUR))
        .expect("advance");
    assert!(pings(&sim).is_empty(), "the probe found it enabled");
}

/// `recover_delays_ms` sets the back-off: two probes, 2 s after the disable and 5 s after the
/// first failed, then none.
#[test]
fn the_back_off_comes_from_recover_delays_ms() {
    let mut sim = sim_with(
        86,
        &[
            ("auto_recover", "true"),
            ("disable_after_failures", "1"),
            ("recover_delays_ms", "2000, 5000"),
        ],
    );
    let (key, id, _) = disabled_by_failures(&mut sim, vec![Reply::Status(503)]);
    let disabled_at = disabled_at(&mut sim, &id);
    sim.advance(Duration::from_secs(HOUR)).expect("advance");
    let times: Vec<u64> = pings(&sim).iter().map(|p| p.at_ms).collect();
    assert_eq!(times.len(), 2, "two delays, two probes: {times:?}");
    let waits = [times[0] - disabled_at, times[1] - times[0]];
    for (waited, delay) in waits.into_iter().zip([2000, 5000]) {
        assert!(
            (delay..delay + 1000).contains(&waited),
            "{waited} ms for {delay}"
        );
    }
    assert_eq!(status(&mut sim, &id, &key), "disabled");
}
