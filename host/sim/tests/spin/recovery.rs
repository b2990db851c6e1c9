//! Recovery by itself on Spin (`auto_recover`, with `recover_delays_ms` at one second so the
//! back-off fits a test): a subscription whose receiver fails one delivery's three attempts
//! is disabled (a streak of one), a load published meanwhile is skipped, and the tick route
//! then sends a signed `webhook.ping` probe; the receiver, back, answers 200, and the
//! subscription is enabled again, the skipped load replayed, the probe shown in its history
//! and the partner told (`subscription.enabled`, reason `recovered`). Once on Spin's SQLite
//! store, once on Redis.

use super::harness::*;
use super::publish;
use edgehook_sim::spin;
use edgehook_testkit::rt;
use edgehook_testkit::spin::binary_or_skip;
use serde_json::{Value, json};
use std::time::Duration;

/// The receiver path that fails three requests, then answers 200.
const BACK: &str = "/back/1";
/// The partner's notification endpoint.
const NOTICES: &str = "/ok/recovery-notices";

/// Short delays and no opportunistic tick: only the tick route sends retries and probes.
const VARS: &[(&str, &str)] = &[
    ("allow_private_targets", "true"),
    ("retry_delays_ms", "1000,1000"),
    ("opportunistic_tick_s", "0"),
    ("disable_after_failures", "1"),
    ("auto_recover", "true"),
    ("recover_delays_ms", "1000"),
];

#[test]
fn spin_sqlite_recovers_a_subscription_by_itself() {
    let Some(binary) = binary_or_skip() else {
        return;
    };
    let rt = rt();
    let receiver = Receiver::start(&rt);
    let app = start_spin("recover-sqlite", binary, &receiver, "", VARS);
    recovers(Walk::new("spin-sqlite", app, rt), &receiver);
}

#[test]
fn spin_redis_recovers_a_subscription_by_itself() {
    let Some((binary, redis)) = spin_and_redis() else {
        return;
    };
    let rt = rt();
    let receiver = Receiver::start(&rt);
    let config = spin::redis_runtime_config(&redis.url()).expect("runtime config");
    let app = start_spin("recover-redis", binary, &receiver, &config, VARS);
    recovers(Walk::new("spin-redis", app, rt), &receiver);
}

fn recovers(mut w: Walk, receiver: &Receiver) {
    let (key, id, secret, notice_secret) = setup(&mut w, receiver);
    if w.call("publish L-1", 202, publish("load.created"))
        .is_none()
    {
        w.stop("an event");
    }
    // Attempts 1 to 3 a second apart, the disable, then the probe a second later.
    tick_until(&mut w, "three attempts", || receiver.on(BACK).len() >= 3);
    w.poll(
        "disabled by the failures",
        &format!("/internal/v1/subscriptions/{id}"),
        |d| d["status"] == "disabled" && d["disabledReason"] == "repeated_failures",
    );
    if w.call("publish L-2 (skipped)", 202, publish("load.created"))
        .is_none()
    {
        w.stop("a skipped event");
    }
    tick_until(&mut w, "the probe and the replay", || {
        receiver.on(BACK).len() >= 5 && enabled_notice(receiver).is_some()
    });
    let got = receiver.on(BACK);
    let event = |r: &Received| r.header("x-service-event").map(str::to_owned);
    let probe = got.get(3);
    w.check(
        "probe: a webhook.ping signed with the subscription's secret",
        probe.is_some_and(|p| event(p).as_deref() == Some("webhook.ping") && signed_by(&secret, p)),
        format!("received {} requests", got.len()),
    );
    let first = got.first().and_then(|r| r.header("x-service-delivery-id"));
    let replay = got.get(4);
    w.check(
        "the load missed while disabled, replayed and signed",
        replay.is_some_and(|r| {
            event(r).as_deref() == Some("load.created")
                && r.header("x-service-delivery-id") != first
                && signed_by(&secret, r)
        }),
        format!("received {} requests", got.len()),
    );
    let view = w.call(
        "read it",
        200,
        get(format!("/v1/webhooks/{id}"), Who::Bearer(&key)),
    );
    let status = view.as_ref().map(|r| r.data()["status"].clone());
    w.check(
        "enabled again",
        status == Some(json!("active")),
        format!("{status:?}"),
    );
    let history = format!("/v1/webhooks/{id}/deliveries");
    let history = w.call("its history", 200, get(history, Who::Bearer(&key)));
    let probe_id = probe.and_then(|p| p.header("x-service-delivery-id"));
    let recorded = history.as_ref().is_some_and(|h| {
        h.data().as_array().is_some_and(|list| {
            list.iter().any(|d| {
                d["eventType"] == "webhook.ping"
                    && d["status"] == "succeeded"
                    && d["id"].as_str() == probe_id
            })
        })
    });
    w.check(
        "the probe in the history",
        recorded,
        "no succeeded webhook.ping",
    );
    let notice = enabled_notice(receiver);
    let told = notice.as_ref().is_some_and(|(n, r)| {
        n["subscriptionId"] == id.as_str()
            && n["reason"] == "recovered"
            && signed_by(&notice_secret, r)
    });
    w.check(
        "the partner told, signed",
        told,
        format!("{:?}", notice.map(|n| n.0)),
    );
    w.report();
}

/// acme's key, its subscription to [`BACK`] (id and secret), and its notification endpoint
/// on [`NOTICES`] (its secret).
fn setup(w: &mut Walk, receiver: &Receiver) -> (String, String, String, String) {
    let issue = post("/internal/v1/clients/acme/keys", Who::Operator);
    let Some(r) = w.call("issue key", 201, issue) else {
        w.stop("an API key");
    };
    let key = r.data()["apiKey"].as_str().unwrap_or_default().to_owned();
    let body = json!({"url": receiver.url(BACK), "eventTypes": ["load.created"]});
    let Some(r) = w.call(
        "create",
        201,
        post("/v1/webhooks", Who::Bearer(&key)).json(&body),
    ) else {
        w.stop("the subscription");
    };
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let (id, secret) = (text(&r.data()["id"]), text(&r.data()["signingSecret"]));
    let body = json!({"url": receiver.url(NOTICES)});
    let put = put("/v1/notification-endpoint", Who::Bearer(&key)).json(&body);
    let Some(r) = w.call("register the notification endpoint", 201, put) else {
        w.stop("the notification endpoint");
    };
    let notice_secret = text(&r.data()["signingSecret"]);
    (key, id, secret, notice_secret)
}

/// The `subscription.enabled` notice received, with its request.
fn enabled_notice(receiver: &Receiver) -> Option<(Value, Received)> {
    receiver.on(NOTICES).into_iter().find_map(|r| {
        let notice: Value = serde_json::from_slice(&r.body).ok()?;
        (notice["type"] == "subscription.enabled").then_some((notice, r))
    })
}

/// Calls the tick route every 100 ms until `done` holds (up to [`WAIT`]).
fn tick_until(w: &mut Walk, step: &str, done: impl Fn() -> bool) {
    let reached = edgehook_testkit::poll(WAIT, Duration::from_millis(100), || {
        if done() {
            return Ok(());
        }
        let tick = w.send(&post("/internal/v1/tick", Who::Operator));
        Err(format!("{} {}", tick.status, tick.text))
    });
    if let Err(last) = reached {
        let last = last.unwrap_or_default();
        w.fail(step, format!("not within {WAIT:?}; last tick: {last}"));
    }
}
