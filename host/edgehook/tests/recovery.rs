//! A subscription's lifecycle after an outage on `edgehook serve`, end to end: a receiver
//! fails until its subscription is disabled, the operator is alerted (a signed
//! `subscription.disabled`), events keep coming and are recorded as skipped, the partner
//! sees `disabled` with its reason, fixes the receiver, enables with `replaySince`, and the
//! receiver gets every missed event under its original delivery id, each signature checked
//! by the test kit's own HMAC (not the component's).

use crate::common::*;
use bytes::Bytes;
use edgehook::cli::Remote;
use http_body_util::Full;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ALERT_SECRET: &str = "whsec_the-operators-alert-secret-0123";

/// What the receiver got: path, headers (lower-case names) and body, in arrival order.
type Seen = Arc<Mutex<Vec<(String, Vec<(String, String)>, Vec<u8>)>>>;

/// A loopback receiver that records every request and answers 500 while `failing`.
fn receiver(rt: &tokio::runtime::Runtime) -> (u16, Seen, Arc<AtomicBool>) {
    let seen: Seen = Arc::default();
    let failing = Arc::new(AtomicBool::new(true));
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (s, f) = (seen.clone(), failing.clone());
    rt.spawn(edgehook::receiver::serve_on(
        listener,
        move |head: http::request::Parts, body: Bytes| {
            let (s, f) = (s.clone(), f.clone());
            async move {
                let headers = head
                    .headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_owned()))
                    .collect();
                let path = head.uri.path().to_owned();
                let alert = path == "/alerts";
                s.lock().expect("lock").push((path, headers, body.to_vec()));
                let mut resp = hyper::Response::new(Full::new(Bytes::from_static(b"")));
                if !alert && f.load(Ordering::SeqCst) {
                    *resp.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                }
                resp
            }
        },
    ));
    (port, seen, failing)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Waits until `done` holds of what the receiver got.
fn wait_for(
    seen: &Seen,
    what: &str,
    done: impl Fn(&[(String, Vec<(String, String)>, Vec<u8>)]) -> bool,
) {
    let end = Instant::now() + DEADLINE;
    while !done(&seen.lock().expect("lock")) {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::park_timeout(Duration::from_millis(20));
    }
}

fn call(
    rt: &tokio::runtime::Runtime,
    remote: &Remote,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let headers = [("content-type".to_owned(), "application/json".to_owned())];
    let (status, text) = rt
        .block_on(remote.call(
            method,
            path,
            body.map(|b| b.to_string().into_bytes()),
            &headers,
        ))
        .expect("call");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[test]
fn a_disabled_subscription_is_recovered_end_to_end_with_every_missed_event() {
    story("recovery", &[], None);
}

/// The same story with the store in Redis (`--kv`), as several instances would share it.
#[test]
fn the_recovery_story_holds_on_redis_too() {
    if !edgehook_testkit::redis::redis_or_skip() {
        return;
    }
    let redis = edgehook_testkit::redis::shared_redis();
    let prefix = format!("recovery-{}:", std::process::id());
    let token = format!("admin-token-{}", std::process::id());
    let store = [
        "--kv".to_owned(),
        redis.url(),
        "--kv-prefix".to_owned(),
        prefix,
        "--admin-token".to_owned(),
        token.clone(),
    ];
    story("recovery-redis", &store, Some(token));
}

/// The story, on `serve` with `store` arguments added (none: the embedded store) and
/// `token` as the admin token (none: the one `serve` writes to its data directory).
fn story(name: &str, store: &[String], token: Option<String>) {
    let dir = temp_dir(name);
    let rt = rt();
    let (port, seen, failing) = receiver(&rt);
    let alert_url = format!("alert_url=http://127.0.0.1:{port}/alerts");
    let alert_secret = format!("alert_secret={ALERT_SECRET}");
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--allow-http",
        "--allow-private-targets",
        "--set",
        "attempt_timeout_ms=1000",
        "--set",
        "retry_delays_ms=1000,1000",
        "--set",
        "disable_after_failures=1",
        "--set",
        &alert_url,
        "--set",
        &alert_secret,
    ];
    let mut args: Vec<&str> = args.to_vec();
    args.extend(store.iter().map(String::as_str));
    let mut server = Proc::start(&args, &dir);
    let base = format!("http://{}", server.address());
    let token = token.unwrap_or_else(|| {
        std::fs::read_to_string(dir.join("edgehook-data/admin-token")).expect("token")
    });
    let operator = Remote::new(&base, token.trim()).expect("operator");
    let (status, issued) = call(
        &rt,
        &operator,
        "POST",
        "/internal/v1/clients/acme/keys",
        None,
    );
    assert_eq!(status, 201, "{issued}");
    let partner =
        Remote::new(&base, issued["data"]["apiKey"].as_str().expect("key")).expect("partner");
    let url = format!("http://127.0.0.1:{port}/in");
    let (status, created) = call(
        &rt,
        &partner,
        "POST",
        "/v1/webhooks",
        Some(json!({"url": url, "eventTypes": ["load.created"]})),
    );
    assert_eq!(status, 201, "{created}");
    let id = created["data"]["id"].as_str().expect("id").to_owned();
    let secret = created["data"]["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    let publish = |n: u32| {
        let headers = [
            ("content-type".to_owned(), "application/json".to_owned()),
            ("x-service-event".to_owned(), "load.created".to_owned()),
        ];
        let body = format!(r#"{{"id":"L-{n}"}}"#).into_bytes();
        let (status, text) = rt
            .block_on(operator.call("POST", "/internal/v1/events", Some(body), &headers))
            .expect("publish");
        assert_eq!(status, 202, "{text}");
    };
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_millis() as u64
        - 1_000;

    // The receiver fails: three attempts, the delivery fails, the subscription is disabled,
    // the operator is alerted, signed with the alert secret.
    publish(1);
    wait_for(&seen, "the alert", |s| {
        s.iter().any(|(p, _, _)| p == "/alerts")
    });
    let (_, alert_headers, alert_body) = seen
        .lock()
        .expect("lock")
        .iter()
        .find(|(p, _, _)| p == "/alerts")
        .cloned()
        .expect("alert");
    assert_eq!(
        header(&alert_headers, "x-service-event"),
        Some("subscription.disabled")
    );
    assert!(edgehook_testkit::signature::verifies(
        ALERT_SECRET,
        header(&alert_headers, "x-service-timestamp"),
        header(&alert_headers, "x-service-signature"),
        &alert_body
    ));
    let alert: Value = serde_json::from_slice(&alert_body).expect("json");
    assert_eq!(
        (&alert["subscriptionId"], &alert["disabledReason"]),
        (&json!(id), &json!("repeated_failures"))
    );
    let failed_attempts = seen
        .lock()
        .expect("lock")
        .iter()
        .filter(|(p, _, _)| p == "/in")
        .count();
    assert_eq!(failed_attempts, 3);

    // Events keep coming: recorded as skipped, nothing sent.
    for n in 2..=4 {
        publish(n);
    }
    let (status, read) = call(&rt, &partner, "GET", &format!("/v1/webhooks/{id}"), None);
    assert_eq!(status, 200, "{read}");
    assert_eq!(
        (&read["data"]["status"], &read["data"]["disabledReason"]),
        (&json!("disabled"), &json!("repeated_failures"))
    );
    let (_, listed) = call(
        &rt,
        &partner,
        "GET",
        &format!("/v1/webhooks/{id}/deliveries"),
        None,
    );
    let listed = listed["data"].as_array().expect("deliveries").clone();
    let statuses: Vec<&str> = listed
        .iter()
        .map(|d| d["status"].as_str().expect("status"))
        .collect();
    assert_eq!(statuses, ["failed", "skipped", "skipped", "skipped"]);
    let mut missed: Vec<String> = listed
        .iter()
        .map(|d| d["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(
        seen.lock()
            .expect("lock")
            .iter()
            .filter(|(p, _, _)| p == "/in")
            .count(),
        3
    );

    // The partner fixes the receiver and enables with replaySince.
    failing.store(false, Ordering::SeqCst);
    let (status, enabled) = call(
        &rt,
        &partner,
        "POST",
        &format!("/v1/webhooks/{id}/enable"),
        Some(json!({"replaySince": since})),
    );
    assert_eq!(status, 200, "{enabled}");
    assert_eq!(enabled["data"]["status"], "active");
    // What reached the subscription's URL (the alerts go to /alerts).
    type Request = (String, Vec<(String, String)>, Vec<u8>);
    let delivered = |s: &[Request]| -> Vec<Request> {
        s.iter().filter(|(p, _, _)| p == "/in").cloned().collect()
    };
    wait_for(&seen, "every missed event", |s| delivered(s).len() >= 3 + 4);
    let replayed: Vec<_> = delivered(&seen.lock().expect("lock"))[3..].to_vec();
    let mut ids: Vec<String> = replayed
        .iter()
        .map(|(_, h, _)| header(h, "x-service-delivery-id").expect("id").to_owned())
        .collect();
    ids.sort();
    missed.sort();
    assert_eq!(
        ids, missed,
        "every missed event, under its original delivery id"
    );
    let mut loads: Vec<String> = replayed
        .iter()
        .map(|(_, _, b)| String::from_utf8_lossy(b).into_owned())
        .collect();
    loads.sort();
    assert_eq!(
        loads,
        [
            r#"{"id":"L-1"}"#,
            r#"{"id":"L-2"}"#,
            r#"{"id":"L-3"}"#,
            r#"{"id":"L-4"}"#
        ]
    );
    for (_, headers, body) in &replayed {
        assert!(
            edgehook_testkit::signature::verifies(
                &secret,
                header(headers, "x-service-timestamp"),
                header(headers, "x-service-signature"),
                body
            ),
            "signed with the subscription's secret"
        );
    }
    let job = enabled["replay"]["id"].as_str().expect("job");
    let end = Instant::now() + DEADLINE;
    loop {
        let (_, progress) = call(&rt, &partner, "GET", &format!("/v1/replays/{job}"), None);
        if progress["data"]["state"] == "done" {
            assert_eq!(
                (&progress["data"]["total"], &progress["data"]["done"]),
                (&json!(4), &json!(4))
            );
            break;
        }
        assert!(Instant::now() < end, "the job did not finish: {progress}");
        std::thread::park_timeout(Duration::from_millis(50));
    }
    // The enable was alerted too.
    wait_for(&seen, "the enable's alert", |s| {
        s.iter().any(|(p, h, _)| {
            p == "/alerts" && header(h, "x-service-event") == Some("subscription.enabled")
        })
    });
    drop(server);
}
