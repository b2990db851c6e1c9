//! The store's key index: where each live key's record is in the log, kept mostly on disk so
//! that memory does not grow with the number of keys (#28: at a million delivery records a
//! map of every key took 111 bytes a key).
//!
//! A log-structured merge tree:
//! - the **recent** changes: a map of the keys set (with their place) or deleted since the
//!   last merge. When it holds [`RECENT_MAX`] keys it is frozen (still read, never changed)
//!   and merged into a new sorted run off the store's lock, while new changes gather in a
//!   fresh recent map.
//! - **sorted runs** ([`super::run`]), newest first: files of keys and places, each with a
//!   Bloom filter. A lookup asks the maps, then each run in turn until one lists the key (a
//!   newer run's entry hides an older one's; a deleted key is listed as gone until a merge
//!   reaches the oldest run, where it is dropped).
//!
//! **Which runs a merge rewrites** ([`runs_to_fold`]): the frozen changes, with each newest
//! run that holds no more entries than the merge has gathered so far. So the runs' sizes
//! grow geometrically (like a binary counter: 32,768 entries, 65,536, 131,072, ...), there
//! are about log2(keys / 32,768) of them, and a key is rewritten about that many times over
//! its life. With one file of every key rewritten at every merge (until session 31), a merge
//! cost what the whole index held: at 500 events/s x 33 the store merged every 1.6 s, each
//! merge took longer as the keys grew (1.2 million after 60 s), and the latency's tail grew
//! with it (p99 13 ms in the first 10 s of the run, 52 ms in the last; BENCHMARKS.md,
//! "Session 31").
//!
//! A compaction of the log writes every live key anew, and its index becomes the only run
//! ([`super::compact`]). The index is derived data: it is rebuilt from the log at every open
//! (merged every [`OPEN_CHUNK`] keys, so opening does not hold every key in memory either),
//! never fsynced or read by another process, and its files have no name. A damaged block can
//! only point at a wrong place, and every record read from the log is checked against its key
//! and checksum, so damage is an error, never another key's value.

use super::Slot;
use super::filter;
use super::run::{Cursor, Run, RunWriter};
use std::collections::HashMap;
use std::iter::Peekable;
use std::path::Path;
use std::sync::Arc;

/// Recent changes that start a merge (about 3.5 MiB of map at 32-byte keys).
pub(super) const RECENT_MAX: usize = 32 * 1024;
/// Recent changes per merge while the log is replayed at open (fewer, larger merges).
pub(super) const OPEN_CHUNK: usize = 256 * 1024;

/// A change of a key: in the recent map, the frozen map or a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Entry {
    /// Set: its record is here.
    Live(Slot),
    /// Deleted (an older run may still list it).
    Gone,
}

/// Recent changes, by key. A hash map, not a sorted one: every read and write looks a key up
/// in it (in two of them while a merge runs), and a lookup among 32,768 keys sharing long
/// prefixes cost a dozen key comparisons and as many cache misses in a tree. Only a merge, a
/// compaction and a listing of keys (`list-keys`, which the component never calls) read it
/// in order, and sort it then ([`Walk`]).
pub(super) type Changes = HashMap<String, Entry>;

/// What [`KeyIndex::install`] replaced: the runs merged and the frozen changes, freed when
/// this is dropped.
pub(super) struct Replaced {
    _runs: Vec<Arc<Run>>,
    _frozen: Option<Arc<Changes>>,
}

/// The index as a merge (or a compaction) takes it: the runs then, newest first, and the
/// changes frozen over them.
pub(super) struct Frozen {
    pub(super) runs: Vec<Arc<Run>>,
    pub(super) changes: Arc<Changes>,
}

impl Frozen {
    /// Entries the frozen changes and the newest `runs` runs hold (a key may be counted in
    /// several): the most a run merged from them can hold.
    pub(super) fn entries(&self, runs: usize) -> u64 {
        let runs = &self.runs[..runs.min(self.runs.len())];
        self.changes.len() as u64 + runs.iter().map(|r| r.entries()).sum::<u64>()
    }
}

/// How many of the newest runs a merge of `changes` entries folds in: each run, newest first,
/// that holds no more entries than the merge has gathered so far.
pub(super) fn runs_to_fold(runs: &[Arc<Run>], changes: u64) -> usize {
    let mut gathered = changes;
    runs.iter()
        .take_while(|run| {
            let fold = run.entries() <= gathered;
            gathered += run.entries();
            fold
        })
        .count()
}

/// Every key that maps of changes and runs list, in the keys' order, each with what the
/// newest of them says of it (the maps are newer than the runs; each list is newest first).
/// A lending walk ([`Walk::next`]): each run is read a block at a time into one buffer, so
/// the walk allocates nothing per key (a merge of 590,000 keys that allocated a string for
/// each stalled the latency under load, BENCHMARKS.md "Session 30").
pub(super) struct Walk<'a> {
    maps: Vec<Peekable<std::vec::IntoIter<(&'a String, &'a Entry)>>>,
    cursors: Vec<Cursor<'a>>,
    /// Deleted keys are walked too (else skipped).
    keep_gone: bool,
    /// The key walked last; every source still at it moves on at the next step.
    key: String,
    started: bool,
}

impl<'a> Walk<'a> {
    /// A walk of `maps` over `runs`, from `from` on (inclusive); `keep_gone`: deleted keys
    /// are walked too.
    pub(super) fn new(
        maps: &[&'a Changes],
        runs: &'a [Arc<Run>],
        from: Option<&str>,
        keep_gone: bool,
    ) -> std::io::Result<Self> {
        let maps = maps
            .iter()
            .map(|changes| {
                let mut sorted: Vec<(&String, &Entry)> = changes
                    .iter()
                    .filter(|(k, _)| from.is_none_or(|from| k.as_str() >= from))
                    .collect();
                sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
                sorted.into_iter().peekable()
            })
            .collect();
        let cursors = runs
            .iter()
            .map(|run| run.cursor(from))
            .collect::<std::io::Result<_>>()?;
        Ok(Walk {
            maps,
            cursors,
            keep_gone,
            key: String::new(),
            started: false,
        })
    }

    /// The next key and what the newest source says of it; `None` at the end.
    pub(super) fn next(&mut self) -> std::io::Result<Option<(&str, Entry)>> {
        loop {
            if self.started {
                let last = self.key.as_str();
                for map in &mut self.maps {
                    map.next_if(|(k, _)| k.as_str() == last);
                }
                for cursor in &mut self.cursors {
                    if cursor.key() == Some(last.as_bytes()) {
                        cursor.advance()?;
                    }
                }
            }
            self.started = true;
            // The least key; on a tie the newest source's (the first found).
            let mut least: Option<(&[u8], Entry)> = None;
            for map in &mut self.maps {
                if let Some(&(k, e)) = map.peek()
                    && least.is_none_or(|(l, _)| k.as_bytes() < l)
                {
                    least = Some((k.as_bytes(), *e));
                }
            }
            for cursor in &self.cursors {
                if let (Some(k), Some(e)) = (cursor.key(), cursor.entry())
                    && least.is_none_or(|(l, _)| k < l)
                {
                    least = Some((k, e));
                }
            }
            let Some((key, entry)) = least else {
                return Ok(None);
            };
            // Map keys are strings; a run's were checked to be UTF-8 when its block was read.
            let key = std::str::from_utf8(key)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            self.key.clear();
            self.key.push_str(key);
            if self.keep_gone || entry != Entry::Gone {
                return Ok(Some((self.key.as_str(), entry)));
            }
        }
    }
}

/// What a merged run lists: its live keys, their bytes, and their records' bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Totals {
    pub(super) keys: u64,
    pub(super) key_bytes: u64,
    pub(super) live_bytes: u64,
}

/// A merge's result: the new run, how many of the frozen runs it replaces (the newest), and
/// what it lists.
pub(super) struct Merged {
    run: Option<Run>,
    folded: usize,
    pub(super) totals: Totals,
}

/// How a merge or a compaction on the maintenance thread shares the machine: after each
/// [`Pace::CHUNK`] entries it rests [`Pace::REST`] times as long as they took, so it works
/// at most a quarter of the time, however large. At 500 events/s x 33, with the serving
/// threads busy 83 % of two cores, a merge of the oldest run (800,000 to 1.2 million keys,
/// 180-260 ms of a core) held the deliveries back for a second (p50 86-190 ms); paced, such
/// merges took 2.3-2.8 s and the deliveries did not notice (BENCHMARKS.md, "Session 31").
/// Most merges are smaller than a chunk and never rest; the open's merges are not paced. A
/// compaction is paced the same way, a record an entry ("Session 32").
pub(super) struct Pace {
    entries: u64,
    chunk_began: std::time::Instant,
}

impl Pace {
    /// Entries a paced job writes between rests (a merge's keys, a compaction's records).
    pub(super) const CHUNK: u64 = 16_384;
    /// How many times as long as a chunk took a paced job rests after it.
    pub(super) const REST: u32 = 3;

    /// A pace whose first chunk begins `now`.
    pub(super) fn new(now: std::time::Instant) -> Self {
        Pace {
            entries: 0,
            chunk_began: now,
        }
    }

    /// Counts an entry written; at the end of a chunk, how long to rest (`now` is read only
    /// then). The next chunk begins at [`Pace::rested`].
    pub(super) fn entry(
        &mut self,
        now: impl FnOnce() -> std::time::Instant,
    ) -> Option<std::time::Duration> {
        self.entries += 1;
        self.entries
            .is_multiple_of(Self::CHUNK)
            .then(|| now().saturating_duration_since(self.chunk_began) * Self::REST)
    }

    /// The rest is over: the next chunk begins `now`.
    pub(super) fn rested(&mut self, now: std::time::Instant) {
        self.chunk_began = now;
    }
}

/// A job's pace and how it rests (`std::thread::sleep` on the maintenance thread), or
/// `None` for a job at full speed.
pub(super) type Paced<'a> = Option<(&'a mut Pace, &'a mut dyn FnMut(std::time::Duration))>;

/// Counts an entry of a paced job; rests at a chunk's end.
pub(super) fn step(paced: &mut Paced<'_>) {
    if let Some((pace, rest)) = paced.as_mut()
        && let Some(time) = pace.entry(std::time::Instant::now)
    {
        rest(time);
        pace.rested(std::time::Instant::now());
    }
}

/// The merge itself (off the lock): the frozen changes laid over the runs [`runs_to_fold`]
/// picks (every run, where `all`), written as one run, at `pace` where one is given (the
/// maintenance thread's merges; `rest` sleeps). Deleted keys are kept as such unless the
/// oldest run is among those rewritten (no older run can list them then).
pub(super) fn merge(
    dir: &Path,
    frozen: &Frozen,
    all: bool,
    mut pace: Paced<'_>,
) -> std::io::Result<Merged> {
    let folded = if all {
        frozen.runs.len()
    } else {
        runs_to_fold(&frozen.runs, frozen.changes.len() as u64)
    };
    let runs = &frozen.runs[..folded];
    let mut out = RunWriter::new(dir, frozen.entries(folded))?;
    let mut totals = Totals::default();
    let mut walk = Walk::new(
        &[frozen.changes.as_ref()],
        runs,
        None,
        folded < frozen.runs.len(),
    )?;
    while let Some((key, entry)) = walk.next()? {
        if let Entry::Live(slot) = entry {
            totals.keys += 1;
            totals.key_bytes += key.len() as u64;
            totals.live_bytes += slot.len;
        }
        out.push(key, entry)?;
        step(&mut pace);
    }
    let run = out.finish()?;
    Ok(Merged {
        run: (run.entries() > 0).then_some(run),
        folded,
        totals,
    })
}

/// The whole index: the runs (newest first), a frozen map being merged (if any), and the
/// recent changes; with the live keys' count and bytes.
pub(super) struct KeyIndex {
    pub(super) runs: Vec<Arc<Run>>,
    pub(super) frozen: Option<Arc<Changes>>,
    pub(super) recent: Changes,
    keys: u64,
    key_bytes: u64,
}

impl KeyIndex {
    pub(super) fn new() -> Self {
        KeyIndex {
            runs: Vec::new(),
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
        let hash = filter::hash(key);
        for run in &self.runs {
            match run.find(key, hash)? {
                Some(Entry::Live(slot)) => return Ok(Some(slot)),
                Some(Entry::Gone) => return Ok(None),
                None => {}
            }
        }
        Ok(None)
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

    /// A change read from the log at open, counted later: the open ends with a merge of
    /// every run, whose [`Totals`] then count the keys ([`KeyIndex::counted`]).
    pub(super) fn replayed(&mut self, key: &str, entry: Entry) {
        match self.recent.get_mut(key) {
            Some(e) => *e = entry,
            None => {
                self.recent.insert(key.to_owned(), entry);
            }
        }
    }

    /// Sets the live keys' count and bytes from a merge of every run that left no recent
    /// changes.
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
    pub(super) fn freeze(&mut self) -> Option<Frozen> {
        if self.frozen.is_some() {
            return None;
        }
        // The next map is made at its full size: grown from nothing, it was rehashed a dozen
        // times over (the last time 28,000 keys at once), each time under the store's lock.
        let next = Changes::with_capacity(RECENT_MAX);
        let changes = Arc::new(std::mem::replace(&mut self.recent, next));
        self.frozen = Some(Arc::clone(&changes));
        Some(Frozen {
            runs: self.runs.clone(),
            changes,
        })
    }

    /// Ends a merge: its run takes the place of the runs it folded (the newest), and gives
    /// back what it replaced (those runs and the frozen changes) for the caller to drop once
    /// it has let go of the store's lock: at 600,000 keys dropping them took 1.5-4 ms (the
    /// frozen map's 32,768 keys, the old file's pages), every store call waiting.
    #[must_use = "dropped here, the old runs and the frozen changes are freed under the lock"]
    pub(super) fn install(&mut self, merged: Merged) -> Replaced {
        self.replace(merged.folded, merged.run)
    }

    /// Ends a compaction: `run` (the new log's index) is the only run.
    #[must_use = "dropped here, the old runs and the frozen changes are freed under the lock"]
    pub(super) fn install_only(&mut self, run: Run) -> Replaced {
        self.replace(self.runs.len(), Some(run))
    }

    /// `run` in place of the newest `folded` runs, the frozen changes taken out.
    fn replace(&mut self, folded: usize, run: Option<Run>) -> Replaced {
        let folded = folded.min(self.runs.len());
        Replaced {
            _runs: self.runs.splice(..folded, run.map(Arc::new)).collect(),
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

    /// Up to `limit` live keys after `after` (every key without it), in order.
    pub(super) fn keys_after(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> std::io::Result<Vec<String>> {
        let maps: Vec<&Changes> = std::iter::once(&self.recent)
            .chain(self.frozen.as_deref())
            .collect();
        let mut walk = Walk::new(&maps, &self.runs, after, false)?;
        let mut keys = Vec::new();
        while keys.len() < limit
            && let Some((key, _)) = walk.next()?
        {
            if Some(key) != after {
                keys.push(key.to_owned());
            }
        }
        Ok(keys)
    }

    /// Bytes of the runs' files.
    pub(super) fn bytes(&self) -> u64 {
        self.runs.iter().map(|r| r.bytes()).sum()
    }

    /// Bytes of memory of the runs' filters.
    pub(super) fn filter_bytes(&self) -> u64 {
        self.runs.iter().map(|r| r.filter_bytes() as u64).sum()
    }

    /// Blocks of the runs' files read (lookups and walks).
    pub(super) fn reads(&self) -> u64 {
        self.runs.iter().map(|r| r.reads()).sum()
    }
}

#[cfg(test)]
mod tests;
