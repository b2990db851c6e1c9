//! The ledger's checks on made-up soak runs: a clean run passes, and each kind of problem
//! is found and named.

use super::*;
use crate::records::{AttemptView, SubState};
use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha2::Sha256;

const T0: u64 = 1_800_000_000_000;

fn sub(id: &str, behavior: Behavior) -> Sub {
    Sub {
        id: id.into(),
        behavior,
        path: format!("/s/{id}"),
        secret: format!("whsec_{id}"),
        event_types: vec!["load.created".into()],
        created_sent_ms: T0 - 100,
        created_resp_ms: T0 - 90,
        deleted_ms: None,
        state: Some(SubState {
            status: "active".into(),
            disabled_reason: None,
            disabled_at: None,
        }),
    }
}

fn event(id: &str, at: u64, deliveries: u64) -> Event {
    Event {
        id: id.into(),
        event_type: "load.created".into(),
        body: Bytes::from(format!(r#"{{"id":"{id}"}}"#)),
        sent_ms: at,
        resp_ms: at + 5,
        deliveries,
    }
}

fn attempt(number: u32, due_at: u64, started_at: u64, behavior: Behavior) -> AttemptView {
    let (status_code, error) = match behavior {
        Behavior::Ok => (Some(200), None),
        Behavior::Status500 => (Some(500), None),
        Behavior::Status503 => (Some(503), None),
        Behavior::Refused => (None, Some("connection refused".into())),
        Behavior::Timeout => (None, Some("timeout".into())),
    };
    AttemptView {
        run: 0,
        number,
        due_at,
        started_at,
        status_code,
        error,
        succeeded: behavior == Behavior::Ok,
    }
}

/// A delivery of `e` to `s` whose attempts followed the schedule exactly.
fn delivery(e: &Event, s: &Sub, attempts: usize, status: &str) -> DeliveryView {
    let created = e.sent_ms + 1;
    let mut list = Vec::new();
    let mut due = created;
    for i in 0..attempts {
        let started = due + 20;
        list.push(attempt(i as u32 + 1, due, started, s.behavior));
        due = started + [60_000, 300_000].get(i).copied().unwrap_or(0);
    }
    DeliveryView {
        id: format!("dlv_{}_{}", e.id, s.id),
        event_id: e.id.clone(),
        event_type: e.event_type.clone(),
        subscription_id: s.id.clone(),
        status: status.into(),
        created_at: created,
        next_attempt_at: (status == "pending").then_some(due),
        attempts: list,
        read_at_ms: 0,
    }
}

/// What a receiver got for every attempt of `d`, signed with an HMAC computed here.
fn requests(d: &DeliveryView, s: &Sub, e: &Event) -> Vec<Received> {
    if s.behavior == Behavior::Refused {
        return Vec::new();
    }
    d.attempts
        .iter()
        .map(|a| {
            let ts = (a.started_at / 1000).to_string();
            let mut mac =
                Hmac::<Sha256>::new_from_slice(s.secret.as_bytes()).expect("any key length");
            mac.update(format!("{ts}.").as_bytes());
            mac.update(&e.body);
            Received {
                path: s.path.clone(),
                delivery_id: Some(d.id.clone()),
                event_type: Some(e.event_type.clone()),
                timestamp: Some(ts),
                signature: Some(hex::encode(mac.finalize().into_bytes())),
                body: e.body.clone(),
                at_ms: a.started_at + 1,
            }
        })
        .collect()
}

struct World {
    subs: Vec<Sub>,
    events: Vec<Event>,
    deliveries: BTreeMap<String, DeliveryView>,
    received: Vec<Received>,
    now: u64,
}

impl World {
    fn add(&mut self, e: usize, s: usize, attempts: usize, status: &str) -> String {
        let d = delivery(&self.events[e], &self.subs[s], attempts, status);
        self.received
            .extend(requests(&d, &self.subs[s], &self.events[e]));
        let id = d.id.clone();
        self.deliveries.insert(id.clone(), d);
        id
    }

    fn check(&self) -> Ledger {
        check(
            &self.subs,
            &self.events,
            &self.deliveries,
            &self.received,
            self.now,
            &Rules::default(),
        )
    }
}

/// Two subscriptions (200 and 500), one event 2 minutes ago: the 200 one succeeded, the
/// 500 one failed twice and waits for attempt 3.
fn balanced() -> World {
    let mut w = World {
        subs: vec![sub("ok", Behavior::Ok), sub("bad", Behavior::Status500)],
        events: vec![event("e1", T0, 2)],
        deliveries: BTreeMap::new(),
        received: Vec::new(),
        now: T0 + 120_000,
    };
    w.add(0, 0, 1, "succeeded");
    w.add(0, 1, 2, "pending");
    w
}

fn kinds(l: &Ledger) -> Vec<&'static str> {
    l.problem_counts().into_keys().collect()
}

#[test]
fn a_balanced_ledger_has_no_problems() {
    let l = balanced().check();
    assert_eq!(l.problems, vec![]);
    assert_eq!(l.by_state.get(&State::Succeeded), Some(&1));
    assert_eq!(l.by_state.get(&State::Pending), Some(&1));
    assert_eq!(l.attempts, [2, 1, 0]);
    assert_eq!(l.received, 3);
}

#[test]
fn a_missing_delivery_is_found_by_count_and_by_exposure() {
    let mut w = balanced();
    w.deliveries.retain(|_, d| d.subscription_id != "ok");
    assert_eq!(
        kinds(&w.check()),
        vec![
            "event count",
            "missing delivery",
            "unknown delivery received"
        ]
    );
}

#[test]
fn a_delivery_to_a_subscription_created_after_the_publish_is_unexpected() {
    let mut w = balanced();
    let mut late = sub("late", Behavior::Ok);
    late.created_sent_ms = T0 + 1000;
    late.created_resp_ms = T0 + 1010;
    w.subs.push(late);
    w.events[0].deliveries = 3;
    w.add(0, 2, 1, "succeeded");
    assert_eq!(kinds(&w.check()), vec!["unexpected delivery"]);
}

#[test]
fn a_subscription_created_during_the_publish_may_or_may_not_get_it() {
    let mut w = balanced();
    let mut racing = sub("racing", Behavior::Ok);
    racing.created_sent_ms = T0 - 1;
    racing.created_resp_ms = T0 + 2;
    w.subs.push(racing);
    assert_eq!(w.check().problems, vec![]);
    w.events[0].deliveries = 3;
    w.add(0, 2, 1, "succeeded");
    assert_eq!(w.check().problems, vec![]);
}

#[test]
fn an_extra_request_at_the_receiver_is_a_count_mismatch() {
    let mut w = balanced();
    let again = w.received[0].clone();
    w.received.push(again);
    let l = w.check();
    // (a second send of the same attempt is also a retry with no delay)
    assert_eq!(kinds(&l), vec!["receiver count", "retry too early"]);
    assert!(
        l.problems[0].recheck.is_some(),
        "may be an attempt in flight"
    );
}

#[test]
fn a_request_that_arrived_after_the_record_was_read_is_the_next_attempt() {
    // The record of "bad" was read before attempt 2 reached the receiver.
    let mut w = balanced();
    let d = w.deliveries.get_mut("dlv_e1_bad").expect("delivery");
    d.read_at_ms = d.attempts[1].started_at - 1000;
    d.attempts.pop();
    d.next_attempt_at = Some(d.attempts[0].started_at + 60_000);
    assert_eq!(w.check().problems, vec![]);
    // Read after it arrived, the record must show it.
    w.deliveries
        .get_mut("dlv_e1_bad")
        .expect("delivery")
        .read_at_ms = T0 + 61_000;
    assert_eq!(kinds(&w.check()), vec!["receiver count"]);
}

#[test]
fn a_forged_signature_a_changed_body_and_a_wrong_path_are_caught() {
    let mut w = balanced();
    w.received[0].signature = Some("00".repeat(32));
    w.received[1].body = Bytes::from_static(b"{}");
    w.received[2].path = "/elsewhere".into();
    assert_eq!(kinds(&w.check()), vec!["body", "path", "signature"]);
}

#[test]
fn an_old_timestamp_and_a_retry_that_came_too_soon_are_caught() {
    // Signed at the start of a long tick, sent 20 s later: the signature still verifies
    // (within 5 minutes), the timestamp is stale.
    let mut w = balanced();
    w.received[0].at_ms += 20_000;
    assert_eq!(kinds(&w.check()), vec!["stale timestamp"]);
    // The receiver got attempt 2 only 30 s after attempt 1, whatever the record says.
    let mut w = balanced();
    let second = w
        .received
        .iter_mut()
        .filter(|r| r.path == "/s/bad")
        .nth(1)
        .expect("attempt 2");
    second.at_ms -= 30_000;
    second.timestamp = Some((second.at_ms / 1000).to_string());
    let l = w.check();
    assert!(kinds(&l).contains(&"retry too early"), "{:?}", l.problems);
}

#[test]
fn a_fourth_attempt_and_a_late_retry_are_caught() {
    let mut w = balanced();
    let d = w.deliveries.get_mut("dlv_e1_bad").expect("delivery");
    d.attempts[1].due_at += 10_000; // 70 s after the failure instead of 60-66
    assert_eq!(kinds(&w.check()), vec!["off schedule"]);

    let mut w = balanced();
    w.deliveries.remove("dlv_e1_bad");
    w.received.retain(|r| r.path != "/s/bad");
    let id = w.add(0, 1, 3, "failed");
    let d = w.deliveries.get_mut(&id).expect("delivery");
    let mut fourth = d.attempts[2].clone();
    fourth.number = 4;
    d.attempts.push(fourth);
    let l = w.check();
    assert_eq!(kinds(&l), vec!["state", "too many attempts"]);
}

#[test]
fn an_overdue_attempt_and_a_stuck_200_delivery_are_caught() {
    let mut w = balanced();
    w.now += 10 * 60_000; // attempt 3 was due 5 minutes ago
    let l = w.check();
    assert_eq!(kinds(&l), vec!["overdue"]);

    let mut w = balanced();
    let id = w.add(0, 0, 0, "pending");
    w.received
        .retain(|r| r.delivery_id.as_deref() != Some(id.as_str()));
    let d = w.deliveries.get_mut(&id).expect("delivery");
    d.created_at = w.now - 1000; // attempt 1 due a second ago: not overdue yet
    d.next_attempt_at = Some(d.created_at);
    assert_eq!(kinds(&w.check()), vec!["200 receiver not succeeded"]);
}

#[test]
fn disabling_follows_the_failure_streak() {
    let mut w = balanced();
    w.subs[1].state = Some(SubState {
        status: "disabled".into(),
        disabled_reason: Some("repeated_failures".into()),
        disabled_at: Some(T0 + 100_000),
    });
    // Disabled after one failure: too early.
    assert_eq!(kinds(&w.check()), vec!["disable rule"]);
    // Five deliveries that failed after 3 attempts: right, and the pending one is now
    // waiting to be cancelled.
    for i in 0..5 {
        w.events
            .push(event(&format!("f{i}"), T0 + 1000 + i as u64, 2));
        w.add(i + 1, 0, 1, "succeeded");
        w.add(i + 1, 1, 3, "failed");
    }
    w.now = T0 + 370_000;
    let l = w.check();
    assert_eq!(l.problems, vec![]);
    assert_eq!(l.by_state.get(&State::PendingDisabled), Some(&1));
    assert_eq!(l.by_state.get(&State::Failed), Some(&5));
}

#[test]
fn a_200_receiver_disabled_or_a_cancelled_delivery_of_an_active_subscription_is_wrong() {
    let mut w = balanced();
    w.subs[0].state = Some(SubState {
        status: "disabled".into(),
        disabled_reason: Some("repeated_failures".into()),
        disabled_at: Some(T0 + 60_000),
    });
    assert_eq!(kinds(&w.check()), vec!["disable rule"]);

    let mut w = balanced();
    w.events.push(event("e2", T0 + 1000, 2));
    w.add(1, 0, 1, "succeeded");
    w.add(1, 1, 0, "cancelled");
    assert_eq!(kinds(&w.check()), vec!["state"]);
}

#[test]
fn a_deleted_subscription_gets_nothing_published_after_the_delete() {
    let mut w = balanced();
    w.subs[0].deleted_ms = Some((T0 + 1000, T0 + 1010));
    w.subs[0].state = Some(SubState {
        status: "disabled".into(),
        disabled_reason: Some("deleted".into()),
        disabled_at: Some(T0 + 1005),
    });
    w.events.push(event("e2", T0 + 2000, 1));
    w.add(1, 1, 2, "pending");
    assert_eq!(w.check().problems, vec![]);
    w.events[1].deliveries = 2;
    w.add(1, 0, 0, "cancelled");
    assert_eq!(kinds(&w.check()), vec!["unexpected delivery"]);
}
