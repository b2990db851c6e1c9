//! The partner's notices on Spin: acme registers a notification endpoint on the receiver
//! before the walk's deliveries, and the `410 Gone` that disables `/gone/1` reaches it as a
//! `subscription.disabled` notice signed with the endpoint's own secret.

use super::Made;
use super::harness::*;
use serde_json::json;

/// The walk's `deliveries` step with acme's notification endpoint registered before it and
/// the notice of `/gone/1`'s disable checked after it.
pub fn around(
    w: &mut Walk,
    made: &Made,
    receiver: &Receiver,
    deliveries: fn(&mut Walk, &Made, &Receiver),
) {
    let secret = register(w, &made.acme, receiver);
    deliveries(w, made, receiver);
    disabled(w, receiver, &secret, made.id(2));
}

/// Registers `/ok/notices` as acme's notification endpoint; its signing secret.
fn register(w: &mut Walk, key: &str, receiver: &Receiver) -> String {
    let step = "register acme's notification endpoint";
    let body = json!({"url": receiver.url("/ok/notices")});
    let Some(r) = w.call(
        step,
        201,
        put("/v1/notification-endpoint", Who::Bearer(key)).json(&body),
    ) else {
        return String::new();
    };
    let secret = r.data()["signingSecret"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    w.check(step, secret.starts_with("whsec_"), &r.text);
    secret
}

/// After `/gone/1` (`gone`) was disabled: its notice, signed with `secret`.
fn disabled(w: &mut Walk, receiver: &Receiver, secret: &str, gone: &str) {
    // The notice is due from the second after the disable: a tick in the same second does
    // not send it yet, the next one does.
    let mut got = Vec::new();
    for n in 1..=3 {
        let tick = post("/internal/v1/tick", Who::Operator);
        w.call(&format!("tick {n} (notices)"), 200, tick);
        got = receiver.wait_for("/ok/notices", 1);
        if !got.is_empty() {
            break;
        }
    }
    let step = "the disable reaches acme's notification endpoint, signed";
    let Some(r) = got.first() else {
        return w.fail(step, "not received");
    };
    let notice: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
    let ok = notice["type"] == "subscription.disabled"
        && notice["subscriptionId"] == gone
        && notice["reason"] == "gone";
    w.check(step, ok, &notice);
    w.check(
        step,
        signed_by(secret, r),
        "not signed with the endpoint's secret",
    );
}
