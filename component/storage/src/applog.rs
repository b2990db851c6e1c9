//! An append-only list over the key-value store, in small pages, so appending costs the same
//! whatever the list's length (no value is rewritten whole).
//!
//! Layout under a prefix `P`: `P:n` is an atomic counter of entries ever appended; page `k`
//! holds the entries numbered `k*size+1 ..= (k+1)*size` (`size` is [`PAGE`] unless the log
//! was made with another). An append reserves its numbers with one `increment`, then adds
//! each entry to its page by compare-and-swap, so concurrent appenders never overwrite each
//! other. A crash between the two leaves a gap in the numbering, never a damaged page.
//!
//! A page of a log made with [`AppendLog::new`] is kept in [`PARTS`] keys: its first part
//! (the first `size / PARTS` numbers) under `P:p{k}`, part `j` under `P:p{k}.{j}`. An append
//! copies its part, not the whole page: an eighth of the bytes through the store and the
//! component's boundary (the delivery history is appended to once a delivery, and a full
//! page of it is 5 KiB). Versions before parts kept the whole page under `P:p{k}`, and a
//! store they wrote may still hold such pages: so `P:p{k}` is read with every part of its
//! page, and an entry not in its part is looked for there ([`AppendLog::modify`],
//! [`AppendLog::remove`]). The page stays the unit of the API (numbers, reads, drops).
//!
//! Items are byte strings (ids, or a caller's own encoding). A page is binary, see
//! [`decode_page`]: appending copies the page and adds the new entries at its end, without
//! decoding the entries already there, and reading one is a walk over length prefixes. So the
//! component never parses or re-encodes JSON to append to a queue, a history or an index.
//!
//! An entry can be removed again ([`AppendLog::remove`]) or rewritten
//! ([`AppendLog::modify`]): that rewrites only its own page. A log whose entries are removed
//! for good (the subscription indexes, [`AppendLog::with_directory`]) keeps a page directory,
//! so a read skips the pages emptied by removals and its cost does not grow with the log's
//! history of appends and removals ([`pagedir`]).
//!
//! Used for the due queue (one list per second), each subscription's delivery history, the
//! retention index (one list per day), and the subscription indexes (each client's list and
//! each event type's fan-out list).

use crate::codec::Reader;
use crate::keys::{self, Key};
use crate::kv::{Kv, KvError, Update, UpdateError, read_counter, update};

mod pagedir;

/// Entries per page, unless a log is made with [`AppendLog::with_page_size`].
pub const PAGE: u64 = 128;

/// Keys a page of a log made with [`AppendLog::new`] is kept in (the module doc).
pub const PARTS: u64 = 8;

/// The first byte of a page.
const BINARY_PAGE: u8 = 0xE1;

/// A sealed page: one byte, no entries, and none can be added ([`pagedir`]).
const SEALED_PAGE: u8 = 0xE2;

/// How many times an append moves entries whose page was sealed under it to new numbers.
const APPEND_ROUNDS: usize = 4;

/// An edit of a page's entries: `Some(())` if it changed them, `None` to write nothing.
type PageChange<'a> = dyn FnMut(&mut Vec<Entry<Vec<u8>>>) -> Option<()> + 'a;

/// One append-only list.
pub struct AppendLog {
    prefix: Key,
    page: u64,
    /// Whether the log keeps a page directory ([`AppendLog::with_directory`]).
    directory: bool,
    /// Keys a page is kept in (1: the whole page under its page key).
    parts: u64,
}

/// An entry and its number in the list (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<T> {
    /// Position in the list.
    pub seq: u64,
    /// The item.
    pub item: T,
}

fn store_err<E>(e: UpdateError<E>) -> KvError {
    match e {
        UpdateError::Kv(e) => e,
        UpdateError::Rejected(_) => KvError::Corrupt("append-log page".into()),
        UpdateError::Contended => KvError::Contended("append-log page".into()),
    }
}

/// Adds one entry to a binary page: its number (8 bytes, little-endian), the item's length
/// (4 bytes, little-endian), the item.
fn push_entry(page: &mut Vec<u8>, seq: u64, item: &[u8]) {
    page.extend_from_slice(&seq.to_le_bytes());
    // Items are ids and small records; a page is far below 4 GiB.
    page.extend_from_slice(&(item.len() as u32).to_le_bytes());
    page.extend_from_slice(item);
}

/// Encodes entries as a binary page.
pub fn encode_page(entries: &[Entry<Vec<u8>>]) -> Vec<u8> {
    let mut page = vec![BINARY_PAGE];
    for e in entries {
        push_entry(&mut page, e.seq, &e.item);
    }
    page
}

/// Decodes a page ([`encode_page`]). Entries come in the order they were written (which
/// concurrent appenders can make differ from their numbers' order); a sealed page has none.
/// `Err` if it is damaged.
pub fn decode_page(page: &[u8]) -> Result<Vec<Entry<Vec<u8>>>, KvError> {
    let damaged = || KvError::Corrupt("append-log page (damaged)".into());
    if page == [SEALED_PAGE] {
        return Ok(Vec::new());
    }
    let mut r = Reader::new(page, BINARY_PAGE).ok_or_else(damaged)?;
    let mut out = Vec::new();
    while !r.is_empty() {
        let seq = r.u64().ok_or_else(damaged)?;
        let item = r.bytes().ok_or_else(damaged)?;
        out.push(Entry {
            seq,
            item: item.to_vec(),
        });
    }
    Ok(out)
}

impl AppendLog {
    /// The list stored under `prefix`, [`PAGE`] entries a page, each page in [`PARTS`] keys.
    pub fn new(prefix: Key) -> Self {
        AppendLog {
            parts: PARTS,
            ..Self::with_page_size(prefix, PAGE)
        }
    }

    /// The list stored under `prefix`, `size` entries a page: smaller pages make appends and
    /// removals cheaper and full reads take more keys. Every user of one list must agree on
    /// its page size. Each page is one key.
    pub fn with_page_size(prefix: Key, size: u64) -> Self {
        AppendLog {
            prefix,
            page: size.max(1),
            directory: false,
            parts: 1,
        }
    }

    /// The list stored under `prefix`, `size` entries a page, with a page directory: a
    /// removal that empties a page seals it and the directory stops listing it, so reads
    /// cost what the entries still there take, not what was ever appended ([`pagedir`]).
    /// Every user of one list must agree on whether it has one.
    pub fn with_directory(prefix: Key, size: u64) -> Self {
        AppendLog {
            directory: true,
            ..Self::with_page_size(prefix, size)
        }
    }

    /// The key of the list's entry counter.
    pub fn counter_key(&self) -> Key {
        keys::log_counter(&self.prefix)
    }

    /// The key of page `page` (0-based): the whole page, or its first part.
    pub fn page_key(&self, page: u64) -> Key {
        keys::log_page(&self.prefix, page)
    }

    /// The key of part `part` of page `page`.
    fn part_key(&self, page: u64, part: u64) -> Key {
        match part {
            0 => self.page_key(page),
            _ => keys::log_page_part(&self.prefix, page, part),
        }
    }

    /// The page and the part entry `seq` (1-based) belongs to.
    fn slot(&self, seq: u64) -> (u64, u64) {
        let at = seq - 1;
        (at / self.page, at % self.page / (self.page / self.parts))
    }

    /// Adds the keys of page `page` that may hold entries numbered `after + 1 ..= len` to
    /// `keys`: its page key (which holds the whole page where an earlier version wrote it)
    /// and each later part with numbers in that range. Returns how many it added.
    fn page_keys(&self, page: u64, after: u64, len: u64, keys: &mut Vec<Key>) -> usize {
        let before = keys.len();
        keys.push(self.page_key(page));
        let part_len = self.page / self.parts;
        for part in 1..self.parts {
            let first = page * self.page + part * part_len + 1;
            if first <= len && first + part_len - 1 > after {
                keys.push(self.part_key(page, part));
            }
        }
        keys.len() - before
    }

    /// Number of entries ever appended (numbers handed out), read through
    /// [`read_counter`] (never `get`: a counter's bytes are the host's own).
    pub fn len<K: Kv>(&self, kv: &K) -> Result<u64, KvError> {
        let n = read_counter(kv, &self.counter_key())?;
        u64::try_from(n).map_err(|_| KvError::Corrupt(format!("{} (negative)", self.counter_key())))
    }

    /// Appends items; returns their numbers. Each page is extended in place (the entries
    /// already on it are not decoded), so an append costs a copy of one page at most. Items
    /// whose page was sealed between their numbers' reservation and their write (a log with
    /// a directory) take new numbers.
    pub fn append<K: Kv, T: AsRef<[u8]>>(&self, kv: &K, items: &[T]) -> Result<Vec<u64>, KvError> {
        let items: Vec<&[u8]> = items.iter().map(AsRef::as_ref).collect();
        self.append_bytes(kv, &items)
    }

    /// [`AppendLog::append`], once for every item type (the component is size-budgeted).
    fn append_bytes<K: Kv>(&self, kv: &K, items: &[&[u8]]) -> Result<Vec<u64>, KvError> {
        let mut seqs = vec![0; items.len()];
        let mut todo: Vec<usize> = (0..items.len()).collect();
        for _ in 0..APPEND_ROUNDS {
            if todo.is_empty() {
                return Ok(seqs);
            }
            todo = self.append_round(kv, items, &todo, &mut seqs)?;
        }
        match todo.is_empty() {
            true => Ok(seqs),
            false => Err(KvError::Contended(
                "append-log pages (sealed under every append)".into(),
            )),
        }
    }

    /// Reserves numbers for `items[todo]` and writes them; returns those whose page was
    /// sealed (written nowhere).
    fn append_round<K: Kv>(
        &self,
        kv: &K,
        items: &[&[u8]],
        todo: &[usize],
        seqs: &mut [u64],
    ) -> Result<Vec<usize>, KvError> {
        let count =
            i64::try_from(todo.len()).map_err(|_| KvError::Refused("too many items".into()))?;
        let end = kv.increment(&self.counter_key(), count)?;
        let end = u64::try_from(end)
            .map_err(|_| KvError::Corrupt("append-log counter (negative)".into()))?;
        let first = end + 1 - todo.len() as u64;
        for (n, at) in todo.iter().enumerate() {
            seqs[*at] = first + n as u64;
        }
        let mut sealed = Vec::new();
        let mut start = 0;
        while start < todo.len() {
            let (page, part) = self.slot(seqs[todo[start]]);
            let mut added = Vec::new();
            let mut stop = start;
            while stop < todo.len() && self.slot(seqs[todo[stop]]) == (page, part) {
                push_entry(&mut added, seqs[todo[stop]], items[todo[stop]]);
                stop += 1;
            }
            let first_seq = seqs[todo[start]];
            let mut tries = 0;
            let written = update(kv, &self.part_key(page, part), &mut |current| {
                tries += 1;
                // A retry after a swap reported lost: if the page already holds our first
                // entry, the swap applied after all (a host can report failure after
                // applying, and another writer can change the page before it is read back).
                if tries > 1
                    && let Some(b) = current
                    && decode_page(b)
                        .map_err(|_| ())?
                        .iter()
                        .any(|e| e.seq == first_seq)
                {
                    return Ok(Update::Keep(true));
                }
                let mut page = match current {
                    None => vec![BINARY_PAGE],
                    Some([SEALED_PAGE]) => return Ok(Update::Keep(false)),
                    Some(b) if b.first() == Some(&BINARY_PAGE) => b.to_vec(),
                    Some(_) => return Err(()), // damaged: refused, not overwritten
                };
                page.extend_from_slice(&added);
                Ok::<_, ()>(Update::Write(page, true))
            })
            .map_err(store_err)?;
            if !written {
                sealed.extend_from_slice(&todo[start..stop]);
            }
            start = stop;
        }
        Ok(sealed)
    }

    /// Entries numbered after `after`, in order, at most `limit` of them, their items as
    /// UTF-8 text (ids).
    pub fn read<K: Kv>(
        &self,
        kv: &K,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Entry<String>>, KvError> {
        self.read_bytes(kv, after, limit)?
            .into_iter()
            .map(|e| {
                Ok(Entry {
                    seq: e.seq,
                    item: String::from_utf8(e.item).map_err(|_| {
                        KvError::Corrupt(format!("item under {} (not text)", self.prefix))
                    })?,
                })
            })
            .collect()
    }

    /// [`AppendLog::read`] for a list of typed ids (a history's delivery ids): each item
    /// moved into its id, trusted as the component appended it.
    pub fn read_ids<K: Kv, I: crate::ids::TypedId>(
        &self,
        kv: &K,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Entry<I>>, KvError> {
        Ok(self
            .read(kv, after, limit)?
            .into_iter()
            .map(|e| Entry {
                seq: e.seq,
                item: I::from_trusted(e.item),
            })
            .collect())
    }

    /// Entries numbered after `after`, in order, at most `limit` of them.
    ///
    /// The counter is read first ([`AppendLog::len`]), then the pages the read may need in
    /// one batch: from the page holding entry `after + 1`, as many as `limit` may take. So a
    /// read is two store operations (a publish reading its fan-out list, list reading a page
    /// of a client's subscriptions, a tick reading a second's due queue); pages that turn out
    /// to hold fewer entries than expected (removed ones) are followed by one more batch.
    /// Fewer than `limit` entries means the list was read to its end. A log with a directory
    /// reads it in that first batch, with the pages a read would take if it listed them all
    /// (at most [`pagedir::WINDOW`]) and the last two, and then only the pages it lists.
    pub fn read_bytes<K: Kv>(
        &self,
        kv: &K,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Entry<Vec<u8>>>, KvError> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let len = self.len(kv)?;
        if after >= len {
            return Ok(out);
        }
        let last = (len - 1) / self.page;
        let first = after / self.page;
        // Whole pages for the rest of the limit, plus one: the first may start mid-page.
        let want = |got: usize| ((limit - got) as u64).div_ceil(self.page).saturating_add(1);
        let (mut listed, from, mut fetched) = match self.directory {
            false => (Vec::new(), first, Vec::new()),
            true => {
                let (listed, from, fetched) = self.read_directory(kv, first, last, want(0))?;
                let fetched = fetched
                    .into_iter()
                    .map(|(p, v)| (p, v.into_iter().collect()));
                (listed, from, fetched.collect())
            }
        };
        // The pages to read, in order: the listed ones from `first` on, then `from.max(first)`
        // to `last` (every page, without a directory).
        listed.retain(|p| *p >= first);
        let (n, lo) = (listed.len() as u64, from.max(first));
        let count = n + (last + 1).saturating_sub(lo);
        let nth = |i: u64| match i < n {
            true => listed[i as usize],
            false => lo + (i - n),
        };
        let mut i = 0;
        while out.len() < limit && i < count {
            let page = nth(i);
            i += 1;
            let values = match fetched.iter().position(|(p, _)| *p == page) {
                Some(at) => fetched.swap_remove(at).1,
                None => {
                    // This page and the next ones not read yet, as many as the limit may take.
                    let mut batch = vec![page];
                    let mut j = i;
                    while (batch.len() as u64) < want(out.len()) && j < count {
                        let next = nth(j);
                        j += 1;
                        if !fetched.iter().any(|(p, _)| *p == next) {
                            batch.push(next);
                        }
                    }
                    let mut keys = Vec::with_capacity(batch.len());
                    let mut counts = Vec::with_capacity(batch.len());
                    for p in &batch {
                        counts.push(self.page_keys(*p, after, len, &mut keys));
                    }
                    let mut values = kv.get_many(&keys)?.into_iter();
                    let mut first = Vec::new();
                    for (i, (p, n)) in batch.iter().zip(counts).enumerate() {
                        let stored = values.by_ref().take(n).flatten().collect();
                        match i {
                            0 => first = stored,
                            _ => fetched.push((*p, stored)),
                        }
                    }
                    first
                }
            };
            self.take_page(&values, after, &mut out)?;
        }
        out.truncate(limit);
        Ok(out)
    }

    /// Adds the entries numbered after `after` of a page's stored values (its page key's and
    /// its parts') to `out`, in order.
    fn take_page(
        &self,
        values: &[Vec<u8>],
        after: u64,
        out: &mut Vec<Entry<Vec<u8>>>,
    ) -> Result<(), KvError> {
        let mut entries = Vec::new();
        for value in values {
            let part = decode_page(value)
                .map_err(|_| KvError::Corrupt(format!("append-log page under {}", self.prefix)))?;
            entries.extend(part);
        }
        crate::sort::sort_by(&mut entries, |a, b| a.seq < b.seq);
        out.extend(entries.into_iter().filter(|e| e.seq > after));
        Ok(())
    }

    /// Rewrites entry `seq` by compare-and-swap of its page: `f` sees the entry's item and
    /// returns its new item, or `None` to leave the page as it is. Returns whether the page
    /// was rewritten (`false` also when there is no such entry).
    pub fn modify<K: Kv>(
        &self,
        kv: &K,
        seq: u64,
        mut f: impl FnMut(&[u8]) -> Option<Vec<u8>>,
    ) -> Result<bool, KvError> {
        self.rewrite(kv, seq, &mut |entries| {
            let entry = entries.iter_mut().find(|e| e.seq == seq)?;
            entry.item = f(&entry.item)?;
            Some(())
        })
    }

    /// Removes entry `seq` (rewriting only its page). Removing an entry that is not there is
    /// not an error; the numbering never changes. In a log with a directory, a removal that
    /// empties a page then tidies the directory ([`pagedir`]): an error from that comes after
    /// the entry is gone, and what it leaves undone costs a later read one page more, never
    /// an entry.
    pub fn remove<K: Kv>(&self, kv: &K, seq: u64) -> Result<(), KvError> {
        let mut emptied = false;
        let rewritten = self.rewrite(kv, seq, &mut |entries| {
            emptied = false;
            let at = entries.iter().position(|e| e.seq == seq)?;
            entries.remove(at);
            emptied = entries.is_empty();
            Some(())
        })?;
        if rewritten && emptied && self.directory {
            self.emptied(kv, (seq - 1) / self.page)?;
        }
        Ok(())
    }

    /// Changes the part holding entry `seq` by compare-and-swap: `change` edits its entries
    /// and says whether it changed anything (`None`: write nothing). The entry is looked for
    /// in its own part, then under its page key (where an earlier version kept whole pages).
    fn rewrite<K: Kv>(
        &self,
        kv: &K,
        seq: u64,
        change: &mut PageChange<'_>,
    ) -> Result<bool, KvError> {
        if seq == 0 {
            return Ok(false);
        }
        let (page, part) = self.slot(seq);
        if part > 0
            && let Some(done) = self.rewrite_in(kv, &self.part_key(page, part), seq, change)?
        {
            return Ok(done);
        }
        Ok(self
            .rewrite_in(kv, &self.page_key(page), seq, change)?
            .unwrap_or(false))
    }

    /// [`AppendLog::rewrite`] at one key: `None` if it does not hold entry `seq`.
    fn rewrite_in<K: Kv>(
        &self,
        kv: &K,
        key: &Key,
        seq: u64,
        change: &mut PageChange<'_>,
    ) -> Result<Option<bool>, KvError> {
        update(kv, key, &mut |current| {
            let Some(bytes) = current else {
                return Ok(Update::Keep(None));
            };
            let mut entries = decode_page(bytes).map_err(|_| ())?;
            if !entries.iter().any(|e| e.seq == seq) {
                return Ok(Update::Keep(None));
            }
            Ok::<_, ()>(match change(&mut entries) {
                Some(()) => Update::Write(encode_page(&entries), Some(true)),
                None => Update::Keep(Some(false)),
            })
        })
        .map_err(store_err)
    }

    /// Entries per page.
    pub fn page_size(&self) -> u64 {
        self.page
    }

    /// The entries of page `page` (0-based) as stored, in their numbers' order; none if the
    /// page is absent (never written, or dropped).
    pub fn read_page<K: Kv>(&self, kv: &K, page: u64) -> Result<Vec<Entry<Vec<u8>>>, KvError> {
        let mut out = Vec::new();
        let values: Vec<Vec<u8>> = match self.parts {
            1 => kv.get(&self.page_key(page))?.into_iter().collect(),
            _ => {
                let mut keys = Vec::new();
                self.page_keys(page, 0, u64::MAX, &mut keys);
                kv.get_many(&keys)?.into_iter().flatten().collect()
            }
        };
        self.take_page(&values, 0, &mut out)?;
        Ok(out)
    }

    /// Deletes every key of page `page` (its parts first, its page key last).
    fn delete_page<K: Kv>(&self, kv: &K, page: u64) -> Result<(), KvError> {
        for part in (0..self.parts).rev() {
            kv.delete(&self.part_key(page, part))?;
        }
        Ok(())
    }

    /// How many leading pages [`AppendLog::drop_page`] has dropped: entries numbered up to
    /// `dropped * page_size()` are gone, so a read from the start begins after them.
    pub fn dropped_pages<K: Kv>(&self, kv: &K) -> Result<u64, KvError> {
        Ok(match kv.get(&keys::log_dropped(&self.prefix))? {
            None => 0,
            Some(b) => std::str::from_utf8(&b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| KvError::Corrupt(keys::log_dropped(&self.prefix).to_string()))?,
        })
    }

    /// Drops page `page`, the first not dropped yet: deletes it (each of its keys), then moves the dropped mark
    /// past it by compare-and-swap. `false` (and the mark unchanged) if the mark was not at
    /// `page` any more (another purge dropped it). Dropping a page deleted already (a
    /// drop cut short between its two writes) only moves the mark.
    pub fn drop_page<K: Kv>(&self, kv: &K, page: u64) -> Result<bool, KvError> {
        self.delete_page(kv, page)?;
        update(kv, &keys::log_dropped(&self.prefix), &mut |cur| {
            let at = match cur {
                None => 0,
                Some(b) => std::str::from_utf8(b)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or(())?,
            };
            Ok::<_, ()>(match at == page {
                true => Update::Write((page + 1).to_string().into_bytes(), true),
                false => Update::Keep(false),
            })
        })
        .map_err(store_err)
    }

    /// Deletes the counter and the dropped mark of a list whose every page was dropped
    /// ([`AppendLog::drop_page`]): nothing of it is left.
    pub fn forget_dropped<K: Kv>(&self, kv: &K) -> Result<(), KvError> {
        kv.delete(&self.counter_key())?;
        kv.delete(&keys::log_dropped(&self.prefix))
    }

    /// Deletes the whole list.
    pub fn delete_all<K: Kv>(&self, kv: &K) -> Result<(), KvError> {
        let len = self.len(kv)?;
        let pages = len.div_ceil(self.page);
        for page in 0..pages {
            self.delete_page(kv, page)?;
        }
        kv.delete(&self.counter_key())
    }
}

#[cfg(test)]
mod tests;
