//! The scenarios behind the response examples ([`super::conformance`]): for each example
//! written in an operation (`METHOD template status name`), the request that makes the
//! response it describes, on a fresh simulation.

use super::{Doc, SAMPLE_DLV, SAMPLE_RPL, SAMPLE_SUB, URL, World};
use crate::common::*;
use edgehook_runtime::HttpResponse;
use edgehook_sim::simnet::Reply;
use serde_json::json;
use std::time::Duration;

/// A delivery whose attempt 1 got a 500 and attempt 2 a 200: the world, its subscription
/// and the delivery.
fn retried_then_delivered(doc: &Doc) -> (World, String, String) {
    let mut w = World::new(7);
    w.sim
        .net()
        .endpoint(URL, [Reply::Status(500), Reply::Status(200)]);
    let sub = w.subscribe(&["load.created"]);
    let resp = w.ingest("load.created", &doc.load_bytes(), &[]);
    assert_eq!(resp.status, 202, "{}", resp.json());
    w.sim.advance(Duration::from_secs(120)).expect("advance");
    let id = w.first_delivery(&sub);
    (w, sub, id)
}

/// A world where one event was delivered at once to a new subscription: the world, the
/// subscription and its delivery.
fn delivered_once(doc: &Doc, seed: u64) -> (World, String, String) {
    let mut w = World::new(seed);
    w.sim.net().endpoint(URL, [Reply::Status(204)]);
    let sub = w.subscribe(&["load.created"]);
    assert_eq!(w.ingest("load.created", &doc.load_bytes(), &[]).status, 202);
    let id = w.first_delivery(&sub);
    (w, sub, id)
}

/// A portal link's token for acme, minted by the operator.
fn portal_link(w: &mut World) -> String {
    let minted = w.operator("POST", "/internal/v1/clients/acme/portal-links");
    assert_eq!(minted.status, 201, "{}", minted.json());
    minted.json()["data"]["token"]
        .as_str()
        .expect("token")
        .to_owned()
}

/// Exchanges `token` as the request example `link` shows (its token replaced).
fn exchange(doc: &Doc, w: &mut World, token: &str) -> HttpResponse {
    let mut body = doc.request_example("POST", "/v1/portal/sessions", "link");
    body["token"] = json!(token);
    let headers = [("content-type", "application/json")];
    w.sim
        .request(
            "POST",
            "/v1/portal/sessions",
            &headers,
            body.to_string().as_bytes(),
        )
        .expect("runs")
}

/// The `Cookie` header a browser sends back after an exchange.
fn session_cookie(exchanged: &HttpResponse) -> String {
    let set = exchanged.header("set-cookie").expect("a session cookie");
    set.split(';').next().expect("name=value").to_owned()
}

/// The request a scenario makes for the example written in an operation, `key`.
pub(super) fn scenario(doc: &Doc, key: &str) -> Option<HttpResponse> {
    let subscription = || doc.request_example("POST", "/v1/webhooks", "subscription");
    let resp = match key {
        "GET /healthz 200 ok" => sim(1).request("GET", "/healthz", &[], b"").expect("runs"),
        "GET /v1/webhooks 200 firstPage" => {
            let mut w = World::new(2);
            // The same subscription twice; the second in FIFO order (lists look the same).
            assert_eq!(w.create(&subscription(), &[]).status, 201);
            let fifo = doc.request_example("POST", "/v1/webhooks", "fifo");
            assert_eq!(w.create(&fifo, &[]).status, 201);
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
        "GET /internal/v1/subscriptions 200 activeOfClient" => {
            let mut w = World::new(48);
            w.subscribe(&["load.created"]);
            w.subscribe(&["load.created"]);
            let gone = w.subscribe(&["load.created"]);
            assert_eq!(
                w.partner("DELETE", &format!("/v1/webhooks/{gone}")).status,
                200
            );
            let page = "/internal/v1/subscriptions?status=active&clientId=acme&limit=1";
            w.operator("GET", page)
        }
        "GET /v1/webhooks 422 badLimit" => World::new(3).partner("GET", "/v1/webhooks?limit=0"),
        "POST /v1/webhooks 201 created" => {
            let mut w = World::new(4);
            // A paced one first (its own 201 is not this example's).
            let paced = doc.request_example("POST", "/v1/webhooks", "paced");
            assert_eq!(w.create(&paced, &[]).status, 201);
            w.create(&subscription(), &[])
        }
        "PATCH /v1/webhooks/{id} 200 switched" => {
            let mut w = World::new(60);
            let id = w.subscribe(&["load.created", "load.status_changed"]);
            let body = doc.request_example("PATCH", "/v1/webhooks/{id}", "standardWithHeaders");
            w.partner_send("PATCH", &format!("/v1/webhooks/{id}"), &body)
        }
        "PATCH /v1/webhooks/{id} 404 notFound" => World::new(61).partner_send(
            "PATCH",
            &format!("/v1/webhooks/{SAMPLE_SUB}"),
            &json!({"headers": {}}),
        ),
        "PATCH /v1/webhooks/{id} 422 headerNotAllowed" => {
            let mut w = World::new(62);
            let id = w.subscribe(&["load.created"]);
            let body = doc.request_example("PATCH", "/v1/webhooks/{id}", "invalidServiceHeader");
            w.partner_send("PATCH", &format!("/v1/webhooks/{id}"), &body)
        }
        "PATCH /v1/webhooks/{id} 422 privateTarget" => {
            let mut w = World::new(63);
            let id = w.subscribe(&["load.created"]);
            let body = json!({"url": "https://10.1.2.3/hook"});
            w.partner_send("PATCH", &format!("/v1/webhooks/{id}"), &body)
        }
        "POST /v1/webhooks/{id}/rotate-secret 200 rotated" => {
            let mut w = World::new(64);
            let create = doc.request_example("POST", "/v1/webhooks", "standardWithHeaders");
            let created = w.create(&create, &[]);
            assert_eq!(created.status, 201, "{}", created.json());
            let id = created.json()["data"]["id"]
                .as_str()
                .expect("id")
                .to_owned();
            let body = doc.request_example("POST", "/v1/webhooks/{id}/rotate-secret", "oneHour");
            w.partner_json(&format!("/v1/webhooks/{id}/rotate-secret"), &body)
        }
        "POST /internal/v1/subscriptions/{id}/rotate-secret 200 rotated" => {
            let mut w = World::new(66);
            let id = w.subscribe(&["load.created"]);
            let body = doc.request_example(
                "POST",
                "/internal/v1/subscriptions/{id}/rotate-secret",
                "leaked",
            );
            w.operator_json(
                &format!("/internal/v1/subscriptions/{id}/rotate-secret"),
                &body,
            )
        }
        "POST /internal/v1/clients/{clientId}/portal-links 201 minted" => {
            World::new(80).operator("POST", "/internal/v1/clients/acme/portal-links")
        }
        "POST /internal/v1/clients/{clientId}/portal-links 422 badClientId" => {
            World::new(81).operator("POST", "/internal/v1/clients/acme%20eu/portal-links")
        }
        "POST /v1/portal/sessions 201 session" => {
            let mut w = World::new(82);
            let link = portal_link(&mut w);
            exchange(doc, &mut w, &link)
        }
        "POST /v1/portal/sessions 401 usedLink" => {
            let mut w = World::new(83);
            let link = portal_link(&mut w);
            assert_eq!(exchange(doc, &mut w, &link).status, 201);
            exchange(doc, &mut w, &link)
        }
        "POST /v1/portal/sessions 422 badToken" => {
            let body = doc.request_example("POST", "/v1/portal/sessions", "invalid");
            let headers = [("content-type", "application/json")];
            let mut w = World::new(84);
            let path = "/v1/portal/sessions";
            w.sim
                .request("POST", path, &headers, body.to_string().as_bytes())
                .expect("runs")
        }
        "GET /v1/portal/sessions/current 200 session" => {
            // The seed of the exchange's scenario: the same session, the same CSRF token.
            let mut w = World::new(82);
            let link = portal_link(&mut w);
            let made = exchange(doc, &mut w, &link);
            let cookie = session_cookie(&made);
            let headers = [("cookie", cookie.as_str())];
            w.sim
                .request("GET", "/v1/portal/sessions/current", &headers, b"")
                .expect("runs")
        }
        "DELETE /v1/portal/sessions/current 403 csrfFailed" => {
            let mut w = World::new(86);
            let link = portal_link(&mut w);
            let made = exchange(doc, &mut w, &link);
            let cookie = session_cookie(&made);
            let headers = [("cookie", cookie.as_str())];
            w.sim
                .request("DELETE", "/v1/portal/sessions/current", &headers, b"")
                .expect("runs")
        }
        "POST /v1/webhooks/{id}/rotate-secret 404 notFound" => {
            World::new(65).partner("POST", &format!("/v1/webhooks/{SAMPLE_SUB}/rotate-secret"))
        }
        "POST /v1/webhooks/{id}/rotate-secret 422 badOverlap" => {
            let mut w = World::new(66);
            let id = w.subscribe(&["load.created"]);
            let body =
                doc.request_example("POST", "/v1/webhooks/{id}/rotate-secret", "invalidOverlap");
            w.partner_json(&format!("/v1/webhooks/{id}/rotate-secret"), &body)
        }
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
            let (mut w, _, id) = retried_then_delivered(doc);
            w.operator("GET", &format!("/internal/v1/deliveries/{id}"))
        }
        "GET /internal/v1/deliveries/{id} 404 notFound" => {
            World::new(27).operator("GET", &format!("/internal/v1/deliveries/{SAMPLE_DLV}"))
        }
        "POST /internal/v1/deliveries/{id}/replay 202 replaying" => {
            let (mut w, _, id) = retried_then_delivered(doc);
            w.operator("POST", &format!("/internal/v1/deliveries/{id}/replay"))
        }
        "POST /internal/v1/deliveries/{id}/replay 404 notFound" => World::new(28).operator(
            "POST",
            &format!("/internal/v1/deliveries/{SAMPLE_DLV}/replay"),
        ),
        "POST /internal/v1/deliveries/{id}/replay 409 subscriptionDisabled" => {
            let (mut w, sub, id) = delivered_once(doc, 29);
            assert_eq!(
                w.partner("DELETE", &format!("/v1/webhooks/{sub}")).status,
                200
            );
            w.operator("POST", &format!("/internal/v1/deliveries/{id}/replay"))
        }
        "POST /v1/webhooks/{id}/deliveries/{deliveryId}/replay 202 replaying" => {
            let (mut w, sub, id) = retried_then_delivered(doc);
            w.partner(
                "POST",
                &format!("/v1/webhooks/{sub}/deliveries/{id}/replay"),
            )
        }
        "POST /v1/webhooks/{id}/deliveries/{deliveryId}/replay 404 notFound" => {
            let mut w = World::new(30);
            let sub = w.subscribe(&["load.created"]);
            w.partner(
                "POST",
                &format!("/v1/webhooks/{sub}/deliveries/{SAMPLE_DLV}/replay"),
            )
        }
        "POST /v1/webhooks/{id}/deliveries/{deliveryId}/replay 409 subscriptionDisabled" => {
            let (mut w, sub, id) = delivered_once(doc, 31);
            assert_eq!(
                w.operator("POST", &format!("/internal/v1/subscriptions/{sub}/disable"))
                    .status,
                200
            );
            w.partner(
                "POST",
                &format!("/v1/webhooks/{sub}/deliveries/{id}/replay"),
            )
        }
        _ => return super::more_scenarios::scenario(doc, key),
    };
    Some(resp)
}
