//! Outcomes: retries on the schedule, success, `410 Gone`, failure streaks, disabling, and
//! the retry jitter.

use super::*;
use edgehook_model::config::Settings;
use edgehook_model::env::Env;
use edgehook_model::env::SeededEntropy;
use edgehook_model::ids::IdKind;
use edgehook_records::delivery::{Delivery, Status, delivery_id};
use edgehook_storage::keys::{self};
use edgehook_storage::kv::Kv;
use edgehook_storage::kv::MemoryKv;
use edgehook_subscriptions::Status as SubStatus;

/// Answers every request with one outcome: a status code, or a network error.
struct Answer(Result<u16, SendError>);

impl Sender for Answer {
    fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
        requests
            .iter()
            .map(|_| SendResult {
                outcome: self.0,
                latency_ms: 3,
                retry_after: None,
            })
            .collect()
    }
}

/// SPEC §3.3, §8 and DESIGN "Delivery": a non-2xx answer (5xx, 3xx, 4xx) or a network
/// error is a failure; the attempts are numbered 1, 2, 3 in the record; attempt 2 is due
/// about 60 s after attempt 1 failed and attempt 3 about 300 s after attempt 2 (up to
/// +10 %, on whole seconds); after the third failure the delivery is failed, nothing more
/// is due, and the subscription's failure streak counts that one delivery once.
#[test]
fn a_failing_delivery_gets_three_numbered_attempts_on_the_retry_schedule_then_fails() {
    for outcome in [
        Ok(500),
        Ok(302),
        Ok(429),
        Ok(199),
        Err(SendError::ConnectionRefused),
    ] {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(11);
        let start = 1_767_225_600_000;
        let sub = active_subscription(&kv);
        let id = queued(&kv, &sub, &["evt_a"], start).remove(0);
        let sender = Answer(outcome);
        let mut now = start;
        for (number, delay) in [(1u32, Some(60_000)), (2, Some(300_000)), (3, None)] {
            let report = tick(&Env::new(now, &kv, &settings, &entropy), &sender);
            assert_eq!(
                (report.attempted, report.succeeded, report.failed),
                (1, 0, 1),
                "{outcome:?}: attempt {number}"
            );
            let d = stored_delivery(&kv, &keys::delivery(&id));
            let last = d.attempts.last().expect("the attempt is recorded");
            assert_eq!(d.attempts.len(), number as usize, "{outcome:?}");
            assert_eq!(
                last.number, number,
                "{outcome:?}: attempts are numbered from 1"
            );
            assert_eq!(last.started_at, now);
            assert!(!last.succeeded);
            assert_eq!(last.status_code, outcome.ok(), "{outcome:?}");
            assert_eq!(
                last.error.as_deref(),
                outcome.err().map(SendError::as_str),
                "{outcome:?}"
            );
            match delay {
                Some(delay) => {
                    assert_eq!(d.status, Status::Pending, "{outcome:?}: {number}");
                    assert_eq!(d.finished_at, None);
                    let due = d.next_attempt_at.expect("the next attempt is due");
                    assert!(
                        (now + delay..=now + delay + delay / 10).contains(&due),
                        "{outcome:?}: attempt {} due {} ms after attempt {number}",
                        number + 1,
                        due - now
                    );
                    assert_eq!(due % 1000, 0, "retries fall on whole seconds");
                    assert_eq!(report.next_due_ms, Some(due));
                    let early = tick(&Env::new(due - 1000, &kv, &settings, &entropy), &sender);
                    assert_eq!(early.attempted, 0, "not before it is due");
                    now = due;
                }
                None => {
                    assert_eq!(d.status, Status::Failed, "{outcome:?}: the last attempt");
                    assert_eq!(d.next_attempt_at, None);
                    assert_eq!(d.finished_at, Some(now));
                }
            }
            let streak = stored_subscription(&kv, &sub).consecutive_failures;
            assert_eq!(streak, u32::from(delay.is_none()), "{outcome:?}: {number}");
        }
        let later = tick(
            &Env::new(now + 3_600_000, &kv, &settings, &entropy),
            &sender,
        );
        assert_eq!(later.attempted, 0, "{outcome:?}: at most 3 attempts");
    }
}

/// DESIGN "Delivery": success is any 2xx, at the first attempt or a retry; it ends the
/// delivery succeeded and resets the failure streak.
#[test]
fn any_2xx_answer_is_a_success_even_on_a_retry() {
    for code in [200, 202, 204, 299] {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(12);
        let now = 1_767_225_600_000;
        let sub = active_subscription(&kv);
        let mut record = stored_subscription(&kv, &sub);
        record.consecutive_failures = 2;
        kv.set(&keys::subscription(&sub), &record.encode())
            .expect("set");
        let id = queued(&kv, &sub, &["evt_a"], now).remove(0);
        let first = tick(&Env::new(now, &kv, &settings, &entropy), &Answer(Ok(503)));
        assert_eq!(first.failed, 1);
        let due = stored_delivery(&kv, &keys::delivery(&id))
            .next_attempt_at
            .expect("a retry");
        let report = tick(&Env::new(due, &kv, &settings, &entropy), &Answer(Ok(code)));
        assert_eq!(
            (report.attempted, report.succeeded, report.failed),
            (1, 1, 0),
            "{code}"
        );
        let d = stored_delivery(&kv, &keys::delivery(&id));
        assert_eq!(d.status, Status::Succeeded, "{code}");
        assert_eq!((d.next_attempt_at, d.finished_at), (None, Some(due)));
        let last = d.attempts.last().expect("attempt");
        assert_eq!((last.number, last.succeeded), (2, true), "{code}");
        assert_eq!(
            stored_subscription(&kv, &sub).consecutive_failures,
            0,
            "{code}: a success resets the streak"
        );
    }
}

/// DESIGN "Delivery": 410 Gone disables the subscription at once (reason `gone`), and the
/// delivery fails without a retry; another 4xx is retried and disables nothing.
#[test]
fn a_410_gone_fails_the_delivery_and_disables_the_subscription_at_once() {
    for (code, gone) in [(410, true), (404, false)] {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(13);
        let now = 1_767_225_600_000;
        let sub = active_subscription(&kv);
        let id = queued(&kv, &sub, &["evt_a"], now).remove(0);
        let report = tick(&Env::new(now, &kv, &settings, &entropy), &Answer(Ok(code)));
        assert_eq!((report.attempted, report.failed), (1, 1), "{code}");
        let d = stored_delivery(&kv, &keys::delivery(&id));
        let record = stored_subscription(&kv, &sub);
        if gone {
            assert_eq!(d.status, Status::Failed, "no retry after 410");
            assert_eq!(d.next_attempt_at, None);
            assert_eq!(record.status, SubStatus::Disabled);
            assert_eq!(record.disabled_reason.as_deref(), Some("gone"));
        } else {
            assert_eq!(d.status, Status::Pending, "{code} is retried");
            assert!(d.next_attempt_at.is_some());
            assert_eq!(record.status, SubStatus::Active);
        }
    }
}

/// DESIGN "Delivery": a subscription is disabled (reason `repeated_failures`) when its
/// last `disable_after_failures` deliveries all ended failed; any success resets the
/// streak; a subscription no longer active is left alone.
#[test]
fn the_failure_streak_disables_at_the_configured_count_and_a_success_resets_it() {
    let kv = MemoryKv::new();
    let settings = Settings {
        disable_after_failures: 3,
        ..Settings::default()
    };
    let entropy = SeededEntropy::new(14);
    let now = 1_767_225_600_000;
    let env = Env::new(now, &kv, &settings, &entropy);
    let sub = active_subscription(&kv);
    let streak = || {
        let s = stored_subscription(&kv, &sub);
        (s.consecutive_failures, s.status)
    };
    record_streak(&env, &sub, false).expect("streak");
    record_streak(&env, &sub, false).expect("streak");
    assert_eq!(streak(), (2, SubStatus::Active));
    record_streak(&env, &sub, true).expect("reset");
    assert_eq!(
        streak(),
        (0, SubStatus::Active),
        "a success resets the streak"
    );
    record_streak(&env, &sub, true).expect("nothing to reset");
    assert_eq!(streak(), (0, SubStatus::Active));
    for n in 1..=2 {
        record_streak(&env, &sub, false).expect("streak");
        assert_eq!(streak(), (n, SubStatus::Active), "{n} of 3");
    }
    record_streak(&env, &sub, false).expect("streak");
    assert_eq!(streak(), (3, SubStatus::Disabled), "the third in a row");
    let record = stored_subscription(&kv, &sub);
    assert_eq!(record.disabled_reason.as_deref(), Some("repeated_failures"));
    assert_eq!(record.disabled_at, Some(now));
    record_streak(&env, &sub, false).expect("disabled: left alone");
    record_streak(&env, &sub, true).expect("disabled: left alone");
    assert_eq!(streak(), (3, SubStatus::Disabled));
    record_streak(
        &env,
        &SubscriptionId::from("sub_000000000000000000000009"),
        false,
    )
    .expect("no such record");
}

/// DESIGN "Delivery": disabling cancels the subscription's pending attempts; a delivery
/// another tick holds a live lease on is left to that tick, and finished deliveries stay
/// as they are. Disabling twice cancels nothing more.
#[test]
fn disabling_cancels_pending_deliveries_but_not_leased_or_finished_ones() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(15);
    let now = 1_767_225_600_000;
    let env = Env::new(now, &kv, &settings, &entropy);
    let sub = active_subscription(&kv);
    let ids: Vec<DeliveryId> = [
        "evt_due",
        "evt_later",
        "evt_leased",
        "evt_lapsed",
        "evt_done",
    ]
    .iter()
    .map(|e| pending_delivery(&kv, &sub, e, now + 60_000))
    .collect();
    let edit = |id: &str, f: &dyn Fn(&mut Delivery)| {
        let mut d = stored_delivery(&kv, &keys::delivery(&DeliveryId::from(id)));
        f(&mut d);
        kv.set(&keys::delivery(&DeliveryId::from(id)), &d.encode())
            .expect("set");
    };
    edit(&ids[2], &|d| {
        d.lease_until = Some(now + 1);
        d.lease_owner = Some("tick_other".into());
    });
    edit(&ids[3], &|d| {
        d.lease_until = Some(now);
        d.lease_owner = Some("tick_dead".into());
    });
    edit(&ids[4], &|d| {
        d.status = Status::Succeeded;
        d.next_attempt_at = None;
        d.finished_at = Some(now - 1);
    });
    history_log(&sub).append(&kv, &ids).expect("history");
    let events = Events::default();
    let logged = Env::new(now, &kv, &settings, &entropy).with_log(&events);
    let disabled = disable(&logged, &sub, "operator").expect("disable");
    assert_eq!(
        disabled.map(|s| (s.status, s.disabled_reason)),
        Some((SubStatus::Disabled, Some("operator".to_owned())))
    );
    let status = |id: &str| stored_delivery(&kv, &keys::delivery(&DeliveryId::from(id)));
    for id in [&ids[0], &ids[1], &ids[3]] {
        let d = status(id);
        assert_eq!(d.status, Status::Cancelled, "{id}");
        assert_eq!((d.next_attempt_at, d.finished_at), (None, Some(now)));
    }
    assert_eq!(status(&ids[2]).status, Status::Pending, "leased elsewhere");
    assert_eq!(status(&ids[4]).status, Status::Succeeded);
    assert_eq!(status(&ids[4]).finished_at, Some(now - 1));
    assert_eq!(disable(&env, &sub, "operator").expect("again"), None);
    // The lease runs out: a later cancel takes that one too, and only that one.
    let later = Env::new(now + 1, &kv, &settings, &entropy);
    assert_eq!(cancel_pending(&later, &sub).expect("cancel"), 1);
    assert_eq!(status(&ids[2]).status, Status::Cancelled);
    assert_eq!(cancel_pending(&later, &sub).expect("cancel"), 0);
    // The metrics event of the disable's cancels (a cancel of none says nothing).
    let events = events.0.borrow();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].contains("\"cancelled\":3,"), "{}", events[0]);
}

/// Disabling decides under compare-and-swap: a delivery that another tick leased, or
/// that finished, between the cancel's read and its write is left as it is; one whose
/// lease runs out exactly now is cancelled. Deliveries already finished when it reads
/// begin no compare-and-swap at all.
#[test]
fn a_delivery_leased_or_finished_while_disabling_is_left_as_it_is() {
    let now = 1_767_225_600_000;
    type Change = fn(&mut Delivery, u64);
    let cases: [(&str, Change, Status); 3] = [
        (
            "leased",
            |d, now| {
                d.lease_until = Some(now + 10_000);
                d.lease_owner = Some("tick_other".into());
            },
            Status::Pending,
        ),
        (
            "lease runs out now",
            |d, now| {
                d.lease_until = Some(now);
                d.lease_owner = Some("tick_dead".into());
            },
            Status::Cancelled,
        ),
        (
            "finished",
            |d, now| {
                d.status = Status::Succeeded;
                d.next_attempt_at = None;
                d.finished_at = Some(now);
            },
            Status::Succeeded,
        ),
    ];
    for (what, change, expected) in cases {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(16);
        let sub = active_subscription(&kv);
        let id = pending_delivery(&kv, &sub, "evt_a", now + 60_000);
        let done = pending_delivery(&kv, &sub, "evt_done", now);
        let mut finished = stored_delivery(&kv, &keys::delivery(&done));
        finished.status = Status::Failed;
        finished.finished_at = Some(now - 1);
        kv.set(&keys::delivery(&done), &finished.encode())
            .expect("set");
        history_log(&sub)
            .append(&kv, &[done.clone(), id.clone()])
            .expect("history");
        let key: &'static str = Box::leak(keys::delivery(&id).to_string().into_boxed_str());
        let hooked = HookKv::new(&kv, key, || {
            let mut d = stored_delivery(&kv, key);
            change(&mut d, now);
            kv.set(key, &d.encode()).expect("set");
        });
        let env = Env::new(now, &hooked, &settings, &entropy);
        let cancelled = cancel_pending(&env, &sub).expect("cancel");
        let d = stored_delivery(&kv, key);
        assert_eq!(d.status, expected, "{what}");
        assert_eq!(
            cancelled,
            u32::from(expected == Status::Cancelled),
            "{what}"
        );
        assert!(
            !hooked
                .cas
                .borrow()
                .contains(&keys::delivery(&done).to_string()),
            "{what}: no compare-and-swap on a delivery read as finished"
        );
    }
}

#[test]
fn retries_follow_the_schedule_with_bounded_jitter() {
    for random in [0, 1, 4_999, 5_000, u64::MAX] {
        let second = retry_due(1_000_500, 1, random).expect("attempt 2");
        assert!((1_060_500..=1_066_500).contains(&second), "{second}");
        assert_eq!(second % 1000, 0);
        let third = retry_due(1_000_500, 2, random).expect("attempt 3");
        assert!((1_300_500..=1_330_500).contains(&third), "{third}");
    }
    assert_eq!(retry_due(0, 3, 0), None);
    assert_eq!(retry_due(0, 0, 0), None);
}

/// `retry_delays_ms` moves the schedule (short delays for tests and operators): each
/// retry comes after its delay, on a whole second, at most a second late, never panics.
#[test]
fn retry_delays_come_from_the_setting() {
    for random in [0, 1, 999, u64::MAX] {
        let second = retry_due_after(&[1000, 2000], 5_500, 1, random).expect("attempt 2");
        assert!(
            (6_500..=7_000).contains(&second) && second.is_multiple_of(1000),
            "{second}"
        );
        let third = retry_due_after(&[1000, 2000], 5_500, 2, random).expect("attempt 3");
        assert!(
            (7_500..=8_000).contains(&third) && third.is_multiple_of(1000),
            "{third}"
        );
    }
    assert_eq!(retry_due_after(&[1000, 2000], 0, 3, 0), None);
    let settings = Settings::from_pairs([("retry_delays_ms", "1000, 2000")]).expect("parses");
    assert_eq!(settings.retry_delays_ms, [1000, 2000]);
    assert_eq!(Settings::default().retry_delays_ms, RETRY_DELAYS_MS);
    for bad in ["60000", "60000,300000,900000", "999,5000", "a,b", ""] {
        let err = Settings::from_pairs([("retry_delays_ms", bad)]);
        assert!(
            bad.is_empty() || err.is_err(),
            "{bad:?} must be refused: {err:?}"
        );
    }
}

/// Jitter happens: different random inputs spread the due times over the whole +10 %
/// window (on whole seconds), never below the un-jittered delay nor past the bound.
#[test]
fn retry_jitter_spreads_due_times_within_the_bound() {
    let failed_at = 1_000_000;
    for (attempts, delay) in [(1, 60_000), (2, 300_000)] {
        let dues: std::collections::BTreeSet<u64> = (0..2_000u64)
            .map(|i| retry_due(failed_at, attempts, i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
            .map(|due| due.expect("a retry"))
            .collect();
        let (lo, hi) = (failed_at + delay, failed_at + delay + delay / 10);
        assert!(dues.iter().all(|d| (lo..=hi).contains(d)), "{dues:?}");
        let seconds = delay / 10 / 1000;
        assert!(
            dues.len() as u64 >= seconds * 9 / 10,
            "attempt {}: {} distinct due seconds over a {seconds} s window",
            attempts + 1,
            dues.len()
        );
        assert!(
            *dues.first().expect("some") <= lo + 1000,
            "the window's start is used"
        );
        assert!(
            *dues.last().expect("some") >= hi - 1000,
            "the window's end is used"
        );
    }
}

#[test]
fn delivery_ids_are_stable_per_event_and_subscription() {
    let a = delivery_id(&"evt_1".into(), &"sub_1".into());
    assert_eq!(a, delivery_id(&"evt_1".into(), &"sub_1".into()));
    assert_ne!(a, delivery_id(&"evt_1".into(), &"sub_2".into()));
    assert_ne!(a, delivery_id(&"evt_2".into(), &"sub_1".into()));
    assert!(IdKind::Delivery.matches(&a));
    // The derivation itself is fixed (records written by earlier versions are found
    // again by it): the first 96 bits of SHA-256("<event>/<subscription>"), computed
    // with Python's hashlib.
    assert_eq!(a, "dlv_f8aaea693ec0b48f06dae934");
}

#[test]
fn a_batchs_outcomes_are_one_batch_write_and_a_failed_one_is_written_record_by_record() {
    for fail in [false, true] {
        let kv = MemoryKv::new();
        let ops = HookKv::new(&kv, "", || {});
        ops.fail_batches.set(fail);
        let settings = Settings::default();
        let entropy = SeededEntropy::new(17);
        let now = 1_767_225_600_000;
        let sub = active_subscription(&kv);
        let ids = queued(&kv, &sub, &["evt_a", "evt_b", "evt_c"], now);
        let sent = Counting(Cell::new(0));
        let report = tick(&Env::new(now, &ops, &settings, &entropy), &sent);
        assert_eq!((report.attempted, report.succeeded), (3, 3), "fail {fail}");
        let records: Vec<String> = ids
            .iter()
            .map(|id| keys::delivery(id).to_string())
            .collect();
        let batches = ops.batches.borrow().clone();
        assert_eq!(batches.len(), 1, "fail {fail}: {batches:?}");
        let mut batch = batches[0].1.clone();
        batch.sort();
        let mut want = records.clone();
        want.sort();
        assert_eq!(batch, want, "fail {fail}: the three outcomes in one batch");
        // Refused, each was written on its own; either way every outcome is in the store.
        let sets = ops.sets.borrow().clone();
        for r in &records {
            assert_eq!(
                sets.iter().filter(|k| *k == r).count(),
                1,
                "fail {fail}: {sets:?}"
            );
            assert_eq!(
                stored_delivery(&kv, r).status,
                Status::Succeeded,
                "fail {fail}"
            );
        }
    }
}
