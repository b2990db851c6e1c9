//! An append-only list over the key-value store, in small pages, so appending costs the same
//! whatever the list's length (no value is rewritten whole).
//!
//! Layout under a prefix `P`: `P:n` is an atomic counter of entries ever appended; page `k`
//! (`P:p{k}`) holds the entries numbered `k*size+1 ..= (k+1)*size` as a JSON array of
//! `{"seq", "item"}` (`size` is [`PAGE`] unless the log was made with another). An append
//! reserves its numbers with one `increment`, then adds each entry to its page by
//! compare-and-swap, so concurrent appenders never overwrite each other. A crash between the
//! two leaves a gap in the numbering, never a damaged page.
//!
//! An entry can be removed again ([`AppendLog::remove`]): that rewrites only its own page.
//!
//! Used for the due queue (one list per second), each subscription's delivery history, the
//! retention index (one list per day), and the subscription indexes (each client's list and
//! each event type's fan-out list).

use crate::kv::{Kv, KvError, Update, UpdateError, update};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

/// Entries per page, unless a log is made with [`AppendLog::with_page_size`].
pub const PAGE: u64 = 128;

/// One append-only list.
pub struct AppendLog {
    prefix: String,
    page: u64,
}

/// An entry and its number in the list (1-based).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

impl AppendLog {
    /// The list stored under `prefix`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self::with_page_size(prefix, PAGE)
    }

    /// The list stored under `prefix`, `size` entries a page: smaller pages make appends and
    /// removals cheaper and full reads take more keys. Every user of one list must agree on
    /// its page size.
    pub fn with_page_size(prefix: impl Into<String>, size: u64) -> Self {
        AppendLog {
            prefix: prefix.into(),
            page: size.max(1),
        }
    }

    /// The key of the list's entry counter.
    pub fn counter_key(&self) -> String {
        format!("{}:n", self.prefix)
    }

    fn page_key(&self, page: u64) -> String {
        format!("{}:p{page}", self.prefix)
    }

    /// Number of entries ever appended (numbers handed out).
    pub fn len<K: Kv>(&self, kv: &K) -> Result<u64, KvError> {
        match kv.get(&self.counter_key())? {
            None => Ok(0),
            Some(b) => std::str::from_utf8(&b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| KvError(format!("{} does not hold a counter", self.counter_key()))),
        }
    }

    /// Appends items; returns their numbers.
    pub fn append<K: Kv, T: Serialize + DeserializeOwned + Clone>(
        &self,
        kv: &K,
        items: &[T],
    ) -> Result<Vec<u64>, KvError> {
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
            let mut stop = start;
            while stop < items.len() && (seqs[stop] - 1) / self.page == page {
                stop += 1;
            }
            let new: Vec<Entry<T>> = (start..stop)
                .map(|i| Entry {
                    seq: seqs[i],
                    item: items[i].clone(),
                })
                .collect();
            update(kv, &self.page_key(page), |current| {
                let mut entries: Vec<Entry<T>> = match current {
                    None => Vec::new(),
                    Some(b) => serde_json::from_slice(b).map_err(|_| ())?,
                };
                entries.extend(new.iter().cloned());
                let json = serde_json::to_vec(&entries).map_err(|_| ())?;
                Ok::<_, ()>(Update::Write(json, ()))
            })
            .map_err(store_err)?;
            start = stop;
        }
        Ok(seqs)
    }

    /// Entries numbered after `after`, in order, at most `limit` of them.
    pub fn read<K: Kv, T: DeserializeOwned>(
        &self,
        kv: &K,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Entry<T>>, KvError> {
        let len = self.len(kv)?;
        if after >= len || limit == 0 {
            return Ok(Vec::new());
        }
        let mut out: Vec<Entry<T>> = Vec::new();
        let mut page = after / self.page;
        let last_page = (len - 1) / self.page;
        while page <= last_page && out.len() < limit {
            // Read as many pages as the limit may need, in one batch.
            let want = ((limit - out.len()) as u64).div_ceil(self.page) + 1;
            let pages: Vec<u64> = (page..=last_page.min(page + want - 1)).collect();
            let keys: Vec<String> = pages.iter().map(|p| self.page_key(*p)).collect();
            for value in kv.get_many(&keys)?.into_iter().flatten() {
                let mut entries: Vec<Entry<T>> = serde_json::from_slice(&value)
                    .map_err(|e| KvError(format!("corrupt page under {}: {e}", self.prefix)))?;
                entries.sort_by_key(|e| e.seq);
                out.extend(entries.into_iter().filter(|e| e.seq > after));
            }
            page = pages.last().map_or(last_page + 1, |p| p + 1);
        }
        out.truncate(limit);
        Ok(out)
    }

    /// Removes entry `seq` (rewriting only its page). Removing an entry that is not there is
    /// not an error; the numbering never changes.
    pub fn remove<K: Kv>(&self, kv: &K, seq: u64) -> Result<(), KvError> {
        if seq == 0 {
            return Ok(());
        }
        update(kv, &self.page_key((seq - 1) / self.page), |current| {
            let Some(bytes) = current else {
                return Ok(Update::Keep(()));
            };
            let mut entries: Vec<Entry<serde_json::Value>> =
                serde_json::from_slice(bytes).map_err(|_| ())?;
            let before = entries.len();
            entries.retain(|e| e.seq != seq);
            if entries.len() == before {
                return Ok(Update::Keep(()));
            }
            let json = serde_json::to_vec(&entries).map_err(|_| ())?;
            Ok::<_, ()>(Update::Write(json, ()))
        })
        .map_err(store_err)
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
        let log = AppendLog::new("t");
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

    #[test]
    fn remove_rewrites_one_page_and_keeps_the_numbering() {
        let kv = MemoryKv::new();
        let log = AppendLog::new("t");
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
}
