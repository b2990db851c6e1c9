//! Helpers shared by the black-box tests: one place that knows how to talk to the API.

use edgehook_component::storage::applog::decode_page;
pub use edgehook_component::storage::keys;
use edgehook_runtime::HttpResponse;
use edgehook_sim::sim::{SimBuilder, Simulation};
use serde_json::{Value, json};

/// The ids in the stored fan-out index of `event_type` (the pages of its append log,
/// `fanout:{type}:p{n}`), read straight from a store snapshot.
pub fn fanout_in(
    snapshot: &std::collections::BTreeMap<String, Vec<u8>>,
    event_type: &str,
) -> Vec<String> {
    let index = keys::fanout(event_type);
    let is_page = |k: &str| {
        k.strip_prefix(index.as_str())
            .is_some_and(|rest| rest.starts_with(":p"))
    };
    snapshot
        .range(index.as_str().to_owned()..)
        .skip_while(|(k, _)| !is_page(k))
        .take_while(|(k, _)| is_page(k))
        .flat_map(|(_, page)| decode_page(page).expect("a fan-out page"))
        .map(|entry| String::from_utf8(entry.item).expect("an id"))
        .collect()
}

/// Every stored subscription record of a store snapshot (`sub:{id}`), as its operator view
/// (`id`, `status`, `disabledReason`, ...; never the secret). Decoded with the component's
/// own reader: a record it cannot read fails the test.
pub fn subscription_records(snapshot: &std::collections::BTreeMap<String, Vec<u8>>) -> Vec<Value> {
    snapshot
        .range(keys::SUBSCRIPTION_PREFIX.to_owned()..)
        .take_while(|(k, _)| k.starts_with(keys::SUBSCRIPTION_PREFIX))
        .map(|(k, v)| subscription_record(v).unwrap_or_else(|| panic!("{k} does not decode")))
        .collect()
}

/// One stored subscription record, as its operator view; `None` if it does not decode.
pub fn subscription_record(bytes: &[u8]) -> Option<Value> {
    edgehook_component::subscriptions::Subscription::decode(bytes)
        .ok()
        .and_then(|s| serde_json::to_value(s.operator_view()).ok())
}

/// The operator token every test simulation is configured with.
pub const ADMIN: &str = "test-admin-token";

/// A builder with the admin token set.
pub fn builder(seed: u64) -> SimBuilder {
    Simulation::builder()
        .seed(seed)
        .config("admin_token", ADMIN)
}

/// A simulation with the admin token and the given settings (`wasi:config` key, value).
pub fn sim_with(seed: u64, settings: &[(&str, &str)]) -> Simulation {
    settings
        .iter()
        .fold(builder(seed), |b, (k, v)| b.config(k, v))
        .build()
        .expect("simulation")
}

/// The `X-Service-Delivery-Id` of a delivery an endpoint received.
pub fn delivery_id_of(request: &edgehook_sim::simnet::Received) -> String {
    request
        .header("x-service-delivery-id")
        .expect("a delivery id")
        .to_owned()
}

/// A simulation with the admin token set.
pub fn sim(seed: u64) -> Simulation {
    builder(seed).build().expect("simulation starts")
}

/// `Authorization: Bearer <token>`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Issues an API key for `client` through the operator API.
pub fn issue_key(sim: &mut Simulation, client: &str) -> String {
    let resp = call(
        sim,
        "POST",
        &format!("/internal/v1/clients/{client}/keys"),
        ADMIN,
    );
    assert_eq!(
        resp.status,
        201,
        "issue key: {}",
        String::from_utf8_lossy(&resp.body)
    );
    resp.json()["data"]["apiKey"]
        .as_str()
        .expect("apiKey")
        .to_owned()
}

/// `POST /v1/webhooks` with a JSON body and optional extra headers.
pub fn create_with(
    sim: &mut Simulation,
    key: &str,
    body: &Value,
    extra: &[(&str, &str)],
) -> HttpResponse {
    let auth = bearer(key);
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    headers.extend_from_slice(extra);
    sim.request(
        "POST",
        "/v1/webhooks",
        &headers,
        body.to_string().as_bytes(),
    )
    .expect("request runs")
}

/// Creates a subscription for `url` and event types; asserts 201 and returns the data.
pub fn create(sim: &mut Simulation, key: &str, url: &str, types: &[&str]) -> Value {
    let resp = create_with(sim, key, &json!({"url": url, "eventTypes": types}), &[]);
    assert_eq!(
        resp.status,
        201,
        "create: {}",
        String::from_utf8_lossy(&resp.body)
    );
    resp.json()["data"].clone()
}

/// [`create`], and the new subscription's id.
pub fn create_id(sim: &mut Simulation, key: &str, url: &str, types: &[&str]) -> String {
    create(sim, key, url, types)["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

/// A create for `url` (any JSON value) listening to `load.created`, answered as it is.
pub fn create_url(sim: &mut Simulation, key: &str, url: impl Into<Value>) -> HttpResponse {
    let url: Value = url.into();
    create_with(
        sim,
        key,
        &json!({"url": url, "eventTypes": ["load.created"]}),
        &[],
    )
}

/// A simulation (seed `seed`) where client `acme` has an API key and one subscription to
/// `https://hooks.example.com/x` for `load.created`: the simulation, the key, the id.
pub fn acme_subscribed(seed: u64) -> (Simulation, String, String) {
    let mut sim = sim(seed);
    let key = issue_key(&mut sim, "acme");
    let id = create_id(
        &mut sim,
        &key,
        "https://hooks.example.com/x",
        &["load.created"],
    );
    (sim, key, id)
}

/// [`call`], asserted to fail with `status` and the error `code`.
pub fn call_fails(
    sim: &mut Simulation,
    method: &str,
    path: &str,
    key: &str,
    status: u16,
    code: &str,
) {
    assert_error(&call(sim, method, path, key), status, code);
}

/// A deleted subscription is gone to its owner: deleting or reading it again is 404.
pub fn gone_to_its_owner(sim: &mut Simulation, id: &str, key: &str) {
    let path = format!("/v1/webhooks/{id}");
    call_fails(sim, "DELETE", &path, key, 404, "not_found");
    call_fails(sim, "GET", &path, key, 404, "not_found");
}

/// An authenticated request with no body.
pub fn call(sim: &mut Simulation, method: &str, path: &str, key: &str) -> HttpResponse {
    let auth = bearer(key);
    sim.request(method, path, &[("authorization", &auth)], b"")
        .expect("request runs")
}

/// Ids from `GET /v1/webhooks` (every page).
pub fn list_ids(sim: &mut Simulation, key: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut path = "/v1/webhooks?limit=100".to_owned();
    loop {
        let resp = call(sim, "GET", &path, key);
        assert_eq!(
            resp.status,
            200,
            "list: {}",
            String::from_utf8_lossy(&resp.body)
        );
        let body = resp.json();
        for item in body["data"].as_array().expect("data array") {
            ids.push(item["id"].as_str().expect("id").to_owned());
        }
        match body["nextCursor"].as_str() {
            Some(c) => path = format!("/v1/webhooks?limit=100&cursor={c}"),
            None => return ids,
        }
    }
}

/// Asserts the error envelope: status, code, and a requestId equal to `X-Request-Id`.
pub fn assert_error(resp: &HttpResponse, status: u16, code: &str) {
    let body = resp.json();
    assert_eq!(resp.status, status, "body: {body}");
    assert_eq!(body["error"]["code"], code, "body: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    assert!(body["error"]["details"].is_array());
    let rid = body["requestId"].as_str().expect("requestId");
    assert!(rid.starts_with("req_"));
    assert_eq!(resp.header("x-request-id"), Some(rid));
}

/// `POST /internal/v1/events` as the operator: the raw load, its type, and extra headers
/// (e.g. `Idempotency-Key`).
pub fn ingest(
    sim: &mut Simulation,
    event_type: &str,
    body: &[u8],
    extra: &[(&str, &str)],
) -> HttpResponse {
    let auth = bearer(ADMIN);
    let mut headers = vec![
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
        ("x-service-event", event_type),
    ];
    headers.extend_from_slice(extra);
    sim.request("POST", "/internal/v1/events", &headers, body)
        .expect("request runs")
}

/// The workspace root.
pub const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Every `.rs` file under `dir` (recursively, relative to the workspace), with only its code
/// before a `#[cfg(test)]` (unit tests build keys and values of their own on purpose), and
/// without `//` comments.
pub fn sources(dir: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut dirs = vec![std::path::PathBuf::from(format!("{ROOT}/{dir}"))];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("source dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            // Test-only files: `tests.rs` and `*_tests.rs` modules (compiled under
            // `#[cfg(test)]` by their parent) and integration tests.
            if path.extension().is_none_or(|e| e != "rs")
                || path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with("tests.rs"))
                || path.parent().is_some_and(|p| p.ends_with("tests"))
            {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source");
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let lines = code
                .lines()
                .map(|l| l.split("//").next().unwrap_or("").to_owned())
                .collect();
            let name = path
                .strip_prefix(ROOT)
                .unwrap_or(&path)
                .display()
                .to_string();
            out.push((name, lines));
        }
    }
    assert!(!out.is_empty(), "no sources under {dir}");
    out
}

/// An operator `POST` with a JSON body (e.g. a disable with its reason).
pub fn operator_post_json(sim: &mut Simulation, path: &str, body: &Value) -> HttpResponse {
    let auth = bearer(ADMIN);
    let body = serde_json::to_vec(body).expect("serializes");
    sim.request(
        "POST",
        path,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
        ],
        &body,
    )
    .expect("request runs")
}

/// The ids of every page of a cursor-paged list, from `path` (which carries its query,
/// e.g. `?status=disabled&limit=1`), with `key` (an API key or the admin token).
pub fn paged_ids(sim: &mut Simulation, path: &str, key: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut next = path.to_owned();
    loop {
        let resp = call(sim, "GET", &next, key);
        assert_eq!(resp.status, 200, "{next}: {}", resp.json());
        let body = resp.json();
        for item in body["data"].as_array().expect("data array") {
            ids.push(item["id"].as_str().expect("id").to_owned());
        }
        match body["nextCursor"].as_str() {
            Some(c) => next = format!("{path}&cursor={c}"),
            None => return ids,
        }
    }
}
