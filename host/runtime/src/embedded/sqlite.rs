//! The embedded store on SQLite: one table `kv (key TEXT PRIMARY KEY, value BLOB) WITHOUT
//! ROWID` in `edgehook.sqlite3`, in write-ahead-log mode.
//!
//! - Every write is its own transaction (a batch is one), committed to the WAL file before
//!   it returns: the bytes are in the kernel, so killing the process loses nothing.
//! - `synchronous=NORMAL` leaves the WAL unsynced at commit; a checkpoint, which syncs it
//!   first, runs on a thread of its own every [`Durability::Every`] period (and at 1,000
//!   pages, SQLite's own default), so a power loss loses at most that window.
//!   [`Durability::Always`] is `synchronous=FULL`: every commit synced.
//! - All writes go through one connection behind a mutex (SQLite has one writer at a time
//!   anyway); compare-and-swap and increment read and write in one `BEGIN IMMEDIATE`
//!   transaction on it. Reads use a pool of read connections, which WAL lets run beside the
//!   writer, each on the last committed state.
//! - An operator can read the file with the `sqlite3` shell while `serve` runs
//!   (`sqlite3 -readonly`), and [`backup`] copies it with SQLite's online backup API.

use super::{Backup, Durability, EmbeddedStore, Engine, prepare, private_file, sync_thread};
use crate::store::{KvBackend, MemoryStore, StoreError, StoreResult, parse_counter};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The database file in the store's directory.
pub const DB_FILE: &str = "edgehook.sqlite3";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY NOT NULL, value BLOB NOT NULL) WITHOUT ROWID";
const GET: &str = "SELECT value FROM kv WHERE key = ?1";
const PUT: &str = "INSERT INTO kv (key, value) VALUES (?1, ?2) \
                   ON CONFLICT (key) DO UPDATE SET value = excluded.value";
const DELETE: &str = "DELETE FROM kv WHERE key = ?1";
const KEYS_AFTER: &str = "SELECT key FROM kv WHERE key > ?1 ORDER BY key LIMIT ?2";
const KEYS_FROM_START: &str = "SELECT key FROM kv ORDER BY key LIMIT ?1";

/// The embedded store on SQLite (see the module docs).
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    /// The one connection that writes.
    writer: Mutex<Connection>,
    /// Read connections not in use (a read takes one, or opens one, and gives it back).
    readers: Mutex<Vec<Connection>>,
    /// The connection the sync thread checkpoints on.
    syncer: Mutex<Connection>,
    /// The `counters` bucket: in memory, never in the database.
    counters: Arc<MemoryStore>,
    _lock: File,
}

fn sql_err(e: rusqlite::Error) -> StoreError {
    StoreError(format!("sqlite: {e}"))
}

fn io_err(e: rusqlite::Error) -> std::io::Error {
    std::io::Error::other(format!("sqlite: {e}"))
}

/// Opens a connection to `path` with the settings every connection of the store uses.
fn connect(path: &Path, flags: OpenFlags, synchronous: &str) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.pragma_update(None, "mmap_size", 256i64 << 20)?;
    conn.pragma_update(None, "cache_size", -16384i64)?;
    conn.set_prepared_statement_cache_capacity(16);
    Ok(conn)
}

fn read_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

impl SqliteStore {
    /// Opens (or creates) the store in `dir`; see [`super::open`].
    pub fn open(dir: &Path, durability: Durability) -> std::io::Result<Self> {
        let lock = prepare(dir, Engine::Sqlite)?;
        let path = dir.join(DB_FILE);
        // Created owner-only before SQLite opens it (SQLite creates its WAL files with the
        // database file's mode).
        private_file().create(true).append(true).open(&path)?;
        let synchronous = match durability {
            Durability::Always => "FULL",
            Durability::Every(_) => "NORMAL",
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let writer = connect(&path, flags, synchronous).map_err(io_err)?;
        let mode: String = writer
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(io_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(std::io::Error::other(format!(
                "sqlite: {} cannot use write-ahead logging (journal_mode {mode})",
                path.display()
            )));
        }
        writer.execute(SCHEMA, []).map_err(io_err)?;
        let syncer = connect(&path, flags, "NORMAL").map_err(io_err)?;
        let shared = Arc::new(Shared {
            syncer: Mutex::new(syncer),
            path,
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
            counters: Arc::new(MemoryStore::new()),
            _lock: lock,
        });
        // Under `Always` every commit is synced already; the checkpoints still keep the WAL
        // short.
        let period = match durability {
            Durability::Every(period) => period,
            Durability::Always => Durability::DEFAULT_PERIOD,
        };
        sync_thread("edgehook-sqlite-sync", Arc::downgrade(&shared), period, |s| {
            if let Err(e) = s.checkpoint() {
                crate::log::log_line("error", "store sync failed", &[("error", e.0)]);
            }
        })?;
        Ok(SqliteStore { shared })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    fn writer(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the connection leaves at most an open transaction, which
        // the next `BEGIN` fails on rather than mixing into: SQLite rolls it back when the
        // connection is next used in autocommit mode.
        self.shared.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on a read connection (from the pool, or a new one), then gives it back.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> StoreResult<T> {
        let pooled = self.readers().pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => connect(&self.shared.path, read_flags(), "NORMAL").map_err(sql_err)?,
        };
        let out = f(&conn).map_err(sql_err);
        self.readers().push(conn);
        out
    }

    fn readers(&self) -> MutexGuard<'_, Vec<Connection>> {
        self.shared
            .readers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction on the writer, committed if it returns
    /// `Ok((true, _))`, rolled back otherwise.
    fn transaction<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>) -> StoreResult<(bool, T)>,
    ) -> StoreResult<T> {
        let mut conn = self.writer();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql_err)?;
        let (commit, out) = f(&tx)?;
        if commit {
            tx.commit().map_err(sql_err)?;
        }
        Ok(out)
    }
}

impl Shared {
    /// Syncs the WAL and copies it into the database as far as readers allow (a passive
    /// checkpoint: it waits for no one, and no one waits for it).
    fn checkpoint(&self) -> StoreResult<()> {
        let conn = self.syncer.lock().unwrap_or_else(|p| p.into_inner());
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .map_err(sql_err)
    }
}

fn get_on(conn: &Connection, key: &str) -> rusqlite::Result<Option<Vec<u8>>> {
    conn.prepare_cached(GET)?
        .query_row(params![key], |r| r.get(0))
        .optional()
}

fn put_on(conn: &Connection, key: &str, value: &[u8]) -> rusqlite::Result<()> {
    conn.prepare_cached(PUT)?
        .execute(params![key, value])
        .map(drop)
}

impl KvBackend for SqliteStore {
    fn counters(&self) -> Option<Arc<dyn KvBackend>> {
        Some(self.shared.counters.clone())
    }

    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        self.read(|conn| get_on(conn, key))
    }

    fn set(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        put_on(&self.writer(), key, value).map_err(sql_err)
    }

    fn delete(&self, key: &str) -> StoreResult<()> {
        let conn = self.writer();
        let mut stmt = conn.prepare_cached(DELETE).map_err(sql_err)?;
        stmt.execute(params![key]).map(drop).map_err(sql_err)
    }

    fn list_keys(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(|conn| match cursor {
            Some(after) => conn
                .prepare_cached(KEYS_AFTER)?
                .query_map(params![after, limit], |r| r.get(0))?
                .collect(),
            None => conn
                .prepare_cached(KEYS_FROM_START)?
                .query_map(params![limit], |r| r.get(0))?
                .collect(),
        })
    }

    fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        self.transaction(|tx| {
            let current = get_on(tx, key).map_err(sql_err)?;
            let next = parse_counter(key, current.as_ref())?
                .checked_add(delta)
                .ok_or_else(|| StoreError(format!("counter {key} would overflow")))?;
            put_on(tx, key, next.to_string().as_bytes()).map_err(sql_err)?;
            Ok((true, next))
        })
    }

    fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<bool> {
        self.transaction(|tx| {
            if get_on(tx, key).map_err(sql_err)?.as_deref() != expected {
                return Ok((false, false));
            }
            put_on(tx, key, new).map_err(sql_err)?;
            Ok((true, true))
        })
    }

    fn get_many(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        self.read(|conn| keys.iter().map(|k| get_on(conn, k)).collect())
    }

    /// One transaction: all of them, or none.
    fn set_many(&self, entries: &[(String, Vec<u8>)]) -> StoreResult<()> {
        self.transaction(|tx| {
            for (key, value) in entries {
                put_on(tx, key, value).map_err(sql_err)?;
            }
            Ok((true, ()))
        })
    }
}

impl EmbeddedStore for SqliteStore {
    fn flush(&self) -> StoreResult<()> {
        self.shared.checkpoint()
    }

    fn len(&self) -> StoreResult<u64> {
        let n: i64 =
            self.read(|conn| conn.query_row("SELECT count(*) FROM kv", [], |r| r.get(0)))?;
        Ok(n.unsigned_abs())
    }

    fn engine(&self) -> Engine {
        Engine::Sqlite
    }
}

/// Copies the database in `from` to `to` with SQLite's online backup API, in one step (a
/// read transaction: the copy is the state of one moment, and a writer meanwhile does not
/// restart it), then checks the copy (`PRAGMA quick_check`) and counts its keys.
pub(super) fn backup(from: &Path, to: &Path) -> std::io::Result<Backup> {
    let source = Connection::open_with_flags(from.join(DB_FILE), read_flags()).map_err(io_err)?;
    source
        .busy_timeout(std::time::Duration::from_secs(5))
        .map_err(io_err)?;
    std::fs::DirBuilder::new().recursive(true).create(to)?;
    let path = to.join(DB_FILE);
    private_file().create_new(true).write(true).open(&path)?;
    let mut copy = Connection::open(&path).map_err(io_err)?;
    {
        let step = rusqlite::backup::Backup::new(&source, &mut copy).map_err(io_err)?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            match step.step(-1).map_err(io_err)? {
                rusqlite::backup::StepResult::Done => break,
                _ if std::time::Instant::now() > deadline => {
                    return Err(std::io::Error::other(
                        "sqlite: the store stayed locked for 60 s",
                    ));
                }
                _ => std::thread::park_timeout(std::time::Duration::from_millis(10)),
            }
        }
    }
    let check: String = copy
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(io_err)?;
    if check != "ok" {
        return Err(std::io::Error::other(format!(
            "sqlite: the copy fails its check: {check}"
        )));
    }
    let keys: i64 = copy
        .query_row("SELECT count(*) FROM kv", [], |r| r.get(0))
        .map_err(io_err)?;
    drop(copy);
    File::open(&path)?.sync_all()?;
    Ok(Backup {
        bytes: std::fs::metadata(&path)?.len(),
        keys: keys.unsigned_abs(),
    })
}
