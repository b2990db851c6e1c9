//! Tests of subscription storage: the commit point of a create, the listing states a
//! create and a disable race through, paging past creates cut short, and the cap's count.

use crate::cap::{encode_live, parse_live};
use crate::create::make_live;
use crate::index::{Listing, client_index, encode_index_item, set_listing};
use crate::*;
use edgehook_model::config::Settings;
use edgehook_model::env::SeededEntropy;
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::keys;
use edgehook_storage::kv::MemoryKv;

/// Creates acme's subscription number `n` as the partner API does (with no idempotency key:
/// the pending record, then the commit).
fn create_one(env: &Env<'_, MemoryKv>, n: usize) -> Result<SubscriptionId, ApiError> {
    let new = NewSubscription {
        url: format!("https://h{n}.example.com/x"),
        event_types: vec!["load.created".into()],
        options: Default::default(),
    };
    let (sub, pending) = create_pending(env, new, &ClientId::from("acme"))?;
    activate(env, &sub.id, Some((&sub, &pending)))?;
    Ok(sub.id)
}

/// One page of acme's list: the ids, whether more follow, the cursor to resume after.
fn page(env: &Env<'_, MemoryKv>, limit: usize, after: u64) -> (Vec<String>, bool, u64) {
    let (found, has_more) = list_page(env, &ClientId::from("acme"), limit, after).expect("list");
    let ids = found
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_slice(l.view()).expect("view is JSON");
            v["id"].as_str().expect("id").to_owned()
        })
        .collect();
    (ids, has_more, found.last().map_or(after, |l| l.seq))
}

/// All of acme's pages with `limit`, resuming after each page's last entry.
fn walk(env: &Env<'_, MemoryKv>, limit: usize) -> Vec<Vec<String>> {
    let (mut pages, mut after) = (Vec::new(), 0);
    loop {
        let (ids, more, last) = page(env, limit, after);
        pages.push(ids);
        if !more {
            return pages;
        }
        after = last;
        assert!(pages.len() < 100, "the walk ends");
    }
}

fn list_ids(env: &Env<'_, MemoryKv>) -> Vec<String> {
    walk(env, 100).concat()
}

/// Stores `sub` as a disable would have left it.
fn store_disabled(kv: &MemoryKv, sub: &Subscription) {
    let disabled = Subscription {
        status: Status::Disabled,
        ..sub.clone()
    };
    kv.set(&keys::subscription(&disabled.id), &disabled.encode())
        .expect("flip");
}

#[test]
fn activate_trusts_what_the_create_wrote_only_while_the_store_holds_those_bytes() {
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(4));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let id = create_one(&env, 0).expect("create");
    let pending = Subscription {
        status: Status::Pending,
        ..load(&env, &id).expect("load").expect("record")
    };
    let bytes = pending.encode();
    // Unchanged since written: activated from what the create holds.
    kv.set(&keys::subscription(&id), &bytes).expect("set");
    activate(&env, &id, Some((&pending, &bytes))).expect("activate");
    let stored = load(&env, &id).expect("load").expect("record");
    assert_eq!(stored.status, Status::Active);
    // Disabled between the write and the flip: the stored record decides, not the
    // create's copy, and a disabled record is never made active again.
    kv.set(&keys::subscription(&id), &bytes).expect("set");
    store_disabled(&kv, &pending);
    activate(&env, &id, Some((&pending, &bytes))).expect("activate");
    let stored = load(&env, &id).expect("load").expect("record");
    assert_eq!(stored.status, Status::Disabled);
}

#[test]
fn a_create_never_makes_live_an_entry_a_disable_has_marked() {
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(3));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let id = create_one(&env, 0).expect("create");
    let sub = load(&env, &id).expect("load").expect("record");
    // As if the create had activated the record but not yet made its entry live ...
    set_listing(&env, &sub, |_| true, Listing::Joining).expect("set");
    // ... when a disable marked the entry and flipped the record (and had not yet
    // removed the entry) ...
    set_listing(&env, &sub, |_| true, Listing::Leaving).expect("mark");
    store_disabled(&kv, &sub);
    // ... before the create's last step.
    make_live(&env, &sub).expect("set");
    assert_eq!(list_ids(&env), Vec::<String>::new());
}

/// DESIGN §3: the per-client cap counts active subscriptions. A disable gives its slot
/// back in the client's live counter, once (the create at the cap would recount anyway,
/// but the counter is what every create reads); a counter already at 0 stays there; a
/// disable that finds nothing active (another client's, already disabled, not an id)
/// gives back nothing.
#[test]
fn a_disabled_subscription_gives_its_slot_back_once() {
    let kv = MemoryKv::new();
    let settings = Settings {
        subscription_limit: 2,
        ..Settings::default()
    };
    let entropy = SeededEntropy::new(8);
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let live = || {
        parse_live(
            kv.get(&keys::client_live(&ClientId::from("acme")))
                .expect("get")
                .as_deref(),
        )
    };
    let a = create_one(&env, 0).expect("create");
    let b = create_one(&env, 1).expect("create");
    assert_eq!(live(), Some(2));
    let full = create_one(&env, 2).expect_err("the cap");
    assert_eq!(
        (full.status, full.code),
        (422, "subscription_limit_reached")
    );
    assert_eq!(
        disable(&env, &a, Some(&ClientId::from("globex")), "deleted").expect("disable"),
        None
    );
    assert_eq!(live(), Some(2), "another client's disable frees nothing");
    let disabled = disable(&env, &a, Some(&ClientId::from("acme")), "deleted")
        .expect("disable")
        .expect("was active");
    assert_eq!(disabled.status, Status::Disabled);
    assert_eq!(disabled.disabled_reason.as_deref(), Some("deleted"));
    assert_eq!(disabled.disabled_at, Some(env.now_ms));
    let stored = |id: &str| {
        let bytes = kv
            .get(&keys::subscription(&SubscriptionId::from(id)))
            .expect("get")
            .expect("record");
        Subscription::decode(&bytes).expect("decode")
    };
    assert!(
        disabled.signing_secret.is_erased() && stored(&a).signing_secret.is_erased(),
        "a delete erases the secret"
    );
    // Any other disable (here an automatic one) keeps it, so the subscription can be
    // enabled again.
    let kept = disable(&env, &b, None, "gone")
        .expect("disable")
        .expect("active");
    assert!(!kept.signing_secret.is_erased() && !stored(&b).signing_secret.is_erased());
    assert_eq!(
        stored(&b).signing_secret.plain().map(str::len),
        Some("whsec_".len() + 43)
    );
    let b = create_one(&env, 3).expect("b's slot is free again");
    assert_eq!(live(), Some(1), "the slot is given back");
    assert_eq!(disable(&env, &a, None, "operator").expect("again"), None);
    assert_eq!(
        disable(&env, &SubscriptionId::from("not-an-id"), None, "operator").expect("no such id"),
        None
    );
    assert_eq!(live(), Some(1), "once");
    create_one(&env, 4).expect("the slot is taken again");
    assert!(create_one(&env, 5).is_err(), "at the cap again");
    // A counter that is already 0 (written by an earlier version, or reset) stays 0.
    kv.set(
        &keys::client_live(&ClientId::from("acme")),
        &encode_live(0, "n"),
    )
    .expect("set");
    disable(&env, &b, None, "operator")
        .expect("disable")
        .expect("was active");
    assert_eq!(live(), Some(0));
}

/// DESIGN §3 (List): entries of creates cut short (no active record) are skipped without
/// shortening a page or ending the walk.
#[test]
fn paging_skips_creates_cut_short_without_shortening_a_page() {
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(7));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let mut ids: Vec<SubscriptionId> = (0..5)
        .map(|n| create_one(&env, n).expect("create"))
        .collect();
    // Creates cut short after appending their entry: entries with no active record.
    let index = client_index(&ClientId::from("acme"));
    for n in 0..3 {
        let ghost = SubscriptionId::from(format!("sub_{n:024x}"));
        index
            .append(&kv, &[encode_index_item(Listing::Joining, &ghost, b"{}")])
            .expect("append");
    }
    for n in 5..8 {
        ids.push(create_one(&env, n).expect("create"));
    }
    for limit in [1, 2, 3, 4, 5, 7, 8, 50] {
        let pages = walk(&env, limit);
        assert!(
            pages.iter().rev().skip(1).all(|p| p.len() == limit),
            "limit {limit}: every page but the last is full: {pages:?}"
        );
        assert_eq!(pages.concat(), ids, "limit {limit}");
    }
    assert_eq!(page(&env, 8, 0).0, ids);
    assert!(!page(&env, 8, 0).1);
}

fn disabled_ids(
    env: &Env<'_, MemoryKv>,
    client: Option<&str>,
    limit: usize,
) -> Vec<SubscriptionId> {
    let client = client.map(ClientId::from);
    let (mut ids, mut after) = (Vec::new(), 0);
    loop {
        let (found, more) = disabled_page(env, client.as_ref(), limit, after).expect("page");
        assert!(found.len() <= limit);
        ids.extend(found.iter().map(|(_, s)| s.id.clone()));
        match found.last() {
            Some((seq, _)) if more => after = *seq,
            _ => return ids,
        }
    }
}

/// The owner's list of disabled subscriptions (not the deleted ones)
/// and the operator's (every client's), in the order they were disabled, each subscription
/// once; an enable takes it out, a disable again puts it last.
#[test]
fn the_lists_of_disabled_subscriptions_show_each_once_in_the_order_disabled() {
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(11));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let [a, b, c] = [0, 1, 2].map(|n| create_one(&env, n).expect("create"));
    disable(&env, &a, None, "gone")
        .expect("disable")
        .expect("active");
    disable(&env, &b, Some(&ClientId::from("acme")), DELETED)
        .expect("delete")
        .expect("active");
    disable(&env, &c, None, "operator")
        .expect("disable")
        .expect("active");
    for limit in [1, 2, 50] {
        assert_eq!(
            disabled_ids(&env, Some("acme"), limit),
            [a.clone(), c.clone()]
        );
        assert_eq!(
            disabled_ids(&env, None, limit),
            [a.clone(), b.clone(), c.clone()]
        );
    }
    assert!(disabled_ids(&env, Some("globex"), 50).is_empty());
    enable(&env, &a, None).expect("enable").expect("found");
    assert_eq!(disabled_ids(&env, Some("acme"), 50), vec![c.clone()]);
    assert_eq!(disabled_ids(&env, None, 50), [b.clone(), c.clone()]);
    disable(&env, &a, None, "gone")
        .expect("disable")
        .expect("active");
    assert_eq!(disabled_ids(&env, Some("acme"), 1), [c.clone(), a.clone()]);
    assert_eq!(
        disabled_ids(&env, None, 1),
        [b.clone(), c.clone(), a.clone()]
    );
    // Its owner deletes a disabled one: out of the owner's list, `deleted` in the
    // operator's, where it stays in its place; deleted again, nothing changes.
    let deleted = disable(&env, &a, Some(&ClientId::from("acme")), DELETED)
        .expect("delete")
        .expect("a disabled one is deleted");
    assert_eq!(deleted.disabled_reason.as_deref(), Some(DELETED));
    assert_eq!(disabled_ids(&env, Some("acme"), 50), vec![c.clone()]);
    assert_eq!(
        disabled_ids(&env, None, 50),
        [b.clone(), c.clone(), a.clone()]
    );
    assert_eq!(
        disable(&env, &a, Some(&ClientId::from("acme")), DELETED).expect("again"),
        None
    );
    assert_eq!(
        disable(&env, &c, Some(&ClientId::from("globex")), DELETED).expect("other"),
        None
    );
    assert_eq!(disable(&env, &c, None, "operator").expect("disabled"), None);
    // A page reads the list's counter, its pages and their records: three operations.
    let ops = kv.ops();
    disabled_page(&env, None, 2, 0).expect("page");
    assert_eq!(kv.ops() - ops, 3, "O(page), one batch of records");
}

/// Crash safety: a disable cut short at any store operation leaves the lists of
/// disabled subscriptions agreeing with the records (a subscription listed exactly when
/// it is disabled, once).
#[test]
fn a_disable_cut_short_anywhere_lists_exactly_the_disabled_ones() {
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(12));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let mut cut_short = 0;
    for n in 1.. {
        let id = create_one(&env, n).expect("create");
        kv.fail_at(Some(n as u64));
        let done = disable(&env, &id, None, "operator");
        kv.fail_at(None);
        let disabled = load(&env, &id).expect("load").expect("record").status == Status::Disabled;
        for client in [Some("acme"), None] {
            let listed = disabled_ids(&env, client, 50);
            let count = listed.iter().filter(|i| **i == id).count();
            assert_eq!(
                count,
                usize::from(disabled),
                "op {n}, {client:?}: {listed:?}"
            );
        }
        match done {
            Ok(_) => break,
            Err(_) => cut_short += 1,
        }
    }
    assert!(cut_short >= 5, "cut short at each step: {cut_short}");
}

/// The page directories' sweep over the subscription indexes: the delete that empties the first
/// page of acme's list and of the fan-out list (32 entries each) tidies both page
/// directories. Cut short at each of its store operations in turn, list shows exactly the
/// active subscriptions, the fan-out list holds every one of them (and others only with a
/// record that is not active), and the directories it wrote leave page 0 sealed.
#[test]
fn a_delete_that_empties_index_pages_cut_short_anywhere_keeps_the_lists_exact() {
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(28));
    let mut cut_short = 0;
    for n in 1.. {
        let kv = MemoryKv::new();
        let env = Env::new(1_000, &kv, &settings, &entropy);
        let ids: Vec<SubscriptionId> = (0..34)
            .map(|i| create_one(&env, i).expect("create"))
            .collect();
        for id in &ids[..31] {
            disable(&env, id, Some(&ClientId::from("acme")), DELETED).expect("delete");
        }
        let before = kv.ops();
        kv.fail_at(Some(n));
        let done = disable(&env, &ids[31], Some(&ClientId::from("acme")), DELETED);
        kv.fail_at(None);
        let faulted = kv.ops() - before >= n;
        let gone = load(&env, &ids[31]).expect("load").expect("record").status == Status::Disabled;
        let active = &ids[if gone { 32 } else { 31 }..];
        assert_eq!(list_ids(&env), active, "cut short at {n}");
        let fanout = fanout_ids(&env, "load.created").expect("fan-out");
        for id in active {
            assert!(
                fanout.contains(id),
                "cut short at {n}: {id} not in {fanout:?}"
            );
        }
        for id in fanout.iter().filter(|id| !active.contains(id)) {
            let sub = load(&env, id).expect("load").expect("record");
            assert_ne!(sub.status, Status::Active, "cut short at {n}");
        }
        if !faulted {
            done.expect("no fault: deleted");
            // The delete and its two tidies: every one of their operations was cut short.
            assert!(n > 20, "{n} operations");
            let dump = kv.dump();
            let sealed = |log| {
                dump.get(keys::log_page(&log, 0).as_str())
                    .map(Vec::as_slice)
            };
            assert_eq!(sealed(keys::fanout("load.created")), Some(&[0xE2][..]));
            assert_eq!(
                sealed(keys::client_subscriptions(&ClientId::from("acme"))),
                Some(&[0xE2][..])
            );
            break;
        }
        cut_short += usize::from(done.is_err());
    }
    assert!(
        cut_short >= 5,
        "failed at each step before the commit: {cut_short}"
    );
}
