//! Tests of the delivery engine: publish and fan-out, ticks and claims, outcomes, retries,
//! health and disabling, each against the store's exact operations where it matters.

use crate::fanout::*;
use crate::health::*;
use crate::history::*;
use crate::queue::*;
use crate::replay::*;
use crate::retry::*;
use crate::sender::*;
use crate::tick::*;
use edgehook_model::config::Settings;
use edgehook_model::env::Env;
use edgehook_model::env::SeededEntropy;
use edgehook_model::ids::IdKind;
use edgehook_records::delivery::{Attempt, Delivery, EVENT_V1, EventRecord, Status, delivery_id};
use edgehook_storage::applog::Entry;
use edgehook_storage::directory;
use edgehook_storage::keys::{self};
use edgehook_storage::kv::MemoryKv;
use edgehook_storage::kv::{Kv, KvError, Update, update};
use edgehook_subscriptions::Secret;
use edgehook_subscriptions::{Status as SubStatus, Subscription};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

/// An `Env` over a test store at `now`.
fn env_at<'a, K: Kv>(
    kv: &'a K,
    settings: &'a Settings,
    entropy: &'a SeededEntropy,
    now: u64,
) -> Env<'a, K> {
    Env {
        now_ms: now,
        kv,
        settings,
        entropy,
    }
}

/// A store that runs `hook` once, just before the first compare-and-swap on a key with
/// `prefix` (a way to put another instance's tick inside a publish), and records every
/// key read (get, get_many, compare-and-swap), every key plainly written (set) and every
/// key a compare-and-swap began on.
struct HookKv<'a> {
    inner: &'a MemoryKv,
    prefix: &'static str,
    hook: RefCell<Option<Box<dyn FnOnce() + 'a>>>,
    reads: RefCell<Vec<String>>,
    sets: RefCell<Vec<String>>,
    cas: RefCell<Vec<String>>,
}

impl<'a> HookKv<'a> {
    fn new(inner: &'a MemoryKv, prefix: &'static str, hook: impl FnOnce() + 'a) -> Self {
        HookKv {
            inner,
            prefix,
            hook: RefCell::new(Some(Box::new(hook))),
            reads: RefCell::default(),
            sets: RefCell::default(),
            cas: RefCell::default(),
        }
    }
}

impl Kv for HookKv<'_> {
    type Cas = <MemoryKv as Kv>::Cas;
    fn get(
        &self,
        key: &(impl edgehook_storage::keys::AsKey + ?Sized),
    ) -> Result<Option<Vec<u8>>, KvError> {
        let key = key.key_str();
        self.reads.borrow_mut().push(key.to_owned());
        self.inner.get(key)
    }
    fn set(
        &self,
        key: &(impl edgehook_storage::keys::AsKey + ?Sized),
        value: &[u8],
    ) -> Result<(), KvError> {
        let key = key.key_str();
        self.sets.borrow_mut().push(key.to_owned());
        self.inner.set(key, value)
    }
    fn delete(&self, key: &(impl edgehook_storage::keys::AsKey + ?Sized)) -> Result<(), KvError> {
        let key = key.key_str();
        self.inner.delete(key)
    }
    fn get_many(
        &self,
        keys: &[impl edgehook_storage::keys::AsKey],
    ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        self.reads
            .borrow_mut()
            .extend(keys.iter().map(|k| k.key_str().to_owned()));
        self.inner.get_many(keys)
    }
    fn increment(
        &self,
        key: &(impl edgehook_storage::keys::AsKey + ?Sized),
        delta: i64,
    ) -> Result<i64, KvError> {
        let key = key.key_str();
        self.inner.increment(key, delta)
    }
    fn cas_begin(
        &self,
        key: &(impl edgehook_storage::keys::AsKey + ?Sized),
    ) -> Result<(Self::Cas, Option<Vec<u8>>), KvError> {
        let key = key.key_str();
        self.reads.borrow_mut().push(key.to_owned());
        self.cas.borrow_mut().push(key.to_owned());
        if key.starts_with(self.prefix) {
            let hook = self.hook.borrow_mut().take();
            if let Some(hook) = hook {
                hook();
            }
        }
        self.inner.cas_begin(key)
    }
    fn cas_swap(&self, cas: Self::Cas, value: &[u8]) -> Result<bool, KvError> {
        self.inner.cas_swap(cas, value)
    }
}

/// Answers 200 to everything and counts.
struct Counting(Cell<usize>);

impl Sender for Counting {
    fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
        self.0.set(self.0.get() + requests.len());
        requests
            .iter()
            .map(|_| SendResult {
                outcome: Ok(200),
                latency_ms: 0,
            })
            .collect()
    }
}

fn active_subscription(kv: &MemoryKv) -> String {
    let sub = Subscription {
        id: "sub_000000000000000000000001".into(),
        client_id: "acme".into(),
        url: "https://hooks.example.com/x".into(),
        event_types: vec!["load.created".into()],
        signing_secret: Secret("whsec_test".into()),
        status: SubStatus::Active,
        disabled_reason: None,
        created_at: 0,
        disabled_at: None,
        seq: 1,
        consecutive_failures: 0,
        fanout_seqs: vec![1],
    };
    kv.set(&keys::subscription(&sub.id), &sub.encode())
        .expect("set");
    edgehook_storage::applog::AppendLog::new(keys::fanout("load.created"))
        .append(kv, std::slice::from_ref(&sub.id))
        .expect("append");
    sub.id
}

fn pending_delivery(kv: &MemoryKv, sub: &str, event: &str, due: u64) -> String {
    let id = delivery_id(event, sub);
    let d = Delivery {
        id: id.clone(),
        event_id: event.into(),
        event_type: "load.created".into(),
        subscription_id: sub.into(),
        created_at: due,
        status: Status::Pending,
        attempts: Vec::new(),
        run: 0,
        next_attempt_at: Some(due),
        lease_until: None,
        lease_owner: None,
        finished_at: None,
    };
    kv.set(&keys::delivery(&id), &d.encode()).expect("set");
    kv.set(&keys::event_body(event), br#"{"id":"L"}"#)
        .expect("set");
    id
}

#[test]
fn attempt_1_of_a_new_event_reads_neither_event_nor_subscription_nor_body_again() {
    let kv = MemoryKv::new();
    let reads = HookKv::new(&kv, "", || {});
    let settings = Settings::default();
    let entropy = SeededEntropy::new(6);
    let now = 1_767_225_600_000;
    let env = Env {
        now_ms: now,
        kv: &reads,
        settings: &settings,
        entropy: &entropy,
    };
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
    assert!(
        read.contains(&dlv.to_string()),
        "the record is still claimed against the store"
    );
    for key in [
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

/// The event record stored under `key`, parsed.
fn stored_event(kv: &MemoryKv, key: &str) -> EventRecord {
    let bytes = kv.get(key).expect("store").expect("a record");
    assert_eq!(
        bytes.first(),
        Some(&EVENT_V1),
        "event records are written binary"
    );
    EventRecord::decode(&bytes).expect("a whole record")
}

/// The delivery record stored under `key`, decoded.
fn stored_delivery(kv: &MemoryKv, key: &str) -> Delivery {
    let bytes = kv.get(key).expect("store").expect("a record");
    Delivery::decode(&bytes).expect("a whole record")
}

#[test]
fn a_keyless_publish_reads_no_delivery_or_event_record_and_writes_its_event_once() {
    let kv = MemoryKv::new();
    let ops = HookKv::new(&kv, "", || {});
    let settings = Settings::default();
    let entropy = SeededEntropy::new(8);
    let env = Env {
        now_ms: 1_767_225_600_000,
        kv: &ops,
        settings: &settings,
        entropy: &entropy,
    };
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
fn a_keyed_event_id_is_derived_from_its_key_alone() {
    // A retry with the same key, by this version or the next, must find the same event:
    // the id is the first 96 bits of SHA-256("ingest/<key>") (Python's hashlib).
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let (a, b) = (SeededEntropy::new(1), SeededEntropy::new(2));
    let first = publish(
        &env_at(&kv, &settings, &a, 1_000),
        "load.created",
        br#"{"id":"L"}"#,
        Some("k-1"),
    );
    let again = publish(
        &env_at(&kv, &settings, &b, 2_000),
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
        let env = env_at(&kv, &settings, &entropy, now);
        let (receipt, prepared) =
            publish_prepared(&env, "load.created", br#"{"id":"L"}"#, Some("k1"))
                .expect("second publish");
        assert!(receipt.replayed, "the first one's event record is there");
        assert!(prepared.is_none(), "a resumed event runs from the store");
        let report = run_now(&env, &sent, &RunNow::Event(receipt.event_id));
        assert_eq!(report.succeeded, 1);
    };
    let hooked = HookKv::new(&kv, "dlv:", other);
    let env = Env {
        now_ms: now,
        kv: &hooked,
        settings: &settings,
        entropy: &entropy,
    };
    let (receipt, prepared) = publish_prepared(&env, "load.created", br#"{"id":"L"}"#, Some("k1"))
        .expect("first publish");
    let report = run_now(
        &env_at(&kv, &settings, &entropy, now),
        &sent,
        &RunNow::Prepared(Box::new(prepared.expect("prepared"))),
    );
    assert_eq!((report.attempted, sent.0.get()), (0, 1), "sent once");
    let dlv = keys::delivery(&delivery_id(&receipt.event_id, &sub));
    let d = stored_delivery(&kv, &dlv);
    assert_eq!(d.status, Status::Succeeded, "not reset to pending");
}

#[test]
fn a_prepared_delivery_changed_in_the_store_is_not_sent_from_memory() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(7);
    let env = env_at(&kv, &settings, &entropy, 1_767_225_600_000);
    let sub = active_subscription(&kv);
    let (_, prepared) =
        publish_prepared(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
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
        &env_at(&first, &settings, &entropy, now),
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
        &env_at(&second, &settings, &entropy, now + 10),
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
/// listeners' records, and writes neither when its second and day are listed: 15 store
/// operations for one listener (the fan-out list's counter and page; the records and
/// directories; the body; three appends of three; the delivery record; the event
/// record), not 17.
#[test]
fn a_publish_reads_the_directories_with_its_listeners_records() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(5);
    let env = env_at(&kv, &settings, &entropy, 1_767_225_600_000);
    active_subscription(&kv);
    publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("lists second and day");
    let before = kv.ops();
    let receipt = publish(&env, "load.created", br#"{"id":"L2"}"#, None).expect("publish");
    assert_eq!(receipt.deliveries, 1);
    assert_eq!(kv.ops() - before, 15);
}

/// An event nobody listens to queues nothing: its second is not listed in the due
/// directory (a tick would only visit an empty queue there).
#[test]
fn an_event_nobody_listens_to_lists_no_due_second() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(5);
    let env = env_at(&kv, &settings, &entropy, 1_767_225_600_000);
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
    let env = env_at(&kv, &settings, &entropy, now);
    active_subscription(&kv);
    let cost = |queued: usize| {
        // `queued` other deliveries are due in the same second (another instance's).
        let second = now / 1000;
        let others: Vec<String> = (0..queued)
            .map(|i| pending_delivery(&kv, "sub_other", &format!("evt_o{queued}_{i}"), now))
            .collect();
        enqueue(&kv, &BTreeMap::from([(second, others)]), None).expect("enqueue");
        let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
        let sent = Counting(Cell::new(0));
        let before = kv.ops();
        let report = run_now(&env, &sent, &RunNow::Event(receipt.event_id.clone()));
        let ops = kv.ops() - before;
        assert_eq!((report.attempted, report.succeeded), (1, 1));
        assert_eq!(sent.0.get(), 1, "only its own delivery");
        let d = load(
            &env,
            &delivery_id(&receipt.event_id, "sub_000000000000000000000001"),
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
fn the_watermark_never_passes_a_queue_number_still_being_written() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(4);
    let now = 1_767_225_600_000;
    let env = env_at(&kv, &settings, &entropy, now);
    let sub = active_subscription(&kv);
    let second = now / 1000;
    // Appender A reserved number 1 but has not written it yet; appender B wrote number 2.
    kv.increment(&due_log(second).counter_key(), 1)
        .expect("reserve");
    let b = pending_delivery(&kv, &sub, "evt_b", now);
    enqueue(&kv, &BTreeMap::from([(second, vec![b])]), None).expect("enqueue");
    let sent = Counting(Cell::new(0));
    assert_eq!(tick(&env, &sent).attempted, 1, "B is sent");
    // A finishes writing number 1; the next tick must still look at it.
    let a = pending_delivery(&kv, &sub, "evt_a", now);
    update(&kv, &due_log(second).page_key(0), |cur| {
        let mut entries = cur
            .map(|b| edgehook_storage::applog::decode_page(b).expect("page"))
            .unwrap_or_default();
        entries.push(Entry {
            seq: 1,
            item: a.clone().into_bytes(),
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
    let env = |kv| Env {
        now_ms: now,
        kv,
        settings: &settings,
        entropy: &entropy,
    };
    active_subscription(&kv);
    let sent = Counting(Cell::new(0));
    // Another instance ticks after the queue entry is written, before the record is
    // (at the subscription's history entry, which comes between them).
    let hooked = HookKv::new(&kv, "subdlv:", || {
        let report = tick(&env(&kv), &sent);
        assert_eq!(report.attempted, 0, "no record yet: nothing to send");
        assert!(
            report.next_due_ms.is_some_and(|t| t <= now + 1000),
            "it looks again soon"
        );
    });
    let hooked_env = Env {
        now_ms: now,
        kv: &hooked,
        settings: &settings,
        entropy: &entropy,
    };
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
    seen: RefCell<Vec<(String, u64, Option<u64>)>>,
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
                let id = header("x-service-delivery-id");
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
                    outcome: Err("timeout".into()),
                    latency_ms: self.latency_ms,
                }
            })
            .collect()
    }
}

fn queued(kv: &MemoryKv, sub: &str, events: &[&str], now: u64) -> Vec<String> {
    let ids: Vec<String> = events
        .iter()
        .map(|e| pending_delivery(kv, sub, e, now))
        .collect();
    enqueue(kv, &BTreeMap::from([(now / 1000, ids.clone())]), None).expect("enqueue");
    ids
}

#[test]
fn a_long_tick_signs_leases_and_schedules_each_batch_when_it_is_sent() {
    // Found by the soak (edgehook soak): a tick read the clock once, so a batch sent 20 s
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
    let env = env_at(&kv, &settings, &entropy, now);
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

/// The delivery ids of a batch of requests, in order.
fn delivery_ids(requests: &[Outgoing]) -> Vec<String> {
    requests
        .iter()
        .filter_map(|r| {
            r.headers
                .iter()
                .find(|(n, _)| n == "x-service-delivery-id")
                .map(|(_, v)| v.clone())
        })
        .collect()
}

/// Answers 500 to the deliveries in `failing`, 200 to the rest; records each batch's ids.
struct ByDelivery {
    failing: Vec<String>,
    batches: RefCell<Vec<Vec<String>>>,
}

impl Sender for ByDelivery {
    fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
        let ids = delivery_ids(requests);
        let results = ids
            .iter()
            .map(|id| SendResult {
                outcome: Ok(if self.failing.contains(id) { 500 } else { 200 }),
                latency_ms: 1,
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
        let env = env_at(&kv, &settings, &entropy, now);
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
            });
        }
        kv.set(&keys::delivery(&ids[1]), &last.encode())
            .expect("set");
        let sender = ByDelivery {
            failing: failing.iter().map(|e| delivery_id(e, &sub)).collect(),
            batches: RefCell::default(),
        };
        assert_eq!(tick(&env, &sender).attempted, 2);
        assert_eq!(
            *sender.batches.borrow(),
            vec![ids.clone()],
            "both in one batch, in flight together"
        );
        let status = |id: &str| load(&env, id).expect("load").expect("record").status;
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
    let env = |now_ms| Env {
        now_ms,
        kv: &kv,
        settings: &settings,
        entropy: &entropy,
    };
    let sub = active_subscription(&kv);
    queued(&kv, &sub, &["evt_a", "evt_b", "evt_c", "evt_d"], now);
    let slow = Slow {
        kv: &kv,
        latency_ms: 15_000,
        seen: RefCell::default(),
    };
    let report = tick(&env(now), &slow);
    assert_eq!(report.attempted, 2, "15 s, then 30 s: over the 20 s budget");
    assert_eq!(report.next_due_ms, Some(now), "the rest is due now");
    assert_eq!(tick(&env(now + 30_000), &slow).attempted, 2);
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
    let hooked = HookKv::new(&kv, "dlv:", || {
        let bytes = kv.get(&keys::delivery(&id)).expect("get").expect("record");
        let mut d = Delivery::decode(&bytes).expect("record");
        d.lease_until = Some(now + 15_000);
        d.lease_owner = Some("another instance".into());
        kv.set(&keys::delivery(&id), &d.encode()).expect("set");
    });
    let sent = Counting(Cell::new(0));
    let report = tick(
        &Env {
            now_ms: now,
            kv: &hooked,
            settings: &settings,
            entropy: &entropy,
        },
        &sent,
    );
    assert_eq!(report.attempted, 0, "the other instance holds it");
    assert!(
        report.next_due_ms.is_some_and(|t| t <= now + 15_000),
        "it looks again when the lease ends: {:?}",
        report.next_due_ms
    );
    let later = Env {
        now_ms: now + 16_000,
        kv: &kv,
        settings: &settings,
        entropy: &entropy,
    };
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
        &env_at(&kv, &settings, &entropy, t),
        "load.created",
        br#"{"id":"L"}"#,
        None,
    )
    .expect("publish");
    assert_eq!(receipt.deliveries, 1);
    let sent = Counting(Cell::new(0));
    let early = tick(&env_at(&kv, &settings, &entropy, t - 200), &sent);
    assert_eq!(early.attempted, 0, "not due at the tick's clock");
    assert_eq!(early.next_due_ms, Some(t), "due at its publish time");
    let later = tick(&env_at(&kv, &settings, &entropy, t + 5_000), &sent);
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
        tick(&env_at(&kv, &settings, &entropy, now), &sent).succeeded,
        1
    );
    let at = now + 120_000;
    let hooked = HookKv::new(&kv, "dlv:", || {
        let report = tick(&env_at(&kv, &settings, &entropy, at), &sent);
        assert_eq!(report.attempted, 0, "the record is not pending yet");
    });
    let replayed = replay(&env_at(&hooked, &settings, &entropy, at), &id).expect("replay");
    assert_eq!(replayed.status, Status::Pending);
    assert!(
        hooked.hook.borrow().is_none(),
        "the tick ran inside the replay"
    );
    let later = tick(&env_at(&kv, &settings, &entropy, at + 1_000), &sent);
    assert_eq!(later.attempted, 1, "the replay's attempt is sent");
    assert_eq!(sent.0.get(), 2);
    let env = env_at(&kv, &settings, &entropy, at + 2_000);
    assert_eq!(
        load(&env, &id).expect("load").expect("record").status,
        Status::Succeeded
    );
    replay(&env, &id).expect("finished, so it can be replayed again");
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
    // Six operations (the event looked for, the fan-out list's counter and page, the
    // listeners' records and directories, the body, the event record), then the store
    // fails.
    kv.fail_at(Some(7));
    let first = publish(
        &env_at(&kv, &settings, &entropy, now),
        "load.created",
        load,
        Some("k1"),
    );
    kv.fail_at(None);
    assert!(first.is_err(), "the first try fails");
    let events: Vec<String> = kv
        .dump()
        .keys()
        .filter(|k| k.starts_with("evt:") && !k.ends_with(":body"))
        .cloned()
        .collect();
    assert_eq!(events.len(), 1, "its event is recorded: {events:?}");
    let event_id = stored_event(&kv, &events[0]).id;
    assert!(
        kv.dump().keys().all(|k| !k.starts_with("dlv:")),
        "no delivery made"
    );
    let at = now + 120_000;
    let sent = Counting(Cell::new(0));
    let hooked = HookKv::new(&kv, "subdlv:", || {
        let report = tick(&env_at(&kv, &settings, &entropy, at), &sent);
        assert_eq!(report.attempted, 0, "no record yet");
    });
    let retry = publish(
        &env_at(&hooked, &settings, &entropy, at),
        "load.created",
        load,
        Some("k1"),
    )
    .expect("the retry resumes");
    assert!(retry.replayed && retry.event_id == event_id);
    assert!(hooked.hook.borrow().is_none(), "the tick ran inside");
    let later = tick(&env_at(&kv, &settings, &entropy, at + 1_000), &sent);
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
    let report = tick(&env_at(&kv, &settings, &entropy, now), &sender);
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
    let later = tick(&env_at(&kv, &settings, &entropy, now + 32_000), &sent);
    assert_eq!(later.attempted, 1, "sent once the new lease is over");
    assert_eq!(sent.0.get(), 1);
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
        tick(&env_at(&kv, &settings, &entropy, at), &sent);
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
fn a_retry_cancelled_before_its_second_holds_nothing_when_that_second_comes() {
    // Attempt 1 failed and attempt 2 is queued a minute ahead; then the subscription is
    // disabled, which cancels the delivery. When the retry's second comes, its entry is
    // done with: no replay can follow a cancel, so the tick does not look again.
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(16);
    let now = 1_767_225_600_000;
    let sub = active_subscription(&kv);
    let env = env_at(&kv, &settings, &entropy, now);
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
        &env_at(&kv, &settings, &entropy, now + 1_000),
        &sub,
        "operator",
    )
    .expect("disable");
    let d = load(&env, &id).expect("load").expect("record");
    assert_eq!(d.status, Status::Cancelled);
    let sent = Counting(Cell::new(0));
    let report = tick(&env_at(&kv, &settings, &entropy, retry_at + 500), &sent);
    assert_eq!(report.attempted, 0);
    assert_eq!(report.next_due_ms, None, "nothing left to look at");
}

/// Answers 200 to everything and notes the delivery ids of each batch.
#[derive(Default)]
struct Batches(RefCell<Vec<Vec<String>>>);

impl Sender for Batches {
    fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
        self.0.borrow_mut().push(delivery_ids(requests));
        requests
            .iter()
            .map(|_| SendResult {
                outcome: Ok(200),
                latency_ms: 5,
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
    let env = env_at(&kv, &settings, &entropy, now);
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
    let env = env_at(&kv, &settings, &entropy, now);
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

/// Answers every request with one outcome: a status code, or a network error.
struct Answer(Result<u16, &'static str>);

impl Sender for Answer {
    fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
        requests
            .iter()
            .map(|_| SendResult {
                outcome: self.0.map_err(str::to_owned),
                latency_ms: 3,
            })
            .collect()
    }
}

fn stored_subscription(kv: &MemoryKv, id: &str) -> Subscription {
    let bytes = kv
        .get(&keys::subscription(id))
        .expect("get")
        .expect("record");
    Subscription::decode(&bytes).expect("decode")
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
        Err("connection refused"),
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
            let report = tick(&env_at(&kv, &settings, &entropy, now), &sender);
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
            assert_eq!(last.error.as_deref(), outcome.err(), "{outcome:?}");
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
                    let early = tick(&env_at(&kv, &settings, &entropy, due - 1000), &sender);
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
        let later = tick(&env_at(&kv, &settings, &entropy, now + 3_600_000), &sender);
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
        let first = tick(&env_at(&kv, &settings, &entropy, now), &Answer(Ok(503)));
        assert_eq!(first.failed, 1);
        let due = stored_delivery(&kv, &keys::delivery(&id))
            .next_attempt_at
            .expect("a retry");
        let report = tick(&env_at(&kv, &settings, &entropy, due), &Answer(Ok(code)));
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
        let report = tick(&env_at(&kv, &settings, &entropy, now), &Answer(Ok(code)));
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
    let env = env_at(&kv, &settings, &entropy, now);
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
    record_streak(&env, "sub_000000000000000000000009", false).expect("no such record");
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
    let env = env_at(&kv, &settings, &entropy, now);
    let sub = active_subscription(&kv);
    let ids: Vec<String> = [
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
        let mut d = stored_delivery(&kv, &keys::delivery(id));
        f(&mut d);
        kv.set(&keys::delivery(id), &d.encode()).expect("set");
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
    let disabled = disable(&env, &sub, "operator").expect("disable");
    assert_eq!(
        disabled.map(|s| (s.status, s.disabled_reason)),
        Some((SubStatus::Disabled, Some("operator".to_owned())))
    );
    let status = |id: &str| stored_delivery(&kv, &keys::delivery(id));
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
    let later = env_at(&kv, &settings, &entropy, now + 1);
    assert_eq!(cancel_pending(&later, &sub).expect("cancel"), 1);
    assert_eq!(status(&ids[2]).status, Status::Cancelled);
    assert_eq!(cancel_pending(&later, &sub).expect("cancel"), 0);
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
        let env = env_at(&hooked, &settings, &entropy, now);
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
    let a = delivery_id("evt_1", "sub_1");
    assert_eq!(a, delivery_id("evt_1", "sub_1"));
    assert_ne!(a, delivery_id("evt_1", "sub_2"));
    assert_ne!(a, delivery_id("evt_2", "sub_1"));
    assert!(IdKind::Delivery.matches(&a));
    // The derivation itself is fixed (records written by earlier versions are found
    // again by it): the first 96 bits of SHA-256("<event>/<subscription>"), computed
    // with Python's hashlib.
    assert_eq!(a, "dlv_f8aaea693ec0b48f06dae934");
}
