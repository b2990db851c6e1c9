//! A bounded cache of the values the store wrote or read last, so that the hot reads (a
//! delivery's record is written three times in its first seconds and read between; the
//! fan-out lists and the due directory on every event) are memory reads again, while the
//! store's memory stays bounded whatever the number of records (values live in the log).
//!
//! Entries are appended to a ring of [`SEGMENTS`] fixed buffers, each allocated once at its
//! full size and reused: `[key length u32][value length u32][key][value]`. When the ring is
//! full the oldest buffer is emptied (its entries leave the map) and written again. A hit in
//! the older half of the ring is appended again, so what was used within the last half of
//! the budget stays. A map from the key's 64-bit hash to its entry finds it; the key stored
//! in the entry is compared, so two keys of one hash never answer for each other (the later
//! one takes the slot).
//!
//! No allocation per entry: a cache of individually allocated entries, a generation of
//! them dropped at a time, left the allocator holding 40-75 MiB of partly used pages at a
//! million records (the `footprint` benchmark), memory that grew with the store's churn. The
//! ring's buffers are the budget, allocated once; the map's slots (16 bytes an entry, about
//! 1.6 MiB for 100,000 entries) come on top of it.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

/// The default budget: 32 MiB of entries (keys, values and 8-byte headers).
pub const DEFAULT_CACHE_BYTES: usize = 32 << 20;
/// A value larger than this share of the budget is not cached (it would push out many).
const LARGEST_SHARE: usize = 64;
/// The ring's buffers: the budget is emptied a 32nd at a time.
const SEGMENTS: usize = 32;
/// An entry's header: the key's and the value's lengths.
const HEADER: usize = 8;

/// The map's hasher: its keys are already hashes.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Where an entry is: its buffer and its offset there.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Place {
    segment: u32,
    at: u32,
}

/// The cache (see the module docs). A budget of 0 turns it off.
pub(super) struct ValueCache {
    /// Bytes per buffer (the budget / [`SEGMENTS`]).
    segment_bytes: usize,
    /// The largest entry cached.
    largest: usize,
    segments: Vec<Vec<u8>>,
    /// The buffer written now; the one after it (round the ring) is the oldest.
    current: usize,
    map: HashMap<u64, Place, BuildHasherDefault<Prehashed>>,
    /// The keys' hash; `None` (tests) hashes every key to 0, so every key collides.
    hasher: Option<RandomState>,
}

impl ValueCache {
    pub(super) fn new(budget: usize) -> Self {
        Self::with_hasher(budget, Some(RandomState::new()))
    }

    fn with_hasher(budget: usize, hasher: Option<RandomState>) -> Self {
        let segment_bytes = (budget / SEGMENTS).min(u32::MAX as usize);
        ValueCache {
            segment_bytes,
            largest: (budget / LARGEST_SHARE).min(segment_bytes),
            segments: vec![Vec::new(); SEGMENTS],
            current: 0,
            map: HashMap::default(),
            hasher,
        }
    }

    fn hash(&self, key: &str) -> u64 {
        self.hasher.as_ref().map_or(0, |h| h.hash_one(key))
    }

    /// The entry at `place` if it is `key`'s: its value's range in its buffer.
    fn entry(&self, place: Place, key: &str) -> Option<std::ops::Range<usize>> {
        let seg = &self.segments[place.segment as usize];
        let at = place.at as usize;
        let (k, v) = lengths(seg, at);
        let key_at = at + HEADER;
        (&seg[key_at..key_at + k] == key.as_bytes()).then_some(key_at + k..key_at + k + v)
    }

    /// The cached value of `key`, if any (a hit in the older half of the ring is appended
    /// again).
    pub(super) fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        let h = self.hash(key);
        let place = *self.map.get(&h)?;
        let range = self.entry(place, key)?;
        let value = self.segments[place.segment as usize][range].to_vec();
        let age = (self.current + SEGMENTS - place.segment as usize) % SEGMENTS;
        if age >= SEGMENTS / 2 {
            self.append(h, key, &value);
        }
        Some(value)
    }

    /// `key` now holds `value` (written, or read from the log).
    pub(super) fn put(&mut self, key: &str, value: &[u8]) {
        if HEADER + key.len() + value.len() > self.largest {
            self.forget(key);
            return;
        }
        let h = self.hash(key);
        self.append(h, key, value);
    }

    /// `key` is deleted, or its value is no longer known.
    pub(super) fn forget(&mut self, key: &str) {
        let h = self.hash(key);
        if let Some(&place) = self.map.get(&h)
            && self.entry(place, key).is_some()
        {
            self.map.remove(&h);
        }
    }

    /// Bytes of entries held in the ring, live or since replaced (tests, stats).
    pub(super) fn bytes(&self) -> usize {
        self.segments.iter().map(Vec::len).sum()
    }

    /// Appends `key`'s entry (its hash `h`) and points the map at it.
    fn append(&mut self, h: u64, key: &str, value: &[u8]) {
        let size = HEADER + key.len() + value.len();
        if self.segments[self.current].len() + size > self.segment_bytes {
            self.current = (self.current + 1) % SEGMENTS;
            self.evict(self.current);
        }
        let segment_bytes = self.segment_bytes;
        let seg = &mut self.segments[self.current];
        if seg.capacity() == 0 {
            seg.reserve_exact(segment_bytes);
        }
        let at = seg.len() as u32;
        seg.extend_from_slice(&(key.len() as u32).to_le_bytes());
        seg.extend_from_slice(&(value.len() as u32).to_le_bytes());
        seg.extend_from_slice(key.as_bytes());
        seg.extend_from_slice(value);
        let place = Place {
            segment: self.current as u32,
            at,
        };
        self.map.insert(h, place);
    }

    /// Empties buffer `segment`: its entries that the map still points at leave it.
    fn evict(&mut self, segment: usize) {
        let mut seg = std::mem::take(&mut self.segments[segment]);
        let mut at = 0;
        while at < seg.len() {
            let (k, v) = lengths(&seg, at);
            let key = &seg[at + HEADER..at + HEADER + k];
            let h = match (&self.hasher, std::str::from_utf8(key)) {
                (Some(hasher), Ok(key)) => hasher.hash_one(key),
                _ => 0,
            };
            let here = Place {
                segment: segment as u32,
                at: at as u32,
            };
            if self.map.get(&h) == Some(&here) {
                self.map.remove(&h);
            }
            at += HEADER + k + v;
        }
        seg.clear();
        self.segments[segment] = seg;
    }
}

/// The key's and the value's lengths in the header at `at`.
fn lengths(seg: &[u8], at: usize) -> (usize, usize) {
    let word = |i: usize| {
        let mut b = [0; 4];
        b.copy_from_slice(&seg[i..i + 4]);
        u32::from_le_bytes(b) as usize
    };
    (word(at), word(at + 4))
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
    }

    #[test]
    fn memory_stays_within_the_budget_and_recent_entries_stay() {
        let budget = 64 * 1024;
        let mut c = ValueCache::new(budget);
        for i in 0..10_000 {
            c.put(&format!("k{i}"), &[7; 100]);
            assert!(c.bytes() <= budget, "{} bytes at entry {i}", c.bytes());
        }
        // The buffers are allocated once, at their size: nothing grows past it.
        assert!(c.segments.iter().all(|s| s.capacity() == budget / SEGMENTS));
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
        // The map holds no more entries than the ring.
        assert!(c.map.len() <= budget / (HEADER + 6 + 100));
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

    /// Every key hashed alike: a key never answers with another's value, and forgetting a
    /// key never drops another's entry.
    #[test]
    fn keys_of_one_hash_never_answer_for_each_other() {
        let mut c = ValueCache::with_hasher(1 << 20, None);
        c.put("a", b"1");
        c.put("b", b"2");
        assert_eq!(
            c.get("a"),
            None,
            "b took the slot: a misses, never answers 2"
        );
        assert_eq!(c.get("b").as_deref(), Some(&b"2"[..]));
        c.forget("a");
        assert_eq!(c.get("b").as_deref(), Some(&b"2"[..]), "a's forget left b");
        c.forget("b");
        assert_eq!(c.get("b"), None);
    }
}
