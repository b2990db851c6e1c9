//! A subscription's lifecycle after an outage on `edgehook serve`, end to end: a receiver
//! fails until its subscription is disabled, the operator is alerted (a signed
//! `subscription.disabled`), events keep coming and are recorded as skipped, the partner
//! sees `disabled` with its reason, fixes the receiver, enables with `replaySince`, and the
//! receiver gets every missed event under its original delivery id, each signature checked
//! by the test kit's own HMAC (not the component's).

use crate::common::*;
use edgehook::cli::Remote;
use edgehook_testkit::receiver::Received;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const ALERT_SECRET: &str = "whsec_the-operators-alert-secret-0123";

/// A loopback receiver that keeps every request and answers 500 while `failing` (and 200
/// to the operator's alerts, on `/alerts`).
fn receiver(rt: &tokio::runtime::Runtime) -> (Receiver, Arc<AtomicBool>) {
    let failing = Arc::new(AtomicBool::new(true));
    let f = failing.clone();
    let receiver = Receiver::builder().answer_by(move |request, _| {
        if request.path != "/alerts" && f.load(Ordering::SeqCst) {
            Answer::status(500)
        } else {
            Answer::status(200)
        }
    });
    (rt.block_on(receiver.start()), failing)
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
    let (recv, failing) = receiver(&rt);
    let port = recv.port();
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
    wait_for("the alert", || !recv.received_on("/alerts").is_empty());
    let alert = recv.received_on("/alerts").remove(0);
    assert_eq!(
        alert.header("x-service-event"),
        Some("subscription.disabled")
    );
    assert!(edgehook_testkit::signature::verifies(
        ALERT_SECRET,
        alert.header("x-service-timestamp"),
        alert.header("x-service-signature"),
        &alert.body
    ));
    let alert: Value = serde_json::from_slice(&alert.body).expect("json");
    assert_eq!(
        (&alert["subscriptionId"], &alert["disabledReason"]),
        (&json!(id), &json!("repeated_failures"))
    );
    assert_eq!(recv.received_on("/in").len(), 3, "three failed attempts");

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
    assert_eq!(recv.received_on("/in").len(), 3);

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
    wait_for("every missed event", || {
        recv.received_on("/in").len() >= 3 + 4
    });
    let replayed = recv.received_on("/in").split_off(3);
    let mut ids: Vec<String> = replayed
        .iter()
        .map(|r| r.header("x-service-delivery-id").expect("id").to_owned())
        .collect();
    ids.sort();
    missed.sort();
    assert_eq!(
        ids, missed,
        "every missed event, under its original delivery id"
    );
    let mut loads: Vec<String> = replayed.iter().map(Received::text).collect();
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
    for r in &replayed {
        assert!(
            edgehook_testkit::signature::verifies(
                &secret,
                r.header("x-service-timestamp"),
                r.header("x-service-signature"),
                &r.body
            ),
            "signed with the subscription's secret"
        );
    }
    let job = enabled["replay"]["id"].as_str().expect("job");
    let progress = wait_for("the replay job to finish", || {
        let (_, progress) = call(&rt, &partner, "GET", &format!("/v1/replays/{job}"), None);
        if progress["data"]["state"] == "done" {
            Ok(progress)
        } else {
            Err(progress)
        }
    });
    assert_eq!(
        (&progress["data"]["total"], &progress["data"]["done"]),
        (&json!(4), &json!(4))
    );
    // The enable was alerted too.
    wait_for("the enable's alert", || {
        let alerts = recv.received_on("/alerts");
        alerts
            .iter()
            .any(|r| r.header("x-service-event") == Some("subscription.enabled"))
    });
    drop(server);
}
