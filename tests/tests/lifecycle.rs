//! The subscription lifecycle after an outage: the owner sees a
//! disabled subscription with its reason, enables it again (or the operator does, or
//! disables it with a reason of its own), and a deleted subscription stays gone, even to an
//! idempotent create replayed after the delete.

use crate::common::*;
use edgehook_runtime::store::Faults;
use edgehook_sim::simnet::Reply;
use serde_json::json;
use std::time::Duration;

const URL: &str = "https://hooks.example.com/x";

fn get(sim: &mut edgehook_sim::sim::Simulation, key: &str, id: &str) -> serde_json::Value {
    let resp = call(sim, "GET", &format!("/v1/webhooks/{id}"), key);
    assert_eq!(resp.status, 200, "{}", resp.json());
    resp.json()["data"].clone()
}

/// Disable and enable, the partner's side: a receiver answers 410, the subscription is
/// disabled (`gone`); the owner reads it as `disabled` with its reason and since when,
/// while list hides it; events published meanwhile reach nobody; the owner enables it, it
/// lists again with its streak at 0, and the next event is delivered with the same secret.
#[test]
fn a_partner_sees_its_disabled_subscription_and_enables_it_again() {
    let mut sim = sim(41);
    let key = issue_key(&mut sim, "acme");
    sim.net()
        .endpoint(URL, [Reply::Status(410), Reply::Status(200)]);
    let created = create(&mut sim, &key, URL, &["load.created"]);
    let (id, secret) = (
        created["id"].as_str().expect("id").to_owned(),
        created["signingSecret"]
            .as_str()
            .expect("secret")
            .to_owned(),
    );
    assert_eq!(
        ingest(&mut sim, "load.created", br#"{"id":"L-1"}"#, &[]).status,
        202
    );
    sim.advance(Duration::from_secs(5)).expect("advance");
    let seen = get(&mut sim, &key, &id);
    assert_eq!(seen["status"], "disabled");
    assert_eq!(seen["disabledReason"], "gone");
    assert!(seen["disabledAt"].as_u64().is_some());
    assert!(seen.get("signingSecret").is_none());
    assert!(
        list_ids(&mut sim, &key).is_empty(),
        "list shows active ones"
    );
    let other = issue_key(&mut sim, "globex");
    call_fails(
        &mut sim,
        "GET",
        &format!("/v1/webhooks/{id}"),
        &other,
        404,
        "not_found",
    );
    assert_error(
        &call(
            &mut sim,
            "POST",
            &format!("/v1/webhooks/{id}/enable"),
            &other,
        ),
        404,
        "not_found",
    );

    assert_eq!(
        ingest(&mut sim, "load.created", br#"{"id":"L-2"}"#, &[]).status,
        202
    );
    sim.advance(Duration::from_secs(600)).expect("advance");
    assert_eq!(
        sim.net().received_by(URL).len(),
        1,
        "nothing while disabled"
    );

    let enabled = call(&mut sim, "POST", &format!("/v1/webhooks/{id}/enable"), &key);
    assert_eq!(enabled.status, 200, "{}", enabled.json());
    let data = enabled.json()["data"].clone();
    assert_eq!(
        (
            &data["status"],
            &data["disabledReason"],
            &data["consecutiveFailures"]
        ),
        (&json!("active"), &json!(null), &json!(0))
    );
    assert!(!String::from_utf8_lossy(&enabled.body).contains("whsec_"));
    assert_eq!(list_ids(&mut sim, &key), vec![id.clone()]);
    let again = call(&mut sim, "POST", &format!("/v1/webhooks/{id}/enable"), &key);
    assert_eq!(again.status, 200, "enabling an active one changes nothing");
    assert_eq!(list_ids(&mut sim, &key), vec![id.clone()]);

    assert_eq!(
        ingest(&mut sim, "load.created", br#"{"id":"L-3"}"#, &[]).status,
        202
    );
    sim.advance(Duration::from_secs(5)).expect("advance");
    let received = sim.net().received_by(URL);
    assert_eq!(received.len(), 2, "delivered once more, after the enable");
    let last = received.last().expect("a delivery");
    assert_eq!(last.body, br#"{"id":"L-3"}"#);
    assert!(
        edgehook_testkit::signature::verifies(
            &secret,
            last.header("x-service-timestamp"),
            last.header("x-service-signature"),
            &last.body
        ),
        "signed with the same secret"
    );
}

/// Disable and enable, the operator's side: disable with a reason code (the owner sees it), a
/// bad reason changes nothing, enable makes it active again, and a subscription its owner
/// deleted cannot be enabled (409) and stays 404 to its owner.
#[test]
fn an_operator_disables_with_a_reason_and_enables_but_never_a_deleted_one() {
    let (mut sim, key, id) = acme_subscribed(42);
    let disable = format!("/internal/v1/subscriptions/{id}/disable");
    let enable = format!("/internal/v1/subscriptions/{id}/enable");
    for bad in [
        json!({"reason": "Deleted!"}),
        json!({"reason": "deleted"}),
        json!({"why": "x"}),
        json!([]),
    ] {
        let resp = operator_post_json(&mut sim, &disable, &bad);
        assert_error(&resp, 422, "validation_failed");
    }
    assert_eq!(
        get(&mut sim, &key, &id)["status"],
        "active",
        "a refused disable changed nothing"
    );
    let resp = operator_post_json(&mut sim, &disable, &json!({"reason": "abuse_report"}));
    assert_eq!(resp.status, 200, "{}", resp.json());
    let seen = get(&mut sim, &key, &id);
    assert_eq!(
        (&seen["status"], &seen["disabledReason"]),
        (&json!("disabled"), &json!("abuse_report"))
    );
    let resp = call(&mut sim, "POST", &enable, ADMIN);
    assert_eq!(resp.status, 200, "{}", resp.json());
    assert_eq!(resp.json()["data"]["status"], "active");
    assert_eq!(
        call(&mut sim, "POST", &enable, ADMIN).status,
        200,
        "idempotent"
    );
    assert_eq!(list_ids(&mut sim, &key), vec![id.clone()]);
    // Without a body the reason is `operator`.
    assert_eq!(call(&mut sim, "POST", &disable, ADMIN).status, 200);
    assert_eq!(get(&mut sim, &key, &id)["disabledReason"], "operator");
    assert_eq!(call(&mut sim, "POST", &enable, ADMIN).status, 200);

    assert_eq!(
        call(&mut sim, "DELETE", &format!("/v1/webhooks/{id}"), &key).status,
        200
    );
    call_fails(
        &mut sim,
        "POST",
        &enable,
        ADMIN,
        409,
        "subscription_deleted",
    );
    call_fails(
        &mut sim,
        "POST",
        &format!("/v1/webhooks/{id}/enable"),
        &key,
        404,
        "not_found",
    );
    call_fails(
        &mut sim,
        "GET",
        &format!("/v1/webhooks/{id}"),
        &key,
        404,
        "not_found",
    );
    let record = call(
        &mut sim,
        "GET",
        &format!("/internal/v1/subscriptions/{id}"),
        ADMIN,
    );
    assert_eq!(record.json()["data"]["disabledReason"], "deleted");
    assert_error(
        &call(
            &mut sim,
            "POST",
            "/internal/v1/subscriptions/sub_0123456789abcdef01234567/enable",
            ADMIN,
        ),
        404,
        "not_found",
    );
}

/// Enable respects the per-client cap.
#[test]
fn enable_respects_the_per_client_cap() {
    let mut sim = sim_with(43, &[("subscription_limit", "1")]);
    let key = issue_key(&mut sim, "acme");
    let a = create_id(&mut sim, &key, URL, &["load.created"]);
    assert_eq!(
        call(
            &mut sim,
            "POST",
            &format!("/internal/v1/subscriptions/{a}/disable"),
            ADMIN
        )
        .status,
        200
    );
    let b = create_id(&mut sim, &key, URL, &["load.created"]);
    let full = call(&mut sim, "POST", &format!("/v1/webhooks/{a}/enable"), &key);
    assert_error(&full, 422, "subscription_limit_reached");
    assert_eq!(list_ids(&mut sim, &key), vec![b.clone()]);
    assert_eq!(
        call(&mut sim, "DELETE", &format!("/v1/webhooks/{b}"), &key).status,
        200
    );
    assert_eq!(
        call(&mut sim, "POST", &format!("/v1/webhooks/{a}/enable"), &key).status,
        200
    );
    assert_eq!(list_ids(&mut sim, &key), vec![a]);
}

/// An idempotent create replayed after its subscription was deleted answers
/// 409 `subscription_deleted`, never the secret and never `active`; after another disable
/// it replays with the subscription's true status.
#[test]
fn a_create_replayed_after_its_subscription_was_deleted_is_409_without_the_secret() {
    let mut sim = sim(44);
    let key = issue_key(&mut sim, "acme");
    let body = json!({"url": URL, "eventTypes": ["load.created"]});
    let idem = [("idempotency-key", "order-1")];
    let first = create_with(&mut sim, &key, &body, &idem);
    assert_eq!(first.status, 201);
    let id = first.json()["data"]["id"].as_str().expect("id").to_owned();
    let secret = first.json()["data"]["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    assert_eq!(
        call(
            &mut sim,
            "POST",
            &format!("/internal/v1/subscriptions/{id}/disable"),
            ADMIN
        )
        .status,
        200
    );
    let replay = create_with(&mut sim, &key, &body, &idem);
    assert_eq!(replay.status, 201);
    assert_eq!(
        replay.json()["data"]["status"],
        "disabled",
        "never claims active"
    );
    // Its owner sees it disabled, so it may delete it as it is (then it is gone: 404).
    let deleted = call(&mut sim, "DELETE", &format!("/v1/webhooks/{id}"), &key);
    assert_eq!(deleted.status, 200, "{}", deleted.json());
    assert_eq!(deleted.json()["data"]["status"], "disabled");
    gone_to_its_owner(&mut sim, &id, &key);
    assert!(paged_ids(&mut sim, "/v1/webhooks?status=disabled&limit=5", &key).is_empty());
    let record = call(
        &mut sim,
        "GET",
        &format!("/internal/v1/subscriptions/{id}"),
        ADMIN,
    );
    assert_eq!(record.json()["data"]["disabledReason"], "deleted");
    let after = create_with(&mut sim, &key, &body, &idem);
    assert_error(&after, 409, "subscription_deleted");
    assert!(!String::from_utf8_lossy(&after.body).contains(&secret));
    assert!(!String::from_utf8_lossy(&after.body).contains("whsec_"));
}

/// Crash safety: an enable through the component with the store failing at
/// each operation in turn answers 200 or 503, never a half-made state: the record, list
/// and the fan-out agree (one delivery per event once active), and a retry succeeds.
#[test]
fn an_enable_cut_short_at_any_store_operation_is_retried_to_one_active_subscription() {
    let mut cut_short = 0;
    for n in 1.. {
        let (mut sim, key, id) = acme_subscribed(45);
        sim.net()
            .endpoint("https://hooks.example.com/x", [Reply::Status(200)]);
        let path = format!("/v1/webhooks/{id}/enable");
        assert_eq!(
            call(
                &mut sim,
                "POST",
                &format!("/internal/v1/subscriptions/{id}/disable"),
                ADMIN
            )
            .status,
            200
        );
        let ops = sim.store().ops();
        sim.store().set_faults(Faults {
            fail_nth: Some(ops + n),
            ..Faults::default()
        });
        let resp = call(&mut sim, "POST", &path, &key);
        sim.store().set_faults(Faults::default());
        let status = get(&mut sim, &key, &id)["status"].clone();
        let listed = list_ids(&mut sim, &key);
        match resp.status {
            200 => {
                assert_eq!(status, "active");
                assert_eq!(listed, vec![id.clone()]);
            }
            503 => {
                cut_short += 1;
                assert_eq!(
                    listed.contains(&id),
                    status == "active",
                    "op {n}: list agrees with the record"
                );
                assert_eq!(
                    call(&mut sim, "POST", &path, &key).status,
                    200,
                    "op {n}: retried"
                );
                assert_eq!(list_ids(&mut sim, &key), vec![id.clone()], "op {n}");
            }
            other => panic!("op {n}: {other} {}", resp.json()),
        }
        let receipt = ingest(&mut sim, "load.created", br#"{"id":"L-1"}"#, &[]);
        assert_eq!(
            receipt.json()["data"]["deliveries"],
            1,
            "op {n}: fanned out once"
        );
        if resp.status == 200 {
            break;
        }
    }
    assert!(cut_short > 5, "cut short at each step: {cut_short}");
}

/// `GET /v1/webhooks?status=disabled` lists the owner's disabled
/// subscriptions (with reason and since when; not the deleted ones, not other clients'),
/// and the operator's `GET /internal/v1/subscriptions?status=disabled` every client's,
/// deleted ones included, cursor-paged, in the order they were disabled.
#[test]
fn disabled_subscriptions_are_listed_for_their_owner_and_across_clients_for_the_operator() {
    let mut sim = sim(46);
    let acme = issue_key(&mut sim, "acme");
    let globex = issue_key(&mut sim, "globex");
    let a = create_id(&mut sim, &acme, URL, &["load.created"]);
    let b = create_id(&mut sim, &acme, URL, &["load.created"]);
    let c = create_id(&mut sim, &acme, URL, &["load.created"]);
    let g = create_id(&mut sim, &globex, URL, &["load.created"]);
    for id in [&c, &g, &a] {
        let path = format!("/internal/v1/subscriptions/{id}/disable");
        assert_eq!(call(&mut sim, "POST", &path, ADMIN).status, 200);
    }
    assert_eq!(
        call(&mut sim, "DELETE", &format!("/v1/webhooks/{b}"), &acme).status,
        200
    );
    let mine = "/v1/webhooks?status=disabled&limit=1";
    assert_eq!(paged_ids(&mut sim, mine, &acme), [c.clone(), a.clone()]);
    assert_eq!(paged_ids(&mut sim, mine, &globex), vec![g.clone()]);
    assert!(
        list_ids(&mut sim, &acme).is_empty(),
        "the default is active ones"
    );
    let page = call(&mut sim, "GET", "/v1/webhooks?status=disabled", &acme).json();
    assert_eq!(page["data"][0]["disabledReason"], "operator");
    assert!(page["data"][0]["disabledAt"].as_u64().is_some());
    assert!(!page.to_string().contains("whsec_"));
    let all = "/internal/v1/subscriptions?status=disabled&limit=2";
    assert_eq!(
        paged_ids(&mut sim, all, ADMIN),
        [c.clone(), g, a.clone(), b]
    );
    // Enabled: out of both lists.
    assert_eq!(
        call(&mut sim, "POST", &format!("/v1/webhooks/{a}/enable"), &acme).status,
        200
    );
    assert_eq!(paged_ids(&mut sim, mine, &acme), std::slice::from_ref(&c));
    assert!(!paged_ids(&mut sim, all, ADMIN).contains(&a));
    call_fails(
        &mut sim,
        "GET",
        "/v1/webhooks?status=paused",
        &acme,
        422,
        "validation_failed",
    );
    assert_error(
        &call(
            &mut sim,
            "GET",
            "/internal/v1/subscriptions?status=active",
            ADMIN,
        ),
        422,
        "validation_failed",
    );
    call_fails(
        &mut sim,
        "GET",
        "/internal/v1/subscriptions",
        &acme,
        403,
        "forbidden",
    );
    // One client's, by status (the operator's view of a client).
    let d = create_id(&mut sim, &acme, URL, &["load.updated"]);
    let of_acme = "/internal/v1/subscriptions?clientId=acme&limit=1";
    assert_eq!(
        paged_ids(&mut sim, of_acme, ADMIN),
        std::slice::from_ref(&c),
        "its own list"
    );
    let active = "/internal/v1/subscriptions?status=active&clientId=acme&limit=1";
    assert_eq!(paged_ids(&mut sim, active, ADMIN), [a.clone(), d.clone()]);
    let page = call(&mut sim, "GET", active, ADMIN).json();
    assert_eq!(page["data"][0]["clientId"], "acme");
    assert_eq!(page["data"][0]["status"], "active");
    assert!(!page.to_string().contains("whsec_"));
    let none = "/internal/v1/subscriptions?status=active&clientId=initech";
    assert!(paged_ids(&mut sim, none, ADMIN).is_empty());
    assert_error(
        &call(
            &mut sim,
            "GET",
            "/internal/v1/subscriptions?clientId=a%20b",
            ADMIN,
        ),
        422,
        "validation_failed",
    );
}

/// Crash safety: an operator's disable through the component with the store
/// failing at each operation in turn: 200 or 503, and the owner's read, list and disabled
/// list and the operator's disabled list always agree with each other; a retry finishes.
#[test]
fn a_disable_cut_short_at_any_store_operation_leaves_every_list_agreeing() {
    let mut cut_short = 0;
    for n in 1.. {
        let (mut sim, key, id) = acme_subscribed(47);
        let path = format!("/internal/v1/subscriptions/{id}/disable");
        let ops = sim.store().ops();
        sim.store().set_faults(Faults {
            fail_nth: Some(ops + n),
            ..Faults::default()
        });
        let resp = operator_post_json(&mut sim, &path, &json!({"reason": "maintenance"}));
        sim.store().set_faults(Faults::default());
        let disabled = get(&mut sim, &key, &id)["status"] == "disabled";
        let listed = list_ids(&mut sim, &key).contains(&id);
        let mine = paged_ids(&mut sim, "/v1/webhooks?status=disabled&limit=10", &key);
        let all = paged_ids(&mut sim, "/internal/v1/subscriptions?limit=10", ADMIN);
        assert_eq!(listed, !disabled, "op {n}");
        assert_eq!(
            mine,
            if disabled { vec![id.clone()] } else { vec![] },
            "op {n}"
        );
        assert_eq!(all, mine, "op {n}");
        match resp.status {
            200 => {
                assert!(disabled, "op {n}");
                break;
            }
            503 => {
                cut_short += 1;
                if !disabled {
                    let retry =
                        operator_post_json(&mut sim, &path, &json!({"reason": "maintenance"}));
                    assert_eq!(retry.status, 200, "op {n}: retried");
                }
                let mine = paged_ids(&mut sim, "/v1/webhooks?status=disabled&limit=10", &key);
                assert_eq!(mine, vec![id.clone()], "op {n}: after the retry");
            }
            other => panic!("op {n}: {other} {}", resp.json()),
        }
    }
    assert!(cut_short > 5, "cut short at each step: {cut_short}");
}

/// Events published while a subscription is disabled are recorded as `skipped`
/// deliveries (never attempted), listed with its deliveries; once the partner enables it,
/// the operator replays them and the receiver gets each under its own delivery id, signed
/// with the subscription's secret.
#[test]
fn events_missed_while_disabled_are_skipped_deliveries_replayed_after_the_enable() {
    let mut sim = sim(43);
    let key = issue_key(&mut sim, "acme");
    sim.net()
        .endpoint(URL, [Reply::Status(410), Reply::Status(200)]);
    let created = create(&mut sim, &key, URL, &["load.created"]);
    let id = created["id"].as_str().expect("id").to_owned();
    let secret = created["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    assert_eq!(
        ingest(&mut sim, "load.created", br#"{"id":"L-1"}"#, &[]).status,
        202
    );
    sim.advance(Duration::from_secs(5)).expect("advance");
    assert_eq!(get(&mut sim, &key, &id)["status"], "disabled");
    for load in [&br#"{"id":"L-2"}"#[..], br#"{"id":"L-3"}"#] {
        let accepted = ingest(&mut sim, "load.created", load, &[]);
        assert_eq!(accepted.status, 202, "{}", accepted.json());
        assert_eq!(accepted.json()["data"]["deliveries"], 0, "none to attempt");
    }
    sim.advance(Duration::from_secs(600)).expect("advance");
    assert_eq!(
        sim.net().received_by(URL).len(),
        1,
        "nothing while disabled"
    );
    let path = format!("/internal/v1/subscriptions/{id}/deliveries");
    let listed = call(&mut sim, "GET", &path, ADMIN).json()["data"].clone();
    let listed = listed.as_array().expect("deliveries").clone();
    let statuses: Vec<&str> = listed
        .iter()
        .map(|d| d["status"].as_str().expect("status"))
        .collect();
    assert_eq!(statuses, ["failed", "skipped", "skipped"]);
    let skipped: Vec<String> = listed[1..]
        .iter()
        .map(|d| d["id"].as_str().expect("id").to_owned())
        .collect();
    assert!(
        listed[1]["attempts"]
            .as_array()
            .expect("attempts")
            .is_empty()
    );
    // Still disabled: a replay is refused and sends nothing.
    let replay = |sim: &mut edgehook_sim::sim::Simulation, dlv: &str| {
        call(
            sim,
            "POST",
            &format!("/internal/v1/deliveries/{dlv}/replay"),
            ADMIN,
        )
    };
    assert_eq!(replay(&mut sim, &skipped[0]).status, 409);
    let enabled = call(&mut sim, "POST", &format!("/v1/webhooks/{id}/enable"), &key);
    assert_eq!(enabled.status, 200, "{}", enabled.json());
    for dlv in &skipped {
        let resp = replay(&mut sim, dlv);
        assert_eq!(resp.status, 202, "{}", resp.json());
    }
    sim.advance(Duration::from_secs(5)).expect("advance");
    let received = sim.net().received_by(URL);
    let replayed: Vec<String> = received[1..].iter().map(delivery_id_of).collect();
    assert_eq!(replayed, skipped, "each under its own id");
    let bodies: Vec<&[u8]> = received[1..].iter().map(|r| r.body.as_slice()).collect();
    assert_eq!(bodies, [&br#"{"id":"L-2"}"#[..], br#"{"id":"L-3"}"#]);
    for r in &received[1..] {
        assert!(edgehook_testkit::signature::verifies(
            &secret,
            r.header("x-service-timestamp"),
            r.header("x-service-signature"),
            &r.body
        ));
    }
}
