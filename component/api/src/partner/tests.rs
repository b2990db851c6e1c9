//! Tests of the partner API: list parameters, and creates, lists and deletes cut short
//! anywhere.

use super::*;
use edgehook_storage::keys;

/// The context of a request `id` of `env`'s, its credentials not checked.
fn cx<'a, K: Kv>(env: &'a Env<'a, K>, req: &'a Request, id: &'a str) -> Ctx<'a, K> {
    Ctx::new(env, req, id, &edgehook_delivery::NoNetwork)
}
use edgehook_subscriptions::Status;

/// Found by the `cursor` fuzz target: `u64::from_str_radix` and `usize::from_str` take a
/// leading `+`, so `cursor=cur_%2B5` and `limit=%2B5` were accepted.
#[test]
fn list_params_are_digits_and_hex_digits_only() {
    let params = |q: &str| list_params(&Request::new("GET", &format!("/v1/webhooks?{q}")));
    assert_eq!(params("limit=5&cursor=cur_1f").ok(), Some((5, 0x1f)));
    assert_eq!(params("limit=007").ok(), Some((7, 0)));
    // DESIGN: limit 1..100, default 50.
    assert_eq!(params("").ok(), Some((50, 0)));
    assert_eq!(params("limit=100").ok(), Some((100, 0)));
    assert_eq!(params("limit=1").ok(), Some((1, 0)));
    let code = |q: &str| params(q).err().map(|e| e.details[0].code);
    assert_eq!(code("limit=101"), Some("out_of_range"));
    assert_eq!(code("limit=%zz"), Some("invalid"), "not percent-encoding");
    for bad in [
        "limit=%2B5",
        "limit=+5",
        "limit=-1",
        "limit=0",
        "limit=101",
        "cursor=cur_%2B5",
        "cursor=cur_",
        "cursor=cur_-1",
        "cursor=cur_1g",
        "cursor=5",
    ] {
        assert!(params(bad).is_err(), "{bad} should be refused");
    }
}
use edgehook_model::config::Settings;
use edgehook_model::env::SeededEntropy;
use edgehook_storage::kv::MemoryKv;

fn create_one(env: &Env<'_, MemoryKv>, n: usize) -> Result<SubscriptionId, ApiError> {
    let req = Request::new("POST", "/v1/webhooks")
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"url":"https://h{n}.example.com/x","eventTypes":["load.created"]}}"#
        ));
    let resp = create(&cx(env, &req, "req_1"), &ClientId::from("acme"))?;
    let v: Value = serde_json::from_slice(&resp.body).expect("json");
    Ok(SubscriptionId::from(v["data"]["id"].as_str().expect("id")))
}

fn list_ids(env: &Env<'_, MemoryKv>) -> Vec<SubscriptionId> {
    let resp = list(
        &cx(env, &Request::new("GET", "/v1/webhooks?limit=100"), "req_2"),
        &ClientId::from("acme"),
    )
    .expect("list");
    let v: Value = serde_json::from_slice(&resp.body).expect("list is JSON");
    assert_eq!(v["requestId"], "req_2");
    v["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|s| SubscriptionId::from(s["id"].as_str().expect("id")))
        .collect()
}

/// The ids of acme's active records, in creation order.
fn active_ids(kv: &MemoryKv) -> Vec<SubscriptionId> {
    let mut subs: Vec<Subscription> = kv
        .dump()
        .iter()
        .filter(|(k, _)| k.starts_with(keys::SUBSCRIPTION_PREFIX))
        .map(|(_, v)| Subscription::decode(v).expect("record"))
        .filter(|s: &Subscription| s.status == Status::Active && s.client_id == "acme")
        .collect();
    subs.sort_by_key(|s| s.seq);
    subs.into_iter().map(|s| s.id).collect()
}

#[test]
fn list_shows_live_entries_from_the_index_without_reading_records() {
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(1));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let ids: Vec<SubscriptionId> = (0..3)
        .map(|n| create_one(&env, n).expect("create"))
        .collect();
    // Damage the records: list must not need them.
    for id in &ids {
        kv.set(&keys::subscription(id), b"not json").expect("set");
    }
    assert_eq!(list_ids(&env), ids);
}

#[test]
fn a_create_or_delete_cut_short_anywhere_never_lists_what_is_not_active() {
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(2));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    create_one(&env, 0).expect("create");
    let mut cut_short = 0;
    for n in 1.. {
        let before = active_ids(&kv);
        kv.fail_at(Some(n));
        let done = create_one(&env, n as usize).is_ok();
        kv.fail_at(None);
        assert_eq!(list_ids(&env), active_ids(&kv), "create failing at op {n}");
        if !done {
            assert_eq!(
                active_ids(&kv),
                before,
                "a create that answered an error made nothing"
            );
        }
        if done {
            break;
        }
        cut_short += 1;
    }
    assert!(
        cut_short > 5,
        "the create was cut short at each of its steps"
    );
    for n in 1.. {
        let victim = active_ids(&kv)[0].clone();
        kv.fail_at(Some(n));
        let done = delete(
            &cx(&env, &Request::new("DELETE", "/"), "req_3"),
            &victim,
            &ClientId::from("acme"),
        )
        .is_ok();
        kv.fail_at(None);
        assert_eq!(list_ids(&env), active_ids(&kv), "delete failing at op {n}");
        if done {
            assert!(!list_ids(&env).contains(&victim));
            break;
        }
    }
}

/// A store whose first compare-and-swap on a subscription record applies the write and
/// then reports an error (Redis does that when the connection breaks after the script
/// ran).
struct SwapAppliedThenFailed<'a> {
    inner: &'a MemoryKv,
    tripped: std::cell::Cell<bool>,
}

impl Kv for SwapAppliedThenFailed<'_> {
    type Cas = <MemoryKv as Kv>::Cas;
    fn get(
        &self,
        key: &(impl edgehook_storage::keys::AsKey + ?Sized),
    ) -> Result<Option<Vec<u8>>, edgehook_storage::kv::KvError> {
        let key = key.key_str();
        self.inner.get(key)
    }
    fn set(
        &self,
        key: &(impl edgehook_storage::keys::AsKey + ?Sized),
        value: &[u8],
    ) -> Result<(), edgehook_storage::kv::KvError> {
        let key = key.key_str();
        self.inner.set(key, value)
    }
    fn delete(
        &self,
        key: &(impl edgehook_storage::keys::AsKey + ?Sized),
    ) -> Result<(), edgehook_storage::kv::KvError> {
        let key = key.key_str();
        self.inner.delete(key)
    }
    fn get_many(
        &self,
        keys: &[impl edgehook_storage::keys::AsKey],
    ) -> Result<Vec<Option<Vec<u8>>>, edgehook_storage::kv::KvError> {
        self.inner.get_many(keys)
    }
    fn increment(
        &self,
        key: &(impl edgehook_storage::keys::AsKey + ?Sized),
        delta: i64,
    ) -> Result<i64, edgehook_storage::kv::KvError> {
        let key = key.key_str();
        self.inner.increment(key, delta)
    }
    fn cas_begin(
        &self,
        key: &(impl edgehook_storage::keys::AsKey + ?Sized),
    ) -> Result<(Self::Cas, Option<Vec<u8>>), edgehook_storage::kv::KvError> {
        let key = key.key_str();
        self.inner.cas_begin(key)
    }
    fn cas_swap(
        &self,
        cas: Self::Cas,
        value: &[u8],
    ) -> Result<bool, edgehook_storage::kv::KvError> {
        let trip = cas.0.starts_with(keys::SUBSCRIPTION_PREFIX) && !self.tripped.replace(true);
        let swapped = self.inner.cas_swap(cas, value)?;
        if trip {
            return Err(edgehook_storage::kv::KvError::Unavailable(
                "connection reset".into(),
            ));
        }
        Ok(swapped)
    }
}

#[test]
fn a_create_whose_commit_reported_an_error_is_replayed_by_its_retry_not_made_twice() {
    // The create stored its response under the key, then its commit (pending -> active)
    // applied but the store answered with an error. The response stays: the retry with
    // the key replays it instead of creating a second subscription with a new secret.
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(6));
    let flaky = SwapAppliedThenFailed {
        inner: &kv,
        tripped: std::cell::Cell::new(false),
    };
    let req = Request::new("POST", "/v1/webhooks")
        .header("content-type", "application/json")
        .header("idempotency-key", "k")
        .body(r#"{"url":"https://h.example.com/x","eventTypes":["load.created"]}"#);
    let env_of = |kv| Env::new(1_000, kv, &settings, &entropy);
    let first = create(&cx(&env_of(&flaky), &req, "req_1"), &ClientId::from("acme"));
    assert!(first.is_err(), "the commit reported an error");
    assert!(flaky.tripped.get());
    let made = active_ids(&kv);
    assert_eq!(made.len(), 1, "the commit did apply");
    let retry =
        create(&cx(&env_of(&flaky), &req, "req_2"), &ClientId::from("acme")).expect("retry");
    assert_eq!(retry.status, 201);
    let v: Value = serde_json::from_slice(&retry.body).expect("json");
    assert_eq!(v["data"]["id"].as_str(), Some(made[0].as_str()), "replayed");
    assert!(
        retry
            .headers
            .iter()
            .any(|(n, v)| n == "idempotent-replayed" && v == "true")
    );
    assert_eq!(active_ids(&kv), made, "one subscription, not two");
}

/// One page of acme's list: the ids, `hasMore`, `nextCursor`.
fn page(env: &Env<'_, MemoryKv>, query: &str) -> (Vec<SubscriptionId>, bool, Option<String>) {
    let resp = list(
        &cx(
            env,
            &Request::new("GET", &format!("/v1/webhooks?{query}")),
            "req_p",
        ),
        &ClientId::from("acme"),
    )
    .expect("list");
    assert!(
        !resp.body.contains(&b' '),
        "compact JSON, each item as stored: {}",
        String::from_utf8_lossy(&resp.body)
    );
    let v: Value = serde_json::from_slice(&resp.body).expect("list is JSON");
    let ids = v["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|s| SubscriptionId::from(s["id"].as_str().expect("id")))
        .collect();
    let has_more = v["hasMore"].as_bool().expect("hasMore");
    let next = v["nextCursor"].as_str().map(str::to_owned);
    assert_eq!(
        has_more,
        next.is_some(),
        "a cursor exactly when there is more"
    );
    (ids, has_more, next)
}

/// All of acme's pages with `limit`, following `nextCursor` to the end.
fn walk(env: &Env<'_, MemoryKv>, limit: usize) -> Vec<Vec<SubscriptionId>> {
    let mut pages = Vec::new();
    let mut query = format!("limit={limit}");
    loop {
        let (ids, _, next) = page(env, &query);
        pages.push(ids);
        match next {
            Some(cursor) => query = format!("limit={limit}&cursor={cursor}"),
            None => return pages,
        }
        assert!(pages.len() < 100, "the walk ends");
    }
}

/// DESIGN §3 (List): `limit` items a page in creation order; `hasMore` and a `nextCursor`
/// exactly when more follow (not when the last page is exactly full); following the
/// cursors yields every active subscription once. (Entries of creates cut short are
/// skipped without shortening a page: `edgehook-subscriptions`' list tests.)
#[test]
fn paging_walks_every_active_subscription_once_in_creation_order() {
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(7));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let mut ids: Vec<SubscriptionId> = Vec::new();
    for n in 0..5 {
        ids.push(create_one(&env, n).expect("create"));
    }
    assert_eq!(
        page(&env, "limit=5"),
        (ids.clone(), false, None),
        "exactly full"
    );
    assert_eq!(page(&env, "limit=6").0, ids);
    let (first, more, _) = page(&env, "limit=4");
    assert_eq!((first, more), (ids[..4].to_vec(), true));
    assert_eq!(
        walk(&env, 1),
        ids.iter().map(|id| vec![id.clone()]).collect::<Vec<_>>()
    );
    assert_eq!(
        walk(&env, 2),
        [ids[..2].to_vec(), ids[2..4].to_vec(), ids[4..].to_vec()]
    );
}

/// An idempotent create replayed after its subscription was deleted is a 409
/// `subscription_deleted`, without the secret; replayed after another disable it says
/// `disabled` (the owner may enable it again), never `active`.
#[test]
fn a_create_replayed_after_a_delete_is_409_and_after_a_disable_says_disabled() {
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(9));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let req = |key: &str| {
        Request::new("POST", "/v1/webhooks")
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(r#"{"url":"https://h.example.com/x","eventTypes":["load.created"]}"#)
    };
    let id_of = |resp: &Response| -> String {
        let v: Value = serde_json::from_slice(&resp.body).expect("json");
        v["data"]["id"].as_str().expect("id").to_owned()
    };
    let first = create(&cx(&env, &req("gone"), "req_1"), &ClientId::from("acme")).expect("create");
    let deleted = id_of(&first);
    delete(
        &cx(&env, &Request::new("DELETE", "/"), "req_2"),
        &deleted,
        &ClientId::from("acme"),
    )
    .expect("delete");
    let err =
        create(&cx(&env, &req("gone"), "req_3"), &ClientId::from("acme")).expect_err("deleted");
    assert_eq!((err.status, err.code), (409, "subscription_deleted"));
    assert!(!err.message.contains("whsec_"));
    let second = create(&cx(&env, &req("off"), "req_4"), &ClientId::from("acme")).expect("create");
    let off = id_of(&second);
    edgehook_delivery::disable(&env, &SubscriptionId::from(off.as_str()), "gone")
        .expect("disable")
        .expect("active");
    let replay = create(&cx(&env, &req("off"), "req_5"), &ClientId::from("acme")).expect("replay");
    let v: Value = serde_json::from_slice(&replay.body).expect("json");
    assert_eq!(replay.status, 201);
    assert_eq!(
        (v["data"]["id"].as_str(), v["data"]["status"].as_str()),
        (Some(off.as_str()), Some("disabled"))
    );
}

/// The owner reads its subscription active or disabled (state, reason, since
/// when, failure streak; never the secret); a deleted one, another client's and an unknown
/// id are the same 404. Point 2: the owner enables a disabled one again.
#[test]
fn the_owner_reads_a_disabled_subscription_and_enables_it_again() {
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(10));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let id = create_one(&env, 0).expect("create");
    let read = |env: &Env<'_, MemoryKv>, client: &str| -> Result<Value, ApiError> {
        let resp = get(
            &cx(env, &Request::new("GET", "/"), "req_r"),
            &id,
            &ClientId::from(client),
        )?;
        Ok(serde_json::from_slice(&resp.body).expect("json"))
    };
    let v = read(&env, "acme").expect("active");
    assert_eq!(v["data"]["status"], "active");
    assert_eq!(v["data"]["disabledReason"], Value::Null);
    assert_eq!(v["data"]["consecutiveFailures"], 0);
    let later = Env::new(7_000, &kv, &settings, &entropy);
    edgehook_delivery::disable(&later, &id, "repeated_failures")
        .expect("disable")
        .expect("active");
    let v = read(&env, "acme").expect("disabled");
    assert_eq!(v["data"]["status"], "disabled");
    assert_eq!(v["data"]["disabledReason"], "repeated_failures");
    assert_eq!(v["data"]["disabledAt"], 7_000);
    assert!(v["data"].get("signingSecret").is_none());
    assert_eq!(read(&env, "globex").expect_err("other").status, 404);
    assert!(list_ids(&env).is_empty(), "list shows active ones");
    let enabled = enable(
        &cx(&env, &Request::new("POST", "/"), "req_e"),
        &id,
        &ClientId::from("acme"),
    )
    .expect("enable");
    let v: Value = serde_json::from_slice(&enabled.body).expect("json");
    assert_eq!(v["data"]["status"], "active");
    assert_eq!(list_ids(&env), vec![id.clone()]);
    assert_eq!(
        enable(
            &cx(&env, &Request::new("POST", "/"), "req_e"),
            &id,
            &ClientId::from("acme")
        )
        .expect("again")
        .status,
        200
    );
    assert_eq!(
        enable(
            &cx(&env, &Request::new("POST", "/"), "req_e"),
            &id,
            &ClientId::from("globex")
        )
        .expect_err("other")
        .status,
        404
    );
    delete(
        &cx(&env, &Request::new("DELETE", "/"), "req_d"),
        &id,
        &ClientId::from("acme"),
    )
    .expect("delete");
    assert_eq!(read(&env, "acme").expect_err("deleted").status, 404);
    assert_eq!(
        enable(
            &cx(&env, &Request::new("POST", "/"), "req_e"),
            &id,
            &ClientId::from("acme")
        )
        .expect_err("deleted")
        .status,
        404
    );
}

/// The list's `status` is `active` (the default) or `disabled`; anything else is a
/// 422 naming `status`. With `disabled`, the page holds the caller's disabled ones (not the
/// deleted), each as a read shows it.
#[test]
fn list_status_is_active_or_disabled() {
    let wants = |q: &str| wants_disabled(&Request::new("GET", &format!("/v1/webhooks?{q}")));
    assert_eq!(wants("").ok(), Some(false));
    assert_eq!(wants("status=active").ok(), Some(false));
    assert_eq!(wants("status=disabled").ok(), Some(true));
    assert_eq!(
        wants("status=disable%64").ok(),
        Some(true),
        "percent-decoded"
    );
    for bad in ["status=", "status=Disabled", "status=paused", "status=%zz"] {
        let err = wants(bad).expect_err(bad);
        assert_eq!((err.status, err.details[0].field.as_str()), (422, "status"));
    }
    let kv = MemoryKv::new();
    let (settings, entropy) = (Settings::default(), SeededEntropy::new(12));
    let env = Env::new(1_000, &kv, &settings, &entropy);
    let [a, b] = [0, 1].map(|n| create_one(&env, n).expect("create"));
    edgehook_delivery::disable(&env, &a, "gone").expect("disable");
    delete(
        &cx(&env, &Request::new("DELETE", "/"), "req_d"),
        &b,
        &ClientId::from("acme"),
    )
    .expect("delete");
    let resp = list(
        &cx(
            &env,
            &Request::new("GET", "/v1/webhooks?status=disabled"),
            "req_l",
        ),
        &ClientId::from("acme"),
    )
    .expect("list");
    let v: Value = serde_json::from_slice(&resp.body).expect("json");
    assert_eq!(v["data"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["data"][0]["id"].as_str(), Some(a.as_str()));
    assert_eq!(v["data"][0]["disabledReason"], "gone");
    assert_eq!(
        (v["hasMore"].clone(), v["nextCursor"].clone()),
        (Value::Bool(false), Value::Null)
    );
    assert_eq!(v["requestId"], "req_l");
}
