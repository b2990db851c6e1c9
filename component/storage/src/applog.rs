//! An append-only list over the key-value store, in small pages, so appending costs the same
//! whatever the list's length (no value is rewritten whole).
//!
//! Layout under a prefix `P`: `P:n` is an atomic counter of entries ever appended; page `k`
//! (`P:p{k}`) holds the entries numbered `k*size+1 ..= (k+1)*size` (`size` is [`PAGE`]
//! unless the log was made with another). An append reserves its numbers with one
//! `increment`, then adds each entry to its page by compare-and-swap, so concurrent appenders
//! never overwrite each other. A crash between the two leaves a gap in the numbering, never a
//! damaged page.
//!
//! Items are byte strings (ids, or a caller's own encoding). A page is binary, see
//! [`decode_page`]: appending copies the page and adds the new entries at its end, without
//! decoding the entries already there, and reading one is a walk over length prefixes. So the
//! component never parses or re-encodes JSON to append to a queue, a history or an index.
//!
//! An entry can be removed again ([`AppendLog::remove`]) or rewritten
//! ([`AppendLog::modify`]): that rewrites only its own page.
//!
//! Used for the due queue (one list per second), each subscription's delivery history, the
//! retention index (one list per day), and the subscription indexes (each client's list and
//! each event type's fan-out list).

use crate::codec::Reader;
use crate::keys::{self, Key};
use crate::kv::{Kv, KvError, Update, UpdateError, read_counter, update};

/// Entries per page, unless a log is made with [`AppendLog::with_page_size`].
pub const PAGE: u64 = 128;

/// The first byte of a page.
const BINARY_PAGE: u8 = 0xE1;

/// An edit of a page's entries: `Some(())` if it changed them, `None` to write nothing.
type PageChange<'a> = dyn FnMut(&mut Vec<Entry<Vec<u8>>>) -> Option<()> + 'a;

/// One append-only list.
pub struct AppendLog {
    prefix: Key,
    page: u64,
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
        UpdateError::Rejected(_) => KvError("corrupt append-log page".into()),
        UpdateError::Contended => KvError("append-log page contended".into()),
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
/// concurrent appenders can make differ from their numbers' order). `Err` if it is damaged.
pub fn decode_page(page: &[u8]) -> Result<Vec<Entry<Vec<u8>>>, KvError> {
    let damaged = || KvError("damaged append-log page".into());
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
    /// The list stored under `prefix`.
    pub fn new(prefix: Key) -> Self {
        Self::with_page_size(prefix, PAGE)
    }

    /// The list stored under `prefix`, `size` entries a page: smaller pages make appends and
    /// removals cheaper and full reads take more keys. Every user of one list must agree on
    /// its page size.
    pub fn with_page_size(prefix: Key, size: u64) -> Self {
        AppendLog {
            prefix,
            page: size.max(1),
        }
    }

    /// The key of the list's entry counter.
    pub fn counter_key(&self) -> Key {
        keys::log_counter(&self.prefix)
    }

    /// The key of page `page` (0-based).
    pub fn page_key(&self, page: u64) -> Key {
        keys::log_page(&self.prefix, page)
    }

    /// Number of entries ever appended (numbers handed out), read through
    /// [`read_counter`] (never `get`: a counter's bytes are the host's own).
    pub fn len<K: Kv>(&self, kv: &K) -> Result<u64, KvError> {
        let n = read_counter(kv, &self.counter_key())?;
        u64::try_from(n).map_err(|_| KvError(format!("{} is negative", self.counter_key())))
    }

    /// Appends items; returns their numbers. Each page is extended in place (the entries
    /// already on it are not decoded), so an append costs a copy of one page at most.
    pub fn append<K: Kv, T: AsRef<[u8]>>(&self, kv: &K, items: &[T]) -> Result<Vec<u64>, KvError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let count = i64::try_from(items.len()).map_err(|_| KvError("too many items".into()))?;
        let end = kv.increment(&self.counter_key(), count)?;
        let end = u64::try_from(end).map_err(|_| KvError("negative counter".into()))?;
        let first = end + 1 - items.len() as u64;
        let seqs: Vec<u64> = (first..=end).collect();
        let mut start = 0;
        while start < items.len() {
            let page = (seqs[start] - 1) / self.page;
            let mut added = Vec::new();
            let mut stop = start;
            while stop < items.len() && (seqs[stop] - 1) / self.page == page {
                push_entry(&mut added, seqs[stop], items[stop].as_ref());
                stop += 1;
            }
            let first_seq = seqs[start];
            let mut tries = 0;
            update(kv, &self.page_key(page), |current| {
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
                    return Ok(Update::Keep(()));
                }
                let mut page = match current {
                    None => vec![BINARY_PAGE],
                    Some(b) if b.first() == Some(&BINARY_PAGE) => b.to_vec(),
                    Some(_) => return Err(()), // damaged: refused, not overwritten
                };
                page.extend_from_slice(&added);
                Ok::<_, ()>(Update::Write(page, ()))
            })
            .map_err(store_err)?;
            start = stop;
        }
        Ok(seqs)
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
                    item: String::from_utf8(e.item)
                        .map_err(|_| KvError(format!("a non-text item under {}", self.prefix)))?,
                })
            })
            .collect()
    }

    /// Entries numbered after `after`, in order, at most `limit` of them.
    ///
    /// The counter is read first ([`AppendLog::len`]), then the pages the read may need in
    /// one batch: from the page holding entry `after + 1`, as many as `limit` may take. So a
    /// read is two store operations (a publish reading its fan-out list, list reading a page
    /// of a client's subscriptions, a tick reading a second's due queue); pages that turn out
    /// to hold fewer entries than expected (removed ones) are followed by one more batch.
    /// Fewer than `limit` entries means the list was read to its end.
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
        let last_page = (len - 1) / self.page;
        let mut page = after / self.page;
        while page <= last_page && out.len() < limit {
            // Whole pages for the rest of the limit, plus one: the first may start mid-page.
            let want = ((limit - out.len()) as u64)
                .div_ceil(self.page)
                .saturating_add(1);
            let end = last_page.min(page.saturating_add(want - 1));
            let keys: Vec<Key> = (page..=end).map(|p| self.page_key(p)).collect();
            for value in kv.get_many(&keys)?.into_iter().flatten() {
                self.take_page(&value, after, &mut out)?;
            }
            page = end + 1;
        }
        out.truncate(limit);
        Ok(out)
    }

    /// Adds a page's entries numbered after `after` to `out`, in order.
    fn take_page(
        &self,
        value: &[u8],
        after: u64,
        out: &mut Vec<Entry<Vec<u8>>>,
    ) -> Result<(), KvError> {
        let mut entries =
            decode_page(value).map_err(|e| KvError(format!("{} under {}", e.0, self.prefix)))?;
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
    /// not an error; the numbering never changes.
    pub fn remove<K: Kv>(&self, kv: &K, seq: u64) -> Result<(), KvError> {
        self.rewrite(kv, seq, &mut |entries| {
            let at = entries.iter().position(|e| e.seq == seq)?;
            entries.remove(at);
            Some(())
        })?;
        Ok(())
    }

    /// Changes the page holding entry `seq` by compare-and-swap: `change` edits its entries
    /// and says whether it changed anything (`None`: write nothing).
    fn rewrite<K: Kv>(
        &self,
        kv: &K,
        seq: u64,
        change: &mut PageChange<'_>,
    ) -> Result<bool, KvError> {
        if seq == 0 {
            return Ok(false);
        }
        update(kv, &self.page_key((seq - 1) / self.page), |current| {
            let Some(bytes) = current else {
                return Ok(Update::Keep(false));
            };
            let mut entries = decode_page(bytes).map_err(|_| ())?;
            Ok::<_, ()>(match change(&mut entries) {
                Some(()) => Update::Write(encode_page(&entries), true),
                None => Update::Keep(false),
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
        if let Some(value) = kv.get(&self.page_key(page))? {
            self.take_page(&value, 0, &mut out)?;
        }
        Ok(out)
    }

    /// How many leading pages [`AppendLog::drop_page`] has dropped: entries numbered up to
    /// `dropped * page_size()` are gone, so a read from the start begins after them.
    pub fn dropped_pages<K: Kv>(&self, kv: &K) -> Result<u64, KvError> {
        Ok(match kv.get(&keys::log_dropped(&self.prefix))? {
            None => 0,
            Some(b) => std::str::from_utf8(&b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| KvError(format!("damaged {}", keys::log_dropped(&self.prefix))))?,
        })
    }

    /// Drops page `page`, the first not dropped yet: deletes it, then moves the dropped mark
    /// past it by compare-and-swap. `false` (and the mark unchanged) if the mark was not at
    /// `page` any more (another purge dropped it). Dropping a page deleted already (a
    /// drop cut short between its two writes) only moves the mark.
    pub fn drop_page<K: Kv>(&self, kv: &K, page: u64) -> Result<bool, KvError> {
        kv.delete(&self.page_key(page))?;
        update(kv, &keys::log_dropped(&self.prefix), |cur| {
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
            kv.delete(&self.page_key(page))?;
        }
        kv.delete(&self.counter_key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemoryKv;

    #[test]
    fn append_and_read_across_pages() {
        let kv = MemoryKv::new();
        let log = AppendLog::new(Key::from_stored("t"));
        let items: Vec<String> = (0..300).map(|i| format!("x{i}")).collect();
        let seqs = log.append(&kv, &items[..200]).expect("append");
        assert_eq!(seqs.first(), Some(&1));
        log.append(&kv, &items[200..]).expect("append");
        let all: Vec<Entry<String>> = log.read(&kv, 0, 1000).expect("read");
        assert_eq!(all.len(), 300);
        assert!(
            all.iter()
                .enumerate()
                .all(|(i, e)| e.seq == i as u64 + 1 && e.item == items[i])
        );
        let some: Vec<Entry<String>> = log.read(&kv, 127, 3).expect("read");
        assert_eq!(
            some.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [128, 129, 130]
        );
        log.delete_all(&kv).expect("delete");
        assert!(kv.dump().is_empty());
    }

    /// A read is the counter (through `increment(key, 0)`) and one batch of the pages the
    /// limit may need: two store operations whatever the list's length.
    #[test]
    fn a_read_is_the_counter_and_one_batch_of_pages() {
        let kv = MemoryKv::new();
        let log = AppendLog::new(Key::from_stored("t"));
        let cost = |after: u64, limit: usize| {
            let before = kv.ops();
            let entries = log.read(&kv, after, limit).expect("read");
            (kv.ops() - before, entries.len())
        };
        assert_eq!(
            cost(0, usize::MAX),
            (1, 0),
            "an empty list: the counter alone"
        );
        let items: Vec<String> = (0..600).map(|i| format!("x{i}")).collect();
        log.append(&kv, &items[..100]).expect("append");
        assert_eq!(cost(0, usize::MAX), (2, 100));
        assert_eq!(
            cost(60, 51),
            (2, 40),
            "a page from the middle of the first page"
        );
        assert_eq!(cost(100, 10), (1, 0), "nothing after the last entry");
        log.append(&kv, &items[100..]).expect("append");
        assert_eq!(cost(120, 5), (2, 5));
        assert_eq!(cost(120, 51), (2, 51), "across a page boundary");
        assert_eq!(cost(0, 300), (2, 300));
        assert_eq!(cost(0, 500), (2, 500));
        assert_eq!(cost(0, usize::MAX), (2, 600), "five pages at once");
        assert_eq!(cost(0, 0), (0, 0));
        // Removed entries make pages short: the read goes on with one more batch.
        for seq in 1..=128 {
            log.remove(&kv, seq).expect("remove");
        }
        assert_eq!(
            cost(0, 10),
            (2, 10),
            "page 0 emptied: page 1 came in the batch"
        );
        for seq in 129..=256 {
            log.remove(&kv, seq).expect("remove");
        }
        assert_eq!(
            cost(0, 10),
            (3, 10),
            "pages 0 and 1 emptied: page 2 read next"
        );
    }

    #[test]
    fn remove_rewrites_one_page_and_keeps_the_numbering() {
        let kv = MemoryKv::new();
        let log = AppendLog::new(Key::from_stored("t"));
        let items: Vec<String> = (0..300).map(|i| format!("x{i}")).collect();
        log.append(&kv, &items).expect("append");
        let untouched = kv.get("t:p0").expect("get");
        log.remove(&kv, 200).expect("remove");
        log.remove(&kv, 200).expect("removing twice is fine");
        log.remove(&kv, 5000)
            .expect("removing a number never handed out is fine");
        assert_eq!(
            kv.get("t:p0").expect("get"),
            untouched,
            "other pages untouched"
        );
        let all: Vec<Entry<String>> = log.read(&kv, 0, 1000).expect("read");
        assert_eq!(all.len(), 299);
        assert!(all.iter().all(|e| e.seq != 200));
        let next = log.append(&kv, &["new".to_owned()]).expect("append");
        assert_eq!(next, [301], "numbers are never reused");
    }

    #[test]
    fn a_page_is_extended_without_decoding_it_and_modify_rewrites_one_entry() {
        let kv = MemoryKv::new();
        let log = AppendLog::with_page_size(Key::from_stored("t"), 4);
        log.append(&kv, &["a", "b"]).expect("append");
        let before = kv.get("t:p0").expect("get").expect("page");
        log.append(&kv, &["c"]).expect("append");
        let after = kv.get("t:p0").expect("get").expect("page");
        assert_eq!(
            after[..before.len()],
            before[..],
            "the old bytes are kept as they were"
        );
        assert!(
            log.modify(&kv, 2, |item| Some([item, b"!"].concat()))
                .expect("modify")
        );
        assert!(
            !log.modify(&kv, 2, |_| None).expect("modify"),
            "None writes nothing"
        );
        assert!(
            !log.modify(&kv, 9, |_| Some(Vec::new())).expect("modify"),
            "no entry 9"
        );
        let items: Vec<String> = log
            .read(&kv, 0, 10)
            .expect("read")
            .into_iter()
            .map(|e| e.item)
            .collect();
        assert_eq!(items, ["a", "b!", "c"]);
    }

    #[test]
    fn a_page_that_is_not_binary_is_refused_and_never_overwritten() {
        let kv = MemoryKv::new();
        let log = AppendLog::new(Key::from_stored("t"));
        kv.increment("t:n", 2).expect("counter");
        let damaged = br#"[{"seq":2,"item":"y"},{"seq":1,"item":"x"}]"#;
        kv.set("t:p0", damaged).expect("set");
        assert!(log.read(&kv, 0, 10).is_err(), "reading it fails");
        assert!(log.append(&kv, &["z"]).is_err(), "appending to it fails");
        assert_eq!(kv.get("t:p0").expect("get").as_deref(), Some(&damaged[..]));
    }

    #[test]
    fn a_damaged_page_is_an_error_not_a_panic() {
        let mut page = encode_page(&[Entry {
            seq: 1,
            item: b"abc".to_vec(),
        }]);
        assert_eq!(decode_page(&page).expect("whole").len(), 1);
        for cut in 2..page.len() {
            assert!(decode_page(&page[..cut]).is_err(), "cut at {cut}");
        }
        page[9] = 0xff; // the length now runs past the end
        assert!(decode_page(&page).is_err());
        assert!(decode_page(b"").is_err());
        assert!(decode_page(b"[{").is_err());
    }
}
