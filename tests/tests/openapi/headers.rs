//! Headers and statuses beyond the examples: the idempotent replay's header, a documented
//! status from every operation with the store down, and the outbound delivery against the
//! `webhooks` entry.

use super::shape::same_shape;
use super::{Auth, Doc, Schemas, URL, World, generic_request, load_doc, operations, resolve, send};
use edgehook_runtime::store::Faults;
use edgehook_sim::simnet::Reply;
use serde_json::{Value, json};

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
    let schemas = Schemas::new(&doc);
    assert_eq!(
        schemas.check(&media["schema"], &body, "$"),
        Ok(()),
        "the load conforms"
    );
    let params = hook["parameters"].as_array().expect("headers");
    assert!(params.len() >= 4);
    for p in params {
        assert_eq!(p["in"], "header");
        let name = p["name"].as_str().expect("name");
        let value = r
            .header(name)
            .unwrap_or_else(|| panic!("documented header {name} not sent"));
        assert_eq!(
            schemas.check(&p["schema"], &json!(value), name),
            Ok(()),
            "header value conforms"
        );
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
