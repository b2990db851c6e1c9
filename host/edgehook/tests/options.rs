//! #25 points 3 and 4 on `serve` against a real loopback receiver: a subscription's own
//! headers arrive with the delivery, and a 503 with `Retry-After` holds the retry back at
//! least that long (the retry delays are set to 1 s, Retry-After asks for 3 s).

use crate::common::*;
use bytes::Bytes;
use edgehook::cli::Remote;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[test]
fn serve_sends_own_headers_and_honours_retry_after() {
    let dir = temp_dir("options");
    let rt = rt();
    // Answers the first request 503 with Retry-After: 3, then 200; keeps each one's arrival
    // time and headers.
    let seen: Arc<Mutex<Vec<(Instant, http::HeaderMap)>>> = Arc::default();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let keep = seen.clone();
    rt.spawn(edgehook::receiver::serve_on(
        listener,
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
    ));
    let mut server = Proc::start(&serve_to_loopback("retry_delays_ms=1000,1000"), &dir);
    let base = format!("http://{}", server.address());
    let token = std::fs::read_to_string(dir.join("edgehook-data/admin-token")).expect("token");
    let operator = Remote::new(&base, token.trim()).expect("operator");
    let (status, issued) = rt
        .block_on(operator.call("POST", "/internal/v1/clients/acme/keys", None, &[]))
        .expect("key");
    assert_eq!(status, 201, "{issued}");
    let key = serde_json::from_str::<Value>(&issued).expect("json")["data"]["apiKey"]
        .as_str()
        .expect("key")
        .to_owned();
    let partner = Remote::new(&base, &key).expect("partner");
    let body = json!({
        "url": format!("http://127.0.0.1:{port}/in"),
        "eventTypes": ["load.created"],
        "headers": {"X-Receiver-Token": "tok-42"},
    });
    let json_type = [("content-type".to_owned(), "application/json".to_owned())];
    let (status, text) = rt
        .block_on(partner.call(
            "POST",
            "/v1/webhooks",
            Some(body.to_string().into_bytes()),
            &json_type,
        ))
        .expect("create");
    assert_eq!(status, 201, "{text}");
    let headers = [
        ("content-type".to_owned(), "application/json".to_owned()),
        ("x-service-event".to_owned(), "load.created".to_owned()),
    ];
    let (status, text) = rt
        .block_on(operator.call(
            "POST",
            "/internal/v1/events",
            Some(b"{\"id\":\"L1\"}".to_vec()),
            &headers,
        ))
        .expect("publish");
    assert_eq!(status, 202, "{text}");
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

/// #25 point 6 on `serve`: a FIFO subscription's deliveries arrive one at a time in publish
/// order, the failing first one holding the others until its retry succeeds.
#[test]
fn serve_delivers_a_fifo_subscription_in_publish_order() {
    let dir = temp_dir("fifo");
    let rt = rt();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let keep = seen.clone();
    rt.spawn(edgehook::receiver::serve_on(
        listener,
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
    ));
    let mut server = Proc::start(&serve_to_loopback("retry_delays_ms=1000,1000"), &dir);
    let base = format!("http://{}", server.address());
    let token = std::fs::read_to_string(dir.join("edgehook-data/admin-token")).expect("token");
    let operator = Remote::new(&base, token.trim()).expect("operator");
    let (_, issued) = rt
        .block_on(operator.call("POST", "/internal/v1/clients/acme/keys", None, &[]))
        .expect("key");
    let key = serde_json::from_str::<Value>(&issued).expect("json")["data"]["apiKey"]
        .as_str()
        .expect("key")
        .to_owned();
    let partner = Remote::new(&base, &key).expect("partner");
    let body = json!({
        "url": format!("http://127.0.0.1:{port}/in"),
        "eventTypes": ["load.created"],
        "ordering": "fifo",
    });
    let json_type = [("content-type".to_owned(), "application/json".to_owned())];
    let (status, text) = rt
        .block_on(partner.call(
            "POST",
            "/v1/webhooks",
            Some(body.to_string().into_bytes()),
            &json_type,
        ))
        .expect("create");
    assert_eq!(status, 201, "{text}");
    let headers = [
        ("content-type".to_owned(), "application/json".to_owned()),
        ("x-service-event".to_owned(), "load.created".to_owned()),
    ];
    for n in 1..=3 {
        let load = format!("{{\"id\":\"L{n}\"}}").into_bytes();
        let (status, text) = rt
            .block_on(operator.call("POST", "/internal/v1/events", Some(load), &headers))
            .expect("publish");
        assert_eq!(status, 202, "{text}");
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
