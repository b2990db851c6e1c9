//! Delivery options on `serve` against a real loopback receiver: a subscription's own
//! headers arrive with the delivery, and a 503 with `Retry-After` holds the retry back at
//! least that long (the retry delays are set to 1 s, Retry-After asks for 3 s); and
//! `--fsync-always` delivering, retrying and keeping what it answered across a restart.

use crate::common::*;
use edgehook::cli::Remote;
use edgehook_testkit::receiver::Received;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[test]
fn serve_sends_own_headers_and_honours_retry_after() {
    let dir = temp_dir("options");
    let rt = rt();
    // Answers the first request 503 with Retry-After: 3, then 200.
    let recv = Receiver::builder().answer_by(|_, earlier| match earlier {
        [] => Answer::status(503).header("retry-after", "3"),
        _ => Answer::status(200),
    });
    let recv = rt.block_on(recv.start());
    let mut server = Proc::start(&serve_to_loopback("retry_delays_ms=1000,1000"), &dir);
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let body = json!({
        "url": recv.url("/in"),
        "eventTypes": ["load.created"],
        "headers": {"X-Receiver-Token": "tok-42"},
    });
    create_subscription(&rt, &base, &key, &body);
    publish_event(&rt, &operator, "load.created", br#"{"id":"L1"}"#);
    wait_for("the retry", || recv.hits() >= 2);
    let seen = recv.received();
    for r in &seen {
        assert_eq!(r.header("x-receiver-token"), Some("tok-42"));
    }
    let gap = seen[1].at - seen[0].at;
    assert!(
        gap >= Duration::from_millis(2000),
        "retried after {gap:?}, Retry-After said 3 s"
    );
    // serve's own logs never carry the header's value.
    assert!(
        !server.drain().iter().any(|l| l.contains("tok-42")),
        "a header value in the log"
    );
    drop(server);
}

/// On `serve`, a FIFO subscription's deliveries arrive one at a time in publish
/// order, the failing first one holding the others until its retry succeeds.
#[test]
fn serve_delivers_a_fifo_subscription_in_publish_order() {
    let dir = temp_dir("fifo");
    let rt = rt();
    // Fails the first request, answers 200 to the others.
    let recv = Receiver::builder().answer_by(|_, earlier| match earlier {
        [] => Answer::status(500),
        _ => Answer::status(200),
    });
    let recv = rt.block_on(recv.start());
    let mut server = Proc::start(&serve_to_loopback("retry_delays_ms=1000,1000"), &dir);
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let body = json!({
        "url": recv.url("/in"),
        "eventTypes": ["load.created"],
        "ordering": "fifo",
    });
    create_subscription(&rt, &base, &key, &body);
    for n in 1..=3 {
        let load = format!("{{\"id\":\"L{n}\"}}");
        publish_event(&rt, &operator, "load.created", load.as_bytes());
    }
    let seen = wait_for("every delivery", || {
        let seen: Vec<String> = recv.received().iter().map(Received::text).collect();
        if seen.len() >= 4 {
            Ok(seen)
        } else {
            Err(format!("{seen:?}"))
        }
    });
    assert_eq!(
        seen,
        [
            r#"{"id":"L1"}"#,
            r#"{"id":"L1"}"#,
            r#"{"id":"L2"}"#,
            r#"{"id":"L3"}"#
        ]
    );
    drop(server);
}

/// Pacing on `serve`: a receiver that answers after 5 s beside one
/// that answers at once. The slow one is put under the default in-flight cap once it has
/// shown slow, so it cannot hold `serve`'s instances; the fast one's delivery latency at
/// 100 events/s stays what it was without the slow one.
#[test]
fn a_slow_receiver_does_not_slow_a_fast_one() {
    let dir = temp_dir("pacing");
    let rt = rt();
    // `/slow` answers after 5 s, `/fast` at once.
    let recv = Receiver::builder().answer_by(|request, _| match request.path.as_str() {
        "/slow" => Answer::status(200).after(Duration::from_secs(5)),
        _ => Answer::status(200),
    });
    let recv = rt.block_on(recv.start());
    // When each event first reached the fast receiver, by its id.
    let arrived = || -> BTreeMap<String, Instant> {
        let mut arrived = BTreeMap::new();
        for r in recv.received_on("/fast") {
            let v: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            let id = v["id"].as_str().unwrap_or("").to_owned();
            arrived.entry(id).or_insert(r.at);
        }
        arrived
    };
    let mut server = Proc::start(&serve_to_loopback("attempt_timeout_ms=10000"), &dir);
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let partner = Remote::new(&base, &key).expect("partner");
    let subscribe = |path: &str| -> String {
        let body = json!({"url": recv.url(path), "eventTypes": ["load.created"]});
        let data = create_subscription(&rt, &base, &key, &body);
        data["id"].as_str().expect("id").to_owned()
    };
    let headers = [
        ("content-type".to_owned(), "application/json".to_owned()),
        ("x-service-event".to_owned(), "load.created".to_owned()),
    ];
    // 300 events at 100/s, each send at its scheduled time; the fast receiver's latencies.
    // (Beside a 5 s receiver that means 500 attempts in flight at once, uncapped: more than
    // `serve`'s 256 instances.)
    let mut run = |phase: &str| -> Vec<Duration> {
        let start = Instant::now();
        let mut sent = Vec::new();
        for n in 0..300u32 {
            let at = start + Duration::from_millis(u64::from(n) * 10);
            while Instant::now() < at {
                std::thread::park_timeout(at - Instant::now());
            }
            let id = format!("{phase}{n}");
            let load = format!("{{\"id\":\"{id}\"}}").into_bytes();
            let sent_at = Instant::now();
            let (status, text) = rt
                .block_on(operator.call("POST", "/internal/v1/events", Some(load), &headers))
                .expect("publish");
            if status != 202 {
                let line = server.wait_for("the error line", |l| l.contains("\"level\":\"error\""));
                let slow_now = recv.received_on("/slow").len();
                panic!("{phase} {n}: {status} {text}\n{line}\nslow requests so far: {slow_now}");
            }
            sent.push((id, sent_at));
        }
        let arrivals = wait_for("every event at the fast receiver", || {
            let arrivals = arrived();
            let missing: Vec<&String> = sent
                .iter()
                .map(|(id, _)| id)
                .filter(|id| !arrivals.contains_key(*id))
                .collect();
            if missing.is_empty() {
                Ok(arrivals)
            } else {
                Err(format!("never arrived: {missing:?}"))
            }
        });
        let mut latencies: Vec<Duration> = sent
            .iter()
            .map(|(id, at)| arrivals[id].saturating_duration_since(*at))
            .collect();
        latencies.sort();
        latencies
    };
    subscribe("/fast");
    let alone = run("A");
    // The slow receiver joins, and shows slow once: its first attempt takes its 5 s.
    let slow_id = subscribe("/slow");
    publish_event(&rt, &operator, "load.created", br#"{"id":"W"}"#);
    wait_for("the warm-up event", || {
        arrived().contains_key("W") && !recv.received_on("/slow").is_empty()
    });
    // Its attempt ends 5 s after it began, recorded; then the receiver counts as slow.
    let slow_list = format!("/v1/webhooks/{slow_id}/deliveries");
    wait_for("the slow attempt's record", || {
        let (_, text) = rt
            .block_on(partner.call("GET", &slow_list, None, &[]))
            .expect("deliveries");
        let v: Value = serde_json::from_str(&text).expect("json");
        v["data"][0]["attempts"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    });
    let beside = run("B");
    let p99 = |l: &[Duration]| l[l.len() * 99 / 100 - 1];
    let (a, b) = (p99(&alone), p99(&beside));
    assert!(
        b <= (a * 3).max(a + Duration::from_millis(100)),
        "fast receiver p99: {a:?} alone, {b:?} beside the slow one"
    );
    drop(server);
}

/// `serve --fsync-always` (one sync before each answer and each attempt) runs the whole
/// path: a subscription made, an event accepted and delivered signed, a retry after a
/// failed attempt, and what it answered still there after a restart on the same data.
#[test]
fn serve_with_fsync_always_delivers_and_keeps_what_it_answered() {
    let dir = temp_dir("fsync-always");
    let rt = rt();
    let recv = Receiver::builder().answer_by(|_, earlier| match earlier {
        [] => Answer::status(500),
        _ => Answer::status(200),
    });
    let recv = rt.block_on(recv.start());
    let mut args = serve_to_loopback("retry_delays_ms=1000,1000").to_vec();
    args.push("--fsync-always");
    let mut server = Proc::start(&args, &dir);
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let body = json!({"url": recv.url("/in"), "eventTypes": ["load.created"]});
    let created = create_subscription(&rt, &base, &key, &body);
    let secret = created["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    publish_event(&rt, &operator, "load.created", br#"{"id":"L1"}"#);
    wait_for("attempt 2", || recv.hits() >= 2);
    for r in recv.received() {
        assert!(edgehook_testkit::signature::verifies(
            &secret,
            r.header("x-service-timestamp"),
            r.header("x-service-signature"),
            &r.body
        ));
    }
    drop(server);
    let mut server = Proc::start(&args, &dir);
    let partner = Remote::new(&format!("http://{}", server.address()), &key).expect("client");
    let id = created["id"].as_str().expect("id");
    let (status, text) = rt
        .block_on(partner.call("GET", &format!("/v1/webhooks/{id}/deliveries"), None, &[]))
        .expect("deliveries");
    assert_eq!(status, 200, "{text}");
    let list: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(list["data"][0]["status"], "succeeded", "{text}");
    drop(server);
}
