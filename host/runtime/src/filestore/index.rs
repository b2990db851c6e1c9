//! The store's key index: where each live key's record is in the log, kept mostly on disk so
//! that memory does not grow with the number of keys (#28: at a million delivery records a
//! map of every key took 111 bytes a key).
//!
//! Two levels, as in a log-structured merge tree:
//! - the **base**: every key as of the last merge, sorted, with its place, in a file of
//!   blocks of about 4 KiB; memory holds each block's first key and place (about
//!   a byte a key) and a Bloom filter of its keys ([`super::filter`], 1.25-2 bytes a key). A
//!   lookup asks the filter first (a key the base does not hold, as every new key, ends
//!   there), then finds the block by binary search and reads it (`pread`).
//! - the **recent** changes since: a map of the keys set (with their place) or deleted since
//!   the base was written. When it holds [`RECENT_MAX`] keys it is frozen (still read, never
//!   changed) and merged with the base into a new base, off the store's lock, while new
//!   changes gather in a fresh recent map. A compaction of the log does the same merge and
//!   writes the new places ([`super::compact`]).
//!
//! The index is derived data: it is rebuilt from the log at every open (a merge each
//! [`OPEN_CHUNK`] keys, so opening does not hold every key in memory either), never fsynced
//! or read by another process, and its files are unlinked as soon as they are made (they
//! take disk space while open, but have no name). A damaged block can only point at a wrong place, and
//! every record read from the log is checked against its key and checksum, so damage is an
//! error, never another key's value.

use super::Slot;
use super::files::private_file;
use super::filter::Filter;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::iter::Peekable;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The prefix of the index files' names in the store's directory (each unlinked once made).
const INDEX_FILE: &str = "kv.idx";
/// Recent changes that start a merge into the base (about 3.5 MiB of map at 32-byte keys).
pub(super) const RECENT_MAX: usize = 32 * 1024;
/// Recent changes per merge while the log is replayed at open (fewer, larger merges).
pub(super) const OPEN_CHUNK: usize = 256 * 1024;
/// A base block is closed once it holds this many bytes.
const BLOCK_BYTES: usize = 4096;
/// An entry's framing: key length (u32), place (u64), record length (u64).
const ENTRY_FRAMING: usize = 4 + 8 + 8;

/// A recent change of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    /// Set: its record is here.
    Live(Slot),
    /// Deleted (the base, or a frozen map, may still list it).
    Gone,
}

/// Recent changes, by key. A hash map, not a sorted one: every read and write looks a key up
/// in it (in two of them while a merge runs), and a lookup among 32,768 keys sharing long
/// prefixes cost a dozen key comparisons and as many cache misses in a tree. Only a merge, a
/// compaction and a listing of keys (`list-keys`, which the component never calls) read it
/// in order, and sort it then ([`overlay`]).
pub(super) type Changes = HashMap<String, Entry>;

fn invalid(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

/// What [`KeyIndex::install`] replaced: the old base and the frozen changes, freed when this
/// is dropped.
pub(super) struct Replaced {
    _base: Arc<Base>,
    _frozen: Option<Arc<Changes>>,
}

/// The first key and place of one block of the base file.
struct Block {
    first: Box<str>,
    at: u64,
    len: u32,
}

/// The base level: a sorted file of every key as of its merge, and its blocks' first keys.
pub(super) struct Base {
    file: Option<File>,
    blocks: Vec<Block>,
    /// Bytes of the file.
    bytes: u64,
    /// Keys in the file.
    keys: u64,
    /// Which keys the file may hold.
    filter: Filter,
    /// Blocks read.
    reads: AtomicU64,
}

impl Base {
    /// No keys (a store opened empty).
    pub(super) fn empty() -> Self {
        Base {
            file: None,
            blocks: Vec::new(),
            bytes: 0,
            keys: 0,
            filter: Filter::default(),
            reads: AtomicU64::new(0),
        }
    }

    /// The bytes of block `i`.
    fn block(&self, i: usize) -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.read_block(i, &mut bytes)?;
        Ok(bytes)
    }

    /// Reads block `i` into `bytes` (its buffer reused).
    fn read_block(&self, i: usize, bytes: &mut Vec<u8>) -> std::io::Result<()> {
        bytes.clear();
        let (Some(file), Some(b)) = (&self.file, self.blocks.get(i)) else {
            return Ok(());
        };
        bytes.resize(b.len as usize, 0);
        self.reads.fetch_add(1, Ordering::Relaxed);
        file.read_exact_at(bytes, b.at)
    }

    /// The block that would hold `key`, if any block starts at or before it.
    fn block_of(&self, key: &str) -> Option<usize> {
        self.blocks
            .partition_point(|b| &*b.first <= key)
            .checked_sub(1)
    }

    /// Where `key`'s record is, if the base lists it.
    fn find(&self, key: &str) -> std::io::Result<Option<Slot>> {
        if !self.filter.may_contain(key) {
            return Ok(None);
        }
        let Some(i) = self.block_of(key) else {
            return Ok(None);
        };
        let bytes = self.block(i)?;
        let mut pos = 0;
        while pos < bytes.len() {
            let (k, slot, next) = entry_at(&bytes, pos)?;
            match k.cmp(key) {
                std::cmp::Ordering::Less => pos = next,
                std::cmp::Ordering::Equal => return Ok(Some(slot)),
                std::cmp::Ordering::Greater => break,
            }
        }
        Ok(None)
    }

    /// Every entry from `from` on (inclusive; all of them without it), in the keys' order.
    pub(super) fn iter_from(self: &Arc<Self>, from: Option<&str>) -> BaseIter {
        let next_block = from.and_then(|k| self.block_of(k)).unwrap_or(0);
        BaseIter {
            base: Arc::clone(self),
            next_block,
            from: from.map(str::to_owned),
            entries: Vec::new().into_iter(),
        }
    }

    /// Bytes of the base file.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Keys in the base file.
    pub(super) fn keys(&self) -> u64 {
        self.keys
    }

    /// Blocks read from the file.
    pub(super) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Bytes of memory the base's filter takes.
    pub(super) fn filter_bytes(&self) -> usize {
        self.filter.bytes()
    }
}

/// One entry of a block at `pos`: its key, place and the next entry's position.
fn entry_at(bytes: &[u8], pos: usize) -> std::io::Result<(&str, Slot, usize)> {
    let bad = || invalid(format!("index block damaged at byte {pos}"));
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
    };
    let klen = bytes
        .get(pos..pos + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or_else(bad)?;
    let kend = pos + 4 + klen;
    let key = bytes
        .get(pos + 4..kend)
        .and_then(|k| std::str::from_utf8(k).ok())
        .ok_or_else(bad)?;
    let (at, len) = u64_at(kend).zip(u64_at(kend + 8)).ok_or_else(bad)?;
    Ok((key, Slot { at, len }, kend + 16))
}

/// The base's entries, a block at a time (read with `pread`, so the base file is shared).
pub(super) struct BaseIter {
    base: Arc<Base>,
    next_block: usize,
    /// Entries before this key are skipped (they can only be in the first block read).
    from: Option<String>,
    entries: std::vec::IntoIter<(String, Slot)>,
}

impl Iterator for BaseIter {
    type Item = std::io::Result<(String, Slot)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.entries.next() {
                return Some(Ok(e));
            }
            if self.next_block >= self.base.blocks.len() {
                return None;
            }
            let read = self.base.block(self.next_block).and_then(|bytes| {
                let mut out = Vec::new();
                let mut pos = 0;
                while pos < bytes.len() {
                    let (k, slot, next) = entry_at(&bytes, pos)?;
                    if self.from.as_deref().is_none_or(|from| k >= from) {
                        out.push((k.to_owned(), slot));
                    }
                    pos = next;
                }
                self.from = None;
                Ok(out)
            });
            self.next_block += 1;
            match read {
                Ok(entries) => self.entries = entries.into_iter(),
                Err(e) => {
                    self.next_block = self.base.blocks.len();
                    return Some(Err(e));
                }
            }
        }
    }
}

/// The live entries of `older` with the changes of `newer` laid over them, in the keys'
/// order: a key `newer` sets is listed with its place there, one it deletes is left out.
pub(super) struct Overlay<'a, O: Iterator> {
    newer: Peekable<std::vec::IntoIter<(&'a String, &'a Entry)>>,
    older: Peekable<O>,
}

/// [`Overlay`] of `newer` over `older`, from `from` on (inclusive) where `older` does too.
pub(super) fn overlay<'a, O>(newer: &'a Changes, older: O, from: Option<&str>) -> Overlay<'a, O>
where
    O: Iterator<Item = std::io::Result<(String, Slot)>>,
{
    let mut sorted: Vec<(&String, &Entry)> = newer
        .iter()
        .filter(|(k, _)| from.is_none_or(|from| k.as_str() >= from))
        .collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
    Overlay {
        newer: sorted.into_iter().peekable(),
        older: older.peekable(),
    }
}

impl<O> Iterator for Overlay<'_, O>
where
    O: Iterator<Item = std::io::Result<(String, Slot)>>,
{
    type Item = std::io::Result<(String, Slot)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let newer_first = match (self.newer.peek(), self.older.peek()) {
                (None, None) => return None,
                (Some(_), None) => true,
                (None, Some(_)) | (Some(_), Some(Err(_))) => false,
                (Some((n, _)), Some(Ok((o, _)))) => n.as_str() <= o.as_str(),
            };
            if !newer_first {
                return self.older.next();
            }
            let (key, entry) = self.newer.next()?;
            if matches!(self.older.peek(), Some(Ok((o, _))) if o == key) {
                self.older.next();
            }
            if let Entry::Live(slot) = entry {
                return Some(Ok((key.clone(), *slot)));
            }
        }
    }
}

/// Writes a new base file, entry by entry in the keys' order. The file is unlinked as soon
/// as it is made: it lives as long as its [`Base`] has it open, so no index file is ever
/// left behind, and two bases (an old one still read, a new one being written) never share
/// a name.
pub(super) struct BaseWriter {
    out: BufWriter<File>,
    file: File,
    blocks: Vec<Block>,
    block: Vec<u8>,
    first: String,
    at: u64,
    keys: u64,
    filter: Filter,
    /// Whether each key pushed is added to `filter` (else it holds them already).
    add_keys: bool,
}

/// A fresh name for an index file in `dir`: `kv.idx.<pid>.<n>`.
fn fresh_path(dir: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{INDEX_FILE}.{}.{n}", std::process::id()))
}

impl BaseWriter {
    /// A writer of a base whose filter is `filter`; `add_keys`: each key pushed is added to
    /// it (else the caller has added every key the base will hold).
    pub(super) fn new(dir: &Path, filter: Filter, add_keys: bool) -> std::io::Result<Self> {
        let path = fresh_path(dir);
        let file = private_file()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)?;
        std::fs::remove_file(&path)?;
        Ok(BaseWriter {
            out: BufWriter::with_capacity(1 << 16, file.try_clone()?),
            file,
            blocks: Vec::new(),
            block: Vec::with_capacity(BLOCK_BYTES + 256),
            first: String::new(),
            at: 0,
            keys: 0,
            filter,
            add_keys,
        })
    }

    /// Adds the next entry (keys strictly increasing).
    pub(super) fn push(&mut self, key: &str, slot: Slot) -> std::io::Result<()> {
        if self.block.is_empty() {
            key.clone_into(&mut self.first);
        }
        if self.add_keys {
            self.filter.insert(key);
        }
        self.keys += 1;
        self.block.reserve(ENTRY_FRAMING + key.len());
        self.block
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.block.extend_from_slice(key.as_bytes());
        self.block.extend_from_slice(&slot.at.to_le_bytes());
        self.block.extend_from_slice(&slot.len.to_le_bytes());
        if self.block.len() >= BLOCK_BYTES {
            self.close_block()?;
        }
        Ok(())
    }

    fn close_block(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.block)?;
        self.blocks.push(Block {
            first: self.first.as_str().into(),
            at: self.at,
            len: self.block.len() as u32,
        });
        self.at += self.block.len() as u64;
        self.block.clear();
        Ok(())
    }

    /// The finished base, to read.
    pub(super) fn finish(mut self) -> std::io::Result<Base> {
        if !self.block.is_empty() {
            self.close_block()?;
        }
        self.out.flush()?;
        Ok(Base {
            file: Some(self.file),
            blocks: self.blocks,
            bytes: self.at,
            keys: self.keys,
            filter: self.filter,
            reads: AtomicU64::new(0),
        })
    }
}

/// What a merged base lists: its keys, their bytes, and their records' bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Totals {
    pub(super) keys: u64,
    pub(super) key_bytes: u64,
    pub(super) live_bytes: u64,
}

/// Calls `f` with every live entry of `base` with `newer` laid over it, in the keys' order
/// (what [`overlay`] reads, as a merge and a compaction take it): each block of the base is
/// read into one buffer and its keys handed on from there, so the walk allocates nothing per
/// key. A merge rewrites every key of the base (590,000 after 30 s at 500 events/s); with a
/// string allocated and freed for each, the latency's tail under load stalled at every merge
/// (BENCHMARKS.md, "Session 30").
pub(super) fn laid_over(
    base: &Base,
    newer: &Changes,
    mut f: impl FnMut(&str, Slot) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut sorted: Vec<(&String, &Entry)> = newer.iter().collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut sorted = sorted.into_iter().peekable();
    let mut live = |key: &str, entry: &Entry| match entry {
        Entry::Live(slot) => f(key, *slot),
        Entry::Gone => Ok(()),
    };
    let mut bytes = Vec::with_capacity(BLOCK_BYTES + 256);
    for i in 0..base.blocks.len() {
        base.read_block(i, &mut bytes)?;
        let mut pos = 0;
        while pos < bytes.len() {
            let (key, slot, next) = entry_at(&bytes, pos)?;
            pos = next;
            while let Some((set, entry)) = sorted.next_if(|(k, _)| k.as_str() < key) {
                live(set, entry)?;
            }
            match sorted.next_if(|(k, _)| k.as_str() == key) {
                Some((_, entry)) => live(key, entry)?,
                None => live(key, &Entry::Live(slot))?,
            }
        }
    }
    sorted.try_for_each(|(set, entry)| live(set, entry))
}

/// The merge itself (off the lock): `frozen` laid over `base`, written as the new base.
pub(super) fn merge(
    dir: &Path,
    base: &Arc<Base>,
    frozen: &Changes,
) -> std::io::Result<(Base, Totals)> {
    // The old base's filter with the keys set since, while it has room for them; else one
    // built afresh from every key.
    let extended = base.filter.extended(frozen.len() as u64).map(|mut filter| {
        for (key, entry) in frozen.iter() {
            if matches!(entry, Entry::Live(_)) {
                filter.insert(key);
            }
        }
        filter
    });
    let mut out = match extended {
        Some(filter) => BaseWriter::new(dir, filter, false)?,
        None => BaseWriter::new(
            dir,
            Filter::for_keys(base.keys() + frozen.len() as u64),
            true,
        )?,
    };
    let mut totals = Totals::default();
    laid_over(base, frozen, |key, slot| {
        totals.keys += 1;
        totals.key_bytes += key.len() as u64;
        totals.live_bytes += slot.len;
        out.push(key, slot)
    })?;
    Ok((out.finish()?, totals))
}

/// Removes index files an earlier process left (killed between making one and unlinking
/// it): the index is rebuilt at open.
pub(super) fn remove_stale(dir: &Path) -> std::io::Result<()> {
    let prefix = format!("{INDEX_FILE}.");
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// The whole index: the base, a frozen map being merged into it (if any), and the recent
/// changes; with the live keys' count and bytes.
pub(super) struct KeyIndex {
    pub(super) base: Arc<Base>,
    pub(super) frozen: Option<Arc<Changes>>,
    pub(super) recent: Changes,
    keys: u64,
    key_bytes: u64,
}

impl KeyIndex {
    pub(super) fn new() -> Self {
        KeyIndex {
            base: Arc::new(Base::empty()),
            frozen: None,
            recent: Changes::new(),
            keys: 0,
            key_bytes: 0,
        }
    }

    /// Where `key`'s record is, if it is live.
    pub(super) fn get(&self, key: &str) -> std::io::Result<Option<Slot>> {
        for changes in std::iter::once(&self.recent).chain(self.frozen.as_deref()) {
            match changes.get(key) {
                Some(Entry::Live(slot)) => return Ok(Some(*slot)),
                Some(Entry::Gone) => return Ok(None),
                None => {}
            }
        }
        self.base.find(key)
    }

    /// Points `key` at `slot`; `old` is where it was ([`KeyIndex::get`], asked before the
    /// record was appended, so that this step cannot fail once the log holds it).
    pub(super) fn set(&mut self, key: &str, slot: Slot, old: Option<Slot>) {
        self.replayed(key, Entry::Live(slot));
        if old.is_none() {
            self.keys += 1;
            self.key_bytes += key.len() as u64;
        }
    }

    /// Marks the live `key` deleted (its place was found by [`KeyIndex::get`]).
    pub(super) fn remove(&mut self, key: &str) {
        self.replayed(key, Entry::Gone);
        self.keys -= 1;
        self.key_bytes -= key.len() as u64;
    }

    /// A change read from the log at open, counted later: the open ends with a merge, whose
    /// [`Totals`] then count the keys ([`KeyIndex::counted`]).
    pub(super) fn replayed(&mut self, key: &str, entry: Entry) {
        match self.recent.get_mut(key) {
            Some(e) => *e = entry,
            None => {
                self.recent.insert(key.to_owned(), entry);
            }
        }
    }

    /// Sets the live keys' count and bytes from a merge that left no recent changes.
    pub(super) fn counted(&mut self, totals: Totals) {
        self.keys = totals.keys;
        self.key_bytes = totals.key_bytes;
    }

    /// Live keys.
    pub(super) fn len(&self) -> u64 {
        self.keys
    }

    /// The live keys' bytes.
    pub(super) fn key_bytes(&self) -> u64 {
        self.key_bytes
    }

    /// Starts a merge: the recent changes become the frozen map. `None` if a merge (or a
    /// compaction) is under way.
    pub(super) fn freeze(&mut self) -> Option<(Arc<Base>, Arc<Changes>)> {
        if self.frozen.is_some() {
            return None;
        }
        let frozen = Arc::new(std::mem::take(&mut self.recent));
        self.frozen = Some(Arc::clone(&frozen));
        Some((Arc::clone(&self.base), frozen))
    }

    /// Ends a merge with its new base, and gives back what it replaced (the old base and the
    /// frozen changes) for the caller to drop once it has let go of the store's lock: at
    /// 600,000 keys dropping them took 1.5-4 ms (the frozen map's 32,768 keys, the old base
    /// file's pages), every store call waiting.
    #[must_use = "dropped here, the old base and the frozen changes are freed under the lock"]
    pub(super) fn install(&mut self, base: Base) -> Replaced {
        Replaced {
            _base: std::mem::replace(&mut self.base, Arc::new(base)),
            _frozen: self.frozen.take(),
        }
    }

    /// Ends a merge that failed: the frozen changes go back under the recent ones.
    pub(super) fn thaw(&mut self) {
        if let Some(frozen) = self.frozen.take() {
            for (key, entry) in frozen.iter() {
                if !self.recent.contains_key(key) {
                    self.recent.insert(key.clone(), *entry);
                }
            }
        }
    }

    /// Every live key from `from` on (inclusive), in order.
    pub(super) fn iter_from<'a>(
        &'a self,
        from: Option<&'a str>,
    ) -> impl Iterator<Item = std::io::Result<(String, Slot)>> + 'a {
        let below: Box<dyn Iterator<Item = std::io::Result<(String, Slot)>> + 'a> =
            match &self.frozen {
                Some(frozen) => Box::new(overlay(frozen, self.base.iter_from(from), from)),
                None => Box::new(self.base.iter_from(from)),
            };
        overlay(&self.recent, below, from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(at: u64) -> Slot {
        Slot {
            at,
            len: at % 7 + 1,
        }
    }

    /// A merge lays the changes over the base exactly as [`overlay`] reads them: keys set
    /// before, between and after the base's, replaced in place, deleted (listed or not), over
    /// a base of many blocks.
    #[test]
    fn a_merge_writes_what_the_changes_laid_over_the_base_read() {
        let dir = edgehook_testkit::temp_dir("filestore-index-merge");
        let mut first = Changes::new();
        for i in 0..2_000u64 {
            first.insert(format!("k{:05}", i * 3), Entry::Live(slot(i)));
        }
        let (base, _) = merge(&dir, &Arc::new(Base::empty()), &first).expect("first merge");
        assert!(base.blocks.len() > 10, "a base of many blocks");
        let base = Arc::new(base);
        let mut changes = Changes::new();
        changes.insert("a".into(), Entry::Live(slot(1))); // before every key
        changes.insert("k00001".into(), Entry::Live(slot(2))); // between two
        changes.insert("k00003".into(), Entry::Live(slot(3))); // replaced
        changes.insert("k00006".into(), Entry::Gone); // deleted
        changes.insert("k00007".into(), Entry::Gone); // deleted, never listed
        changes.insert("k05997".into(), Entry::Gone); // the base's last
        changes.insert("z".into(), Entry::Live(slot(4))); // after every key
        for i in (0..6_000u64).step_by(97) {
            changes.insert(format!("k{i:05}"), Entry::Live(slot(i + 10_000)));
        }
        let want: Vec<(String, Slot)> = overlay(&changes, base.iter_from(None), None)
            .collect::<std::io::Result<_>>()
            .expect("overlay");
        let (merged, totals) = merge(&dir, &base, &changes).expect("merge");
        let merged = Arc::new(merged);
        let got: Vec<(String, Slot)> = merged
            .iter_from(None)
            .collect::<std::io::Result<_>>()
            .expect("read back");
        assert_eq!(got, want);
        assert_eq!(totals.keys, want.len() as u64);
        assert_eq!(merged.keys(), want.len() as u64);
        let live: u64 = want.iter().map(|(_, s)| s.len).sum();
        assert_eq!(totals.live_bytes, live);
        for (key, slot) in &want {
            assert_eq!(merged.find(key).expect("find"), Some(*slot), "{key}");
        }
        for gone in ["k00006", "k00007", "k05997"] {
            assert_eq!(merged.find(gone).expect("find"), None, "{gone}");
        }
    }
}
