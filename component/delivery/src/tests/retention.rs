//! Retention: what the purge leaves of a deleted subscription, its bound per call, and a
//! purge cut short anywhere.

use super::*;
use crate::purge::{PURGE_ITEMS_PER_TICK, purge_expired};
use edgehook_model::config::Settings;
use edgehook_model::env::{Env, SeededEntropy};
use edgehook_storage::retention::DAY_MS;

const T0: u64 = 1_767_225_600_000;

/// A subscription that got `events` events over two days (so its history spans pages and
/// both days' logs), then was deleted. Returns the subscription id.
fn deleted_with_history(kv: &MemoryKv, settings: &Settings, events: u64) -> SubscriptionId {
    let entropy = SeededEntropy::new(12);
    let sub = active_subscription(kv);
    for n in 0..events {
        let at = T0 + (n * 2 / events) * DAY_MS + n * 1000;
        let env = Env::new(at, kv, settings, &entropy);
        let body = format!(r#"{{"id":"L{n}"}}"#);
        publish(&env, "load.created", body.as_bytes(), None).expect("publish");
    }
    let env = Env::new(T0 + 2 * DAY_MS, kv, settings, &entropy);
    edgehook_subscriptions::disable(&env, &sub, None, edgehook_subscriptions::DELETED)
        .expect("delete")
        .expect("was active");
    sub
}

/// Every key left of the subscription, its events and their deliveries but its own record:
/// its history, delivery records, event records and bodies, retention logs. (The due queue
/// is the tick's to drop; the fan-out index and the directories are shared.)
fn leftovers(kv: &MemoryKv, sub: &str) -> Vec<String> {
    kv.dump()
        .into_keys()
        .filter(|k| *k != keys::subscription(&SubscriptionId::from(sub)))
        .filter(|k| {
            k.contains(sub)
                || [
                    keys::DELIVERY_PREFIX,
                    keys::EVENT_PREFIX,
                    keys::RETENTION_PREFIX,
                    keys::SUBSCRIPTION_DELIVERIES_PREFIX,
                ]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .collect()
}

#[test]
fn after_retention_a_deleted_subscription_leaves_only_its_record_without_its_secret() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let sub = deleted_with_history(&kv, &settings, 300);
    assert!(
        kv.dump()
            .keys()
            .any(|k| k.starts_with(keys::SUBSCRIPTION_DELIVERIES_PREFIX))
    );
    assert!(stored_subscription(&kv, &sub).signing_secret.is_erased());
    let entropy = SeededEntropy::new(13);
    let later = T0 + (u64::from(settings.retention_days) + 3) * DAY_MS;
    let env = Env::new(later, &kv, &settings, &entropy);
    let mut calls = 0;
    while !leftovers(&kv, &sub).is_empty() {
        let before = kv.ops();
        purge_expired(&env).expect("purge");
        // The bound: a batch of events, one delete per delivery, body and record, a few
        // trimmed pages, the day and directory bookkeeping.
        assert!(
            kv.ops() - before
                <= 5 * PURGE_ITEMS_PER_TICK as u64
                    + 4 * crate::purge::TRIM_EXPIRED_PER_TICK as u64
                    + 40,
            "{}",
            kv.ops() - before
        );
        calls += 1;
        assert!(
            calls <= 300 / PURGE_ITEMS_PER_TICK + 3,
            "{:?}",
            leftovers(&kv, &sub)
        );
    }
    assert!(calls > 1, "the work is spread over several calls");
}

#[test]
fn a_purge_cut_short_anywhere_is_finished_by_the_next_ones() {
    let settings = Settings::default();
    let later = T0 + (u64::from(settings.retention_days) + 3) * DAY_MS;
    let entropy = SeededEntropy::new(14);
    for fail_at in 1.. {
        let kv = MemoryKv::new();
        let sub = deleted_with_history(&kv, &settings, 140);
        let env = Env::new(later, &kv, &settings, &entropy);
        kv.fail_at(Some(fail_at));
        let first = purge_expired(&env);
        kv.fail_at(None);
        for _ in 0..10 {
            purge_expired(&env).expect("purge");
        }
        assert_eq!(
            leftovers(&kv, &sub),
            Vec::<String>::new(),
            "fault at {fail_at}"
        );
        if first.is_ok() {
            break;
        }
    }
}

#[test]
fn a_live_subscriptions_history_keeps_its_last_page_and_what_retention_keeps() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(15);
    let sub = active_subscription(&kv);
    // 200 old events (past retention by then), then one recent one.
    for n in 0..200u64 {
        let env = Env::new(T0 + n * 1000, &kv, &settings, &entropy);
        publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
    }
    let later = T0 + (u64::from(settings.retention_days) + 1) * DAY_MS;
    let env = Env::new(later, &kv, &settings, &entropy);
    let recent = publish(&env, "load.created", br#"{"id":"R"}"#, None).expect("publish");
    for _ in 0..10 {
        purge_expired(&env).expect("purge");
    }
    let log = history_log(&sub);
    assert_eq!(
        log.dropped_pages(&kv).expect("mark"),
        1,
        "the full old page goes"
    );
    let (page, more) =
        crate::history::history(&env, &sub, 0, 100, &Default::default()).expect("history");
    assert!(more.is_none());
    let ids: Vec<&str> = page.iter().map(|(_, d)| d.event_id.as_str()).collect();
    assert_eq!(
        ids,
        vec![recent.event_id.as_str()],
        "only what retention keeps"
    );
    assert!(!stored_subscription(&kv, &sub).signing_secret.is_erased());
}

#[test]
fn a_publish_that_failed_before_listing_its_event_leaves_nothing_after_retention() {
    // A store failure at each step of a key-less and of a keyed publish (never retried):
    // whatever it made (body, record, delivery, history entry) is gone after retention with
    // the deleted subscription's history, though its event may never have been listed.
    let settings = Settings::default();
    let later = T0 + (u64::from(settings.retention_days) + 3) * DAY_MS;
    let entropy = SeededEntropy::new(16);
    for key in [None, Some("k1")] {
        for fail_at in 1.. {
            let kv = MemoryKv::new();
            let sub = active_subscription(&kv);
            let env = Env::new(T0, &kv, &settings, &entropy);
            kv.fail_at(Some(fail_at));
            let failed = publish(&env, "load.created", br#"{"id":"F"}"#, key);
            kv.fail_at(None);
            publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
            edgehook_subscriptions::disable(&env, &sub, None, edgehook_subscriptions::DELETED)
                .expect("delete");
            let env = Env::new(later, &kv, &settings, &entropy);
            for _ in 0..3 {
                purge_expired(&env).expect("purge");
            }
            assert_eq!(
                leftovers(&kv, &sub),
                Vec::<String>::new(),
                "{key:?}, fault at {fail_at}"
            );
            if failed.is_ok() {
                break;
            }
        }
    }
}
