//! The walk's delivery options on Spin: Standard Webhooks signatures and a partner's own
//! header, a rotation's overlap (both secrets verify), and FIFO ordering (a delivery held
//! behind a failing head until the tick releases it). Run last, on `/ok/3` and a FIFO
//! subscription of its own, so the earlier steps' counts are untouched.

use super::harness::*;
use super::publish;
use edgehook_testkit::signature::verifies_standard;
use serde_json::json;

fn standard_by(secret: &str, r: &Received) -> bool {
    verifies_standard(
        secret,
        r.header("webhook-id"),
        r.header("webhook-timestamp"),
        r.header("webhook-signature"),
        &r.body,
    )
}

/// `sub` is `/ok/3`'s id (load.status_changed), created with `secret`; `key` its owner's.
pub fn delivery_options(w: &mut Walk, key: &str, sub: &str, secret: &str, receiver: &Receiver) {
    let owner = Who::Bearer(key);
    let step = "switch /ok/3 to Standard Webhooks with a header";
    let body = json!({"signatureScheme": "standard", "headers": {"X-Receiver-Token": "tok-3"}});
    let path = format!("/v1/webhooks/{sub}");
    let Some(r) = w.call(step, 200, patch(&path, owner).json(&body)) else {
        return w.skip("the delivery options", step);
    };
    let old = r.data()["signingSecret"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    w.check(step, old.starts_with("whsec_") && old != secret, &r.text);
    let step = "rotate /ok/3's secret with an overlap";
    let rotate = post(format!("{path}/rotate-secret"), owner).json(&json!({"overlapSeconds": 600}));
    let Some(r) = w.call(step, 200, rotate) else {
        return w.skip("the rotated delivery", step);
    };
    let new = r.data()["signingSecret"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let before = receiver.on("/ok/3").len();
    if w.call(
        "publish load.status_changed (options)",
        202,
        publish("load.status_changed"),
    )
    .is_some()
    {
        let step = "a Standard Webhooks delivery, both secrets verify, the header sent";
        let got = receiver.wait_for("/ok/3", before + 1);
        match got.get(before) {
            None => w.fail(step, "not received"),
            Some(r) => {
                w.check(
                    step,
                    standard_by(&new, r) && standard_by(&old, r),
                    format!("{:?}", r.headers),
                );
                w.check(step, !standard_by("whsec_AAAA", r), "any secret verifies");
                w.check(
                    step,
                    r.header("x-receiver-token") == Some("tok-3"),
                    "no X-Receiver-Token",
                );
                w.check(
                    step,
                    r.header("x-service-signature").is_none(),
                    "a SPEC signature too",
                );
            }
        }
    }

    // FIFO: a subscription whose receiver fails its first request; two events; the tick
    // releases the first, whose failure holds the second.
    let step = "create a FIFO subscription";
    let body = json!({"url": receiver.url("/flaky/fifo"), "eventTypes": ["load.updated"], "ordering": "fifo"});
    let Some(created) = w.call(step, 201, post("/v1/webhooks", owner).json(&body)) else {
        return w.skip("FIFO on Spin", step);
    };
    let fifo = created.data()["id"].as_str().unwrap_or_default().to_owned();
    for n in 1..=2 {
        w.call(
            &format!("publish load.updated {n} (FIFO)"),
            202,
            publish("load.updated"),
        );
    }
    for n in 1..=2 {
        w.call(
            &format!("tick {n} (FIFO)"),
            200,
            post("/internal/v1/tick", Who::Operator),
        );
    }
    let step = "the FIFO head is attempted, the next held behind its failure";
    receiver.wait_for("/flaky/fifo", 1);
    let list = get(format!("/v1/webhooks/{fifo}/deliveries"), owner);
    if let Some(r) = w.call(step, 200, list) {
        // In publish order: the head, pending its retry after one failed attempt; then the
        // second event's delivery, held (never attempted, no due time).
        let d = &r.data();
        let attempts = |i: usize| d[i]["attempts"].as_array().map_or(0, Vec::len);
        let ok = d[0]["createdAt"].as_u64() <= d[1]["createdAt"].as_u64()
            && d[0]["status"] == "pending"
            && attempts(0) == 1
            && d[1]["status"] == "pending"
            && attempts(1) == 0
            && d[1]["nextAttemptAt"].is_null();
        w.check(step, ok, &r.text);
    }
    w.check(
        step,
        receiver.on("/flaky/fifo").len() == 1,
        "the second was sent",
    );
}
