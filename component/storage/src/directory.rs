//! The two directory records: the due queue's (each second with queued deliveries, and the
//! watermark a tick has seen through) and retention's (each day with events; no value).
//!
//! Every publish asks one of them "is my second (my day) listed?", and under steady load
//! the due directory lists every second of the last minute and more (a second stays until
//! its grace period is over; retries add seconds a minute and five minutes ahead). So the
//! record is binary and sorted, and [`contains`] answers with a binary search over the bytes:
//! the same cost whether 1 or 1,000 seconds are listed.
//!
//! Layout: [`DIRECTORY_V1`], the entry count (`u32`), then each entry as two `u64`s (key,
//! value), keys strictly ascending (see [`crate::codec`]).

use crate::codec::{Reader, Writer};
use crate::kv::KvError;

/// Key to value (second to watermark; day to how far its log was purged), in ascending key
/// order, each key once: the map the record holds, as a sorted `Vec` searched by bisection
/// (a `BTreeMap` costs the size-budgeted component several KiB of code per key-value
/// type, and a directory lists at most a few hundred keys). Its methods are `BTreeMap`'s.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Directory(Vec<(u64, u64)>);

impl Directory {
    /// An empty directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many keys it lists.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it lists no key.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Where `key` is (`Ok`), or would be inserted to keep the order (`Err`).
    fn find(&self, key: u64) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.cmp(&key))
    }

    /// Whether `key` is listed.
    pub fn contains_key(&self, key: &u64) -> bool {
        self.find(*key).is_ok()
    }

    /// The value of `key`, if listed.
    pub fn get(&self, key: &u64) -> Option<&u64> {
        self.find(*key).ok().map(|i| &self.0[i].1)
    }

    /// The value of `key`, if listed, to change.
    pub fn get_mut(&mut self, key: &u64) -> Option<&mut u64> {
        self.find(*key).ok().map(|i| &mut self.0[i].1)
    }

    /// Lists `key` with `value`; returns its value before, if it was listed.
    pub fn insert(&mut self, key: u64, value: u64) -> Option<u64> {
        match self.find(key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    /// Lists `key` with `value` unless it is listed already (`entry(key).or_insert(value)`).
    pub fn insert_if_absent(&mut self, key: u64, value: u64) {
        if let Err(i) = self.find(key) {
            self.0.insert(i, (key, value));
        }
    }

    /// Drops `key`; returns its value, if it was listed.
    pub fn remove(&mut self, key: &u64) -> Option<u64> {
        self.find(*key).ok().map(|i| self.0.remove(i).1)
    }

    /// Every (key, value), in ascending key order.
    pub fn iter(&self) -> std::slice::Iter<'_, (u64, u64)> {
        self.0.iter()
    }

    /// Every key, ascending.
    pub fn keys(&self) -> impl Iterator<Item = &u64> {
        self.0.iter().map(|(k, _)| k)
    }

    /// Every key, ascending, by value.
    pub fn into_keys(self) -> impl Iterator<Item = u64> {
        self.0.into_iter().map(|(k, _)| k)
    }
}

impl IntoIterator for Directory {
    type Item = (u64, u64);
    type IntoIter = std::vec::IntoIter<(u64, u64)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Directory {
    type Item = &'a (u64, u64);
    type IntoIter = std::slice::Iter<'a, (u64, u64)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// As a `BTreeMap`'s: a key given twice keeps its last value.
impl Extend<(u64, u64)> for Directory {
    fn extend<I: IntoIterator<Item = (u64, u64)>>(&mut self, entries: I) {
        for (key, value) in entries {
            self.insert(key, value);
        }
    }
}

impl FromIterator<(u64, u64)> for Directory {
    fn from_iter<I: IntoIterator<Item = (u64, u64)>>(entries: I) -> Self {
        let mut dir = Self::new();
        dir.extend(entries);
        dir
    }
}

/// As a `BTreeMap`'s: `{key: value, ...}`.
impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

/// The first byte of a directory, its format's version: no other record of the store starts
/// with it (pages are 0xE1).
pub const DIRECTORY_V1: u8 = 0xC1;

/// Bytes of one entry.
const ENTRY: usize = 16;
/// Bytes before the first entry: the version and the count.
const HEAD: usize = 5;

fn corrupt() -> KvError {
    KvError::Corrupt("directory record".into())
}

/// The record of `dir`.
pub fn encode(dir: &Directory) -> Vec<u8> {
    let mut w = Writer::new(DIRECTORY_V1, HEAD + ENTRY * dir.len());
    // A directory lists seconds and days: far fewer than 4 billion.
    w.u32(dir.len() as u32);
    for (key, value) in dir {
        w.u64(*key).u64(*value);
    }
    w.finish()
}

/// Reads a directory record ([`encode`]). Damage is an error.
pub fn decode(bytes: &[u8]) -> Result<Directory, KvError> {
    decode_binary(bytes).ok_or_else(corrupt)
}

fn decode_binary(bytes: &[u8]) -> Option<Directory> {
    let mut r = Reader::new(bytes, DIRECTORY_V1)?;
    let count = r.u32()?;
    let mut dir = Directory::new();
    let mut last = None;
    for _ in 0..count {
        let (key, value) = (r.u64()?, r.u64()?);
        if last.is_some_and(|l| l >= key) {
            return None; // not strictly ascending: damaged
        }
        last = Some(key);
        dir.0.push((key, value)); // ascending: stays sorted
    }
    r.end()?;
    Some(dir)
}

/// Whether `key` is listed in the record `bytes`, searched where it lies: nothing decoded
/// but the keys the search visits.
pub fn contains(bytes: &[u8], key: u64) -> Result<bool, KvError> {
    if bytes.first() != Some(&DIRECTORY_V1) {
        return Err(corrupt());
    }
    let count = bytes
        .get(1..HEAD)
        .and_then(|c| c.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(corrupt)? as usize;
    let entries = bytes.get(HEAD..).ok_or_else(corrupt)?;
    if count.checked_mul(ENTRY) != Some(entries.len()) {
        return Err(corrupt());
    }
    let key_at = |i: usize| {
        let at = i * ENTRY;
        entries
            .get(at..at + 8)
            .and_then(|k| k.try_into().ok())
            .map(u64::from_le_bytes)
    };
    let (mut lo, mut hi) = (0, count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match key_at(mid).ok_or_else(corrupt)?.cmp(&key) {
            std::cmp::Ordering::Equal => return Ok(true),
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Directory {
        [
            (1_767_225_600, 0),
            (1_767_225_601, 7),
            (1_767_225_660, u64::MAX),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn a_directory_reads_back_and_every_key_is_found_by_search() {
        let dir = sample();
        let bytes = encode(&dir);
        assert_eq!(bytes.len(), HEAD + 3 * ENTRY);
        assert_eq!(decode(&bytes).expect("decodes"), dir);
        for key in dir.keys() {
            assert_eq!(contains(&bytes, *key), Ok(true), "{key}");
        }
        for absent in [0, 1_767_225_599, 1_767_225_602, 1_767_225_659, u64::MAX] {
            assert_eq!(contains(&bytes, absent), Ok(false), "{absent}");
        }
        let empty = encode(&Directory::new());
        assert_eq!(decode(&empty).expect("empty"), Directory::new());
        assert_eq!(contains(&empty, 5), Ok(false));
    }

    #[test]
    fn the_search_agrees_with_the_map_at_every_size() {
        for n in 0..40u64 {
            let dir: Directory = (0..n).map(|i| (10 + 3 * i, i)).collect();
            let bytes = encode(&dir);
            for key in 0..(20 + 3 * n) {
                assert_eq!(
                    contains(&bytes, key),
                    Ok(dir.contains_key(&key)),
                    "{n} {key}"
                );
            }
        }
    }

    /// Any sequence of changes leaves it as it leaves a `BTreeMap`: the same answers, the
    /// same entries in the same order, the same record and the same `Debug` text.
    #[test]
    fn a_directory_behaves_as_a_btree_map() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut dir, mut map) = (Directory::new(), std::collections::BTreeMap::new());
        for _ in 0..2_000 {
            let (key, value) = (next() % 64, next() % 5);
            match next() % 5 {
                0 => assert_eq!(dir.insert(key, value), map.insert(key, value)),
                1 => {
                    dir.insert_if_absent(key, value);
                    map.entry(key).or_insert(value);
                }
                2 => assert_eq!(dir.remove(&key), map.remove(&key)),
                3 => {
                    if let (Some(d), Some(m)) = (dir.get_mut(&key), map.get_mut(&key)) {
                        *d += value;
                        *m += value;
                    }
                }
                _ => {
                    dir.extend([(key, value), (key + 1, value), (key, value + 1)]);
                    map.extend([(key, value), (key + 1, value), (key, value + 1)]);
                }
            }
            for k in 0..66 {
                assert_eq!(dir.get(&k), map.get(&k), "{k}");
                assert_eq!(dir.contains_key(&k), map.contains_key(&k), "{k}");
            }
            assert_eq!(dir.len(), map.len());
            assert!(dir.iter().map(|(k, v)| (k, v)).eq(map.iter()));
            assert!(dir.keys().eq(map.keys()));
            assert_eq!(format!("{dir:?}"), format!("{map:?}"));
            assert_eq!(decode(&encode(&dir)).expect("decodes"), dir);
        }
    }

    /// Only the binary format is read: the JSON forms no release wrote are damage.
    #[test]
    fn a_directory_in_another_format_is_not_read() {
        for other in [&br#"{"1767225600":0}"#[..], b"[20454,20455]"] {
            assert!(decode(other).is_err());
            assert!(contains(other, 20454).is_err());
        }
    }

    #[test]
    fn a_damaged_directory_is_an_error_never_a_guess() {
        let bytes = encode(&sample());
        crate::codec::assert_only_whole_records_read(&bytes, |b| decode(b).is_ok());
        for cut in 0..bytes.len() {
            assert!(
                contains(&bytes[..cut], 1_767_225_601).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(contains(&longer, 1_767_225_601).is_err());
        // Keys out of order.
        let mut w = Writer::new(DIRECTORY_V1, 0);
        w.u32(2).u64(9).u64(0).u64(3).u64(0);
        assert!(decode(&w.finish()).is_err());
        assert!(decode(b"{\"x\":1}").is_err());
        assert!(decode(b"").is_err());
    }
}
