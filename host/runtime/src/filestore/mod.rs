//! The embedded durable store of `edgehook serve`: every change appended to a log file before
//! the operation returns; in memory, every live key and where its value's record is in the
//! log. Values are read from the log file (`pread`; the kernel's page cache is the cache), so
//! memory grows with the number of keys, not with the size of their values, and every read
//! checks the record's checksum (a record damaged since it was written is an error, not
//! wrong bytes).
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
//! put the new log in place ([`compact`](self::compact)); the write that made the log due
//! runs it once it has let go of the lock. A rewrite that fails is logged and tried again
//! once the log has grown by another 16 MiB, and the write that set it off stands.
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

mod compact;
mod files;
mod format;

pub use format::{LogStats, scan};

use crate::store::{KvBackend, StoreError, StoreResult, keys_after, parse_counter};
use files::{lock_dir, private_dir, private_file, sync_dir};
use format::{OP_DELETE, OP_SET, encode, replay, value_in};
use std::collections::BTreeMap;
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
    /// Every live key, and where its record is in the log.
    map: BTreeMap<String, Slot>,
    /// The log, opened to append and to read at an offset.
    file: File,
    log_bytes: u64,
    live_bytes: u64,
    dirty: bool,
    sync: SyncPolicy,
    dir: PathBuf,
    /// Why every write is now refused (see the module docs), once the log cannot be trusted.
    failed: Option<String>,
    /// The log size from which compaction is tried again after a failed one.
    compact_from: u64,
    /// A compaction is under way ([`compact`]: one at a time).
    compacting: bool,
    /// A write found the log due for compaction; the writer runs it once the lock is free.
    compact_due: bool,
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
    /// The live keys' bytes: the store holds them in memory (values stay in the log), with
    /// 16 bytes of place each, plus its map's and the allocator's own overhead.
    pub key_bytes: u64,
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
        let (map, valid) = replay(&path)?;
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
        let live_bytes = map.values().map(|s| s.len).sum();
        let store = FileStore {
            inner: Arc::new(Mutex::new(Inner {
                map,
                file,
                log_bytes: valid,
                live_bytes,
                dirty: false,
                sync,
                dir: dir.to_path_buf(),
                failed: None,
                compact_from: 0,
                compacting: false,
                compact_due: false,
                _lock: lock,
                #[cfg(test)]
                short_write: None,
            })),
        };
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
        self.lock().map.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the open store holds, from its own accounting (no disk read).
    pub fn stats(&self) -> StoreStats {
        let inner = self.lock();
        let keys = inner.map.len() as u64;
        let key_bytes: u64 = inner.map.keys().map(|k| k.len() as u64).sum();
        StoreStats {
            keys,
            live_bytes: inner.live_bytes,
            log_bytes: inner.log_bytes,
            key_bytes,
        }
    }

    /// Rewrites the log with only the live data now, as the store does by itself when the
    /// log is [`COMPACT_RATIO`] times the live data (the benchmarks measure the compacted
    /// size). A failure is handled as the store's own compaction's: a failed rename or
    /// reopen leaves the store refusing writes (see the module docs).
    pub fn compact(&self) -> StoreResult<()> {
        let (snapshot, dir) = {
            let mut inner = self.lock();
            inner.refuse()?;
            match inner.begin_compaction().map_err(io_err)? {
                Some(snapshot) => (snapshot, inner.dir.clone()),
                None => return Ok(()), // one is under way
            }
        };
        // The long part, without the lock (see `compact`).
        let copied = snapshot.copy(&dir);
        let mut inner = self.lock();
        let done = match copied {
            Ok(copied) => inner.finish_compaction(snapshot, copied),
            Err(e) => {
                inner.compacting = false;
                Err(e)
            }
        };
        if let Err(e) = done {
            let _ = std::fs::remove_file(compact::tmp_path(&dir));
            return Err(io_err(e));
        }
        Ok(())
    }

    /// A write through `f`; then, if it made the log due, its compaction, with the lock
    /// free. A compaction that fails is logged and tried again once the log has grown by
    /// another 16 MiB; the write stands either way.
    fn write<T>(&self, f: impl FnOnce(&mut Inner) -> StoreResult<T>) -> StoreResult<T> {
        let (out, due) = {
            let mut inner = self.lock();
            let out = f(&mut inner);
            (out, std::mem::take(&mut inner.compact_due))
        };
        if due && let Err(e) = self.compact() {
            let mut inner = self.lock();
            inner.compact_from = inner.log_bytes + COMPACT_MIN_BYTES;
            crate::log::log_line(
                "error",
                "store compaction failed; writes go on to the log as it is",
                &[
                    ("error", e.0),
                    ("log_bytes", inner.log_bytes.to_string()),
                    ("retry_at_bytes", inner.compact_from.to_string()),
                ],
            );
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
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

    /// The value of `key`, read from its record in the log (checked: a record damaged since
    /// it was written is an error).
    fn read(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        let Some(&slot) = self.map.get(key) else {
            return Ok(None);
        };
        let rec = self.record(slot).map_err(io_err)?;
        match value_in(&rec, key) {
            Some(value) => Ok(Some(value)),
            None => Err(StoreError(format!(
                "storage file: the record of {key} at byte {} is damaged",
                slot.at
            ))),
        }
    }

    /// The length of `key`'s value, without reading it.
    fn value_len(&self, key: &str) -> Option<u64> {
        self.map.get(key).map(|s| s.len - 17 - key.len() as u64)
    }

    fn put(&mut self, key: &str, value: &[u8]) -> StoreResult<()> {
        let rec = encode(OP_SET, key, value);
        let slot = Slot {
            at: self.log_bytes,
            len: rec.len() as u64,
        };
        self.append(&rec)?;
        let old = match self.map.get_mut(key) {
            Some(s) => Some(std::mem::replace(s, slot)),
            None => self.map.insert(key.to_owned(), slot),
        };
        if let Some(old) = old {
            self.live_bytes -= old.len;
        }
        self.live_bytes += slot.len;
        self.maybe_compact();
        Ok(())
    }

    fn remove(&mut self, key: &str) -> StoreResult<()> {
        if !self.map.contains_key(key) {
            return Ok(());
        }
        self.append(&encode(OP_DELETE, key, &[]))?;
        if let Some(old) = self.map.remove(key) {
            self.live_bytes -= old.len;
        }
        self.maybe_compact();
        Ok(())
    }

    /// Compacts when the log is large and mostly superseded. The write that got here is
    /// already in the log, so a failed compaction does not fail it: it is logged, and tried
    /// again once the log has grown by another [`COMPACT_MIN_BYTES`].
    /// Marks the log due for compaction when it holds [`COMPACT_RATIO`] times the live
    /// data (and at least 16 MiB, and past a failed attempt's retry point); the writer runs
    /// it once it lets go of the lock ([`FileStore::write`]).
    fn maybe_compact(&mut self) {
        if self.log_bytes > COMPACT_MIN_BYTES
            && self.log_bytes > COMPACT_RATIO * self.live_bytes
            && self.log_bytes >= self.compact_from
            && !self.compacting
        {
            self.compact_due = true;
        }
    }
}

impl KvBackend for FileStore {
    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        self.lock().read(key)
    }

    fn set(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.write(|inner| inner.put(key, value))
    }

    fn delete(&self, key: &str) -> StoreResult<()> {
        self.write(|inner| inner.remove(key))
    }

    fn list_keys(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        Ok(keys_after(&self.lock().map, cursor, limit))
    }

    fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        self.write(|inner| {
            let next = parse_counter(key, inner.read(key)?.as_ref())?
                .checked_add(delta)
                .ok_or_else(|| StoreError(format!("counter {key} would overflow")))?;
            inner.put(key, next.to_string().as_bytes())?;
            Ok(next)
        })
    }

    fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<bool> {
        self.write(|inner| {
            // Lengths first: a value of another length is not read.
            if inner.value_len(key) != expected.map(|e| e.len() as u64)
                || inner.read(key)?.as_deref() != expected
            {
                return Ok(false);
            }
            inner.put(key, new)?;
            Ok(true)
        })
    }

    fn get_many(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let inner = self.lock();
        keys.iter().map(|k| inner.read(k)).collect()
    }
}

#[cfg(test)]
mod tests;
