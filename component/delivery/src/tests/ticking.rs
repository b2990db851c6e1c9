//! Ticks: the due queue and its watermarks, claims and leases, batches and the time budget.

use super::*;
use edgehook_model::config::Settings;
use edgehook_model::env::Env;
use edgehook_model::env::SeededEntropy;
use edgehook_records::delivery::{Attempt, Delivery, Status, delivery_id};
use edgehook_storage::applog::Entry;
use edgehook_storage::keys::{self};
use edgehook_storage::kv::MemoryKv;
use edgehook_storage::kv::{Kv, KvError, Update, update};
use edgehook_subscriptions::{Status as SubStatus, Subscription};
use std::cell::{Cell, RefCell};

#[test]
fn the_watermark_never_passes_a_queue_number_still_being_written() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(4);
    let now = 1_767_225_600_000;
    let env = Env::new(now, &kv, &settings, &entropy);
    let sub = active_subscription(&kv);
    let second = now / 1000;
    // Appender A reserved number 1 but has not written it yet; appender B wrote number 2.
    kv.increment(&due_log(second).counter_key(), 1)
        .expect("reserve");
    let b = pending_delivery(&kv, &sub, "evt_b", now);
    enqueue(&kv, &[(second, vec![b])], None).expect("enqueue");
    let sent = Counting(Cell::new(0));
    assert_eq!(tick(&env, &sent).attempted, 1, "B is sent");
    // A finishes writing number 1; the next tick must still look at it.
    let a = pending_delivery(&kv, &sub, "evt_a", now);
    update(&kv, &due_log(second).page_key(0), &mut |cur| {
        let mut entries = cur
            .map(|b| edgehook_storage::applog::decode_page(b).expect("page"))
            .unwrap_or_default();
        entries.push(Entry {
            seq: 1,
            item: a.clone().into_string().into_bytes(),
        });
        Ok::<_, KvError>(Update::Write(
            edgehook_storage::applog::encode_page(&entries),
            (),
        ))
    })
    .expect("write the reserved entry");
    assert_eq!(tick(&env, &sent).attempted, 1, "A is sent too");
    assert_eq!(sent.0.get(), 2);
}

#[test]
fn a_tick_between_queue_entry_and_record_does_not_lose_the_delivery() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(3);
    let now = 1_767_225_600_500;
    let env = |kv| Env::new(now, kv, &settings, &entropy);
    active_subscription(&kv);
    let sent = Counting(Cell::new(0));
    // Another instance ticks after the queue entry is written, before the record is
    // (at the subscription's history entry, which comes between them).
    let hooked = HookKv::new(&kv, keys::SUBSCRIPTION_DELIVERIES_PREFIX, || {
        let report = tick(&env(&kv), &sent);
        assert_eq!(report.attempted, 0, "no record yet: nothing to send");
        assert!(
            report.next_due_ms.is_some_and(|t| t <= now + 1000),
            "it looks again soon"
        );
    });
    let hooked_env = Env::new(now, &hooked, &settings, &entropy);
    let receipt = publish(&hooked_env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
    assert_eq!(receipt.deliveries, 1);
    assert!(
        hooked.hook.borrow().is_none(),
        "the hook ran inside the publish"
    );
    let report = tick(&env(&kv), &sent);
    assert_eq!(
        (report.attempted, sent.0.get()),
        (1, 1),
        "the delivery is still found and sent"
    );
}

/// Answers every request with a timeout that took `latency_ms`, noting what each request
/// carried and the lease its delivery had while it was in flight.
struct Slow<'a> {
    kv: &'a MemoryKv,
    latency_ms: u64,
    /// (delivery id, X-Service-Timestamp, lease_until during the attempt)
    seen: RefCell<Vec<(DeliveryId, u64, Option<u64>)>>,
}

impl Sender for Slow<'_> {
    fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
        requests
            .iter()
            .map(|r| {
                let header = |n: &str| {
                    r.headers
                        .iter()
                        .find(|(k, _)| k == n)
                        .map(|(_, v)| v.clone())
                        .unwrap_or_default()
                };
                let id = DeliveryId::from(header("x-service-delivery-id"));
                let lease = self
                    .kv
                    .get(&keys::delivery(&id))
                    .ok()
                    .flatten()
                    .and_then(|b| Delivery::decode(&b).ok())
                    .and_then(|d| d.lease_until);
                let ts = header("x-service-timestamp").parse().unwrap_or(0);
                self.seen.borrow_mut().push((id, ts, lease));
                SendResult {
                    outcome: Err(crate::sender::SendError::Timeout),
                    latency_ms: self.latency_ms,
                    retry_after: None,
                }
            })
            .collect()
    }
}

#[test]
fn a_long_tick_signs_leases_and_schedules_each_batch_when_it_is_sent() {
    // Found by the soak (edgehook-soak): a tick read the clock once, so a batch sent 20 s
    // into a tick was signed 20 s in the past, leased until 5 s before it was claimed
    // (another tick could claim and send it again) and retried 20 s early.
    let kv = MemoryKv::new();
    let settings = Settings {
        max_concurrency: 1,
        attempt_timeout_ms: 10_000,
        ..Settings::default()
    };
    let entropy = SeededEntropy::new(5);
    let now = 1_767_225_600_000;
    let env = Env::new(now, &kv, &settings, &entropy);
    let sub = active_subscription(&kv);
    queued(&kv, &sub, &["evt_a", "evt_b"], now);
    let slow = Slow {
        kv: &kv,
        latency_ms: 10_000,
        seen: RefCell::default(),
    };
    assert_eq!(tick(&env, &slow).attempted, 2);
    let seen = slow.seen.borrow();
    assert_eq!(seen[0].1, now / 1000);
    let (id, timestamp, lease) = &seen[1];
    assert_eq!(*timestamp, (now + 10_000) / 1000, "signed when it is sent");
    // docs/design/delivery.md: leased for the attempt timeout + 5 s from when it is claimed.
    assert_eq!(seen[0].2, Some(now + 10_000 + 5_000));
    assert_eq!(
        *lease,
        Some(now + 10_000 + 10_000 + 5_000),
        "leased from when it is sent"
    );
    let d = load(&env, id).expect("load").expect("record");
    assert_eq!(d.attempts[0].started_at, now + 10_000);
    assert!(
        d.next_attempt_at
            .is_some_and(|t| t >= now + 10_000 + RETRY_DELAYS_MS[0]),
        "retried a minute after it was sent: {:?}",
        d.next_attempt_at
    );
}

/// Answers 500 to the deliveries in `failing`, 200 to the rest; records each batch's ids.
struct ByDelivery {
    failing: Vec<DeliveryId>,
    batches: RefCell<Vec<Vec<DeliveryId>>>,
}

impl Sender for ByDelivery {
    fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
        let ids = delivery_ids(requests);
        let results = ids
            .iter()
            .map(|id| SendResult {
                outcome: Ok(if self.failing.contains(id) { 500 } else { 200 }),
                latency_ms: 1,
                retry_after: None,
            })
            .collect();
        self.batches.borrow_mut().push(ids);
        results
    }
}

#[test]
fn deliveries_to_one_subscription_run_together_and_a_success_in_the_batch_outweighs_a_final_failure()
 {
    // DESIGN: deliveries to one subscription run in parallel; docs/design/http.md
    // (failure streak): a batch with both a success and a final failure for one subscription
    // counts as a success. With a threshold of one failure, the final failure alone
    // disables (the control run below).
    for (failing, disabled) in [(&["evt_b"][..], false), (&["evt_a", "evt_b"][..], true)] {
        let kv = MemoryKv::new();
        let settings = Settings {
            disable_after_failures: 1,
            ..Settings::default()
        };
        let entropy = SeededEntropy::new(9);
        let now = 1_767_225_600_000;
        let env = Env::new(now, &kv, &settings, &entropy);
        let sub = active_subscription(&kv);
        let ids = queued(&kv, &sub, &["evt_a", "evt_b"], now);
        // evt_b's delivery has failed twice: its attempt now is its last.
        let mut last = load(&env, &ids[1]).expect("load").expect("record");
        for number in 1..=2 {
            last.attempts.push(Attempt {
                run: 0,
                number,
                due_at: now,
                started_at: now,
                status_code: Some(500),
                error: None,
                latency_ms: 1,
                succeeded: false,
                retry_after_ms: None,
            });
        }
        kv.set(&keys::delivery(&ids[1]), &last.encode())
            .expect("set");
        let sender = ByDelivery {
            failing: failing
                .iter()
                .map(|e| delivery_id(&EventId::from(*e), &sub))
                .collect(),
            batches: RefCell::default(),
        };
        assert_eq!(tick(&env, &sender).attempted, 2);
        assert_eq!(
            *sender.batches.borrow(),
            vec![ids.clone()],
            "both in one batch, in flight together"
        );
        let status = |id: &str| {
            load(&env, &DeliveryId::from(id))
                .expect("load")
                .expect("record")
                .status
        };
        assert_eq!(status(&ids[1]), Status::Failed, "its last attempt");
        let record = kv
            .get(&keys::subscription(&sub))
            .expect("get")
            .expect("record");
        let record = Subscription::decode(&record).expect("decode");
        assert_eq!(
            record.status == SubStatus::Disabled,
            disabled,
            "failing {failing:?}: {record:?}"
        );
    }
}

#[test]
fn a_tick_starts_no_batch_after_its_time_budget_and_reports_the_rest_due() {
    let kv = MemoryKv::new();
    let settings = Settings {
        max_concurrency: 1,
        attempt_timeout_ms: 15_000,
        ..Settings::default()
    };
    let entropy = SeededEntropy::new(6);
    let now = 1_767_225_600_000;
    let env = |now_ms| Env::new(now_ms, &kv, &settings, &entropy);
    let sub = active_subscription(&kv);
    queued(&kv, &sub, &["evt_a", "evt_b", "evt_c", "evt_d"], now);
    let slow = Slow {
        kv: &kv,
        latency_ms: 15_000,
        seen: RefCell::default(),
    };
    let events = Events::default();
    let report = tick(&env(now).with_log(&events), &slow);
    assert_eq!(report.attempted, 2, "15 s, then 30 s: over the 20 s budget");
    assert_eq!(report.next_due_ms, Some(now), "the rest is due now");
    // The metrics event: two first attempts, the second one 15 s late (after the first
    // batch), and two entries of the second left unread, due since then.
    assert_eq!(report.first_lag_ms, [0, 15_000]);
    assert_eq!((report.backlog, report.oldest_due_ms), (2, Some(now)));
    assert_eq!(
        events.0.borrow().as_slice(),
        [format!(
            "{{\"type\":\"tick\",\"succeeded\":0,\"failed\":2,\"exhausted\":0,\"cancelled\":0,\
             \"backlog\":2,\"oldestDueMs\":{now},\"replays\":0,\"firstLagMs\":[0,15000]}}"
        )]
    );
    let report = tick(&env(now + 30_000), &slow);
    assert_eq!(report.attempted, 2);
    assert_eq!((report.backlog, report.oldest_due_ms), (0, None));
    assert_eq!(slow.seen.borrow().len(), 4);
}

#[test]
fn a_delivery_another_tick_holds_is_looked_at_again_when_its_lease_runs_out() {
    // Another instance claims the delivery between this tick's read of the queue and its
    // own claim, then dies mid-attempt. This tick must not move its watermark past the
    // entry: it is the only pointer to the delivery.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(7);
    let now = 1_767_225_600_000;
    let sub = active_subscription(&kv);
    let id = queued(&kv, &sub, &["evt_a"], now).remove(0);
    let hooked = HookKv::new(&kv, keys::DELIVERY_PREFIX, || {
        let bytes = kv.get(&keys::delivery(&id)).expect("get").expect("record");
        let mut d = Delivery::decode(&bytes).expect("record");
        d.lease_until = Some(now + 15_000);
        d.lease_owner = Some("another instance".into());
        kv.set(&keys::delivery(&id), &d.encode()).expect("set");
    });
    let sent = Counting(Cell::new(0));
    let report = tick(&Env::new(now, &hooked, &settings, &entropy), &sent);
    assert_eq!(report.attempted, 0, "the other instance holds it");
    assert!(
        report.next_due_ms.is_some_and(|t| t <= now + 15_000),
        "it looks again when the lease ends: {:?}",
        report.next_due_ms
    );
    let later = Env::new(now + 16_000, &kv, &settings, &entropy);
    assert_eq!(
        tick(&later, &sent).attempted,
        1,
        "sent once the lease is over"
    );
    assert_eq!(sent.0.get(), 1);
}

#[test]
fn an_event_published_after_a_tick_read_its_clock_is_sent_by_a_later_tick() {
    // A tick reads its clock at T - 200; a publish at T, in the same second, enqueues
    // before the tick scans that second. The tick must not send a delivery due after its
    // clock, nor move the second's watermark past it: through `events.publish` (no
    // run_now) the queue entry is the only pointer to attempt 1.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(11);
    let t = 1_767_225_600_300;
    active_subscription(&kv);
    let receipt = publish(
        &Env::new(t, &kv, &settings, &entropy),
        "load.created",
        br#"{"id":"L"}"#,
        None,
    )
    .expect("publish");
    assert_eq!(receipt.deliveries, 1);
    let sent = Counting(Cell::new(0));
    let early = tick(&Env::new(t - 200, &kv, &settings, &entropy), &sent);
    assert_eq!(early.attempted, 0, "not due at the tick's clock");
    assert_eq!(early.next_due_ms, Some(t), "due at its publish time");
    let later = tick(&Env::new(t + 5_000, &kv, &settings, &entropy), &sent);
    assert_eq!(later.attempted, 1, "sent by the next tick");
    assert_eq!(sent.0.get(), 1);
}

#[test]
fn a_tick_between_a_replays_queue_entry_and_its_record_does_not_lose_the_replay() {
    // A replay queues its entry first, then makes the record pending again. A tick in
    // between finds a finished record: it must not take the entry for done, or the
    // replay stays pending for good (and a second replay answers 409).
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(12);
    let now = 1_767_225_600_000;
    let sub = active_subscription(&kv);
    let id = queued(&kv, &sub, &["evt_a"], now).remove(0);
    let sent = Counting(Cell::new(0));
    assert_eq!(
        tick(&Env::new(now, &kv, &settings, &entropy), &sent).succeeded,
        1
    );
    let at = now + 120_000;
    let hooked = HookKv::new(&kv, keys::DELIVERY_PREFIX, || {
        let report = tick(&Env::new(at, &kv, &settings, &entropy), &sent);
        assert_eq!(report.attempted, 0, "the record is not pending yet");
    });
    let replayed = replay(&Env::new(at, &hooked, &settings, &entropy), &id, None).expect("replay");
    assert_eq!(replayed.status, Status::Pending);
    assert!(
        hooked.hook.borrow().is_none(),
        "the tick ran inside the replay"
    );
    let later = tick(&Env::new(at + 1_000, &kv, &settings, &entropy), &sent);
    assert_eq!(later.attempted, 1, "the replay's attempt is sent");
    assert_eq!(sent.0.get(), 2);
    let env = Env::new(at + 2_000, &kv, &settings, &entropy);
    assert_eq!(
        load(&env, &id).expect("load").expect("record").status,
        Status::Succeeded
    );
    replay(&env, &id, None).expect("finished, so it can be replayed again");
}

#[test]
fn a_fan_out_resumed_after_its_events_second_settled_is_not_lost_to_a_tick() {
    // A keyed publish recorded its event and failed before its fan-out. Its retry, two
    // minutes later, resumes the fan-out; a tick runs between the queue entry and the
    // delivery record. An entry in the event's own (settled) second would be taken for
    // a failed publish's leftover and passed, and the delivery never sent.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(13);
    let now = 1_767_225_600_000;
    active_subscription(&kv);
    let load = br#"{"id":"L"}"#;
    // Fourteen operations (the event looked for, the fan-out list's counter and page, the
    // listeners' records and directories, the event listed for retention: the day log's
    // counter and page and the directory, five; its load id's index, two; the event record
    // created, two; the body), then the store fails.
    kv.fail_at(Some(15));
    let first = publish(
        &Env::new(now, &kv, &settings, &entropy),
        "load.created",
        load,
        Some("k1"),
    );
    kv.fail_at(None);
    assert!(first.is_err(), "the first try fails");
    let events: Vec<String> = kv
        .dump()
        .keys()
        .filter(|k| k.starts_with(keys::EVENT_PREFIX) && !k.ends_with(":body"))
        .cloned()
        .collect();
    assert_eq!(events.len(), 1, "its event is recorded: {events:?}");
    let event_id = stored_event(&kv, &events[0]).id;
    assert!(
        kv.dump()
            .keys()
            .all(|k| !k.starts_with(keys::DELIVERY_PREFIX)),
        "no delivery made"
    );
    let at = now + 120_000;
    let sent = Counting(Cell::new(0));
    let hooked = HookKv::new(&kv, keys::SUBSCRIPTION_DELIVERIES_PREFIX, || {
        let report = tick(&Env::new(at, &kv, &settings, &entropy), &sent);
        assert_eq!(report.attempted, 0, "no record yet");
    });
    let retry = publish(
        &Env::new(at, &hooked, &settings, &entropy),
        "load.created",
        load,
        Some("k1"),
    )
    .expect("the retry resumes");
    assert!(retry.replayed && retry.event_id == event_id);
    assert!(hooked.hook.borrow().is_none(), "the tick ran inside");
    let later = tick(&Env::new(at + 1_000, &kv, &settings, &entropy), &sent);
    assert_eq!(later.attempted, 1, "the resumed delivery is sent");
    assert_eq!(sent.0.get(), 1);
}

/// Answers 200 after `latency_ms`, but while each request is in flight (its attempt
/// outliving its lease) another instance claims its delivery until `lease_until`.
struct TakenOver<'a> {
    kv: &'a MemoryKv,
    latency_ms: u64,
    lease_until: u64,
}

impl Sender for TakenOver<'_> {
    fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
        for id in delivery_ids(requests) {
            let mut d = stored_delivery(self.kv, &keys::delivery(&id));
            d.lease_owner = Some("another instance".into());
            d.lease_until = Some(self.lease_until);
            self.kv.set(&keys::delivery(&id), &d.encode()).expect("set");
        }
        requests
            .iter()
            .map(|_| SendResult {
                outcome: Ok(200),
                latency_ms: self.latency_ms,
                retry_after: None,
            })
            .collect()
    }
}

#[test]
fn a_tick_that_lost_its_lease_does_not_pass_the_entry_the_new_holder_needs() {
    // This tick's attempt outlives its lease (16 s against 15), another instance claims
    // the delivery meanwhile. The outcome is the new holder's to record; if that holder
    // dies, the queue entry is the only pointer left, so this tick must not move the
    // watermark past it.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(14);
    let now = 1_767_225_600_000;
    let sub = active_subscription(&kv);
    let id = queued(&kv, &sub, &["evt_a"], now).remove(0);
    let sender = TakenOver {
        kv: &kv,
        latency_ms: 16_000,
        lease_until: now + 31_000,
    };
    let report = tick(&Env::new(now, &kv, &settings, &entropy), &sender);
    assert_eq!(report.attempted, 0, "not recorded by the tick that lost it");
    assert!(
        report.next_due_ms.is_some_and(|t| t <= now + 31_000),
        "looked at again when the new lease ends: {:?}",
        report.next_due_ms
    );
    let d = stored_delivery(&kv, &keys::delivery(&id));
    assert_eq!(d.lease_owner.as_deref(), Some("another instance"));
    // The new holder died mid-attempt; once its lease is over, the delivery is sent.
    let sent = Counting(Cell::new(0));
    let later = tick(&Env::new(now + 32_000, &kv, &settings, &entropy), &sent);
    assert_eq!(later.attempted, 1, "sent once the new lease is over");
    assert_eq!(sent.0.get(), 1);
}

#[test]
fn an_outcome_inside_its_lease_is_written_over_the_claim_without_reading_it_back() {
    // The claim read the record and wrote its lease; the attempt ended well inside that
    // lease, so nobody else can have written the record since: the outcome is a plain
    // write, no second compare-and-swap.
    let kv = MemoryKv::new();
    let ops = HookKv::new(&kv, "", || {});
    let settings = Settings::default();
    let entropy = SeededEntropy::new(17);
    let now = 1_767_225_600_000;
    let sub = active_subscription(&kv);
    let id = queued(&kv, &sub, &["evt_a"], now).remove(0);
    let sent = Counting(Cell::new(0));
    let report = tick(&Env::new(now, &ops, &settings, &entropy), &sent);
    assert_eq!((report.attempted, report.succeeded), (1, 1));
    let key = keys::delivery(&id).to_string();
    let cas = ops.cas.borrow().clone();
    assert_eq!(
        cas.iter().filter(|k| **k == key).count(),
        1,
        "the claim's only: {cas:?}"
    );
    assert!(ops.sets.borrow().contains(&key), "the outcome is written");
    let d = stored_delivery(&kv, &key);
    assert_eq!(d.status, Status::Succeeded);
    assert_eq!((d.lease_until, d.lease_owner), (None, None));
}

#[test]
fn an_attempt_that_ends_near_its_lease_end_records_only_if_the_lease_is_still_its_own() {
    // 13 s of a 15 s lease gone: another instance whose clock runs a little ahead may
    // already have claimed the delivery. The outcome is then written by compare-and-swap,
    // which finds the other holder and leaves the record to it.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(18);
    let now = 1_767_225_600_000;
    let sub = active_subscription(&kv);
    let id = queued(&kv, &sub, &["evt_a"], now).remove(0);
    let sender = TakenOver {
        kv: &kv,
        latency_ms: 13_000,
        lease_until: now + 28_000,
    };
    let report = tick(&Env::new(now, &kv, &settings, &entropy), &sender);
    assert_eq!(
        report.attempted, 0,
        "not recorded over the other holder's claim"
    );
    let d = stored_delivery(&kv, &keys::delivery(&id));
    assert_eq!(d.lease_owner.as_deref(), Some("another instance"));
    assert_eq!(d.status, Status::Pending);
}

/// Answers 200, and while the requests are in flight deletes their records (the retention
/// purge of another instance).
struct Purged<'a>(&'a MemoryKv);

impl Sender for Purged<'_> {
    fn send_all(&self, requests: &[Outgoing], timeout_ms: u64) -> Vec<SendResult> {
        for id in delivery_ids(requests) {
            self.0.delete(&keys::delivery(&id)).expect("delete");
        }
        Counting(Cell::new(0)).send_all(requests, timeout_ms)
    }
}

#[test]
fn a_delivery_purged_while_in_flight_at_the_end_of_its_retention_is_not_written_back() {
    // A replay of a delivery whose day is about to leave the retention period: the purge
    // may delete its record during the attempt, and an outcome written over it would make
    // a record no purge finds again. Near that end the outcome goes by compare-and-swap,
    // which finds the record gone and writes nothing.
    let kv = MemoryKv::new();
    let settings = Settings {
        retention_days: 1,
        ..Settings::default()
    };
    let entropy = SeededEntropy::new(19);
    let day = edgehook_storage::retention::DAY_MS;
    let created = 20_454 * day + 5_000;
    let now = 20_455 * day - 1_000;
    let sub = active_subscription(&kv);
    let id = pending_delivery(&kv, &sub, "evt_old", created);
    enqueue(&kv, &[(now / 1000, vec![id.clone()])], None).expect("enqueue");
    let report = tick(&Env::new(now, &kv, &settings, &entropy), &Purged(&kv));
    assert_eq!(report.attempted, 0, "nothing left to record");
    assert_eq!(
        kv.get(&keys::delivery(&id)).expect("get"),
        None,
        "still purged"
    );
}

#[test]
fn a_settled_second_whose_last_append_failed_expires() {
    // An appender reserved the last number of the second (the counter went up) and
    // failed to write its page: a gap at the end. Once the second is settled, nothing
    // can fill it; the second must still be found finished and leave the directory.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(15);
    let now = 1_767_225_600_000;
    let sub = active_subscription(&kv);
    queued(&kv, &sub, &["evt_a"], now);
    kv.increment(&due_log(now / 1000).counter_key(), 1)
        .expect("reserve");
    let sent = Counting(Cell::new(0));
    for at in [now, now + 120_000, now + 180_000] {
        tick(&Env::new(at, &kv, &settings, &entropy), &sent);
    }
    assert_eq!(sent.0.get(), 1);
    let dir = read_directory(&kv).expect("directory");
    assert!(
        !dir.contains_key(&(now / 1000)),
        "the second is gone: {dir:?}"
    );
    assert_eq!(
        kv.get(&due_log(now / 1000).counter_key()).expect("get"),
        None,
        "and its queue deleted"
    );
}

#[test]
fn a_retry_cancelled_before_its_second_is_held_like_a_replay_then_dropped() {
    // Attempt 1 failed and attempt 2 is queued a minute ahead; then the subscription is
    // disabled, which cancels the delivery. When the retry's second comes, its entry may
    // as well be a replay's (a cancelled delivery is replayed after an enable), so it is
    // held until its second is settled, and then done with; nothing is sent.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(16);
    let now = 1_767_225_600_000;
    let sub = active_subscription(&kv);
    let env = Env::new(now, &kv, &settings, &entropy);
    let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
    let id = delivery_id(&receipt.event_id, &sub);
    let failing = ByDelivery {
        failing: vec![id.clone()],
        batches: RefCell::default(),
    };
    assert_eq!(tick(&env, &failing).failed, 1);
    let retry_at = load(&env, &id)
        .expect("load")
        .expect("record")
        .next_attempt_at
        .expect("attempt 2 queued");
    disable(
        &Env::new(now + 1_000, &kv, &settings, &entropy),
        &sub,
        "operator",
    )
    .expect("disable");
    let d = load(&env, &id).expect("load").expect("record");
    assert_eq!(d.status, Status::Cancelled);
    let sent = Counting(Cell::new(0));
    let report = tick(&Env::new(retry_at + 500, &kv, &settings, &entropy), &sent);
    assert_eq!(report.attempted, 0);
    assert_eq!(report.next_due_ms, Some(retry_at + 1_500), "held");
    let settled = retry_at + (QUEUE_GRACE_S + 2) * 1_000;
    let report = tick(&Env::new(settled, &kv, &settings, &entropy), &sent);
    assert_eq!(report.attempted, 0);
    assert_eq!(report.next_due_ms, None, "nothing left to look at");
    assert_eq!(sent.0.get(), 0);
}

#[test]
fn a_tick_between_a_skipped_deliverys_replay_entry_and_its_record_does_not_lose_it() {
    // As for a replay of a finished delivery: a skipped one (never queued, finished at its
    // publish) replayed after an enable has its entry queued before its record is pending.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(17);
    let now = 1_767_225_600_000;
    let sub = active_subscription(&kv);
    disable(&Env::new(now, &kv, &settings, &entropy), &sub, "operator").expect("disable");
    let env = Env::new(now + 1_000, &kv, &settings, &entropy);
    let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
    let id = delivery_id(&receipt.event_id, &sub);
    let at = now + 120_000;
    edgehook_subscriptions::enable(&Env::new(at, &kv, &settings, &entropy), &sub, None)
        .expect("enable");
    let sent = Counting(Cell::new(0));
    let hooked = HookKv::new(&kv, keys::DELIVERY_PREFIX, || {
        let report = tick(&Env::new(at, &kv, &settings, &entropy), &sent);
        assert_eq!(report.attempted, 0, "the record is not pending yet");
    });
    replay(&Env::new(at, &hooked, &settings, &entropy), &id, None).expect("replay");
    assert!(
        hooked.hook.borrow().is_none(),
        "the tick ran inside the replay"
    );
    let later = tick(&Env::new(at + 1_000, &kv, &settings, &entropy), &sent);
    assert_eq!(later.attempted, 1, "the replay's attempt is sent");
    assert_eq!(sent.0.get(), 1);
}

/// Answers 200 to everything and notes the delivery ids of each batch.
#[derive(Default)]
struct Batches(RefCell<Vec<Vec<DeliveryId>>>);

impl Sender for Batches {
    fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
        self.0.borrow_mut().push(delivery_ids(requests));
        requests
            .iter()
            .map(|_| SendResult {
                outcome: Ok(200),
                latency_ms: 5,
                retry_after: None,
            })
            .collect()
    }
}

#[test]
fn one_batch_takes_due_deliveries_from_several_seconds() {
    // Found by the soak: the tick sent each second's deliveries as a batch of its own,
    // so with one slow retry in every second a single ticker did one second of retries
    // per attempt timeout and fell further behind every second.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(8);
    let now = 1_767_225_600_000;
    let env = Env::new(now, &kv, &settings, &entropy);
    let sub = active_subscription(&kv);
    for (i, event) in ["evt_a", "evt_b", "evt_c"].iter().enumerate() {
        queued(&kv, &sub, &[event], now - 3000 + i as u64 * 1000);
    }
    let batches = Batches::default();
    assert_eq!(tick(&env, &batches).attempted, 3);
    assert_eq!(batches.0.borrow().len(), 1, "{:?}", batches.0.borrow());
}

#[test]
fn retries_whose_last_attempt_timed_out_go_last_in_batches_of_their_own() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(9);
    let now = 1_767_225_600_000;
    let env = Env::new(now, &kv, &settings, &entropy);
    let sub = active_subscription(&kv);
    let ids = queued(&kv, &sub, &["evt_a", "evt_b", "evt_c", "evt_d"], now);
    // a and c timed out on attempt 1 (a minute ago) and are due for attempt 2.
    for id in [&ids[0], &ids[2]] {
        let bytes = kv.get(&keys::delivery(id)).expect("get").expect("record");
        let mut d = Delivery::decode(&bytes).expect("record");
        d.attempts.push(Attempt {
            run: 0,
            number: 1,
            due_at: now - 70_000,
            started_at: now - 70_000,
            status_code: None,
            error: Some("timeout".into()),
            latency_ms: 10_000,
            succeeded: false,
            retry_after_ms: None,
        });
        kv.set(&keys::delivery(id), &d.encode()).expect("set");
    }
    let batches = Batches::default();
    assert_eq!(tick(&env, &batches).attempted, 4);
    let sent = batches.0.borrow();
    assert_eq!(
        *sent,
        vec![
            vec![ids[1].clone(), ids[3].clone()],
            vec![ids[0].clone(), ids[2].clone()]
        ]
    );
}
