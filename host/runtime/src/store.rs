//! Key-value backends behind the host's `wasi:keyvalue` draft2 implementation.
//!
//! [`KvBackend`] is the small trait a local backend implements (compare-and-swap included):
//! [`MemoryStore`], the in-memory one used in simulation, with fault injection, and the
//! embedded store. [`RemoteKv`] is the same operations as futures, for a backend that
//! waits on the network (Redis), so no thread blocks on a reply. [`KvStore`] is either, as the
//! runtime holds it.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// A store failure, surfaced to the guest as `wasi:keyvalue/store.error.other` with its
/// [`Display`](std::fmt::Display) text (the host's bindings map it; the guest sees no other
/// shape of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The backend failed or refused: I/O, the engine, the network, a server's error reply,
    /// an unusable address. Its own words, secrets scrubbed.
    Backend(String),
    /// A fault [`MemoryStore`]'s [`Faults`] injected, at this operation's number.
    Injected(u64),
    /// An increment of a key whose value is not a counter.
    NotACounter(String),
    /// An increment that would take a counter past `i64`.
    CounterOverflow(String),
    /// A key in the store is not UTF-8 (a listing cannot name it).
    KeyNotUtf8,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Backend(what) => f.write_str(what),
            StoreError::Injected(n) => write!(f, "injected fault (operation {n})"),
            StoreError::NotACounter(key) => write!(f, "{key} does not hold a counter"),
            StoreError::CounterOverflow(key) => write!(f, "counter {key} would overflow"),
            StoreError::KeyNotUtf8 => f.write_str("store: a key is not UTF-8"),
        }
    }
}

impl std::error::Error for StoreError {}

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// A key-value backend: one flat keyspace (the `default` bucket; the `counters` bucket is
/// [`KvBackend::counters`]).
///
/// All methods are atomic on their own; [`KvBackend::compare_and_swap`] is the primitive
/// behind `wasi:keyvalue/atomics.swap`.
pub trait KvBackend: Send + Sync + 'static {
    /// Reads a key.
    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>>;
    /// Writes a key.
    fn set(&self, key: &str, value: &[u8]) -> StoreResult<()>;
    /// Deletes a key (missing is fine).
    fn delete(&self, key: &str) -> StoreResult<()>;
    /// Keys in order after `cursor` (exclusive), at most `limit` of them.
    fn list_keys(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>>;
    /// Adds `delta` to the decimal counter at `key` (missing = 0), returning the new value.
    fn increment(&self, key: &str, delta: i64) -> StoreResult<i64>;
    /// Writes `new` if the key currently holds `expected` (`None` = absent). `Ok(false)` when
    /// it did not.
    fn compare_and_swap(&self, key: &str, expected: Option<&[u8]>, new: &[u8])
    -> StoreResult<bool>;
    /// Reads many keys; one entry per key, in order.
    fn get_many(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }
    /// Writes many keys, in order. Not atomic: after an error any of them may have been
    /// written. By default one [`KvBackend::set`] each; a store that can write them at once
    /// (the embedded store: one batch) does.
    fn set_many(&self, entries: &[(String, Vec<u8>)]) -> StoreResult<()> {
        entries.iter().try_for_each(|(k, v)| self.set(k, v))
    }
    /// The `counters` bucket's store (the component's rate-limit counts, which need no
    /// durability), if it is not this one: the embedded store keeps them in memory, off its journal.
    fn counters(&self) -> Option<Arc<dyn KvBackend>> {
        None
    }
    /// Whether a write may wait on the engine for milliseconds (a flush of the embedded
    /// store's memtable): [`KvStore`] then lets the runtime move its other work off the
    /// calling thread while it waits.
    fn writes_may_stall(&self) -> bool {
        false
    }
    /// Whether [`KvBackend::settle`] has anything to do (the embedded store under `serve
    /// --fsync-always`): when not, [`KvStore::settle`] does not call it.
    fn settles(&self) -> bool {
        false
    }
    /// Returns once every write applied so far is as durable as the store promises an
    /// answer (the embedded store under `serve --fsync-always`: synced to disk). The host
    /// calls it before an answer or an attempt leaves and when an invocation ends; by
    /// default there is nothing to wait for.
    fn settle(&self) -> StoreResult<()> {
        Ok(())
    }
}

/// A store operation in flight at a [`RemoteKv`].
pub type KvFuture<'a, T> = Pin<Box<dyn Future<Output = StoreResult<T>> + Send + 'a>>;

/// A backend that waits on the network: the operations of [`KvBackend`], with the same
/// meaning, as futures.
pub trait RemoteKv: Send + Sync + 'static {
    /// Reads a key.
    fn get<'a>(&'a self, key: &'a str) -> KvFuture<'a, Option<Vec<u8>>>;
    /// Writes a key.
    fn set<'a>(&'a self, key: &'a str, value: &'a [u8]) -> KvFuture<'a, ()>;
    /// Deletes a key (missing is fine).
    fn delete<'a>(&'a self, key: &'a str) -> KvFuture<'a, ()>;
    /// Keys in order after `cursor` (exclusive), at most `limit` of them.
    fn list_keys<'a>(&'a self, cursor: Option<&'a str>, limit: usize) -> KvFuture<'a, Vec<String>>;
    /// Adds `delta` to the decimal counter at `key` (missing = 0), returning the new value.
    fn increment<'a>(&'a self, key: &'a str, delta: i64) -> KvFuture<'a, i64>;
    /// Writes `new` if the key currently holds `expected` (`None` = absent); `false` when
    /// it did not.
    fn compare_and_swap<'a>(
        &'a self,
        key: &'a str,
        expected: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> KvFuture<'a, bool>;
    /// Reads many keys; one entry per key, in order.
    fn get_many<'a>(&'a self, keys: &'a [String]) -> KvFuture<'a, Vec<Option<Vec<u8>>>>;
    /// Writes many keys, in order; not atomic (after an error any of them may have been
    /// written).
    fn set_many<'a>(&'a self, entries: &'a [(String, Vec<u8>)]) -> KvFuture<'a, ()>;
}

/// The store a runtime's instances use: a local backend, answered in place, or a remote one,
/// awaited (the instance's fiber yields to the executor while the reply is on its way).
#[derive(Clone)]
pub enum KvStore {
    /// In this process (memory, the embedded store).
    Local(Arc<dyn KvBackend>),
    /// Over the network (Redis).
    Remote(Arc<dyn RemoteKv>),
}

impl KvStore {
    /// The store behind the `counters` bucket ([`KvBackend::counters`]; this one where the
    /// backend has none of its own, as Redis and the in-memory store).
    pub fn counters(&self) -> KvStore {
        match self {
            KvStore::Local(kv) => kv.counters().map_or_else(|| self.clone(), KvStore::Local),
            KvStore::Remote(_) => self.clone(),
        }
    }

    /// Reads a key.
    pub async fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        match self {
            KvStore::Local(kv) => kv.get(key),
            KvStore::Remote(kv) => kv.get(key).await,
        }
    }

    /// Writes a key.
    pub async fn set(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        match self {
            KvStore::Local(kv) => write_locally(kv.as_ref(), || kv.set(key, value)),
            KvStore::Remote(kv) => kv.set(key, value).await,
        }
    }

    /// Deletes a key (missing is fine).
    pub async fn delete(&self, key: &str) -> StoreResult<()> {
        match self {
            KvStore::Local(kv) => write_locally(kv.as_ref(), || kv.delete(key)),
            KvStore::Remote(kv) => kv.delete(key).await,
        }
    }

    /// Keys in order after `cursor` (exclusive), at most `limit` of them.
    pub async fn list_keys(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        match self {
            KvStore::Local(kv) => kv.list_keys(cursor, limit),
            KvStore::Remote(kv) => kv.list_keys(cursor, limit).await,
        }
    }

    /// Adds `delta` to the decimal counter at `key`, returning the new value.
    pub async fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        match self {
            KvStore::Local(kv) => write_locally(kv.as_ref(), || kv.increment(key, delta)),
            KvStore::Remote(kv) => kv.increment(key, delta).await,
        }
    }

    /// Writes `new` if the key currently holds `expected` (`None` = absent).
    pub async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<bool> {
        match self {
            KvStore::Local(kv) => {
                write_locally(kv.as_ref(), || kv.compare_and_swap(key, expected, new))
            }
            KvStore::Remote(kv) => kv.compare_and_swap(key, expected, new).await,
        }
    }

    /// Reads many keys; one entry per key, in order.
    pub async fn get_many(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        match self {
            KvStore::Local(kv) => kv.get_many(keys),
            KvStore::Remote(kv) => kv.get_many(keys).await,
        }
    }

    /// Waits until every write applied so far is as durable as an answer needs
    /// ([`KvBackend::settle`]; a remote store's writes are as durable as its server makes
    /// them when they return).
    pub async fn settle(&self) -> StoreResult<()> {
        match self {
            // A sync may take milliseconds: the runtime's other work moves off the thread.
            KvStore::Local(kv) if kv.settles() => match multi_thread() {
                true => tokio::task::block_in_place(|| kv.settle()),
                false => kv.settle(),
            },
            KvStore::Local(_) | KvStore::Remote(_) => Ok(()),
        }
    }

    /// Writes many keys, in order; not atomic.
    pub async fn set_many(&self, entries: &[(String, Vec<u8>)]) -> StoreResult<()> {
        match self {
            KvStore::Local(kv) => write_locally(kv.as_ref(), || kv.set_many(entries)),
            KvStore::Remote(kv) => kv.set_many(entries).await,
        }
    }
}

/// Runs `write`, a write to the local backend `kv`. Where `kv`'s writes may stall and this is
/// a worker of a multi-threaded tokio runtime, the runtime hands the thread's other work to
/// another thread meanwhile (`block_in_place`), so one stalled write does not hold the
/// server's requests and reads. `serve`'s store is the metered one, which does not pass
/// [`KvBackend::writes_may_stall`] on: its writes run on their thread (docs/design/storage.md,
/// "The tail under load": what handing them off would gain is not measured yet).
fn write_locally<T>(kv: &dyn KvBackend, write: impl FnOnce() -> T) -> T {
    // The backend asked first: a store whose writes never stall (memory) pays nothing more.
    if kv.writes_may_stall() && multi_thread() {
        tokio::task::block_in_place(write)
    } else {
        write()
    }
}

/// Whether this is a worker of a multi-threaded tokio runtime (which `block_in_place`
/// needs).
fn multi_thread() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// Which store operations fail on purpose (simulation only).
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Fail the operation with this number (1-based, counted over the store's lifetime).
    pub fail_nth: Option<u64>,
    /// Fail every operation touching a key with one of these prefixes.
    pub fail_prefixes: Vec<String>,
    /// Fail every operation while set.
    pub fail_all: bool,
    /// Fail this many operations per thousand, chosen by a hash of `(seed, operation
    /// number)`: random-looking, and the same every time for the same sequence of calls.
    pub fail_per_mille: u32,
    /// Seed of `fail_per_mille`.
    pub seed: u64,
}

/// Behaviours of other hosts' key-value stores that `wasi:keyvalue` allows or that are
/// known bugs, reproduced by the in-memory store so the component is tested against them
/// (simulation only; docs/embedding.md, "Key-value contract").
#[derive(Debug, Clone, Copy, Default)]
pub struct Quirks {
    /// `increment` keeps a counter as 8 little-endian bytes, as Spin's SQLite store does
    /// (the interface leaves the representation to the host): `get` of a counter returns
    /// those bytes, and `increment` of a value that is not 8 bytes fails.
    pub counters_le_bytes: bool,
    /// `get-many` of more than one key fails, as Spin 4.0.2's Redis store does (it sends
    /// `KEYS k1 k2 ...`).
    pub batch_read_fails: bool,
    /// Every compare-and-swap reports failure, whether it applied or not, as Spin 4.0.2's
    /// Redis store does (its `UNWATCH <key>` after EXEC is refused).
    pub swap_reports_failure: bool,
}

/// SplitMix64 of `(seed, n)`: decides whether random fault number `n` fires.
fn fault_roll(seed: u64, n: u64) -> u64 {
    let mut z = seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The in-memory backend: a sorted map behind a mutex, with fault injection and an
/// operation counter.
#[derive(Default)]
pub struct MemoryStore {
    inner: Mutex<MemoryInner>,
}

#[derive(Default)]
struct MemoryInner {
    map: BTreeMap<String, Vec<u8>>,
    ops: u64,
    bytes_written: u64,
    faults: Faults,
    quirks: Quirks,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the fault plan.
    pub fn set_faults(&self, faults: Faults) {
        self.lock().faults = faults;
    }

    /// Makes the store behave like another host's ([`Quirks`]).
    pub fn set_quirks(&self, quirks: Quirks) {
        self.lock().quirks = quirks;
    }

    /// Operations performed so far (faulted ones included).
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Bytes of values written so far (by set, a successful compare-and-swap, increment).
    pub fn bytes_written(&self) -> u64 {
        self.lock().bytes_written
    }

    /// A copy of the whole keyspace, for assertions.
    pub fn snapshot(&self) -> BTreeMap<String, Vec<u8>> {
        self.lock().map.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        // A panic while holding the lock cannot leave the map half-written (every operation
        // is a single map call), so a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one operation on `keys` and fails it if the fault plan says so.
    fn op(&self, keys: &[&str]) -> StoreResult<std::sync::MutexGuard<'_, MemoryInner>> {
        let mut inner = self.lock();
        inner.ops += 1;
        let n = inner.ops;
        let f = &inner.faults;
        if f.fail_all
            || f.fail_nth == Some(n)
            || (f.fail_per_mille > 0 && fault_roll(f.seed, n) % 1000 < u64::from(f.fail_per_mille))
            || keys
                .iter()
                .any(|k| f.fail_prefixes.iter().any(|p| k.starts_with(p.as_str())))
        {
            return Err(StoreError::Injected(n));
        }
        Ok(inner)
    }
}

impl KvBackend for MemoryStore {
    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(self.op(&[key])?.map.get(key).cloned())
    }

    fn set(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        let mut inner = self.op(&[key])?;
        inner.bytes_written += value.len() as u64;
        inner.map.insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    fn delete(&self, key: &str) -> StoreResult<()> {
        self.op(&[key])?.map.remove(key);
        Ok(())
    }

    fn list_keys(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        Ok(keys_after(&self.op(&[])?.map, cursor, limit))
    }

    fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        let mut inner = self.op(&[key])?;
        let le = inner.quirks.counters_le_bytes;
        let current = match inner.map.get(key) {
            Some(bytes) if le => <[u8; 8]>::try_from(bytes.as_slice())
                .map(i64::from_le_bytes)
                .map_err(|_| StoreError::NotACounter(key.to_owned()))?,
            value => parse_counter(key, value)?,
        };
        let next = current
            .checked_add(delta)
            .ok_or_else(|| StoreError::CounterOverflow(key.to_owned()))?;
        let bytes = match le {
            true => next.to_le_bytes().to_vec(),
            false => next.to_string().into_bytes(),
        };
        inner.bytes_written += bytes.len() as u64;
        inner.map.insert(key.to_owned(), bytes);
        Ok(next)
    }

    fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<bool> {
        let mut inner = self.op(&[key])?;
        if inner.map.get(key).map(Vec::as_slice) != expected {
            return Ok(false);
        }
        inner.bytes_written += new.len() as u64;
        inner.map.insert(key.to_owned(), new.to_vec());
        Ok(!inner.quirks.swap_reports_failure)
    }

    fn get_many(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let inner = self.op(&refs)?;
        if inner.quirks.batch_read_fails && keys.len() > 1 {
            return Err(StoreError::Backend(
                "ResponseError: wrong number of arguments for 'keys' command".into(),
            ));
        }
        Ok(keys.iter().map(|k| inner.map.get(k).cloned()).collect())
    }

    /// One operation, as a host's batch call is (a fault fails the whole batch before it
    /// writes anything; the component's own unit tests fail batches part-way).
    fn set_many(&self, entries: &[(String, Vec<u8>)]) -> StoreResult<()> {
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
        let mut inner = self.op(&keys)?;
        for (key, value) in entries {
            inner.bytes_written += value.len() as u64;
            inner.map.insert(key.clone(), value.clone());
        }
        Ok(())
    }
}

/// The keys of a sorted map after `cursor` (exclusive), at most `limit` of them.
pub fn keys_after<V>(map: &BTreeMap<String, V>, cursor: Option<&str>, limit: usize) -> Vec<String> {
    let from = match cursor {
        Some(c) => std::ops::Bound::Excluded(c),
        None => std::ops::Bound::Unbounded,
    };
    map.range::<str, _>((from, std::ops::Bound::Unbounded))
        .take(limit)
        .map(|(k, _)| k.clone())
        .collect()
}

/// `delta` added to `key`'s decimal counter `value` (missing = 0): the new value, or an error
/// if `value` holds no counter or the sum would overflow.
pub fn add_to_counter(key: &str, value: Option<&Vec<u8>>, delta: i64) -> StoreResult<i64> {
    parse_counter(key, value)?
        .checked_add(delta)
        .ok_or_else(|| StoreError::CounterOverflow(key.to_owned()))
}

/// Parses a decimal counter value (missing = 0).
pub fn parse_counter(key: &str, value: Option<&Vec<u8>>) -> StoreResult<i64> {
    match value {
        None => Ok(0),
        Some(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| StoreError::NotACounter(key.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cas_only_swaps_what_it_saw() {
        let s = MemoryStore::new();
        assert_eq!(s.compare_and_swap("k", None, b"1"), Ok(true));
        assert_eq!(s.compare_and_swap("k", None, b"2"), Ok(false));
        assert_eq!(s.compare_and_swap("k", Some(b"1"), b"2"), Ok(true));
        assert_eq!(s.get("k"), Ok(Some(b"2".to_vec())));
    }

    #[test]
    fn faults_by_number_and_prefix() {
        let s = MemoryStore::new();
        s.set_faults(Faults {
            fail_nth: Some(2),
            fail_prefixes: vec!["faulty:".into()],
            ..Faults::default()
        });
        assert!(s.set("a", b"1").is_ok());
        assert!(s.get("a").is_err());
        assert!(s.get("a").is_ok());
        assert!(s.get("faulty:1").is_err());
        assert!(s.get_many(&["a".into(), "faulty:2".into()]).is_err());
    }

    #[test]
    fn random_faults_hit_the_rate_and_replay_exactly() {
        let run = |seed| {
            let s = MemoryStore::new();
            s.set_faults(Faults {
                fail_per_mille: 50,
                seed,
                ..Faults::default()
            });
            (0..10_000)
                .map(|_| s.get("k").is_err())
                .collect::<Vec<bool>>()
        };
        let a = run(7);
        let failed = a.iter().filter(|f| **f).count();
        assert!((400..600).contains(&failed), "{failed} of 10000 at 5 %");
        assert_eq!(a, run(7), "the same seed fails the same operations");
        assert_ne!(a, run(8));
    }

    #[test]
    fn list_keys_pages_in_order() {
        let s = MemoryStore::new();
        for k in ["c", "a", "b"] {
            s.set(k, b"").expect("set");
        }
        assert_eq!(s.list_keys(None, 2), Ok(vec!["a".into(), "b".into()]));
        assert_eq!(s.list_keys(Some("b"), 2), Ok(vec!["c".into()]));
    }
}
