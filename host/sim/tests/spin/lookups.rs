//! The walk's last partner steps on Spin: a subscription changed in place (`PATCH` of its
//! `url` and `eventTypes`: same id, same secret, the next event goes to the new URL only),
//! and where a load went (the operator finds the event by the load's id and by its own id,
//! with the delivery it made; the partner sees its own). Run after the other steps, on a
//! subscription of its own, so their counts are untouched.

use super::harness::*;
use super::{Made, publish};
use serde_json::{Value, json};

/// Whether `event`'s deliveries include one to `sub`.
fn delivered_to(event: &Value, sub: &str) -> bool {
    event["deliveries"]
        .as_array()
        .is_some_and(|d| d.iter().any(|d| d["subscriptionId"] == sub))
}

pub fn changed_and_found(w: &mut Walk, made: &Made, receiver: &Receiver) {
    let acme = Who::Bearer(&made.acme);
    let step = "create /ok/before for load.updated";
    let body = json!({"url": receiver.url("/ok/before"), "eventTypes": ["load.updated"]});
    let Some(r) = w.call(step, 201, post("/v1/webhooks", acme).json(&body)) else {
        return w.skip("the change in place", step);
    };
    let id = r.data()["id"].as_str().unwrap_or_default().to_owned();
    let secret = r.data()["signingSecret"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let step = "PATCH its url and eventTypes";
    let change = json!({"url": receiver.url("/ok/after"), "eventTypes": ["load.status_changed"]});
    if let Some(r) = w.call(
        step,
        200,
        patch(format!("/v1/webhooks/{id}"), acme).json(&change),
    ) {
        let d = r.data();
        let ok = d["id"] == id.as_str()
            && d["url"] == receiver.url("/ok/after").as_str()
            && d["eventTypes"] == json!(["load.status_changed"]);
        w.check(step, ok, &r.text);
    }
    let step = "publish load.status_changed (changed in place)";
    let Some(r) = w.call(step, 202, publish("load.status_changed")) else {
        return w.skip("where the load went", step);
    };
    let event = r.data()["eventId"].as_str().unwrap_or_default().to_owned();
    let step = "the new URL gets it, signed with the same secret; the old nothing";
    let got = receiver.wait_for("/ok/after", 1);
    w.check(
        step,
        got.first().is_some_and(|r| signed_by(&secret, r)) && receiver.on("/ok/before").is_empty(),
        format!(
            "after {}, before {}",
            got.len(),
            receiver.on("/ok/before").len()
        ),
    );

    let step = "the operator finds the load's events by its id";
    let found = get("/internal/v1/events?loadId=L-spin-1", Who::Operator);
    if let Some(r) = w.call(step, 200, found) {
        let events = r.data().as_array().cloned().unwrap_or_default();
        let ok = events
            .iter()
            .any(|e| e["id"] == event.as_str() && delivered_to(e, &id));
        w.check(step, ok, &r.text);
    }
    let step = "the operator reads the event with its deliveries";
    let one = get(format!("/internal/v1/events/{event}"), Who::Operator);
    if let Some(r) = w.call(step, 200, one) {
        w.check(step, delivered_to(r.data(), &id), &r.text);
    }
    let step = "the partner reads it too, and another client does not see it";
    if let Some(r) = w.call(step, 200, get(format!("/v1/events/{event}"), acme)) {
        let own = r.data()["deliveries"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mine: Vec<&str> = made.subs.iter().map(|(s, _)| s.as_str()).collect();
        let ok = delivered_to(r.data(), &id)
            && own.iter().all(|d| {
                d["subscriptionId"] == id.as_str()
                    || mine.contains(&d["subscriptionId"].as_str().unwrap_or(""))
            });
        w.check(step, ok, &r.text);
    }
    let globex = Who::Bearer(&made.globex);
    w.refused(
        "another client's lookup of the event",
        (404, "not_found"),
        get(format!("/v1/events/{event}"), globex),
    );
}
