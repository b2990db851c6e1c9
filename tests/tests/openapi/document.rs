//! The document itself: consistent with itself and with the conventions every route
//! follows, every `pattern` an anchored regular expression, and every example conforming to
//! its schema ([`check_document`]).

use super::{Schemas, escape, load_doc, operations, parameters, resolve};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Every value of `key` in `v`, with where it is (a JSON pointer).
fn every<'a>(v: &'a Value, key: &str, at: &str, out: &mut Vec<(String, &'a Value)>) {
    match v {
        Value::Object(o) => {
            for (k, child) in o {
                if k == key {
                    out.push((at.to_owned(), child));
                } else {
                    every(child, key, &format!("{at}/{}", escape(k)), out);
                }
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                every(child, key, &format!("{at}/{i}"), out);
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
    let mut refs = Vec::new();
    every(doc, "$ref", "", &mut refs);
    for (at, r) in &refs {
        let r = r.as_str().unwrap_or("");
        if r.strip_prefix('#').and_then(|p| doc.pointer(p)).is_none() {
            problems.push(format!("{at}: $ref {r:?} does not resolve"));
        }
    }
    // Patterns are searched for, not matched whole: each must be anchored at both ends, and
    // be a regular expression.
    let mut patterns = Vec::new();
    every(doc, "pattern", "", &mut patterns);
    for (at, pattern) in patterns {
        let Some(pattern) = pattern.as_str() else {
            continue;
        };
        if !(pattern.starts_with('^') && pattern.ends_with('$')) {
            problems.push(format!("{at}: pattern {pattern:?} is not anchored (^...$)"));
        }
        if let Err(e) = regex::Regex::new(pattern) {
            problems.push(format!(
                "{at}: pattern {pattern:?} is no regular expression: {e}"
            ));
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
        // Every route can answer 413 (body limit) and 500 (bad configuration); every route
        // that takes credentials 429 (too many failed authentications from the address);
        // every route that takes a body 400 (not JSON) and 415 (not declared JSON).
        let mut every = vec!["413", "500"];
        if op.template != "/healthz" {
            every.push("429");
        }
        if !op.op["requestBody"].is_null() {
            every.extend(["400", "415"]);
        }
        for status in every {
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
    let schemas = Schemas::new(doc);
    for (name, m) in media {
        for (ex_name, ex) in m["examples"].as_object().into_iter().flatten() {
            let result = schemas.check(&m["schema"], &ex["value"], "$");
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

#[test]
fn the_document_check_fails_on_a_bad_example_or_pattern() {
    let mut doc = load_doc();
    let created = "/paths/~1v1~1webhooks/post/responses/201/content/application~1json";
    let example = doc
        .pointer_mut(&format!("{created}/examples/created/value/data"))
        .expect("the create example");
    example["createdAt"] = json!("2026-01-01");
    let invalid = doc
        .pointer_mut("/paths/~1v1~1webhooks/post/requestBody/content/application~1json/examples/invalid/value")
        .expect("the invalid request example");
    *invalid = json!({"url": "https://hooks.example.com/loads", "eventTypes": ["load.created"]});
    let schemas = &mut doc["components"]["schemas"];
    schemas["DeliveryId"]["pattern"] = json!("dlv_[0-9a-f]{24}");
    schemas["EventId"]["pattern"] = json!("^evt_[0-9a-f{24}$");
    let problems = check_document(&doc);
    let mentions = |needle: &str| problems.iter().any(|p| p.contains(needle));
    assert!(
        mentions("POST /v1/webhooks 201 example created: $/data/createdAt"),
        "{problems:#?}"
    );
    assert!(
        mentions("POST /v1/webhooks request example invalid is valid, not invalid"),
        "{problems:#?}"
    );
    assert!(
        mentions("/components/schemas/DeliveryId: pattern \"dlv_[0-9a-f]{24}\" is not anchored"),
        "{problems:#?}"
    );
    assert!(
        mentions(
            "/components/schemas/EventId: pattern \"^evt_[0-9a-f{24}$\" is no regular expression"
        ),
        "{problems:#?}"
    );
}
