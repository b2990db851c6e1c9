//! Several `edgehook serve` processes on one Redis (`--kv redis://...`). The test process
//! starts its own `redis-server` on a free loopback port (no persistence, a temporary working
//! directory) and stops it when the last test using it is done. `redis-server` must be
//! installed (`.ci/run` installs Debian's). Everything talks over loopback only, and every
//! wait is a condition with a deadline.

use edgehook::cli::Remote;
use edgehook_component::delivery::delivery_id;
use edgehook_component::model::ids::{EventId, SubscriptionId};
use edgehook_testkit::redis::{redis_or_skip, shared_redis};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use crate::common::*;

fn call(
    rt: &tokio::runtime::Runtime,
    remote: &Remote,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
    headers: &[(String, String)],
) -> (u16, Value) {
    let (status, text) = rt
        .block_on(remote.call(method, path, body, headers))
        .unwrap_or_else(|e| panic!("{method} {path}: {e:#}"));
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"));
    (status, json)
}

#[test]
fn two_instances_on_one_redis_share_subscriptions_and_deliveries() {
    if !redis_or_skip() {
        return;
    }
    let started = Instant::now();
    let redis = shared_redis();
    let rt = rt();
    let recv = receiver(&rt);
    let token = format!("admin-token-{}", std::process::id());
    let url = redis.url();
    let start = |name: &str| {
        let dir = temp_dir(name);
        let args = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--allow-http",
            "--allow-private-targets",
            "--kv",
            &url,
            "--admin-token",
            &token,
            "--set",
            "attempt_timeout_ms=5000",
        ];
        let mut proc = Proc::start(&args, &dir);
        let base = format!("http://{}", proc.address());
        (proc, base, dir)
    };
    let (mut a, base_a, _dir_a) = start("redis-a");
    let (mut b, base_b, _dir_b) = start("redis-b");
    let op_a = Remote::new(&base_a, &token).expect("client");
    let op_b = Remote::new(&base_b, &token).expect("client");

    // A key issued through A, subscriptions created through A, listed through B.
    let (status, issued) = call(
        &rt,
        &op_a,
        "POST",
        "/internal/v1/clients/acme/keys",
        None,
        &[],
    );
    assert_eq!(status, 201, "{issued}");
    let key = issued["data"]["apiKey"]
        .as_str()
        .expect("apiKey")
        .to_owned();
    let partner_a = Remote::new(&base_a, &key).expect("client");
    let partner_b = Remote::new(&base_b, &key).expect("client");
    let json = [("content-type".to_owned(), "application/json".to_owned())];
    let port = recv.port();
    let mut subs = Vec::new();
    for i in 0..4 {
        let body =
            format!(r#"{{"url":"http://127.0.0.1:{port}/s{i}","eventTypes":["load.updated"]}}"#);
        let (status, out) = call(
            &rt,
            &partner_a,
            "POST",
            "/v1/webhooks",
            Some(body.into_bytes()),
            &json,
        );
        assert_eq!(status, 201, "{out}");
        subs.push(out["data"]["id"].as_str().expect("id").to_owned());
    }
    let (status, listed) = call(&rt, &partner_b, "GET", "/v1/webhooks", None, &[]);
    assert_eq!(status, 200, "{listed}");
    let seen_by_b: BTreeSet<String> = listed["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|s| s["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        seen_by_b,
        subs.iter().cloned().collect::<BTreeSet<_>>(),
        "B lists what A created"
    );

    // Events published alternately through A and B.
    let ingest = [
        json[0].clone(),
        ("x-service-event".to_owned(), "load.updated".to_owned()),
    ];
    let events = 50;
    let mut expected = BTreeSet::new();
    for n in 0..events {
        let via = if n % 2 == 0 { &op_a } else { &op_b };
        let body = format!(r#"{{"id":"L{n}","status":"IN_TRANSIT"}}"#).into_bytes();
        let (status, out) = call(&rt, via, "POST", "/internal/v1/events", Some(body), &ingest);
        assert_eq!(status, 202, "{out}");
        assert_eq!(out["data"]["deliveries"], subs.len(), "{out}");
        let event = out["data"]["eventId"].as_str().expect("eventId");
        for sub in &subs {
            let (event, sub) = (
                EventId::trusted(event),
                SubscriptionId::trusted(sub.as_str()),
            );
            expected.insert(delivery_id(&event, &sub).into_string());
        }
    }
    assert_eq!(expected.len(), events * subs.len());

    // Every delivery succeeded, as both A and B see it.
    let mut records = BTreeMap::new();
    wait_for("every delivery to succeed, as A and B see it", || {
        let mut done = true;
        for op in [&op_a, &op_b] {
            records.clear();
            for sub in &subs {
                let path = format!("/internal/v1/subscriptions/{sub}/deliveries?limit=100");
                let (status, page) = call(&rt, op, "GET", &path, None, &[]);
                assert_eq!(status, 200, "{page}");
                for d in page["data"].as_array().expect("array") {
                    let attempts = d["attempts"].as_array().expect("attempts").len();
                    assert!(attempts <= 3, "never more than 3 attempts: {d}");
                    records.insert(d["id"].as_str().expect("id").to_owned(), d.clone());
                }
            }
            let succeeded = records
                .values()
                .filter(|d| d["status"] == "succeeded")
                .count();
            done &= succeeded == expected.len();
        }
        if done {
            Ok(())
        } else {
            Err(format!("records: {records:#?}"))
        }
    });
    assert_eq!(
        records.keys().cloned().collect::<BTreeSet<_>>(),
        expected,
        "the deliveries are exactly one per (event, subscription)"
    );

    // Nothing lost; duplicates counted, each with the log lines that explain it.
    let counts = per_delivery(&recv);
    let missing: Vec<&String> = expected
        .iter()
        .filter(|id| !counts.contains_key(*id))
        .collect();
    assert!(missing.is_empty(), "never received: {missing:?}");
    let attempt_lines = |p: &mut Proc| -> Vec<String> {
        p.drain()
            .iter()
            .filter(|l| l.contains("\"msg\":\"delivery attempt\""))
            .cloned()
            .collect()
    };
    let sent_a = attempt_lines(&mut a);
    let sent_b = attempt_lines(&mut b);
    let mut duplicates = 0;
    for (id, n) in counts.iter().filter(|(_, n)| **n > 1) {
        duplicates += n - 1;
        let attempts = records[id]["attempts"].as_array().map_or(0, Vec::len);
        println!("duplicate: {id} received {n} times, {attempts} attempt(s) recorded; sent:");
        for line in sent_a.iter().filter(|l| l.contains(id.as_str())) {
            println!("  A {line}");
        }
        for line in sent_b.iter().filter(|l| l.contains(id.as_str())) {
            println!("  B {line}");
        }
        // A retry after a failed (e.g. timed out) attempt is a legitimate second send; the
        // same attempt sent twice is not.
        assert!(
            attempts >= *n,
            "{id} was received {n} times but only {attempts} attempt(s) are recorded: two \
             instances sent the same attempt"
        );
    }
    println!(
        "{} deliveries ({events} events x {} subscriptions) through 2 instances on one Redis: \
         all succeeded, attempts sent by A {} / by B {}, {duplicates} duplicate send(s), {:.1} s",
        expected.len(),
        subs.len(),
        sent_a.len(),
        sent_b.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(duplicates <= 2, "{duplicates} duplicate sends");
}

/// `/readyz` answers 503 `store_unavailable` while the Redis store is down and
/// 200 again once it is back (the host answers it; nothing is restarted).
#[test]
fn readyz_follows_the_store_down_and_back() {
    if !redis_or_skip() {
        return;
    }
    let mut redis = edgehook_testkit::redis::start_redis();
    let rt = rt();
    let dir = temp_dir("readyz");
    let url = redis.url();
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--kv",
        &url,
        "--admin-token",
        "t0k",
    ];
    let mut server = Proc::start(&args, &dir);
    let base = format!("http://{}", server.address());
    let probe = Remote::new(&base, "none").expect("client");
    let ready = |rt: &tokio::runtime::Runtime| -> (u16, String) {
        rt.block_on(probe.call("GET", "/readyz", None, &[]))
            .expect("readyz")
    };
    let (status, text) = ready(&rt);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("ready"), "{text}");
    redis.stop();
    let (status, text) = ready(&rt);
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("store_unavailable"), "{text}");
    redis.restart();
    wait_for("ready again", || {
        let (status, text) = ready(&rt);
        if status == 200 {
            Ok(())
        } else {
            Err(format!("{status} {text}"))
        }
    });
    drop(server);
}
