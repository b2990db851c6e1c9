//! Retention on virtual time: after the retention period the store holds nothing of a
//! deleted subscription but its record (the tombstone, its secret erased), while a live
//! one keeps the last page of its history; the purge runs in bounded batches per tick.

use crate::common;
use edgehook_component::model::ids::SubscriptionId;

use common::*;
use edgehook_component::subscriptions::Subscription;
use edgehook_sim::simnet::Reply;
use serde_json::json;
use std::time::Duration;

fn record(sim: &edgehook_sim::sim::Simulation, id: &str) -> Subscription {
    let snapshot = sim.store().snapshot();
    let bytes = snapshot
        .get(keys::subscription(&SubscriptionId::trusted(id.to_string())).as_str())
        .expect("the record stays");
    Subscription::decode(bytes).expect("decode")
}

#[test]
fn after_retention_a_deleted_subscription_leaves_only_its_record_without_its_secret() {
    let mut sim = sim(31);
    let key = issue_key(&mut sim, "acme");
    let (gone_url, kept_url) = ("https://gone.example.com/x", "https://kept.example.com/x");
    sim.net().endpoint(gone_url, [Reply::Status(200)]);
    sim.net().endpoint(kept_url, [Reply::Status(200)]);
    // The deleted one is created with an idempotency key: its record goes at retention too.
    let body = json!({"url": gone_url, "eventTypes": ["load.created"]});
    let created = create_with(&mut sim, &key, &body, &[("idempotency-key", "gone-1")]);
    assert_eq!(created.status, 201);
    let gone = created.json()["data"]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let kept = create_id(&mut sim, &key, kept_url, &["load.created"]);
    // 150 events over two days (more than a history page each), some keyed.
    for n in 0..150 {
        let load = format!(r#"{{"id":"L{n}"}}"#);
        let idem = format!("evt-{n}");
        let extra: &[(&str, &str)] = if n % 3 == 0 {
            &[("idempotency-key", &idem)]
        } else {
            &[]
        };
        assert_eq!(
            ingest(&mut sim, "load.created", load.as_bytes(), extra).status,
            202
        );
        sim.advance(Duration::from_secs(1200)).expect("advance");
    }
    assert_eq!(
        call(&mut sim, "DELETE", &format!("/v1/webhooks/{gone}"), &key).status,
        200
    );
    assert!(
        record(&sim, &gone).signing_secret.is_erased(),
        "erased at delete"
    );
    let of_gone = |sim: &edgehook_sim::sim::Simulation| -> Vec<String> {
        sim.store()
            .snapshot()
            .into_keys()
            .filter(|k| {
                k.contains(gone.as_str())
                    && *k != keys::subscription(&SubscriptionId::trusted(gone.to_string()))
            })
            .collect()
    };
    assert!(
        !of_gone(&sim).is_empty(),
        "its history is there until retention"
    );

    // Past the retention period (30 days by default), tick after tick.
    sim.advance(Duration::from_secs(31 * 86400))
        .expect("advance");
    let mut ticks = 0;
    while sim
        .store()
        .snapshot()
        .keys()
        .any(|k| k.starts_with(keys::EVENT_PREFIX) || k.starts_with(keys::RETENTION_PREFIX))
    {
        sim.tick().expect("tick");
        ticks += 1;
        assert!(ticks <= 10, "the purge makes progress every tick");
    }
    assert!(
        ticks > 1,
        "a bounded batch per tick: 150 events take more than one"
    );
    assert_eq!(of_gone(&sim), Vec::<String>::new());
    let snapshot = sim.store().snapshot();
    let left: Vec<&String> = snapshot
        .keys()
        .filter(|k| k.starts_with(keys::DELIVERY_PREFIX) || k.starts_with(keys::IDEMPOTENCY_PREFIX))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(record(&sim, &gone).signing_secret.is_erased());
    // The live subscription keeps its secret and the last page of its history (the rest
    // is dropped; a page is its key and its parts' keys); its deliveries are gone with
    // their events.
    assert!(!record(&sim, &kept).signing_secret.is_erased());
    let log = keys::subscription_deliveries(&SubscriptionId::trusted(kept.to_string()));
    let last_page = keys::log_page(&log, 1);
    let history: Vec<&String> = snapshot
        .keys()
        .filter(|k| {
            k.strip_prefix(log.as_str())
                .is_some_and(|rest| rest.starts_with(":p"))
        })
        .collect();
    assert!(history.iter().any(|k| **k == last_page), "{history:?}");
    let of_last_page = |k: &str| {
        k.strip_prefix(last_page.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    };
    assert!(history.iter().all(|k| of_last_page(k)), "{history:?}");
}
