//! Rewriting the log with only the live data, with the store's lock held only at the start
//! and the end: reads and writes go on while the live records are copied (at a million
//! records that copy took 2.45 s, every store call waiting behind it).
//!
//! 1. [`Inner::begin_compaction`], under the lock: the key index's recent changes are frozen
//!    (as for a merge of the index, [`super::index`]), so the frozen map laid over the runs
//!    lists every live key as of now, with its place; the log's length then (`end`), and a
//!    second handle of the log. One compaction or merge at a time.
//! 2. [`Snapshot::copy`], without the lock: each of those records, in the keys' order, read
//!    from the log, checked (damage is not copied: the rewrite fails) and written to
//!    `kv.log.tmp`, which is fsynced; and the new index, the same keys at their new places.
//!    A key's record never moves while it is live, and every write after the snapshot lands
//!    at or after `end`, so the records read are exactly the snapshot's.
//! 3. [`Inner::finish_compaction`], under the lock again: the log's bytes written since
//!    `end` (whole records: a failed write is cut back before the lock is released) are
//!    appended to the new log as they are, which is fsynced and renamed over the log; the new
//!    index becomes the only run, and the recent changes (every one made since `end`) move by
//!    the same distance as the tail. A key deleted meanwhile has its delete record in the
//!    tail, after its copied set record, so a replay ends the same. The old log and index are
//!    handed back ([`Retired`]) to be freed after the lock: the old log's last close frees its
//!    blocks (261 ms at 1.25 million records, every store call waiting, when it was closed
//!    under the lock).
//!
//! A failure up to the rename leaves the store as it was (the frozen changes go back under
//! the recent ones, the temporary file is removed); after it, as before, the store refuses
//! writes until a restart (its log cannot be trusted).

use super::files::{private_file, sync_dir};
use super::format::record_at;
use super::index::{Entry, Frozen, Replaced, Walk};
use super::run::{Run, RunWriter};
use super::{Inner, LOG_FILE, Slot};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// What a compaction copies (step 1).
pub(super) struct Snapshot {
    /// The index as of `end`: its runs and the changes frozen over them.
    frozen: Frozen,
    /// The log's length when they were taken.
    end: u64,
    /// A handle of the log to read them from without the lock.
    file: File,
}

/// What a finished compaction replaced, freed when this is dropped, after the store's lock
/// is let go: the old log's handles (the last one closed frees the old log's blocks, which
/// the rename unlinked: 753 MiB at 1.25 million records) and the old index.
pub(super) struct Retired {
    _log: File,
    _snapshot: File,
    _index: Replaced,
}

impl Retired {
    /// The old log's handle (tests).
    #[cfg(test)]
    pub(super) fn old_log(&self) -> &File {
        &self._log
    }
}

/// What step 2 wrote: the temporary log, its length, and the index of its records.
pub(super) struct Copied {
    out: File,
    written: u64,
    index: Run,
}

fn invalid(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

/// The temporary log of a rewrite in `dir`.
pub(super) fn tmp_path(dir: &Path) -> PathBuf {
    dir.join(format!("{LOG_FILE}.tmp"))
}

impl Inner {
    /// Step 1 (under the lock): `None` if a compaction or a merge of the index is running.
    pub(super) fn begin_compaction(&mut self) -> std::io::Result<Option<Snapshot>> {
        if self.compacting || self.index.frozen.is_some() {
            return Ok(None);
        }
        let file = self.file.try_clone()?;
        let Some(frozen) = self.index.freeze() else {
            return Ok(None);
        };
        self.compacting = true;
        Ok(Some(Snapshot {
            frozen,
            end: self.log_bytes,
            file,
        }))
    }

    /// Step 3 (under the lock): appends the log's tail since the snapshot, puts the new log
    /// and its index in place and moves the recent changes with the tail; gives back what
    /// they replaced ([`Retired`]) for the caller to drop once it has let go of the lock.
    /// Ends the compaction either way (a failure puts the frozen changes back).
    pub(super) fn finish_compaction(
        &mut self,
        snapshot: Snapshot,
        copied: Copied,
    ) -> std::io::Result<Retired> {
        let done = self.finish_inner(snapshot, copied);
        self.compacting = false;
        self.index.thaw();
        done
    }

    /// A compaction whose copy failed ends: the frozen changes go back.
    pub(super) fn abandon_compaction(&mut self) {
        self.compacting = false;
        self.index.thaw();
    }

    fn finish_inner(&mut self, snapshot: Snapshot, copied: Copied) -> std::io::Result<Retired> {
        // The log stopped being trusted while the copy ran (a write could not be taken back,
        // an fsync failed): it is not rewritten from.
        if let Some(why) = &self.failed {
            return Err(std::io::Error::other(why.clone()));
        }
        let Copied {
            out,
            written,
            index,
        } = copied;
        let end = snapshot.end;
        // Every change since the snapshot is a record in the tail.
        if let Some((key, _)) = self
            .index
            .recent
            .iter()
            .find(|(_, e)| matches!(e, Entry::Live(s) if s.at < end))
        {
            return Err(invalid(format!("{key} changed before the snapshot's end")));
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
        let old_log = match OpenOptions::new().read(true).append(true).open(&path) {
            Ok(file) => std::mem::replace(&mut self.file, file),
            Err(e) => {
                self.failed = Some(format!("the compacted log could not be reopened ({e})"));
                return Err(e);
            }
        };
        for entry in self.index.recent.values_mut() {
            if let Entry::Live(slot) = entry {
                slot.at = slot.at - end + written;
            }
        }
        let index = self.index.install_only(index);
        self.log_bytes = written + (self.log_bytes - end);
        self.dirty = false;
        let retired = Retired {
            _log: old_log,
            _snapshot: snapshot.file,
            _index: index,
        };
        if let Err(e) = sync_dir(&self.dir) {
            self.failed = Some(format!("fsync of the store directory failed ({e})"));
            return Err(e);
        }
        Ok(retired)
    }
}

impl Snapshot {
    /// Step 2 (without the lock): the snapshot's records, checked, into `kv.log.tmp` in
    /// `dir`, and their index.
    pub(super) fn copy(&self, dir: &Path) -> std::io::Result<Copied> {
        let out = private_file()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(tmp_path(dir))?;
        let mut writer = BufWriter::with_capacity(1 << 20, out);
        let mut index = RunWriter::new(dir, self.frozen.entries(self.frozen.runs.len()))?;
        let mut written = 0u64;
        let mut rec = Vec::new();
        let mut walk = Walk::new(
            &[self.frozen.changes.as_ref()],
            &self.frozen.runs,
            None,
            false,
        )?;
        while let Some((key, entry)) = walk.next()? {
            let Entry::Live(slot) = entry else {
                continue;
            };
            rec.resize(slot.len as usize, 0);
            self.file.read_exact_at(&mut rec, slot.at)?;
            match record_at(&rec, 0) {
                Some((true, k, _, end)) if k == key && end == rec.len() => {}
                _ => {
                    return Err(invalid(format!(
                        "the record at byte {} is damaged",
                        slot.at
                    )));
                }
            }
            writer.write_all(&rec)?;
            index.push(
                key,
                Entry::Live(Slot {
                    at: written,
                    len: slot.len,
                }),
            )?;
            written += slot.len;
        }
        let out = writer.into_inner().map_err(|e| e.into_error())?;
        // The bulk reaches the disk here, without the lock: the fsync in step 3 then has
        // only the tail to write.
        out.sync_data()?;
        Ok(Copied {
            out,
            written,
            index: index.finish()?,
        })
    }
}
