//! A subscription changed in place and a load found, from the command line against a
//! running `serve`: `edgehook subscription update ID --url .. --event-type ..` (its partner's
//! key), then `edgehook event find --load-id` and `edgehook event show` (the operator's).

use crate::common::*;
use serde_json::{Value, json};

#[test]
fn a_subscription_is_moved_and_its_load_found_from_the_cli() {
    let rt = rt();
    let receiver = receiver(&rt);
    let dir = temp_dir("lookups");
    let mut server = Proc::start(&serve_to_loopback("attempt_timeout_ms=2000"), &dir);
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let (old, new) = (receiver.url("/old"), receiver.url("/new"));
    let sub = create_subscription(
        &rt,
        &base,
        &key,
        &json!({"url": old, "eventTypes": ["load.created"]}),
    );
    let id = sub["id"].as_str().expect("id").to_owned();

    let update = [
        "subscription",
        "update",
        &id,
        "--url",
        &new,
        "--event-type",
        "load.updated",
        "--key",
        &key,
    ];
    let (ok, text) = run_cli(&dir, &base, &update);
    assert!(ok, "{text}");
    let shown: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(shown["data"]["url"], new.as_str(), "{text}");
    assert_eq!(
        shown["data"]["eventTypes"],
        json!(["load.updated"]),
        "{text}"
    );
    let bad = [
        "subscription",
        "update",
        &id,
        "--url",
        "ftp://x",
        "--key",
        &key,
    ];
    let (ok, text) = run_cli(&dir, &base, &bad);
    assert!(!ok && text.contains("422"), "{text}");
    let (ok, text) = run_cli(&dir, &base, &["subscription", "update", &id, "--key", &key]);
    assert!(!ok && text.contains("nothing to change"), "{text}");

    publish_event(&rt, &operator, "load.created", br#"{"id":"L-123"}"#);
    publish_event(&rt, &operator, "load.updated", br#"{"id":"L-123","v":2}"#);
    wait_for("the delivery to the new URL", || {
        receiver.received_on("/new").len() == 1
    });
    assert!(
        receiver.received_on("/old").is_empty(),
        "nothing went to the old URL"
    );

    let (ok, text) = run_cli(&dir, &base, &["event", "find", "--load-id", "L-123"]);
    assert!(ok, "{text}");
    let found: Value = serde_json::from_str(&text).expect("json");
    let events = found["data"].as_array().expect("a list");
    assert_eq!(events.len(), 2, "{text}");
    assert_eq!(
        events[0]["eventType"], "load.updated",
        "newest first: {text}"
    );
    assert_eq!(events[0]["deliveries"][0]["subscriptionId"], id.as_str());
    assert_eq!(
        events[1]["deliveries"],
        json!([]),
        "load.created went nowhere"
    );
    let event_id = events[0]["id"].as_str().expect("id");
    let (ok, text) = run_cli(&dir, &base, &["event", "show", event_id]);
    assert!(ok, "{text}");
    let shown: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(shown["data"]["loadId"], "L-123", "{text}");
    let (ok, text) = run_cli(&dir, &base, &["event", "show", "evt_nope"]);
    assert!(!ok && text.contains("404"), "{text}");
    drop(server);
}
