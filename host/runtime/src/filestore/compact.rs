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
//! 3. [`Copied::catch_up`], without the lock: the log's bytes written since `end` up to its
//!    length read under the lock a moment before (whole records: a failed write is cut back
//!    before the lock is released, and bytes below that length never change) are appended to
//!    the new log as they are, in rounds until what is left is small, and fsynced. Under a
//!    sustained load the copy of a large log lasts seconds and the log grows by megabytes
//!    meanwhile; copied and fsynced under the lock, every store call waited for them.
//! 4. [`Inner::finish_compaction`], under the lock again: the rest of the tail (what came
//!    since the last round) is appended the same way, the new log fsynced and renamed over
//!    the log; the new index becomes the only run, and the recent changes (every one made
//!    since `end`) move by the same distance as the tail. A key deleted meanwhile has its
//!    delete record in the tail, after its copied set record, so a replay ends the same. The
//!    old log and index are handed back ([`Retired`]) to be freed after the lock: the old
//!    log's last close frees its blocks (261 ms at 1.25 million records, every store call
//!    waiting, when it was closed under the lock).
//!
//! The store's own compactions are paced as its merges are ([`Pace`], a record an entry):
//! at full speed one takes a core for a second or more, which a store under a sustained
//! load cannot spare (BENCHMARKS.md, "Session 32").
//!
//! A failure up to the rename leaves the store as it was (the frozen changes go back under
//! the recent ones, the temporary file is removed); after it, as before, the store refuses
//! writes until a restart (its log cannot be trusted).

use super::files::{private_file, sync_dir};
use super::format::record_at;
use super::index::{Entry, Frozen, Pace, Paced, Replaced, Walk, step};
use super::run::{Run, RunWriter};
use super::{COMPACT_MIN_BYTES, FileStore, Inner, LOG_FILE, Slot, io_err};
use crate::store::StoreResult;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a compaction did ([`FileStore::compact`]); the store logs it (`store compacted`)
/// each time it compacts by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    /// The log's length when the compaction began, in bytes.
    pub log_before: u64,
    /// The new log's length when it was put in place (the live data, and what was written
    /// while it was copied).
    pub log_after: u64,
    /// The whole compaction's wall time.
    pub took: Duration,
    /// How long its last step held the store's lock (every store call waits for it).
    pub held_at_end: Duration,
}

impl Compacted {
    fn log(&self) {
        let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
        crate::log::log_line(
            "info",
            "store compacted",
            &[
                ("log_bytes_before", self.log_before.to_string()),
                ("log_bytes_after", self.log_after.to_string()),
                ("ms", ms(self.took)),
                ("lock_held_ms", ms(self.held_at_end)),
            ],
        );
    }
}

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

/// What steps 2 and 3 wrote: the temporary log, the snapshot's part of it, the index of
/// that part's records, and how much of the tail followed it.
pub(super) struct Copied {
    out: File,
    written: u64,
    index: Run,
    tail: u64,
}

/// A round of [`Copied::catch_up`] leaves at most this much of the tail to the next one (or
/// to the copy under the lock): about a millisecond's copy.
const TAIL_LEFT: u64 = 1 << 20;
/// At most this many rounds: a log growing faster than it copies still ends.
const TAIL_ROUNDS: usize = 4;

/// Appends `from..to` of `log` to `out` (the log's bytes as they are: whole records).
fn append_range(log: &File, from: u64, to: u64, out: &mut File) -> std::io::Result<()> {
    let mut buf = vec![0u8; ((to - from) as usize).min(1 << 20)];
    let mut at = from;
    while at < to {
        let n = ((to - at) as usize).min(buf.len());
        log.read_exact_at(&mut buf[..n], at)?;
        out.write_all(&buf[..n])?;
        at += n as u64;
    }
    Ok(())
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
            mut out,
            written,
            index,
            tail,
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
        // The rest of the tail: what came since step 3's last round.
        append_range(&self.file, end + tail, self.log_bytes, &mut out)?;
        out.sync_all()?;
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
    /// `dir`, and their index; at `pace` where one is given (a record an entry).
    pub(super) fn copy(&self, dir: &Path, mut pace: Paced<'_>) -> std::io::Result<Copied> {
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
            step(&mut pace);
        }
        let out = writer.into_inner().map_err(|e| e.into_error())?;
        // The bulk reaches the disk here, without the lock: the fsyncs of steps 3 and 4
        // then have only the tail to write.
        out.sync_data()?;
        Ok(Copied {
            out,
            written,
            index: index.finish()?,
            tail: 0,
        })
    }
}

impl Copied {
    /// Step 3 (without the lock): appends the snapshot's log from where the last round
    /// stopped to `length()` (the log's length, read under the lock at each call), in rounds
    /// until at most [`TAIL_LEFT`] bytes were left behind (or [`TAIL_ROUNDS`] of them), then
    /// fsyncs what it appended: step 4 under the lock has only the rest to copy and sync.
    pub(super) fn catch_up(
        &mut self,
        snapshot: &Snapshot,
        mut length: impl FnMut() -> u64,
    ) -> std::io::Result<()> {
        let mut appended = false;
        for _ in 0..TAIL_ROUNDS {
            let from = snapshot.end + self.tail;
            let to = length();
            if to <= from + TAIL_LEFT {
                break;
            }
            append_range(&snapshot.file, from, to, &mut self.out)?;
            self.tail = to - snapshot.end;
            appended = true;
        }
        if appended {
            self.out.sync_data()?;
        }
        Ok(())
    }
}

impl FileStore {
    /// Rewrites the log with only the live data now, at full speed (the benchmarks measure
    /// the compacted size); what it did, or `None` if a compaction is under way. The store
    /// compacts by itself, at a pace ([`FileStore::compact_paced`]), when the log holds
    /// four times the live data (`COMPACT_RATIO`). A failure is handled as the store's own
    /// compaction's: a failed rename or reopen leaves the store refusing writes (see the
    /// module docs).
    pub fn compact(&self) -> StoreResult<Option<Compacted>> {
        self.compact_at(None)
    }

    /// The same as [`FileStore::compact`], at the pace the store compacts by itself: the
    /// copy rests three times as long as each 16,384 records took, so it takes at most a
    /// quarter of a core from the store's callers.
    pub fn compact_paced(&self) -> StoreResult<Option<Compacted>> {
        let mut pace = Pace::new(std::time::Instant::now());
        self.compact_at(Some((&mut pace, &mut std::thread::sleep)))
    }

    /// A compaction at `pace` (`None`: at full speed); `None` if one is under way.
    fn compact_at(&self, pace: Paced<'_>) -> StoreResult<Option<Compacted>> {
        let _one = self.maintenance.lock().unwrap_or_else(|p| p.into_inner());
        let started = std::time::Instant::now();
        let (snapshot, dir, log_before) = {
            let mut inner = self.lock();
            inner.refuse()?;
            match inner.begin_compaction().map_err(io_err)? {
                Some(snapshot) => (snapshot, inner.dir.clone(), inner.log_bytes),
                None => return Ok(None), // one is under way
            }
        };
        // The long part, without the lock (the module docs): the snapshot's records, then
        // the tail written meanwhile.
        let copied = snapshot.copy(&dir, pace).and_then(|mut copied| {
            copied.catch_up(&snapshot, || self.lock().log_bytes)?;
            Ok(copied)
        });
        let mut inner = self.lock();
        let held = std::time::Instant::now();
        let done = match copied {
            Ok(copied) => inner.finish_compaction(snapshot, copied),
            Err(e) => {
                inner.abandon_compaction();
                Err(e)
            }
        };
        let report = Compacted {
            log_before,
            log_after: inner.log_bytes,
            took: started.elapsed(),
            held_at_end: held.elapsed(),
        };
        // The old log and index are freed with the lock let go.
        drop(inner);
        if let Err(e) = done.map(drop) {
            let _ = std::fs::remove_file(tmp_path(&dir));
            return Err(io_err(e));
        }
        Ok(Some(report))
    }

    /// The log's compaction as the store runs it by itself: a failure is logged and tried
    /// again once the log has grown by another 16 MiB.
    ///
    /// Writes made while the copy ran may have made the log due again (they could not ask
    /// for a compaction while one was under way): it compacts again then, rather than wait
    /// for the next write, which may never come.
    pub(super) fn compact_or_log(&self) {
        let (done, mut inner) = loop {
            let done = self.compact_paced();
            if let Ok(Some(done)) = &done {
                done.log();
            }
            let mut inner = self.lock();
            inner.compact_pending = false;
            if done.is_err() || !inner.compaction_due() {
                break (done, inner);
            }
            inner.compact_pending = true;
        };
        if let Err(e) = done {
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
    }
}

#[cfg(test)]
mod tests;
