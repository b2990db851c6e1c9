//! FIFO ordering on the simulator: deliveries to a `fifo` subscription are
//! attempted one at a time in publish order; a failing head holds the later ones until it
//! is delivered or exhausts its attempts; the default stays unordered; switching back
//! releases what is held; a disabled or deleted subscription's held deliveries do not stay
//! stuck.

use crate::common::*;
use edgehook_sim::simnet::Reply;
use serde_json::json;
use std::time::Duration;

const URL: &str = "https://hooks.example.com/fifo";

/// The load ids the endpoint received, in order.
fn received_loads(sim: &edgehook_sim::Simulation) -> Vec<String> {
    sim.net()
        .received_by(URL)
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
            v["id"].as_str().expect("id").to_owned()
        })
        .collect()
}

/// A subscription to `URL` with `ordering`, the endpoint answering `script`, and three
/// events published a second apart.
fn three_events(
    seed: u64,
    ordering: &str,
    script: Vec<Reply>,
) -> (edgehook_sim::Simulation, String, String) {
    let mut sim = sim(seed);
    let key = issue_key(&mut sim, "acme");
    sim.net().endpoint(URL, script);
    let body = json!({"url": URL, "eventTypes": ["load.created"], "ordering": ordering});
    let created = create_with(&mut sim, &key, &body, &[]);
    assert_eq!(created.status, 201, "{}", created.json());
    assert_eq!(created.json()["data"]["ordering"], ordering);
    let id = created.json()["data"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    for n in 1..=3 {
        let load = format!("{{\"id\":\"L{n}\"}}");
        assert_eq!(
            ingest(&mut sim, "load.created", load.as_bytes(), &[]).status,
            202
        );
        sim.advance(Duration::from_secs(1)).expect("advance");
    }
    (sim, key, id)
}

#[test]
fn a_failing_head_holds_the_later_deliveries_until_it_is_delivered() {
    let script = vec![Reply::Status(500), Reply::Status(500), Reply::Status(200)];
    let (mut sim, _, _) = three_events(401, "fifo", script);
    assert_eq!(received_loads(&sim), ["L1"], "L2 and L3 wait behind L1");
    sim.advance(Duration::from_secs(30 * 60)).expect("advance");
    assert_eq!(received_loads(&sim), ["L1", "L1", "L1", "L2", "L3"]);
    // L2 went only after L1's success.
    let got = sim.net().received_by(URL);
    assert!(got[3].at_ms >= got[2].at_ms);
}

#[test]
fn a_head_that_exhausts_its_attempts_lets_the_next_one_go() {
    let script = vec![
        Reply::Status(500),
        Reply::Status(500),
        Reply::Status(500),
        Reply::Status(200),
    ];
    let (mut sim, key, id) = three_events(402, "fifo", script);
    sim.advance(Duration::from_secs(30 * 60)).expect("advance");
    assert_eq!(received_loads(&sim), ["L1", "L1", "L1", "L2", "L3"]);
    let page = call(
        &mut sim,
        "GET",
        &format!("/v1/webhooks/{id}/deliveries"),
        &key,
    )
    .json();
    let statuses: Vec<&str> = page["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|d| d["status"].as_str().expect("status"))
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == "failed").count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == "succeeded").count(),
        2,
        "{statuses:?}"
    );
}

#[test]
fn the_default_is_unordered_and_does_not_wait_for_a_failing_delivery() {
    let script = vec![Reply::Status(500), Reply::Status(200)];
    let (sim, _, _) = three_events(403, "unordered", script);
    assert_eq!(received_loads(&sim), ["L1", "L2", "L3"], "each at once");
}

#[test]
fn switching_to_unordered_releases_what_is_held_and_deletes_do_not_leave_anything_stuck() {
    let script = vec![Reply::Status(500), Reply::Status(500), Reply::Status(200)];
    let (mut sim, key, id) = three_events(404, "fifo", script.clone());
    assert_eq!(received_loads(&sim), ["L1"]);
    let auth = bearer(&key);
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let patch = sim
        .request(
            "PATCH",
            &format!("/v1/webhooks/{id}"),
            &headers,
            br#"{"ordering":"unordered"}"#,
        )
        .expect("patch");
    assert_eq!(patch.status, 200, "{}", patch.json());
    // The next tick (here L1's retry, a minute later) releases both, without waiting for L1.
    sim.advance(Duration::from_secs(70)).expect("advance");
    assert_eq!(
        received_loads(&sim),
        ["L1", "L1", "L2", "L3"],
        "L1 still retrying"
    );

    // Deleted while deliveries are held: they are cancelled, and the ticks let go of it.
    let (mut sim, key, id) = three_events(405, "fifo", script);
    assert_eq!(
        call(&mut sim, "DELETE", &format!("/v1/webhooks/{id}"), &key).status,
        200
    );
    sim.advance(Duration::from_secs(30 * 60)).expect("advance");
    assert_eq!(
        received_loads(&sim),
        ["L1"],
        "nothing sent after the delete"
    );
    let listed = sim
        .store()
        .snapshot()
        .get(keys::FIFO_DIRECTORY.as_str())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default();
    assert!(
        !listed.contains(&id),
        "still listed for the ticks: {listed:?}"
    );
}

#[test]
fn a_bad_ordering_is_refused_and_changes_nothing() {
    let mut sim = sim(406);
    let key = issue_key(&mut sim, "acme");
    let body = json!({"url": URL, "eventTypes": ["load.created"], "ordering": "lifo"});
    let resp = create_with(&mut sim, &key, &body, &[]);
    assert_error(&resp, 422, "validation_failed");
    assert!(
        resp.json()["error"]["details"]
            .to_string()
            .contains("ordering")
    );
    assert!(list_ids(&mut sim, &key).is_empty());
}
