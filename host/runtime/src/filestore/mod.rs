//! The embedded durable store of `edgehook serve`: every change appended to a log file before
//! the operation returns; an index of where each live key's record is in the log, mostly on
//! disk ([`index`]: sorted runs in files and a bounded map of the changes since); values read
//! from the log file (`pread`), each read checking the record's key and checksum (a record
//! damaged since it was written is an error, not wrong bytes), and the values written or
//! read last kept in a cache bounded in bytes ([`cache`], 32 MiB by default). So memory does
//! not grow with the number of keys or the size of their values (#28), and the hot reads
//! do not go to the file.
//!
//! Why not an embedded B-tree database: the component makes many small writes, each of which
//! must survive the process being killed the moment it returns. A log append is one `write`
//! syscall (the bytes are in the kernel once it returns, so a crash of the process loses
//! nothing); an `fsync` on a timer (every 100 ms by default, or after every write with
//! [`SyncPolicy::Always`]) bounds what a power loss can take. redb 4, for comparison, offers commits
//! that are either fsynced one by one or not persisted at all until a later fsynced commit.
//!
//! Format: records of `[op: u8][key len: u32 LE][key][value len: u32 LE][value][fnv1a-64 of
//! all before: u64 LE]`; op 1 = set, 2 = delete. On open the log is replayed; a torn record at
//! the end (a crash mid-append: no whole record follows it) is cut off. A bad record with
//! whole records after it is damage, not a torn tail: the store refuses to open rather than
//! cut away the records that follow (the error says where, and what to do). When the log
//! holds much more than the live data it is rewritten (to a temporary file, fsynced, then
//! renamed over the log, and the directory fsynced; the records are copied from the old log,
//! each checked, and the keys are pointed at their new places only once the new log is open);
//! the copy runs without the store's lock, which is held only to take the snapshot and to
//! put the new log in place ([`compact`](self::compact)); the store's maintenance thread
//! runs it (and the key index's merges), so no writer waits for it. A rewrite that fails is
//! logged and tried again once the log has grown by another 16 MiB, and the write that set
//! it off stands.
//!
//! One process at a time: [`FileStore::open`] takes an exclusive lock on `kv.lock` in the
//! store's directory (held until the store is dropped), so a second `edgehook serve` on the
//! same data directory stops before it reads the log, let alone cuts it.
//!
//! A write that fails is taken back: whatever part of its record reached the file is cut
//! off, so the records after it are not stranded behind half a record. If that cut fails
//! too, or an fsync fails (the kernel may then have dropped the written pages), the log no
//! longer holds what the store acknowledged: every later write is refused (reads still
//! answer) until a restart replays the log.

mod cache;
mod compact;
mod files;
mod filter;
mod format;
mod index;
mod maintenance;
mod run;

use maintenance::{Job, MaintenanceThread, maintenance_thread, run};

pub use cache::DEFAULT_CACHE_BYTES;
pub use compact::Compacted;
pub use format::{LogStats, scan};

use crate::store::{KvBackend, MemoryStore, StoreError, StoreResult, parse_counter};
use cache::ValueCache;
use files::{lock_dir, private_dir, private_file, sync_dir};
use format::{OP_DELETE, OP_SET, encode, encode_into, replay, value_in};
use index::{Entry, KeyIndex, OPEN_CHUNK, RECENT_MAX};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// When the log is flushed to stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// After every write: survives power loss at once, costs an fsync per write.
    Always,
    /// On a timer: survives a process crash at once and power loss after the interval.
    Every(Duration),
}

/// The log file in the store's directory.
pub const LOG_FILE: &str = "kv.log";
/// Held locked (`flock`) while a process has the store open.
const LOCK_FILE: &str = "kv.lock";
/// Rewrite the log when it is this many times larger than the live data (and over 16 MiB).
const COMPACT_RATIO: u64 = 4;
const COMPACT_MIN_BYTES: u64 = 16 << 20;

/// Where a live key's set record is in the log: its first byte and its length (key + value +
/// 17 bytes of framing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    at: u64,
    len: u64,
}

struct Inner {
    /// Where every live key's record is in the log.
    index: KeyIndex,
    /// The log, opened to append and to read at an offset.
    file: File,
    log_bytes: u64,
    live_bytes: u64,
    dirty: bool,
    sync: SyncPolicy,
    dir: PathBuf,
    /// The values written or read last (bounded in bytes).
    cache: ValueCache,
    /// Why every write is now refused (see the module docs), once the log cannot be trusted.
    failed: Option<String>,
    /// The log size from which compaction is tried again after a failed one.
    compact_from: u64,
    /// A compaction is under way ([`compact`]: one at a time).
    compacting: bool,
    /// A write found the log due for compaction; the writer hands it to the maintenance
    /// thread once the lock is free.
    compact_due: bool,
    /// A compaction is due or running (one at a time).
    compact_pending: bool,
    /// The index's recent changes that start a merge ([`RECENT_MAX`]; tests set fewer).
    merge_at: usize,
    /// After a failed merge, the recent changes from which the next is tried (0: none).
    merge_retry_at: usize,
    /// A merge of the index is due or running (one at a time).
    merge_pending: bool,
    /// A write made the index due for a merge; the writer starts it once the lock is free.
    merge_due: bool,
    /// Locked for as long as the store is open.
    _lock: File,
    /// Tests: the next append writes only this many bytes of its record, then fails (what a
    /// full disk or an I/O error part-way through a `write` leaves).
    #[cfg(test)]
    short_write: Option<usize>,
}

/// The durable embedded store (see the module docs).
#[derive(Clone)]
pub struct FileStore {
    inner: Arc<Mutex<Inner>>,
    /// Held for the whole of a compaction or a merge of the index (one at a time; the store
    /// lock only at their start and end).
    maintenance: Arc<Mutex<()>>,
    /// Hands jobs to the store's maintenance thread ([`maintenance_thread`]); `None` if it
    /// could not be started (the jobs then run in the writer that made them due).
    jobs: Option<Arc<MaintenanceThread>>,
    /// The `counters` bucket ([`KvBackend::counters`]): in memory, never in the log (the
    /// rate limits' counts; a restart only restarts their minute).
    counters: Arc<MemoryStore>,
}

fn io_err(e: std::io::Error) -> StoreError {
    StoreError(format!("storage file: {e}"))
}

/// What an open store holds ([`FileStore::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Live keys.
    pub keys: u64,
    /// Live data as a compacted log holds it: key + value + 17 bytes of framing per key.
    pub live_bytes: u64,
    /// Length of the log file (live data plus superseded records until compaction).
    pub log_bytes: u64,
    /// The live keys' bytes (in the index: on disk, but for the recent changes).
    pub key_bytes: u64,
    /// Bytes of the index's sorted runs' files.
    pub index_bytes: u64,
    /// The index's sorted runs (about log2 of the keys / 32,768).
    pub index_runs: u64,
    /// Bytes of memory of the Bloom filters of the runs' keys.
    pub filter_bytes: u64,
    /// Blocks of the runs' files read since each was written (lookups and scans).
    pub index_reads: u64,
    /// Keys changed since the index's last merge, held in memory.
    pub recent_keys: u64,
    /// What the value cache holds, counted as against its budget (its entries' keys, values
    /// and 8-byte headers, including those since replaced, until their buffer is emptied).
    pub cache_bytes: u64,
}

impl FileStore {
    /// Opens (or creates) the store in `dir`, replaying its log, and starts the fsync timer
    /// if `sync` asks for one (which needs a running tokio runtime).
    /// Fails if another process has the store open, or if the log is damaged (not merely
    /// torn at its end): see the module docs.
    pub fn open(dir: &Path, sync: SyncPolicy) -> std::io::Result<Self> {
        private_dir(dir)?;
        let lock = lock_dir(dir)?;
        let path = dir.join(LOG_FILE);
        run::remove_stale(dir)?;
        let (index, live_bytes, valid) = rebuild(dir, &path)?;
        let file = private_file()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        // Cut a torn tail off, then append after the valid prefix.
        file.set_len(valid)?;
        file.sync_all()?;
        sync_dir(dir)?;
        let file = OpenOptions::new().read(true).append(true).open(&path)?;
        let mut store = FileStore {
            maintenance: Arc::new(Mutex::new(())),
            jobs: None,
            counters: Arc::new(MemoryStore::new()),
            inner: Arc::new(Mutex::new(Inner {
                index,
                file,
                log_bytes: valid,
                live_bytes,
                dirty: false,
                sync,
                dir: dir.to_path_buf(),
                cache: ValueCache::new(DEFAULT_CACHE_BYTES),
                failed: None,
                compact_from: 0,
                compacting: false,
                compact_due: false,
                compact_pending: false,
                merge_at: RECENT_MAX,
                merge_retry_at: 0,
                merge_pending: false,
                merge_due: false,
                _lock: lock,
                #[cfg(test)]
                short_write: None,
            })),
        };
        store.jobs = maintenance_thread(&store);
        if let SyncPolicy::Every(period) = sync
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            handle.spawn(sync_timer(Arc::downgrade(&store.inner), period));
        }
        Ok(store)
    }

    /// Forces everything written so far to stable storage. A failure is final: the store
    /// refuses writes from then on (see the module docs).
    pub fn flush(&self) -> StoreResult<()> {
        self.lock().sync()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.lock().index.len() as usize
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the open store holds, from its own accounting (no disk read).
    pub fn stats(&self) -> StoreStats {
        let inner = self.lock();
        StoreStats {
            keys: inner.index.len(),
            live_bytes: inner.live_bytes,
            log_bytes: inner.log_bytes,
            key_bytes: inner.index.key_bytes(),
            index_bytes: inner.index.bytes(),
            index_runs: inner.index.runs.len() as u64,
            filter_bytes: inner.index.filter_bytes(),
            index_reads: inner.index.reads(),
            recent_keys: inner.index.recent.len() as u64,
            cache_bytes: inner.cache.bytes() as u64,
        }
    }

    /// Sets the value cache's budget in bytes (0 turns it off), emptying it.
    pub fn set_cache_bytes(&self, bytes: usize) {
        self.lock().cache = ValueCache::new(bytes);
    }

    /// A write through `f`; then, if it made the index due for a merge or the log due for
    /// compaction, that job handed to the maintenance thread, with the lock free (the
    /// writer does not wait for it). The write stands either way.
    fn write<T>(&self, f: impl FnOnce(&mut Inner) -> StoreResult<T>) -> StoreResult<T> {
        let (out, due, merge) = {
            let mut inner = self.lock();
            let out = f(&mut inner);
            let merge = std::mem::take(&mut inner.merge_due);
            (out, std::mem::take(&mut inner.compact_due), merge)
        };
        if merge {
            self.start(Job::Merge);
        }
        if due {
            self.start(Job::Compact);
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands `job` to the store's maintenance thread (runs it here if there is none).
    fn start(&self, job: Job) {
        let job = match &self.jobs {
            Some(thread) => match thread.send(job) {
                Ok(()) => return,
                Err(job) => job,
            },
            None => job,
        };
        run(job, &Arc::downgrade(&self.inner), &self.maintenance);
    }

    /// Waits until the maintenance thread has done every job handed to it so far (tests).
    #[cfg(test)]
    fn idle(&self) {
        let (done, wait) = std::sync::mpsc::channel();
        if let Some(thread) = &self.jobs
            && thread.send(Job::Ping(done)).is_ok()
        {
            let _ = wait.recv();
        }
    }

    /// Merges the index's recent changes into its base now (tests; the store does it by
    /// itself every [`RECENT_MAX`] changes).
    #[cfg(test)]
    fn merge_now(&self) {
        self.lock().merge_pending = true;
        maintenance::merge_index(&Arc::downgrade(&self.inner), &self.maintenance);
    }
}

/// The index of the log at `path`, built by replaying it (merged into a run every
/// [`OPEN_CHUNK`] keys, so the open does not hold every key in memory, and the runs merged
/// into one at the end, which counts the keys); the live data's bytes, and the log's valid
/// length.
fn rebuild(dir: &Path, path: &Path) -> std::io::Result<(KeyIndex, u64, u64)> {
    fn merge(dir: &Path, index: &mut KeyIndex, all: bool) -> std::io::Result<index::Totals> {
        let Some(frozen) = index.freeze() else {
            return Err(std::io::Error::other(
                "the index is frozen while the store opens",
            ));
        };
        match index::merge(dir, &frozen, all, None) {
            Ok(merged) => {
                let totals = merged.totals;
                drop(index.install(merged));
                Ok(totals)
            }
            Err(e) => {
                index.thaw();
                Err(e)
            }
        }
    }
    let mut index = KeyIndex::new();
    let valid = replay(path, |set, key, slot| {
        index.replayed(key, if set { Entry::Live(slot) } else { Entry::Gone });
        if index.recent.len() >= OPEN_CHUNK {
            merge(dir, &mut index, false)?;
        }
        Ok(())
    })?;
    let totals = merge(dir, &mut index, true)?;
    index.counted(totals);
    Ok((index, totals.live_bytes, valid))
}

/// The fsync timer of [`SyncPolicy::Every`]: each tick, if anything was written, an fsync
/// on a blocking thread, of a second handle of the log, without the lock, so store calls and
/// the async workers do not wait for the disk (an fsync took up to 163 ms under load,
/// BENCHMARKS.md). Writes made meanwhile mark the log dirty for the next tick. A failure is
/// final, as [`FileStore::flush`]'s.
async fn sync_timer(store: std::sync::Weak<Mutex<Inner>>, period: Duration) {
    let mut timer = tokio::time::interval(period);
    loop {
        timer.tick().await;
        let Some(inner) = store.upgrade() else { return };
        let file = {
            let mut inner = inner.lock().unwrap_or_else(|p| p.into_inner());
            if inner.failed.is_some() || !inner.dirty {
                continue;
            }
            inner.dirty = false;
            inner.file.try_clone()
        };
        let synced = match file {
            Ok(file) => tokio::task::spawn_blocking(move || file.sync_data()).await,
            Err(e) => Ok(Err(e)),
        };
        if let Ok(Err(e)) | Err(e) = synced.map_err(std::io::Error::other) {
            let why = format!("fsync failed ({e})");
            inner.lock().unwrap_or_else(|p| p.into_inner()).failed = Some(why.clone());
            let msg = "store fsync failed: writes are refused until edgehook restarts";
            crate::log::log_line("error", msg, &[("error", why)]);
        }
    }
}

impl Inner {
    /// The error every write gets once the log cannot be trusted.
    fn refuse(&self) -> StoreResult<()> {
        match &self.failed {
            Some(why) => Err(StoreError(format!(
                "storage file: {why}; writes are refused until edgehook restarts"
            ))),
            None => Ok(()),
        }
    }

    fn sync(&mut self) -> StoreResult<()> {
        self.refuse()?;
        if self.dirty {
            if let Err(e) = self.file.sync_data() {
                self.failed = Some(format!("fsync failed ({e})"));
                return Err(io_err(e));
            }
            self.dirty = false;
        }
        Ok(())
    }

    fn write_record(&mut self, rec: &[u8]) -> std::io::Result<()> {
        #[cfg(test)]
        if let Some(n) = self.short_write.take() {
            self.file.write_all(&rec[..n.min(rec.len())])?;
            return Err(std::io::Error::other("injected short write"));
        }
        self.file.write_all(rec)
    }

    fn append(&mut self, rec: &[u8]) -> StoreResult<()> {
        self.refuse()?;
        if let Err(e) = self.write_record(rec) {
            // Take back whatever part of the record reached the file, so that the records
            // after it are not stranded behind half a record at the next start.
            if let Err(cut) = self.file.set_len(self.log_bytes) {
                self.failed = Some(format!(
                    "a failed write ({e}) could not be taken back ({cut})"
                ));
            }
            return Err(io_err(e));
        }
        self.log_bytes += rec.len() as u64;
        self.dirty = true;
        if self.sync == SyncPolicy::Always {
            self.sync()?;
        }
        Ok(())
    }

    /// The bytes of the record at `slot`, read from the log.
    fn record(&self, slot: Slot) -> std::io::Result<Vec<u8>> {
        let mut rec = vec![0; slot.len as usize];
        self.file.read_exact_at(&mut rec, slot.at)?;
        Ok(rec)
    }

    /// The value of `key`: from the cache, else from its record in the log (checked: a
    /// record damaged since it was written is an error).
    fn read(&mut self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        // The cache holds live keys only, with their last values.
        if let Some(value) = self.cache.get(key) {
            return Ok(Some(value));
        }
        let slot = self.index.get(key).map_err(io_err)?;
        slot.map(|slot| self.value_at(key, slot)).transpose()
    }

    /// The value of `key`, whose place the caller has looked up (a read-modify-write looks
    /// it up once, and writes with it): from the cache, else from the log.
    fn value_of(&mut self, key: &str, slot: Option<Slot>) -> StoreResult<Option<Vec<u8>>> {
        match (self.cache.get(key), slot) {
            (Some(value), _) => Ok(Some(value)),
            (None, Some(slot)) => self.value_at(key, slot).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// The value in `key`'s record at `slot`, read from the log and checked, then cached.
    fn value_at(&mut self, key: &str, slot: Slot) -> StoreResult<Vec<u8>> {
        let rec = self.record(slot).map_err(io_err)?;
        match value_in(&rec, key) {
            Some(value) => {
                self.cache.put(key, &value);
                Ok(value)
            }
            None => Err(StoreError(format!(
                "storage file: the record of {key} at byte {} is damaged",
                slot.at
            ))),
        }
    }

    /// Sets `key` to `value`, whose record (`encode(OP_SET, key, value)`) the caller made
    /// before it took the lock.
    fn put(&mut self, key: &str, value: &[u8], rec: &[u8]) -> StoreResult<()> {
        let old = self.index.get(key).map_err(io_err)?;
        self.put_at(key, value, rec, old)
    }

    /// Sets `key`, whose record was at `old`, with its new record `rec`. The place is asked
    /// before the append: once the log holds the record, the index's change cannot fail.
    fn put_at(
        &mut self,
        key: &str,
        value: &[u8],
        rec: &[u8],
        old: Option<Slot>,
    ) -> StoreResult<()> {
        let slot = Slot {
            at: self.log_bytes,
            len: rec.len() as u64,
        };
        if let Err(e) = self.append(rec) {
            // The log may or may not hold the new value now (a failed cut): read it again.
            self.cache.forget(key);
            return Err(e);
        }
        self.placed(key, value, slot, old);
        self.maybe_compact();
        Ok(())
    }

    /// Takes note of `key`'s new record, at `slot` in the log (its old one at `old`): the
    /// cache, the index, the live bytes.
    fn placed(&mut self, key: &str, value: &[u8], slot: Slot, old: Option<Slot>) {
        self.cache.put(key, value);
        self.index.set(key, slot, old);
        if let Some(old) = old {
            self.live_bytes -= old.len;
        }
        self.live_bytes += slot.len;
    }

    /// Sets each key of `entries` to its value with one append of `recs`, their records one
    /// after the other (made by the caller before the lock), of lengths `lens`.
    fn put_many(
        &mut self,
        entries: &[(String, Vec<u8>)],
        recs: &[u8],
        lens: &[u64],
    ) -> StoreResult<()> {
        let olds = entries
            .iter()
            .map(|(k, _)| self.index.get(k))
            .collect::<std::io::Result<Vec<Option<Slot>>>>()
            .map_err(io_err)?;
        let mut at = self.log_bytes;
        if let Err(e) = self.append(recs) {
            for (key, _) in entries {
                self.cache.forget(key);
            }
            return Err(e);
        }
        let mut slots: Vec<Slot> = Vec::with_capacity(entries.len());
        for (i, (((key, value), len), old)) in entries.iter().zip(lens).zip(olds).enumerate() {
            let slot = Slot { at, len: *len };
            at += slot.len;
            // A key written twice in the batch: its later record replaces its earlier one.
            let old = match entries[..i].iter().rposition(|(k, _)| k == key) {
                Some(j) => Some(slots[j]),
                None => old,
            };
            slots.push(slot);
            self.placed(key, value, slot, old);
        }
        self.maybe_compact();
        Ok(())
    }

    fn remove(&mut self, key: &str) -> StoreResult<()> {
        let Some(old) = self.index.get(key).map_err(io_err)? else {
            return Ok(());
        };
        self.cache.forget(key);
        self.append(&encode(OP_DELETE, key, &[]))?;
        self.index.remove(key);
        self.live_bytes -= old.len;
        self.maybe_compact();
        Ok(())
    }

    /// Marks the index due for a merge every [`RECENT_MAX`] changes, and the log due for
    /// compaction when it holds [`COMPACT_RATIO`] times the live data (and at least 16 MiB,
    /// and past a failed attempt's retry point); the writer hands them to the maintenance
    /// thread once it lets go of the lock ([`FileStore::write`]). The write that got here is
    /// already in the log, so a failed compaction does not fail it.
    fn maybe_compact(&mut self) {
        if self.index.recent.len() >= self.merge_at.max(self.merge_retry_at) && !self.merge_pending
        {
            self.merge_pending = true;
            self.merge_due = true;
        }
        if self.compaction_due() {
            self.compact_pending = true;
            self.compact_due = true;
        }
    }

    /// Whether the log is due for compaction and none is asked for or under way.
    fn compaction_due(&self) -> bool {
        self.log_bytes > COMPACT_MIN_BYTES
            && self.log_bytes > COMPACT_RATIO * self.live_bytes
            && self.log_bytes >= self.compact_from
            && !self.compact_pending
            && !self.compacting
    }
}

impl KvBackend for FileStore {
    fn counters(&self) -> Option<Arc<dyn KvBackend>> {
        Some(self.counters.clone())
    }

    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        self.lock().read(key)
    }

    fn set(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        // The record is made (and its checksum taken) before the lock: other writers wait
        // only for its append.
        let rec = encode(OP_SET, key, value);
        self.write(|inner| inner.put(key, value, &rec))
    }

    fn delete(&self, key: &str) -> StoreResult<()> {
        self.write(|inner| inner.remove(key))
    }

    fn list_keys(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        self.lock().index.keys_after(cursor, limit).map_err(io_err)
    }

    fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        self.write(|inner| {
            let old = inner.index.get(key).map_err(io_err)?;
            let current = inner.value_of(key, old)?;
            let next = parse_counter(key, current.as_ref())?
                .checked_add(delta)
                .ok_or_else(|| StoreError(format!("counter {key} would overflow")))?;
            let next_bytes = next.to_string();
            let rec = encode(OP_SET, key, next_bytes.as_bytes());
            inner.put_at(key, next_bytes.as_bytes(), &rec, old)?;
            Ok(next)
        })
    }

    fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<bool> {
        let rec = encode(OP_SET, key, new);
        self.write(|inner| {
            // One lookup of the key's place; a value of another length is not read.
            let old = inner.index.get(key).map_err(io_err)?;
            let len = old.map(|s| s.len - 17 - key.len() as u64);
            if len != expected.map(|e| e.len() as u64) {
                return Ok(false);
            }
            if inner.value_of(key, old)?.as_deref() != expected {
                return Ok(false);
            }
            inner.put_at(key, new, &rec, old)?;
            Ok(true)
        })
    }

    fn get_many(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let mut inner = self.lock();
        keys.iter().map(|k| inner.read(k)).collect()
    }

    /// One append of all the records (made before the lock), one `write` and, under
    /// `SyncPolicy::Always`, one `fsync`: all of them or, if the append fails, none (it is
    /// taken back whole). Cut short by a crash, the records before the cut stand.
    fn set_many(&self, entries: &[(String, Vec<u8>)]) -> StoreResult<()> {
        let size: usize = entries.iter().map(|(k, v)| 17 + k.len() + v.len()).sum();
        let mut recs = Vec::with_capacity(size);
        let lens: Vec<u64> = entries
            .iter()
            .map(|(k, v)| encode_into(&mut recs, OP_SET, k, v))
            .collect();
        self.write(|inner| inner.put_many(entries, &recs, &lens))
    }
}

#[cfg(test)]
mod tests;
