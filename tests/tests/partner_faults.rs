//! The partner API under injected store faults (create, idempotent create and delete are
//! all-or-nothing and retry-safe at every step) and its rate limit.

use crate::common::*;
use crate::partner_api::{URL, active_subscriptions, after_commit, fanout, ops_of, used_key};
use edgehook_component::model::ids::SubscriptionId;
use edgehook_runtime::store::Faults;
use serde_json::json;
use std::time::Duration;

#[test]
fn a_fault_at_any_step_of_create_leaves_nothing_half_made() {
    let body = json!({"url": URL, "eventTypes": ["load.created", "load.updated"]});
    let mut probe = sim(12);
    let key = used_key(&mut probe, "acme");
    let steps = ops_of(&mut probe, |s| {
        assert_eq!(create_with(s, &key, &body, &[]).status, 201)
    });
    assert!(steps >= 8, "create takes {steps} store operations");
    let mut pending_seen = 0;
    for n in 1..=steps {
        let mut sim = sim(12);
        let key = used_key(&mut sim, "acme");
        let faults = Faults {
            fail_nth: Some(sim.store().ops() + n),
            ..Faults::default()
        };
        sim.store().set_faults(faults);
        let resp = create_with(&mut sim, &key, &body, &[]);
        sim.store().set_faults(Faults::default());
        if after_commit(&mut sim, &key, &resp, n, steps) {
            continue;
        }
        assert_error(&resp, 503, "store_unavailable");
        assert!(
            list_ids(&mut sim, &key).is_empty(),
            "fault at op {n}: a half-made subscription is listed"
        );
        assert!(
            active_subscriptions(&sim).is_empty(),
            "fault at op {n}: an active record exists"
        );
        // A record left `pending` (the create stopped before its commit point) is shown as
        // such to the operator, and to the partner not at all.
        for record in subscription_records(&sim.store().snapshot()) {
            let id = record["id"].as_str().expect("id").to_owned();
            assert_eq!(record["status"], "pending", "fault at op {n}");
            pending_seen += 1;
            let view = call(
                &mut sim,
                "GET",
                &format!("/internal/v1/subscriptions/{id}"),
                ADMIN,
            );
            assert_eq!(view.json()["data"]["status"], "pending", "fault at op {n}");
            call_fails(
                &mut sim,
                "GET",
                &format!("/v1/webhooks/{id}"),
                &key,
                404,
                "not_found",
            );
        }
        for t in ["load.created", "load.updated"] {
            for id in fanout(&sim, t) {
                let rec = sim
                    .store()
                    .snapshot()
                    .get(keys::subscription(&SubscriptionId::trusted(id.to_string())).as_str())
                    .cloned();
                let status = rec
                    .map(|r| subscription_record(&r).expect("a readable record")["status"].clone());
                assert_ne!(status, Some(json!("active")), "fault at op {n}");
            }
        }
        // And the client can simply retry.
        let again = create_with(&mut sim, &key, &body, &[]);
        assert_eq!(again.status, 201, "fault at op {n}: retry");
        let id = again.json()["data"]["id"].as_str().expect("id").to_owned();
        assert_eq!(list_ids(&mut sim, &key), vec![id.clone()]);
        assert!(
            fanout(&sim, "load.created").contains(&id)
                && fanout(&sim, "load.updated").contains(&id)
        );
    }
    assert!(
        pending_seen > 0,
        "some fault stops a create between its pending record and its commit point"
    );
}

#[test]
fn a_fault_at_any_step_of_an_idempotent_create_is_retry_safe() {
    let body = json!({"url": URL, "eventTypes": ["load.created"]});
    let idem = [("idempotency-key", "k-1")];
    let mut probe = sim(13);
    let key = used_key(&mut probe, "acme");
    let steps = ops_of(&mut probe, |s| {
        assert_eq!(create_with(s, &key, &body, &idem).status, 201)
    });
    for n in 1..=steps {
        let mut sim = sim(13);
        let key = used_key(&mut sim, "acme");
        sim.store().set_faults(Faults {
            fail_nth: Some(sim.store().ops() + n),
            ..Faults::default()
        });
        let resp = create_with(&mut sim, &key, &body, &idem);
        sim.store().set_faults(Faults::default());
        if after_commit(&mut sim, &key, &resp, n, steps) {
            continue;
        }
        assert_error(&resp, 503, "store_unavailable");
        // A retry with the same key either finishes the first attempt or starts afresh;
        // if the claim was left behind it blocks only until it goes stale.
        let mut retry = create_with(&mut sim, &key, &body, &idem);
        if retry.status == 409 {
            sim.advance(Duration::from_secs(61)).expect("advance");
            retry = create_with(&mut sim, &key, &body, &idem);
        }
        assert_eq!(retry.status, 201, "fault at op {n}: {}", retry.json());
        assert_eq!(
            list_ids(&mut sim, &key).len(),
            1,
            "fault at op {n}: exactly one subscription"
        );
    }
}

#[test]
fn a_fault_at_any_step_of_delete_is_all_or_nothing() {
    let mut probe = sim(14);
    let key = issue_key(&mut probe, "acme");
    let id = create_id(&mut probe, &key, URL, &["load.created"]);
    let path = format!("/v1/webhooks/{id}");
    let steps = ops_of(&mut probe, |s| {
        assert_eq!(call(s, "DELETE", &path, &key).status, 200)
    });
    let mut answered_503 = 0;
    for n in 1..=steps {
        let mut sim = sim(14);
        let key = issue_key(&mut sim, "acme");
        let id = create_id(&mut sim, &key, URL, &["load.created"]);
        let path = format!("/v1/webhooks/{id}");
        sim.store().set_faults(Faults {
            fail_nth: Some(sim.store().ops() + n),
            ..Faults::default()
        });
        let resp = call(&mut sim, "DELETE", &path, &key);
        sim.store().set_faults(Faults::default());
        match resp.status {
            503 => {
                answered_503 += 1;
                assert_error(&resp, 503, "store_unavailable");
                assert_eq!(
                    list_ids(&mut sim, &key),
                    vec![id.clone()],
                    "fault at op {n}: still there"
                );
                assert!(fanout(&sim, "load.created").contains(&id));
                assert_eq!(
                    call(&mut sim, "DELETE", &path, &key).status,
                    200,
                    "retry works"
                );
            }
            200 => {
                // The fault hit index clean-up after the commit: the delete stands.
                assert!(list_ids(&mut sim, &key).is_empty(), "fault at op {n}");
                assert!(active_subscriptions(&sim).is_empty());
            }
            other => panic!("fault at op {n}: status {other}"),
        }
        assert!(list_ids(&mut sim, &key).is_empty());
    }
    assert!(
        answered_503 >= 3,
        "faults before the commit point answer 503"
    );
}

#[test]
fn a_client_over_its_rate_limit_gets_429_with_retry_after_until_the_minute_turns() {
    let mut sim = sim_with(31, &[("rate_limit_per_minute", "3")]);
    let key = issue_key(&mut sim, "acme");
    let other = issue_key(&mut sim, "globex");
    sim.advance(Duration::from_secs(20)).expect("advance");
    for _ in 0..3 {
        assert_eq!(call(&mut sim, "GET", "/v1/webhooks", &key).status, 200);
    }
    for (method, path) in [("GET", "/v1/webhooks"), ("DELETE", "/v1/webhooks/sub_0")] {
        let resp = call(&mut sim, method, path, &key);
        assert_error(&resp, 429, "rate_limited");
        assert_eq!(
            resp.header("retry-after"),
            Some("40"),
            "until the minute turns"
        );
    }
    let refused = create_url(&mut sim, &key, URL);
    assert_error(&refused, 429, "rate_limited");
    assert!(
        active_subscriptions(&sim).is_empty(),
        "a refused create makes nothing"
    );
    assert_eq!(
        call(&mut sim, "GET", "/v1/webhooks", &other).status,
        200,
        "each client has its own limit"
    );
    assert_eq!(
        call(&mut sim, "GET", "/internal/v1/settings", ADMIN).json()["data"]["rateLimitPerMinute"],
        3,
        "the operator API is not limited, and shows the setting"
    );
    sim.advance(Duration::from_secs(40)).expect("advance");
    assert_eq!(call(&mut sim, "GET", "/v1/webhooks", &key).status, 200);
}
