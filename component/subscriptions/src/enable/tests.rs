//! Tests of enable: back in both indexes once, the streak reset, idempotent, the cap, a
//! deleted one never, and an enable cut short anywhere.

use crate::cap::parse_live;
use crate::*;
use edgehook_model::config::Settings;
use edgehook_model::env::SeededEntropy;
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::keys;
use edgehook_storage::kv::MemoryKv;

fn create_one(env: &Env<'_, MemoryKv>, n: usize) -> SubscriptionId {
    let new = NewSubscription {
        url: format!("https://h{n}.example.com/x"),
        event_types: vec!["load.created".into(), "load.updated".into()],
        options: Default::default(),
    };
    let (sub, pending) = create_pending(env, new, &ClientId::from("acme")).expect("create");
    activate(env, &sub.id, Some((&sub, &pending))).expect("activate");
    sub.id
}

fn list_ids(env: &Env<'_, MemoryKv>) -> Vec<SubscriptionId> {
    let (found, more) = list_page(env, &ClientId::from("acme"), 100, 0).expect("list");
    assert!(!more);
    found
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_slice(l.view()).expect("JSON");
            SubscriptionId::from(v["id"].as_str().expect("id"))
        })
        .collect()
}

fn record(env: &Env<'_, MemoryKv>, id: &str) -> Subscription {
    load(env, &SubscriptionId::from(id))
        .expect("load")
        .expect("record")
}

fn live(kv: &MemoryKv) -> Option<u64> {
    parse_live(
        kv.get(&keys::client_live(&ClientId::from("acme")))
            .expect("get")
            .as_deref(),
    )
}

/// What everyone reads agrees with the record: listed and in each fan-out list exactly
/// once when active, nowhere when disabled.
fn assert_consistent(env: &Env<'_, MemoryKv>, id: &str, context: &str) {
    let active = record(env, id).status == Status::Active;
    let count = |ids: Vec<SubscriptionId>| ids.iter().filter(|i| *i == id).count();
    assert_eq!(
        count(list_ids(env)),
        usize::from(active),
        "{context}: listed"
    );
    for client in [Some("acme"), None] {
        let client = client.map(ClientId::from);
        let (found, _) = disabled_page(env, client.as_ref(), 100, 0).expect("disabled");
        let n = found.iter().filter(|(_, s)| s.id == id).count();
        assert_eq!(
            n,
            usize::from(!active),
            "{context}: in the disabled list {client:?}"
        );
    }
    for t in ["load.created", "load.updated"] {
        let listeners = fanout_ids(env, t).expect("fan-out");
        let n = count(listeners.clone());
        assert!(
            n <= 1,
            "{context}: {t} names it once at most: {listeners:?}"
        );
        assert!(!active || n == 1, "{context}: {t} names an active one");
    }
}

/// Enable puts a disabled subscription back in the list and the fan-out,
/// resets its failure streak and takes a slot; enabling an active one changes nothing.
#[test]
fn an_enabled_subscription_is_listed_and_fanned_out_again_with_its_streak_reset() {
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(1));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let a = create_one(&env, 0);
    let b = create_one(&env, 1);
    let failing = Subscription {
        consecutive_failures: 4,
        ..record(&env, &a)
    };
    kv.set(&keys::subscription(&a), &failing.encode())
        .expect("set");
    disable(&env, &a, None, "repeated_failures")
        .expect("disable")
        .expect("was active");
    assert_eq!(list_ids(&env), vec![b.clone()]);
    assert_eq!(live(&kv), Some(1));
    let later = Env::new(5_000, &kv, &settings, &entropy);
    let Some(Enabled::Now(now)) =
        enable(&later, &a, Some(&ClientId::from("acme"))).expect("enable")
    else {
        panic!("enabled now");
    };
    assert_eq!(now, record(&env, &a), "the answer is the record");
    assert_eq!(now.status, Status::Active);
    assert_eq!(
        (
            now.consecutive_failures,
            now.disabled_reason.clone(),
            now.disabled_at
        ),
        (0, None, None)
    );
    assert_eq!(now.created_at, 1_000, "still created when it was created");
    assert_eq!(
        list_ids(&env),
        vec![b, a.clone()],
        "listed after those before it"
    );
    assert_eq!(live(&kv), Some(2), "a slot taken");
    assert_consistent(&env, &a, "enabled");
    let ops = kv.ops();
    assert_eq!(
        enable(&later, &a, Some(&ClientId::from("acme"))).expect("again"),
        Some(Enabled::Already(now.clone()))
    );
    assert_eq!(kv.ops() - ops, 1, "an active one: one read, no write");
    assert_eq!(live(&kv), Some(2));
    // Disabled and enabled again: still one entry each.
    disable(&env, &a, None, "operator")
        .expect("disable")
        .expect("active");
    enable(&later, &a, None).expect("enable").expect("found");
    assert_consistent(&env, &a, "twice");
}

/// Enable takes only the owner's, never a deleted one, never a pending one; the cap holds.
#[test]
fn enable_refuses_others_deleted_and_pending_subscriptions_and_keeps_the_cap() {
    let kv = MemoryKv::new();
    let settings = Settings {
        subscription_limit: 1,
        ..Settings::default()
    };
    let entropy = SeededEntropy::new(2);
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let a = create_one(&env, 0);
    disable(&env, &a, None, "gone")
        .expect("disable")
        .expect("active");
    assert_eq!(
        enable(&env, &a, Some(&ClientId::from("globex"))).expect("other"),
        None
    );
    assert_eq!(
        enable(&env, &SubscriptionId::from("sub_nope"), None).expect("not an id"),
        None
    );
    let b = create_one(&env, 1);
    let full = enable(&env, &a, Some(&ClientId::from("acme"))).expect_err("the cap");
    assert_eq!(
        (full.status, full.code),
        (422, "subscription_limit_reached")
    );
    assert_eq!(record(&env, &a).status, Status::Disabled);
    assert_consistent(&env, &a, "refused at the cap");
    disable(&env, &b, Some(&ClientId::from("acme")), DELETED)
        .expect("delete")
        .expect("active");
    let deleted = record(&env, &b);
    assert_eq!(
        enable(&env, &b, Some(&ClientId::from("acme"))).expect("deleted"),
        Some(Enabled::Deleted(deleted))
    );
    assert_eq!(record(&env, &b).status, Status::Disabled);
    let (pending, _) = create_pending(
        &env,
        NewSubscription {
            url: "https://p.example.com/".into(),
            event_types: vec!["load.created".into()],
            options: Default::default(),
        },
        &ClientId::from("globex"),
    )
    .expect("pending");
    assert_eq!(enable(&env, &pending.id, None).expect("pending"), None);
}

/// Crash safety: an enable cut short at any store operation leaves the record
/// either disabled or active, and every reader agrees with it (list, fan-out, each id
/// once); retried, it ends active with one entry in each index and one slot taken.
#[test]
fn an_enable_cut_short_anywhere_leaves_nothing_half_made() {
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(3));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let mut cut_short = 0;
    for n in 1.. {
        let a = create_one(&env, n);
        disable(&env, &a, None, "gone")
            .expect("disable")
            .expect("active");
        let before = live(&kv);
        kv.fail_at(Some(n as u64));
        let done = enable(&env, &a, Some(&ClientId::from("acme")));
        kv.fail_at(None);
        assert_consistent(&env, &a, &format!("failing at op {n}"));
        if done.is_err() {
            cut_short += 1;
            assert_eq!(record(&env, &a).status, Status::Disabled, "op {n}");
            assert!(live(&kv) >= before, "op {n}: the count errs high only");
            assert!(matches!(
                enable(&env, &a, Some(&ClientId::from("acme"))).expect("retried"),
                Some(Enabled::Now(_))
            ));
            assert_consistent(&env, &a, &format!("retried after op {n}"));
        } else {
            break;
        }
        disable(&env, &a, None, "gone")
            .expect("disable")
            .expect("active");
    }
    assert!(cut_short > 5, "cut short at each step: {cut_short}");
}

/// A store that, at the first compare-and-swap of a subscription record, first lets
/// `before` run (a concurrent request), and then, if `fail_after`, applies the swap and
/// reports an error (Redis does that when the connection breaks after the script ran).
struct Racing<'a> {
    inner: &'a MemoryKv,
    before: std::cell::RefCell<Option<Box<dyn FnOnce() + 'a>>>,
    fail_after: bool,
    tripped: std::cell::Cell<bool>,
}

use edgehook_storage::keys::AsKey;
use edgehook_storage::kv::{Kv as _, KvError};

impl Kv for Racing<'_> {
    type Cas = <MemoryKv as Kv>::Cas;
    fn get(&self, key: &(impl AsKey + ?Sized)) -> Result<Option<Vec<u8>>, KvError> {
        self.inner.get(key.key_str())
    }
    fn set(&self, key: &(impl AsKey + ?Sized), value: &[u8]) -> Result<(), KvError> {
        self.inner.set(key.key_str(), value)
    }
    fn delete(&self, key: &(impl AsKey + ?Sized)) -> Result<(), KvError> {
        self.inner.delete(key.key_str())
    }
    fn get_many(&self, keys: &[impl AsKey]) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        self.inner.get_many(keys)
    }
    fn increment(&self, key: &(impl AsKey + ?Sized), delta: i64) -> Result<i64, KvError> {
        self.inner.increment(key.key_str(), delta)
    }
    fn cas_begin(
        &self,
        key: &(impl AsKey + ?Sized),
    ) -> Result<(Self::Cas, Option<Vec<u8>>), KvError> {
        self.inner.cas_begin(key.key_str())
    }
    fn cas_swap(&self, cas: Self::Cas, value: &[u8]) -> Result<bool, KvError> {
        let trip = cas.0.starts_with(keys::SUBSCRIPTION_PREFIX) && !self.tripped.replace(true);
        if trip && let Some(before) = self.before.borrow_mut().take() {
            before();
        }
        let swapped = self.inner.cas_swap(cas, value)?;
        if trip && self.fail_after {
            return Err(KvError::Unavailable("connection reset".into()));
        }
        Ok(swapped)
    }
}

/// Two enables at once (compare-and-swap on the record, as create and
/// disable): one commits, the other finds it active, takes its entries and its slot back,
/// and answers with the winner's record; and an enable whose commit applied though the
/// store reported an error is an enable, not a failure that leaves entries behind.
#[test]
fn concurrent_enables_make_one_and_a_commit_reported_failed_still_counts() {
    for fail_after in [false, true] {
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(4));
        let env = Env::new(1_000, &kv, &settings, &entropy);
        let a = create_one(&env, 0);
        create_one(&env, 1);
        disable(&env, &a, None, "gone")
            .expect("disable")
            .expect("active");
        let racing = Racing {
            inner: &kv,
            before: std::cell::RefCell::new(None),
            fail_after,
            tripped: std::cell::Cell::new(false),
        };
        if !fail_after {
            let other = a.clone();
            let (kv, settings, entropy) = (&kv, &settings, &entropy);
            *racing.before.borrow_mut() = Some(Box::new(move || {
                let env = Env::new(2_000, kv, settings, entropy);
                let won = enable(&env, &other, None).expect("the other enable");
                assert!(matches!(won, Some(Enabled::Now(_))));
            }));
        }
        let env_r = Env::new(3_000, &racing, &settings, &entropy);
        let got = enable(&env_r, &a, Some(&ClientId::from("acme")))
            .expect("enable")
            .expect("found");
        let stored = record(&env, &a);
        match (fail_after, got) {
            (false, Enabled::Already(s)) | (true, Enabled::Now(s)) => assert_eq!(s, stored),
            (_, other) => panic!("fail_after {fail_after}: {other:?}"),
        }
        assert_eq!(stored.status, Status::Active);
        assert_consistent(&env, &a, &format!("fail_after {fail_after}"));
        assert_eq!(live(&kv), Some(2), "fail_after {fail_after}: one slot each");
    }
}
