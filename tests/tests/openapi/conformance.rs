//! Examples are real: every response example has a scenario here that makes the request it
//! describes against a fresh simulation, and the actual response has the example's status and
//! shape, conforms to the documented schema and carries the documented headers
//! ([`check_observed`]). Request-body examples are what the scenarios send.

use super::scenarios::scenario;
use super::shape::same_shape;
use super::{Auth, Doc, World, generic_request, operations, resolve, send};
use crate::common::*;
use edgehook_runtime::HttpResponse;
use edgehook_runtime::store::Faults;
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
            // With a seal key, so that the re-seal route gets as far as the store.
            let mut w = World::with_seal_key(42);
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
            Some(status) => scenario(&doc, &ex.key)
                .or_else(|| super::notice_scenarios::scenario(&doc, &ex.key))
                .map(|response| {
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
