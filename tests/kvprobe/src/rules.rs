//! The rules, each a function that answers `Ok(what it saw)` or `Err(what broke the rule)`.
//! Names and reasons are listed in docs/embedding.md ("Key-value contract"); the host's tests
//! (`host/runtime/tests/kv_conformance.rs`) hold the list of rules each host is known to break.
//!
//! Every rule works on keys of its own (`kvprobe:<run>:<rule>:...`), so rules never see each
//! other's writes and a run never sees an earlier run's.

use crate::bindings::wasi::keyvalue::{atomics, batch, store};
use crate::json::show;

/// What a rule found: `Ok` with what it saw, or `Err` with what broke the rule.
pub type Outcome = Result<String, String>;

/// A rule: its name and its check.
pub type Rule = (&'static str, fn(&Probe, &Keys) -> Outcome);

/// Every rule `GET /conformance` runs, in order.
pub const RULES: &[Rule] = &[
    ("store.get_missing_is_none", get_missing_is_none),
    ("store.set_get_exact_bytes", set_get_exact_bytes),
    ("store.set_get_empty_value", set_get_empty_value),
    ("store.set_get_64kib_value", set_get_64kib_value),
    ("store.set_get_256kib_value", set_get_256kib_value),
    ("store.set_overwrites", set_overwrites),
    ("store.delete_missing_is_ok", delete_missing_is_ok),
    ("store.delete_removes", delete_removes),
    (
        "counter.increment_on_missing_starts_at_zero",
        increment_on_missing,
    ),
    (
        "counter.increment_returns_new_value",
        increment_returns_new_value,
    ),
    ("counter.increment_by_negative_delta", increment_negative),
    (
        "counter.increment_by_zero_reads_without_change",
        increment_zero_reads,
    ),
    (
        "counter.increment_by_zero_on_missing_is_zero",
        increment_zero_on_missing,
    ),
    ("cas.begin_on_missing_sees_none", begin_on_missing_sees_none),
    ("cas.begin_sees_current_bytes", begin_sees_current_bytes),
    ("cas.swap_on_missing_key_writes", swap_on_missing_writes),
    (
        "cas.swap_on_missing_key_reports_success",
        swap_on_missing_reports,
    ),
    ("cas.swap_on_unchanged_key_writes", swap_on_unchanged_writes),
    (
        "cas.swap_on_unchanged_key_reports_success",
        swap_on_unchanged_reports,
    ),
    (
        "cas.swap_after_other_write_reports_cas_failed",
        swap_after_write_fails,
    ),
    (
        "cas.swap_after_other_write_writes_nothing",
        swap_after_write_writes_nothing,
    ),
    ("cas.swap_after_key_created_fails", swap_after_created_fails),
    ("cas.swap_after_key_deleted_fails", swap_after_deleted_fails),
    ("cas.two_handles_first_swap_wins", two_handles_existing),
    (
        "cas.two_handles_on_missing_key_first_swap_wins",
        two_handles_missing,
    ),
    ("cas.many_swaps_in_one_call", many_swaps_in_one_call),
    ("batch.get_many_single_key", get_many_single_key),
    ("batch.get_many_values_by_key", get_many_values_by_key),
    ("batch.get_many_in_request_order", get_many_in_request_order),
    ("batch.get_many_missing_as_none", get_many_missing_as_none),
    ("batch.get_many_duplicates", get_many_duplicates),
    ("batch.set_many_writes_every_key", set_many_writes_every_key),
];

/// The bucket under test.
pub struct Probe(store::Bucket);

/// The keys of one rule: `kvprobe:<run>:<rule>:<suffix>`.
pub struct Keys(String);

impl Keys {
    /// The keys of rule `rule` in run `run`.
    pub fn new(run: &str, rule: &str) -> Self {
        Keys(format!("kvprobe:{run}:{rule}:"))
    }

    /// One key of the rule.
    pub fn k(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.0)
    }
}

/// A `get-many` answer as the host gave it: keys with their values.
pub type Answer = Vec<(String, Option<Vec<u8>>)>;

/// What a `swap` answered.
#[derive(Debug)]
pub enum Swap {
    /// It reported success.
    Ok,
    /// It reported `cas-failed`.
    CasFailed,
    /// It reported a store error.
    StoreError(String),
}

fn store_err(e: store::Error) -> String {
    match e {
        store::Error::NoSuchStore => "store error: no-such-store".into(),
        store::Error::AccessDenied => "store error: access-denied".into(),
        store::Error::Other(m) => format!("store error: {m}"),
    }
}

impl Probe {
    /// Opens bucket `default`.
    pub fn open() -> Result<Self, String> {
        store::open("default")
            .map(Probe)
            .map_err(|e| format!("open(\"default\"): {}", store_err(e)))
    }

    /// `get`.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        self.0
            .get(key)
            .map_err(|e| format!("get: {}", store_err(e)))
    }

    /// `set`.
    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), String> {
        self.0
            .set(key, value)
            .map_err(|e| format!("set: {}", store_err(e)))
    }

    /// `delete`.
    pub fn delete(&self, key: &str) -> Result<(), String> {
        self.0
            .delete(key)
            .map_err(|e| format!("delete: {}", store_err(e)))
    }

    /// `atomics.increment`.
    pub fn increment(&self, key: &str, delta: i64) -> Result<i64, String> {
        atomics::increment(&self.0, key, delta)
            .map_err(|e| format!("increment({delta}): {}", store_err(e)))
    }

    /// `cas.new` then `cas.current`, as the component begins every compare-and-swap.
    pub fn begin(&self, key: &str) -> Result<(atomics::Cas, Option<Vec<u8>>), String> {
        let cas =
            atomics::Cas::new(&self.0, key).map_err(|e| format!("cas.new: {}", store_err(e)))?;
        let seen = cas
            .current()
            .map_err(|e| format!("cas.current: {}", store_err(e)))?;
        Ok((cas, seen))
    }

    /// `atomics.swap`; the handle a `cas-failed` hands back is dropped, as the component does.
    pub fn swap(&self, cas: atomics::Cas, value: &[u8]) -> Swap {
        match atomics::swap(cas, value) {
            Ok(()) => Swap::Ok,
            Err(atomics::CasError::CasFailed(_)) => Swap::CasFailed,
            Err(atomics::CasError::StoreError(e)) => Swap::StoreError(store_err(e)),
        }
    }

    /// `batch.get-many`, the answer as the host gave it.
    pub fn get_many(&self, keys: &[String]) -> Result<Answer, String> {
        batch::get_many(&self.0, keys).map_err(|e| format!("get-many: {}", store_err(e)))
    }

    /// `batch.set-many`.
    pub fn set_many(&self, entries: &[(String, Vec<u8>)]) -> Result<(), String> {
        batch::set_many(&self.0, entries).map_err(|e| format!("set-many: {}", store_err(e)))
    }
}

/// `Err` unless `got == want`, naming `what`.
fn expect_bytes(what: &str, got: Option<&[u8]>, want: Option<&[u8]>) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {}, want {}", show(got), show(want)))
    }
}

fn expect_int(what: &str, got: i64, want: i64) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got}, want {want}"))
    }
}

/// Writes `value`, reads it back byte for byte.
fn round_trip(p: &Probe, key: &str, value: &[u8]) -> Outcome {
    p.set(key, value)?;
    let got = p.get(key)?;
    expect_bytes("get after set", got.as_deref(), Some(value))?;
    Ok(format!("read back {}", show(Some(value))))
}

fn get_missing_is_none(p: &Probe, k: &Keys) -> Outcome {
    let got = p.get(&k.k("never-written"))?;
    expect_bytes("get of a key never written", got.as_deref(), None)?;
    Ok("none".into())
}

fn set_get_exact_bytes(p: &Probe, k: &Keys) -> Outcome {
    // Every byte value, NUL and non-UTF-8 included, then the same reversed.
    let mut value: Vec<u8> = (0..=255u8).collect();
    value.extend((0..=255u8).rev());
    round_trip(p, &k.k("binary"), &value)
}

fn set_get_empty_value(p: &Probe, k: &Keys) -> Outcome {
    round_trip(p, &k.k("empty"), b"")
}

/// `len` bytes of a pattern that repeats only every 251 bytes.
fn patterned(len: u32) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

fn set_get_64kib_value(p: &Probe, k: &Keys) -> Outcome {
    round_trip(p, &k.k("big"), &patterned(64 << 10))
}

/// The largest value the component writes: an event body at the ingest limit (256 KiB).
fn set_get_256kib_value(p: &Probe, k: &Keys) -> Outcome {
    round_trip(p, &k.k("bigger"), &patterned(256 << 10))
}

fn set_overwrites(p: &Probe, k: &Keys) -> Outcome {
    let key = k.k("v");
    p.set(&key, b"first, longer value")?;
    p.set(&key, b"second")?;
    expect_bytes(
        "get after two sets",
        p.get(&key)?.as_deref(),
        Some(b"second"),
    )?;
    Ok("the second value".into())
}

fn delete_missing_is_ok(p: &Probe, k: &Keys) -> Outcome {
    p.delete(&k.k("never-written"))?;
    Ok("ok".into())
}

fn delete_removes(p: &Probe, k: &Keys) -> Outcome {
    let key = k.k("v");
    p.set(&key, b"x")?;
    p.delete(&key)?;
    expect_bytes("get after delete", p.get(&key)?.as_deref(), None)?;
    Ok("none after delete".into())
}

fn increment_on_missing(p: &Probe, k: &Keys) -> Outcome {
    expect_int("increment(missing, 7)", p.increment(&k.k("n"), 7)?, 7)?;
    Ok("7".into())
}

fn increment_returns_new_value(p: &Probe, k: &Keys) -> Outcome {
    let key = k.k("n");
    let got: Vec<i64> = (0..3)
        .map(|_| p.increment(&key, 1))
        .collect::<Result<_, _>>()?;
    if got != [1, 2, 3] {
        return Err(format!(
            "three increments by 1 returned {got:?}, want [1, 2, 3]"
        ));
    }
    expect_int("increment by 40 after 3", p.increment(&key, 40)?, 43)?;
    Ok("1, 2, 3, 43".into())
}

fn increment_negative(p: &Probe, k: &Keys) -> Outcome {
    let key = k.k("n");
    expect_int("increment(missing, 3)", p.increment(&key, 3)?, 3)?;
    expect_int("then increment(-5)", p.increment(&key, -5)?, -2)?;
    expect_int("then increment(-1)", p.increment(&key, -1)?, -3)?;
    expect_int("then increment(3)", p.increment(&key, 3)?, 0)?;
    Ok("3, -2, -3, 0".into())
}

fn increment_zero_reads(p: &Probe, k: &Keys) -> Outcome {
    let key = k.k("n");
    expect_int("increment(missing, 12)", p.increment(&key, 12)?, 12)?;
    expect_int("increment(0)", p.increment(&key, 0)?, 12)?;
    expect_int("increment(0) again", p.increment(&key, 0)?, 12)?;
    expect_int("then increment(1)", p.increment(&key, 1)?, 13)?;
    Ok("12, 12, 13".into())
}

fn increment_zero_on_missing(p: &Probe, k: &Keys) -> Outcome {
    let key = k.k("n");
    expect_int("increment(missing, 0)", p.increment(&key, 0)?, 0)?;
    expect_int("then increment(2)", p.increment(&key, 2)?, 2)?;
    Ok("0, then 2".into())
}

fn begin_on_missing_sees_none(p: &Probe, k: &Keys) -> Outcome {
    let (_cas, seen) = p.begin(&k.k("never-written"))?;
    expect_bytes("cas.current of a missing key", seen.as_deref(), None)?;
    Ok("none".into())
}

fn begin_sees_current_bytes(p: &Probe, k: &Keys) -> Outcome {
    let key = k.k("v");
    let value = b"a\0b\xffc";
    p.set(&key, value)?;
    let (_cas, seen) = p.begin(&key)?;
    expect_bytes("cas.current", seen.as_deref(), Some(value))?;
    Ok(show(Some(value)))
}

/// A swap on a key that nobody else touches: begun on `existing` (absent when `None`).
fn lone_swap(p: &Probe, key: &str, existing: Option<&[u8]>) -> Result<Swap, String> {
    if let Some(v) = existing {
        p.set(key, v)?;
    }
    let (cas, _) = p.begin(key)?;
    Ok(p.swap(cas, b"swapped"))
}

fn swap_writes(p: &Probe, key: &str, existing: Option<&[u8]>) -> Outcome {
    let result = lone_swap(p, key, existing)?;
    if let Swap::StoreError(e) = result {
        return Err(format!("swap: {e}"));
    }
    expect_bytes(
        "get after the swap",
        p.get(key)?.as_deref(),
        Some(b"swapped"),
    )?;
    Ok(format!("written (swap reported {result:?})"))
}

fn swap_reports(p: &Probe, key: &str, existing: Option<&[u8]>) -> Outcome {
    match lone_swap(p, key, existing)? {
        Swap::Ok => Ok("ok".into()),
        other => Err(format!(
            "a swap nobody raced reported {other:?}; the key now holds {}",
            show(p.get(key)?.as_deref())
        )),
    }
}

fn swap_on_missing_writes(p: &Probe, k: &Keys) -> Outcome {
    swap_writes(p, &k.k("v"), None)
}

fn swap_on_missing_reports(p: &Probe, k: &Keys) -> Outcome {
    swap_reports(p, &k.k("v"), None)
}

fn swap_on_unchanged_writes(p: &Probe, k: &Keys) -> Outcome {
    swap_writes(p, &k.k("v"), Some(b"before"))
}

fn swap_on_unchanged_reports(p: &Probe, k: &Keys) -> Outcome {
    swap_reports(p, &k.k("v"), Some(b"before"))
}

/// Begins a swap on `key` (holding `before`, or absent), lets `meddle` change the key behind
/// its back, then swaps: what the swap answered and what the key holds after it.
fn raced_swap(
    p: &Probe,
    key: &str,
    before: Option<&[u8]>,
    meddle: impl FnOnce() -> Result<(), String>,
) -> Result<(Swap, Option<Vec<u8>>), String> {
    if let Some(v) = before {
        p.set(key, v)?;
    }
    let (cas, _) = p.begin(key)?;
    meddle()?;
    let result = p.swap(cas, b"late swap");
    Ok((result, p.get(key)?))
}

fn swap_after_write_fails(p: &Probe, k: &Keys) -> Outcome {
    let key = k.k("v");
    let (result, _) = raced_swap(p, &key, Some(b"before"), || p.set(&key, b"other writer"))?;
    match result {
        Swap::CasFailed => Ok("cas-failed".into()),
        other => Err(format!("want cas-failed, got {other:?}")),
    }
}

fn swap_after_write_writes_nothing(p: &Probe, k: &Keys) -> Outcome {
    let key = k.k("v");
    let (result, after) = raced_swap(p, &key, Some(b"before"), || p.set(&key, b"other writer"))?;
    expect_bytes(
        &format!("after the stale swap (it reported {result:?})"),
        after.as_deref(),
        Some(b"other writer"),
    )?;
    Ok("the other writer's value stands".into())
}

fn swap_after_created_fails(p: &Probe, k: &Keys) -> Outcome {
    let key = k.k("v");
    let (result, after) = raced_swap(p, &key, None, || p.set(&key, b"other writer"))?;
    let written = expect_bytes(
        &format!(
            "swap begun on a missing key, the key then created; it reported {result:?}; after it"
        ),
        after.as_deref(),
        Some(b"other writer"),
    );
    match result {
        Swap::CasFailed => written.map(|()| "cas-failed, the creator's value stands".into()),
        other => Err(format!(
            "begun on a missing key, the key then created by another writer: want cas-failed, \
             got {other:?}; the key now holds {}",
            show(after.as_deref())
        )),
    }
}

fn swap_after_deleted_fails(p: &Probe, k: &Keys) -> Outcome {
    let key = k.k("v");
    let (result, after) = raced_swap(p, &key, Some(b"before"), || p.delete(&key))?;
    match result {
        Swap::CasFailed if after.is_none() => Ok("cas-failed, the key stays deleted".into()),
        other => Err(format!(
            "begun on a key then deleted by another writer: want cas-failed and the key \
             absent, got {other:?} and {}",
            show(after.as_deref())
        )),
    }
}

/// Two handles begun on one key (holding `before`, or absent); the first swaps, then the
/// second. The first's value must stand and the second must report `cas-failed`. What the
/// first swap reported is a rule of its own (`cas.swap_on_*_reports_success`).
fn two_handles(p: &Probe, key: &str, before: Option<&[u8]>) -> Outcome {
    if let Some(v) = before {
        p.set(key, v)?;
    }
    let (first, _) = p.begin(key)?;
    let (second, _) = p.begin(key)?;
    let first_result = p.swap(first, b"first");
    if let Swap::StoreError(e) = first_result {
        return Err(format!("first swap: {e}"));
    }
    let second_result = p.swap(second, b"second");
    let after = p.get(key)?;
    match second_result {
        Swap::CasFailed if after.as_deref() == Some(b"first") => Ok(format!(
            "first swap reported {first_result:?}, second cas-failed, \"first\" stands"
        )),
        other => Err(format!(
            "first swap reported {first_result:?}, second {other:?} (want cas-failed); the key \
             holds {} (want \"first\")",
            show(after.as_deref())
        )),
    }
}

fn two_handles_existing(p: &Probe, k: &Keys) -> Outcome {
    two_handles(p, &k.k("v"), Some(b"before"))
}

fn two_handles_missing(p: &Probe, k: &Keys) -> Outcome {
    two_handles(p, &k.k("v"), None)
}

/// Swaps the component may do in one call: a tick claims every due delivery by
/// compare-and-swap, a publish writes one record per subscription.
const SWAPS_IN_ONE_CALL: usize = 300;

fn many_swaps_in_one_call(p: &Probe, k: &Keys) -> Outcome {
    let key = k.k("v");
    for i in 0..SWAPS_IN_ONE_CALL {
        let (cas, _) = p
            .begin(&key)
            .map_err(|e| format!("compare-and-swap #{}: {e}", i + 1))?;
        if let Swap::StoreError(e) = p.swap(cas, format!("{i}").as_bytes()) {
            return Err(format!("swap #{}: {e}", i + 1));
        }
    }
    let last = format!("{}", SWAPS_IN_ONE_CALL - 1);
    expect_bytes(
        "after the last swap",
        p.get(&key)?.as_deref(),
        Some(last.as_bytes()),
    )?;
    Ok(format!("{SWAPS_IN_ONE_CALL} begun and swapped"))
}

/// Writes `name -> value of name` for each name; answers the full keys.
fn seed(p: &Probe, k: &Keys, names: &[&str]) -> Result<Vec<String>, String> {
    names
        .iter()
        .map(|n| {
            let key = k.k(n);
            p.set(&key, format!("value of {n}").as_bytes())?;
            Ok(key)
        })
        .collect()
}

/// The value [`seed`] wrote under `key`.
fn seeded(key: &str) -> Vec<u8> {
    let name = key.rsplit(':').next().unwrap_or(key);
    format!("value of {name}").into_bytes()
}

fn describe(answer: &[(String, Option<Vec<u8>>)]) -> String {
    let items: Vec<String> = answer
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                k.rsplit(':').next().unwrap_or(k),
                show(v.as_deref())
            )
        })
        .collect();
    format!("[{}]", items.join(", "))
}

fn get_many_single_key(p: &Probe, k: &Keys) -> Outcome {
    let keys = seed(p, k, &["a"])?;
    let answer = p.get_many(&keys)?;
    if answer.len() == 1 && answer[0].0 == keys[0] && answer[0].1 == Some(seeded(&keys[0])) {
        Ok(describe(&answer))
    } else {
        Err(format!("asked for [a], got {}", describe(&answer)))
    }
}

fn get_many_values_by_key(p: &Probe, k: &Keys) -> Outcome {
    let keys = seed(p, k, &["c", "a", "b"])?;
    let answer = p.get_many(&keys)?;
    for key in &keys {
        let found: Vec<_> = answer.iter().filter(|(ak, _)| ak == key).collect();
        if found.len() != 1 || found[0].1 != Some(seeded(key)) {
            return Err(format!(
                "asked for [c, a, b] (all present), got {}",
                describe(&answer)
            ));
        }
    }
    if answer.len() != keys.len() {
        return Err(format!("asked for [c, a, b], got {}", describe(&answer)));
    }
    Ok(describe(&answer))
}

fn get_many_in_request_order(p: &Probe, k: &Keys) -> Outcome {
    let keys = seed(p, k, &["c", "a", "b"])?;
    let answer = p.get_many(&keys)?;
    let order: Vec<&String> = answer.iter().map(|(ak, _)| ak).collect();
    if order == keys.iter().collect::<Vec<_>>() {
        Ok(describe(&answer))
    } else {
        Err(format!("asked for [c, a, b], got {}", describe(&answer)))
    }
}

fn get_many_missing_as_none(p: &Probe, k: &Keys) -> Outcome {
    let mut keys = seed(p, k, &["a", "c"])?;
    keys.insert(1, k.k("missing"));
    let answer = p.get_many(&keys)?;
    let want = [Some(seeded(&keys[0])), None, Some(seeded(&keys[2]))];
    let ok = answer.len() == 3
        && answer.iter().zip(&keys).all(|((ak, _), key)| ak == key)
        && answer.iter().zip(&want).all(|((_, v), w)| v == w);
    if ok {
        Ok(describe(&answer))
    } else {
        Err(format!(
            "asked for [a, missing, c], got {}",
            describe(&answer)
        ))
    }
}

fn get_many_duplicates(p: &Probe, k: &Keys) -> Outcome {
    let mut keys = seed(p, k, &["a", "b"])?;
    keys.insert(1, keys[0].clone());
    let answer = p.get_many(&keys)?;
    let ok = answer.len() == 3
        && answer
            .iter()
            .zip(&keys)
            .all(|((ak, v), key)| ak == key && v.as_deref() == Some(seeded(key).as_slice()));
    if ok {
        Ok(describe(&answer))
    } else {
        Err(format!("asked for [a, a, b], got {}", describe(&answer)))
    }
}

fn set_many_writes_every_key(p: &Probe, k: &Keys) -> Outcome {
    // One key that exists (overwritten), two that do not, one of them with binary bytes.
    let keys = seed(p, k, &["b"])?;
    let binary: Vec<u8> = (0..=255u8).rev().collect();
    let entries = vec![
        (k.k("c"), b"new c".to_vec()),
        (keys[0].clone(), b"new b".to_vec()),
        (k.k("a"), binary),
    ];
    p.set_many(&entries)?;
    for (key, want) in &entries {
        let got = p.get(key)?;
        let name = key.rsplit(':').next().unwrap_or(key);
        expect_bytes(
            &format!("get {name} after set-many"),
            got.as_deref(),
            Some(want),
        )?;
    }
    Ok("c, b (overwritten) and a read back exactly".into())
}
