//! A bounded cache of the values the store wrote or read last, so that the hot reads (a
//! delivery's record is written three times in its first seconds and read between; the
//! fan-out lists and the due directory on every event) are memory reads again, while the
//! store's memory stays bounded whatever the number of records (values live in the log).
//!
//! Two generations: entries go into the young one; a hit in the old one moves the entry to
//! the young one; when the young one holds half the budget, the old one is dropped and the
//! young one becomes old. So what was used within the last half budget stays, the memory is
//! at most the budget (each entry counted with its key, its value and a fixed overhead for
//! the maps' and allocator's own bytes), and every operation is a hash lookup: no recency
//! list to maintain on a read.

use std::collections::HashMap;

/// The default budget: 32 MiB of keys, values and overhead.
pub const DEFAULT_CACHE_BYTES: usize = 32 << 20;
/// What an entry is counted beyond its key and value bytes: the two allocations' headers
/// and the map's slot.
const ENTRY_OVERHEAD: usize = 96;
/// A value larger than this share of the budget is not cached (it would push out many).
const LARGEST_SHARE: usize = 64;

/// The cache (see the module docs). A budget of 0 turns it off.
pub(super) struct ValueCache {
    budget: usize,
    young: HashMap<Box<str>, Box<[u8]>>,
    young_bytes: usize,
    old: HashMap<Box<str>, Box<[u8]>>,
}

fn cost(key: &str, value: &[u8]) -> usize {
    key.len() + value.len() + ENTRY_OVERHEAD
}

impl ValueCache {
    pub(super) fn new(budget: usize) -> Self {
        ValueCache {
            budget,
            young: HashMap::new(),
            young_bytes: 0,
            old: HashMap::new(),
        }
    }

    /// The cached value of `key`, if any (a hit in the old generation moves it to the young).
    pub(super) fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        if let Some(v) = self.young.get(key) {
            return Some(v.to_vec());
        }
        let (k, v) = self.old.remove_entry(key)?;
        let out = v.to_vec();
        self.admit(k, v);
        Some(out)
    }

    /// `key` now holds `value` (written, or read from the log).
    pub(super) fn put(&mut self, key: &str, value: &[u8]) {
        self.old.remove(key);
        if self.budget == 0 || cost(key, value) > self.budget / LARGEST_SHARE {
            self.forget_young(key);
            return;
        }
        self.admit(key.into(), value.into());
    }

    /// `key` is deleted, or its value is no longer known.
    pub(super) fn forget(&mut self, key: &str) {
        self.old.remove(key);
        self.forget_young(key);
    }

    /// Bytes held as counted against the budget (tests, stats).
    pub(super) fn bytes(&self) -> usize {
        let old: usize = self.old.iter().map(|(k, v)| cost(k, v)).sum();
        self.young_bytes + old
    }

    fn forget_young(&mut self, key: &str) {
        if let Some(v) = self.young.remove(key) {
            self.young_bytes -= cost(key, &v);
        }
    }

    fn admit(&mut self, key: Box<str>, value: Box<[u8]>) {
        self.forget_young(&key);
        let c = cost(&key, &value);
        if self.young_bytes + c > self.budget / 2 {
            self.old = std::mem::take(&mut self.young);
            self.young_bytes = 0;
        }
        self.young.insert(key, value);
        self.young_bytes += c;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_returns_the_last_value_and_a_forgotten_key_misses() {
        let mut c = ValueCache::new(1 << 20);
        c.put("a", b"1");
        c.put("a", b"22");
        assert_eq!(c.get("a").as_deref(), Some(&b"22"[..]));
        c.forget("a");
        assert_eq!(c.get("a"), None);
        assert_eq!(c.bytes(), 0);
    }

    #[test]
    fn memory_stays_within_the_budget_and_recent_entries_stay() {
        let budget = 64 * 1024;
        let mut c = ValueCache::new(budget);
        for i in 0..10_000 {
            c.put(&format!("k{i}"), &[7; 100]);
            assert!(c.bytes() <= budget, "{} bytes at entry {i}", c.bytes());
        }
        // The last entries are still there; the first are gone.
        assert!(c.get("k9999").is_some());
        assert!(c.get("k0").is_none());
        // An entry read keeps its place as entries pass.
        let mut kept = 0;
        for i in 10_000..20_000 {
            c.put(&format!("k{i}"), &[7; 100]);
            if c.get("k9999").is_some() {
                kept += 1;
            }
        }
        assert_eq!(kept, 10_000, "a key read often stays cached");
    }

    #[test]
    fn a_value_too_large_for_its_share_is_not_cached_and_evicts_its_older_self() {
        let mut c = ValueCache::new(64 * 1024);
        c.put("big", b"small");
        c.put("big", &[1; 4096]);
        assert_eq!(c.get("big"), None, "the stale small value must not answer");
        let mut off = ValueCache::new(0);
        off.put("a", b"1");
        assert_eq!(off.get("a"), None);
    }
}
