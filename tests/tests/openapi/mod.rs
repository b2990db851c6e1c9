//! `docs/openapi.json` against the real component (through the simulation host).
//!
//! - **Routes** ([`routes`]): every route the component serves (every `Route` variant) is in
//!   the document with exactly its methods, every documented path and method is served, and
//!   every other method answers 405 with `Allow`.
//! - **The document** ([`document`]): consistent with itself (refs resolve, path parameters,
//!   security and 401, the error envelope, `X-Request-Id`), every `pattern` an anchored
//!   regular expression, and every example conforming to its schema.
//! - **Examples are real** ([`conformance`]): every response example has a scenario that
//!   makes the request it describes against a fresh simulation. Status, the keys at every
//!   level and the deterministic values must be equal; ids, secrets, request ids and
//!   timestamps are compared by shape ([`shape`]). The actual body must also conform to the
//!   documented schema ([`Schemas`]). Request-body examples are what the scenarios send.
//! - **Headers** ([`conformance`], [`headers`]): every required header a response documents
//!   (`X-Request-Id` everywhere, `Location` on create, `Allow` on 405, `Retry-After` on 503,
//!   `WWW-Authenticate` on 401) is on the actual response, and the outbound delivery matches
//!   the `webhooks` entry.
//!
//! Schemas are checked by the `jsonschema` crate (draft 2020-12, the dialect of OpenAPI 3.1),
//! patterns by the `regex` crate; [`schemas`] holds the tests that the checker fails when it
//! should.

mod conformance;
mod document;
mod headers;
mod more_scenarios;
mod notice_scenarios;
pub(crate) mod routes;
mod scenarios;
mod schemas;
mod shape;

use schemas::Schemas;

use crate::common::*;
use edgehook_runtime::HttpResponse;
use edgehook_sim::sim::Simulation;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::BTreeSet;

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
/// The keys of an OpenAPI path item that are operations.
const HTTP_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];
const URL: &str = "https://hooks.example.com/loads";
pub(crate) const SAMPLE_SUB: &str = "sub_0123456789abcdef01234567";
pub(crate) const SAMPLE_DLV: &str = "dlv_0123456789abcdef01234567";
/// A well-formed replay job id that names no job.
pub(crate) const SAMPLE_RPL: &str = "rpl_0123456789abcdef01234567";
pub(crate) const SAMPLE_KEY: &str = "key_0123456789abcdef01234567";
static NULL: Value = Value::Null;

fn load_doc() -> Value {
    let text = std::fs::read_to_string(DOC).expect("docs/openapi.json is readable");
    serde_json::from_str(&text).expect("docs/openapi.json is JSON")
}

/// Follows local `$ref`s until a value that is not a reference (`null` if one dangles).
fn resolve<'a>(doc: &'a Value, mut v: &'a Value) -> &'a Value {
    for _ in 0..16 {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                v = r
                    .strip_prefix('#')
                    .and_then(|p| doc.pointer(p))
                    .unwrap_or(&NULL);
            }
            None => return v,
        }
    }
    &NULL
}

/// A JSON pointer token (`/` and `~` escaped).
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// One operation of the document.
struct Op<'a> {
    /// Upper case.
    method: String,
    template: String,
    op: &'a Value,
    path_item: &'a Value,
}

fn operations(doc: &Value) -> Vec<Op<'_>> {
    let mut ops = Vec::new();
    for (template, item) in doc["paths"].as_object().into_iter().flatten() {
        for (key, op) in item.as_object().into_iter().flatten() {
            if HTTP_METHODS.contains(&key.as_str()) {
                ops.push(Op {
                    method: key.to_ascii_uppercase(),
                    template: template.clone(),
                    op,
                    path_item: item,
                });
            }
        }
    }
    ops
}

/// The parameters of an operation: the path item's, then the operation's own.
fn parameters<'a>(doc: &'a Value, op: &Op<'a>) -> Vec<&'a Value> {
    [op.path_item, op.op]
        .into_iter()
        .flat_map(|v| v["parameters"].as_array().into_iter().flatten())
        .map(|p| resolve(doc, p))
        .collect()
}

/// The document, its schemas, and which request examples the scenarios sent.
struct Doc {
    json: Value,
    schemas: Schemas,
    used: RefCell<BTreeSet<String>>,
}

impl Doc {
    fn load() -> Doc {
        Doc::new(load_doc())
    }

    fn new(json: Value) -> Doc {
        Doc {
            schemas: Schemas::new(&json),
            json,
            used: RefCell::new(BTreeSet::new()),
        }
    }

    /// A request-body example of an operation (marked as sent).
    fn request_example(&self, method: &str, template: &str, name: &str) -> Value {
        let pointer = format!(
            "/paths/{}/{}/requestBody/content/application~1json/examples/{name}/value",
            escape(template),
            method.to_ascii_lowercase()
        );
        let value = self
            .json
            .pointer(&pointer)
            .unwrap_or_else(|| panic!("no request example {pointer}"))
            .clone();
        self.used
            .borrow_mut()
            .insert(format!("{method} {template} {name}"));
        value
    }

    /// The load the events request example holds, as bytes.
    fn load_bytes(&self) -> Vec<u8> {
        let load = self.request_example("POST", "/internal/v1/events", "load");
        serde_json::to_vec(&load).expect("serializes")
    }

    /// Every request-body example of the paths.
    fn request_examples(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for op in operations(&self.json) {
            let examples = &op.op["requestBody"]["content"]["application/json"]["examples"];
            for name in examples.as_object().into_iter().flatten().map(|(k, _)| k) {
                out.insert(format!("{} {} {name}", op.method, op.template));
            }
        }
        out
    }
}

/// A simulation with an API key for client `acme`.
struct World {
    sim: Simulation,
    key: String,
}

impl World {
    fn new(seed: u64) -> World {
        let mut sim = sim(seed);
        let key = issue_key(&mut sim, "acme");
        World { sim, key }
    }

    /// As [`World::new`], with a cap of one subscription per client.
    fn at_cap_of_one(seed: u64) -> World {
        let mut sim = sim_with(seed, &[("subscription_limit", "1")]);
        let key = issue_key(&mut sim, "acme");
        World { sim, key }
    }

    /// As [`World::new`], with secrets sealed under [`more_scenarios::SEAL_KEY`].
    fn with_seal_key(seed: u64) -> World {
        let mut sim = sim_with(seed, &[("seal_key", more_scenarios::SEAL_KEY)]);
        let key = issue_key(&mut sim, "acme");
        World { sim, key }
    }

    /// An operator `POST` with a JSON body.
    fn operator_json(&mut self, path: &str, body: &Value) -> HttpResponse {
        operator_post_json(&mut self.sim, path, body)
    }

    /// A partner `POST` with a JSON body.
    fn partner_json(&mut self, path: &str, body: &Value) -> HttpResponse {
        self.partner_send("POST", path, body)
    }

    fn partner_send(&mut self, method: &str, path: &str, body: &Value) -> HttpResponse {
        let auth = bearer(&self.key);
        let headers = [
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        self.sim
            .request(method, path, &headers, body.to_string().as_bytes())
            .expect("request runs")
    }

    fn create(&mut self, body: &Value, extra: &[(&str, &str)]) -> HttpResponse {
        create_with(&mut self.sim, &self.key, body, extra)
    }

    /// Creates a subscription to `URL` for `types` and returns its id.
    fn subscribe(&mut self, types: &[&str]) -> String {
        create(&mut self.sim, &self.key, URL, types)["id"]
            .as_str()
            .expect("id")
            .to_owned()
    }

    fn partner(&mut self, method: &str, path: &str) -> HttpResponse {
        call(&mut self.sim, method, path, &self.key)
    }

    fn operator(&mut self, method: &str, path: &str) -> HttpResponse {
        call(&mut self.sim, method, path, ADMIN)
    }

    fn ingest(&mut self, event_type: &str, body: &[u8], extra: &[(&str, &str)]) -> HttpResponse {
        ingest(&mut self.sim, event_type, body, extra)
    }

    /// The first delivery of a subscription.
    fn first_delivery(&mut self, sub: &str) -> String {
        let page = self.operator(
            "GET",
            &format!("/internal/v1/subscriptions/{sub}/deliveries"),
        );
        page.json()["data"][0]["id"]
            .as_str()
            .expect("a delivery")
            .to_owned()
    }
}

/// Credentials for a generic request.
#[derive(Clone, Copy)]
enum Auth<'a> {
    /// No `Authorization` header.
    None,
    /// What the operation's security asks for, with this partner API key.
    AsDocumented(&'a str),
    /// This bearer token, whatever the operation's security asks for.
    Bearer(&'a str),
}

/// A request to an operation that passes every check before the one under test: a path
/// with well-formed ids and the required query parameters, the documented credentials,
/// required headers and a valid body.
fn generic_request(
    doc: &Value,
    op: &Op<'_>,
    auth: Auth<'_>,
    body: Option<Vec<u8>>,
) -> (String, Vec<(String, String)>, Vec<u8>) {
    let params = parameters(doc, op);
    let path = op
        .template
        .split('/')
        .map(|segment| {
            let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) else {
                return segment.to_owned();
            };
            let param = params
                .iter()
                .find(|p| p["name"] == name && p["in"] == "path")
                .expect("declared path parameter");
            let pattern = resolve(doc, &param["schema"])["pattern"]
                .as_str()
                .unwrap_or("");
            match pattern
                .strip_prefix('^')
                .and_then(|p| p.strip_suffix("_[0-9a-f]{24}$"))
            {
                Some(prefix) => format!("{prefix}_{}", "0".repeat(24)),
                None => "acme".to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("/");
    // Required query parameters, with their documented examples.
    let query: Vec<String> = params
        .iter()
        .filter(|p| p["in"] == "query" && p["required"] == true)
        .map(|p| {
            let name = p["name"].as_str().expect("name");
            format!("{name}={}", p["example"].as_str().expect("an example"))
        })
        .collect();
    let path = match query.is_empty() {
        true => path,
        false => format!("{path}?{}", query.join("&")),
    };
    let mut headers: Vec<(String, String)> = Vec::new();
    if let Auth::Bearer(token) = auth {
        headers.push(("authorization".into(), bearer(token)));
    }
    if let Auth::AsDocumented(key) = auth {
        let scheme = op.op["security"][0]
            .as_object()
            .and_then(|o| o.keys().next().cloned());
        match scheme.as_deref() {
            Some("partnerApiKey") => headers.push(("authorization".into(), bearer(key))),
            Some("adminToken") => headers.push(("authorization".into(), bearer(ADMIN))),
            // The key as a session cookie: refused, but only after the store is read.
            Some("portalSession") => {
                headers.push(("cookie".into(), format!("edgehook_session={key}")))
            }
            _ => {}
        }
    }
    for p in &params {
        if p["in"] == "header" && p["required"] == true {
            let schema = resolve(doc, &p["schema"]);
            let value = schema["enum"][0]
                .as_str()
                .or(p["example"].as_str())
                .expect("a value for the header");
            headers.push((
                p["name"].as_str().expect("name").to_ascii_lowercase(),
                value.to_owned(),
            ));
        }
    }
    let content = &op.op["requestBody"]["content"]["application/json"];
    let mut sent = Vec::new();
    if !content.is_null() {
        headers.push(("content-type".into(), "application/json".into()));
        let example = content["examples"]
            .as_object()
            .into_iter()
            .flatten()
            .find(|(name, _)| *name != "invalid")
            .map(|(_, ex)| ex["value"].clone())
            .expect("a valid request example");
        sent = serde_json::to_vec(&example).expect("serializes");
    }
    (path, headers, body.unwrap_or(sent))
}

fn send(
    sim: &mut Simulation,
    method: &str,
    (path, headers, body): (String, Vec<(String, String)>, Vec<u8>),
) -> HttpResponse {
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    sim.request(method, &path, &headers, &body)
        .expect("request runs")
}
