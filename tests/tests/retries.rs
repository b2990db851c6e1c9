//! The retry schedule on virtual time and disabling, through the real component: every
//! failure kind retried, never a fourth attempt, the attempt timeout, 410 and repeated
//! failures disabling, and a disable cancelling what is pending.

use crate::common::*;
use crate::delivery::{URL, World};
use edgehook_sim::simnet::Reply;
use serde_json::Value;
use std::time::Duration;

/// Attempt times of the delivery, from the simulated endpoint.
fn attempt_times(w: &World, url: &str) -> Vec<u64> {
    w.sim
        .net()
        .received_by(url)
        .iter()
        .map(|r| r.at_ms)
        .collect()
}

#[test]
fn retries_follow_the_schedule_on_virtual_time() {
    let mut w = World::new(4);
    w.subscribe(
        URL,
        &["load.created"],
        vec![Reply::Status(500), Reply::Status(503), Reply::Status(200)],
    );
    let t0 = w.sim.now_ms();
    w.ingest("load.created", br#"{"id":"L-5"}"#, &[]);
    w.sim.advance(Duration::from_secs(3600)).expect("advance");
    let times = attempt_times(&w, URL);
    assert_eq!(times.len(), 3, "{times:?}");
    assert_eq!(times[0], t0);
    let (d1, d2) = (times[1] - times[0], times[2] - times[1]);
    assert!((60_000..=66_000).contains(&d1), "attempt 2 after {d1} ms");
    assert!((300_000..=330_000).contains(&d2), "attempt 3 after {d2} ms");
    let id = w.sim.net().received_by(URL)[0]
        .header("x-service-delivery-id")
        .expect("id")
        .to_owned();
    let ids: Vec<String> = w
        .sim
        .net()
        .received_by(URL)
        .iter()
        .map(|r| r.header("x-service-delivery-id").unwrap_or("").to_owned())
        .collect();
    assert!(
        ids.iter().all(|i| *i == id),
        "one delivery id across retries"
    );
    let d = w.delivery(&id);
    assert_eq!(d["status"], "succeeded");
    let attempts = d["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 3);
    for (a, at) in attempts.iter().zip(&times) {
        assert_eq!(a["startedAt"], *at, "recorded when it was sent");
        assert_eq!(a["dueAt"], *at, "sent exactly when due");
    }
    assert_eq!(attempts[0]["statusCode"], 500);
    assert_eq!(attempts[2]["succeeded"], true);
    // Each attempt is signed afresh with its own timestamp.
    let stamps: Vec<String> = w
        .sim
        .net()
        .received_by(URL)
        .iter()
        .map(|r| r.header("x-service-timestamp").unwrap_or("").to_owned())
        .collect();
    assert_eq!(stamps[1], (times[1] / 1000).to_string());
}

#[test]
fn every_failure_kind_is_retried_and_there_is_never_a_fourth_attempt() {
    let kinds = [
        Reply::Status(302),
        Reply::Status(400),
        Reply::Status(429),
        Reply::Status(500),
        Reply::Refused,
        Reply::NoSuchHost,
        Reply::Reset,
        Reply::Delayed {
            delay: Duration::from_secs(11),
            status: 200,
        },
    ];
    let mut w = World::new(5);
    let urls: Vec<String> = (0..kinds.len())
        .map(|i| format!("https://h{i}.example.com/hook"))
        .collect();
    for (url, kind) in urls.iter().zip(&kinds) {
        w.subscribe(url, &["load.created"], vec![kind.clone()]);
    }
    w.ingest("load.created", br#"{"id":"L-6"}"#, &[]);
    w.sim
        .advance(Duration::from_secs(6 * 3600))
        .expect("advance");
    for (url, kind) in urls.iter().zip(&kinds) {
        assert_eq!(
            attempt_times(&w, url).len(),
            3,
            "{kind:?} is a failure, retried to the limit"
        );
        let id = w.sim.net().received_by(url)[0]
            .header("x-service-delivery-id")
            .expect("id")
            .to_owned();
        let d = w.delivery(&id);
        assert_eq!(d["status"], "failed");
        assert!(d["nextAttemptAt"].is_null());
    }
    let first_id = |w: &World, url: &str| {
        w.sim.net().received_by(url)[0]
            .header("x-service-delivery-id")
            .expect("id")
            .to_owned()
    };
    let (timeout_id, refused_id) = (first_id(&w, &urls[7]), first_id(&w, &urls[4]));
    let timeout = w.delivery(&timeout_id);
    assert_eq!(timeout["attempts"][0]["error"], "timeout");
    let refused = w.delivery(&refused_id);
    assert_eq!(refused["attempts"][0]["error"], "connection refused");
    assert!(refused["attempts"][0]["statusCode"].is_null());
}

#[test]
fn the_attempt_timeout_is_configurable() {
    let mut w = World::with(builder(6).config("attempt_timeout_ms", "2000"));
    w.subscribe(
        URL,
        &["load.created"],
        vec![
            Reply::Delayed {
                delay: Duration::from_secs(3),
                status: 200,
            },
            Reply::Delayed {
                delay: Duration::from_secs(1),
                status: 200,
            },
        ],
    );
    w.ingest("load.created", br#"{"id":"L-7"}"#, &[]);
    w.sim.advance(Duration::from_secs(600)).expect("advance");
    assert_eq!(
        attempt_times(&w, URL).len(),
        2,
        "3 s > 2 s timed out, 1 s succeeded"
    );
}

fn subscription(w: &mut World, id: &str) -> Value {
    w.operator("GET", &format!("/internal/v1/subscriptions/{id}"))
        .json()["data"]
        .clone()
}

#[test]
fn gone_disables_at_once() {
    let mut w = World::new(7);
    let (id, _) = w.subscribe(URL, &["load.created"], vec![Reply::Status(410)]);
    w.ingest("load.created", br#"{"id":"L-8"}"#, &[]);
    w.sim.advance(Duration::from_secs(3600)).expect("advance");
    assert_eq!(attempt_times(&w, URL).len(), 1, "no retry after 410");
    let sub = subscription(&mut w, &id);
    assert_eq!(sub["status"], "disabled");
    assert_eq!(sub["disabledReason"], "gone");
    assert!(
        !String::from_utf8_lossy(
            &w.operator("GET", &format!("/internal/v1/subscriptions/{id}"))
                .body
        )
        .contains("whsec_")
    );
    w.ingest("load.created", br#"{"id":"L-9"}"#, &[]);
    w.sim.advance(Duration::from_secs(3600)).expect("advance");
    assert_eq!(
        attempt_times(&w, URL).len(),
        1,
        "a disabled subscription gets nothing new"
    );
    assert!(!list_ids(&mut w.sim, &w.key.clone()).contains(&id));
}

#[test]
fn repeated_failures_disable_and_a_success_resets_the_streak() {
    let mut w = World::with(builder(8).config("disable_after_failures", "2"));
    let fail3 = || vec![Reply::Status(500), Reply::Status(500), Reply::Status(500)];
    let mut script = fail3();
    script.push(Reply::Status(200));
    script.extend(fail3());
    script.extend(fail3());
    let (id, _) = w.subscribe(URL, &["load.created"], script);
    let run = |w: &mut World, n: &str| {
        w.ingest("load.created", format!(r#"{{"id":"{n}"}}"#).as_bytes(), &[]);
        w.sim.advance(Duration::from_secs(3600)).expect("advance");
    };
    run(&mut w, "a"); // fails: streak 1
    assert_eq!(subscription(&mut w, &id)["consecutiveFailures"], 1);
    run(&mut w, "b"); // succeeds at once: streak 0
    assert_eq!(subscription(&mut w, &id)["consecutiveFailures"], 0);
    assert_eq!(subscription(&mut w, &id)["status"], "active");
    run(&mut w, "c"); // fails: streak 1
    assert_eq!(subscription(&mut w, &id)["status"], "active");
    run(&mut w, "d"); // fails: streak 2 -> disabled
    let sub = subscription(&mut w, &id);
    assert_eq!(sub["status"], "disabled");
    assert_eq!(sub["disabledReason"], "repeated_failures");
    assert_eq!(attempt_times(&w, URL).len(), 10);
}

#[test]
fn disabling_cancels_pending_attempts() {
    for how in ["delete", "operator"] {
        let mut w = World::new(9);
        let (id, _) = w.subscribe(URL, &["load.created"], vec![Reply::Status(500)]);
        w.ingest("load.created", br#"{"id":"L-10"}"#, &[]);
        assert_eq!(attempt_times(&w, URL).len(), 1);
        let resp = match how {
            "delete" => call(
                &mut w.sim,
                "DELETE",
                &format!("/v1/webhooks/{id}"),
                &w.key.clone(),
            ),
            _ => w.operator("POST", &format!("/internal/v1/subscriptions/{id}/disable")),
        };
        assert_eq!(resp.status, 200, "{how}");
        w.sim.advance(Duration::from_secs(3600)).expect("advance");
        assert_eq!(
            attempt_times(&w, URL).len(),
            1,
            "{how}: nothing after disabling"
        );
        let dlv = w.sim.net().received_by(URL)[0]
            .header("x-service-delivery-id")
            .expect("id")
            .to_owned();
        assert_eq!(w.delivery(&dlv)["status"], "cancelled", "{how}");
        let reason = if how == "delete" {
            "deleted"
        } else {
            "operator"
        };
        assert_eq!(subscription(&mut w, &id)["disabledReason"], reason);
    }
}
