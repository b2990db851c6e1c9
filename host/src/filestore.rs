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
//! the end (a crash mid-append) is cut off. When the log holds much more than the live data
//! it is rewritten (to a temporary file, fsynced, then renamed over the log).

use crate::store::{KvBackend, StoreError, StoreResult, keys_after, parse_counter};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Write};
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
const LOG_FILE: &str = "kv.log";
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

/// Walks the valid records of a log, calling `f(is_set, key, value)` for each; returns the
/// length of the valid prefix (a torn or corrupt record ends it).
fn read_records(bytes: &[u8], mut f: impl FnMut(bool, &str, &[u8])) -> u64 {
    let mut pos = 0usize;
    let read_u32 = |b: &[u8], at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    while pos < bytes.len() {
        let start = pos;
        let Some(op) = bytes.get(pos).copied() else {
            break;
        };
        let Some(klen) = read_u32(bytes, pos + 1) else {
            break;
        };
        let kstart = pos + 5;
        let Some(vlen) = read_u32(bytes, kstart + klen) else {
            break;
        };
        let vstart = kstart + klen + 4;
        let end = vstart + vlen;
        let Some(sum) = bytes.get(end..end + 8) else {
            break;
        };
        let sum = u64::from_le_bytes(sum.try_into().unwrap_or_default());
        if fnv1a(&bytes[start..end]) != sum {
            break;
        }
        let Ok(key) = std::str::from_utf8(&bytes[kstart..kstart + klen]) else {
            break;
        };
        match op {
            OP_SET => f(true, key, &bytes[vstart..end]),
            OP_DELETE => f(false, key, &[]),
            _ => break,
        }
        pos = end + 8;
    }
    pos as u64
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

/// Replays a log; returns the map and the length of the valid prefix.
fn replay(path: &Path) -> std::io::Result<(BTreeMap<String, Vec<u8>>, u64)> {
    let mut map = BTreeMap::new();
    let bytes = read_log(path)?;
    let valid = read_records(&bytes, |set, key, value| {
        if set {
            map.insert(key.to_owned(), value.to_vec());
        } else {
            map.remove(key);
        }
    });
    Ok((map, valid))
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
    read_records(&bytes, |set, key, value| {
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
    pub fn open(dir: &Path, sync: SyncPolicy) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(LOG_FILE);
        let (map, valid) = replay(&path)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        // Cut a torn tail off, then append after the valid prefix.
        file.set_len(valid)?;
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
            })),
        };
        if let SyncPolicy::Every(period) = sync
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let weak = Arc::downgrade(&store.inner);
            handle.spawn(async move {
                let mut timer = tokio::time::interval(period);
                loop {
                    timer.tick().await;
                    let Some(inner) = weak.upgrade() else { return };
                    let _ = FileStore { inner }.flush();
                }
            });
        }
        Ok(store)
    }

    /// Forces everything written so far to stable storage.
    pub fn flush(&self) -> StoreResult<()> {
        let mut inner = self.lock();
        if inner.dirty {
            inner.file.sync_data().map_err(io_err)?;
            inner.dirty = false;
        }
        Ok(())
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

impl Inner {
    fn append(&mut self, rec: &[u8]) -> StoreResult<()> {
        self.file.write_all(rec).map_err(io_err)?;
        self.log_bytes += rec.len() as u64;
        self.dirty = true;
        if self.sync == SyncPolicy::Always {
            self.file.sync_data().map_err(io_err)?;
            self.dirty = false;
        }
        if self.log_bytes > COMPACT_MIN_BYTES && self.log_bytes > COMPACT_RATIO * self.live_bytes {
            self.compact().map_err(io_err)?;
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
        Ok(())
    }

    /// Rewrites the log with only the live data.
    fn compact(&mut self) -> std::io::Result<()> {
        let tmp = self.dir.join(format!("{LOG_FILE}.tmp"));
        let mut out = BufWriter::new(File::create(&tmp)?);
        let mut written = 0u64;
        for (k, v) in &self.map {
            let rec = encode(OP_SET, k, v);
            out.write_all(&rec)?;
            written += rec.len() as u64;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, self.dir.join(LOG_FILE))?;
        self.file = OpenOptions::new()
            .append(true)
            .open(self.dir.join(LOG_FILE))?;
        self.log_bytes = written;
        self.dirty = false;
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
        let dir =
            std::env::temp_dir().join(format!("edgehook-filestore-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
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
}
