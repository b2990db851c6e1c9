//! Publish and fan-out: what a publish reads and writes, keyed and key-less events, and
//! attempt 1 run at once.

use super::*;
use edgehook_model::config::Settings;
use edgehook_model::env::Env;
use edgehook_model::env::SeededEntropy;
use edgehook_records::delivery::{Status, delivery_id};
use edgehook_storage::directory;
use edgehook_storage::keys::{self};
use edgehook_storage::kv::Kv;
use edgehook_storage::kv::MemoryKv;
use std::cell::Cell;

#[test]
fn attempt_1_of_a_new_event_reads_neither_event_nor_subscription_nor_body_again() {
    let kv = MemoryKv::new();
    let reads = HookKv::new(&kv, "", || {});
    let settings = Settings::default();
    let entropy = SeededEntropy::new(6);
    let now = 1_767_225_600_000;
    let env = Env::new(now, &reads, &settings, &entropy);
    let sub = active_subscription(&kv);
    let (receipt, prepared) =
        publish_prepared(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
    let prepared = prepared.expect("a new event is prepared");
    reads.reads.borrow_mut().clear();
    let sent = Counting(Cell::new(0));
    let report = run_now(&env, &sent, &RunNow::Prepared(Box::new(prepared)));
    assert_eq!(
        (report.attempted, report.succeeded, sent.0.get()),
        (1, 1, 1)
    );
    let read = reads.reads.borrow().clone();
    let dlv = keys::delivery(&delivery_id(&receipt.event_id, &sub));
    for key in [
        // Leased to the run at publish, and recorded while the lease holds: not read back.
        dlv.clone(),
        keys::event(&receipt.event_id),
        keys::event_body(&receipt.event_id),
        keys::subscription(&sub),
    ] {
        assert!(
            !read.contains(&key.to_string()),
            "{key} was read again: {read:?}"
        );
    }
    // A replayed publish (the event exists) is run from the store.
    let (again, prepared) = publish_prepared(&env, "load.created", br#"{"id":"L"}"#, None)
        .map(|(r, p)| (r.replayed, p))
        .expect("publish");
    assert!(!again && prepared.is_some(), "no key: a second, new event");
}

#[test]
fn a_keyless_publish_reads_no_delivery_or_event_record_and_writes_its_event_once() {
    let kv = MemoryKv::new();
    let ops = HookKv::new(&kv, "", || {});
    let settings = Settings::default();
    let entropy = SeededEntropy::new(8);
    let env = Env::new(1_767_225_600_000, &ops, &settings, &entropy);
    let sub = active_subscription(&kv);
    let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
    let dlv = keys::delivery(&delivery_id(&receipt.event_id, &sub));
    let evt = keys::event(&receipt.event_id);
    let reads = ops.reads.borrow().clone();
    assert!(
        !reads.contains(&dlv.to_string()) && !reads.contains(&evt.to_string()),
        "a fresh id has nothing to find or race with: {reads:?}"
    );
    let sets = ops.sets.borrow().clone();
    assert_eq!(sets.iter().filter(|k| **k == evt).count(), 1, "{sets:?}");
    assert!(
        sets.contains(&dlv.to_string()),
        "the record is written: {sets:?}"
    );
    // What it wrote is whole: the event says it is fanned out, the delivery is due.
    let event = stored_event(&kv, &evt);
    assert!(event.fanned_out && event.subscriptions == vec![sub]);
    let d = stored_delivery(&kv, &dlv);
    assert_eq!(d.status, Status::Pending);
}

#[test]
fn a_keyless_fan_out_writes_its_body_records_and_event_in_one_batch_after_their_history_entries() {
    let kv = MemoryKv::new();
    let ops = HookKv::new(&kv, "", || {});
    let settings = Settings::default();
    let entropy = SeededEntropy::new(8);
    let env = Env::new(1_767_225_600_000, &ops, &settings, &entropy);
    let subs: Vec<SubscriptionId> = (1..=3).map(|n| active_subscription_n(&kv, n)).collect();
    let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
    let records: Vec<String> = subs
        .iter()
        .map(|s| keys::delivery(&delivery_id(&receipt.event_id, s)).to_string())
        .collect();
    let batches = ops.batches.borrow().clone();
    assert_eq!(batches.len(), 1, "one batch write: {batches:?}");
    let (cas_before, keys) = &batches[0];
    let mut want = vec![keys::event_body(&receipt.event_id).to_string()];
    want.extend(records.iter().cloned());
    want.push(keys::event(&receipt.event_id).to_string());
    assert_eq!(
        keys, &want,
        "the body, the records in the listeners' order, the event"
    );
    assert!(stored_event(&kv, &keys::event(&receipt.event_id)).fanned_out);
    // Every history entry (a compare-and-swap of its part) before the batch.
    let cas = ops.cas.borrow().clone();
    let history_at: Vec<usize> = (0..cas.len())
        .filter(|i| cas[*i].starts_with(keys::SUBSCRIPTION_DELIVERIES_PREFIX))
        .collect();
    assert_eq!(history_at.len(), 3, "{cas:?}");
    assert!(history_at.iter().all(|i| i < cas_before), "{cas:?}");
    let sets = ops.sets.borrow().clone();
    for r in &records {
        assert_eq!(sets.iter().filter(|k| *k == r).count(), 1, "{sets:?}");
        assert_eq!(stored_delivery(&kv, r).status, Status::Pending);
    }
    // Keyed, each record is created only if absent: no batch.
    let (ops2_kv, entropy2) = (MemoryKv::new(), SeededEntropy::new(9));
    let ops2 = HookKv::new(&ops2_kv, "", || {});
    for n in 1..=3 {
        active_subscription_n(&ops2_kv, n);
    }
    let env2 = Env::new(1_767_225_600_000, &ops2, &settings, &entropy2);
    publish(&env2, "load.created", br#"{"id":"L"}"#, Some("k-1")).expect("publish");
    assert!(
        ops2.batches.borrow().is_empty(),
        "{:?}",
        ops2.batches.borrow()
    );
}

#[test]
fn a_keyed_event_id_is_derived_from_its_key_alone() {
    // A retry with the same key, by this version or the next, must find the same event:
    // the id is the first 96 bits of SHA-256("ingest/<key>") (Python's hashlib).
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let (a, b) = (SeededEntropy::new(1), SeededEntropy::new(2));
    let first = publish(
        &Env::new(1_000, &kv, &settings, &a),
        "load.created",
        br#"{"id":"L"}"#,
        Some("k-1"),
    );
    let again = publish(
        &Env::new(2_000, &kv, &settings, &b),
        "load.created",
        br#"{"id":"L"}"#,
        Some("k-1"),
    );
    let (first, again) = (first.expect("publish"), again.expect("retry"));
    assert_eq!(first.event_id, "evt_cb13832da16abf18f4cdc094");
    assert_eq!(again.event_id, first.event_id);
    assert!(again.replayed);
}

#[test]
fn a_keyed_publish_never_overwrites_a_delivery_a_concurrent_one_already_sent() {
    // Two ingests with the same key: the second finds the event the first recorded,
    // makes the delivery and sends attempt 1, all while the first is between its event
    // record and its delivery record. The first must then leave that delivery alone.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(9);
    let now = 1_767_225_600_000;
    let sent = Counting(Cell::new(0));
    let sub = active_subscription(&kv);
    let other = || {
        let env = Env::new(now, &kv, &settings, &entropy);
        let (receipt, prepared) =
            publish_prepared(&env, "load.created", br#"{"id":"L"}"#, Some("k1"))
                .expect("second publish");
        assert!(receipt.replayed, "the first one's event record is there");
        assert!(prepared.is_none(), "a resumed event runs from the store");
        let report = run_now(&env, &sent, &RunNow::Event(receipt.event_id));
        assert_eq!(report.succeeded, 1);
    };
    let hooked = HookKv::new(&kv, keys::DELIVERY_PREFIX, other);
    let env = Env::new(now, &hooked, &settings, &entropy);
    let (receipt, prepared) = publish_prepared(&env, "load.created", br#"{"id":"L"}"#, Some("k1"))
        .expect("first publish");
    let report = run_now(
        &Env::new(now, &kv, &settings, &entropy),
        &sent,
        &RunNow::Prepared(Box::new(prepared.expect("prepared"))),
    );
    assert_eq!((report.attempted, sent.0.get()), (0, 1), "sent once");
    let dlv = keys::delivery(&delivery_id(&receipt.event_id, &sub));
    let d = stored_delivery(&kv, &dlv);
    assert_eq!(d.status, Status::Succeeded, "not reset to pending");
}

/// Two keyed publishes of `mine` and `theirs` at once: both read "no event" for the key,
/// then the other one creates the event record just as this one is about to (its
/// compare-and-swap on `evt:` runs the other publish first). What this one got, what the
/// other got, and the stored body.
fn keyed_race(
    mine: &[u8],
    theirs: &[u8],
) -> (
    Result<edgehook_model::events::PublishReceipt, edgehook_model::events::PublishError>,
    edgehook_model::events::PublishReceipt,
    Option<Vec<u8>>,
) {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(10);
    let now = 1_767_225_600_000;
    active_subscription(&kv);
    let accepted = Cell::new(None);
    let other = || {
        let env = Env::new(now, &kv, &settings, &entropy);
        let receipt = publish(&env, "load.created", theirs, Some("k1")).expect("other publish");
        accepted.set(Some(receipt));
    };
    let hooked = HookKv::new(&kv, keys::EVENT_PREFIX, other);
    let env = Env::new(now, &hooked, &settings, &entropy);
    let outcome = publish(&env, "load.created", mine, Some("k1"));
    let accepted = accepted.take().expect("the other one ran");
    let body = kv.get(&keys::event_body(&accepted.event_id)).expect("get");
    (outcome, accepted, body)
}

#[test]
fn two_keyed_publishes_with_different_bodies_at_once_give_one_event_and_one_conflict() {
    // The keyed event record is created by a compare-and-swap expecting nothing (it was a
    // plain write after a read, so both were accepted and the second body overwrote the
    // first's). No operation is added to the key-less path.
    let (mine, theirs) = (&br#"{"id":"A"}"#[..], &br#"{"id":"B"}"#[..]);
    let (outcome, accepted, body) = keyed_race(mine, theirs);
    assert!(
        matches!(
            outcome,
            Err(edgehook_model::events::PublishError::Conflict(_))
        ),
        "{outcome:?}"
    );
    assert!(!accepted.replayed && accepted.deliveries == 1);
    assert_eq!(body.as_deref(), Some(theirs), "the accepted body stays");
    // The same body at the same moment is the same event.
    let (outcome, accepted, body) = keyed_race(theirs, theirs);
    let outcome = outcome.expect("the same event");
    assert!(outcome.replayed && outcome.event_id == accepted.event_id);
    assert_eq!(body.as_deref(), Some(theirs));
}

#[test]
fn a_prepared_delivery_changed_in_the_store_is_not_sent_from_memory() {
    // A keyed event's deliveries are claimed against the store before they are sent.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(7);
    let env = Env::new(1_767_225_600_000, &kv, &settings, &entropy);
    let sub = active_subscription(&kv);
    let (_, prepared) =
        publish_prepared(&env, "load.created", br#"{"id":"L"}"#, Some("k1")).expect("publish");
    // Between fan-out and attempt 1, the subscription is disabled: its pending
    // deliveries are cancelled in the store.
    disable(&env, &sub, "operator").expect("disable");
    let sent = Counting(Cell::new(0));
    let prepared = prepared.expect("prepared");
    let report = run_now(&env, &sent, &RunNow::Prepared(Box::new(prepared)));
    assert_eq!(
        (report.attempted, sent.0.get()),
        (0, 0),
        "the store decides"
    );
}

#[test]
fn a_keyless_events_batches_its_run_starts_for_certain_are_written_leased_to_it_and_sent_without_a_claim()
 {
    // One delivery a batch, 15 s an attempt at most: the run starts batch 1 by 15 s, inside
    // its 20 s budget, and may not start batch 2 (30 s). Batches 0 and 1 are leased.
    let kv = MemoryKv::new();
    let ops = HookKv::new(&kv, "", || {});
    let settings = Settings {
        max_concurrency: 1,
        attempt_timeout_ms: 15_000,
        ..Settings::default()
    };
    let entropy = SeededEntropy::new(7);
    let now = 1_767_225_600_000;
    let env = Env::new(now, &ops, &settings, &entropy);
    for n in 1..=3 {
        active_subscription_n(&kv, n);
    }
    let (_, prepared) =
        publish_prepared(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
    let prepared = prepared.expect("prepared");
    let owner = prepared
        .lease_owner
        .clone()
        .expect("a key-less event is leased");
    let ids: Vec<DeliveryId> = prepared
        .items
        .iter()
        .map(|(w, _)| w.delivery.id.clone())
        .collect();
    assert_eq!(ids.len(), 3);
    // Batch 0 for as long as a claim would hold it, batch 1 an attempt timeout longer (it
    // starts at most that much later); batch 2 unleased.
    let until = now + settings.attempt_timeout_ms + crate::claim::LEASE_MARGIN_MS;
    for (n, id) in ids.iter().enumerate() {
        let d = stored_delivery(&kv, &keys::delivery(id));
        let (want_until, want_owner) = match n {
            0 => (Some(until), Some(owner.as_str())),
            1 => (Some(until + 15_000), Some(owner.as_str())),
            _ => (None, None),
        };
        assert_eq!(
            (d.lease_until, d.lease_owner.as_deref()),
            (want_until, want_owner),
            "delivery {n}"
        );
    }
    // A tick meanwhile finds the leased batches held: it sends only the third.
    let tick_sent = Counting(Cell::new(0));
    tick(&Env::new(now + 1, &kv, &settings, &entropy), &tick_sent);
    assert_eq!(tick_sent.0.get(), 1, "only the unleased one");
    ops.reads.borrow_mut().clear();
    let sent = Counting(Cell::new(0));
    let report = run_now(&env, &sent, &RunNow::Prepared(Box::new(prepared)));
    assert_eq!((report.attempted, sent.0.get()), (2, 2), "{report:?}");
    let reads = ops.reads.borrow().clone();
    for id in &ids[..2] {
        let key = keys::delivery(id).to_string();
        // Not read at all: no claim before the send, and the outcome written over the
        // record while the lease holds.
        assert!(!reads.contains(&key), "{reads:?}");
        let d = stored_delivery(&kv, &keys::delivery(id));
        assert_eq!(d.status, Status::Succeeded);
        assert_eq!((d.lease_until, d.lease_owner), (None, None));
    }
    // With the default 10 s, two batches of 16: a fan-out of 33 leaves one to claim.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    for n in 1..=33 {
        active_subscription_n(&kv, n);
    }
    let env = Env::new(now, &kv, &settings, &entropy);
    let (_, prepared) =
        publish_prepared(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
    let leased: Vec<Option<u64>> = prepared
        .expect("prepared")
        .items
        .iter()
        .map(|(w, _)| stored_delivery(&kv, &keys::delivery(&w.delivery.id)).lease_until)
        .collect();
    let until = now + 10_000 + crate::claim::LEASE_MARGIN_MS;
    assert_eq!(leased[..16], [Some(until); 16]);
    assert_eq!(leased[16..32], [Some(until + 10_000); 16]);
    assert_eq!(leased[32..], [None]);
}

#[test]
fn a_leased_first_batch_whose_run_never_comes_is_sent_by_a_tick_when_the_lease_ends() {
    // The invocation ended between publish and its run: the leases run out as a claim's
    // would, and the deliveries are sent through their queue entries.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(7);
    let now = 1_767_225_600_000;
    active_subscription(&kv);
    let (_, prepared) = publish_prepared(
        &Env::new(now, &kv, &settings, &entropy),
        "load.created",
        br#"{"id":"L"}"#,
        None,
    )
    .expect("publish");
    assert!(prepared.and_then(|p| p.lease_owner).is_some());
    let until = now + settings.attempt_timeout_ms + crate::claim::LEASE_MARGIN_MS;
    let sent = Counting(Cell::new(0));
    tick(&Env::new(until - 1, &kv, &settings, &entropy), &sent);
    assert_eq!(sent.0.get(), 0, "held while the lease lasts");
    tick(&Env::new(until, &kv, &settings, &entropy), &sent);
    assert_eq!(sent.0.get(), 1, "sent once it has run out");
}

#[test]
fn a_publish_into_a_second_and_day_already_queued_begins_no_compare_and_swap_on_their_directories()
{
    // The due-queue and retention directories change only for an event that is the
    // first of its second (day); every other event reads them once and writes nothing,
    // without beginning a compare-and-swap (three host calls) on them.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(8);
    let now = 1_767_225_600_000;
    active_subscription(&kv);
    let first = HookKv::new(&kv, "", || {});
    publish(
        &Env::new(now, &first, &settings, &entropy),
        "load.created",
        br#"{"id":"L1"}"#,
        None,
    )
    .expect("first publish");
    let began = first.cas.borrow().clone();
    for dir in [keys::DUE_DIRECTORY, keys::RETENTION_DIRECTORY] {
        assert!(
            began.iter().any(|k| *k == dir),
            "the first event adds its {dir} entry"
        );
    }
    let second = HookKv::new(&kv, "", || {});
    publish(
        &Env::new(now + 10, &second, &settings, &entropy),
        "load.created",
        br#"{"id":"L2"}"#,
        None,
    )
    .expect("second publish");
    let began = second.cas.borrow().clone();
    for dir in [keys::DUE_DIRECTORY, keys::RETENTION_DIRECTORY] {
        assert!(
            !began.iter().any(|k| *k == dir),
            "{dir}: compare-and-swaps began on {began:?}"
        );
        assert!(
            second.reads.borrow().iter().any(|k| *k == dir),
            "{dir} is still read"
        );
    }
    let dir = directory::decode(&kv.get(&keys::DUE_DIRECTORY).ok().flatten().expect("dir"))
        .expect("directory");
    assert_eq!(dir.keys().copied().collect::<Vec<_>>(), vec![now / 1000]);
}

/// A publish reads the due and retention directories in the batch that reads its
/// listeners' records, and writes neither when its second and day are listed: 17 store
/// operations for one listener (the fan-out list's counter and page; the records and
/// directories; the body; three appends of three; the load id's index, a compare-and-swap
/// of two; the delivery record; the event record), not 19.
#[test]
fn a_publish_reads_the_directories_with_its_listeners_records() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(5);
    let env = Env::new(1_767_225_600_000, &kv, &settings, &entropy);
    active_subscription(&kv);
    publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("lists second and day");
    let before = kv.ops();
    let receipt = publish(&env, "load.created", br#"{"id":"L2"}"#, None).expect("publish");
    assert_eq!(receipt.deliveries, 1);
    assert_eq!(kv.ops() - before, 17);
}

/// An event nobody listens to queues nothing: its second is not listed in the due
/// directory (a tick would only visit an empty queue there).
#[test]
fn an_event_nobody_listens_to_lists_no_due_second() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(5);
    let env = Env::new(1_767_225_600_000, &kv, &settings, &entropy);
    let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
    assert_eq!(receipt.deliveries, 0);
    assert_eq!(kv.get(&keys::DUE_DIRECTORY).expect("get"), None);
    assert!(
        kv.get(&keys::RETENTION_DIRECTORY).expect("get").is_some(),
        "the event itself is kept for its retention"
    );
}

#[test]
fn run_now_sends_only_its_own_event_and_its_cost_ignores_the_queue() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(5);
    let now = 1_767_225_600_000;
    let env = Env::new(now, &kv, &settings, &entropy);
    active_subscription(&kv);
    let cost = |queued: usize| {
        // `queued` other deliveries are due in the same second (another instance's).
        let second = now / 1000;
        let others: Vec<DeliveryId> = (0..queued)
            .map(|i| {
                pending_delivery(
                    &kv,
                    &SubscriptionId::from("sub_other"),
                    &format!("evt_o{queued}_{i}"),
                    now,
                )
            })
            .collect();
        enqueue(&kv, &[(second, others)], None).expect("enqueue");
        let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
        let sent = Counting(Cell::new(0));
        let before = kv.ops();
        let report = run_now(&env, &sent, &RunNow::Event(receipt.event_id.clone()));
        let ops = kv.ops() - before;
        assert_eq!((report.attempted, report.succeeded), (1, 1));
        assert_eq!(sent.0.get(), 1, "only its own delivery");
        let d = load(
            &env,
            &delivery_id(
                &receipt.event_id,
                &SubscriptionId::from("sub_000000000000000000000001"),
            ),
        )
        .expect("load")
        .expect("record");
        assert_eq!(d.status, Status::Succeeded);
        ops
    };
    assert_eq!(
        cost(0),
        cost(300),
        "store operations with 0 and 300 others queued"
    );
    let sent = Counting(Cell::new(0));
    assert_eq!(
        run_now(&env, &sent, &RunNow::Event("evt_missing".into())).attempted,
        0,
        "an unknown event runs nothing"
    );
}

#[test]
fn a_keyed_publish_cut_short_anywhere_is_finished_whole_by_its_retry() {
    // A store failure at each step of a keyed publish, then the client's retry: one event,
    // its body as published, one pending delivery, queued and in the history.
    let load = br#"{"id":"L"}"#;
    for fail_at in 1.. {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(11);
        let env = Env::new(1_767_225_600_000, &kv, &settings, &entropy);
        let sub = active_subscription(&kv);
        kv.fail_at(Some(fail_at));
        let first = publish(&env, "load.created", load, Some("k1"));
        kv.fail_at(None);
        let receipt = publish(&env, "load.created", load, Some("k1")).expect("the retry");
        let event = stored_event(&kv, &keys::event(&receipt.event_id));
        assert!(event.fanned_out, "fault at {fail_at}");
        let body = kv.get(&keys::event_body(&receipt.event_id)).expect("get");
        assert_eq!(body.as_deref(), Some(&load[..]), "fault at {fail_at}");
        let dlv = delivery_id(&receipt.event_id, &sub);
        assert_eq!(
            stored_delivery(&kv, &keys::delivery(&dlv)).status,
            Status::Pending
        );
        let history = history_log(&sub).read(&kv, 0, 10).expect("history");
        assert!(history.iter().any(|e| e.item == dlv), "fault at {fail_at}");
        if first.is_ok() {
            break;
        }
    }
}

#[test]
fn a_disabled_subscription_records_skipped_deliveries_that_replay_after_an_enable() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(9);
    let t0 = 1_767_225_600_000;
    let sub = active_subscription(&kv);
    disable(&Env::new(t0, &kv, &settings, &entropy), &sub, "operator").expect("disable");
    // Published while disabled: a delivery in status `skipped`, listed in the history and
    // the event record, not queued, counted as no delivery to attempt.
    let env = Env::new(t0 + 1_000, &kv, &settings, &entropy);
    let receipt = publish(&env, "load.created", br#"{"id":"L1"}"#, None).expect("publish");
    assert_eq!((receipt.deliveries, receipt.next_due_ms), (0, None));
    let dlv = delivery_id(&receipt.event_id, &sub);
    let skipped = stored_delivery(&kv, &keys::delivery(&dlv).to_string());
    assert_eq!(
        (
            skipped.status,
            skipped.attempts.len(),
            skipped.next_attempt_at
        ),
        (Status::Skipped, 0, None)
    );
    let event_bytes = kv
        .get(&keys::event(&receipt.event_id))
        .expect("get")
        .expect("event");
    let event = EventRecord::decode(&event_bytes).expect("event");
    assert_eq!(
        (event.subscriptions.len(), event.skipped),
        (0, vec![sub.clone()])
    );
    let (listed, _) = history(&env, &sub, 0, 10, &Default::default()).expect("history");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].1.id, dlv);
    let sent = Counting(Cell::new(0));
    let later = Env::new(t0 + 600_000, &kv, &settings, &entropy);
    assert_eq!(
        tick(&later, &sent).attempted,
        0,
        "a skipped delivery is never attempted"
    );
    // Replay refuses while the subscription is disabled; after an enable it sends the
    // delivery under its id.
    assert!(replay(&later, &dlv, None).is_err());
    edgehook_subscriptions::enable(&later, &sub, None).expect("enable");
    let replayed = replay(&later, &dlv, None).expect("replay");
    assert_eq!((replayed.status, replayed.run), (Status::Pending, 1));
    assert_eq!(tick(&later, &sent).attempted, 1);
    assert_eq!(sent.0.get(), 1);
    let done = stored_delivery(&kv, &keys::delivery(&dlv).to_string());
    assert_eq!((done.status, done.attempts.len()), (Status::Succeeded, 1));
    // Enabled again, it is delivered to (once: the fan-out entry the disabled record kept
    // was removed, and the id is read once anyway).
    let receipt = publish(&later, "load.created", br#"{"id":"L2"}"#, None).expect("publish");
    assert_eq!(receipt.deliveries, 1);
    let fanout = edgehook_subscriptions::fanout_ids(&later, "load.created").expect("fanout");
    assert_eq!(fanout, vec![sub.clone()]);
}

#[test]
fn skipped_deliveries_stop_after_the_retention_period_and_at_a_delete() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(10);
    let t0 = 1_767_225_600_000;
    let sub = active_subscription(&kv);
    disable(&Env::new(t0, &kv, &settings, &entropy), &sub, "operator").expect("disable");
    let retention_ms = u64::from(settings.retention_days) * 86_400_000;
    let skipped_at = |now: u64| {
        let env = Env::new(now, &kv, &settings, &entropy);
        let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
        let bytes = kv.get(&keys::event(&receipt.event_id)).expect("get");
        EventRecord::decode(&bytes.expect("event"))
            .expect("event")
            .skipped
    };
    assert_eq!(skipped_at(t0 + retention_ms - 1), vec![sub.clone()]);
    assert_eq!(
        skipped_at(t0 + retention_ms),
        Vec::<SubscriptionId>::new(),
        "past retention"
    );
    // Deleted (within retention): nothing is recorded, and its fan-out entry is gone.
    let env = Env::new(t0 + 1, &kv, &settings, &entropy);
    disable(&env, &sub, edgehook_subscriptions::DELETED).expect("delete");
    assert_eq!(skipped_at(t0 + 2), Vec::<SubscriptionId>::new(), "deleted");
    let fanout = edgehook_subscriptions::fanout_ids(&env, "load.created").expect("fanout");
    assert!(fanout.is_empty(), "{fanout:?}");
}
