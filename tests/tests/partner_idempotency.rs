//! Idempotent creates (replays, conflicts, concurrent creates with one key), where the
//! signing secret is stored, and the purge of expired idempotency records.

use crate::common::*;
use crate::partner_api::URL;
use edgehook_component::model::ids::{ClientId, SubscriptionId};
use edgehook_sim::sim::Simulation;
use serde_json::{Value, json};
use std::time::Duration;

#[test]
fn idempotent_create_replays_and_conflicts() {
    let mut sim = sim(9);
    let key = issue_key(&mut sim, "acme");
    let body = json!({"url": URL, "eventTypes": ["load.created"]});
    let first = create_with(&mut sim, &key, &body, &[("idempotency-key", "order-42")]);
    assert_eq!(first.status, 201);
    assert_eq!(first.header("idempotent-replayed"), None);
    let again = create_with(&mut sim, &key, &body, &[("idempotency-key", "order-42")]);
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        again.json()["data"],
        first.json()["data"],
        "same id, same secret"
    );
    assert_eq!(again.header("location"), first.header("location"));
    assert_ne!(again.json()["requestId"], first.json()["requestId"]);
    // Byte for byte the first answer but its request id (the first is written from a
    // struct, the replay from the stored value: the same keys in the same order).
    let (first_id, again_id) = (
        first.json()["requestId"].clone(),
        again.json()["requestId"].clone(),
    );
    let expected = String::from_utf8_lossy(&first.body).replace(
        first_id.as_str().expect("id"),
        again_id.as_str().expect("id"),
    );
    assert_eq!(String::from_utf8_lossy(&again.body), expected);
    assert_eq!(list_ids(&mut sim, &key).len(), 1);

    let other_body = json!({"url": URL, "eventTypes": ["load.updated"]});
    assert_error(
        &create_with(
            &mut sim,
            &key,
            &other_body,
            &[("idempotency-key", "order-42")],
        ),
        409,
        "idempotency_conflict",
    );

    // Another client with the same key is independent.
    let other = issue_key(&mut sim, "globex");
    let theirs = create_with(&mut sim, &other, &body, &[("idempotency-key", "order-42")]);
    assert_eq!(theirs.status, 201);
    assert_eq!(theirs.header("idempotent-replayed"), None);
    assert_ne!(theirs.json()["data"]["id"], first.json()["data"]["id"]);

    // Keys expire after 24 hours.
    sim.advance(Duration::from_secs(24 * 3600 + 1))
        .expect("advance");
    let later = create_with(&mut sim, &key, &body, &[("idempotency-key", "order-42")]);
    assert_eq!(later.status, 201);
    assert_eq!(later.header("idempotent-replayed"), None);
    assert_ne!(later.json()["data"]["id"], first.json()["data"]["id"]);

    let long = "k".repeat(256);
    assert_error(
        &create_with(&mut sim, &key, &body, &[("idempotency-key", &long)]),
        422,
        "validation_failed",
    );
}

/// The keys of the store whose values hold `needle` anywhere.
pub(crate) fn keys_holding(sim: &Simulation, needle: &[u8]) -> Vec<String> {
    sim.store()
        .snapshot()
        .into_iter()
        .filter(|(_, v)| v.windows(needle.len()).any(|w| w == needle))
        .map(|(k, _)| k)
        .collect()
}

#[test]
fn the_signing_secret_is_stored_in_its_subscription_record_only() {
    // An idempotent create keeps its response for replays: without the secret, which the
    // replay reads back from the subscription record (DESIGN: "Stored only in the
    // subscription record").
    let mut sim = sim(15);
    let key = issue_key(&mut sim, "acme");
    let body = json!({"url": URL, "eventTypes": ["load.created"]});
    let idem = [("idempotency-key", "order-7")];
    let first = create_with(&mut sim, &key, &body, &idem);
    assert_eq!(first.status, 201);
    let data = first.json()["data"].clone();
    let (id, secret) = (
        data["id"].as_str().expect("id"),
        data["signingSecret"].as_str().expect("secret"),
    );
    assert_eq!(
        keys_holding(&sim, secret.as_bytes()),
        [keys::subscription(&SubscriptionId::trusted(id.to_string()))]
    );
    let idem_records: Vec<String> = sim
        .store()
        .snapshot()
        .into_keys()
        // acme's idempotency records, whatever the key's hash.
        .filter(|k| k.starts_with(keys::idempotency(&ClientId::trusted("acme"), "").as_str()))
        .collect();
    assert_eq!(idem_records.len(), 1, "the replay record is there");

    // The replay answers the secret all the same; after the subscription is deleted it
    // answers 409 `subscription_deleted` and never the secret.
    let again = create_with(&mut sim, &key, &body, &idem);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json()["data"], data);
    assert_eq!(
        call(&mut sim, "DELETE", &format!("/v1/webhooks/{id}"), &key).status,
        200
    );
    // A delete erases it: the store holds it nowhere, so no replay can answer it.
    let after_delete = create_with(&mut sim, &key, &body, &idem);
    assert_error(&after_delete, 409, "subscription_deleted");
    assert!(!String::from_utf8_lossy(&after_delete.body).contains(secret));
    // The delete erased the secret: no key holds it any more.
    assert!(keys_holding(&sim, secret.as_bytes()).is_empty());
}

#[test]
fn idempotency_records_are_purged_once_expired() {
    const HOUR: u64 = 3600;
    const DAY: u64 = 24 * HOUR;
    let day0 = 20_000 * DAY; // a day start, in seconds
    let mut sim = builder(16)
        .start_ms((day0 + 23 * HOUR) * 1000)
        .build()
        .expect("sim");
    let key = issue_key(&mut sim, "acme");
    let body = json!({"url": URL, "eventTypes": ["load.created"]});
    let idem_keys = |sim: &Simulation| -> Vec<String> {
        sim.store()
            .snapshot()
            .into_keys()
            .filter(|k| k.starts_with(keys::IDEMPOTENCY_PREFIX))
            .collect()
    };
    let create_keyed = |sim: &mut Simulation, k: &str| {
        let resp = create_with(sim, &key, &body, &[("idempotency-key", k)]);
        assert_eq!(resp.status, 201);
        resp.header("idempotent-replayed").is_some()
    };
    assert!(!create_keyed(&mut sim, "a") && !create_keyed(&mut sim, "b"));
    assert_eq!(idem_keys(&sim).len(), 2);
    let until = |sim: &mut Simulation, at_s: u64| {
        let by = at_s * 1000 - sim.now_ms();
        sim.advance(Duration::from_millis(by)).expect("advance");
        sim.tick().expect("tick");
    };
    // Key "b" is used again, long after its 24 hours, on the day before the first day's
    // purge: its record is new, and outlives the purge of the day it was first listed on.
    until(&mut sim, day0 + 30 * DAY + 12 * HOUR);
    assert!(!create_keyed(&mut sim, "b"), "a new request");
    assert_eq!(
        idem_keys(&sim).len(),
        2,
        "nothing purged before its day is due"
    );
    // The first day is past the retention period (30 days by default).
    until(&mut sim, day0 + 31 * DAY + HOUR);
    assert_eq!(
        idem_keys(&sim).len(),
        1,
        "the expired record of \"a\" is gone, b's stays"
    );
    assert!(create_keyed(&mut sim, "b"), "b's record still answers");
    until(&mut sim, day0 + 61 * DAY + HOUR);
    assert_eq!(idem_keys(&sim), Vec::<String>::new());
}

#[test]
fn concurrent_creates_with_one_key_make_one_subscription() {
    let mut sim = sim(10);
    let key = issue_key(&mut sim, "acme");
    let body = json!({"url": URL, "eventTypes": ["load.created"]});
    let racers: Vec<_> = (0..4u64)
        .map(|i| {
            let mut twin = builder(100 + i).sharing(&sim).build().expect("twin");
            let (key, body) = (key.clone(), body.clone());
            std::thread::spawn(move || {
                (0..8)
                    .map(|k| {
                        let resp = create_with(
                            &mut twin,
                            &key,
                            &body,
                            &[("idempotency-key", &format!("race-{k}"))],
                        );
                        (k, resp.status, resp.json()["data"]["id"].clone())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let outcomes: Vec<(i32, u16, Value)> = racers
        .into_iter()
        .flat_map(|t| t.join().expect("thread"))
        .collect();
    for k in 0..8 {
        let ids: std::collections::BTreeSet<String> = outcomes
            .iter()
            .filter(|(key, status, _)| *key == k && *status == 201)
            .map(|(_, _, id)| id.to_string())
            .collect();
        assert_eq!(ids.len(), 1, "key race-{k} produced {ids:?}");
        for (_, status, _) in outcomes.iter().filter(|(key, _, _)| *key == k) {
            assert!(*status == 201 || *status == 409, "status {status}");
        }
    }
    assert_eq!(list_ids(&mut sim, &key).len(), 8);
}

/// A create replayed after its subscription changed answers the subscription as it is now
/// without a secret: never the rotated one (the first answer did not give it), never the
/// first one (it signs no more, or soon not). Replayed before any change, and after a
/// disable (no change of what the create made), it answers the secret as the first time.
#[test]
fn a_create_replayed_after_a_rotation_or_a_change_answers_no_secret() {
    let mut sim = sim(57);
    let key = issue_key(&mut sim, "acme");
    let body = json!({"url": URL, "eventTypes": ["load.created"]});
    let replay = |sim: &mut Simulation, idem: &str| {
        let r = create_with(sim, &key, &body, &[("idempotency-key", idem)]);
        assert_eq!(r.status, 201, "{}", r.json());
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
        r.json()["data"].clone()
    };
    let secret_of = |data: &Value| data["signingSecret"].as_str().map(str::to_owned);

    // A rotation, by the partner or by the operator.
    for (idem, rotate) in [("rotated-by-partner", false), ("rotated-by-operator", true)] {
        let first = create_with(&mut sim, &key, &body, &[("idempotency-key", idem)]);
        let data = first.json()["data"].clone();
        let id = data["id"].as_str().expect("id").to_owned();
        let created = secret_of(&data).expect("a secret");
        assert_eq!(replay(&mut sim, idem), data, "unchanged: the first answer");
        let rotated = if rotate {
            operator_post_json(
                &mut sim,
                &format!("/internal/v1/subscriptions/{id}/rotate-secret"),
                &json!({"overlapSeconds": 0}),
            )
        } else {
            call(
                &mut sim,
                "POST",
                &format!("/v1/webhooks/{id}/rotate-secret"),
                &key,
            )
        };
        assert_eq!(rotated.status, 200, "{}", rotated.json());
        let current = secret_of(&rotated.json()["data"]).expect("the new secret");
        let again = replay(&mut sim, idem);
        assert_eq!(again["id"], data["id"]);
        assert_eq!(again["status"], "active");
        assert_eq!(secret_of(&again), None, "{again}");
        let text = again.to_string();
        assert!(
            !text.contains(&current) && !text.contains(&created),
            "{text}"
        );
        let mut expected = data.clone();
        expected
            .as_object_mut()
            .expect("object")
            .remove("signingSecret");
        assert_eq!(again, expected, "the rest as it is");
    }

    // Other headers (a change of the delivery options).
    let first = create_with(&mut sim, &key, &body, &[("idempotency-key", "patched")]);
    let id = first.json()["data"]["id"].as_str().expect("id").to_owned();
    let patched = patch_json(&mut sim, &key, &id, &json!({"headers": {"X-Token": "t"}}));
    assert_eq!(patched.status, 200, "{}", patched.json());
    let again = replay(&mut sim, "patched");
    assert_eq!(secret_of(&again), None, "{again}");
    assert_eq!(again["headerNames"], json!(["X-Token"]));

    // A disable changes nothing the create made: the secret, and the status as it is now.
    let first = create_with(&mut sim, &key, &body, &[("idempotency-key", "disabled")]);
    let data = first.json()["data"].clone();
    let id = data["id"].as_str().expect("id").to_owned();
    let path = format!("/internal/v1/subscriptions/{id}/disable");
    assert_eq!(call(&mut sim, "POST", &path, ADMIN).status, 200);
    let again = replay(&mut sim, "disabled");
    assert_eq!(again["status"], "disabled");
    assert_eq!(secret_of(&again), secret_of(&data));
}

/// `PATCH /v1/webhooks/{id}` with a JSON body and API key `key`.
fn patch_json(
    sim: &mut Simulation,
    key: &str,
    id: &str,
    body: &Value,
) -> edgehook_runtime::HttpResponse {
    let auth = bearer(key);
    sim.request(
        "PATCH",
        &format!("/v1/webhooks/{id}"),
        &[
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
    .expect("request runs")
}
