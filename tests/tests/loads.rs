//! Where did a load go: an event by its id and the events of a load id, each with its
//! deliveries, for the operator (every delivery) and for a partner (its own only); the
//! load-id index is purged with retention.

use crate::common::*;
use edgehook_sim::simnet::Reply;
use serde_json::{Value, json};
use std::time::Duration;

const ACME: &str = "https://acme.example.com/hook";
const GLOBEX: &str = "https://globex.example.com/hook";

/// acme listens to both load types, globex to `load.created` only (its endpoint failing
/// once); L-123 is created then updated, L-999 created.
fn published() -> (edgehook_sim::Simulation, String, String, [String; 3]) {
    let mut sim = sim(566);
    sim.net().endpoint(ACME, []);
    sim.net()
        .endpoint(GLOBEX, [Reply::Status(500), Reply::Status(200)]);
    let acme = issue_key(&mut sim, "acme");
    let globex = issue_key(&mut sim, "globex");
    create(&mut sim, &acme, ACME, &["load.created", "load.updated"]);
    create(&mut sim, &globex, GLOBEX, &["load.created"]);
    let mut ids = Vec::new();
    for (t, load) in [
        ("load.created", r#"{"id":"L-123","status":"new"}"#),
        ("load.created", r#"{"id":"L-999"}"#),
        ("load.updated", r#"{"id":"L-123","status":"booked"}"#),
    ] {
        let resp = ingest(&mut sim, t, load.as_bytes(), &[]);
        assert_eq!(resp.status, 202);
        ids.push(
            resp.json()["data"]["eventId"]
                .as_str()
                .expect("eventId")
                .to_owned(),
        );
        sim.advance(Duration::from_secs(120)).expect("advance");
    }
    let ids: [String; 3] = ids.try_into().expect("three");
    (sim, acme, globex, ids)
}

fn data(sim: &mut edgehook_sim::Simulation, path: &str, key: &str) -> Value {
    let resp = call(sim, "GET", path, key);
    assert_eq!(resp.status, 200, "{path}: {}", resp.json());
    resp.json()["data"].clone()
}

/// One event of a lookup: its id, how many deliveries, and (status, attempts) of each.
type Summary = (String, usize, Vec<(String, usize)>);

/// The [`Summary`] of each event of a lookup.
fn summary(events: &Value) -> Vec<Summary> {
    events
        .as_array()
        .expect("a list")
        .iter()
        .map(|e| {
            let deliveries = e["deliveries"].as_array().expect("deliveries");
            let mut each: Vec<(String, usize)> = deliveries
                .iter()
                .map(|d| {
                    let status = d["status"].as_str().expect("status").to_owned();
                    (status, d["attempts"].as_array().expect("attempts").len())
                })
                .collect();
            each.sort();
            (
                e["id"].as_str().expect("id").to_owned(),
                deliveries.len(),
                each,
            )
        })
        .collect()
}

#[test]
fn the_operator_finds_every_event_of_a_load_id_with_each_delivery_and_its_attempts() {
    let (mut sim, _, _, [created, _, updated]) = published();
    let found = data(&mut sim, "/internal/v1/events?loadId=L-123", ADMIN);
    let ok = |n| ("succeeded".to_owned(), n);
    assert_eq!(
        summary(&found),
        vec![
            (updated.clone(), 1, vec![ok(1)]),
            (created.clone(), 2, vec![ok(1), ok(2)]),
        ],
        "newest first; globex's took two attempts"
    );
    assert_eq!(found[0]["loadId"], "L-123");
    assert_eq!(found[0]["eventType"], "load.updated");
    let one = data(&mut sim, &format!("/internal/v1/events/{created}"), ADMIN);
    assert_eq!(one["loadId"], "L-123");
    assert_eq!(one["deliveries"].as_array().map(Vec::len), Some(2));
    // Percent-encoded ids, and a load id never published.
    let none = data(&mut sim, "/internal/v1/events?loadId=L%2D999", ADMIN);
    assert_eq!(none.as_array().map(Vec::len), Some(1));
    let nothing = data(&mut sim, "/internal/v1/events?loadId=L-404", ADMIN);
    assert_eq!(nothing, json!([]));
    let missing = call(&mut sim, "GET", "/internal/v1/events", ADMIN);
    assert_error(&missing, 422, "validation_failed");
    call_fails(
        &mut sim,
        "GET",
        "/internal/v1/events/evt_nope",
        ADMIN,
        404,
        "not_found",
    );
}

#[test]
fn a_partner_sees_only_its_own_deliveries_and_no_event_that_made_none() {
    let (mut sim, acme, globex, [created, _, updated]) = published();
    let found = data(&mut sim, "/v1/events?loadId=L-123", &globex);
    assert_eq!(
        summary(&found),
        vec![(created.clone(), 1, vec![("succeeded".to_owned(), 2)])]
    );
    let acme_sees = data(&mut sim, "/v1/events?loadId=L-123", &acme);
    let ids: Vec<&str> = acme_sees
        .as_array()
        .expect("list")
        .iter()
        .map(|e| e["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, vec![updated.as_str(), created.as_str()]);
    for e in acme_sees.as_array().expect("list") {
        assert_eq!(
            e["deliveries"].as_array().map(Vec::len),
            Some(1),
            "its own only"
        );
    }
    call_fails(
        &mut sim,
        "GET",
        &format!("/v1/events/{updated}"),
        &globex,
        404,
        "not_found",
    );
    let one = data(&mut sim, &format!("/v1/events/{created}"), &globex);
    assert_eq!(one["deliveries"].as_array().map(Vec::len), Some(1));
}

#[test]
fn the_load_id_index_is_purged_with_the_events_it_names() {
    let (mut sim, _, _, _) = published();
    let index_keys = |sim: &edgehook_sim::Simulation| {
        sim.store()
            .snapshot()
            .into_keys()
            .filter(|k| k.starts_with(keys::LOAD_EVENTS_PREFIX))
            .count()
    };
    assert_eq!(index_keys(&sim), 2, "one key per load id and day");
    sim.advance(Duration::from_secs(31 * 86400))
        .expect("advance");
    for _ in 0..3 {
        sim.tick().expect("tick");
    }
    assert_eq!(index_keys(&sim), 0, "purged with the day's events");
    let nothing = data(&mut sim, "/internal/v1/events?loadId=L-123", ADMIN);
    assert_eq!(nothing, json!([]));
}
