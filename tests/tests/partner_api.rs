//! The partner API through the real component: create, list, read, delete; auth; validation;
//! idempotency; tenant isolation; storage under injected faults.

use crate::common;
use edgehook_component::model::ids::{ClientId, SubscriptionId};

use common::*;
use edgehook_runtime::HttpResponse;
use edgehook_sim::sim::Simulation;
use serde_json::{Value, json};
use std::time::Duration;

pub(crate) const URL: &str = "https://hooks.example.com/loads";

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
    let record = subscription_record(
        &sim.store().snapshot()
            [keys::subscription(&SubscriptionId::trusted(id.to_string())).as_str()],
    )
    .expect("record kept");
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
    // keys on event ingest) but may not use there, 403.
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
    assert_eq!(resp.header("allow"), Some("GET, PATCH, DELETE"));
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
        .filter(|k| before.get(*k) != after.get(*k) && !k.starts_with(keys::RATE_PREFIX))
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
    sim.store()
        .set(&keys::client_live(&ClientId::trusted("acme")), b"4")
        .expect("set");
    create(&mut sim, &key, URL, &["load.created"]);
    let live =
        sim.store().snapshot()[keys::client_live(&ClientId::trusted("acme")).as_str()].clone();
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
    // One subscription stays, so the measured delete does not empty an index page (which
    // costs the page directory's tidy two operations more: docs/design/storage.md).
    create(&mut sim, &key, URL, &["load.created"]);
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
            before.get(keys::subscription(&SubscriptionId::trusted(id.to_string())).as_str()),
            after.get(keys::subscription(&SubscriptionId::trusted(id.to_string())).as_str())
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
/// `lastUsedAt` (best effort), a write the operation counts of these tests are
/// not about.
pub(crate) fn used_key(sim: &mut Simulation, client: &str) -> String {
    let key = issue_key(sim, client);
    assert_eq!(call(sim, "GET", "/v1/webhooks", &key).status, 200);
    key
}

/// Store operations one successful call of `f` performs.
pub(crate) fn ops_of(
    sim: &mut edgehook_sim::sim::Simulation,
    f: impl FnOnce(&mut edgehook_sim::sim::Simulation),
) -> u64 {
    let before = sim.store().ops();
    f(sim);
    sim.store().ops() - before
}

pub(crate) fn fanout(sim: &edgehook_sim::sim::Simulation, event_type: &str) -> Vec<String> {
    fanout_in(&sim.store().snapshot(), event_type)
}

pub(crate) fn active_subscriptions(sim: &edgehook_sim::sim::Simulation) -> Vec<String> {
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
pub(crate) fn after_commit(
    sim: &mut Simulation,
    key: &str,
    resp: &HttpResponse,
    n: u64,
    steps: u64,
) -> bool {
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
