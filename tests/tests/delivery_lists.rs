//! Delivery lists: the owner reads its subscription's deliveries with
//! their attempts, filtered by status, event type and time, a page at a time whatever the
//! history's length; its read shows the latest attempt.

use crate::common::*;
use edgehook_sim::simnet::Reply;
use serde_json::{Value, json};
use std::time::Duration;

const URL: &str = "https://hooks.example.com/d";

fn page(sim: &mut edgehook_sim::sim::Simulation, key: &str, path: &str) -> Value {
    let resp = call(sim, "GET", path, key);
    assert_eq!(resp.status, 200, "{path}: {}", resp.json());
    resp.json()
}

#[test]
fn the_owner_lists_its_deliveries_with_attempts_and_filters_a_page_at_a_time() {
    let mut sim = sim(81);
    let key = issue_key(&mut sim, "acme");
    // The first delivery fails once (a 500, retried a minute later); the rest get 204.
    sim.net()
        .endpoint(URL, [Reply::Status(500), Reply::Status(204)]);
    let created = create(&mut sim, &key, URL, &["load.created", "load.updated"]);
    let id = created["id"].as_str().expect("id").to_owned();
    let before = page(&mut sim, &key, &format!("/v1/webhooks/{id}"))["data"].clone();
    assert!(
        before.get("lastAttempt").is_none(),
        "no attempt yet: {before}"
    );
    let t0 = sim.now_ms();
    for i in 0..12 {
        let ty = if i % 2 == 0 {
            "load.created"
        } else {
            "load.updated"
        };
        let load = format!(r#"{{"id":"L-{i}"}}"#);
        assert_eq!(ingest(&mut sim, ty, load.as_bytes(), &[]).status, 202);
        sim.advance(Duration::from_secs(1)).expect("advance");
    }
    sim.advance(Duration::from_secs(120)).expect("advance");

    let base = format!("/v1/webhooks/{id}/deliveries");
    let all = page(&mut sim, &key, &format!("{base}?limit=100"));
    let all = all["data"].as_array().expect("data").clone();
    assert_eq!(all.len(), 12);
    let retried = &all[0];
    let attempts = retried["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2);
    assert_eq!(
        (
            &attempts[0]["statusCode"],
            &attempts[0]["errorClass"],
            &attempts[1]["errorClass"]
        ),
        (&json!(500), &json!("http_status"), &json!(null))
    );
    // Pages of 5: 5, 5, 2, each cursor going on where the last stopped.
    let mut ids = Vec::new();
    let mut path = format!("{base}?limit=5");
    loop {
        let p = page(&mut sim, &key, &path);
        ids.extend(
            p["data"]
                .as_array()
                .expect("data")
                .iter()
                .map(|d| d["id"].clone()),
        );
        match p["nextCursor"].as_str() {
            Some(c) => path = format!("{base}?limit=5&cursor={c}"),
            None => break,
        }
    }
    let want: Vec<Value> = all.iter().map(|d| d["id"].clone()).collect();
    assert_eq!(ids, want);
    // Filters: by event type (6), by time (the first 4 published), by status (none failed).
    let typed = page(
        &mut sim,
        &key,
        &format!("{base}?eventType=load.updated&limit=100"),
    );
    assert_eq!(typed["data"].as_array().expect("data").len(), 6);
    let early = page(
        &mut sim,
        &key,
        &format!("{base}?until={}&limit=100", t0 + 3_500),
    );
    assert_eq!(early["data"].as_array().expect("data").len(), 4);
    let failed = page(&mut sim, &key, &format!("{base}?status=failed&limit=2"));
    assert!(failed["data"].as_array().expect("data").is_empty());
    // A filtered page reads at most 4 × limit entries (8 of 12): the rest is behind its
    // cursor.
    assert!(failed["nextCursor"].is_string(), "{failed}");
    for bad in [
        "status=done",
        "eventType=load.deleted",
        "since=yesterday",
        "limit=0",
    ] {
        let resp = call(&mut sim, "GET", &format!("{base}?{bad}"), &key);
        assert_eq!(resp.status, 422, "{bad}: {}", resp.json());
    }
    let other = issue_key(&mut sim, "globex");
    call_fails(&mut sim, "GET", &base, &other, 404, "not_found");

    // The owner's read shows the latest attempt: the first delivery's retry, a minute after
    // the last delivery's only attempt.
    let read = page(&mut sim, &key, &format!("/v1/webhooks/{id}"))["data"].clone();
    let last = &read["lastAttempt"];
    assert_eq!(last["deliveryId"], all[0]["id"], "{read}");
    assert_eq!(
        (&last["statusCode"], &last["succeeded"]),
        (&json!(204), &json!(true))
    );
}

/// Delivery lists, the operator's side: a search across subscriptions and clients, by client,
/// status, event type and time, over several days, a page at a time.
#[test]
fn the_operator_searches_deliveries_across_subscriptions_and_days() {
    let mut sim = sim(82);
    let acme = issue_key(&mut sim, "acme");
    let globex = issue_key(&mut sim, "globex");
    sim.net().endpoint(URL, [Reply::Status(204)]);
    sim.net()
        .endpoint("https://globex.example.com/d", [Reply::Status(410)]);
    let a = create(&mut sim, &acme, URL, &["load.created", "load.updated"]);
    let a = a["id"].as_str().expect("id").to_owned();
    let g = create(
        &mut sim,
        &globex,
        "https://globex.example.com/d",
        &["load.created"],
    );
    let g = g["id"].as_str().expect("id").to_owned();
    let t0 = sim.now_ms();
    // Day 1: three load.created (to both; globex's first answers 410, then it is disabled
    // and skips the rest) and one load.updated (acme only). Day 2: two more load.created.
    for (i, ty) in [
        "load.created",
        "load.updated",
        "load.created",
        "load.created",
    ]
    .iter()
    .enumerate()
    {
        let load = format!(r#"{{"id":"D1-{i}"}}"#);
        assert_eq!(ingest(&mut sim, ty, load.as_bytes(), &[]).status, 202);
        sim.advance(Duration::from_secs(60)).expect("advance");
    }
    sim.advance(Duration::from_secs(86_400))
        .expect("a day later");
    let day2 = sim.now_ms();
    for i in 0..2 {
        let load = format!(r#"{{"id":"D2-{i}"}}"#);
        assert_eq!(
            ingest(&mut sim, "load.created", load.as_bytes(), &[]).status,
            202
        );
        sim.advance(Duration::from_secs(60)).expect("advance");
    }
    let search = |sim: &mut edgehook_sim::sim::Simulation, query: &str| -> Vec<Value> {
        let mut out = Vec::new();
        let mut path = format!("/internal/v1/deliveries?{query}");
        loop {
            let p = page(sim, ADMIN, &path);
            out.extend(p["data"].as_array().expect("data").iter().cloned());
            match p["nextCursor"].as_str() {
                Some(c) => path = format!("/internal/v1/deliveries?{query}&cursor={c}"),
                None => return out,
            }
        }
    };
    let subs_of = |found: &[Value]| -> Vec<String> {
        found
            .iter()
            .map(|d| d["subscriptionId"].as_str().expect("sub").to_owned())
            .collect()
    };
    let all = search(&mut sim, "limit=2");
    assert_eq!(all.len(), 6 + 5, "acme's six and globex's five, each once");
    let created: Vec<u64> = all
        .iter()
        .map(|d| d["createdAt"].as_u64().expect("t"))
        .collect();
    let mut sorted = created.clone();
    sorted.sort();
    assert_eq!(created, sorted, "oldest first");
    let theirs = search(&mut sim, "clientId=globex&limit=3");
    assert!(subs_of(&theirs).iter().all(|s| *s == g) && theirs.len() == 5);
    let skipped = search(&mut sim, "clientId=globex&status=skipped");
    assert_eq!(
        skipped.len(),
        4,
        "after its 410, globex's subscription skipped the rest"
    );
    let updated = search(&mut sim, "eventType=load.updated");
    assert_eq!(subs_of(&updated), std::slice::from_ref(&a));
    let second_day = search(&mut sim, &format!("since={day2}"));
    assert_eq!(second_day.len(), 4);
    let first_hour = search(&mut sim, &format!("since={t0}&until={}", t0 + 90_000));
    assert_eq!(
        first_hour.len(),
        3,
        "load.created to both, then load.updated to acme"
    );
    let by_sub = search(&mut sim, &format!("subscriptionId={a}&clientId=acme"));
    assert_eq!(by_sub.len(), 6);
    let mismatch = search(&mut sim, &format!("subscriptionId={a}&clientId=globex"));
    assert!(mismatch.is_empty());
    for bad in [
        "clientId=bad%20client",
        "subscriptionId=nope",
        "status=done",
        "since=x",
    ] {
        let resp = call(
            &mut sim,
            "GET",
            &format!("/internal/v1/deliveries?{bad}"),
            ADMIN,
        );
        assert_eq!(resp.status, 422, "{bad}: {}", resp.json());
    }
    call_fails(
        &mut sim,
        "GET",
        "/internal/v1/deliveries",
        &acme,
        403,
        "forbidden",
    );
}
