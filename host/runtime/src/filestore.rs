//! The embedded durable store of `edgehook serve`: the whole keyspace in memory, every change
//! appended to a log file before the operation returns.
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
//! renamed over the log, and the directory fsynced); a rewrite that fails is logged and tried
//! again once the log has grown by another 16 MiB, and the write that set it off stands.
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

use crate::store::{KvBackend, StoreError, StoreResult, keys_after, parse_counter};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
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

const OP_SET: u8 = 1;
const OP_DELETE: u8 = 2;
/// The log file in the store's directory.
pub const LOG_FILE: &str = "kv.log";
/// Held locked (`flock`) while a process has the store open.
const LOCK_FILE: &str = "kv.lock";
/// Rewrite the log when it is this many times larger than the live data (and over 16 MiB).
const COMPACT_RATIO: u64 = 4;
const COMPACT_MIN_BYTES: u64 = 16 << 20;

struct Inner {
    map: BTreeMap<String, Vec<u8>>,
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

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn encode(op: u8, key: &str, value: &[u8]) -> Vec<u8> {
    let mut rec = Vec::with_capacity(17 + key.len() + value.len());
    rec.push(op);
    rec.extend_from_slice(&(key.len() as u32).to_le_bytes());
    rec.extend_from_slice(key.as_bytes());
    rec.extend_from_slice(&(value.len() as u32).to_le_bytes());
    rec.extend_from_slice(value);
    let sum = fnv1a(&rec);
    rec.extend_from_slice(&sum.to_le_bytes());
    rec
}

fn io_err(e: std::io::Error) -> StoreError {
    StoreError(format!("storage file: {e}"))
}

/// One record of a log at `pos`: `(is_set, key, value, end)`, or `None` if the bytes there
/// are not a whole, valid record.
fn record_at(bytes: &[u8], pos: usize) -> Option<(bool, &str, &[u8], usize)> {
    let read_u32 = |at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?) as usize)
    };
    let op = *bytes.get(pos)?;
    let klen = read_u32(pos + 1)?;
    let kstart = pos + 5;
    let vlen = read_u32(kstart.checked_add(klen)?)?;
    let vstart = kstart + klen + 4;
    let end = vstart.checked_add(vlen)?;
    let sum = u64::from_le_bytes(bytes.get(end..end.checked_add(8)?)?.try_into().ok()?);
    if fnv1a(&bytes[pos..end]) != sum {
        return None;
    }
    let key = std::str::from_utf8(&bytes[kstart..kstart + klen]).ok()?;
    match op {
        OP_SET => Some((true, key, &bytes[vstart..end], end + 8)),
        OP_DELETE => Some((false, key, &[], end + 8)),
        _ => None,
    }
}

/// How a log reads: the length of its valid prefix, and, if what follows that prefix is not
/// a torn tail but damage (a whole record follows the bad bytes), where that record starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LogRead {
    valid: u64,
    resumes_at: Option<u64>,
}

/// Walks the valid records of a log, calling `f(is_set, key, value)` for each, up to the
/// first bad record; then looks past it for a whole record (damage) or none (a torn tail).
fn read_records(bytes: &[u8], mut f: impl FnMut(bool, &str, &[u8])) -> LogRead {
    let mut pos = 0usize;
    while pos < bytes.len() {
        let Some((set, key, value, next)) = record_at(bytes, pos) else {
            break;
        };
        f(set, key, value);
        pos = next;
    }
    let resumes_at = (pos + 1..bytes.len())
        .find(|at| record_at(bytes, *at).is_some())
        .map(|at| at as u64);
    LogRead {
        valid: pos as u64,
        resumes_at,
    }
}

fn read_log(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(file) => {
            BufReader::new(file).read_to_end(&mut bytes)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(bytes)
}

/// Replays a log; returns the map and the length of the valid prefix (a torn tail after it is
/// cut off by the caller). Damage is an error: nothing is cut.
fn replay(path: &Path) -> std::io::Result<(BTreeMap<String, Vec<u8>>, u64)> {
    let mut map = BTreeMap::new();
    let bytes = read_log(path)?;
    let read = read_records(&bytes, |set, key, value| {
        if set {
            map.insert(key.to_owned(), value.to_vec());
        } else {
            map.remove(key);
        }
    });
    if let Some(resumes_at) = read.resumes_at {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} is damaged: the record at byte {} is unreadable, and whole records follow \
                 from byte {resumes_at} (of {}). Nothing was changed. To start from the records \
                 before the damage, keep a copy and cut the file to {} bytes (truncate -s {} \
                 {}); to start empty, move it aside",
                path.display(),
                read.valid,
                bytes.len(),
                read.valid,
                read.valid,
                path.display(),
            ),
        ));
    }
    Ok((map, read.valid))
}

/// Options for a file of the store: readable and writable by its owner only (the log holds
/// every signing secret).
fn private_file() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(0o600);
    options
}

/// Creates the store's directory (owner only), and takes what an earlier version created
/// with the default mode back to owner only.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    for (path, mode) in [(dir.to_path_buf(), 0o700), (dir.join(LOG_FILE), 0o600)] {
        match std::fs::metadata(&path) {
            Ok(m) if m.permissions().mode() & 0o077 != 0 => {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Takes the store directory's lock, or says which process-level conflict stops us.
fn lock_dir(dir: &Path) -> std::io::Result<File> {
    let lock = private_file()
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

/// Makes a rename or a new file in `dir` durable (its directory entry fsynced).
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// What a store's log holds, read from disk without opening the store (a running server may
/// be appending to it): the live keys and their size as the store counts it (key + value +
/// 17 bytes of record framing per key), and the length of the log file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Live keys.
    pub keys: u64,
    /// Live data, in bytes.
    pub live_bytes: u64,
    /// Length of the log file (live data plus superseded records until compaction).
    pub log_bytes: u64,
}

/// Reads the log of the store in `dir` (as [`FileStore::open`] would, without opening it).
pub fn scan(dir: &Path) -> std::io::Result<LogStats> {
    let bytes = read_log(&dir.join(LOG_FILE))?;
    let mut sizes: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    let _ = read_records(&bytes, |set, key, value| {
        if set {
            let size = (key.len() + value.len() + 17) as u64;
            match sizes.get_mut(key) {
                Some(s) => *s = size,
                None => {
                    sizes.insert(key.to_owned(), size);
                }
            }
        } else {
            sizes.remove(key);
        }
    });
    Ok(LogStats {
        keys: sizes.len() as u64,
        live_bytes: sizes.values().sum(),
        log_bytes: bytes.len() as u64,
    })
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
        let file = OpenOptions::new().append(true).open(&path)?;
        let live_bytes = map
            .iter()
            .map(|(k, v)| (k.len() + v.len() + 17) as u64)
            .sum();
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

    fn put(&mut self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.append(&encode(OP_SET, key, value))?;
        let added = (key.len() + value.len() + 17) as u64;
        if let Some(old) = self.map.insert(key.to_owned(), value.to_vec()) {
            self.live_bytes -= (key.len() + old.len() + 17) as u64;
        }
        self.live_bytes += added;
        self.maybe_compact();
        Ok(())
    }

    fn remove(&mut self, key: &str) -> StoreResult<()> {
        if !self.map.contains_key(key) {
            return Ok(());
        }
        self.append(&encode(OP_DELETE, key, &[]))?;
        if let Some(old) = self.map.remove(key) {
            self.live_bytes -= (key.len() + old.len() + 17) as u64;
        }
        self.maybe_compact();
        Ok(())
    }

    /// Compacts when the log is large and mostly superseded. The write that got here is
    /// already in the log, so a failed compaction does not fail it: it is logged, and tried
    /// again once the log has grown by another [`COMPACT_MIN_BYTES`].
    fn maybe_compact(&mut self) {
        if self.log_bytes <= COMPACT_MIN_BYTES
            || self.log_bytes <= COMPACT_RATIO * self.live_bytes
            || self.log_bytes < self.compact_from
        {
            return;
        }
        if let Err(e) = self.compact() {
            let _ = std::fs::remove_file(self.dir.join(format!("{LOG_FILE}.tmp")));
            self.compact_from = self.log_bytes + COMPACT_MIN_BYTES;
            crate::log::log_line(
                "error",
                "store compaction failed; writes go on to the log as it is",
                &[
                    ("error", e.to_string()),
                    ("log_bytes", self.log_bytes.to_string()),
                    ("retry_at_bytes", self.compact_from.to_string()),
                ],
            );
        }
    }

    /// Rewrites the log with only the live data.
    fn compact(&mut self) -> std::io::Result<()> {
        let tmp = self.dir.join(format!("{LOG_FILE}.tmp"));
        let mut out = BufWriter::new(
            private_file()
                .create(true)
                .truncate(true)
                .write(true)
                .open(&tmp)?,
        );
        let mut written = 0u64;
        for (k, v) in &self.map {
            let rec = encode(OP_SET, k, v);
            out.write_all(&rec)?;
            written += rec.len() as u64;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        let path = self.dir.join(LOG_FILE);
        std::fs::rename(&tmp, &path)?;
        // From here the old log is gone: appending to its handle would write to nothing.
        match OpenOptions::new().append(true).open(&path) {
            Ok(file) => self.file = file,
            Err(e) => {
                self.failed = Some(format!("the compacted log could not be reopened ({e})"));
                return Err(e);
            }
        }
        self.log_bytes = written;
        self.dirty = false;
        if let Err(e) = sync_dir(&self.dir) {
            self.failed = Some(format!("fsync of the store directory failed ({e})"));
            return Err(e);
        }
        Ok(())
    }
}

impl KvBackend for FileStore {
    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(self.lock().map.get(key).cloned())
    }

    fn set(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.lock().put(key, value)
    }

    fn delete(&self, key: &str) -> StoreResult<()> {
        self.lock().remove(key)
    }

    fn list_keys(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        Ok(keys_after(&self.lock().map, cursor, limit))
    }

    fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        let mut inner = self.lock();
        let next = parse_counter(key, inner.map.get(key))?
            .checked_add(delta)
            .ok_or_else(|| StoreError(format!("counter {key} would overflow")))?;
        inner.put(key, next.to_string().as_bytes())?;
        Ok(next)
    }

    fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<bool> {
        let mut inner = self.lock();
        if inner.map.get(key).map(Vec::as_slice) != expected {
            return Ok(false);
        }
        inner.put(key, new)?;
        Ok(true)
    }

    fn get_many(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let inner = self.lock();
        Ok(keys.iter().map(|k| inner.map.get(k).cloned()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        edgehook_testkit::temp_dir(&format!("filestore-{name}"))
    }

    #[test]
    fn survives_reopen_and_cuts_a_torn_tail() {
        let dir = temp_dir("reopen");
        {
            let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
            s.set("a", b"1").expect("set");
            s.set("b", b"2").expect("set");
            s.delete("a").expect("delete");
            assert_eq!(s.increment("n", 5), Ok(5));
            assert_eq!(s.compare_and_swap("b", Some(b"2"), b"3"), Ok(true));
        }
        // A crash mid-append leaves half a record.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.join(LOG_FILE))
            .expect("log");
        f.write_all(&encode(OP_SET, "c", b"torn")[..7])
            .expect("write");
        drop(f);
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
        assert_eq!(s.get("a"), Ok(None));
        assert_eq!(s.get("b"), Ok(Some(b"3".to_vec())));
        assert_eq!(s.get("n"), Ok(Some(b"5".to_vec())));
        assert_eq!(s.get("c"), Ok(None));
        s.set("d", b"4").expect("append after the cut");
        drop(s);
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
        assert_eq!(s.get("d"), Ok(Some(b"4".to_vec())));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn scan_counts_what_the_store_holds() {
        let dir = temp_dir("scan");
        assert_eq!(scan(&dir).expect("no log yet"), LogStats::default());
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
        s.set("a", b"1").expect("set");
        s.set("b", b"22").expect("set");
        s.set("a", b"333").expect("overwrite");
        s.delete("b").expect("delete");
        let stats = scan(&dir).expect("scan");
        assert_eq!(stats.keys, s.len() as u64);
        assert_eq!(stats.live_bytes, s.lock().live_bytes);
        assert_eq!(
            stats.log_bytes,
            std::fs::metadata(dir.join(LOG_FILE)).expect("log").len()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn compaction_keeps_the_live_data() {
        let dir = temp_dir("compact");
        let s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
        let value = vec![7u8; 1 << 16];
        for i in 0..1200 {
            s.set(&format!("k{}", i % 10), &value).expect("set");
        }
        let log = std::fs::metadata(dir.join(LOG_FILE)).expect("log").len();
        assert!(
            log < COMPACT_MIN_BYTES + (2 << 20),
            "log was compacted: {log}"
        );
        drop(s);
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
        assert_eq!(s.len(), 10);
        assert_eq!(s.get("k3"), Ok(Some(value)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_second_opener_of_the_same_store_is_refused_until_the_first_closes() {
        let dir = temp_dir("lock");
        let first = FileStore::open(&dir, SyncPolicy::Always).expect("open");
        first.set("a", b"1").expect("set");
        let second = FileStore::open(&dir, SyncPolicy::Always)
            .err()
            .expect("refused");
        assert_eq!(second.kind(), std::io::ErrorKind::WouldBlock);
        assert!(
            second
                .to_string()
                .contains("in use by another edgehook process")
        );
        // The refused opener read nothing and cut nothing.
        first.set("b", b"2").expect("set");
        drop(first);
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("open after the first closed");
        assert_eq!(s.get("a"), Ok(Some(b"1".to_vec())));
        assert_eq!(s.get("b"), Ok(Some(b"2".to_vec())));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_write_that_fails_part_way_is_taken_back_and_later_writes_survive() {
        let dir = temp_dir("short");
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
        s.set("a", b"1").expect("set");
        s.lock().short_write = Some(7);
        assert!(s.set("b", b"lost").is_err(), "the short write fails");
        assert_eq!(s.get("b"), Ok(None), "a failed write changes nothing");
        s.set("c", b"3").expect("the next write goes on");
        drop(s);
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
        assert_eq!(s.get("a"), Ok(Some(b"1".to_vec())));
        assert_eq!(s.get("b"), Ok(None));
        assert_eq!(
            s.get("c"),
            Ok(Some(b"3".to_vec())),
            "the write after the failed one was not stranded behind half a record"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_write_that_cannot_be_taken_back_refuses_writes_until_a_restart() {
        let dir = temp_dir("refuse");
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
        s.set("a", b"1").expect("set");
        // A handle that can neither write nor cut: the write fails, and so does its undo.
        s.lock().file = File::open(dir.join(LOG_FILE)).expect("read-only handle");
        assert!(s.set("b", b"2").is_err());
        let refused = s.set("c", b"3").expect_err("refused");
        assert!(
            refused.0.contains("refused until edgehook restarts"),
            "{refused:?}"
        );
        assert_eq!(s.get("a"), Ok(Some(b"1".to_vec())), "reads still answer");
        drop(s);
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("a restart recovers");
        s.set("d", b"4").expect("writes again");
        assert_eq!(s.get("a"), Ok(Some(b"1".to_vec())));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_compaction_does_not_fail_the_write_that_set_it_off() {
        let dir = temp_dir("compact-fails");
        let s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
        // The temporary file cannot be created.
        std::fs::create_dir_all(dir.join(format!("{LOG_FILE}.tmp"))).expect("block it");
        let value = vec![7u8; 1 << 16];
        for i in 0..400 {
            s.set(&format!("k{}", i % 10), &value)
                .unwrap_or_else(|e| panic!("write {i} failed: {e:?}"));
        }
        s.set("k3", b"new").expect("set");
        assert_eq!(s.get("k3"), Ok(Some(b"new".to_vec())));
        let retry_at = s.lock().compact_from;
        assert!(
            retry_at > COMPACT_MIN_BYTES,
            "not tried again on every write: {retry_at}"
        );
        drop(s);
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
        assert_eq!(s.get("k3"), Ok(Some(b"new".to_vec())));
        assert_eq!(s.len(), 10);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn damage_before_whole_records_refuses_to_open_and_cuts_nothing() {
        let dir = temp_dir("damage");
        {
            let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
            s.set("a", b"first value").expect("set");
            s.set("b", b"2").expect("set");
            s.set("c", b"3").expect("set");
        }
        let path = dir.join(LOG_FILE);
        let mut bytes = std::fs::read(&path).expect("log");
        let at = bytes
            .windows(5)
            .position(|w| w == b"first")
            .expect("a's value");
        bytes[at] ^= 0x20;
        std::fs::write(&path, &bytes).expect("damage it");
        let err = FileStore::open(&dir, SyncPolicy::Always)
            .err()
            .expect("refused");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        let text = err.to_string();
        assert!(
            text.contains("damaged") && text.contains("byte 0"),
            "{text}"
        );
        assert_eq!(std::fs::read(&path).expect("log"), bytes, "nothing was cut");
        // A torn tail is still cut: half a record, or zeros (blocks a crash left unwritten).
        bytes[at] ^= 0x20;
        bytes.extend_from_slice(&[0u8; 64]);
        std::fs::write(&path, &bytes).expect("zero tail");
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("a torn tail is cut");
        assert_eq!(s.get("c"), Ok(Some(b"3".to_vec())));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_store_is_readable_by_its_owner_only() {
        let dir = temp_dir("mode");
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(dir.join(LOG_FILE), b"").expect("an earlier version's log");
        std::fs::set_permissions(dir.join(LOG_FILE), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
        s.set("sub:x", b"whsec_...").expect("set");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(LOG_FILE)), 0o600);
        assert_eq!(mode(&dir.join(LOCK_FILE)), 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
