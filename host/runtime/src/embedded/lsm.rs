//! The embedded store on fjall: one keyspace `kv` in the directory `fjall/`.
//!
//! - fjall writes every change to its journal and hands it to the operating system before
//!   the write returns (its default `PersistMode::Buffer`): killing the process loses
//!   nothing. A thread of the store fsyncs the journal every [`Durability::Every`] period,
//!   so a power loss loses at most that window; [`Durability::Always`] fsyncs after every
//!   write.
//! - Writes take one mutex, so compare-and-swap and increment (a read, then a write) are
//!   atomic against every other write: fjall's own single-writer transactions work the same
//!   way. Reads take no lock. A batch is one fjall write batch: all of it, or none.
//! - [`backup`] copies a consistent snapshot key by key into a new database (fjall has no
//!   copy of its own files while open).

use super::{Backup, Durability, EmbeddedStore, Engine, prepare, sync_thread};
use crate::store::{KvBackend, MemoryStore, StoreError, StoreResult, parse_counter};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};
use std::fs::File;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// The database's directory in the store's directory.
pub const DB_DIR: &str = "fjall";
const KEYSPACE: &str = "kv";

/// The embedded store on fjall (see the module docs).
#[derive(Clone)]
pub struct FjallStore {
    shared: Arc<Shared>,
}

struct Shared {
    db: Database,
    kv: Keyspace,
    /// Held by every write (see the module docs).
    writes: Mutex<()>,
    always: bool,
    counters: Arc<MemoryStore>,
    _lock: File,
}

fn err(e: fjall::Error) -> StoreError {
    StoreError(format!("fjall: {e}"))
}

fn io_err(e: fjall::Error) -> std::io::Error {
    std::io::Error::other(format!("fjall: {e}"))
}

/// Opens fjall's database in `dir` and its keyspace.
fn open_db(dir: &Path) -> fjall::Result<(Database, Keyspace)> {
    let db = Database::builder(dir)
        .cache_size(32 << 20)
        .worker_threads(1)
        .open()?;
    let kv = db.keyspace(KEYSPACE, KeyspaceCreateOptions::default)?;
    Ok((db, kv))
}

impl FjallStore {
    /// Opens (or creates) the store in `dir`; see [`super::open`].
    pub fn open(dir: &Path, durability: Durability) -> std::io::Result<Self> {
        let lock = prepare(dir, Engine::Fjall)?;
        let (db, kv) = open_db(&dir.join(DB_DIR)).map_err(io_err)?;
        let shared = Arc::new(Shared {
            db,
            kv,
            writes: Mutex::new(()),
            always: durability == Durability::Always,
            counters: Arc::new(MemoryStore::new()),
            _lock: lock,
        });
        if let Durability::Every(period) = durability {
            sync_thread(
                "edgehook-fjall-sync",
                Arc::downgrade(&shared),
                period,
                |s| {
                    if let Err(e) = s.db.persist(PersistMode::SyncData) {
                        crate::log::log_line(
                            "error",
                            "store sync failed",
                            &[("error", e.to_string())],
                        );
                    }
                },
            )?;
        }
        Ok(FjallStore { shared })
    }

    /// Runs the write `f` under the write lock, then syncs if every write must be.
    fn write<T>(&self, f: impl FnOnce(&Keyspace) -> StoreResult<T>) -> StoreResult<T> {
        let _guard = self.writes();
        let out = f(&self.shared.kv)?;
        if self.shared.always {
            self.shared.db.persist(PersistMode::SyncData).map_err(err)?;
        }
        Ok(out)
    }

    fn writes(&self) -> MutexGuard<'_, ()> {
        self.shared.writes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl KvBackend for FjallStore {
    fn counters(&self) -> Option<Arc<dyn KvBackend>> {
        Some(self.shared.counters.clone())
    }

    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        let value = self.shared.kv.get(key).map_err(err)?;
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
        self.shared
            .kv
            .range::<&[u8], _>((from, Bound::Unbounded))
            .take(limit)
            .map(|item| {
                let key = item.key().map_err(err)?;
                String::from_utf8(key.to_vec())
                    .map_err(|_| StoreError("fjall: a key is not UTF-8".into()))
            })
            .collect()
    }

    fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        self.write(|kv| {
            let current = kv.get(key).map_err(err)?.map(|v| v.to_vec());
            let next = parse_counter(key, current.as_ref())?
                .checked_add(delta)
                .ok_or_else(|| StoreError(format!("counter {key} would overflow")))?;
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
            let current = kv.get(key).map_err(err)?;
            if current.as_deref() != expected {
                return Ok(false);
            }
            kv.insert(key, new).map_err(err)?;
            Ok(true)
        })
    }

    fn get_many(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        // One snapshot: the values of one moment.
        let snapshot = self.shared.db.snapshot();
        keys.iter()
            .map(|k| {
                let value = snapshot.get(&self.shared.kv, k).map_err(err)?;
                Ok(value.map(|v| v.to_vec()))
            })
            .collect()
    }

    /// One write batch: all of them, or none.
    fn set_many(&self, entries: &[(String, Vec<u8>)]) -> StoreResult<()> {
        self.write(|kv| {
            let mut batch = self.shared.db.batch();
            for (key, value) in entries {
                batch.insert(kv, key.as_str(), value.as_slice());
            }
            batch.commit().map_err(err)
        })
    }
}

impl EmbeddedStore for FjallStore {
    fn flush(&self) -> StoreResult<()> {
        self.shared.db.persist(PersistMode::SyncAll).map_err(err)
    }

    fn len(&self) -> StoreResult<u64> {
        self.shared.kv.len().map(|n| n as u64).map_err(err)
    }

    fn engine(&self) -> Engine {
        Engine::Fjall
    }
}

/// Copies the store in `from` to `to`: fjall's database cannot be opened by a second
/// process, so the copy is made from a store opened here, which works only while `serve` is
/// stopped; the copy is one snapshot, written as one database and synced.
pub(super) fn backup(from: &Path, to: &Path) -> std::io::Result<Backup> {
    let source = FjallStore::open(from, Durability::Always)?;
    let snapshot = source.shared.db.snapshot();
    let (db, kv) = open_db(&to.join(DB_DIR)).map_err(io_err)?;
    let mut keys = 0u64;
    let mut batch = db.batch();
    for item in snapshot.iter(&source.shared.kv) {
        let (key, value) = item.into_inner().map_err(io_err)?;
        batch.insert(&kv, key, value);
        keys += 1;
        if batch.len() >= 10_000 {
            std::mem::replace(&mut batch, db.batch())
                .commit()
                .map_err(io_err)?;
        }
    }
    batch.commit().map_err(io_err)?;
    db.persist(PersistMode::SyncAll).map_err(io_err)?;
    drop((kv, db));
    Ok(Backup {
        bytes: super::disk_bytes(to)?,
        keys,
    })
}
