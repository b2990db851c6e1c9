//! The embedded durable store of `edgehook serve`: a thin adapter over a well-kept engine
//! (docs/design/storage.md says which, and why, with the measurements).
//!
//! - [`sqlite`]: SQLite (compiled in), one table in write-ahead-log mode.
//! - [`lsm`]: fjall, an LSM tree in Rust.
//!
//! Both keep the promise the host makes to the component: a write has reached the operating
//! system when the operation returns (so killing the process loses nothing acknowledged), and
//! it reaches stable storage within the [`Durability`] window (so a power loss loses at most
//! that window); compare-and-swap and increment are atomic; the `counters` bucket (the rate
//! limits' counts, which need no durability) lives in memory beside the engine, off its
//! journal. One process at a time: the directory's `lock` file is held (`flock`) while the
//! store is open, so a second `serve` on the same data directory stops at once.

pub mod lsm;
pub mod sqlite;

use crate::store::{KvBackend, StoreResult};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// When acknowledged writes reach stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Before the write returns: survives a power loss at once, costs an fsync per write.
    Always,
    /// On a timer: survives a process crash at once, a power loss once the interval has
    /// passed.
    Every(Duration),
}

impl Durability {
    /// `serve`'s default: stable storage within 100 ms.
    pub const DEFAULT: Durability = Durability::Every(Durability::DEFAULT_PERIOD);
    /// The default's window.
    pub const DEFAULT_PERIOD: Duration = Duration::from_millis(100);
}

/// The engines the embedded store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// SQLite ([`sqlite::SqliteStore`]).
    Sqlite,
    /// fjall ([`lsm::FjallStore`]).
    Fjall,
}

impl Engine {
    /// The engine's name, as options and logs spell it.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Fjall => "fjall",
        }
    }

    /// The engine named `name` ([`Engine::name`]).
    pub fn parse(name: &str) -> Option<Engine> {
        [Engine::Sqlite, Engine::Fjall]
            .into_iter()
            .find(|e| e.name() == name)
    }
}

/// The engine `edgehook serve` keeps its state in (docs/design/storage.md: why).
pub const DEFAULT_ENGINE: Engine = Engine::Sqlite;

/// An open embedded store: the key-value operations, plus what `serve` and the tools need.
pub trait EmbeddedStore: KvBackend {
    /// Forces every acknowledged write to stable storage now.
    fn flush(&self) -> StoreResult<()>;
    /// Number of keys (a scan: for tools and tests, not the hot path).
    fn len(&self) -> StoreResult<u64>;
    /// Whether the store holds no key.
    fn is_empty(&self) -> StoreResult<bool> {
        Ok(self.len()? == 0)
    }
    /// The engine.
    fn engine(&self) -> Engine;
}

/// Opens (or creates) the store of `engine` in `dir`.
///
/// Fails with one clear message when `dir` holds a store this version cannot read (the
/// hand-built log of earlier versions, or the other engine's files): it never reads such a
/// directory as empty.
pub fn open(
    engine: Engine,
    dir: &Path,
    durability: Durability,
) -> std::io::Result<Arc<dyn EmbeddedStore>> {
    Ok(match engine {
        Engine::Sqlite => Arc::new(sqlite::SqliteStore::open(dir, durability)?),
        Engine::Fjall => Arc::new(lsm::FjallStore::open(dir, durability)?),
    })
}

/// What a backup copied ([`backup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backup {
    /// Bytes of the copy on disk.
    pub bytes: u64,
    /// Keys the copy holds.
    pub keys: u64,
}

/// Copies the store in `from` (the `store` directory of a data directory) to `to`, which
/// must not exist or be empty, consistently, while a server may be writing to it.
pub fn backup(from: &Path, to: &Path) -> std::io::Result<Backup> {
    if to
        .read_dir()
        .is_ok_and(|mut entries| entries.next().is_some())
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{} is not empty", to.display()),
        ));
    }
    match found_engine(from)? {
        Some(Engine::Sqlite) => sqlite::backup(from, to),
        Some(Engine::Fjall) => lsm::backup(from, to),
        None => Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} holds no edgehook store", from.display()),
        )),
    }
}

/// The file the retired hand-built store kept its log in.
const OLD_LOG: &str = "kv.log";
/// Held locked (`flock`) while a process has the store open.
const LOCK_FILE: &str = "lock";

/// The engine whose files `dir` holds, if any; an error if it holds the retired format.
pub fn found_engine(dir: &Path) -> std::io::Result<Option<Engine>> {
    if dir.join(OLD_LOG).exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} holds {OLD_LOG}, the store format of an earlier edgehook build, which this \
                 version does not read; there has been no release to migrate from: move the \
                 directory away (or start with another --data-dir) and start again",
                dir.display()
            ),
        ));
    }
    if dir.join(sqlite::DB_FILE).exists() {
        return Ok(Some(Engine::Sqlite));
    }
    if dir.join(lsm::DB_DIR).exists() {
        return Ok(Some(Engine::Fjall));
    }
    Ok(None)
}

/// Creates the store's directory (owner only: it holds every signing secret), refuses one
/// that holds another format ([`found_engine`]), and takes its lock.
fn prepare(dir: &Path, engine: Engine) -> std::io::Result<File> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    if let Some(found) = found_engine(dir)?
        && found != engine
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{} holds a {} store, not {}",
                dir.display(),
                found.name(),
                engine.name()
            ),
        ));
    }
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

/// Options for a file of the store: readable and writable by its owner only.
fn private_file() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(0o600);
    options
}

/// Runs `sync` on the store behind `store` every `period` on a thread of its own, until the
/// store is dropped (the thread holds only a weak reference between rounds).
fn sync_thread<S: Send + Sync + 'static>(
    name: &str,
    store: Weak<S>,
    period: Duration,
    sync: fn(&S),
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            loop {
                std::thread::park_timeout(period);
                let Some(store) = store.upgrade() else { return };
                sync(&store);
            }
        })
        .map(drop)
}

/// Sums the blocks the files under `dir` take on disk (the store's bytes on disk, as `du`
/// counts them: a file's preallocated space included, a hole not).
pub fn disk_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            disk_bytes(&entry.path())?
        } else {
            std::os::unix::fs::MetadataExt::blocks(&meta) * 512
        };
    }
    Ok(total)
}
