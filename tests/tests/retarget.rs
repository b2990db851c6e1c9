//! A subscription's URL and event types changed in place (`PATCH /v1/webhooks/{id}`): the
//! same id, secret and history; the URL checked as at create; queued attempts go to the URL
//! in force when they are made; and a store fault at any step leaves the subscription
//! wholly old or wholly new, which a retry completes.

use crate::common::*;
use crate::partner_api::ops_of;
use edgehook_runtime::HttpResponse;
use edgehook_runtime::store::Faults;
use edgehook_sim::simnet::Reply;
use serde_json::{Value, json};
use std::time::Duration;

const OLD: &str = "https://old.example.com/hook";
const NEW: &str = "https://new.example.com/hook";

fn patch(sim: &mut edgehook_sim::Simulation, key: &str, id: &str, body: &Value) -> HttpResponse {
    let auth = bearer(key);
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    sim.request(
        "PATCH",
        &format!("/v1/webhooks/{id}"),
        &headers,
        body.to_string().as_bytes(),
    )
    .expect("request runs")
}

/// Publishes one event of each type and lets every attempt run: (URL, event type) of each
/// request received meanwhile.
fn deliveries_of_each_type(sim: &mut edgehook_sim::Simulation, n: u32) -> Vec<(String, String)> {
    let before = sim.net().received().len();
    for t in ["load.created", "load.updated"] {
        let load = format!(r#"{{"id":"L-{n}-{t}"}}"#);
        assert_eq!(ingest(sim, t, load.as_bytes(), &[]).status, 202);
    }
    sim.advance(Duration::from_secs(2)).expect("advance");
    sim.net().received()[before..]
        .iter()
        .map(|r| {
            let t = r.header("x-service-event").unwrap_or("").to_owned();
            (r.url.clone(), t)
        })
        .collect()
}

/// A subscription to `load.created` at [`OLD`], its endpoints answering 200.
fn subscribed(seed: u64) -> (edgehook_sim::Simulation, String, String, String) {
    let mut sim = sim(seed);
    sim.net().endpoint(OLD, []);
    sim.net().endpoint(NEW, []);
    let key = issue_key(&mut sim, "acme");
    let created = create(&mut sim, &key, OLD, &["load.created"]);
    let id = created["id"].as_str().expect("id").to_owned();
    let secret = created["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    (sim, key, id, secret)
}

#[test]
fn a_patch_changes_url_and_event_types_keeping_id_secret_and_history() {
    let (mut sim, key, id, secret) = subscribed(561);
    let before = deliveries_of_each_type(&mut sim, 1);
    assert_eq!(before, vec![(OLD.to_owned(), "load.created".to_owned())]);
    let body = json!({"url": NEW, "eventTypes": ["load.updated", "load.status_changed"]});
    let resp = patch(&mut sim, &key, &id, &body);
    assert_eq!(resp.status, 200, "{}", resp.json());
    let data = resp.json()["data"].clone();
    assert_eq!(data["id"], id.as_str());
    assert_eq!(data["url"], NEW);
    assert_eq!(
        data["eventTypes"],
        json!(["load.updated", "load.status_changed"])
    );
    assert!(
        data.get("signingSecret").is_none(),
        "the secret is kept, not shown"
    );
    let after = deliveries_of_each_type(&mut sim, 2);
    assert_eq!(after, vec![(NEW.to_owned(), "load.updated".to_owned())]);
    // Signed with the secret it had.
    let r = sim.net().received_by(NEW).pop().expect("one");
    let ts = r.header("x-service-timestamp").map(str::to_owned);
    let sig = r.header("x-service-signature").map(str::to_owned);
    assert!(edgehook_testkit::signature::verifies(
        &secret,
        ts.as_deref(),
        sig.as_deref(),
        &r.body
    ));
    // The read and the list say the same; the history holds both deliveries.
    let read = call(&mut sim, "GET", &format!("/v1/webhooks/{id}"), &key).json()["data"].clone();
    assert_eq!(
        (read["url"].clone(), read["eventTypes"].clone()),
        (data["url"].clone(), data["eventTypes"].clone())
    );
    let listed = call(&mut sim, "GET", "/v1/webhooks", &key).json()["data"][0].clone();
    assert_eq!(listed["url"], NEW);
    assert_eq!(listed["eventTypes"], data["eventTypes"]);
    let history = call(
        &mut sim,
        "GET",
        &format!("/v1/webhooks/{id}/deliveries"),
        &key,
    );
    assert_eq!(history.json()["data"].as_array().map(Vec::len), Some(2));
    // Only the URL: the types stay.
    let only_url = patch(&mut sim, &key, &id, &json!({"url": OLD}));
    assert_eq!(only_url.json()["data"]["eventTypes"], data["eventTypes"]);
    assert_eq!(
        deliveries_of_each_type(&mut sim, 3),
        vec![(OLD.to_owned(), "load.updated".to_owned())]
    );
}

#[test]
fn a_new_url_passes_the_checks_of_create() {
    let (mut sim, key, id, _) = subscribed(562);
    let long = format!("https://hooks.example.com/{}", "a".repeat(2100));
    for url in [
        json!("http://hooks.example.com/x"),
        json!("https://127.0.0.1/x"),
        json!("https://10.1.2.3/x"),
        json!("https://localhost/x"),
        json!(long),
        json!(42),
    ] {
        let created = create_url(&mut sim, &key, url.clone());
        let patched = patch(&mut sim, &key, &id, &json!({"url": url}));
        assert_eq!(patched.status, 422, "{url}");
        let code = |r: &HttpResponse| r.json()["error"]["details"][0]["code"].clone();
        assert_eq!(code(&patched), code(&created), "{url}: the code of create");
    }
    for types in [json!([]), json!(["load.deleted"]), json!("load.created")] {
        let patched = patch(&mut sim, &key, &id, &json!({"eventTypes": types}));
        assert_eq!(patched.status, 422, "{types}");
    }
    let read = call(&mut sim, "GET", &format!("/v1/webhooks/{id}"), &key).json()["data"].clone();
    assert_eq!(read["url"], OLD, "nothing changed");
    assert_eq!(read["eventTypes"], json!(["load.created"]));
}

#[test]
fn a_queued_retry_goes_to_the_url_in_force_when_it_is_made() {
    let (mut sim, key, id, _) = subscribed(563);
    sim.net().endpoint(OLD, [Reply::Status(500)]);
    assert_eq!(
        ingest(&mut sim, "load.created", br#"{"id":"L-9"}"#, &[]).status,
        202
    );
    sim.advance(Duration::from_secs(1)).expect("advance");
    let first = sim.net().received_by(OLD);
    assert_eq!(first.len(), 1, "attempt 1 failed at the old URL");
    assert_eq!(patch(&mut sim, &key, &id, &json!({"url": NEW})).status, 200);
    sim.advance(Duration::from_secs(600)).expect("advance");
    assert_eq!(
        sim.net().received_by(OLD).len(),
        1,
        "no attempt went to the old URL again"
    );
    let retried = sim.net().received_by(NEW);
    assert_eq!(retried.len(), 1, "attempt 2 went to the new URL");
    let delivery =
        |r: &edgehook_sim::simnet::Received| r.header("x-service-delivery-id").map(str::to_owned);
    assert_eq!(
        delivery(&retried[0]),
        delivery(&first[0]),
        "the same delivery"
    );
}

/// What a fault left: the read, and where one event of each type went.
fn observed(
    sim: &mut edgehook_sim::Simulation,
    key: &str,
    id: &str,
    n: u64,
) -> (Value, Vec<(String, String)>) {
    let read = call(sim, "GET", &format!("/v1/webhooks/{id}"), key).json()["data"].clone();
    let went = deliveries_of_each_type(sim, n as u32);
    (read, went)
}

#[test]
fn a_fault_at_any_write_of_a_patch_leaves_the_subscription_wholly_old_or_wholly_new() {
    let body = json!({"url": NEW, "eventTypes": ["load.updated"]});
    let (mut probe, key, id, _) = subscribed(564);
    let steps = ops_of(&mut probe, |s| {
        assert_eq!(patch(s, &key, &id, &body).status, 200)
    });
    assert!(steps >= 6, "a patch takes {steps} store operations");
    let old = vec![(OLD.to_owned(), "load.created".to_owned())];
    let new = vec![(NEW.to_owned(), "load.updated".to_owned())];
    let (mut refused, mut committed) = (0, 0);
    for n in 1..=steps {
        let (mut sim, key, id, _) = subscribed(564);
        sim.store().set_faults(Faults {
            fail_nth: Some(sim.store().ops() + n),
            ..Faults::default()
        });
        let resp = patch(&mut sim, &key, &id, &body);
        sim.store().set_faults(Faults::default());
        let (read, went) = observed(&mut sim, &key, &id, n);
        let listed = call(&mut sim, "GET", "/v1/webhooks", &key).json()["data"][0].clone();
        assert_eq!(
            (&listed["url"], &listed["eventTypes"]),
            (&read["url"], &read["eventTypes"]),
            "fault at op {n}: list and read agree"
        );
        match resp.status {
            503 => {
                refused += 1;
                assert_error(&resp, 503, "store_unavailable");
                assert_eq!(went, old, "fault at op {n}: refused, so wholly old");
                assert_eq!(read["url"], OLD, "fault at op {n}");
            }
            200 => {
                committed += 1;
                assert_eq!(went, new, "fault at op {n}: answered, so wholly new");
                assert_eq!(read["url"], NEW, "fault at op {n}");
            }
            other => panic!("fault at op {n}: status {other}"),
        }
        let again = patch(&mut sim, &key, &id, &body);
        assert_eq!(again.status, 200, "fault at op {n}: the retry");
        assert_eq!(
            deliveries_of_each_type(&mut sim, 100 + n as u32),
            new,
            "fault at op {n}: the retry completes it"
        );
        let listed = call(&mut sim, "GET", "/v1/webhooks", &key).json()["data"][0].clone();
        assert_eq!(listed["url"], NEW, "fault at op {n}");
    }
    assert!(refused >= 3, "faults before the commit point answer 503");
    assert!(
        committed >= 1,
        "faults after the commit point leave it changed"
    );
}
