//! Delivery options on `serve` against a real loopback receiver: a subscription's own
//! headers arrive with the delivery, and a 503 with `Retry-After` holds the retry back at
//! least that long (the retry delays are set to 1 s, Retry-After asks for 3 s).

use crate::common::*;
use bytes::Bytes;
use edgehook::cli::Remote;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[test]
fn serve_sends_own_headers_and_honours_retry_after() {
    let dir = temp_dir("options");
    let rt = rt();
    // Answers the first request 503 with Retry-After: 3, then 200; keeps each one's arrival
    // time and headers.
    let seen: Arc<Mutex<Vec<(Instant, http::HeaderMap)>>> = Arc::default();
    let keep = seen.clone();
    let port = rt
        .block_on(edgehook::receiver::loopback(
            move |head: http::request::Parts, _: Bytes| {
                let keep = keep.clone();
                async move {
                    let first = {
                        let mut seen = keep.lock().expect("lock");
                        seen.push((Instant::now(), head.headers.clone()));
                        seen.len() == 1
                    };
                    let mut resp = hyper::Response::new(http_body_util::Full::new(Bytes::new()));
                    if first {
                        *resp.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE;
                        resp.headers_mut()
                            .insert("retry-after", http::HeaderValue::from_static("3"));
                    }
                    resp
                }
            },
        ))
        .expect("receiver");
    let mut server = Proc::start(&serve_to_loopback("retry_delays_ms=1000,1000"), &dir);
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let body = json!({
        "url": format!("http://127.0.0.1:{port}/in"),
        "eventTypes": ["load.created"],
        "headers": {"X-Receiver-Token": "tok-42"},
    });
    create_subscription(&rt, &base, &key, &body);
    publish_event(&rt, &operator, "load.created", br#"{"id":"L1"}"#);
    let deadline = Instant::now() + DEADLINE;
    while seen.lock().expect("lock").len() < 2 {
        assert!(Instant::now() < deadline, "the retry did not arrive");
        std::thread::park_timeout(Duration::from_millis(50));
    }
    let seen = seen.lock().expect("lock").clone();
    for (_, h) in &seen {
        assert_eq!(
            h.get("x-receiver-token").and_then(|v| v.to_str().ok()),
            Some("tok-42")
        );
    }
    let gap = seen[1].0 - seen[0].0;
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
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let keep = seen.clone();
    let port = rt
        .block_on(edgehook::receiver::loopback(
            move |_: http::request::Parts, body: Bytes| {
                let keep = keep.clone();
                async move {
                    let first = {
                        let mut seen = keep.lock().expect("lock");
                        seen.push(String::from_utf8_lossy(&body).into_owned());
                        seen.len() == 1
                    };
                    let mut resp = hyper::Response::new(http_body_util::Full::new(Bytes::new()));
                    if first {
                        *resp.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
                    }
                    resp
                }
            },
        ))
        .expect("receiver");
    let mut server = Proc::start(&serve_to_loopback("retry_delays_ms=1000,1000"), &dir);
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let body = json!({
        "url": format!("http://127.0.0.1:{port}/in"),
        "eventTypes": ["load.created"],
        "ordering": "fifo",
    });
    create_subscription(&rt, &base, &key, &body);
    for n in 1..=3 {
        let load = format!("{{\"id\":\"L{n}\"}}");
        publish_event(&rt, &operator, "load.created", load.as_bytes());
    }
    let deadline = Instant::now() + DEADLINE;
    while seen.lock().expect("lock").len() < 4 {
        assert!(
            Instant::now() < deadline,
            "not all delivered: {:?}",
            seen.lock()
        );
        std::thread::park_timeout(Duration::from_millis(50));
    }
    let seen = seen.lock().expect("lock").clone();
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
    let arrived: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let slow_seen: Arc<Mutex<usize>> = Arc::default();
    let (keep, slow) = (arrived.clone(), slow_seen.clone());
    let port = rt
        .block_on(edgehook::receiver::loopback(
            move |head: http::request::Parts, body: Bytes| {
                let (keep, slow) = (keep.clone(), slow.clone());
                async move {
                    if head.uri.path() == "/slow" {
                        *slow.lock().expect("lock") += 1;
                        // The slow receiver: it answers after 5 s.
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    } else {
                        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                        let id = v["id"].as_str().unwrap_or("").to_owned();
                        keep.lock().expect("lock").insert(id, Instant::now());
                    }
                    hyper::Response::new(http_body_util::Full::new(Bytes::new()))
                }
            },
        ))
        .expect("receiver");
    let mut server = Proc::start(&serve_to_loopback("attempt_timeout_ms=10000"), &dir);
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let partner = Remote::new(&base, &key).expect("partner");
    let subscribe = |path: &str| -> String {
        let url = format!("http://127.0.0.1:{port}{path}");
        let body = json!({"url": url, "eventTypes": ["load.created"]});
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
                let slow_now = *slow_seen.lock().expect("lock");
                panic!("{phase} {n}: {status} {text}\n{line}\nslow requests so far: {slow_now}");
            }
            sent.push((id, sent_at));
        }
        let deadline = Instant::now() + DEADLINE;
        let mut latencies = Vec::new();
        for (id, at) in sent {
            let arrival = loop {
                if let Some(a) = arrived.lock().expect("lock").get(&id) {
                    break *a;
                }
                assert!(
                    Instant::now() < deadline,
                    "{id} never reached the fast receiver"
                );
                std::thread::park_timeout(Duration::from_millis(10));
            };
            latencies.push(arrival.saturating_duration_since(at));
        }
        latencies.sort();
        latencies
    };
    subscribe("/fast");
    let alone = run("A");
    // The slow receiver joins, and shows slow once: its first attempt takes its 5 s.
    let slow_id = subscribe("/slow");
    publish_event(&rt, &operator, "load.created", br#"{"id":"W"}"#);
    let deadline = Instant::now() + DEADLINE;
    while !arrived.lock().expect("lock").contains_key("W") || *slow_seen.lock().expect("lock") == 0
    {
        assert!(
            Instant::now() < deadline,
            "the warm-up event did not arrive"
        );
        std::thread::park_timeout(Duration::from_millis(20));
    }
    // Its attempt ends 5 s after it began, recorded; then the receiver counts as slow.
    let slow_list = format!("/v1/webhooks/{slow_id}/deliveries");
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (_, text) = rt
            .block_on(partner.call("GET", &slow_list, None, &[]))
            .expect("deliveries");
        let v: Value = serde_json::from_str(&text).expect("json");
        if v["data"][0]["attempts"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slow attempt was never recorded"
        );
        std::thread::park_timeout(Duration::from_millis(50));
    }
    let beside = run("B");
    let p99 = |l: &[Duration]| l[l.len() * 99 / 100 - 1];
    let (a, b) = (p99(&alone), p99(&beside));
    assert!(
        b <= (a * 3).max(a + Duration::from_millis(100)),
        "fast receiver p99: {a:?} alone, {b:?} beside the slow one"
    );
    drop(server);
}
