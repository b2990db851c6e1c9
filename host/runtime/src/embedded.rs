//! The embedded durable store of `edgehook serve`: a thin adapter over **fjall**, an LSM-tree
//! key-value engine in Rust (docs/design/storage.md says why this engine, with the
//! measurements), one keyspace `kv` in the directory `fjall/` of the store's directory.
//!
//! - **A process kill loses nothing acknowledged.** fjall writes every change to its journal
//!   and hands it to the operating system before the write returns (its default
//!   `PersistMode::Buffer`); a reopened store replays the journal.
//! - **A power loss loses at most the [`Durability`] window.** A thread of the store fsyncs
//!   the journal every [`Durability::Every`] period (100 ms by default).
//! - **Under [`Durability::Answer`] (`serve --fsync-always`) nothing is answered before it
//!   is on stable storage:** a write returns once applied, and the host calls
//!   [`KvBackend::settle`] before an answer or an attempt leaves and when an invocation
//!   ends; one fsync
//!   then covers every write applied before it, those of the other requests in flight too
//!   ([`GroupCommit::barrier`]). A request costs one fsync, shared, however many writes it
//!   made. The sync thread of [`Durability::Every`] runs as well, for writes no answer
//!   follows. After a failed fsync every barrier fails: the store must be opened again.
//! - **Under [`Durability::Always`] a write returns only after an fsync that began after it
//!   was applied**, and the writes in flight share one ([`GroupCommit`]): the fsync runs
//!   outside the write lock, and a writer whose write an fsync already covers, begun or
//!   finished, does not sync again. A failed fsync fails every write it was to cover, even
//!   if a later one succeeds (fjall then refuses further writes: a failed fsync may have
//!   dropped what it could not write). fjall holds its journal's lock during an fsync, so
//!   writes still wait for the fsync in progress; what the group saves is the fsyncs after
//!   it.
//! - **Compare-and-swap and increment are atomic.** Every write takes one mutex, so a read
//!   followed by a write cannot interleave with another write (fjall's own single-writer
//!   transactions serialize writers the same way); reads take no lock. A batch is one fjall
//!   write batch: all of it, or none, also after a crash.
//! - **The `counters` bucket** (the rate limits' counts, which need no durability) lives in
//!   memory beside the engine, never in its journal.
//! - **One process at a time:** the directory's `lock` file is held (`flock`) while the store
//!   is open, so a second `serve` on the same data directory stops at once. A copy of the
//!   store while it is open is made by the process that has it open ([`FjallStore::copy_to`]:
//!   one snapshot, written as a new store); `edgehook backup` asks a running `serve` for one
//!   over its control socket.
//! - **No silent surprises:** a directory written in the format of earlier builds is refused
//!   with one line saying what was found and what to do ([`open`]); it is never read as empty.

use crate::store::{KvBackend, MemoryStore, StoreError, StoreResult, add_to_counter};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};
use std::fs::{File, OpenOptions};
use std::ops::Bound;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

/// When acknowledged writes reach stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Before the write returns: survives a power loss at once, costs an fsync per write
    /// (shared by the writes in flight).
    Always,
    /// Before the answer that follows the write ([`KvBackend::settle`], which the host calls
    /// before it answers): what was answered survives a power loss, for one fsync a request
    /// (shared by the requests in flight); writes no answer follows are synced on
    /// [`Durability::DEFAULT`]'s timer.
    Answer,
    /// On a timer: survives a process crash at once, a power loss once the interval has
    /// passed.
    Every(Duration),
}

impl Durability {
    /// `serve`'s default: stable storage within 100 ms.
    pub const DEFAULT: Durability = Durability::Every(EVERY);
}

/// The period of [`Durability::DEFAULT`]'s sync thread.
const EVERY: Duration = Duration::from_millis(100);

/// fjall's database directory in the store's directory.
pub const DB_DIR: &str = "fjall";
const KEYSPACE: &str = "kv";
/// Held locked (`flock`) while a process has the store open.
const LOCK_FILE: &str = "lock";
/// What the stores of earlier builds kept their data in (a hand-built log; SQLite).
const OLD_FORMATS: [(&str, &str); 2] = [
    ("kv.log", "the hand-built log store"),
    ("edgehook.sqlite3", "a SQLite store"),
];
/// fjall's block cache.
const CACHE_BYTES: u64 = 32 << 20;

/// The embedded store (see the module docs). Clones share one open store; the last one
/// dropped closes it, there and then (its sync thread never holds the store past a drop, so
/// the directory is free for the next open as soon as the drop returns).
pub struct FjallStore {
    /// `None` only inside `drop`.
    shared: Option<Arc<Shared>>,
    /// Held by the sync thread while it uses the store, and by a handle while it drops its
    /// reference.
    gate: Arc<Mutex<()>>,
}

impl Clone for FjallStore {
    fn clone(&self) -> Self {
        FjallStore {
            shared: self.shared.clone(),
            gate: self.gate.clone(),
        }
    }
}

impl Drop for FjallStore {
    fn drop(&mut self) {
        let _gate = lock(&self.gate);
        drop(self.shared.take());
    }
}

/// Locks `m`; the mutexes of this module guard no data, so a poisoned one is as good.
fn lock(m: &Mutex<()>) -> MutexGuard<'_, ()> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// Syncs fjall's journal to stable storage.
    fn sync(&self) -> StoreResult<()> {
        self.db.persist(PersistMode::SyncData).map_err(err)
    }
}

struct Shared {
    db: Database,
    kv: Keyspace,
    /// Held by every write (see the module docs).
    writes: Mutex<()>,
    durability: Durability,
    /// The syncs of [`Durability::Always`] and [`Durability::Answer`].
    commit: GroupCommit,
    counters: Arc<MemoryStore>,
    _lock: File,
}

/// What a copy of the store holds ([`FjallStore::copy_to`], [`backup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    /// Keys copied.
    pub keys: u64,
    /// Bytes the copy takes on disk.
    pub bytes: u64,
}

fn err(e: fjall::Error) -> StoreError {
    StoreError::Backend(format!("store: {e}"))
}

fn io_err(e: fjall::Error) -> std::io::Error {
    std::io::Error::other(format!("store: {e}"))
}

/// Opens (or creates) the store in `dir`: see [`FjallStore::open`].
pub fn open(dir: &Path, durability: Durability) -> std::io::Result<FjallStore> {
    FjallStore::open(dir, durability)
}

/// Opens fjall's database in `dir` and the store's keyspace.
fn open_db(dir: &Path) -> fjall::Result<(Database, Keyspace)> {
    let db = Database::builder(dir).cache_size(CACHE_BYTES).open()?;
    // fjall's defaults otherwise (memtables of 64 MiB, leveled compaction, two workers):
    // smaller memtables shorten the stall a write meets at a flush but compact more often,
    // and measured no better (BENCHMARKS.md, "The embedded store").
    let kv = db.keyspace(KEYSPACE, KeyspaceCreateOptions::default)?;
    Ok((db, kv))
}

impl FjallStore {
    /// Opens (or creates) the store in `dir`, and starts its sync thread under
    /// [`Durability::Every`]. Fails if another process has it open, or if `dir` holds the
    /// format of an earlier build (see the module docs).
    pub fn open(dir: &Path, durability: Durability) -> std::io::Result<Self> {
        let lock = prepare(dir)?;
        let (db, kv) = open_db(&dir.join(DB_DIR)).map_err(io_err)?;
        let gate = Arc::new(Mutex::new(()));
        let shared = Arc::new(Shared {
            db,
            kv,
            writes: Mutex::new(()),
            durability,
            commit: GroupCommit::default(),
            counters: Arc::new(MemoryStore::new()),
            _lock: lock,
        });
        let period = match durability {
            Durability::Every(period) => Some(period),
            Durability::Answer => Some(EVERY),
            Durability::Always => None,
        };
        if let Some(period) = period {
            sync_thread(Arc::downgrade(&shared), gate.clone(), period)?;
        }
        Ok(FjallStore {
            shared: Some(shared),
            gate,
        })
    }

    fn shared(&self) -> &Shared {
        self.shared.as_deref().expect("taken only by drop")
    }

    /// Forces every acknowledged write to stable storage now.
    pub fn flush(&self) -> StoreResult<()> {
        self.shared().db.persist(PersistMode::SyncAll).map_err(err)
    }

    /// Number of keys (a scan: for tools and tests, not the hot path).
    pub fn len(&self) -> StoreResult<u64> {
        self.shared().kv.len().map(|n| n as u64).map_err(err)
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> StoreResult<bool> {
        self.shared().kv.is_empty().map_err(err)
    }

    /// Copies the store, as one snapshot of one moment, to a new store in `to` (which must
    /// not exist or be empty), synced to disk, while writes go on.
    pub fn copy_to(&self, to: &Path) -> std::io::Result<Copied> {
        refuse_non_empty(to)?;
        let snapshot = self.shared().db.snapshot();
        let copy = FjallStore::open(to, Durability::Always)?;
        let mut keys = 0u64;
        let mut batch = copy.shared().db.batch();
        for item in snapshot.iter(&self.shared().kv) {
            let (key, value) = item.into_inner().map_err(io_err)?;
            batch.insert(&copy.shared().kv, key, value);
            keys += 1;
            if batch.len() >= 10_000 {
                let full = std::mem::replace(&mut batch, copy.shared().db.batch());
                full.commit().map_err(io_err)?;
            }
        }
        batch.commit().map_err(io_err)?;
        copy.flush().map_err(std::io::Error::other)?;
        drop(copy);
        Ok(Copied {
            keys,
            bytes: disk_bytes(to)?,
        })
    }

    /// The fsyncs made under [`Durability::Always`] (one per group of writes) and
    /// [`Durability::Answer`] (one per group of answers) so far, the sync thread's not
    /// counted: for tests and metrics.
    pub fn syncs(&self) -> u64 {
        self.shared().commit.syncs()
    }

    /// Runs the write `f` under the write lock, numbering it for the group commit; then, if
    /// every write must be synced, waits for a sync that covers it (after the lock is let
    /// go: see [`GroupCommit`]).
    fn write<T>(&self, f: impl FnOnce(&Keyspace) -> StoreResult<T>) -> StoreResult<T> {
        let shared = self.shared();
        let (out, seq) = {
            let _guard = self.writes();
            let out = f(&shared.kv)?;
            (out, shared.commit.applied())
        };
        if shared.durability == Durability::Always {
            shared.commit.wait(seq, || shared.sync())?;
        }
        Ok(out)
    }

    fn writes(&self) -> MutexGuard<'_, ()> {
        lock(&self.shared().writes)
    }
}

impl KvBackend for FjallStore {
    fn counters(&self) -> Option<Arc<dyn KvBackend>> {
        Some(self.shared().counters.clone())
    }

    /// A write can meet fjall installing a flushed memtable (see docs/design/storage.md,
    /// "The tail under load").
    fn writes_may_stall(&self) -> bool {
        true
    }

    fn settles(&self) -> bool {
        self.shared().durability == Durability::Answer
    }

    /// Under [`Durability::Answer`], returns once every write applied so far is synced.
    fn settle(&self) -> StoreResult<()> {
        let shared = self.shared();
        match shared.durability {
            Durability::Answer => shared.commit.barrier(|| shared.sync()),
            Durability::Always | Durability::Every(_) => Ok(()),
        }
    }

    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        let value = self.shared().kv.get(key).map_err(err)?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn set(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.write(|kv| kv.insert(key, value).map_err(err))
    }

    fn delete(&self, key: &str) -> StoreResult<()> {
        self.write(|kv| kv.remove(key).map_err(err))
    }

    fn list_keys(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        let from = match cursor {
            Some(c) => Bound::Excluded(c.as_bytes()),
            None => Bound::Unbounded,
        };
        self.shared()
            .kv
            .range::<&[u8], _>((from, Bound::Unbounded))
            .take(limit)
            .map(|item| {
                let key = item.key().map_err(err)?;
                String::from_utf8(key.to_vec()).map_err(|_| StoreError::KeyNotUtf8)
            })
            .collect()
    }

    fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        self.write(|kv| {
            let current = kv.get(key).map_err(err)?.map(|v| v.to_vec());
            let next = add_to_counter(key, current.as_ref(), delta)?;
            kv.insert(key, next.to_string()).map_err(err)?;
            Ok(next)
        })
    }

    fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<bool> {
        self.write(|kv| {
            if kv.get(key).map_err(err)?.as_deref() != expected {
                return Ok(false);
            }
            kv.insert(key, new).map_err(err)?;
            Ok(true)
        })
    }

    /// The values of one moment (one snapshot).
    fn get_many(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let snapshot = self.shared().db.snapshot();
        keys.iter()
            .map(|k| {
                let value = snapshot.get(&self.shared().kv, k).map_err(err)?;
                Ok(value.map(|v| v.to_vec()))
            })
            .collect()
    }

    /// One write batch: all of them, or none.
    fn set_many(&self, entries: &[(String, Vec<u8>)]) -> StoreResult<()> {
        self.write(|kv| {
            let mut batch = self.shared().db.batch();
            for (key, value) in entries {
                batch.insert(kv, key.as_str(), value.as_slice());
            }
            batch.commit().map_err(err)
        })
    }
}

/// Group commit: writes numbered in the order they were applied share the syncs that cover
/// them. A writer applies its write and takes its number ([`GroupCommit::applied`]) under
/// the store's write lock, lets the lock go, then waits ([`GroupCommit::wait`]): the first
/// waiter to take the sync lock whose write no sync has covered yet reads the last number
/// applied, runs the sync and records how far it reached; the writers it reached, waiting
/// behind it or arriving later, return with its result without syncing again. A sync that
/// began before a write was applied never counts for it. The sync itself is passed in, so
/// tests can make one slow or fail.
#[derive(Debug, Default)]
pub struct GroupCommit {
    /// The number of the last write applied.
    applied: AtomicU64,
    /// How far the syncs have reached (`Synced::upto`), for waiters that need no lock.
    upto: AtomicU64,
    /// Set once a sync has failed: waiters then always read the outcome under the lock.
    failed_once: AtomicBool,
    /// Held while a sync runs, and while a waiter reads the outcome of its own.
    synced: Mutex<Synced>,
    /// Syncs run.
    syncs: AtomicU64,
}

/// The outcome of the syncs so far ([`GroupCommit`]).
#[derive(Debug, Default)]
struct Synced {
    /// Every write numbered up to this has had the sync that covers it (succeeded, unless
    /// one of `failed` names it).
    upto: u64,
    /// Failed syncs some of whose writers have not been told yet.
    failed: Vec<FailedSync>,
}

/// A sync that failed, and the writes it was to cover.
#[derive(Debug)]
struct FailedSync {
    first: u64,
    last: u64,
    error: StoreError,
    /// Its writers not told yet (each number is one writer).
    untold: u64,
}

impl GroupCommit {
    /// Numbers a write that has just been applied; to be called under the store's write
    /// lock, so that the numbers follow the order the writes were applied in.
    pub fn applied(&self) -> u64 {
        self.applied.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Returns once write `seq` (from [`GroupCommit::applied`]) is covered by a sync that
    /// began after it was applied: at once if such a sync has finished, after the one in
    /// progress if that began late enough, else after running `sync` here, which covers
    /// every write applied when it begins. The result is that sync's: the error of a failed
    /// one reaches every write it was to cover, also once a later sync has succeeded.
    pub fn wait(&self, seq: u64, sync: impl FnOnce() -> StoreResult<()>) -> StoreResult<()> {
        // The failure is recorded before `upto` moves past it, so reading `upto` first
        // sees any failure that covers `seq`.
        if self.upto.load(Ordering::Acquire) >= seq && !self.failed_once.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut synced = self.synced.lock().unwrap_or_else(PoisonError::into_inner);
        if synced.upto < seq {
            self.lead(&mut synced, sync);
        }
        synced.tell(seq)
    }

    /// Returns once every write applied so far (numbered by [`GroupCommit::applied`], which
    /// did not wait) is covered by a sync that began after it was applied: at once if one
    /// has finished, else after the one in progress if that began late enough, else after
    /// running `sync` here. Fails for good once any sync has failed: a write it was to cover
    /// may be lost, and no later barrier can say otherwise.
    pub fn barrier(&self, sync: impl FnOnce() -> StoreResult<()>) -> StoreResult<()> {
        let seq = self.applied.load(Ordering::Acquire);
        if self.upto.load(Ordering::Acquire) >= seq && !self.failed_once.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut synced = self.synced.lock().unwrap_or_else(PoisonError::into_inner);
        if synced.upto < seq {
            self.lead(&mut synced, sync);
        }
        match synced.failed.first() {
            Some(failed) => Err(failed.error.clone()),
            None => Ok(()),
        }
    }

    /// Runs `sync` as the leader of a group (holding the sync lock, `synced`): it covers
    /// every write applied when it begins, and its outcome is recorded for them.
    fn lead(&self, synced: &mut Synced, sync: impl FnOnce() -> StoreResult<()>) {
        let before = synced.upto;
        let reach = self.applied.load(Ordering::Acquire);
        let outcome = sync();
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if let Err(error) = outcome {
            self.failed_once.store(true, Ordering::Release);
            synced.failed.push(FailedSync {
                first: before + 1,
                last: reach,
                error,
                untold: reach - before,
            });
        }
        synced.upto = reach;
        self.upto.store(reach, Ordering::Release);
    }

    /// The syncs run so far: for tests and metrics.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

impl Synced {
    /// The outcome for write `seq`, which a sync has covered: the error of the failed sync
    /// that was to cover it, if one was.
    fn tell(&mut self, seq: u64) -> StoreResult<()> {
        let Some(i) = self
            .failed
            .iter()
            .position(|f| (f.first..=f.last).contains(&seq))
        else {
            return Ok(());
        };
        let failed = &mut self.failed[i];
        failed.untold -= 1;
        if failed.untold == 0 {
            return Err(self.failed.swap_remove(i).error);
        }
        Err(failed.error.clone())
    }
}

/// Copies the store in `from` (the `store` directory of a data directory) to a new store in
/// `to`, which must not exist or be empty. The store must not be open elsewhere: a running
/// `serve` makes the copy itself ([`FjallStore::copy_to`]).
pub fn backup(from: &Path, to: &Path) -> std::io::Result<Copied> {
    refuse_non_empty(to)?;
    if !from.join(DB_DIR).exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} holds no edgehook store", from.display()),
        ));
    }
    FjallStore::open(from, Durability::Always)?.copy_to(to)
}

fn refuse_non_empty(to: &Path) -> std::io::Result<()> {
    if to
        .read_dir()
        .is_ok_and(|mut entries| entries.next().is_some())
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} is not empty", to.display()),
        ));
    }
    Ok(())
}

/// Creates the store's directory (owner only: it holds every signing secret), refuses one
/// that holds an earlier build's format, and takes the directory's lock.
fn prepare(dir: &Path) -> std::io::Result<File> {
    if let Some((file, what)) = OLD_FORMATS.iter().find(|(f, _)| dir.join(f).exists()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} holds {file}, {what} of an earlier edgehook build, which this version \
                 does not read (there has been no release to migrate from): move the \
                 directory away, or start with another --data-dir",
                dir.display()
            ),
        ));
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let lock = OpenOptions::new()
        .mode(0o600)
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            format!(
                "{} is in use by another edgehook process (it holds {LOCK_FILE}); stop that \
                 one first, or give this one its own --data-dir",
                dir.display()
            ),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Fsyncs the journal every `period` on a thread of its own, until the store is dropped
/// (the thread holds only a weak reference between rounds).
fn sync_thread(store: Weak<Shared>, gate: Arc<Mutex<()>>, period: Duration) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("edgehook-store-sync".to_owned())
        .spawn(move || {
            loop {
                std::thread::park_timeout(period);
                let _gate = lock(&gate);
                let Some(store) = store.upgrade() else { return };
                if let Err(e) = store.db.persist(PersistMode::SyncData) {
                    tracing::error!(error = %e, "store sync failed");
                }
            }
        })
        .map(drop)
}

/// The blocks the files under `dir` take on disk (as `du` counts them: space a file has
/// allocated ahead included, holes not).
pub fn disk_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            disk_bytes(&entry.path())?
        } else {
            meta.blocks() * 512
        };
    }
    Ok(total)
}
