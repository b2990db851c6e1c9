//! A seal key rotation on Spin, on one Redis store across three starts of the application:
//! secrets sealed under the first key; then the new key with the old one as
//! `seal_previous_key`, deliveries verifying, and the operator's re-seal pass (`POST
//! /internal/v1/secrets/reseal` until `done`) sealing every secret under the new key; then
//! the new key alone, deliveries still verifying with the partner's secret, and the dump of
//! the store holding no form of it.

use super::harness::*;
use super::{LOOPBACK_TARGETS, publish};
use edgehook_sim::spin;
use edgehook_testkit::rt;
use edgehook_testkit::secrets::{holds, needles};
use serde_json::{Value, json};

/// The key the suite's walks do not use.
const NEW_KEY: &str = "0dd50dd50dd50dd50dd50dd50dd50dd50dd50dd50dd50dd50dd50dd50dd50dd5";

/// Publishes one `load.created`; whether the next delivery to `/ok/rot` verifies with
/// `secret`.
fn delivered(w: &mut Walk, receiver: &Receiver, step: &str, secret: &str) {
    let before = receiver.on("/ok/rot").len();
    if w.call(step, 202, publish("load.created")).is_none() {
        return;
    }
    let got = receiver.wait_for("/ok/rot", before + 1);
    match got.get(before) {
        None => w.fail(step, "not received"),
        Some(r) => {
            w.check(step, signed_by(secret, r), format!("{:?}", r.headers));
        }
    }
}

/// A whole re-seal pass, a record a call: the records re-sealed.
fn reseal_pass(w: &mut Walk, step: &str) -> u64 {
    let (mut resealed, mut body) = (0, json!({"limit": 1}));
    for _ in 0..50 {
        let call = post("/internal/v1/secrets/reseal", Who::Operator).json(&body);
        let Some(r) = w.call(step, 200, call) else {
            return resealed;
        };
        resealed += r.data()["resealed"].as_u64().unwrap_or(0);
        match &r.data()["nextCursor"] {
            Value::String(cursor) => body = json!({"limit": 1, "cursor": cursor}),
            _ => return resealed,
        }
    }
    w.fail(step, "the pass did not end in 50 calls");
    resealed
}

#[test]
fn spin_rotates_the_seal_key_and_the_reseal_pass_lets_the_old_one_go() {
    let Some((binary, redis)) = spin_and_redis() else {
        return;
    };
    let rt = rt();
    let receiver = Receiver::start(&rt);
    let config = spin::redis_runtime_config(&redis.url()).expect("runtime config");
    let start = |name: &str, keys: &[(&str, &str)]| {
        let vars: Vec<(&str, &str)> = LOOPBACK_TARGETS.iter().chain(keys).copied().collect();
        start_spin(name, binary.clone(), &receiver, &config, &vars)
    };
    let mut w = Walk::new("spin-redis-rotation", start("rotation-1", &[]), rt);
    let Some(key) = w.call(
        "issue key",
        201,
        post("/internal/v1/clients/acme/keys", Who::Operator),
    ) else {
        w.stop("an API key");
    };
    let key = key.data()["apiKey"].as_str().unwrap_or_default().to_owned();
    let body = json!({"url": receiver.url("/ok/rot"), "eventTypes": ["load.created"]});
    let Some(sub) = w.call(
        "create",
        201,
        post("/v1/webhooks", Who::Bearer(&key)).json(&body),
    ) else {
        w.stop("a subscription");
    };
    let secret = sub.data()["signingSecret"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    delivered(&mut w, &receiver, "a delivery under the first key", &secret);

    // The new key, the old one as the previous: still verifying; the pass seals it anew.
    let rotating = [("seal_key", NEW_KEY), ("seal_previous_key", SEAL_KEY)];
    w.restart(start("rotation-2", &rotating));
    delivered(&mut w, &receiver, "a delivery during the rotation", &secret);
    let resealed = reseal_pass(&mut w, "the re-seal pass");
    w.check(
        "the re-seal pass",
        resealed == 1,
        format!("{resealed} re-sealed"),
    );

    // The new key alone.
    w.restart(start("rotation-3", &[("seal_key", NEW_KEY)]));
    delivered(
        &mut w,
        &receiver,
        "a delivery under the new key alone",
        &secret,
    );
    let dump = redis.dump_file();
    w.check(
        "the store holds no form of the secret",
        !holds(&dump, &needles(&[&secret])) && holds(&dump, &[key_id(&sub.data()["id"])]),
        "the secret, or not the subscription's id, in the dump",
    );
    w.report();
}

/// A subscription id's bytes (what the store is known to hold).
fn key_id(id: &Value) -> Vec<u8> {
    id.as_str().unwrap_or("(no id)").as_bytes().to_vec()
}
