//! Examples are real: every response example has a scenario here that makes the request it
//! describes against a fresh simulation, and the actual response has the example's status and
//! shape, conforms to the documented schema and carries the documented headers
//! ([`check_observed`]). Request-body examples are what the scenarios send.

use super::shape::same_shape;
use super::{
    Auth, Doc, SAMPLE_DLV, SAMPLE_RPL, SAMPLE_SUB, URL, World, generic_request, operations,
    resolve, send,
};
use crate::common::*;
use edgehook_runtime::HttpResponse;
use edgehook_runtime::store::Faults;
use edgehook_sim::simnet::Reply;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// One response example of the document.
struct Example {
    /// `METHOD template status name`, or `components/responses/Name name`.
    key: String,
    value: Value,
    /// The response object it belongs to.
    response: Value,
    /// Its status, for an example written in an operation.
    status: Option<u16>,
    /// For a shared response: every operation that refers to it, with the status.
    users: Vec<(String, String, u16)>,
}

fn response_examples(doc: &Value) -> Vec<Example> {
    let mut out = Vec::new();
    let mut users: BTreeMap<String, Vec<(String, String, u16)>> = BTreeMap::new();
    for op in operations(doc) {
        for (status, response) in op.op["responses"].as_object().into_iter().flatten() {
            let code: u16 = status.parse().expect("numeric status");
            if let Some(r) = response["$ref"].as_str() {
                users.entry(r.to_owned()).or_default().push((
                    op.method.clone(),
                    op.template.clone(),
                    code,
                ));
                continue;
            }
            let examples = &response["content"]["application/json"]["examples"];
            for (name, ex) in examples.as_object().into_iter().flatten() {
                out.push(Example {
                    key: format!("{} {} {status} {name}", op.method, op.template),
                    value: ex["value"].clone(),
                    response: response.clone(),
                    status: Some(code),
                    users: Vec::new(),
                });
            }
        }
    }
    for (rname, response) in doc["components"]["responses"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let examples = &response["content"]["application/json"]["examples"];
        for (name, ex) in examples.as_object().into_iter().flatten() {
            out.push(Example {
                key: format!("components/responses/{rname} {name}"),
                value: ex["value"].clone(),
                response: response.clone(),
                status: None,
                users: users
                    .get(&format!("#/components/responses/{rname}"))
                    .cloned()
                    .unwrap_or_default(),
            });
        }
    }
    out
}

/// An actual response to compare with an example.
struct Observed {
    label: String,
    status: u16,
    response: HttpResponse,
}

/// A delivery whose attempt 1 got a 500 and attempt 2 a 200.
fn retried_then_delivered(doc: &Doc) -> (World, String) {
    let mut w = World::new(7);
    w.sim
        .net()
        .endpoint(URL, [Reply::Status(500), Reply::Status(200)]);
    let sub = w.subscribe(&["load.created"]);
    let resp = w.ingest("load.created", &doc.load_bytes(), &[]);
    assert_eq!(resp.status, 202, "{}", resp.json());
    w.sim.advance(Duration::from_secs(120)).expect("advance");
    let id = w.first_delivery(&sub);
    (w, id)
}

/// The request a scenario makes for the example written in an operation, `key`.
fn scenario(doc: &Doc, key: &str) -> Option<HttpResponse> {
    let subscription = || doc.request_example("POST", "/v1/webhooks", "subscription");
    let resp = match key {
        "GET /healthz 200 ok" => sim(1).request("GET", "/healthz", &[], b"").expect("runs"),
        "GET /v1/webhooks 200 firstPage" => {
            let mut w = World::new(2);
            for _ in 0..2 {
                assert_eq!(w.create(&subscription(), &[]).status, 201);
            }
            w.partner("GET", "/v1/webhooks?limit=1")
        }
        "GET /v1/webhooks 200 disabledPage" => {
            let mut w = World::new(40);
            let id = w.subscribe(&["load.created", "load.status_changed"]);
            w.subscribe(&["load.created"]);
            let path = format!("/internal/v1/subscriptions/{id}/disable");
            assert_eq!(w.operator("POST", &path).status, 200);
            w.partner("GET", "/v1/webhooks?status=disabled")
        }
        "GET /v1/webhooks 422 badStatus" => {
            World::new(41).partner("GET", "/v1/webhooks?status=paused")
        }
        "GET /internal/v1/subscriptions 200 firstPage" => {
            let mut w = World::new(42);
            let (a, b) = (
                w.subscribe(&["load.created"]),
                w.subscribe(&["load.created"]),
            );
            assert_eq!(
                w.partner("DELETE", &format!("/v1/webhooks/{a}")).status,
                200
            );
            let path = format!("/internal/v1/subscriptions/{b}/disable");
            assert_eq!(w.operator("POST", &path).status, 200);
            w.operator("GET", "/internal/v1/subscriptions?status=disabled&limit=1")
        }
        "GET /internal/v1/subscriptions 422 badStatus" => {
            World::new(43).operator("GET", "/internal/v1/subscriptions?status=active")
        }
        "GET /v1/webhooks 422 badLimit" => World::new(3).partner("GET", "/v1/webhooks?limit=0"),
        "POST /v1/webhooks 201 created" => World::new(4).create(&subscription(), &[]),
        "POST /v1/webhooks 400 invalidJson" => {
            let mut w = World::new(5);
            let auth = bearer(&w.key);
            w.sim
                .request(
                    "POST",
                    "/v1/webhooks",
                    &[
                        ("authorization", &auth),
                        ("content-type", "application/json"),
                    ],
                    br#"{"url":"#,
                )
                .expect("runs")
        }
        "POST /v1/webhooks 409 idempotencyConflict" => {
            let mut w = World::new(6);
            let key = [("idempotency-key", "create-1")];
            assert_eq!(w.create(&subscription(), &key).status, 201);
            let mut other = subscription();
            other["eventTypes"] = json!(["load.updated"]);
            w.create(&other, &key)
        }
        "POST /v1/webhooks 415 unsupportedMediaType" => {
            let mut w = World::new(7);
            let auth = bearer(&w.key);
            let body = subscription().to_string();
            w.sim
                .request(
                    "POST",
                    "/v1/webhooks",
                    &[("authorization", &auth), ("content-type", "text/plain")],
                    body.as_bytes(),
                )
                .expect("runs")
        }
        "POST /v1/webhooks 422 validationFailed" => {
            let invalid = doc.request_example("POST", "/v1/webhooks", "invalid");
            World::new(8).create(&invalid, &[])
        }
        "GET /v1/webhooks/{id} 200 subscription" => {
            let mut w = World::new(9);
            let created = w.create(&subscription(), &[]).json();
            let id = created["data"]["id"].as_str().expect("id").to_owned();
            w.partner("GET", &format!("/v1/webhooks/{id}"))
        }
        "GET /v1/webhooks/{id} 200 disabled" => {
            let mut w = World::new(30);
            let id = w.subscribe(&["load.created", "load.status_changed"]);
            let path = format!("/internal/v1/subscriptions/{id}/disable");
            assert_eq!(w.operator("POST", &path).status, 200);
            w.partner("GET", &format!("/v1/webhooks/{id}"))
        }
        "POST /v1/webhooks/{id}/enable 200 enabled" => {
            let mut w = World::new(31);
            let id = w.subscribe(&["load.created", "load.status_changed"]);
            let path = format!("/internal/v1/subscriptions/{id}/disable");
            assert_eq!(w.operator("POST", &path).status, 200);
            let body = doc.request_example("POST", "/v1/webhooks/{id}/enable", "replaySince");
            let resp = w.partner_json(&format!("/v1/webhooks/{id}/enable"), &body);
            assert_eq!(resp.status, 200, "{}", resp.json());
            assert!(resp.json()["replay"]["id"].is_string(), "{}", resp.json());
            w.partner("POST", &format!("/v1/webhooks/{id}/enable"))
        }
        "POST /v1/webhooks/{id}/test 200 receiverDown"
        | "POST /internal/v1/subscriptions/{id}/test 200 receiverDown" => {
            let mut w = World::new(44);
            w.sim.net().endpoint(URL, [Reply::Status(503)]);
            let id = w.subscribe(&["load.created"]);
            if key.starts_with("POST /v1/") {
                w.partner("POST", &format!("/v1/webhooks/{id}/test"))
            } else {
                w.operator("POST", &format!("/internal/v1/subscriptions/{id}/test"))
            }
        }
        "POST /v1/webhooks/{id}/test 404 notFound" => {
            World::new(45).partner("POST", &format!("/v1/webhooks/{SAMPLE_SUB}/test"))
        }
        "POST /internal/v1/subscriptions/{id}/test 404 notFound" => World::new(46).operator(
            "POST",
            &format!("/internal/v1/subscriptions/{SAMPLE_SUB}/test"),
        ),
        "POST /v1/webhooks/{id}/replays 202 started" => {
            let mut w = World::new(50);
            let id = w.subscribe(&["load.created"]);
            let range = doc.request_example("POST", "/v1/webhooks/{id}/replays", "range");
            w.partner_json(&format!("/v1/webhooks/{id}/replays"), &range)
        }
        "POST /v1/webhooks/{id}/replays 404 notFound" => World::new(51).partner_json(
            &format!("/v1/webhooks/{SAMPLE_SUB}/replays"),
            &json!({"since": 1}),
        ),
        "POST /v1/webhooks/{id}/replays 422 validationFailed" => {
            let mut w = World::new(52);
            let id = w.subscribe(&["load.created"]);
            w.partner_json(&format!("/v1/webhooks/{id}/replays"), &json!({}))
        }
        "GET /v1/replays/{id} 200 progress"
        | "POST /v1/replays/{id}/cancel 200 cancelled"
        | "GET /internal/v1/replays/{id} 200 progress"
        | "POST /internal/v1/replays/{id}/cancel 200 cancelled" => {
            // Six delivered events replayed: the job is read when done, or cancelled at
            // once (the 202's tick has selected them; none is replayed yet).
            let mut w = World::new(53);
            w.sim.net().endpoint(URL, [Reply::Status(200)]);
            let id = w.subscribe(&["load.created"]);
            for n in 0..6 {
                let load = format!(r#"{{"id":"L-{n}"}}"#);
                assert_eq!(w.ingest("load.created", load.as_bytes(), &[]).status, 202);
            }
            let range = json!({"since": 1, "status": ["delivered"]});
            let job = w
                .partner_json(&format!("/v1/webhooks/{id}/replays"), &range)
                .json();
            let job = job["data"]["id"].as_str().expect("job").to_owned();
            if key.ends_with("progress") {
                w.sim.advance(Duration::from_secs(3)).expect("advance");
            }
            match key.split(' ').take(2).collect::<Vec<_>>()[..] {
                ["GET", "/v1/replays/{id}"] => w.partner("GET", &format!("/v1/replays/{job}")),
                ["POST", "/v1/replays/{id}/cancel"] => {
                    w.partner("POST", &format!("/v1/replays/{job}/cancel"))
                }
                ["GET", _] => w.operator("GET", &format!("/internal/v1/replays/{job}")),
                _ => w.operator("POST", &format!("/internal/v1/replays/{job}/cancel")),
            }
        }
        "GET /v1/replays/{id} 404 notFound" => {
            World::new(54).partner("GET", &format!("/v1/replays/{SAMPLE_RPL}"))
        }
        "POST /v1/replays/{id}/cancel 404 notFound" => {
            World::new(55).partner("POST", &format!("/v1/replays/{SAMPLE_RPL}/cancel"))
        }
        "GET /internal/v1/replays/{id} 404 notFound" => {
            World::new(56).operator("GET", &format!("/internal/v1/replays/{SAMPLE_RPL}"))
        }
        "POST /internal/v1/replays/{id}/cancel 404 notFound" => {
            World::new(57).operator("POST", &format!("/internal/v1/replays/{SAMPLE_RPL}/cancel"))
        }
        "POST /internal/v1/replays 202 started" => {
            let mut w = World::new(58);
            let id = w.subscribe(&["load.created"]);
            let mut range = doc.request_example("POST", "/internal/v1/replays", "range");
            range["subscriptionIds"] = json!([id]);
            w.operator_json("/internal/v1/replays", &range)
        }
        "POST /internal/v1/replays 422 validationFailed" => {
            let bad = json!({"since": 1, "subscriptionIds": []});
            World::new(59).operator_json("/internal/v1/replays", &bad)
        }
        "POST /v1/webhooks/{id}/enable 422 badReplaySince"
        | "POST /internal/v1/subscriptions/{id}/enable 422 badReplaySince" => {
            let mut w = World::new(60);
            let id = w.subscribe(&["load.created"]);
            let bad = json!({"replaySince": "yesterday"});
            if key.starts_with("POST /v1/") {
                w.partner_json(&format!("/v1/webhooks/{id}/enable"), &bad)
            } else {
                w.operator_json(&format!("/internal/v1/subscriptions/{id}/enable"), &bad)
            }
        }
        "POST /v1/webhooks/{id}/enable 404 notFound" => {
            World::new(32).partner("POST", &format!("/v1/webhooks/{SAMPLE_SUB}/enable"))
        }
        "POST /v1/webhooks/{id}/enable 422 limitReached"
        | "POST /internal/v1/subscriptions/{id}/enable 422 limitReached" => {
            let mut w = World::at_cap_of_one(33);
            let id = w.subscribe(&["load.created"]);
            let path = format!("/internal/v1/subscriptions/{id}/disable");
            assert_eq!(w.operator("POST", &path).status, 200);
            w.subscribe(&["load.created"]);
            if key.starts_with("POST /v1/") {
                w.partner("POST", &format!("/v1/webhooks/{id}/enable"))
            } else {
                w.operator("POST", &format!("/internal/v1/subscriptions/{id}/enable"))
            }
        }
        "POST /v1/webhooks 409 subscriptionDeleted" => {
            let mut w = World::new(34);
            let key = [("idempotency-key", "create-1")];
            let created = w.create(&subscription(), &key).json();
            let id = created["data"]["id"].as_str().expect("id").to_owned();
            assert_eq!(
                w.partner("DELETE", &format!("/v1/webhooks/{id}")).status,
                200
            );
            w.create(&subscription(), &key)
        }
        "POST /internal/v1/subscriptions/{id}/enable 200 enabled" => {
            let mut w = World::new(35);
            let id = w.subscribe(&["load.created"]);
            let reason =
                doc.request_example("POST", "/internal/v1/subscriptions/{id}/disable", "reason");
            let path = format!("/internal/v1/subscriptions/{id}/disable");
            assert_eq!(w.operator_json(&path, &reason).status, 200);
            let body = doc.request_example(
                "POST",
                "/internal/v1/subscriptions/{id}/enable",
                "replaySince",
            );
            let path = format!("/internal/v1/subscriptions/{id}/enable");
            let resp = w.operator_json(&path, &body);
            assert_eq!(resp.status, 200, "{}", resp.json());
            assert!(resp.json()["replay"]["id"].is_string(), "{}", resp.json());
            w.operator("POST", &path)
        }
        "POST /internal/v1/subscriptions/{id}/enable 404 notFound" => World::new(36).operator(
            "POST",
            &format!("/internal/v1/subscriptions/{SAMPLE_SUB}/enable"),
        ),
        "POST /internal/v1/subscriptions/{id}/enable 409 subscriptionDeleted"
        | "POST /internal/v1/subscriptions/{id}/test 409 deleted" => {
            let mut w = World::new(37);
            let id = w.subscribe(&["load.created"]);
            assert_eq!(
                w.partner("DELETE", &format!("/v1/webhooks/{id}")).status,
                200
            );
            let action = key.split('/').nth(5).and_then(|a| a.split(' ').next());
            let action = action.expect("enable or test");
            w.operator("POST", &format!("/internal/v1/subscriptions/{id}/{action}"))
        }
        "POST /internal/v1/subscriptions/{id}/disable 415 unsupportedMediaType" => {
            let mut w = World::new(39);
            let id = w.subscribe(&["load.created"]);
            let auth = bearer(ADMIN);
            w.sim
                .request(
                    "POST",
                    &format!("/internal/v1/subscriptions/{id}/disable"),
                    &[("authorization", &auth), ("content-type", "text/plain")],
                    b"reason=maintenance",
                )
                .expect("runs")
        }
        "POST /internal/v1/subscriptions/{id}/disable 422 invalidReason" => {
            let mut w = World::new(38);
            let id = w.subscribe(&["load.created"]);
            let invalid =
                doc.request_example("POST", "/internal/v1/subscriptions/{id}/disable", "invalid");
            w.operator_json(
                &format!("/internal/v1/subscriptions/{id}/disable"),
                &invalid,
            )
        }
        "GET /v1/webhooks/{id} 404 notFound" => {
            World::new(10).partner("GET", &format!("/v1/webhooks/{SAMPLE_SUB}"))
        }
        "DELETE /v1/webhooks/{id} 200 deleted" | "DELETE /v1/webhooks/{id} 404 notFound" => {
            let mut w = World::new(11);
            let id = w.subscribe(&["load.created"]);
            let first = w.partner("DELETE", &format!("/v1/webhooks/{id}"));
            if key.contains(" 200 ") {
                first
            } else {
                w.partner("DELETE", &format!("/v1/webhooks/{id}"))
            }
        }
        "GET /internal/v1/settings 200 defaults" => {
            World::new(12).operator("GET", "/internal/v1/settings")
        }
        "POST /internal/v1/clients/{clientId}/keys 201 issued" => {
            World::new(13).operator("POST", "/internal/v1/clients/acme/keys")
        }
        "POST /internal/v1/clients/{clientId}/keys 201 readOnly"
        | "POST /internal/v1/clients/{clientId}/keys 422 invalidScope" => {
            let name = if key.contains(" 201 ") {
                "readOnly"
            } else {
                "invalid"
            };
            let body = doc.request_example("POST", "/internal/v1/clients/{clientId}/keys", name);
            World::new(48).operator_json("/internal/v1/clients/acme/keys", &body)
        }
        "GET /internal/v1/clients/{clientId}/keys 200 keys" => {
            let mut w = World::new(49);
            assert_eq!(w.partner("GET", "/v1/webhooks").status, 200, "used");
            let body =
                doc.request_example("POST", "/internal/v1/clients/{clientId}/keys", "readOnly");
            let issued = w
                .operator_json("/internal/v1/clients/acme/keys", &body)
                .json();
            let id = issued["data"]["id"].as_str().expect("key id").to_owned();
            let path = format!("/internal/v1/clients/acme/keys/{id}");
            assert_eq!(w.operator("DELETE", &path).status, 200);
            w.operator("GET", "/internal/v1/clients/acme/keys")
        }
        "POST /internal/v1/ingest-keys 201 issued" => {
            World::new(50).operator("POST", "/internal/v1/ingest-keys")
        }
        "POST /internal/v1/ingest-keys 422 invalidScope" => {
            World::new(51).operator_json("/internal/v1/ingest-keys", &json!({"scope": "partner"}))
        }
        "GET /internal/v1/ingest-keys 200 keys" => {
            let mut w = World::new(52);
            let body = doc.request_example("POST", "/internal/v1/ingest-keys", "ingest");
            let issued = w.operator_json("/internal/v1/ingest-keys", &body).json();
            let ingest_key = issued["data"]["apiKey"].as_str().expect("key").to_owned();
            let auth = bearer(&ingest_key);
            let load = doc.load_bytes();
            let published = w
                .sim
                .request(
                    "POST",
                    "/internal/v1/events",
                    &[
                        ("authorization", auth.as_str()),
                        ("content-type", "application/json"),
                        ("x-service-event", "load.created"),
                    ],
                    &load,
                )
                .expect("runs");
            assert_eq!(published.status, 202, "{}", published.json());
            w.operator("GET", "/internal/v1/ingest-keys")
        }
        "DELETE /internal/v1/ingest-keys/{keyId} 200 revoked" => {
            let mut w = World::new(53);
            let issued = w.operator("POST", "/internal/v1/ingest-keys").json();
            let id = issued["data"]["id"].as_str().expect("key id").to_owned();
            w.operator("DELETE", &format!("/internal/v1/ingest-keys/{id}"))
        }
        "DELETE /internal/v1/ingest-keys/{keyId} 404 notFound" => {
            let mut w = World::new(54);
            let issued = w.operator("POST", "/internal/v1/clients/acme/keys").json();
            let id = issued["data"]["id"].as_str().expect("key id").to_owned();
            w.operator("DELETE", &format!("/internal/v1/ingest-keys/{id}"))
        }
        "POST /internal/v1/clients/{clientId}/keys 422 invalidClientId" => {
            World::new(14).operator("POST", "/internal/v1/clients/acme%20corp/keys")
        }
        "DELETE /internal/v1/clients/{clientId}/keys/{keyId} 200 revoked"
        | "DELETE /internal/v1/clients/{clientId}/keys/{keyId} 404 notFound" => {
            let mut w = World::new(15);
            let issued = w.operator("POST", "/internal/v1/clients/acme/keys").json();
            let id = issued["data"]["id"].as_str().expect("key id").to_owned();
            let path = format!("/internal/v1/clients/acme/keys/{id}");
            let first = w.operator("DELETE", &path);
            if key.contains(" 200 ") {
                first
            } else {
                w.operator("DELETE", &path)
            }
        }
        "POST /internal/v1/events 202 accepted" => {
            let mut w = World::new(16);
            w.sim.net().endpoint(URL, [Reply::Status(204)]);
            w.subscribe(&["load.created"]);
            w.ingest("load.created", &doc.load_bytes(), &[])
        }
        "POST /internal/v1/events 409 idempotencyConflict" => {
            let mut w = World::new(17);
            let key = [("idempotency-key", "evt-1")];
            assert_eq!(
                w.ingest("load.created", &doc.load_bytes(), &key).status,
                202
            );
            w.ingest("load.created", br#"{"id":"L-2"}"#, &key)
        }
        "POST /internal/v1/events 413 tooLarge" => {
            let big = vec![b' '; 256 * 1024 + 1];
            World::new(18).ingest("load.created", &big, &[])
        }
        "POST /internal/v1/events 422 unknownEventType" => {
            World::new(19).ingest("load.deleted", &doc.load_bytes(), &[])
        }
        "POST /internal/v1/tick 200 oneFailed" => {
            let mut w = World::new(20);
            w.sim.net().endpoint(URL, [Reply::Status(500)]);
            w.subscribe(&["load.created"]);
            let receipt = w
                .sim
                .publish("load.created", &doc.load_bytes())
                .expect("runs")
                .expect("accepted");
            assert_eq!(receipt.deliveries, 1);
            w.operator("POST", "/internal/v1/tick")
        }
        "GET /internal/v1/subscriptions/{id} 200 deletedByPartner" => {
            let mut w = World::new(21);
            let id = w.subscribe(&["load.created"]);
            assert_eq!(
                w.partner("DELETE", &format!("/v1/webhooks/{id}")).status,
                200
            );
            w.operator("GET", &format!("/internal/v1/subscriptions/{id}"))
        }
        "GET /internal/v1/subscriptions/{id} 404 notFound" => {
            World::new(22).operator("GET", &format!("/internal/v1/subscriptions/{SAMPLE_SUB}"))
        }
        "POST /internal/v1/subscriptions/{id}/disable 200 disabled"
        | "POST /internal/v1/subscriptions/{id}/disable 409 alreadyDisabled" => {
            let mut w = World::new(23);
            let id = w.subscribe(&["load.created"]);
            let path = format!("/internal/v1/subscriptions/{id}/disable");
            let reason =
                doc.request_example("POST", "/internal/v1/subscriptions/{id}/disable", "reason");
            let first = w.operator_json(&path, &reason);
            if key.contains(" 200 ") {
                first
            } else {
                w.operator("POST", &path)
            }
        }
        "POST /internal/v1/subscriptions/{id}/disable 404 notFound" => World::new(24).operator(
            "POST",
            &format!("/internal/v1/subscriptions/{SAMPLE_SUB}/disable"),
        ),
        "GET /internal/v1/subscriptions/{id}/deliveries 200 oneDelivery"
        | "GET /v1/webhooks/{id}/deliveries 200 oneDelivery"
        | "GET /internal/v1/deliveries 200 oneDelivery" => {
            let mut w = World::new(25);
            w.sim.net().endpoint(URL, [Reply::Status(204)]);
            let id = w.subscribe(&["load.created"]);
            assert_eq!(w.ingest("load.created", &doc.load_bytes(), &[]).status, 202);
            if key.starts_with("GET /v1/") {
                w.partner("GET", &format!("/v1/webhooks/{id}/deliveries"))
            } else if key.starts_with("GET /internal/v1/deliveries") {
                w.operator("GET", "/internal/v1/deliveries?clientId=acme")
            } else {
                w.operator(
                    "GET",
                    &format!("/internal/v1/subscriptions/{id}/deliveries"),
                )
            }
        }
        "GET /internal/v1/deliveries 422 badStatus" => {
            World::new(29).operator("GET", "/internal/v1/deliveries?status=done")
        }
        "GET /v1/webhooks/{id}/deliveries 404 notFound" => {
            World::new(27).partner("GET", &format!("/v1/webhooks/{SAMPLE_SUB}/deliveries"))
        }
        "GET /v1/webhooks/{id}/deliveries 422 badStatus"
        | "GET /internal/v1/subscriptions/{id}/deliveries 422 badStatus" => {
            let mut w = World::new(28);
            let id = w.subscribe(&["load.created"]);
            match key.starts_with("GET /v1/") {
                true => w.partner("GET", &format!("/v1/webhooks/{id}/deliveries?status=done")),
                false => w.operator(
                    "GET",
                    &format!("/internal/v1/subscriptions/{id}/deliveries?status=done"),
                ),
            }
        }
        "GET /internal/v1/subscriptions/{id}/deliveries 404 notFound" => World::new(26).operator(
            "GET",
            &format!("/internal/v1/subscriptions/{SAMPLE_SUB}/deliveries"),
        ),
        "GET /internal/v1/deliveries/{id} 200 retriedThenDelivered" => {
            let (mut w, id) = retried_then_delivered(doc);
            w.operator("GET", &format!("/internal/v1/deliveries/{id}"))
        }
        "GET /internal/v1/deliveries/{id} 404 notFound" => {
            World::new(27).operator("GET", &format!("/internal/v1/deliveries/{SAMPLE_DLV}"))
        }
        "POST /internal/v1/deliveries/{id}/replay 202 replaying" => {
            let (mut w, id) = retried_then_delivered(doc);
            w.operator("POST", &format!("/internal/v1/deliveries/{id}/replay"))
        }
        "POST /internal/v1/deliveries/{id}/replay 404 notFound" => World::new(28).operator(
            "POST",
            &format!("/internal/v1/deliveries/{SAMPLE_DLV}/replay"),
        ),
        "POST /internal/v1/deliveries/{id}/replay 409 subscriptionDisabled" => {
            let mut w = World::new(29);
            w.sim.net().endpoint(URL, [Reply::Status(204)]);
            let sub = w.subscribe(&["load.created"]);
            assert_eq!(w.ingest("load.created", &doc.load_bytes(), &[]).status, 202);
            let id = w.first_delivery(&sub);
            assert_eq!(
                w.partner("DELETE", &format!("/v1/webhooks/{sub}")).status,
                200
            );
            w.operator("POST", &format!("/internal/v1/deliveries/{id}/replay"))
        }
        _ => return None,
    };
    Some(resp)
}

/// The same request to every operation that refers to a shared response.
fn observe_users(
    doc: &Value,
    ex: &Example,
    sim: &mut edgehook_sim::sim::Simulation,
    auth: Auth<'_>,
    body: Option<Vec<u8>>,
) -> Vec<Observed> {
    let ops = operations(doc);
    ex.users
        .iter()
        .map(|(method, template, status)| {
            let op = ops
                .iter()
                .find(|o| &o.method == method && &o.template == template)
                .expect("a user is an operation");
            Observed {
                label: format!("{method} {template}"),
                status: *status,
                response: send(sim, method, generic_request(doc, op, auth, body.clone())),
            }
        })
        .collect()
}

/// The requests a scenario makes for a shared response's example: the same request to every
/// operation that refers to it (or, for 404 and 405, which no operation lists, one request).
fn component_scenario(doc: &Doc, ex: &Example) -> Option<Vec<Observed>> {
    let json = &doc.json;
    let single = |label: &str, status: u16, response: HttpResponse| {
        vec![Observed {
            label: label.to_owned(),
            status,
            response,
        }]
    };
    Some(match ex.key.as_str() {
        "components/responses/Unauthorized unauthorized"
        | "components/responses/OperatorUnauthorized unauthorized" => {
            observe_users(json, ex, &mut sim(40), Auth::None, None)
        }
        "components/responses/Forbidden forbidden" => {
            // Every route that can answer 403, with a valid key its scope refuses: an ingest
            // key everywhere but event ingest, a partner key there.
            let mut w = World::new(47);
            let issued = w.operator("POST", "/internal/v1/ingest-keys").json();
            let ingest_key = issued["data"]["apiKey"].as_str().expect("key").to_owned();
            let ops = operations(json);
            ex.users
                .iter()
                .map(|(method, template, status)| {
                    let op = ops
                        .iter()
                        .find(|o| &o.method == method && &o.template == template)
                        .expect("a user is an operation");
                    let key = if template == "/internal/v1/events" {
                        &w.key
                    } else {
                        &ingest_key
                    };
                    let request = generic_request(json, op, Auth::Bearer(key), None);
                    Observed {
                        label: format!("{method} {template}"),
                        status: *status,
                        response: send(&mut w.sim, method, request),
                    }
                })
                .collect()
        }
        "components/responses/PayloadTooLarge tooLarge" => {
            let mut w = World::new(41);
            let big = vec![b' '; 64 * 1024 + 1];
            observe_users(json, ex, &mut w.sim, Auth::AsDocumented(&w.key), Some(big))
        }
        "components/responses/StoreUnavailable storeUnavailable" => {
            let mut w = World::new(42);
            w.sim.store().set_faults(Faults {
                fail_all: true,
                ..Faults::default()
            });
            observe_users(json, ex, &mut w.sim, Auth::AsDocumented(&w.key), None)
        }
        "components/responses/Internal internal" => {
            let mut sim = sim_with(43, &[("max_concurrency", "lots")]);
            let key = "ehk_never-looked-at-the-configuration-fails-first";
            observe_users(json, ex, &mut sim, Auth::AsDocumented(key), None)
        }
        "components/responses/RateLimited rateLimited" => {
            // The default limit, used up 45 s into a minute: 15 s until it turns.
            let mut w = World::new(46);
            w.sim.advance(Duration::from_secs(45)).expect("advance");
            for _ in 0..1200 {
                assert_eq!(w.partner("GET", "/v1/webhooks?limit=1").status, 200);
            }
            observe_users(json, ex, &mut w.sim, Auth::AsDocumented(&w.key), None)
        }
        "components/responses/MethodNotAllowed methodNotAllowed" => {
            let resp = call(&mut sim(44), "PATCH", "/v1/webhooks", ADMIN);
            single("PATCH /v1/webhooks", 405, resp)
        }
        "components/responses/RouteNotFound routeNotFound" => {
            let resp = call(&mut sim(45), "GET", "/v1/webhook", ADMIN);
            single("GET /v1/webhook", 404, resp)
        }
        _ => return None,
    })
}

/// Compares an actual response with an example: status, shape, schema, headers.
fn check_observed(doc: &Doc, ex: &Example, o: &Observed) -> Result<(), String> {
    let body = o.response.json();
    if o.response.status != o.status {
        return Err(format!(
            "status {} instead of {}: {body}",
            o.response.status, o.status
        ));
    }
    same_shape(&ex.value, &body).map_err(|e| format!("{e}\n  actual body: {body}"))?;
    let media = &ex.response["content"]["application/json"];
    doc.schemas
        .check(&media["schema"], &body, "$")
        .map_err(|e| format!("schema: {e}"))?;
    if o.response.header("content-type") != Some("application/json") {
        return Err("Content-Type is not application/json".to_owned());
    }
    for (name, header) in ex.response["headers"].as_object().into_iter().flatten() {
        let header = resolve(&doc.json, header);
        match o.response.header(name) {
            None if header["required"] == true => {
                return Err(format!("documented header {name} is missing"));
            }
            None => {}
            Some(value) => doc.schemas.check(&header["schema"], &json!(value), name)?,
        }
    }
    if o.response.header("x-request-id") != body["requestId"].as_str() {
        return Err("X-Request-Id is not the body's requestId".to_owned());
    }
    if let Some(location) = o.response.header("location") {
        let id = body["data"]["id"].as_str().unwrap_or("");
        let names = [
            format!("/v1/webhooks/{id}"),
            format!("/v1/replays/{id}"),
            format!("/internal/v1/replays/{id}"),
        ];
        if !names.contains(&location.to_owned()) {
            return Err(format!("Location {location} does not name {id}"));
        }
    }
    Ok(())
}

#[test]
fn every_example_is_what_the_component_returns() {
    let doc = Doc::load();
    let examples = response_examples(&doc.json);
    assert!(examples.len() >= 30, "{} examples", examples.len());
    let mut failures = Vec::new();
    let mut compared = 0;
    for ex in &examples {
        let observed = match ex.status {
            Some(status) => scenario(&doc, &ex.key).map(|response| {
                vec![Observed {
                    label: "scenario".to_owned(),
                    status,
                    response,
                }]
            }),
            None => component_scenario(&doc, ex),
        };
        let Some(observed) = observed else {
            failures.push(format!(
                "{}: no scenario in tests/tests/openapi/conformance.rs makes this request",
                ex.key
            ));
            continue;
        };
        if observed.is_empty() {
            failures.push(format!(
                "{}: nothing observed (no operation uses it?)",
                ex.key
            ));
        }
        for o in &observed {
            compared += 1;
            if let Err(e) = check_observed(&doc, ex, o) {
                failures.push(format!("{} [{}]: {e}", ex.key, o.label));
            }
        }
    }
    let unsent: Vec<String> = doc
        .request_examples()
        .difference(&doc.used.borrow())
        .cloned()
        .collect();
    if !unsent.is_empty() {
        failures.push(format!("request examples no scenario sends: {unsent:?}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        compared > examples.len(),
        "shared responses are checked per operation"
    );
}

#[test]
fn the_example_check_fails_on_an_example_the_component_does_not_return() {
    let doc = Doc::load();
    let mut examples = response_examples(&doc.json);
    let ex = examples
        .iter_mut()
        .find(|e| e.key == "POST /v1/webhooks 201 created")
        .expect("the create example");
    let response = scenario(&doc, &ex.key).expect("a scenario");
    let o = Observed {
        label: "scenario".to_owned(),
        status: 201,
        response,
    };
    assert_eq!(check_observed(&doc, ex, &o), Ok(()));
    // A response with the example's shape (times are compared by type only) that violates its
    // schema fails the check.
    let mut strict = doc.json.clone();
    strict["components"]["schemas"]["CreatedSubscription"]["properties"]["createdAt"]["maximum"] =
        json!(0);
    let err = check_observed(&Doc::new(strict), ex, &o).expect_err("createdAt above maximum");
    assert!(err.starts_with("schema: $/data/createdAt"), "{err}");
    ex.value["data"]["eventTypes"] = json!(["load.created"]);
    let err = check_observed(&doc, ex, &o).expect_err("eventTypes differ");
    assert!(err.contains("$.data.eventTypes"), "{err}");
    ex.response["headers"]["X-Partner"] = json!({"required": true, "schema": {"type": "string"}});
    ex.value["data"]["eventTypes"] = json!(["load.created", "load.status_changed"]);
    let err = check_observed(&doc, ex, &o).expect_err("header missing");
    assert!(err.contains("X-Partner"), "{err}");
}
