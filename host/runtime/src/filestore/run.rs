//! One sorted run of the key index ([`super::index`]): a file of keys and where each key's
//! record is in the log (or that the key was deleted), sorted, in blocks of about 4 KiB.
//! Memory holds each block's first key and place (about a byte a key) and a Bloom filter of
//! its keys ([`super::filter`], 1.25 bytes a key). A lookup asks the filter first (a key the
//! run does not hold, as every new key, ends there), then finds the block by binary search
//! and reads it (`pread`).
//!
//! A block is a list of entries `[key len: u32 LE][key][place: u64 LE][record len: u64 LE]`;
//! a deleted key has the place [`GONE_AT`] (no record is there), so a run above older ones
//! hides the key they still list.
//!
//! A run's file is unlinked as soon as it is made: it lives as long as its [`Run`] has it
//! open, so no index file is ever left behind, and two runs (an old one still read, a new
//! one being written) never share a name.

use super::Slot;
use super::files::private_file;
use super::filter::Filter;
use super::index::Entry;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The prefix of the index files' names in the store's directory (each unlinked once made).
const INDEX_FILE: &str = "kv.idx";
/// A block is closed once it holds this many bytes.
const BLOCK_BYTES: usize = 4096;
/// An entry's framing: key length (u32), place (u64), record length (u64).
const ENTRY_FRAMING: usize = 4 + 8 + 8;
/// The place of a deleted key's entry (no record of the log starts there).
const GONE_AT: u64 = u64::MAX;

fn invalid(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

/// The first key and place of one block of a run's file.
struct Block {
    first: Box<str>,
    at: u64,
    len: u32,
}

/// A sorted run: its file, its blocks' first keys and the filter of its keys.
pub(super) struct Run {
    file: File,
    blocks: Vec<Block>,
    /// Bytes of the file.
    bytes: u64,
    /// Entries in the file (deleted keys' included).
    entries: u64,
    /// Which keys the file may hold.
    filter: Filter,
    /// Blocks read.
    reads: AtomicU64,
}

impl Run {
    /// Reads block `i` into `bytes` (its buffer reused); empty past the last block.
    fn read_block(&self, i: usize, bytes: &mut Vec<u8>) -> std::io::Result<()> {
        bytes.clear();
        let Some(b) = self.blocks.get(i) else {
            return Ok(());
        };
        bytes.resize(b.len as usize, 0);
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.file.read_exact_at(bytes, b.at)
    }

    /// The block that would hold `key`, if any block starts at or before it.
    fn block_of(&self, key: &str) -> Option<usize> {
        self.blocks
            .partition_point(|b| &*b.first <= key)
            .checked_sub(1)
    }

    /// What the run says of `key` (whose [`Filter::hash`] is `hash`): set with its place,
    /// deleted, or nothing.
    pub(super) fn find(&self, key: &str, hash: u64) -> std::io::Result<Option<Entry>> {
        if !self.filter.may_contain_hash(hash) {
            return Ok(None);
        }
        let Some(i) = self.block_of(key) else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        self.read_block(i, &mut bytes)?;
        let mut pos = 0;
        while pos < bytes.len() {
            let (k, entry, next) = entry_at(&bytes, pos)?;
            match k.cmp(key.as_bytes()) {
                std::cmp::Ordering::Less => pos = next,
                std::cmp::Ordering::Equal => return Ok(Some(entry)),
                std::cmp::Ordering::Greater => break,
            }
        }
        Ok(None)
    }

    /// A cursor at the first entry at or after `from` (the first entry without it).
    pub(super) fn cursor(&self, from: Option<&str>) -> std::io::Result<Cursor<'_>> {
        let mut cursor = Cursor {
            run: self,
            next_block: from.and_then(|k| self.block_of(k)).unwrap_or(0),
            bytes: Vec::with_capacity(BLOCK_BYTES + 256),
            pos: 0,
            current: None,
        };
        cursor.advance()?;
        while let (Some(from), Some(key)) = (from, cursor.key()) {
            if key >= from.as_bytes() {
                break;
            }
            cursor.advance()?;
        }
        Ok(cursor)
    }

    /// Bytes of the run's file.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Entries in the run (deleted keys' included).
    pub(super) fn entries(&self) -> u64 {
        self.entries
    }

    /// Blocks read from the file.
    pub(super) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Bytes of memory the run's filter takes.
    pub(super) fn filter_bytes(&self) -> usize {
        self.filter.bytes()
    }
}

/// One entry of a block at `pos`: its key's bytes (checked to be UTF-8), what it says of the
/// key, and the next entry's position.
fn entry_at(bytes: &[u8], pos: usize) -> std::io::Result<(&[u8], Entry, usize)> {
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
        .filter(|k| std::str::from_utf8(k).is_ok())
        .ok_or_else(bad)?;
    let (at, len) = u64_at(kend).zip(u64_at(kend + 8)).ok_or_else(bad)?;
    let entry = if at == GONE_AT {
        Entry::Gone
    } else {
        Entry::Live(Slot { at, len })
    };
    Ok((key, entry, kend + 16))
}

/// A run's entries in the keys' order, a block at a time: each block read into one buffer
/// and its entries read from there, so a walk allocates nothing per key.
pub(super) struct Cursor<'a> {
    run: &'a Run,
    next_block: usize,
    bytes: Vec<u8>,
    /// The next entry's position in `bytes`.
    pos: usize,
    /// The current entry: its key's range in `bytes`, and what it says.
    current: Option<(std::ops::Range<usize>, Entry)>,
}

impl Cursor<'_> {
    /// The current entry's key (UTF-8, checked when it was read), if the run has not ended.
    pub(super) fn key(&self) -> Option<&[u8]> {
        self.current.as_ref().map(|(k, _)| &self.bytes[k.clone()])
    }

    /// What the current entry says of its key.
    pub(super) fn entry(&self) -> Option<Entry> {
        self.current.as_ref().map(|(_, e)| *e)
    }

    /// Moves to the next entry (reading the next block when this one is done).
    pub(super) fn advance(&mut self) -> std::io::Result<()> {
        while self.pos >= self.bytes.len() {
            if self.next_block >= self.run.blocks.len() {
                self.current = None;
                return Ok(());
            }
            let read = self.run.read_block(self.next_block, &mut self.bytes);
            self.next_block += 1;
            self.pos = 0;
            if let Err(e) = read {
                self.next_block = self.run.blocks.len();
                self.bytes.clear();
                self.current = None;
                return Err(e);
            }
        }
        let (key, entry, next) = entry_at(&self.bytes, self.pos)?;
        let start = self.pos + 4;
        self.current = Some((start..start + key.len(), entry));
        self.pos = next;
        Ok(())
    }
}

/// Writes a new run, entry by entry in the keys' order, to an unlinked file.
pub(super) struct RunWriter {
    out: BufWriter<File>,
    file: File,
    blocks: Vec<Block>,
    block: Vec<u8>,
    first: String,
    at: u64,
    entries: u64,
    filter: Filter,
}

/// A fresh name for an index file in `dir`: `kv.idx.<pid>.<n>`.
fn fresh_path(dir: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("{INDEX_FILE}.{}.{n}", std::process::id()))
}

impl RunWriter {
    /// A writer of a run of at most `entries` entries (its filter is sized for them).
    pub(super) fn new(dir: &Path, entries: u64) -> std::io::Result<Self> {
        let path = fresh_path(dir);
        let file = private_file()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)?;
        std::fs::remove_file(&path)?;
        Ok(RunWriter {
            out: BufWriter::with_capacity(1 << 16, file.try_clone()?),
            file,
            blocks: Vec::new(),
            block: Vec::with_capacity(BLOCK_BYTES + 256),
            first: String::new(),
            at: 0,
            entries: 0,
            filter: Filter::with_capacity(entries),
        })
    }

    /// Adds the next entry (keys strictly increasing).
    pub(super) fn push(&mut self, key: &str, entry: Entry) -> std::io::Result<()> {
        if self.block.is_empty() {
            key.clone_into(&mut self.first);
        }
        self.filter.insert(key);
        self.entries += 1;
        let (at, len) = match entry {
            Entry::Live(slot) => (slot.at, slot.len),
            Entry::Gone => (GONE_AT, 0),
        };
        self.block.reserve(ENTRY_FRAMING + key.len());
        self.block
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.block.extend_from_slice(key.as_bytes());
        self.block.extend_from_slice(&at.to_le_bytes());
        self.block.extend_from_slice(&len.to_le_bytes());
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

    /// The finished run, to read.
    pub(super) fn finish(mut self) -> std::io::Result<Run> {
        if !self.block.is_empty() {
            self.close_block()?;
        }
        self.out.flush()?;
        Ok(Run {
            file: self.file,
            blocks: self.blocks,
            bytes: self.at,
            entries: self.entries,
            filter: self.filter,
            reads: AtomicU64::new(0),
        })
    }
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
