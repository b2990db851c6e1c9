//! Target `idempotency_key`: `Idempotency-Key` on create (`POST /v1/webhooks`) and on event
//! ingest (`POST /internal/v1/events`): key validation, replay, conflict, the 60 s claim and
//! the 24 h expiry, with store faults in between.
//!
//! Input: one step per line (at most 16), `OBTF KEY`:
//! - `O` the operation: `C` create as client A, `c` create as client B, `E` ingest an
//!   event, `D` delete A's latest subscription (anything else: only move the clock);
//! - `B` which body (`0`-`3`; other bytes modulo 4): three valid ones that differ (`2` is
//!   `0` with other whitespace: the same JSON, not the same body) and an invalid one;
//! - `T` a clock step before the request: `0` none, `1` +1 s, `2` +59 s, `3` +61 s,
//!   `4` +1 h, `5` +24 h − 1 ms, `6` +24 h, `7` −1 h, `8` −61 s, `9` +25 h;
//! - `F` a store fault: `-` or `0` none, otherwise the store operation number
//!   (byte modulo 32, plus 1) that fails during the request;
//! - after one separator byte, `KEY`: the raw `Idempotency-Key` value, any bytes up to the
//!   end of the line (absent when the line is shorter than 5 bytes).
//!
//! Checked, besides every response and the [`crate::model`] (same key + same body within
//! 24 h → the same `data` with `Idempotent-Replayed: true`; never two creates under one key;
//! a 409 only with a reason):
//! - a key that is not 1-255 printable ASCII characters is a 422 naming `Idempotency-Key`
//!   (and `idempotency::check_key` agrees), a valid one never is;
//! - without faults a valid request answers 201/202, or 409 (key conflict), or 422 (the
//!   subscription cap);
//! - at the end, each client's list is exactly the subscriptions the model saw created and
//!   not deleted: no duplicate from a replay, none half-made by a fault.

use crate::model::valid_idempotency_key;
use crate::world::{ADMIN_TOKEN, CLIENT_A, CLIENT_B, World, bearer};
use edgehook_component::api::idempotency;
use edgehook_component::model::http::Request;

const CREATE_BODIES: [&str; 4] = [
    r#"{"url":"https://a.example.com/hook","eventTypes":["load.created"]}"#,
    r#"{"url":"https://b.example.com/hook","eventTypes":["load.updated","load.created"]}"#,
    r#"{ "url": "https://a.example.com/hook", "eventTypes": ["load.created"] }"#,
    r#"{"url":"http://a.example.com/hook","eventTypes":["load.created"]}"#,
];

const EVENTS: [(&str, &str); 4] = [
    ("load.created", r#"{"id":"L-1","status":"ASSIGNED"}"#),
    (
        "load.status_changed",
        r#"{"id":"L-1","status":"DELIVERED"}"#,
    ),
    ("load.updated", r#"{"id":"L-1","status":"ASSIGNED"}"#),
    ("load.created", r#"{"status":"ASSIGNED"}"#),
];

/// Most steps one input may hold.
pub const MAX_STEPS: usize = 16;

fn clock_step(b: u8) -> i64 {
    const HOUR: i64 = 3_600_000;
    match b {
        b'1' => 1_000,
        b'2' => 59_000,
        b'3' => 61_000,
        b'4' => HOUR,
        b'5' => 24 * HOUR - 1,
        b'6' => 24 * HOUR,
        b'7' => -HOUR,
        b'8' => -61_000,
        b'9' => 25 * HOUR,
        _ => 0,
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut w = World::new(&[("subscription_limit", "4")]);
    for line in data.split(|b| *b == b'\n').take(MAX_STEPS) {
        let byte = |i: usize| line.get(i).copied().unwrap_or(b'0');
        let variant = usize::from(byte(1) % 4);
        w.advance(clock_step(byte(2)));
        let fault = match byte(3) {
            b'-' | b'0' => None,
            b => Some(u64::from(b % 32) + 1),
        };
        let key = line.get(5..);
        let req = match byte(0) {
            op @ (b'C' | b'c') => {
                let token = if op == b'C' {
                    &w.seed.key_a
                } else {
                    &w.seed.key_b
                };
                Request::new("POST", "/v1/webhooks")
                    .header("authorization", &bearer(token))
                    .header("content-type", "application/json")
                    .body(CREATE_BODIES[variant])
            }
            b'E' => {
                let (event_type, load) = EVENTS[variant];
                Request::new("POST", "/internal/v1/events")
                    .header("authorization", &bearer(ADMIN_TOKEN))
                    .header("content-type", "application/json")
                    .header("x-service-event", event_type)
                    .body(load)
            }
            b'D' => {
                let Some(id) = w.model.active_of(CLIENT_A).last().cloned() else {
                    continue;
                };
                Request::new("DELETE", &format!("/v1/webhooks/{id}"))
                    .header("authorization", &bearer(&w.seed.key_a))
            }
            _ => continue,
        };
        let mut req = req;
        if let Some(key) = key
            && byte(0) != b'D'
        {
            req.headers
                .push(("idempotency-key".to_owned(), key.to_vec()));
            if let Ok(s) = std::str::from_utf8(key) {
                assert_eq!(
                    idempotency::check_key(s).is_ok(),
                    valid_idempotency_key(key),
                    "check_key disagrees on {s:?}"
                );
            }
        }
        w.kv.fail_at(fault);
        let reply = w.request(&req, fault.is_some());
        w.kv.fail_at(None);
        let ctx = || format!("{:?} -> {}", String::from_utf8_lossy(line), reply.text);
        if fault.is_some() || byte(0) == b'D' {
            continue;
        }
        let key_ok = key.is_none_or(valid_idempotency_key);
        let fields = reply.detail_fields();
        match (byte(0), variant, key_ok) {
            // Create validates the body first, then the key.
            (b'C' | b'c', 3, _) => {
                assert_eq!(reply.status, 422, "an invalid body was accepted: {}", ctx());
                assert_eq!(fields, ["url"], "{}", ctx());
            }
            // Ingest checks the key before it looks at the load.
            (_, _, false) => {
                assert_eq!(reply.status, 422, "an invalid key was accepted: {}", ctx());
                assert_eq!(fields, ["Idempotency-Key"], "{}", ctx());
            }
            (_, 3, true) => {
                assert_eq!(reply.status, 422, "an invalid load was accepted: {}", ctx());
                assert_eq!(fields, ["body"], "{}", ctx());
            }
            (_, _, true) => {
                let ok = matches!(reply.status, 201 | 202 | 409)
                    || reply.code() == Some("subscription_limit_reached");
                assert!(ok, "a valid request failed: {}", ctx());
            }
        }
    }
    for (client, key) in [
        (CLIENT_A, w.seed.key_a.clone()),
        (CLIENT_B, w.seed.key_b.clone()),
    ] {
        let list = w.partner(&key, "GET", "/v1/webhooks?limit=100", b"");
        let listed: Vec<String> = list.body["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|i| i["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            listed,
            w.model.active_of(client),
            "{client}'s subscriptions are not the ones created and not deleted: {}",
            list.text
        );
    }
}
