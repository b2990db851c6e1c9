//! `docs/openapi.json` against the real component (through the simulation host).
//!
//! - **Routes**: every route the component serves (every `Route` variant) is in the document
//!   with exactly its methods, and every documented path and method is served
//!   ([`check_routes`]).
//! - **Examples are real**: every response example has a scenario here that makes the request
//!   it describes against a fresh simulation. Status, the keys at every level and the
//!   deterministic values must be equal; ids, secrets, request ids and timestamps are compared
//!   by shape ([`same_shape`]). The actual body must also conform to the documented schema
//!   ([`conforms`]). Request-body examples are what the scenarios send.
//! - **Headers**: every required header a response documents (`X-Request-Id` everywhere,
//!   `Location` on create, `Allow` on 405, `Retry-After` on 503, `WWW-Authenticate` on 401) is
//!   on the actual response, and the outbound delivery matches the `webhooks` entry.

use crate::common;

use common::*;
use edgehook_component::router::Route;
use edgehook_host::HttpResponse;
use edgehook_host::outbound::Reply;
use edgehook_host::store::Faults;
use serde_json::{Value, json};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
/// The keys of an OpenAPI path item that are operations.
const HTTP_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];
const URL: &str = "https://hooks.example.com/loads";
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

// ---------------------------------------------------------------------------------------------
// Routes
// ---------------------------------------------------------------------------------------------

const SAMPLE_SUB: &str = "sub_0123456789abcdef01234567";
const SAMPLE_DLV: &str = "dlv_0123456789abcdef01234567";
const SAMPLE_KEY: &str = "key_0123456789abcdef01234567";

/// One concrete request path per `Route` variant, mirroring `Route::parse`.
fn served_paths() -> Vec<String> {
    vec![
        "/healthz".to_owned(),
        "/v1/webhooks".to_owned(),
        format!("/v1/webhooks/{SAMPLE_SUB}"),
        "/internal/v1/settings".to_owned(),
        "/internal/v1/clients/acme/keys".to_owned(),
        format!("/internal/v1/clients/acme/keys/{SAMPLE_KEY}"),
        "/internal/v1/events".to_owned(),
        "/internal/v1/tick".to_owned(),
        format!("/internal/v1/subscriptions/{SAMPLE_SUB}"),
        format!("/internal/v1/subscriptions/{SAMPLE_SUB}/disable"),
        format!("/internal/v1/subscriptions/{SAMPLE_SUB}/deliveries"),
        format!("/internal/v1/deliveries/{SAMPLE_DLV}"),
        format!("/internal/v1/deliveries/{SAMPLE_DLV}/replay"),
    ]
}

/// How many `Route` variants there are.
const VARIANTS: usize = 13;

/// Numbers every `Route` variant. There is no wildcard arm: a new variant does not compile
/// until it is numbered here, and [`check_routes`] then fails until [`served_paths`] has a
/// path for it.
fn variant(route: &Route) -> usize {
    match route {
        Route::Health => 0,
        Route::Webhooks => 1,
        Route::Webhook(_) => 2,
        Route::OperatorSettings => 3,
        Route::ClientKeys(_) => 4,
        Route::ClientKey(..) => 5,
        Route::Events => 6,
        Route::Tick => 7,
        Route::OperatorSubscription(_) => 8,
        Route::DisableSubscription(_) => 9,
        Route::SubscriptionDeliveries(_) => 10,
        Route::Delivery(_) => 11,
        Route::Replay(_) => 12,
    }
}

/// Whether a concrete path fits a path template (`{name}` matches one non-empty segment).
fn template_matches(template: &str, path: &str) -> bool {
    let t: Vec<&str> = template.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| (t.starts_with('{') && t.ends_with('}') && !p.is_empty()) || t == p)
}

/// A concrete path for a template (every parameter becomes `x`).
fn instantiate(template: &str) -> String {
    template
        .split('/')
        .map(|s| if s.starts_with('{') { "x" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

/// The documented methods (upper case) of every path template.
fn documented_methods(doc: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (template, item) in doc["paths"].as_object().into_iter().flatten() {
        let methods = out.entry(template.clone()).or_default();
        for key in item.as_object().into_iter().flatten().map(|(k, _)| k) {
            if HTTP_METHODS.contains(&key.as_str()) {
                methods.insert(key.to_ascii_uppercase());
            }
        }
    }
    out
}

/// Every way the document and the component's routes disagree (empty when they agree): a
/// served route missing from the document or with other methods, and a documented path or
/// method the component does not serve.
fn check_routes(doc: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let documented = documented_methods(doc);
    let mut covered = BTreeSet::new();
    for path in served_paths() {
        let Some(route) = Route::parse(&path) else {
            problems.push(format!(
                "{path}: the component does not serve this sample path"
            ));
            continue;
        };
        covered.insert(variant(&route));
        let served: BTreeSet<String> = route.methods().iter().map(|m| (*m).to_owned()).collect();
        let templates: Vec<(&String, &BTreeSet<String>)> = documented
            .iter()
            .filter(|(t, _)| template_matches(t, &path))
            .collect();
        match templates.as_slice() {
            [] => problems.push(format!(
                "{path} ({route:?}, {served:?}) is served but not in the document"
            )),
            [(template, methods)] => {
                if *methods != &served {
                    problems.push(format!(
                        "{template}: the document has {methods:?}, the component serves {served:?}"
                    ));
                }
            }
            many => problems.push(format!(
                "{path} matches several documented paths: {:?}",
                many.iter().map(|(t, _)| t).collect::<Vec<_>>()
            )),
        }
    }
    for i in 0..VARIANTS {
        if !covered.contains(&i) {
            problems.push(format!(
                "Route variant #{i} has no sample path in served_paths()"
            ));
        }
    }
    for (template, methods) in &documented {
        match Route::parse(&instantiate(template)) {
            None => problems.push(format!(
                "{template} is in the document but the component serves no such path"
            )),
            Some(route) => {
                for method in methods {
                    if !route.methods().contains(&method.as_str()) {
                        problems.push(format!(
                            "{method} {template} is in the document but the component answers it 405"
                        ));
                    }
                }
                if methods.is_empty() {
                    problems.push(format!("{template} documents no method"));
                }
            }
        }
    }
    problems
}

#[test]
fn every_route_is_documented_with_exactly_its_methods() {
    let problems = check_routes(&load_doc());
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_route_check_fails_when_the_document_misses_or_invents_a_route() {
    let mut doc = load_doc();
    let paths = doc["paths"].as_object_mut().expect("paths");
    paths.remove("/internal/v1/tick").expect("documented");
    paths["/v1/webhooks/{id}"]
        .as_object_mut()
        .expect("path item")
        .remove("delete")
        .expect("documented");
    paths["/healthz"]["put"] = json!({"responses": {}});
    paths.insert(
        "/v1/webhooks/{id}/pause".to_owned(),
        json!({"post": {"responses": {}}}),
    );
    let problems = check_routes(&doc);
    let mentions = |needle: &str| problems.iter().any(|p| p.contains(needle));
    assert!(mentions("/internal/v1/tick (Tick"), "{problems:#?}");
    assert!(
        mentions("/v1/webhooks/{id}: the document has"),
        "{problems:#?}"
    );
    assert!(mentions("PUT /healthz"), "{problems:#?}");
    assert!(
        mentions("/v1/webhooks/{id}/pause is in the document"),
        "{problems:#?}"
    );
    assert!(mentions("/healthz: the document has"), "{problems:#?}");
    assert_eq!(problems.len(), 5, "{problems:#?}");
}

// ---------------------------------------------------------------------------------------------
// The document itself
// ---------------------------------------------------------------------------------------------

/// Every `$ref` in `v`, with where it is.
fn refs(v: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(o) => {
            for (k, child) in o {
                if k == "$ref" {
                    out.push((at.to_owned(), child.as_str().unwrap_or("").to_owned()));
                } else {
                    refs(child, &format!("{at}/{}", escape(k)), out);
                }
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                refs(child, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Consistency of the document with itself and with the conventions every route follows.
fn check_document(doc: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if !doc["openapi"]
        .as_str()
        .is_some_and(|v| v.starts_with("3.1."))
    {
        problems.push("openapi is not 3.1.x".to_owned());
    }
    let mut all_refs = Vec::new();
    refs(doc, "", &mut all_refs);
    for (at, r) in &all_refs {
        if r.strip_prefix('#').and_then(|p| doc.pointer(p)).is_none() {
            problems.push(format!("{at}: $ref {r:?} does not resolve"));
        }
    }
    let mut operation_ids = BTreeSet::new();
    for op in operations(doc) {
        let name = format!("{} {}", op.method, op.template);
        match op.op["operationId"].as_str() {
            Some(id) if operation_ids.insert(id.to_owned()) => {}
            _ => problems.push(format!("{name}: missing or duplicate operationId")),
        }
        // Path parameters: exactly those of the template, required.
        let params = parameters(doc, &op);
        let declared: BTreeSet<&str> = params
            .iter()
            .filter(|p| p["in"] == "path")
            .filter_map(|p| p["name"].as_str())
            .collect();
        let in_template: BTreeSet<&str> = op
            .template
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        if declared != in_template {
            problems.push(format!(
                "{name}: path parameters {declared:?}, template has {in_template:?}"
            ));
        }
        if params
            .iter()
            .any(|p| p["in"] == "path" && p["required"] != true)
        {
            problems.push(format!("{name}: a path parameter is not required"));
        }
        // Security and 401 go together.
        let secured = op.op["security"].as_array().is_some_and(|s| !s.is_empty());
        if op.op.get("security").is_none() {
            problems.push(format!("{name}: no security requirement stated"));
        }
        let responses = &op.op["responses"];
        // The operator API has its own 401 (it names the admin token, not an API key).
        let unauthorized = responses["401"]["$ref"] == "#/components/responses/Unauthorized"
            || responses["401"]["$ref"] == "#/components/responses/OperatorUnauthorized";
        if secured != unauthorized {
            problems.push(format!(
                "{name}: secured = {secured} but 401 Unauthorized documented = {unauthorized}"
            ));
        }
        // Every route can answer 413 (body limit) and 500 (bad configuration).
        for status in ["413", "500"] {
            if responses.get(status).is_none() {
                problems.push(format!("{name}: {status} is not documented"));
            }
        }
        for (status, response) in responses.as_object().into_iter().flatten() {
            let response = resolve(doc, response);
            let rid = resolve(doc, &response["headers"]["X-Request-Id"]);
            if rid["required"] != true {
                problems.push(format!("{name} {status}: no required X-Request-Id header"));
            }
            let schema = &response["content"]["application/json"]["schema"]["$ref"];
            if !status.starts_with('2') && schema != "#/components/schemas/Error" {
                problems.push(format!("{name} {status}: not the Error envelope"));
            }
            if status == "201"
                && op.template == "/v1/webhooks"
                && resolve(doc, &response["headers"]["Location"])["required"] != true
            {
                problems.push(format!("{name} 201: no Location header"));
            }
        }
    }
    // Examples conform to their own schemas.
    let mut media: Vec<(String, &Value)> = Vec::new();
    for op in operations(doc) {
        let name = format!("{} {}", op.method, op.template);
        media.push((
            format!("{name} request"),
            &op.op["requestBody"]["content"]["application/json"],
        ));
        for (status, r) in op.op["responses"].as_object().into_iter().flatten() {
            media.push((
                format!("{name} {status}"),
                &resolve(doc, r)["content"]["application/json"],
            ));
        }
    }
    let hook = &doc["webhooks"]["loadEvent"]["post"];
    media.push((
        "webhooks loadEvent".to_owned(),
        &hook["requestBody"]["content"]["application/json"],
    ));
    for (name, m) in media {
        for (ex_name, ex) in m["examples"].as_object().into_iter().flatten() {
            let result = conforms(doc, &m["schema"], &ex["value"], "$");
            // A request example named `invalid...` shows what the API refuses: it must not
            // conform.
            match (
                name.ends_with(" request") && ex_name.starts_with("invalid"),
                result,
            ) {
                (false, Err(e)) => problems.push(format!("{name} example {ex_name}: {e}")),
                (true, Ok(())) => {
                    problems.push(format!("{name} example {ex_name} is valid, not invalid"));
                }
                _ => {}
            }
        }
    }
    if hook["requestBody"]["content"]["application/json"].is_null() {
        problems.push("webhooks.loadEvent.post has no JSON request body".to_owned());
    }
    problems
}

#[test]
fn the_document_is_consistent() {
    let problems = check_document(&load_doc());
    assert!(problems.is_empty(), "{problems:#?}");
}

// ---------------------------------------------------------------------------------------------
// Shapes and schemas
// ---------------------------------------------------------------------------------------------

/// The kind of a value that differs by nature between runs (an id, a secret, a key), if it is
/// one: its prefix.
fn opaque_kind(s: &str) -> Option<&'static str> {
    let hex24 = |r: &str| {
        r.len() == 24
            && r.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let b64_43 = |r: &str| {
        r.len() == 43
            && r.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    for prefix in ["sub_", "dlv_", "evt_", "req_", "key_"] {
        if s.strip_prefix(prefix).is_some_and(hex24) {
            return Some(prefix);
        }
    }
    ["whsec_", "ehk_"]
        .into_iter()
        .find(|prefix| s.strip_prefix(prefix).is_some_and(b64_43))
}

/// Fields that hold a time (ms since the epoch) or a duration: compared by type only.
fn is_time_field(key: &str) -> bool {
    key.ends_with("At") || key.ends_with("Ms")
}

/// Whether `actual` has the shape of `expected`: the same keys at every object level, arrays
/// of the same length compared element by element, and equal values, except that ids,
/// secrets and API keys (`sub_`, `dlv_`, `evt_`, `req_`, `key_` + 24 hex; `whsec_`, `ehk_` +
/// 43 base64url) need only the same kind, and times (`...At`, `...Ms`) only be integers too.
fn same_shape(expected: &Value, actual: &Value) -> Result<(), String> {
    shape_at("$", None, expected, actual)
}

fn shape_at(at: &str, key: Option<&str>, expected: &Value, actual: &Value) -> Result<(), String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            let ek: BTreeSet<&String> = e.keys().collect();
            let ak: BTreeSet<&String> = a.keys().collect();
            if ek != ak {
                return Err(format!(
                    "{at}: keys differ: missing {:?}, unexpected {:?}",
                    ek.difference(&ak).collect::<Vec<_>>(),
                    ak.difference(&ek).collect::<Vec<_>>()
                ));
            }
            for (k, ev) in e {
                shape_at(&format!("{at}.{k}"), Some(k), ev, &a[k])?;
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Err(format!(
                    "{at}: {} items in the example, {} in the response",
                    e.len(),
                    a.len()
                ));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                shape_at(&format!("{at}[{i}]"), key, ev, av)?;
            }
            Ok(())
        }
        (Value::String(e), Value::String(a)) if opaque_kind(e).is_some() => {
            if opaque_kind(e) == opaque_kind(a) {
                Ok(())
            } else {
                Err(format!("{at}: {a:?} is not of the kind of {e:?}"))
            }
        }
        (Value::Number(e), Value::Number(a)) if key.is_some_and(is_time_field) => {
            if e.is_u64() && a.is_u64() {
                Ok(())
            } else {
                Err(format!("{at}: {a} is not a time like {e}"))
            }
        }
        _ if expected == actual => Ok(()),
        _ => Err(format!(
            "{at}: the example has {expected}, the response {actual}"
        )),
    }
}

#[test]
fn same_shape_ignores_what_differs_by_nature() {
    let example = json!({
        "data": {"id": "sub_aaaaaaaaaaaaaaaaaaaaaaaa", "eventTypes": ["load.created"],
                 "signingSecret": format!("whsec_{}", "A".repeat(43)), "createdAt": 1,
                 "nextDueMs": null, "status": "active"},
        "requestId": "req_000000000000000000000000",
    });
    let actual = json!({
        "data": {"id": "sub_0123456789abcdef01234567", "eventTypes": ["load.created"],
                 "signingSecret": format!("whsec_{}", "b-_9".repeat(10) + "xyz"), "createdAt": 1_767_225_600_000u64,
                 "nextDueMs": null, "status": "active"},
        "requestId": "req_ffffffffffffffffffffffff",
    });
    assert_eq!(same_shape(&example, &actual), Ok(()));
}

#[test]
fn same_shape_rejects_other_differences() {
    let example = json!({
        "data": [{"id": "sub_aaaaaaaaaaaaaaaaaaaaaaaa", "eventTypes": ["load.created"],
                  "status": "active", "createdAt": 1, "nextDueMs": 5}],
        "hasMore": false,
        "error": {"code": "not_found", "details": []},
        "requestId": "req_000000000000000000000000",
    });
    let differs = |change: &dyn Fn(&mut Value), needle: &str| {
        let mut actual = example.clone();
        change(&mut actual);
        let err = same_shape(&example, &actual).expect_err("a difference is reported");
        assert!(err.contains(needle), "{needle:?} not in {err:?}");
    };
    differs(
        &|v| v["data"][0]["signingSecret"] = json!("whsec_x"),
        "unexpected [\"signingSecret\"]",
    );
    differs(
        &|v| {
            v["data"][0]
                .as_object_mut()
                .expect("object")
                .remove("createdAt");
        },
        "missing [\"createdAt\"]",
    );
    differs(&|v| v["error"]["code"] = json!("conflict"), "$.error.code");
    differs(&|v| v["hasMore"] = json!(true), "$.hasMore");
    differs(
        &|v| v["data"][0]["eventTypes"] = json!(["load.updated"]),
        "$.data[0].eventTypes[0]",
    );
    differs(
        &|v| v["data"][0]["eventTypes"] = json!(["load.created", "load.updated"]),
        "1 items in the example, 2",
    );
    differs(
        &|v| v["data"][0]["id"] = json!("dlv_aaaaaaaaaaaaaaaaaaaaaaaa"),
        "$.data[0].id",
    );
    differs(
        &|v| v["data"][0]["id"] = json!("sub_AAAAAAAAAAAAAAAAAAAAAAAA"),
        "$.data[0].id",
    );
    differs(
        &|v| v["data"][0]["nextDueMs"] = json!(null),
        "$.data[0].nextDueMs",
    );
    differs(&|v| v["data"] = json!([]), "$.data");
    differs(&|v| v["error"]["details"] = json!([{}]), "$.error.details");
    differs(&|v| v["requestId"] = json!(7), "$.requestId");
}

/// Whether `v` is of JSON Schema type `t`.
fn is_type(v: &Value, t: &str) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

/// Checks `v` against a schema of the document: `$ref`, `type`, `const`, `enum`, `pattern`,
/// `required`, `properties`, `additionalProperties: false`, `items`, `minItems`, `minimum`,
/// `maximum` (the keywords the document uses to constrain values).
fn conforms(doc: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    let s = resolve(doc, schema);
    if s.is_null() {
        return Err(format!("{at}: no schema"));
    }
    if let Some(c) = s.get("const")
        && c != v
    {
        return Err(format!("{at}: {v} is not {c}"));
    }
    if let Some(options) = s.get("enum").and_then(Value::as_array)
        && !options.contains(v)
    {
        return Err(format!("{at}: {v} is not one of {options:?}"));
    }
    let types: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| is_type(v, t)) {
        return Err(format!("{at}: {v} is not of type {types:?}"));
    }
    if let (Some(pattern), Some(text)) = (s["pattern"].as_str(), v.as_str())
        && !matches_pattern(pattern, text)?
    {
        return Err(format!("{at}: {text:?} does not match {pattern}"));
    }
    if let Some(n) = v.as_f64()
        && (s["minimum"].as_f64().is_some_and(|m| n < m)
            || s["maximum"].as_f64().is_some_and(|m| n > m))
    {
        return Err(format!("{at}: {n} is out of range"));
    }
    if let Some(obj) = v.as_object() {
        for required in s["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap_or("");
            if !obj.contains_key(name) {
                return Err(format!("{at}: required property {name:?} is missing"));
            }
        }
        for (k, child) in obj {
            match s["properties"].get(k) {
                Some(p) => conforms(doc, p, child, &format!("{at}.{k}"))?,
                None if s["additionalProperties"] == false => {
                    return Err(format!("{at}: property {k:?} is not allowed"));
                }
                None => {}
            }
        }
    }
    if let Some(items) = v.as_array() {
        if s["minItems"]
            .as_u64()
            .is_some_and(|m| (items.len() as u64) < m)
        {
            return Err(format!("{at}: fewer than minItems items"));
        }
        if let Some(item_schema) = s.get("items") {
            for (i, item) in items.iter().enumerate() {
                conforms(doc, item_schema, item, &format!("{at}[{i}]"))?;
            }
        }
    }
    Ok(())
}

/// One element of a pattern: a set of character ranges and how often it repeats.
struct Atom {
    ranges: Vec<(char, char)>,
    min: usize,
    max: usize,
}

/// Matches the subset of regular expressions the document's patterns use: anchored (`^...$`),
/// literal characters, classes `[...]` with ranges, and the quantifiers `{n}`, `{n,m}`, `+`,
/// `*`, `?`. Anything else is an error, so an unsupported pattern is never silently passed.
fn matches_pattern(pattern: &str, text: &str) -> Result<bool, String> {
    let unsupported = || format!("unsupported pattern {pattern:?}");
    let body = pattern
        .strip_prefix('^')
        .and_then(|p| p.strip_suffix('$'))
        .ok_or_else(unsupported)?;
    let chars: Vec<char> = body.chars().collect();
    let mut atoms: Vec<Atom> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let ranges = match chars[i] {
            '[' => {
                let end = chars[i..]
                    .iter()
                    .position(|c| *c == ']')
                    .ok_or_else(unsupported)?
                    + i;
                let class = &chars[i + 1..end];
                let mut ranges = Vec::new();
                let mut j = 0;
                while j < class.len() {
                    if j + 2 < class.len() && class[j + 1] == '-' {
                        ranges.push((class[j], class[j + 2]));
                        j += 3;
                    } else {
                        ranges.push((class[j], class[j]));
                        j += 1;
                    }
                }
                i = end + 1;
                ranges
            }
            '(' | ')' | '|' | '.' | '\\' | '{' | '}' | '+' | '*' | '?' => {
                return Err(unsupported());
            }
            c => {
                i += 1;
                vec![(c, c)]
            }
        };
        let (min, max) = match chars.get(i) {
            Some('+') => {
                i += 1;
                (1, usize::MAX)
            }
            Some('*') => {
                i += 1;
                (0, usize::MAX)
            }
            Some('?') => {
                i += 1;
                (0, 1)
            }
            Some('{') => {
                let end = chars[i..]
                    .iter()
                    .position(|c| *c == '}')
                    .ok_or_else(unsupported)?
                    + i;
                let spec: String = chars[i + 1..end].iter().collect();
                i = end + 1;
                let num = |s: &str| s.trim().parse::<usize>().map_err(|_| unsupported());
                match spec.split_once(',') {
                    None => {
                        let n = num(&spec)?;
                        (n, n)
                    }
                    Some((a, b)) => (num(a)?, num(b)?),
                }
            }
            _ => (1, 1),
        };
        atoms.push(Atom { ranges, min, max });
    }
    let text: Vec<char> = text.chars().collect();
    Ok(match_atoms(&atoms, &text))
}

fn match_atoms(atoms: &[Atom], text: &[char]) -> bool {
    let Some((atom, rest)) = atoms.split_first() else {
        return text.is_empty();
    };
    let fits = |c: &char| atom.ranges.iter().any(|(lo, hi)| lo <= c && c <= hi);
    let available = text.iter().take_while(|c| fits(c)).count();
    let most = available.min(atom.max);
    (atom.min..=most)
        .rev()
        .any(|n| match_atoms(rest, &text[n..]))
}

#[test]
fn the_pattern_subset_matches_like_a_regex() {
    let m = |p: &str, s: &str| matches_pattern(p, s).expect("supported");
    assert!(m("^sub_[0-9a-f]{24}$", SAMPLE_SUB));
    assert!(!m("^sub_[0-9a-f]{24}$", &format!("{SAMPLE_SUB}0")));
    assert!(!m("^sub_[0-9a-f]{24}$", "dlv_0123456789abcdef01234567"));
    assert!(m("^[0-9]+$", "1767225600"));
    assert!(!m("^[0-9]+$", ""));
    assert!(m("^[A-Za-z0-9_.-]{1,64}$", "acme.corp-1"));
    assert!(!m("^[A-Za-z0-9_.-]{1,64}$", "acme corp"));
    assert!(m("^cur_[0-9a-f]+$", "cur_1f"));
    assert!(matches_pattern("^(a|b)$", "a").is_err());
}

// ---------------------------------------------------------------------------------------------
// Examples
// ---------------------------------------------------------------------------------------------

/// The document, and which request examples the scenarios sent.
struct Doc {
    json: Value,
    used: RefCell<BTreeSet<String>>,
}

impl Doc {
    fn load() -> Doc {
        Doc {
            json: load_doc(),
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

/// A simulation with an API key for client `acme`.
struct World {
    sim: edgehook_host::sim::Simulation,
    key: String,
}

impl World {
    fn new(seed: u64) -> World {
        let mut sim = sim(seed);
        let key = issue_key(&mut sim, "acme");
        World { sim, key }
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
            let first = w.operator("POST", &path);
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
        "GET /internal/v1/subscriptions/{id}/deliveries 200 oneDelivery" => {
            let mut w = World::new(25);
            w.sim.net().endpoint(URL, [Reply::Status(204)]);
            let id = w.subscribe(&["load.created"]);
            assert_eq!(w.ingest("load.created", &doc.load_bytes(), &[]).status, 202);
            w.operator(
                "GET",
                &format!("/internal/v1/subscriptions/{id}/deliveries"),
            )
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

/// Credentials for a generic request.
#[derive(Clone, Copy)]
enum Auth<'a> {
    /// No `Authorization` header.
    None,
    /// What the operation's security asks for, with this partner API key.
    AsDocumented(&'a str),
}

/// A request to an operation that passes every check before the one under test: a path
/// with well-formed ids, the documented credentials, required headers and a valid body.
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
    let mut headers: Vec<(String, String)> = Vec::new();
    if let Auth::AsDocumented(key) = auth {
        let scheme = op.op["security"][0]
            .as_object()
            .and_then(|o| o.keys().next().cloned());
        match scheme.as_deref() {
            Some("partnerApiKey") => headers.push(("authorization".into(), bearer(key))),
            Some("adminToken") => headers.push(("authorization".into(), bearer(ADMIN))),
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
    sim: &mut edgehook_host::sim::Simulation,
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

/// The same request to every operation that refers to a shared response.
fn observe_users(
    doc: &Value,
    ex: &Example,
    sim: &mut edgehook_host::sim::Simulation,
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
            let mut sim = builder(43)
                .config("max_concurrency", "lots")
                .build()
                .expect("sim");
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
fn check_observed(doc: &Value, ex: &Example, o: &Observed) -> Result<(), String> {
    let body = o.response.json();
    if o.response.status != o.status {
        return Err(format!(
            "status {} instead of {}: {body}",
            o.response.status, o.status
        ));
    }
    same_shape(&ex.value, &body).map_err(|e| format!("{e}\n  actual body: {body}"))?;
    let media = &ex.response["content"]["application/json"];
    conforms(doc, &media["schema"], &body, "$").map_err(|e| format!("schema: {e}"))?;
    if o.response.header("content-type") != Some("application/json") {
        return Err("Content-Type is not application/json".to_owned());
    }
    for (name, header) in ex.response["headers"].as_object().into_iter().flatten() {
        let header = resolve(doc, header);
        match o.response.header(name) {
            None if header["required"] == true => {
                return Err(format!("documented header {name} is missing"));
            }
            None => {}
            Some(value) => conforms(doc, &header["schema"], &json!(value), name)?,
        }
    }
    if o.response.header("x-request-id") != body["requestId"].as_str() {
        return Err("X-Request-Id is not the body's requestId".to_owned());
    }
    if let Some(location) = o.response.header("location") {
        let id = body["data"]["id"].as_str().unwrap_or("");
        if location != format!("/v1/webhooks/{id}") {
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
                "{}: no scenario in tests/tests/openapi.rs makes this request",
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
            if let Err(e) = check_observed(&doc.json, ex, o) {
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
    assert_eq!(check_observed(&doc.json, ex, &o), Ok(()));
    ex.value["data"]["eventTypes"] = json!(["load.created"]);
    let err = check_observed(&doc.json, ex, &o).expect_err("eventTypes differ");
    assert!(err.contains("$.data.eventTypes"), "{err}");
    ex.response["headers"]["X-Partner"] = json!({"required": true, "schema": {"type": "string"}});
    ex.value["data"]["eventTypes"] = json!(["load.created", "load.status_changed"]);
    let err = check_observed(&doc.json, ex, &o).expect_err("header missing");
    assert!(err.contains("X-Partner"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Headers and statuses beyond the examples
// ---------------------------------------------------------------------------------------------

#[test]
fn every_documented_path_answers_405_with_allow_for_other_methods() {
    let doc = load_doc();
    let allow = resolve(
        &doc,
        &doc["components"]["responses"]["MethodNotAllowed"]["headers"]["Allow"],
    );
    assert_eq!(allow["required"], true, "405 documents Allow");
    let mut sim = sim(50);
    for (template, methods) in documented_methods(&doc) {
        let other = ["PATCH", "PUT", "DELETE", "POST", "GET"]
            .into_iter()
            .find(|m| !methods.contains(*m))
            .expect("some method is not documented");
        let path = instantiate(&template);
        let resp = call(&mut sim, other, &path, ADMIN);
        assert_error(&resp, 405, "method_not_allowed");
        let allowed: BTreeSet<String> = resp
            .header("allow")
            .expect("Allow on 405")
            .split(", ")
            .map(str::to_owned)
            .collect();
        assert_eq!(allowed, methods, "{other} {path}");
    }
}

#[test]
fn an_idempotent_replay_carries_the_documented_header() {
    let doc = Doc::load();
    let created = &doc.json["paths"]["/v1/webhooks"]["post"]["responses"]["201"];
    let header = resolve(&doc.json, &created["headers"]["Idempotent-Replayed"]);
    assert_eq!(header["schema"]["const"], "true");
    let mut w = World::new(51);
    let body = doc.request_example("POST", "/v1/webhooks", "subscription");
    let key = [("idempotency-key", "same-request")];
    let first = w.create(&body, &key);
    assert_eq!(first.status, 201);
    assert_eq!(first.header("idempotent-replayed"), None);
    let again = w.create(&body, &key);
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json()["data"], first.json()["data"]);
    assert_eq!(again.header("location"), first.header("location"));
}

#[test]
fn with_the_store_down_every_operation_answers_a_documented_status() {
    let doc = load_doc();
    let mut w = World::new(52);
    w.sim.store().set_faults(Faults {
        fail_all: true,
        ..Faults::default()
    });
    for op in operations(&doc) {
        let resp = send(
            &mut w.sim,
            &op.method,
            generic_request(&doc, &op, Auth::AsDocumented(&w.key), None),
        );
        let status = resp.status.to_string();
        assert!(
            op.op["responses"].get(&status).is_some(),
            "{} {} answered {status}, not documented: {}",
            op.method,
            op.template,
            resp.json()
        );
        if status == "503" {
            assert_eq!(resp.header("retry-after"), Some("1"));
        }
    }
}

#[test]
fn deliveries_match_the_webhooks_entry() {
    let doc = load_doc();
    let hook = &doc["webhooks"]["loadEvent"]["post"];
    let (content_type, media) = hook["requestBody"]["content"]
        .as_object()
        .and_then(|c| c.iter().next())
        .expect("a request body");
    let load = &media["examples"]["load"]["value"];
    let bytes = serde_json::to_vec(load).expect("serializes");
    let mut w = World::new(53);
    w.sim.net().endpoint(URL, [Reply::Status(204)]);
    w.subscribe(&["load.created"]);
    assert_eq!(w.ingest("load.created", &bytes, &[]).status, 202);
    let received = w.sim.net().received_by(URL);
    assert_eq!(received.len(), 1);
    let r = &received[0];
    assert_eq!(r.method, "POST", "the webhooks entry documents a POST");
    assert!(hook.is_object());
    assert_eq!(r.header("content-type"), Some(content_type.as_str()));
    assert_eq!(
        r.body, bytes,
        "the body is the published load, byte for byte"
    );
    let body: Value = serde_json::from_slice(&r.body).expect("JSON");
    assert_eq!(same_shape(load, &body), Ok(()));
    conforms(&doc, &media["schema"], &body, "$").expect("the load conforms");
    let params = hook["parameters"].as_array().expect("headers");
    assert!(params.len() >= 4);
    for p in params {
        assert_eq!(p["in"], "header");
        let name = p["name"].as_str().expect("name");
        let value = r
            .header(name)
            .unwrap_or_else(|| panic!("documented header {name} not sent"));
        conforms(&doc, &p["schema"], &json!(value), name).expect("header value conforms");
    }
    // Every X-Service-* header sent is documented.
    for (name, _) in &r.headers {
        if name.starts_with("x-service-") {
            assert!(
                params.iter().any(|p| p["name"]
                    .as_str()
                    .is_some_and(|n| n.eq_ignore_ascii_case(name))),
                "{name} is sent but not documented"
            );
        }
    }
}
