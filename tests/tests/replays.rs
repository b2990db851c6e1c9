//! Replays by range: after an outage, the owner enables its subscription with
//! `replaySince` and every delivery that failed or was skipped since then is sent again
//! under its own id by a job on the timer, with progress; the operator replays across
//! subscriptions; jobs can be cancelled; a large replay is paced so fresh work is not held
//! up; bad input is a 422 that starts nothing; a partner replays one delivery of its own.

use crate::common::*;
use edgehook_sim::simnet::Reply;
use serde_json::{Value, json};
use std::time::Duration;

const URL: &str = "https://hooks.example.com/r";

fn post_json(
    sim: &mut edgehook_sim::sim::Simulation,
    path: &str,
    key: &str,
    body: &Value,
) -> edgehook_runtime::HttpResponse {
    let auth = bearer(key);
    sim.request(
        "POST",
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
    .expect("request runs")
}

fn deliveries(sim: &mut edgehook_sim::sim::Simulation, sub: &str) -> Vec<Value> {
    let path = format!("/internal/v1/subscriptions/{sub}/deliveries?limit=100");
    let resp = call(sim, "GET", &path, ADMIN);
    resp.json()["data"].as_array().expect("deliveries").clone()
}

#[test]
fn an_enable_with_replay_since_sends_what_failed_or_was_skipped_under_the_same_ids() {
    let mut sim = sim(71);
    let key = issue_key(&mut sim, "acme");
    sim.net()
        .endpoint(URL, [Reply::Status(410), Reply::Status(200)]);
    let created = create(&mut sim, &key, URL, &["load.created", "load.updated"]);
    let id = created["id"].as_str().expect("id").to_owned();
    let since = sim.now_ms();
    assert_eq!(
        ingest(&mut sim, "load.created", br#"{"id":"L-1"}"#, &[]).status,
        202
    );
    sim.advance(Duration::from_secs(5)).expect("advance");
    for n in 2..=6 {
        let load = format!(r#"{{"id":"L-{n}"}}"#);
        assert_eq!(
            ingest(&mut sim, "load.updated", load.as_bytes(), &[]).status,
            202
        );
    }
    assert_eq!(sim.net().received_by(URL).len(), 1, "the 410 alone");
    let expected: Vec<String> = deliveries(&mut sim, &id)
        .iter()
        .map(|d| d["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(expected.len(), 6);

    let enabled = post_json(
        &mut sim,
        &format!("/v1/webhooks/{id}/enable"),
        &key,
        &json!({"replaySince": since}),
    );
    assert_eq!(enabled.status, 200, "{}", enabled.json());
    let body = enabled.json();
    assert_eq!(body["data"]["status"], "active");
    let job = body["replay"]["id"].as_str().expect("a job").to_owned();
    assert_eq!(body["replay"]["state"], "selecting");
    assert_eq!(body["replay"]["statuses"], json!(["failed", "skipped"]));
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(10)).expect("advance");
    let received = sim.net().received_by(URL);
    let mut replayed: Vec<String> = received[1..].iter().map(delivery_id_of).collect();
    replayed.sort();
    let mut want = expected.clone();
    want.sort();
    assert_eq!(replayed, want, "each once, under its own id");
    let progress =
        call(&mut sim, "GET", &format!("/v1/replays/{job}"), &key).json()["data"].clone();
    assert_eq!(
        (
            &progress["state"],
            &progress["total"],
            &progress["done"],
            &progress["failed"]
        ),
        (&json!("done"), &json!(6), &json!(6), &json!(0))
    );
    let other = issue_key(&mut sim, "globex");
    call_fails(
        &mut sim,
        "GET",
        &format!("/v1/replays/{job}"),
        &other,
        404,
        "not_found",
    );
    call_fails(
        &mut sim,
        "POST",
        &format!("/v1/replays/{job}/cancel"),
        &other,
        404,
        "not_found",
    );
    let finished = call(&mut sim, "POST", &format!("/v1/replays/{job}/cancel"), &key);
    assert_eq!(
        finished.json()["data"]["state"],
        "done",
        "a finished job stays done"
    );

    // The operator, across subscriptions: what was delivered, of one event type only.
    let replay = post_json(
        &mut sim,
        "/internal/v1/replays",
        ADMIN,
        &json!({"subscriptionIds": [id], "since": since, "status": ["delivered"], "eventTypes": ["load.created"]}),
    );
    assert_eq!(replay.status, 202, "{}", replay.json());
    let job = replay.json()["data"]["id"]
        .as_str()
        .expect("job")
        .to_owned();
    assert_eq!(
        replay.header("location").map(str::to_owned),
        Some(format!("/internal/v1/replays/{job}"))
    );
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(10)).expect("advance");
    let received = sim.net().received_by(URL);
    assert_eq!(received.len(), 8, "L-1 once more");
    assert_eq!(received[7].body, br#"{"id":"L-1"}"#);
    let progress = call(
        &mut sim,
        "GET",
        &format!("/internal/v1/replays/{job}"),
        ADMIN,
    )
    .json();
    assert_eq!(progress["data"]["total"], 1);
}

#[test]
fn replay_requests_are_checked_and_a_bad_one_starts_nothing() {
    let mut sim = sim(72);
    let key = issue_key(&mut sim, "acme");
    let created = create(&mut sim, &key, URL, &["load.created"]);
    let id = created["id"].as_str().expect("id").to_owned();
    let path = format!("/v1/webhooks/{id}/replays");
    for (body, field) in [
        (json!({}), "since"),
        (json!({"since": "2h"}), "since"),
        (json!({"since": 5, "until": 5}), "until"),
        (json!({"since": 1, "status": ["bogus"]}), "status"),
        (json!({"since": 1, "status": []}), "status"),
        (
            json!({"since": 1, "eventTypes": ["load.deleted"]}),
            "eventTypes",
        ),
        (
            json!({"since": 1, "subscriptionIds": [id]}),
            "subscriptionIds",
        ),
    ] {
        let resp = post_json(&mut sim, &path, &key, &body);
        assert_eq!(resp.status, 422, "{body}: {}", resp.json());
        let details = &resp.json()["error"]["details"];
        assert!(
            details
                .as_array()
                .expect("details")
                .iter()
                .any(|d| d["field"] == field),
            "{body}: {details}"
        );
    }
    for body in [
        json!({"subscriptionIds": [], "since": 1}),
        json!({"subscriptionIds": ["sub_nope"], "since": 1}),
        json!({"subscriptionIds": [id], "clientId": "acme", "since": 1}),
        json!({"clientId": "bad client!", "since": 1}),
    ] {
        let resp = post_json(&mut sim, "/internal/v1/replays", ADMIN, &body);
        assert_eq!(resp.status, 422, "{body}: {}", resp.json());
    }
    let enable = post_json(
        &mut sim,
        &format!("/v1/webhooks/{id}/enable"),
        &key,
        &json!({"replaySince": "yesterday"}),
    );
    assert_eq!(enable.status, 422);
    let other = issue_key(&mut sim, "globex");
    let resp = post_json(&mut sim, &path, &other, &json!({"since": 1}));
    assert_eq!(resp.status, 404, "another client's subscription");
    let jobs = sim
        .store()
        .snapshot()
        .into_keys()
        .filter(|k| k.contains("rpl"))
        .count();
    assert_eq!(jobs, 0, "no job was written");
}

/// Pacing: a replay of 2,000 deliveries runs 200 a tick, and meanwhile another
/// subscription's fresh event is delivered at once and its retry on time.
#[test]
fn a_large_replay_is_paced_and_fresh_work_is_not_held_up() {
    const OTHER: &str = "https://other.example.com/r";
    let mut sim = sim(73);
    let key = issue_key(&mut sim, "acme");
    sim.net().endpoint(URL, [Reply::Status(200)]);
    sim.net()
        .endpoint(OTHER, [Reply::Status(500), Reply::Status(200)]);
    let a = create(&mut sim, &key, URL, &["load.created"]);
    let a = a["id"].as_str().expect("id").to_owned();
    create(&mut sim, &key, OTHER, &["load.updated"]);
    let path = format!("/internal/v1/subscriptions/{a}/disable");
    assert_eq!(call(&mut sim, "POST", &path, ADMIN).status, 200);
    let since = sim.now_ms();
    let n = 2_000;
    for i in 0..n {
        let load = format!(r#"{{"id":"L-{i}"}}"#);
        assert_eq!(
            ingest(&mut sim, "load.created", load.as_bytes(), &[]).status,
            202
        );
    }
    let enabled = post_json(
        &mut sim,
        &format!("/v1/webhooks/{a}/enable"),
        &key,
        &json!({"replaySince": since}),
    );
    assert_eq!(enabled.status, 200, "{}", enabled.json());
    let start = sim.now_ms();
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(2)).expect("advance");
    let published = sim.now_ms();
    assert_eq!(
        ingest(&mut sim, "load.updated", br#"{"id":"F"}"#, &[]).status,
        202
    );
    sim.advance(Duration::from_secs(120)).expect("advance");
    let replayed = sim.net().received_by(URL);
    assert_eq!(replayed.len(), n, "every skipped delivery, once");
    let last = replayed.iter().map(|r| r.at_ms).max().expect("some");
    assert!(
        last - start >= 9_000,
        "paced over 10 ticks at least: {} ms",
        last - start
    );
    let fresh = sim.net().received_by(OTHER);
    assert_eq!(fresh.len(), 2);
    assert!(fresh[0].at_ms - published <= 1_000, "attempt 1 at once");
    let retry_due_by = published + 66_000 + 2_000;
    assert!(
        (published + 60_000..=retry_due_by).contains(&fresh[1].at_ms),
        "the retry on time: {} ms after publish",
        fresh[1].at_ms - published
    );
}

/// The operator's replay across clients by time alone: no subscription named, every
/// subscription's skipped deliveries in the range are replayed (or one client's).
#[test]
fn the_operator_replays_every_clients_deliveries_in_a_range() {
    const OTHER: &str = "https://globex.example.com/r";
    let mut sim = sim(74);
    let acme = issue_key(&mut sim, "acme");
    let globex = issue_key(&mut sim, "globex");
    sim.net().endpoint(URL, [Reply::Status(200)]);
    sim.net().endpoint(OTHER, [Reply::Status(200)]);
    let a = create(&mut sim, &acme, URL, &["load.created"]);
    let a = a["id"].as_str().expect("id").to_owned();
    let g = create(&mut sim, &globex, OTHER, &["load.created"]);
    let g = g["id"].as_str().expect("id").to_owned();
    for sub in [&a, &g] {
        let path = format!("/internal/v1/subscriptions/{sub}/disable");
        assert_eq!(call(&mut sim, "POST", &path, ADMIN).status, 200);
    }
    let since = sim.now_ms();
    for n in 0..3 {
        let load = format!(r#"{{"id":"L-{n}"}}"#);
        assert_eq!(
            ingest(&mut sim, "load.created", load.as_bytes(), &[]).status,
            202
        );
    }
    for sub in [&a, &g] {
        let path = format!("/internal/v1/subscriptions/{sub}/enable");
        assert_eq!(call(&mut sim, "POST", &path, ADMIN).status, 200);
    }
    // globex's only first, then everyone's.
    let mine = post_json(
        &mut sim,
        "/internal/v1/replays",
        ADMIN,
        &json!({"since": since, "clientId": "globex", "status": ["skipped"]}),
    );
    assert_eq!(mine.status, 202, "{}", mine.json());
    assert_eq!(mine.json()["data"]["clientId"], "globex");
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(10)).expect("advance");
    assert_eq!(sim.net().received_by(OTHER).len(), 3);
    assert_eq!(sim.net().received_by(URL).len(), 0);
    let all = post_json(
        &mut sim,
        "/internal/v1/replays",
        ADMIN,
        &json!({"since": since, "status": ["skipped"]}),
    );
    assert_eq!(all.status, 202, "{}", all.json());
    let job = all.json()["data"]["id"].as_str().expect("job").to_owned();
    sim.tick().expect("tick");
    sim.advance(Duration::from_secs(10)).expect("advance");
    assert_eq!(sim.net().received_by(URL).len(), 3, "acme's three");
    assert_eq!(
        sim.net().received_by(OTHER).len(),
        3,
        "globex's were replayed already"
    );
    let progress = call(
        &mut sim,
        "GET",
        &format!("/internal/v1/replays/{job}"),
        ADMIN,
    )
    .json();
    assert_eq!(
        (&progress["data"]["state"], &progress["data"]["total"]),
        (&json!("done"), &json!(3))
    );
}

#[test]
fn a_partner_replays_one_delivery_of_its_own_under_the_same_id() {
    let mut sim = sim(72);
    let acme = issue_key(&mut sim, "acme");
    let globex = issue_key(&mut sim, "globex");
    sim.net()
        .endpoint(URL, [Reply::Status(200), Reply::Status(200)]);
    let sub = create(&mut sim, &acme, URL, &["load.created"])["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let other = create(
        &mut sim,
        &acme,
        "https://hooks.example.com/other",
        &["load.updated"],
    )["id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert_eq!(
        ingest(&mut sim, "load.created", br#"{"id":"L-1"}"#, &[]).status,
        202
    );
    assert_eq!(sim.net().received_by(URL).len(), 1);
    let dlv = deliveries(&mut sim, &sub)[0]["id"]
        .as_str()
        .expect("delivery")
        .to_owned();
    let path = format!("/v1/webhooks/{sub}/deliveries/{dlv}/replay");
    // Another client's subscription, a delivery under another subscription's path, an
    // unknown delivery: 404, and nothing is replayed.
    for (path, key) in [
        (path.clone(), &globex),
        (
            format!("/v1/webhooks/{other}/deliveries/{dlv}/replay"),
            &acme,
        ),
        (
            format!("/v1/webhooks/{sub}/deliveries/dlv_000000000000000000000000/replay"),
            &acme,
        ),
    ] {
        let resp = call(&mut sim, "POST", &path, key);
        assert_eq!(resp.status, 404, "{path}: {}", resp.json());
    }
    // A read-only key may look, not replay.
    let read = post_json(
        &mut sim,
        "/internal/v1/clients/acme/keys",
        ADMIN,
        &json!({"scope": "partner_read"}),
    );
    let read = read.json()["data"]["apiKey"]
        .as_str()
        .expect("key")
        .to_owned();
    assert_eq!(call(&mut sim, "POST", &path, &read).status, 403);
    assert_eq!(sim.net().received_by(URL).len(), 1, "nothing replayed yet");
    let resp = call(&mut sim, "POST", &path, &acme);
    assert_eq!(resp.status, 202, "{}", resp.json());
    assert_eq!(resp.json()["data"]["replays"], 1);
    // Sent again at once, under the same delivery id.
    let received = sim.net().received_by(URL);
    assert_eq!(received.len(), 2);
    let id_of = |r: &edgehook_sim::simnet::Received| {
        r.headers
            .iter()
            .find(|(n, _)| n == "x-service-delivery-id")
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    };
    assert_eq!(id_of(&received[1]).as_deref(), Some(dlv.as_str()));
    assert_eq!(id_of(&received[0]), id_of(&received[1]));
    let d = call(
        &mut sim,
        "GET",
        &format!("/internal/v1/deliveries/{dlv}"),
        ADMIN,
    );
    assert_eq!(d.json()["data"]["status"], "succeeded");
    // A disabled subscription's delivery is refused until it is enabled again.
    let disabled = call(
        &mut sim,
        "POST",
        &format!("/internal/v1/subscriptions/{sub}/disable"),
        ADMIN,
    );
    assert_eq!(disabled.status, 200);
    assert_eq!(call(&mut sim, "POST", &path, &acme).status, 409);
}
