//! Scenarios for the examples of the partner's notification endpoint
//! (`/v1/notification-endpoint`), kept apart from [`super::scenarios`] to keep each file
//! short; the conformance check asks here when that module has no scenario.

use super::{Doc, World};
use crate::common::*;
use edgehook_runtime::HttpResponse;
use serde_json::json;

const PATH: &str = "/v1/notification-endpoint";

/// `w`'s client with its endpoint registered as the request example `register` shows.
fn registered(doc: &Doc, w: &mut World) -> HttpResponse {
    let body = doc.request_example("PUT", PATH, "register");
    w.partner_send("PUT", PATH, &body)
}

/// The response for the example `key` (`"<METHOD> <template> <status> <name>"`), or `None`
/// when no scenario here makes it.
pub(super) fn scenario(doc: &Doc, key: &str) -> Option<HttpResponse> {
    let resp = match key {
        "PUT /v1/notification-endpoint 201 created" => registered(doc, &mut World::new(90)),
        "PUT /v1/notification-endpoint 200 changed" => {
            let mut w = World::new(91);
            assert_eq!(registered(doc, &mut w).status, 201);
            w.partner_send(
                "PUT",
                PATH,
                &json!({"url": "https://ops2.acme.example/notices"}),
            )
        }
        "PUT /v1/notification-endpoint 415 unsupportedMediaType" => {
            let mut w = World::new(92);
            let auth = bearer(&w.key);
            w.sim
                .request(
                    "PUT",
                    PATH,
                    &[("authorization", &auth), ("content-type", "text/plain")],
                    b"{}",
                )
                .expect("request runs")
        }
        "PUT /v1/notification-endpoint 422 badUrl" => World::new(93).partner_send(
            "PUT",
            PATH,
            &json!({"url": "http://ops.acme.example/notices"}),
        ),
        "GET /v1/notification-endpoint 200 endpoint" => {
            let mut w = World::new(94);
            assert_eq!(registered(doc, &mut w).status, 201);
            w.partner("GET", PATH)
        }
        "GET /v1/notification-endpoint 404 notFound" => World::new(95).partner("GET", PATH),
        "DELETE /v1/notification-endpoint 404 notFound" => World::new(96).partner("DELETE", PATH),
        _ => return None,
    };
    Some(resp)
}
