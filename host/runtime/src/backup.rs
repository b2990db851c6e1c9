//! A consistent copy of the embedded store while `edgehook serve` runs (`edgehook backup`).
//!
//! The store is one append-only log ([`crate::filestore`]): every change is a whole record
//! appended before the operation returns, and a log rewrite replaces the file by renaming a
//! new one over it. So a copy read from one open file handle is a prefix of a log the store
//! wrote (a rename while it is read leaves the handle on the old file, whole), at most with
//! a torn record at its end: exactly what the store holds after the process is killed at
//! that moment, which it is built to come back from (nothing acknowledged is lost, the
//! torn record is cut off when the copy is opened). The copy is then opened once, which
//! replays it, cuts any torn tail and proves it reads, and synced to disk.

use crate::filestore::{FileStore, LOG_FILE, SyncPolicy};
use std::path::Path;

/// What a backup copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backup {
    /// Bytes of log read.
    pub bytes: u64,
    /// Keys the copy holds once opened.
    pub keys: usize,
}

/// Copies the store in directory `from` (the `store` directory of a data directory) to the
/// directory `to`, which must not exist or be empty, while a server may be writing to it.
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
    // Streamed (not read whole into memory): the same one handle, read to its end.
    let mut log = std::fs::File::open(from.join(LOG_FILE))?;
    std::fs::create_dir_all(to)?;
    let mut copy = std::fs::File::create(to.join(LOG_FILE))?;
    let bytes = std::io::copy(&mut log, &mut copy)?;
    copy.sync_all()?;
    drop(copy);
    // Opening replays the copy (and cuts a torn last record); it must read whole.
    let store = FileStore::open(to, SyncPolicy::Always)?;
    let keys = store.len();
    store
        .flush()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(Backup { bytes, keys })
}
