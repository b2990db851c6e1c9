//! The component on key-value stores that behave like other hosts' (docs/embedding.md,
//! "Key-value contract"): the whole partner and operator story passes on a store that keeps
//! counters as 8-byte integers (Spin's SQLite store), one whose batch read fails (Spin
//! 4.0.2's Redis store), one whose every compare-and-swap reports failure, applied or not
//! (Spin 4.0.2's Redis store), and all three at once. Before the component read counters
//! only through `increment(key, 0)`, fell back from a failed batch read and read a reported
//! swap failure back, these stories failed as they did on real Spin: list and publish 503
//! on the first store, list 503 on the second, an idempotent create 409 on the third.

use crate::common;

use common::*;
use edgehook_runtime::store::Quirks;
use edgehook_sim::simnet::Reply;
use serde_json::json;
use std::time::Duration;

const URL: &str = "https://hooks.example.com/quirks";

/// Runs the story on a simulation whose store has `quirks`; `name` labels failures.
fn story(name: &str, quirks: Quirks) {
    let mut sim = sim(71);
    sim.store().set_quirks(quirks);
    let key = issue_key(&mut sim, "acme");

    // Create with an Idempotency-Key, then the same request again: one subscription.
    let body = json!({"url": URL, "eventTypes": ["load.created"]});
    let first = create_with(&mut sim, &key, &body, &[("idempotency-key", "k-1")]);
    assert_eq!(first.status, 201, "{name}: create: {:?}", first.json());
    let again = create_with(&mut sim, &key, &body, &[("idempotency-key", "k-1")]);
    assert_eq!(
        again.status,
        201,
        "{name}: idempotent retry: {:?}",
        again.json()
    );
    assert_eq!(again.header("idempotent-replayed"), Some("true"), "{name}");
    assert_eq!(
        again.json()["data"]["id"],
        first.json()["data"]["id"],
        "{name}"
    );
    let other = json!({"url": URL, "eventTypes": ["load.updated"]});
    let conflict = create_with(&mut sim, &key, &other, &[("idempotency-key", "k-1")]);
    assert_error(&conflict, 409, "idempotency_conflict");
    let sub = first.json()["data"]["id"].as_str().expect("id").to_owned();

    // Two more, then list in pages of two.
    for n in 0..2 {
        create(&mut sim, &key, &format!("{URL}/{n}"), &["load.updated"]);
    }
    let page = call(&mut sim, "GET", "/v1/webhooks?limit=2", &key);
    assert_eq!(page.status, 200, "{name}: list: {:?}", page.json());
    assert_eq!(
        page.json()["data"].as_array().map(Vec::len),
        Some(2),
        "{name}"
    );
    let cursor = page.json()["nextCursor"]
        .as_str()
        .expect("cursor")
        .to_owned();
    let rest = call(
        &mut sim,
        "GET",
        &format!("/v1/webhooks?limit=2&cursor={cursor}"),
        &key,
    );
    assert_eq!(rest.status, 200, "{name}: second page: {:?}", rest.json());
    assert_eq!(
        rest.json()["data"].as_array().map(Vec::len),
        Some(1),
        "{name}"
    );
    assert_eq!(list_ids(&mut sim, &key).len(), 3, "{name}");

    // Publish: the first attempt fails, the retry a minute later succeeds.
    sim.net()
        .endpoint(URL, [Reply::Status(503), Reply::Status(200)]);
    let published = ingest(&mut sim, "load.created", br#"{"id":"L-1"}"#, &[]);
    assert_eq!(
        published.status,
        202,
        "{name}: publish: {:?}",
        published.json()
    );
    assert_eq!(published.json()["data"]["deliveries"], 1, "{name}");
    sim.advance(Duration::from_secs(1)).expect("tick");
    assert_eq!(sim.net().received_by(URL).len(), 1, "{name}: first attempt");
    sim.advance(Duration::from_secs(70)).expect("ticks");
    let received = sim.net().received_by(URL);
    assert_eq!(received.len(), 2, "{name}: the retry was sent");
    let dlv = delivery_id_of(&received[0]);
    assert_eq!(
        received[1].header("x-service-delivery-id"),
        Some(dlv.as_str())
    );

    // The operator sees it succeeded and replays it: the same delivery id once more.
    let shown = call(
        &mut sim,
        "GET",
        &format!("/internal/v1/deliveries/{dlv}"),
        ADMIN,
    );
    assert_eq!(shown.status, 200, "{name}: {:?}", shown.json());
    assert_eq!(shown.json()["data"]["status"], "succeeded", "{name}");
    sim.net().endpoint(URL, [Reply::Status(200)]);
    let replay = call(
        &mut sim,
        "POST",
        &format!("/internal/v1/deliveries/{dlv}/replay"),
        ADMIN,
    );
    assert_eq!(replay.status, 202, "{name}: replay: {:?}", replay.json());
    sim.advance(Duration::from_secs(1)).expect("tick");
    let received = sim.net().received_by(URL);
    assert_eq!(received.len(), 3, "{name}: the replay was sent");
    assert_eq!(
        received[2].header("x-service-delivery-id"),
        Some(dlv.as_str())
    );

    // Delete: gone from the list, no more deliveries.
    let deleted = call(&mut sim, "DELETE", &format!("/v1/webhooks/{sub}"), &key);
    assert_eq!(deleted.status, 200, "{name}: delete: {:?}", deleted.json());
    assert!(!list_ids(&mut sim, &key).contains(&sub), "{name}");
    let published = ingest(&mut sim, "load.created", br#"{"id":"L-2"}"#, &[]);
    assert_eq!(published.json()["data"]["deliveries"], 0, "{name}");
}

#[test]
fn counters_kept_as_integer_bytes_spin_sqlite() {
    story(
        "8-byte counters",
        Quirks {
            counters_le_bytes: true,
            ..Quirks::default()
        },
    );
}

#[test]
fn a_failing_batch_read_spin_redis() {
    story(
        "failing get-many",
        Quirks {
            batch_read_fails: true,
            ..Quirks::default()
        },
    );
}

#[test]
fn every_swap_reported_failed_spin_redis() {
    story(
        "swap always reports failure",
        Quirks {
            swap_reports_failure: true,
            ..Quirks::default()
        },
    );
}

#[test]
fn all_three_at_once() {
    story(
        "all quirks",
        Quirks {
            counters_le_bytes: true,
            batch_read_fails: true,
            swap_reports_failure: true,
        },
    );
}

/// On a host with no timer (Spin without a CronJob), requests drive the retries: after
/// answering one, an instance runs the due work if none did in the last
/// `opportunistic_tick_s` seconds, and the lease in the store keeps it to one per period.
#[test]
fn requests_drive_retries_on_a_host_without_a_timer() {
    let mut sim = sim_with(72, &[("opportunistic_tick_s", "10")]);
    let key = issue_key(&mut sim, "acme");
    create(&mut sim, &key, URL, &["load.created"]);
    sim.net().endpoint(
        URL,
        [Reply::Status(503), Reply::Status(503), Reply::Status(200)],
    );
    let published = ingest(&mut sim, "load.created", br#"{"id":"L-1"}"#, &[]);
    assert_eq!(published.status, 202);
    assert_eq!(sim.net().received_by(URL).len(), 1, "attempt 1 at publish");
    let ticks = sim.ticks();
    let health = |sim: &mut edgehook_sim::sim::Simulation| {
        let resp = sim
            .request("GET", "/healthz", &[], b"")
            .expect("request runs");
        assert_eq!(resp.status, 200);
    };

    // No timer: a minute and more passes, nothing is sent until a request comes.
    sim.advance_without_ticking(Duration::from_secs(70));
    assert_eq!(
        sim.net().received_by(URL).len(),
        1,
        "nothing without a request"
    );
    health(&mut sim);
    assert_eq!(
        sim.net().received_by(URL).len(),
        2,
        "the retry after a request"
    );
    assert_eq!(sim.ticks(), ticks, "the host itself never ticked");

    // The third attempt is due five minutes later: requests before then send nothing, and
    // requests within one period of the last opportunistic tick do not tick at all.
    let lease = sim.store().snapshot()[keys::TICK_LEASE.as_str()].clone();
    health(&mut sim);
    assert_eq!(
        sim.store().snapshot()[keys::TICK_LEASE.as_str()],
        lease,
        "the lease held"
    );
    sim.advance_without_ticking(Duration::from_secs(330));
    health(&mut sim);
    assert_eq!(sim.net().received_by(URL).len(), 3, "the third attempt");
    let received = sim.net().received_by(URL);
    assert!(
        received
            .iter()
            .all(|r| r.header("x-service-delivery-id")
                == received[0].header("x-service-delivery-id"))
    );

    // With the setting at 0 (the default of hosts that tick themselves) requests never tick.
    let mut off = builder(73).build().expect("sim");
    let key = issue_key(&mut off, "acme");
    create(&mut off, &key, URL, &["load.created"]);
    off.net()
        .endpoint(URL, [Reply::Status(503), Reply::Status(200)]);
    ingest(&mut off, "load.created", br#"{"id":"L-1"}"#, &[]);
    off.advance_without_ticking(Duration::from_secs(70));
    health(&mut off);
    assert_eq!(
        off.net().received_by(URL).len(),
        1,
        "no opportunistic tick when off"
    );
    assert!(
        !off.store()
            .snapshot()
            .contains_key(keys::TICK_LEASE.as_str())
    );
}
