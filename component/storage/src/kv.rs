//! The key-value store as the core sees it: a small trait over `wasi:keyvalue` draft2
//! (store, atomics, batch), plus an in-memory implementation for unit tests.
//!
//! Every read-modify-write in the core goes through [`update`], a compare-and-swap loop, so
//! two instances working on one store never lose each other's writes.

use crate::keys::{AsKey, Key};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;

/// A failure of the key-value store, or of what it holds. Its text ([`Display`](fmt::Display))
/// is for logs only; it never reaches an API response. The shell makes the host's
/// `wasi:keyvalue` errors [`KvError::Unavailable`]; no other part sees the WIT's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvError {
    /// The host's store failed or refused the call (its `wasi:keyvalue` error, in its words).
    Unavailable(String),
    /// A value in the store cannot be read as the record it should be: which one, and why.
    Corrupt(String),
    /// A record that must be there is not (it is written before anything refers to it).
    Missing(&'static str),
    /// Other writers kept winning the compare-and-swap on a key; nothing was written.
    Contended(String),
    /// A fault a test store injected, at this operation's number.
    Injected(u64),
    /// An increment of a key whose value is not a counter.
    NotACounter(String),
    /// A change the core refused met where only a store error can be returned (inside a
    /// store update): its log text.
    Refused(String),
}

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("key-value store error: ")?;
        match self {
            KvError::Unavailable(why) | KvError::Refused(why) => f.write_str(why),
            KvError::Corrupt(what) => write!(f, "corrupt {what}"),
            KvError::Missing(what) => write!(f, "no {what}"),
            KvError::Contended(key) => write!(f, "{key} kept changing"),
            KvError::Injected(n) => write!(f, "injected fault at operation {n}"),
            KvError::NotACounter(key) => write!(f, "{key} does not hold a counter"),
        }
    }
}

impl std::error::Error for KvError {}

/// The operations the core needs from a key-value bucket.
///
/// Mirrors `wasi:keyvalue/{store,atomics,batch}@0.2.0-draft2`: the shell implements it over the
/// real imports, [`MemoryKv`] implements it for unit tests.
pub trait Kv {
    /// A compare-and-swap handle: remembers the value seen by [`Kv::cas_begin`].
    type Cas;

    /// Reads one key; `None` when it does not exist.
    fn get(&self, key: &(impl AsKey + ?Sized)) -> Result<Option<Vec<u8>>, KvError>;
    /// Writes one key unconditionally.
    fn set(&self, key: &(impl AsKey + ?Sized), value: &[u8]) -> Result<(), KvError>;
    /// Writes many keys unconditionally, in one call where the host has a batch write
    /// (`wasi:keyvalue/batch.set-many`). Not atomic: after an error, any of them may have
    /// been written, as after an error part-way through one [`Kv::set`] per key (which is
    /// what this does unless an implementation has a batch of its own).
    fn set_many(&self, entries: Vec<(Key, Vec<u8>)>) -> Result<(), KvError> {
        entries.iter().try_for_each(|(k, v)| self.set(k, v))
    }
    /// Deletes one key; deleting a missing key is not an error.
    fn delete(&self, key: &(impl AsKey + ?Sized)) -> Result<(), KvError>;
    /// Reads many keys at once; the result has one entry per key, in order.
    fn get_many(&self, keys: &[impl AsKey]) -> Result<Vec<Option<Vec<u8>>>, KvError>;
    /// Atomically adds `delta` to a counter key (missing counts as 0) and returns the new value.
    fn increment(&self, key: &(impl AsKey + ?Sized), delta: i64) -> Result<i64, KvError>;
    /// Starts a compare-and-swap on `key`: returns the handle and the value it saw.
    fn cas_begin(
        &self,
        key: &(impl AsKey + ?Sized),
    ) -> Result<(Self::Cas, Option<Vec<u8>>), KvError>;
    /// Writes `value` if the key still holds what `cas_begin` saw. `Ok(false)` means another
    /// writer got there first and nothing was written.
    fn cas_swap(&self, cas: Self::Cas, value: &[u8]) -> Result<bool, KvError>;
}

/// Reads a counter kept by [`Kv::increment`] without changing it: `increment(key, 0)`.
///
/// Never read a counter through [`Kv::get`]: `wasi:keyvalue` leaves the representation of
/// an incremented value to the host (Spin's SQLite store keeps 8-byte little-endian
/// integers, Redis and our own stores decimal text), so only `increment` reads it portably.
/// A missing counter reads as 0 (and is created holding 0 on most hosts).
pub fn read_counter<K: Kv>(kv: &K, key: &(impl AsKey + ?Sized)) -> Result<i64, KvError> {
    kv.increment(key, 0)
}

/// What an [`update`] closure decides after seeing the current value.
pub enum Update<T> {
    /// Write this new value (by compare-and-swap) and return `T`.
    Write(Vec<u8>, T),
    /// Write nothing and return `T`.
    Keep(T),
}

/// Why an [`update`] did not complete.
#[derive(Debug)]
pub enum UpdateError<E> {
    /// The store failed.
    Kv(KvError),
    /// The closure refused the current value.
    Rejected(E),
    /// Other writers kept winning the race; nothing was written.
    Contended,
}

impl<E> From<KvError> for UpdateError<E> {
    fn from(e: KvError) -> Self {
        UpdateError::Kv(e)
    }
}

/// An [`update`] whose closure can only refuse with a store error, seen as a store error
/// (contention becomes one too).
impl From<UpdateError<KvError>> for KvError {
    fn from(e: UpdateError<KvError>) -> Self {
        match e {
            UpdateError::Kv(e) | UpdateError::Rejected(e) => e,
            UpdateError::Contended => KvError::Contended("a compare-and-swap's key".into()),
        }
    }
}

/// A read-modify-write's decision ([`update`]): given the current value, what to write (or
/// keep) and what to return. Taken as `&mut dyn`, so each of the component's many call sites
/// does not instantiate the loop again (the component is size-budgeted; a generic closure
/// parameter cost about 600 bytes per call site).
pub type Change<'a, T, E> = dyn FnMut(Option<&[u8]>) -> Result<Update<T>, E> + 'a;

/// How many times [`update`] retries a lost compare-and-swap before giving up.
pub const CAS_ATTEMPTS: usize = 32;

/// Read-modify-write of one key by compare-and-swap, retried while other writers win.
///
/// `f` sees the current value and decides; it may run several times, so it must not have
/// side effects beyond its return value.
pub fn update<K: Kv, T, E>(
    kv: &K,
    key: &(impl AsKey + ?Sized),
    f: &mut Change<'_, T, E>,
) -> Result<T, UpdateError<E>> {
    // The loop itself is not generic over `T` and `E` (they travel in these slots), so there
    // is one copy of it per store type instead of one per call site: the component is
    // size-budgeted.
    let mut out: Option<Result<T, E>> = None;
    let mut decide = |current: Option<&[u8]>| -> Option<Vec<u8>> {
        match f(current) {
            Ok(Update::Write(value, t)) => {
                out = Some(Ok(t));
                Some(value)
            }
            Ok(Update::Keep(t)) => {
                out = Some(Ok(t));
                None
            }
            Err(e) => {
                out = Some(Err(e));
                None
            }
        }
    };
    if !cas_loop(kv, key, &mut decide)? {
        return Err(UpdateError::Contended);
    }
    match out {
        Some(Ok(t)) => Ok(t),
        Some(Err(e)) => Err(UpdateError::Rejected(e)),
        None => Err(UpdateError::Contended),
    }
}

/// [`update`] for a change that is seldom needed (adding a key that is nearly always already
/// there): reads the value with one plain `get` and begins a compare-and-swap only when `f`
/// wants to write, running `f` again on the value the compare-and-swap sees. A keep costs
/// one store call instead of a compare-and-swap begun and dropped (three host calls over
/// `wasi:keyvalue`); a write costs one `get` more than [`update`]. Keeping on a plain read
/// is as safe as keeping inside a compare-and-swap: neither writes, so neither can lose a
/// concurrent writer's change.
pub fn update_seldom<K: Kv, T, E>(
    kv: &K,
    key: &(impl AsKey + ?Sized),
    f: &mut Change<'_, T, E>,
) -> Result<T, UpdateError<E>> {
    let seen = kv.get(key)?;
    update_seen(kv, key, seen.as_deref(), f)
}

/// [`update_seldom`] on a value the caller already read, in a batch with other keys: a keep
/// costs no store call. Only for a value whose keep cannot go stale in between, such as a
/// directory that drops an entry long after anyone could still add to it.
pub fn update_seen<K: Kv, T, E>(
    kv: &K,
    key: &(impl AsKey + ?Sized),
    seen: Option<&[u8]>,
    f: &mut Change<'_, T, E>,
) -> Result<T, UpdateError<E>> {
    match f(seen) {
        Ok(Update::Keep(t)) => Ok(t),
        Err(e) => Err(UpdateError::Rejected(e)),
        Ok(Update::Write(..)) => update(kv, key, f),
    }
}

/// Given the current value, the value to write (or `None`: stop without writing).
type Decide<'a> = dyn FnMut(Option<&[u8]>) -> Option<Vec<u8>> + 'a;

/// The compare-and-swap loop behind [`update`]: `decide` returns the value to write, or
/// `None` to stop without writing. `Ok(false)` means every attempt lost the race.
fn cas_loop<K: Kv>(
    kv: &K,
    key: &(impl AsKey + ?Sized),
    decide: &mut Decide<'_>,
) -> Result<bool, KvError> {
    for _ in 0..CAS_ATTEMPTS {
        let (cas, current) = kv.cas_begin(key)?;
        match decide(current.as_deref()) {
            None => return Ok(true),
            Some(value) => {
                if kv.cas_swap(cas, &value)? {
                    return Ok(true);
                }
            }
        }
    }
    Ok(false)
}

/// An in-memory [`Kv`] for unit tests, with optional fault injection: every operation counts,
/// and the operation whose number is `fail_at` fails.
#[derive(Default)]
pub struct MemoryKv {
    inner: RefCell<MemoryInner>,
}

#[derive(Default)]
struct MemoryInner {
    map: BTreeMap<String, Vec<u8>>,
    ops: u64,
    keys_read: u64,
    cas_begun: u64,
    fail_at: Option<u64>,
}

impl MemoryKv {
    /// An empty store with no faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes operation number `n` (1-based, counted from now on) fail; `None` clears it.
    pub fn fail_at(&self, n: Option<u64>) {
        let mut inner = self.inner.borrow_mut();
        inner.fail_at = n.map(|n| inner.ops + n);
    }

    /// Number of operations performed so far.
    pub fn ops(&self) -> u64 {
        self.inner.borrow().ops
    }

    /// Number of keys read so far (by `get`, `get_many` and `cas_begin`): a batch of many
    /// keys is one operation, and costs the store one read per key.
    pub fn keys_read(&self) -> u64 {
        self.inner.borrow().keys_read
    }

    /// Number of compare-and-swaps begun so far (each is two or three host calls over
    /// `wasi:keyvalue`, where a plain read is one).
    pub fn cas_begun(&self) -> u64 {
        self.inner.borrow().cas_begun
    }

    /// A copy of every key and value, for assertions.
    pub fn dump(&self) -> BTreeMap<String, Vec<u8>> {
        self.inner.borrow().map.clone()
    }

    fn op(&self) -> Result<std::cell::RefMut<'_, MemoryInner>, KvError> {
        let mut inner = self.inner.borrow_mut();
        inner.ops += 1;
        if inner.fail_at == Some(inner.ops) {
            return Err(KvError::Injected(inner.ops));
        }
        Ok(inner)
    }
}

impl Kv for MemoryKv {
    type Cas = (String, Option<Vec<u8>>);

    fn get(&self, key: &(impl AsKey + ?Sized)) -> Result<Option<Vec<u8>>, KvError> {
        let key = key.key_str();
        let mut inner = self.op()?;
        inner.keys_read += 1;
        Ok(inner.map.get(key).cloned())
    }

    fn set(&self, key: &(impl AsKey + ?Sized), value: &[u8]) -> Result<(), KvError> {
        let key = key.key_str();
        self.op()?.map.insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    fn delete(&self, key: &(impl AsKey + ?Sized)) -> Result<(), KvError> {
        let key = key.key_str();
        self.op()?.map.remove(key);
        Ok(())
    }

    fn get_many(&self, keys: &[impl AsKey]) -> Result<Vec<Option<Vec<u8>>>, KvError> {
        let mut inner = self.op()?;
        inner.keys_read += keys.len() as u64;
        Ok(keys
            .iter()
            .map(|k| inner.map.get(k.key_str()).cloned())
            .collect())
    }

    fn increment(&self, key: &(impl AsKey + ?Sized), delta: i64) -> Result<i64, KvError> {
        let key = key.key_str();
        // Kept as 8 little-endian bytes, as Spin's SQLite store does (Redis and the host's
        // stores keep decimal text): a counter read through `get` fails the unit tests.
        let mut inner = self.op()?;
        let current = match inner.map.get(key) {
            None => 0,
            Some(bytes) => <[u8; 8]>::try_from(bytes.as_slice())
                .map(i64::from_le_bytes)
                .map_err(|_| KvError::NotACounter(key.to_owned()))?,
        };
        let next = current + delta;
        inner
            .map
            .insert(key.to_owned(), next.to_le_bytes().to_vec());
        Ok(next)
    }

    fn cas_begin(
        &self,
        key: &(impl AsKey + ?Sized),
    ) -> Result<(Self::Cas, Option<Vec<u8>>), KvError> {
        let key = key.key_str();
        let mut inner = self.op()?;
        inner.cas_begun += 1;
        inner.keys_read += 1;
        let seen = inner.map.get(key).cloned();
        Ok(((key.to_owned(), seen.clone()), seen))
    }

    fn cas_swap(&self, (key, seen): Self::Cas, value: &[u8]) -> Result<bool, KvError> {
        let mut inner = self.op()?;
        if inner.map.get(&key) != seen.as_ref() {
            return Ok(false);
        }
        inner.map.insert(key, value.to_vec());
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_writes_through_cas() {
        let kv = MemoryKv::new();
        let out = update(&kv, "k", &mut |cur| {
            assert!(cur.is_none());
            Ok::<_, ()>(Update::Write(b"1".to_vec(), 7))
        });
        assert_eq!(out.ok(), Some(7));
        assert_eq!(kv.get("k").ok().flatten().as_deref(), Some(&b"1"[..]));
    }

    #[test]
    fn update_retries_when_another_writer_wins() {
        let kv = MemoryKv::new();
        let mut first = true;
        let out = update(&kv, "k", &mut |cur| -> Result<_, ()> {
            if first {
                first = false;
                // Someone else writes between our read and our swap.
                kv.set("k", b"other").map_err(|_| ())?;
                return Ok(Update::Write(b"mine".to_vec(), "lost"));
            }
            assert_eq!(cur, Some(&b"other"[..]));
            Ok(Update::Write(b"mine".to_vec(), "won"))
        });
        assert_eq!(out.ok(), Some("won"));
    }

    /// Adds `x` to the comma-separated set in the value, keeping it when already there.
    fn add(x: &str) -> impl FnMut(Option<&[u8]>) -> Result<Update<bool>, ()> + '_ {
        move |cur| {
            let cur = std::str::from_utf8(cur.unwrap_or_default()).map_err(|_| ())?;
            if cur.split(',').any(|s| s == x) {
                return Ok(Update::Keep(false));
            }
            let next = if cur.is_empty() {
                x.to_owned()
            } else {
                format!("{cur},{x}")
            };
            Ok(Update::Write(next.into_bytes(), true))
        }
    }

    #[test]
    fn update_seldom_keeps_without_a_compare_and_swap_and_writes_through_one() {
        let kv = MemoryKv::new();
        assert_eq!(update_seldom(&kv, "set", &mut add("a")).ok(), Some(true));
        assert_eq!(kv.cas_begun(), 1, "a write goes through compare-and-swap");
        let ops = kv.ops();
        assert_eq!(update_seldom(&kv, "set", &mut add("a")).ok(), Some(false));
        assert_eq!(kv.cas_begun(), 1, "a keep begins no compare-and-swap");
        assert_eq!(kv.ops() - ops, 1, "a keep is one read");
        assert_eq!(update_seldom(&kv, "set", &mut add("b")).ok(), Some(true));
        assert_eq!(kv.get("set").ok().flatten().as_deref(), Some(&b"a,b"[..]));
    }

    #[test]
    fn update_seldom_decides_again_on_what_the_compare_and_swap_sees() {
        // Between the plain read and the compare-and-swap another writer adds "b": the
        // write must keep it, not overwrite it with what the first read saw.
        let kv = MemoryKv::new();
        let mut first = true;
        let out = update_seldom(&kv, "set", &mut |cur| {
            if first {
                first = false;
                kv.set("set", b"b").map_err(|_| ())?;
            }
            add("a")(cur)
        });
        assert_eq!(out.ok(), Some(true));
        assert_eq!(kv.get("set").ok().flatten().as_deref(), Some(&b"b,a"[..]));
    }

    #[test]
    fn injected_fault_fails_exactly_that_operation() {
        let kv = MemoryKv::new();
        kv.fail_at(Some(2));
        assert!(kv.set("a", b"1").is_ok());
        assert!(kv.get("a").is_err());
        assert!(kv.get("a").is_ok());
    }
}
