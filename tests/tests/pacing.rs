//! Pacing per subscription on the simulator: a cap on attempts in flight and a
//! rate, both set by the owner, and the default cap that a slow receiver is put under. A wave
//! of retries that all come due in the same second shows each: without pacing, a tick sends
//! the whole wave in one batch.

use crate::common::*;
use edgehook_sim::simnet::Reply;
use serde_json::json;
use std::time::Duration;

const URL: &str = "https://hooks.example.com/paced";

/// A subscription with `options`, ten events published at one instant whose attempt 1 fails
/// at once (500), then retries answered with `retry`: returns the arrival times (ms) of the
/// retries. With `warm`, one event before them whose attempt answers that way first (and its
/// retry 200).
fn retry_wave(
    seed: u64,
    options: serde_json::Value,
    warm: Option<Reply>,
    retry: Reply,
) -> Vec<u64> {
    // Retries a second after attempt 1 (no jitter at that delay): all ten in one second.
    let mut sim = sim_with(seed, &[("retry_delays_ms", "1000,1000")]);
    let key = issue_key(&mut sim, "acme");
    // The warm-up event's attempt, then its retry (which succeeds).
    let mut script: Vec<Reply> = warm.iter().cloned().collect();
    if warm.is_some() {
        script.push(Reply::Status(200));
    }
    script.extend(vec![Reply::Status(500); 10]);
    script.extend(std::iter::repeat_n(retry, 10));
    sim.net().endpoint(URL, script);
    let mut body = json!({"url": URL, "eventTypes": ["load.created"]});
    for (k, v) in options.as_object().expect("options") {
        body[k] = v.clone();
    }
    let created = create_with(&mut sim, &key, &body, &[]);
    assert_eq!(created.status, 201, "{}", created.json());
    let warmed = 2 * usize::from(warm.is_some());
    if warmed > 0 {
        let warm_up = ingest(&mut sim, "load.created", br#"{"id":"W"}"#, &[]);
        assert_eq!(warm_up.status, 202);
        sim.advance(Duration::from_secs(60)).expect("advance");
    }
    for n in 0..10 {
        let load = format!("{{\"id\":\"L{n}\"}}");
        let published = ingest(&mut sim, "load.created", load.as_bytes(), &[]);
        assert_eq!(published.status, 202);
    }
    sim.advance(Duration::from_secs(10 * 60)).expect("advance");
    let got = sim.net().received_by(URL);
    assert_eq!(got.len(), warmed + 20, "ten attempts 1, ten retries");
    got[warmed + 10..].iter().map(|r| r.at_ms).collect()
}

/// The most requests that started within `window_ms` of each other.
fn most_within(times: &[u64], window_ms: u64) -> usize {
    times
        .iter()
        .map(|t| {
            times
                .iter()
                .filter(|u| **u >= *t && **u < t + window_ms)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn without_pacing_a_tick_sends_the_whole_wave_at_once() {
    let slow = Reply::Delayed {
        delay: Duration::from_millis(300),
        status: 200,
    };
    let times = retry_wave(501, json!({}), None, slow);
    assert_eq!(most_within(&times, 100), 10, "{times:?}");
}

#[test]
fn max_in_flight_caps_the_attempts_in_flight() {
    let slow = Reply::Delayed {
        delay: Duration::from_secs(5),
        status: 200,
    };
    let times = retry_wave(502, json!({"maxInFlight": 2}), None, slow);
    // Two at a time; the rest wait for the slots (on the simulator a batch's answers come
    // back within its tick, so the next pair goes a second later).
    assert_eq!(most_within(&times, 999), 2, "{times:?}");
    let spread = times.iter().max().unwrap_or(&0) - times.iter().min().unwrap_or(&0);
    assert!(spread >= 4_000, "five pairs, {spread} ms: {times:?}");
}

#[test]
fn rate_limit_spaces_the_starts() {
    let times = retry_wave(503, json!({"rateLimit": 2}), None, Reply::Status(200));
    // A second's worth of burst (3), then two a second.
    assert!(most_within(&times, 1_000) <= 3, "{times:?}");
    let spread = times.iter().max().unwrap_or(&0) - times.iter().min().unwrap_or(&0);
    assert!(spread >= 3_000, "ten at 2/s, {spread} ms: {times:?}");
}

#[test]
fn a_slow_receiver_is_put_under_the_default_cap() {
    // One attempt times out (slow; on the simulator the network's delays take no time, so a
    // timeout is how a receiver shows slow here); then the retry wave goes 8 at a time.
    let timeout = Reply::Delayed {
        delay: Duration::from_secs(60),
        status: 200,
    };
    let times = retry_wave(504, json!({}), Some(timeout), Reply::Status(200));
    assert_eq!(most_within(&times, 999), 8, "{times:?}");
}

#[test]
fn bad_limits_are_refused_and_change_nothing() {
    let mut sim = sim(505);
    let key = issue_key(&mut sim, "acme");
    for bad in [
        json!({"maxInFlight": 0}),
        json!({"maxInFlight": 257}),
        json!({"rateLimit": 1001}),
        json!({"rateLimit": "fast"}),
    ] {
        let mut body = json!({"url": URL, "eventTypes": ["load.created"]});
        for (k, v) in bad.as_object().expect("object") {
            body[k] = v.clone();
        }
        let resp = create_with(&mut sim, &key, &body, &[]);
        assert_error(&resp, 422, "validation_failed");
    }
    assert!(list_ids(&mut sim, &key).is_empty());
    let body = json!({"url": URL, "eventTypes": ["load.created"], "maxInFlight": 3});
    let created = create_with(&mut sim, &key, &body, &[]).json()["data"].clone();
    assert_eq!(
        (
            created["maxInFlight"].as_u64(),
            created["rateLimit"].as_u64()
        ),
        (Some(3), None)
    );
    let id = created["id"].as_str().expect("id");
    let auth = bearer(&key);
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let path = format!("/v1/webhooks/{id}");
    let reset = sim
        .request(
            "PATCH",
            &path,
            &headers,
            br#"{"maxInFlight":null,"rateLimit":5}"#,
        )
        .expect("patch")
        .json();
    assert_eq!(
        reset["data"]["maxInFlight"],
        serde_json::Value::Null,
        "{reset}"
    );
    assert_eq!(reset["data"]["rateLimit"], 5);
}
