//! The partner API through the real component: create, list, read, delete; auth; validation;
//! idempotency; tenant isolation; storage under injected faults.

use crate::common;

use common::*;
use edgehook_runtime::HttpResponse;
use edgehook_runtime::store::Faults;
use edgehook_sim::sim::Simulation;
use serde_json::{Value, json};
use std::time::Duration;

const URL: &str = "https://hooks.example.com/loads";

#[test]
fn create_returns_201_location_and_the_secret_once() {
    let mut sim = sim(1);
    let key = issue_key(&mut sim, "acme");
    let resp = create_url(&mut sim, &key, URL);
    assert_eq!(resp.status, 201);
    let body = resp.json();
    let data = &body["data"];
    let id = data["id"].as_str().expect("id");
    assert!(id.starts_with("sub_"));
    assert_eq!(
        resp.header("location"),
        Some(format!("/v1/webhooks/{id}").as_str())
    );
    assert_eq!(data["url"], URL);
    assert_eq!(data["eventTypes"], json!(["load.created"]));
    let secret = data["signingSecret"].as_str().expect("secret");
    assert!(
        secret.starts_with("whsec_") && secret.len() == 6 + 43,
        "{secret}"
    );
    assert_eq!(body["requestId"].as_str(), resp.header("x-request-id"));

    // Nowhere else: not in list, not in read.
    let list = call(&mut sim, "GET", "/v1/webhooks", &key);
    assert!(!String::from_utf8_lossy(&list.body).contains(secret));
    assert!(!String::from_utf8_lossy(&list.body).contains("signingSecret"));
    let one = call(&mut sim, "GET", &format!("/v1/webhooks/{id}"), &key);
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["data"]["id"], id);
    assert!(!String::from_utf8_lossy(&one.body).contains(secret));
}

#[test]
fn each_subscription_gets_its_own_secret() {
    let mut sim = sim(2);
    let key = issue_key(&mut sim, "acme");
    let a = create(&mut sim, &key, URL, &["load.created"]);
    let b = create(&mut sim, &key, URL, &["load.created"]);
    assert_ne!(a["signingSecret"], b["signingSecret"]);
    assert_ne!(a["id"], b["id"]);
}

#[test]
fn list_pages_in_creation_order() {
    let mut sim = sim(3);
    let key = issue_key(&mut sim, "acme");
    let created: Vec<String> = (0..5)
        .map(|i| {
            sim.advance(Duration::from_millis(1)).expect("advance");
            create_id(&mut sim, &key, &format!("{URL}/{i}"), &["load.updated"])
        })
        .collect();
    let page1 = call(&mut sim, "GET", "/v1/webhooks?limit=2", &key).json();
    assert_eq!(page1["hasMore"], true);
    let ids = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .expect("array")
            .iter()
            .map(|i| i["id"].as_str().expect("id").to_owned())
            .collect()
    };
    assert_eq!(ids(&page1), created[..2]);
    let cursor = page1["nextCursor"].as_str().expect("cursor").to_owned();
    let page2 = call(
        &mut sim,
        "GET",
        &format!("/v1/webhooks?limit=2&cursor={cursor}"),
        &key,
    )
    .json();
    assert_eq!(ids(&page2), created[2..4]);
    let cursor = page2["nextCursor"].as_str().expect("cursor").to_owned();
    let page3 = call(
        &mut sim,
        "GET",
        &format!("/v1/webhooks?limit=2&cursor={cursor}"),
        &key,
    )
    .json();
    assert_eq!(ids(&page3), created[4..]);
    assert_eq!(page3["hasMore"], false);
    assert_eq!(page3["nextCursor"], Value::Null);

    // A deleted entry does not break a cursor pointing past it.
    assert_eq!(
        call(
            &mut sim,
            "DELETE",
            &format!("/v1/webhooks/{}", created[1]),
            &key
        )
        .status,
        200
    );
    let page = call(
        &mut sim,
        "GET",
        &format!("/v1/webhooks?limit=2&cursor={cursor}"),
        &key,
    )
    .json();
    assert_eq!(ids(&page), created[4..]);
    assert_eq!(
        list_ids(&mut sim, &key),
        [&created[..1], &created[2..]].concat()
    );

    for bad in [
        "limit=0",
        "limit=101",
        "limit=abc",
        "cursor=bogus",
        "cursor=%zz",
    ] {
        let resp = call(&mut sim, "GET", &format!("/v1/webhooks?{bad}"), &key);
        assert_error(&resp, 422, "validation_failed");
    }
    let default = call(&mut sim, "GET", "/v1/webhooks", &key).json();
    assert_eq!(default["data"].as_array().map(Vec::len), Some(4));
}

#[test]
fn delete_disables_and_keeps_the_record() {
    let mut sim = sim(4);
    let key = issue_key(&mut sim, "acme");
    let id = create_id(&mut sim, &key, URL, &["load.created"]);
    let resp = call(&mut sim, "DELETE", &format!("/v1/webhooks/{id}"), &key);
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json()["data"], json!({"id": id, "status": "disabled"}));
    assert!(list_ids(&mut sim, &key).is_empty());
    gone_to_its_owner(&mut sim, &id, &key);
    let record =
        subscription_record(&sim.store().snapshot()[&format!("sub:{id}")]).expect("record kept");
    assert_eq!(record["status"], "disabled");
    assert_eq!(record["disabledReason"], "deleted");
    let fanout = fanout_in(&sim.store().snapshot(), "load.created");
    assert!(!fanout.contains(&id));
}

#[test]
fn bad_credentials_are_401_and_roles_do_not_mix() {
    let mut sim = sim(5);
    let key = issue_key(&mut sim, "acme");
    for auth in [
        None,
        Some("Basic abc"),
        Some("Bearer"),
        Some("Bearer ehk_unknown"),
        Some("Bearer nope"),
    ] {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("authorization", a)).into_iter().collect();
        let resp = sim
            .request("GET", "/v1/webhooks", &headers, b"")
            .expect("runs");
        assert_error(&resp, 401, "unauthorized");
    }
    // The admin token is not an API key (401 on the partner API), and an API key is not the
    // admin token: a partner key is a credential the operator API knows (it takes ingest
    // keys on event ingest) but may not use there, 403 (#24 point 7).
    call_fails(&mut sim, "GET", "/v1/webhooks", ADMIN, 401, "unauthorized");
    call_fails(
        &mut sim,
        "POST",
        "/internal/v1/clients/acme/keys",
        &key,
        403,
        "forbidden",
    );
    call_fails(
        &mut sim,
        "GET",
        "/internal/v1/settings",
        &key,
        403,
        "forbidden",
    );

    // Revocation takes effect at once; revoking twice or another client's key is a 404.
    let issued = call(&mut sim, "POST", "/internal/v1/clients/globex/keys", ADMIN).json();
    let (gkey, gid) = (
        issued["data"]["apiKey"].as_str().expect("key").to_owned(),
        issued["data"]["id"].as_str().expect("id").to_owned(),
    );
    assert_eq!(call(&mut sim, "GET", "/v1/webhooks", &gkey).status, 200);
    assert_error(
        &call(
            &mut sim,
            "DELETE",
            &format!("/internal/v1/clients/acme/keys/{gid}"),
            ADMIN,
        ),
        404,
        "not_found",
    );
    assert_eq!(
        call(
            &mut sim,
            "DELETE",
            &format!("/internal/v1/clients/globex/keys/{gid}"),
            ADMIN
        )
        .status,
        200
    );
    call_fails(&mut sim, "GET", "/v1/webhooks", &gkey, 401, "unauthorized");
    assert_error(
        &call(
            &mut sim,
            "DELETE",
            &format!("/internal/v1/clients/globex/keys/{gid}"),
            ADMIN,
        ),
        404,
        "not_found",
    );
    assert_eq!(
        call(&mut sim, "GET", "/v1/webhooks", &key).status,
        200,
        "other keys unaffected"
    );

    // Keys are stored only as hashes.
    let dump = format!("{:?}", sim.store().snapshot());
    assert!(!dump.contains(&key) && !dump.contains(&gkey));

    // No admin token configured: the operator API refuses everyone.
    let mut bare = edgehook_sim::sim::Simulation::new(5).expect("sim");
    let resp = bare
        .request(
            "POST",
            "/internal/v1/clients/acme/keys",
            &[("authorization", "Bearer ")],
            b"",
        )
        .expect("runs");
    assert_error(&resp, 401, "unauthorized");
}

fn details(resp: &edgehook_runtime::HttpResponse) -> Vec<(String, String)> {
    resp.json()["error"]["details"]
        .as_array()
        .expect("details")
        .iter()
        .map(|d| {
            (
                d["field"].as_str().unwrap_or("").to_owned(),
                d["code"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[test]
fn invalid_urls_are_422_naming_the_field() {
    let mut sim = sim(6);
    let key = issue_key(&mut sim, "acme");
    for url in [
        json!("http://hooks.example.com/"),
        json!("hooks.example.com"),
        json!("https://user:pw@hooks.example.com/"),
        json!("https://hooks.example.com/#x"),
        json!("https:///x"),
        json!(format!("https://example.com/{}", "a".repeat(2100))),
        json!("https://127.0.0.1/"),
        json!("https://2130706433/"),
        json!("https://0x7f.1/"),
        json!("https://0177.0.0.1/"),
        json!("https://[::1]/"),
        json!("https://[::ffff:10.0.0.1]/"),
        json!("https://169.254.169.254/"),
        json!("https://localhost/"),
        json!("https://db.localhost/"),
        json!(42),
    ] {
        let resp = create_url(&mut sim, &key, url.clone());
        assert_error(&resp, 422, "validation_failed");
        assert_eq!(details(&resp).len(), 1, "{url}: {}", resp.json());
        assert_eq!(details(&resp)[0].0, "url", "{url}");
    }
    assert!(list_ids(&mut sim, &key).is_empty(), "nothing was created");
}

#[test]
fn invalid_event_types_and_bodies() {
    let mut sim = sim(7);
    let key = issue_key(&mut sim, "acme");
    let cases: Vec<(Value, Vec<(&str, &str)>)> = vec![
        (json!({"url": URL}), vec![("eventTypes", "required")]),
        (
            json!({"url": URL, "eventTypes": []}),
            vec![("eventTypes", "empty")],
        ),
        (
            json!({"url": URL, "eventTypes": "load.created"}),
            vec![("eventTypes", "invalid_type")],
        ),
        (
            json!({"url": URL, "eventTypes": ["load.created", "load.deleted"]}),
            vec![("eventTypes[1]", "unknown_event_type")],
        ),
        (
            json!({"eventTypes": ["x"]}),
            vec![("url", "required"), ("eventTypes[0]", "unknown_event_type")],
        ),
        (
            json!({"url": URL, "eventTypes": ["load.created"], "secret": "mine"}),
            vec![("secret", "unknown_field")],
        ),
        (
            json!(["not", "an", "object"]),
            vec![("body", "invalid_type")],
        ),
    ];
    for (body, expected) in cases {
        let resp = create_with(&mut sim, &key, &body, &[]);
        assert_error(&resp, 422, "validation_failed");
        let got = details(&resp);
        let want: Vec<(String, String)> = expected
            .iter()
            .map(|(f, c)| ((*f).to_owned(), (*c).to_owned()))
            .collect();
        assert_eq!(got, want, "{body}");
    }
    let unknown = create_with(
        &mut sim,
        &key,
        &json!({"url": URL, "eventTypes": ["load.deleted"]}),
        &[],
    )
    .json();
    let message = unknown["error"]["details"][0]["message"]
        .as_str()
        .expect("message");
    assert!(
        message.contains("load.deleted")
            && message.contains("load.created, load.updated, load.status_changed")
    );

    let dup = create(
        &mut sim,
        &key,
        URL,
        &["load.updated", "load.created", "load.updated"],
    );
    assert_eq!(dup["eventTypes"], json!(["load.updated", "load.created"]));

    let auth = bearer(&key);
    let bad_json = sim
        .request(
            "POST",
            "/v1/webhooks",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            b"{\"url\":",
        )
        .expect("runs");
    assert_error(&bad_json, 400, "invalid_json");
    let text = sim
        .request(
            "POST",
            "/v1/webhooks",
            &[("authorization", &auth), ("content-type", "text/plain")],
            b"{}",
        )
        .expect("runs");
    assert_error(&text, 415, "unsupported_media_type");
    let with_charset = sim
        .request(
            "POST",
            "/v1/webhooks",
            &[
                ("authorization", &auth),
                ("content-type", "Application/JSON; charset=utf-8"),
            ],
            json!({"url": URL, "eventTypes": ["load.created"]})
                .to_string()
                .as_bytes(),
        )
        .expect("runs");
    assert_eq!(with_charset.status, 201, "{}", with_charset.json());
    let huge = format!(
        r#"{{"url":"{URL}","eventTypes":["load.created"],"pad":"{}"}}"#,
        "x".repeat(70 * 1024)
    );
    let resp = sim
        .request(
            "POST",
            "/v1/webhooks",
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            huge.as_bytes(),
        )
        .expect("runs");
    assert_error(&resp, 413, "payload_too_large");
    let resp = call(&mut sim, "PUT", "/v1/webhooks", &key);
    assert_error(&resp, 405, "method_not_allowed");
    assert_eq!(resp.header("allow"), Some("GET, POST"));
    let resp = call(
        &mut sim,
        "POST",
        "/v1/webhooks/sub_000000000000000000000000",
        &key,
    );
    assert_error(&resp, 405, "method_not_allowed");
    assert_eq!(resp.header("allow"), Some("GET, DELETE"));
    call_fails(&mut sim, "GET", "/v1/webhook", &key, 404, "not_found");
}

#[test]
fn a_422_lists_at_most_twenty_details_however_many_entries_are_bad() {
    let mut sim = sim(7);
    let key = issue_key(&mut sim, "acme");
    // Nearly 64 KiB of bad entries: one detail each would make a 5 MB answer.
    let bad: Vec<Value> = vec![json!(0); 32_000];
    let resp = create_with(&mut sim, &key, &json!({"url": URL, "eventTypes": bad}), &[]);
    assert_error(&resp, 422, "validation_failed");
    assert_eq!(details(&resp).len(), 20);
    assert_eq!(
        details(&resp)[0],
        ("eventTypes[0]".into(), "invalid_type".into())
    );
    assert!(
        resp.json()["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("the first 20 of 32000")),
        "{}",
        resp.json()
    );
    assert!(resp.body.len() < 8 * 1024, "{} bytes", resp.body.len());
}

#[test]
fn the_per_client_cap_is_enforced_and_deleting_frees_a_slot() {
    let mut sim = sim_with(8, &[("subscription_limit", "3")]);
    let key = issue_key(&mut sim, "acme");
    let ids: Vec<String> = (0..3)
        .map(|_| create_id(&mut sim, &key, URL, &["load.created"]))
        .collect();
    let resp = create_url(&mut sim, &key, URL);
    assert_error(&resp, 422, "subscription_limit_reached");
    let other = issue_key(&mut sim, "globex");
    create(&mut sim, &other, URL, &["load.created"]);
    assert_eq!(
        call(
            &mut sim,
            "DELETE",
            &format!("/v1/webhooks/{}", ids[0]),
            &key
        )
        .status,
        200
    );
    create(&mut sim, &key, URL, &["load.created"]);
    assert_eq!(list_ids(&mut sim, &key).len(), 3);
}

#[test]
fn a_create_refused_at_the_cap_writes_nothing() {
    let mut sim = sim_with(8, &[("subscription_limit", "1")]);
    let key = issue_key(&mut sim, "acme");
    create(&mut sim, &key, URL, &["load.created", "load.updated"]);
    let before = sim.store().snapshot();
    for _ in 0..50 {
        let resp = create_with(
            &mut sim,
            &key,
            &json!({"url": URL, "eventTypes": ["load.created", "load.updated"]}),
            &[],
        );
        assert_error(&resp, 422, "subscription_limit_reached");
    }
    // Every publish reads the fan-out lists: refusals must not lengthen them (nor anything
    // else but the rate limiter's count of requests).
    let after = sim.store().snapshot();
    let changed: Vec<&String> = after
        .keys()
        .chain(before.keys())
        .filter(|k| before.get(*k) != after.get(*k) && !k.starts_with("rate:"))
        .collect();
    assert!(changed.is_empty(), "refused creates wrote {changed:?}");
}

#[test]
fn a_live_count_left_high_is_recounted_when_the_cap_seems_reached() {
    use edgehook_runtime::store::KvBackend;
    let mut sim = sim_with(8, &[("subscription_limit", "3")]);
    let key = issue_key(&mut sim, "acme");
    create(&mut sim, &key, URL, &["load.created"]);
    create(&mut sim, &key, URL, &["load.created"]);
    // As if two creates had failed after counting themselves.
    sim.store().set("client:acme:live", b"4").expect("set");
    create(&mut sim, &key, URL, &["load.created"]);
    let live = sim.store().snapshot()["client:acme:live"].clone();
    assert!(
        live.starts_with(b"3 "),
        "the recount corrected the counter (count, then the writer's nonce): {:?}",
        String::from_utf8_lossy(&live)
    );
    let resp = create_url(&mut sim, &key, URL);
    assert_error(&resp, 422, "subscription_limit_reached");
    assert_eq!(list_ids(&mut sim, &key).len(), 3);
    assert_eq!(
        fanout(&sim, "load.created").len(),
        3,
        "a refused create leaves no index entry"
    );
}

#[test]
fn create_and_delete_cost_does_not_grow_with_the_clients_subscriptions() {
    // Without the rate limit: its first request in a minute also deletes the last minute's
    // counter, an operation the index costs compared here have nothing to do with.
    let mut sim = sim_with(
        8,
        &[
            ("subscription_limit", "10000"),
            ("rate_limit_per_minute", "0"),
        ],
    );
    let key = used_key(&mut sim, "acme");
    let cost = |sim: &mut edgehook_sim::sim::Simulation| {
        let before = (sim.store().ops(), sim.store().bytes_written());
        let id = create_id(sim, &key, URL, &["load.created"]);
        let resp = call(sim, "DELETE", &format!("/v1/webhooks/{id}"), &key);
        assert_eq!(resp.status, 200);
        (
            sim.store().ops() - before.0,
            sim.store().bytes_written() - before.1,
        )
    };
    let (ops_small, bytes_small) = cost(&mut sim);
    for _ in 0..600 {
        create(&mut sim, &key, URL, &["load.created"]);
    }
    let (ops_big, bytes_big) = cost(&mut sim);
    assert_eq!(ops_small, ops_big, "the same store operations");
    // Each index is paged (32 entries a page): create and delete rewrite one page of the
    // client index and one of the fan-out index, never a whole index (which, for 600
    // subscriptions, is ~120 KB for the client index).
    // The client index's entries carry their list item (~200 bytes), the fan-out index's
    // only an id (~60 bytes); create and delete write the client page 4 times (append, make
    // it live, mark it leaving, remove) and the fan-out page twice.
    assert!(
        bytes_big < bytes_small + 4 * 32 * 200 + 2 * 32 * 60,
        "bytes written by create + delete: {bytes_small} with 1 subscription, {bytes_big} with 600"
    );
}

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
fn keys_holding(sim: &Simulation, needle: &[u8]) -> Vec<String> {
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
    assert_eq!(keys_holding(&sim, secret.as_bytes()), [format!("sub:{id}")]);
    let idem_records: Vec<String> = sim
        .store()
        .snapshot()
        .into_keys()
        .filter(|k| k.starts_with("idem:acme:"))
        .collect();
    assert_eq!(idem_records.len(), 1, "the replay record is there");

    // The replay answers the secret all the same; after the subscription is deleted it
    // answers 409 `subscription_deleted` and never the secret (#24 point 11).
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
            .filter(|k| k.starts_with("idem:"))
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

#[test]
fn tenants_cannot_see_or_touch_each_other() {
    let mut sim = sim(11);
    let a = issue_key(&mut sim, "client-a");
    let b = issue_key(&mut sim, "client-b");
    let a_ids: Vec<String> = (0..3)
        .map(|i| create_id(&mut sim, &a, &format!("{URL}/{i}"), &["load.created"]))
        .collect();
    let b_own = create_id(&mut sim, &b, URL, &["load.updated"]);
    let before = sim.store().snapshot();
    assert_eq!(list_ids(&mut sim, &b), vec![b_own.clone()]);
    for id in &a_ids {
        call_fails(
            &mut sim,
            "GET",
            &format!("/v1/webhooks/{id}"),
            &b,
            404,
            "not_found",
        );
        call_fails(
            &mut sim,
            "DELETE",
            &format!("/v1/webhooks/{id}"),
            &b,
            404,
            "not_found",
        );
    }
    // B's failed attempts changed nothing of A's (B's 404s are reads only).
    let after = sim.store().snapshot();
    for id in &a_ids {
        assert_eq!(
            before.get(&format!("sub:{id}")),
            after.get(&format!("sub:{id}"))
        );
    }
    assert_eq!(list_ids(&mut sim, &a), a_ids);
    // An unknown id looks exactly like another client's id.
    let unknown = call(
        &mut sim,
        "GET",
        "/v1/webhooks/sub_000000000000000000000000",
        &b,
    )
    .json();
    let foreign = call(&mut sim, "GET", &format!("/v1/webhooks/{}", a_ids[0]), &b).json();
    assert_eq!(unknown["error"]["message"], foreign["error"]["message"]);
}

/// A page of the list costs the API key's lookup and one read of the client's index (its
/// counter through `increment(key, 0)`, then the pages the limit may need in one batch),
/// wherever the page falls: all of a short list, a first page, a page from a cursor, and a
/// last page across an index page boundary (the index holds 32 entries a page). No second
/// read to learn there is no more.
#[test]
fn a_list_page_is_one_read_of_the_clients_index() {
    let mut sim = sim_with(9, &[("rate_limit_per_minute", "0")]);
    let key = issue_key(&mut sim, "acme");
    for _ in 0..40 {
        create(&mut sim, &key, URL, &["load.created"]);
    }
    let list = |sim: &mut Simulation, query: &str| {
        let mut page = Value::Null;
        let ops = ops_of(sim, |s| {
            page = call(s, "GET", &format!("/v1/webhooks?{query}"), &key).json();
        });
        let items = page["data"].as_array().map_or(0, Vec::len);
        (ops, items, page["nextCursor"].as_str().map(str::to_owned))
    };
    assert_eq!(list(&mut sim, "limit=50"), (3, 40, None));
    let (ops, items, first) = list(&mut sim, "limit=10");
    assert_eq!((ops, items), (3, 10));
    let first = first.expect("a first page of 10 has a next cursor");
    let (ops, items, second) = list(&mut sim, &format!("limit=10&cursor={first}"));
    assert_eq!((ops, items), (3, 10));
    let second = second.expect("a second page of 10 has a next cursor");
    assert_eq!(
        list(&mut sim, &format!("limit=25&cursor={second}")),
        (3, 20, None),
        "the last 20, across the index's first page boundary"
    );
}

/// An API key for `client`, used once: a key's first use in an hour also writes its
/// `lastUsedAt` (#24 point 7, best effort), a write the operation counts of these tests are
/// not about.
fn used_key(sim: &mut Simulation, client: &str) -> String {
    let key = issue_key(sim, client);
    assert_eq!(call(sim, "GET", "/v1/webhooks", &key).status, 200);
    key
}

/// Store operations one successful call of `f` performs.
fn ops_of(
    sim: &mut edgehook_sim::sim::Simulation,
    f: impl FnOnce(&mut edgehook_sim::sim::Simulation),
) -> u64 {
    let before = sim.store().ops();
    f(sim);
    sim.store().ops() - before
}

fn fanout(sim: &edgehook_sim::sim::Simulation, event_type: &str) -> Vec<String> {
    fanout_in(&sim.store().snapshot(), event_type)
}

fn active_subscriptions(sim: &edgehook_sim::sim::Simulation) -> Vec<String> {
    subscription_records(&sim.store().snapshot())
        .into_iter()
        .filter(|r| r["status"] == "active")
        .map(|r| r["id"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// Store operations a create makes after its commit point: making its client-index entry
/// trusted by list (a compare-and-swap of one page), best effort.
const CREATE_OPS_AFTER_COMMIT: u64 = 2;

/// For a create whose store operation `n` of `steps` failed: `true` if it answered 201,
/// which only a fault after the commit point may do, and then the subscription must be whole
/// (listed, and in the fan-out index of its types).
fn after_commit(sim: &mut Simulation, key: &str, resp: &HttpResponse, n: u64, steps: u64) -> bool {
    if resp.status != 201 {
        return false;
    }
    assert!(
        n > steps - CREATE_OPS_AFTER_COMMIT,
        "fault at op {n} of {steps}: answered 201 before the commit point"
    );
    let data = resp.json()["data"].clone();
    let id = data["id"].as_str().expect("id").to_owned();
    assert_eq!(list_ids(sim, key), vec![id.clone()], "fault at op {n}");
    for t in data["eventTypes"].as_array().expect("types") {
        assert!(
            fanout(sim, t.as_str().expect("type")).contains(&id),
            "fault at op {n}"
        );
    }
    true
}

#[test]
fn a_fault_at_any_step_of_create_leaves_nothing_half_made() {
    let body = json!({"url": URL, "eventTypes": ["load.created", "load.updated"]});
    let mut probe = sim(12);
    let key = used_key(&mut probe, "acme");
    let steps = ops_of(&mut probe, |s| {
        assert_eq!(create_with(s, &key, &body, &[]).status, 201)
    });
    assert!(steps >= 8, "create takes {steps} store operations");
    let mut pending_seen = 0;
    for n in 1..=steps {
        let mut sim = sim(12);
        let key = used_key(&mut sim, "acme");
        let faults = Faults {
            fail_nth: Some(sim.store().ops() + n),
            ..Faults::default()
        };
        sim.store().set_faults(faults);
        let resp = create_with(&mut sim, &key, &body, &[]);
        sim.store().set_faults(Faults::default());
        if after_commit(&mut sim, &key, &resp, n, steps) {
            continue;
        }
        assert_error(&resp, 503, "store_unavailable");
        assert!(
            list_ids(&mut sim, &key).is_empty(),
            "fault at op {n}: a half-made subscription is listed"
        );
        assert!(
            active_subscriptions(&sim).is_empty(),
            "fault at op {n}: an active record exists"
        );
        // A record left `pending` (the create stopped before its commit point) is shown as
        // such to the operator, and to the partner not at all.
        for record in subscription_records(&sim.store().snapshot()) {
            let id = record["id"].as_str().expect("id").to_owned();
            assert_eq!(record["status"], "pending", "fault at op {n}");
            pending_seen += 1;
            let view = call(
                &mut sim,
                "GET",
                &format!("/internal/v1/subscriptions/{id}"),
                ADMIN,
            );
            assert_eq!(view.json()["data"]["status"], "pending", "fault at op {n}");
            call_fails(
                &mut sim,
                "GET",
                &format!("/v1/webhooks/{id}"),
                &key,
                404,
                "not_found",
            );
        }
        for t in ["load.created", "load.updated"] {
            for id in fanout(&sim, t) {
                let rec = sim.store().snapshot().get(&format!("sub:{id}")).cloned();
                let status = rec
                    .map(|r| subscription_record(&r).expect("a readable record")["status"].clone());
                assert_ne!(status, Some(json!("active")), "fault at op {n}");
            }
        }
        // And the client can simply retry.
        let again = create_with(&mut sim, &key, &body, &[]);
        assert_eq!(again.status, 201, "fault at op {n}: retry");
        let id = again.json()["data"]["id"].as_str().expect("id").to_owned();
        assert_eq!(list_ids(&mut sim, &key), vec![id.clone()]);
        assert!(
            fanout(&sim, "load.created").contains(&id)
                && fanout(&sim, "load.updated").contains(&id)
        );
    }
    assert!(
        pending_seen > 0,
        "some fault stops a create between its pending record and its commit point"
    );
}

#[test]
fn a_fault_at_any_step_of_an_idempotent_create_is_retry_safe() {
    let body = json!({"url": URL, "eventTypes": ["load.created"]});
    let idem = [("idempotency-key", "k-1")];
    let mut probe = sim(13);
    let key = used_key(&mut probe, "acme");
    let steps = ops_of(&mut probe, |s| {
        assert_eq!(create_with(s, &key, &body, &idem).status, 201)
    });
    for n in 1..=steps {
        let mut sim = sim(13);
        let key = used_key(&mut sim, "acme");
        sim.store().set_faults(Faults {
            fail_nth: Some(sim.store().ops() + n),
            ..Faults::default()
        });
        let resp = create_with(&mut sim, &key, &body, &idem);
        sim.store().set_faults(Faults::default());
        if after_commit(&mut sim, &key, &resp, n, steps) {
            continue;
        }
        assert_error(&resp, 503, "store_unavailable");
        // A retry with the same key either finishes the first attempt or starts afresh;
        // if the claim was left behind it blocks only until it goes stale.
        let mut retry = create_with(&mut sim, &key, &body, &idem);
        if retry.status == 409 {
            sim.advance(Duration::from_secs(61)).expect("advance");
            retry = create_with(&mut sim, &key, &body, &idem);
        }
        assert_eq!(retry.status, 201, "fault at op {n}: {}", retry.json());
        assert_eq!(
            list_ids(&mut sim, &key).len(),
            1,
            "fault at op {n}: exactly one subscription"
        );
    }
}

#[test]
fn a_fault_at_any_step_of_delete_is_all_or_nothing() {
    let mut probe = sim(14);
    let key = issue_key(&mut probe, "acme");
    let id = create_id(&mut probe, &key, URL, &["load.created"]);
    let path = format!("/v1/webhooks/{id}");
    let steps = ops_of(&mut probe, |s| {
        assert_eq!(call(s, "DELETE", &path, &key).status, 200)
    });
    let mut answered_503 = 0;
    for n in 1..=steps {
        let mut sim = sim(14);
        let key = issue_key(&mut sim, "acme");
        let id = create_id(&mut sim, &key, URL, &["load.created"]);
        let path = format!("/v1/webhooks/{id}");
        sim.store().set_faults(Faults {
            fail_nth: Some(sim.store().ops() + n),
            ..Faults::default()
        });
        let resp = call(&mut sim, "DELETE", &path, &key);
        sim.store().set_faults(Faults::default());
        match resp.status {
            503 => {
                answered_503 += 1;
                assert_error(&resp, 503, "store_unavailable");
                assert_eq!(
                    list_ids(&mut sim, &key),
                    vec![id.clone()],
                    "fault at op {n}: still there"
                );
                assert!(fanout(&sim, "load.created").contains(&id));
                assert_eq!(
                    call(&mut sim, "DELETE", &path, &key).status,
                    200,
                    "retry works"
                );
            }
            200 => {
                // The fault hit index clean-up after the commit: the delete stands.
                assert!(list_ids(&mut sim, &key).is_empty(), "fault at op {n}");
                assert!(active_subscriptions(&sim).is_empty());
            }
            other => panic!("fault at op {n}: status {other}"),
        }
        assert!(list_ids(&mut sim, &key).is_empty());
    }
    assert!(
        answered_503 >= 3,
        "faults before the commit point answer 503"
    );
}

#[test]
fn a_client_over_its_rate_limit_gets_429_with_retry_after_until_the_minute_turns() {
    let mut sim = sim_with(31, &[("rate_limit_per_minute", "3")]);
    let key = issue_key(&mut sim, "acme");
    let other = issue_key(&mut sim, "globex");
    sim.advance(Duration::from_secs(20)).expect("advance");
    for _ in 0..3 {
        assert_eq!(call(&mut sim, "GET", "/v1/webhooks", &key).status, 200);
    }
    for (method, path) in [("GET", "/v1/webhooks"), ("DELETE", "/v1/webhooks/sub_0")] {
        let resp = call(&mut sim, method, path, &key);
        assert_error(&resp, 429, "rate_limited");
        assert_eq!(
            resp.header("retry-after"),
            Some("40"),
            "until the minute turns"
        );
    }
    let refused = create_url(&mut sim, &key, URL);
    assert_error(&refused, 429, "rate_limited");
    assert!(
        active_subscriptions(&sim).is_empty(),
        "a refused create makes nothing"
    );
    assert_eq!(
        call(&mut sim, "GET", "/v1/webhooks", &other).status,
        200,
        "each client has its own limit"
    );
    assert_eq!(
        call(&mut sim, "GET", "/internal/v1/settings", ADMIN).json()["data"]["rateLimitPerMinute"],
        3,
        "the operator API is not limited, and shows the setting"
    );
    sim.advance(Duration::from_secs(40)).expect("advance");
    assert_eq!(call(&mut sim, "GET", "/v1/webhooks", &key).status, 200);
}
