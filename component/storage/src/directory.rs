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
use std::collections::BTreeMap;

/// Key to value (second to watermark; day to 0).
pub type Directory = BTreeMap<u64, u64>;

/// The first byte of a directory, its format's version: no other record of the store starts
/// with it (pages are 0xE1).
pub const DIRECTORY_V1: u8 = 0xC1;

/// Bytes of one entry.
const ENTRY: usize = 16;
/// Bytes before the first entry: the version and the count.
const HEAD: usize = 5;

fn corrupt() -> KvError {
    KvError("corrupt directory record".into())
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
        dir.insert(key, value);
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
