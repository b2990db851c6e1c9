//! Spin with `deploy/runtime-config.redis.toml` as shipped, `block_networks = ["private"]`
//! included (only the Redis URL is this test's): Spin itself refuses a delivery to a private
//! address, at send. The component is told to allow private targets here
//! (`allow_private_targets = true`, what a subscription made under a permissive setting
//! would meet), so only Spin stands between the attempt and the receiver on 127.0.0.1: the
//! attempt fails with `destination_refused` and the receiver gets nothing. Without
//! `block_networks` the receiver gets the delivery and this test fails. Then, under the
//! default settings, the component refuses such URLs at create.

use super::harness::*;
use super::{LOOPBACK_TARGETS, publish};
use edgehook_sim::spin;
use edgehook_testkit::receiver::Received;
use edgehook_testkit::rt;
use serde_json::{Value, json};
use std::path::PathBuf;

/// The shipped runtime config with this test's Redis.
fn shipped_config(redis_url: &str) -> String {
    let example = "redis://redis.edgehook.svc.cluster.local:6379";
    assert!(
        spin::REDIS_RUNTIME_CONFIG.contains(example),
        "the example URL moved"
    );
    assert!(
        spin::REDIS_RUNTIME_CONFIG.contains("block_networks = [\"private\"]"),
        "the shipped runtime config no longer blocks private networks"
    );
    spin::REDIS_RUNTIME_CONFIG.replace(example, redis_url)
}

/// An API key of client `acme` (the walk stops without one).
fn issue_key(w: &mut Walk) -> String {
    let keys = post("/internal/v1/clients/acme/keys", Who::Operator);
    let Some(key) = w.call("issue key", 201, keys) else {
        w.stop("an API key");
    };
    key.data()["apiKey"].as_str().unwrap_or_default().to_owned()
}

/// Under the shipped runtime config, a subscription to the loopback receiver (which the
/// component allows here) is attempted and Spin refuses the connection.
pub fn refused_at_send(binary: PathBuf, redis_url: &str) {
    let rt = rt();
    let receiver = Receiver::start(&rt);
    let config = shipped_config(redis_url);
    let app = start_spin("production", binary, &receiver, &config, LOOPBACK_TARGETS);
    let mut w = Walk::new("spin-redis-production", app, rt);
    let key = issue_key(&mut w);
    let url = receiver.url("/blocked/1");
    let body = json!({"url": url, "eventTypes": ["load.created"]});
    let create = post("/v1/webhooks", Who::Bearer(&key)).json(&body);
    let Some(created) = w.call("create on the loopback receiver", 201, create) else {
        w.stop("a subscription");
    };
    let id = created.data()["id"].as_str().unwrap_or_default().to_owned();
    w.call("publish load.created", 202, publish("load.created"));
    // The publishing request makes attempt 1 itself; the tick makes it if that did not.
    w.call("tick", 200, post("/internal/v1/tick", Who::Operator));
    let path = format!("/internal/v1/subscriptions/{id}/deliveries");
    // The publishing request may still be making it after its answer: wait for attempt 1.
    let step = "attempt 1 made";
    let listed = w.poll(step, &path, |data| !data[0]["attempts"][0].is_null());
    let listed = listed.map_or(Value::Null, |r| r.json);
    let first = &listed["data"][0]["attempts"][0];
    let got: Vec<Received> = receiver.on("/blocked/1");
    w.check(
        "Spin refuses the private address at send",
        got.is_empty() && first["errorClass"] == "destination_refused",
        format!(
            "the receiver got {} request(s); its deliveries: {listed}",
            got.len()
        ),
    );
    w.report();
}

/// Under the default settings the component refuses private and plain-http URLs at create
/// (before Spin is asked), and takes a public host.
pub fn refused_at_create(binary: PathBuf, redis_url: &str) {
    let rt = rt();
    let receiver = Receiver::start(&rt);
    let config = shipped_config(redis_url);
    let app = start_spin("production-defaults", binary, &receiver, &config, &[]);
    let mut w = Walk::new("spin-redis-production", app, rt);
    let key = issue_key(&mut w);
    for url in [
        receiver.url("/ok/1").as_str(),
        "https://127.0.0.1/",
        "https://localhost/",
        "https://db.localhost/",
        "https://10.0.0.1/",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]/",
        "https://2130706433/",
        "http://hooks.example.com/",
    ] {
        let step = format!("create {url} (refused: private, or not https)");
        let body = json!({"url": url, "eventTypes": ["load.created"]});
        let create = post("/v1/webhooks", Who::Bearer(&key)).json(&body);
        if let Some(r) = w.refused(&step, (422, "validation_failed"), create) {
            let field = r.json["error"]["details"][0]["field"].as_str();
            w.check(
                &step,
                field == Some("url"),
                format!("not about url: {}", r.text),
            );
        }
    }
    let body = json!({"url": "https://hooks.example.com/x", "eventTypes": ["load.created"]});
    let create = post("/v1/webhooks", Who::Bearer(&key)).json(&body);
    w.call("create on a public host", 201, create);
    w.report();
}
