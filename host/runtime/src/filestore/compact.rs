//! Rewriting the log with only the live data, with the store's lock held only at the start
//! and the end: reads and writes go on while the live records are copied (at a million
//! records that copy took 2.45 s, every store call waiting behind it).
//!
//! 1. [`Inner::begin_compaction`], under the lock: the place of every live record, the log's
//!    length then (`end`), and a second handle of the log. One compaction at a time.
//! 2. [`Snapshot::copy`], without the lock: each of those records, in log order, read from
//!    the log, checked (damage is not copied: the rewrite fails) and written to
//!    `kv.log.tmp`, and fsynced. A key's record never moves while it is live, and every write after the
//!    snapshot lands at or after `end`, so the records read are exactly the snapshot's.
//! 3. [`Inner::finish_compaction`], under the lock again: the log's bytes written since
//!    `end` (whole records: a failed write is cut back before the lock is released) are
//!    appended to the new log as they are, which is fsynced and renamed over the log; then
//!    every key is pointed at its new place: a record from before `end` where the copy put
//!    it, one from after at its offset in the copied tail. A key deleted meanwhile has its
//!    delete record in the tail, after its copied set record, so a replay ends the same.
//!
//! The new places are worked out before the rename, so a failure up to the rename leaves
//! the store as it was (the temporary file is removed); after it, as before, the store
//! refuses writes until a restart (its log cannot be trusted).

use super::files::{private_file, sync_dir};
use super::format::record_at;
use super::{Inner, LOG_FILE, Slot};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// What a compaction copies (step 1).
pub(super) struct Snapshot {
    /// The live records' places, in the map's (the keys') order.
    places: Vec<Slot>,
    /// The log's length when they were taken.
    end: u64,
    /// A handle of the log to read them from without the lock.
    file: File,
}

/// What step 2 wrote: the temporary log, its length, and the new offset of each record of
/// [`Snapshot::places`], in the same order (the keys').
pub(super) struct Copied {
    out: File,
    written: u64,
    new_at: Vec<u64>,
}

fn invalid(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

/// The temporary log of a rewrite in `dir`.
pub(super) fn tmp_path(dir: &Path) -> PathBuf {
    dir.join(format!("{LOG_FILE}.tmp"))
}

impl Inner {
    /// Step 1 (under the lock): `None` if a compaction is running already.
    pub(super) fn begin_compaction(&mut self) -> std::io::Result<Option<Snapshot>> {
        if self.compacting {
            return Ok(None);
        }
        let file = self.file.try_clone()?;
        let places: Vec<Slot> = self.map.values().copied().collect();
        self.compacting = true;
        Ok(Some(Snapshot {
            places,
            end: self.log_bytes,
            file,
        }))
    }

    /// Step 3 (under the lock): appends the log's tail since the snapshot, puts the new log
    /// in place and points every key at its new record. Ends the compaction either way.
    pub(super) fn finish_compaction(
        &mut self,
        snapshot: Snapshot,
        copied: Copied,
    ) -> std::io::Result<()> {
        let done = self.finish_inner(snapshot, copied);
        self.compacting = false;
        done
    }

    fn finish_inner(&mut self, snapshot: Snapshot, copied: Copied) -> std::io::Result<()> {
        // The log stopped being trusted while the copy ran (a write could not be taken back,
        // an fsync failed): it is not rewritten from.
        if let Some(why) = &self.failed {
            return Err(std::io::Error::other(why.clone()));
        }
        let Copied {
            out,
            written,
            new_at,
        } = copied;
        let end = snapshot.end;
        // Every key's new place, before anything is replaced. The map and the snapshot are
        // walked together in the keys' order: a record from before `end` is the snapshot's
        // record of the same key (keys deleted or rewritten since are skipped over), found by
        // its place, so the walk is linear (a search per key was a second under the lock at
        // a million keys).
        let mut moved = Vec::with_capacity(self.map.len());
        let mut next = 0;
        for slot in self.map.values() {
            let at = match slot.at >= end {
                true => slot.at - end + written,
                false => {
                    while snapshot.places.get(next).is_some_and(|p| p.at != slot.at) {
                        next += 1;
                    }
                    let Some(&at) = new_at.get(next) else {
                        return Err(invalid(format!("no copy of the record at {}", slot.at)));
                    };
                    next += 1;
                    at
                }
            };
            moved.push(Slot { at, len: slot.len });
        }
        // The tail: whole records written since the snapshot, copied as they are.
        let mut out = BufWriter::new(out);
        let mut at = end;
        let mut buf = vec![0u8; 1 << 20];
        while at < self.log_bytes {
            let n = ((self.log_bytes - at) as usize).min(buf.len());
            self.file.read_exact_at(&mut buf[..n], at)?;
            out.write_all(&buf[..n])?;
            at += n as u64;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        let path = self.dir.join(LOG_FILE);
        std::fs::rename(tmp_path(&self.dir), &path)?;
        // From here the old log is gone: appending to its handle would write to nothing.
        match OpenOptions::new().read(true).append(true).open(&path) {
            Ok(file) => self.file = file,
            Err(e) => {
                self.failed = Some(format!("the compacted log could not be reopened ({e})"));
                return Err(e);
            }
        }
        for (slot, new) in self.map.values_mut().zip(moved) {
            *slot = new;
        }
        self.log_bytes = written + (self.log_bytes - end);
        self.dirty = false;
        if let Err(e) = sync_dir(&self.dir) {
            self.failed = Some(format!("fsync of the store directory failed ({e})"));
            return Err(e);
        }
        Ok(())
    }
}

impl Snapshot {
    /// Step 2 (without the lock): the snapshot's records, checked, into `kv.log.tmp` in
    /// `dir`.
    pub(super) fn copy(&self, dir: &Path) -> std::io::Result<Copied> {
        let out = private_file()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(tmp_path(dir))?;
        let mut writer = BufWriter::new(out);
        let mut written = 0u64;
        let mut new_at = vec![0; self.places.len()];
        let mut rec = Vec::new();
        // In the log's order (sequential reads), each new offset kept at its key's place.
        let mut order: Vec<usize> = (0..self.places.len()).collect();
        order.sort_unstable_by_key(|&i| self.places[i].at);
        for i in order {
            let slot = &self.places[i];
            rec.resize(slot.len as usize, 0);
            self.file.read_exact_at(&mut rec, slot.at)?;
            match record_at(&rec, 0) {
                Some((true, _, _, end)) if end == rec.len() => {}
                _ => {
                    return Err(invalid(format!(
                        "the record at byte {} is damaged",
                        slot.at
                    )));
                }
            }
            writer.write_all(&rec)?;
            new_at[i] = written;
            written += slot.len;
        }
        let out = writer.into_inner().map_err(|e| e.into_error())?;
        // The bulk reaches the disk here, without the lock: the fsync in step 3 then has
        // only the tail to write.
        out.sync_data()?;
        Ok(Copied {
            out,
            written,
            new_at,
        })
    }
}
