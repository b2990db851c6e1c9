//! Tests of the delivery engine, each against the store's exact operations where it
//! matters: publish and fan-out ([`publishing`]), ticks, claims and the due queue ([`ticking`]),
//! outcomes, retries, health and disabling ([`outcomes`]). This module holds their helpers.

use crate::fanout::*;
use crate::health::*;
use crate::history::*;
use crate::queue::*;
use crate::replay::*;
use crate::retry::*;
use crate::sender::*;
use crate::tick::*;
use edgehook_model::ids::{ClientId, DeliveryId, EventId, ReplayJobId, SubscriptionId};
use edgehook_records::delivery::{Delivery, EVENT_V1, EventRecord, Status, delivery_id};
use edgehook_storage::keys::{self};
use edgehook_storage::kv::MemoryKv;
use edgehook_storage::kv::{Kv, KvError};
use edgehook_subscriptions::Secret;
use edgehook_subscriptions::{Status as SubStatus, Subscription};
use std::cell::{Cell, RefCell};

mod outcomes;
mod publishing;
mod replays;
mod retention;
mod ticking;

/// A store that runs `hook` once, just before the first compare-and-swap on a key with
/// `prefix` (a way to put another instance's tick inside a publish), and records every
/// key read (get, get_many, compare-and-swap), every key plainly written (set, set_many),
/// every key a compare-and-swap began on, and each batch write: how many compare-and-swaps
/// had begun before it, and its keys. With `fail_batches`, a batch write fails and writes
/// nothing.
pub(super) struct HookKv<'a> {
    inner: &'a MemoryKv,
    prefix: &'static str,
    hook: RefCell<Option<Box<dyn FnOnce() + 'a>>>,
    reads: RefCell<Vec<String>>,
    sets: RefCell<Vec<String>>,
    cas: RefCell<Vec<String>>,
    batches: RefCell<Vec<(usize, Vec<String>)>>,
    fail_batches: Cell<bool>,
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
            batches: RefCell::default(),
            fail_batches: Cell::new(false),
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
    fn set_many(&self, entries: Vec<(keys::Key, Vec<u8>)>) -> Result<(), KvError> {
        let names: Vec<String> = entries.iter().map(|(k, _)| k.to_string()).collect();
        self.batches
            .borrow_mut()
            .push((self.cas.borrow().len(), names.clone()));
        if self.fail_batches.get() {
            return Err(KvError::Unavailable("batch write refused".into()));
        }
        self.sets.borrow_mut().extend(names);
        self.inner.set_many(entries)
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
pub(super) struct Counting(pub(super) Cell<usize>);

impl Sender for Counting {
    fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
        self.0.set(self.0.get() + requests.len());
        requests
            .iter()
            .map(|_| SendResult {
                outcome: Ok(200),
                latency_ms: 0,
                retry_after: None,
            })
            .collect()
    }
}

pub(crate) fn active_subscription(kv: &MemoryKv) -> SubscriptionId {
    active_subscription_n(kv, 1)
}

/// The `n`th active subscription to `load.created` (from 1; each `n` once per store).
pub(crate) fn active_subscription_n(kv: &MemoryKv, n: u64) -> SubscriptionId {
    let sub = Subscription {
        id: format!("sub_{n:024}").into(),
        client_id: "acme".into(),
        url: "https://hooks.example.com/x".into(),
        event_types: vec!["load.created".into()],
        signing_secret: Secret::Plain("whsec_test".into()),
        status: SubStatus::Active,
        disabled_reason: None,
        created_at: 0,
        disabled_at: None,
        seq: n,
        consecutive_failures: 0,
        fanout_seqs: vec![n],
        disabled_entries: (None, None),
        options: Default::default(),
    };
    kv.set(&keys::subscription(&sub.id), &sub.encode())
        .expect("set");
    edgehook_subscriptions::index::fanout_index("load.created")
        .append(kv, std::slice::from_ref(&sub.id))
        .expect("append");
    sub.id
}

pub(super) fn pending_delivery(
    kv: &MemoryKv,
    sub: &SubscriptionId,
    event: &str,
    due: u64,
) -> DeliveryId {
    let event = EventId::from(event);
    let id = delivery_id(&event, sub);
    let d = Delivery {
        id: id.clone(),
        event_id: event.clone(),
        event_type: "load.created".into(),
        subscription_id: sub.clone(),
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
    kv.set(&keys::event_body(&event), br#"{"id":"L"}"#)
        .expect("set");
    id
}

/// The event record stored under `key`, parsed.
pub(super) fn stored_event(kv: &MemoryKv, key: &str) -> EventRecord {
    let bytes = kv.get(key).expect("store").expect("a record");
    assert_eq!(
        bytes.first(),
        Some(&EVENT_V1),
        "event records are written binary"
    );
    EventRecord::decode(&bytes).expect("a whole record")
}

/// The delivery record stored under `key`, decoded.
pub(super) fn stored_delivery(kv: &MemoryKv, key: &str) -> Delivery {
    let bytes = kv.get(key).expect("store").expect("a record");
    Delivery::decode(&bytes).expect("a whole record")
}

pub(super) fn queued(
    kv: &MemoryKv,
    sub: &SubscriptionId,
    events: &[&str],
    now: u64,
) -> Vec<DeliveryId> {
    let ids: Vec<DeliveryId> = events
        .iter()
        .map(|e| pending_delivery(kv, sub, e, now))
        .collect();
    enqueue(kv, &[(now / 1000, ids.clone())], None).expect("enqueue");
    ids
}

/// The delivery ids of a batch of requests, in order.
pub(super) fn delivery_ids(requests: &[Outgoing]) -> Vec<DeliveryId> {
    requests
        .iter()
        .filter_map(|r| {
            r.headers
                .iter()
                .find(|(n, _)| n == "x-service-delivery-id")
                .map(|(_, v)| DeliveryId::from(v.as_str()))
        })
        .collect()
}

pub(super) fn stored_subscription(kv: &MemoryKv, id: &SubscriptionId) -> Subscription {
    let bytes = kv
        .get(&keys::subscription(id))
        .expect("get")
        .expect("record");
    Subscription::decode(&bytes).expect("decode")
}

/// A [`Log`](edgehook_model::env::Log) that keeps the metrics events only.
#[derive(Default)]
pub(super) struct Events(pub(super) RefCell<Vec<String>>);

impl edgehook_model::env::Log for Events {
    fn line(&self, _: &str) {}

    fn event(&self, line: &str) {
        self.0.borrow_mut().push(line.to_owned());
    }
}
