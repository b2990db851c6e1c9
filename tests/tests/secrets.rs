//! Secrets stay where they belong: a signing secret appears in its create response only, an
//! API key in its issue response only. Every other response of a busy session is scanned.

mod common;

use common::*;
use edgehook_host::outbound::Reply;
use serde_json::json;
use std::time::Duration;

#[test]
fn no_response_but_its_own_carries_a_secret_or_an_api_key() {
    let mut sim = sim(21);
    let key = issue_key(&mut sim, "acme");
    let url = "https://hooks.example.com/x";
    sim.net()
        .endpoint(url, [Reply::Status(500), Reply::Status(200)]);
    let created = create(&mut sim, &key, url, &["load.created"]);
    let secret = created["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    let sub = created["id"].as_str().expect("id").to_owned();
    let mut seen = Vec::new();
    let mut keep = |r: edgehook_host::HttpResponse| {
        let headers: Vec<String> = r.headers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
        seen.push(format!(
            "{} {}\n{}",
            r.status,
            headers.join("\n"),
            String::from_utf8_lossy(&r.body)
        ));
    };
    let published = ingest(&mut sim, "load.created", br#"{"id":"L-1"}"#, &[]);
    keep(published);
    sim.advance(Duration::from_secs(120)).expect("advance");
    let dlv = sim.net().received()[0]
        .header("x-service-delivery-id")
        .expect("id")
        .to_owned();
    for (method, path, who) in [
        ("GET", "/v1/webhooks".to_owned(), key.as_str()),
        ("GET", format!("/v1/webhooks/{sub}"), &key),
        ("GET", "/nope".to_owned(), &key),
        ("GET", "/v1/webhooks".to_owned(), "ehk_wrong"),
        ("GET", format!("/internal/v1/subscriptions/{sub}"), ADMIN),
        (
            "GET",
            format!("/internal/v1/subscriptions/{sub}/deliveries"),
            ADMIN,
        ),
        ("GET", format!("/internal/v1/deliveries/{dlv}"), ADMIN),
        (
            "POST",
            format!("/internal/v1/deliveries/{dlv}/replay"),
            ADMIN,
        ),
        ("GET", "/internal/v1/settings".to_owned(), ADMIN),
        ("POST", "/internal/v1/tick".to_owned(), ADMIN),
        ("DELETE", format!("/v1/webhooks/{sub}"), &key),
        ("GET", format!("/internal/v1/subscriptions/{sub}"), ADMIN),
    ] {
        keep(call(&mut sim, method, &path, who));
    }
    // Validation errors echo fields, never the secret or the key.
    keep(create_with(
        &mut sim,
        &key,
        &json!({"url": "http://x", "eventTypes": [], "signingSecret": secret}),
        &[],
    ));
    for text in &seen {
        assert!(!text.contains(&secret), "a signing secret leaked:\n{text}");
        assert!(!text.contains(&key), "an API key leaked:\n{text}");
        assert!(!text.contains(ADMIN), "the admin token leaked:\n{text}");
    }
    // The deliveries themselves carry a signature, never the secret.
    for r in sim.net().received() {
        let all: Vec<u8> = r
            .headers
            .iter()
            .flat_map(|(n, v)| [n.as_bytes(), v.as_slice()].concat())
            .chain(r.body.clone())
            .collect();
        assert!(!String::from_utf8_lossy(&all).contains(&secret));
    }
    assert!(seen.len() >= 14);
}
