//! A Bloom filter of a sorted run's keys ([`super::run`]): a lookup of a key the run does
//! not hold (every new key a write makes) is answered from memory, without reading a block
//! of the run's file.
//!
//! Blocked: each key sets [`PROBES`] bits of one 512-bit block (a cache line), so a lookup
//! touches one line. [`BITS_PER_KEY`] bits a key give about 1-2 % false positives (each one
//! costs what every lookup cost before: a block read). Never written to disk. A run's filter
//! is built as the run is written, sized for its entries: a key is hashed again at each merge
//! it passes through, a few times over its life (the runs' sizes grow geometrically,
//! [`super::index`]). With one file of every key, rebuilt at every merge, the filter cost
//! 12 % of `serve`'s CPU where the keys changed fastest (BENCHMARKS.md, "Session 25").

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};

/// Bits of filter per key the base is sized for.
const BITS_PER_KEY: u64 = 10;
/// Bits each key sets in its block.
const PROBES: u32 = 6;
/// Bits of a block's probe number (512 bits a block).
const PROBE_BITS: u32 = 9;

/// The filter: blocks of 8 words.
#[derive(Default)]
pub(super) struct Filter {
    blocks: Vec<[u64; 8]>,
}

/// The key's hash (SipHash with fixed keys: the same in every process, not that it matters,
/// the filter is never stored); taken once for a lookup that asks several runs' filters.
pub(super) fn hash(key: &str) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(key)
}

impl Filter {
    /// A filter sized for `keys` keys (more make it less selective, never wrong).
    pub(super) fn with_capacity(keys: u64) -> Self {
        let blocks = (keys.max(1) * BITS_PER_KEY).div_ceil(512);
        Filter {
            blocks: vec![[0; 8]; usize::try_from(blocks).unwrap_or(usize::MAX)],
        }
    }

    /// The block of hash `h`, and the bits it sets there (each a bit number 0..512).
    fn probes(&self, h: u64) -> (usize, impl Iterator<Item = usize> + use<>) {
        let block = (h % self.blocks.len() as u64) as usize;
        // The probes come from a remix of the hash, so they do not follow the block number.
        let g = (h ^ (h >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let bits = (0..PROBES).map(move |i| ((g >> (i * PROBE_BITS)) & 511) as usize);
        (block, bits)
    }

    /// Adds `key`.
    pub(super) fn insert(&mut self, key: &str) {
        if self.blocks.is_empty() {
            return;
        }
        let (block, bits) = self.probes(hash(key));
        let words = &mut self.blocks[block];
        for bit in bits {
            words[bit / 64] |= 1 << (bit % 64);
        }
    }

    /// Whether `key` may have been added: `false` means it was not.
    #[cfg(test)]
    pub(super) fn may_contain(&self, key: &str) -> bool {
        self.may_contain_hash(hash(key))
    }

    /// Whether a key whose [`hash`] is `h` may have been added: `false` means it was not.
    pub(super) fn may_contain_hash(&self, h: u64) -> bool {
        if self.blocks.is_empty() {
            return true;
        }
        let (block, mut bits) = self.probes(h);
        let words = &self.blocks[block];
        bits.all(|bit| words[bit / 64] & (1 << (bit % 64)) != 0)
    }

    /// Bytes of memory the filter takes.
    pub(super) fn bytes(&self) -> usize {
        self.blocks.len() * 64
    }
}

#[cfg(test)]
mod tests {
    use super::Filter;

    /// Every key added is found; of keys never added, few are taken for present (about 1-2 %
    /// at the filter's size; 4 % allowed here).
    #[test]
    fn a_filter_finds_every_key_added_and_few_others() {
        let n = 100_000;
        let mut f = Filter::with_capacity(n);
        for i in 0..n {
            f.insert(&format!("d:evt_{i:08}_sub_x"));
        }
        assert!((0..n).all(|i| f.may_contain(&format!("d:evt_{i:08}_sub_x"))));
        let false_positives = (n..2 * n)
            .filter(|i| f.may_contain(&format!("d:evt_{i:08}_sub_x")))
            .count();
        assert!(false_positives < 4_000, "{false_positives} of {n}");
        assert_eq!(f.bytes(), 125_056);
    }

    /// A filter sized for fewer keys than it gets still finds each of them (it only grows
    /// less selective), and an empty one holds nothing back.
    #[test]
    fn an_overfull_or_empty_filter_is_never_wrong() {
        let mut f = Filter::with_capacity(10);
        for i in 0..10_000 {
            f.insert(&format!("k{i}"));
        }
        assert!((0..10_000).all(|i| f.may_contain(&format!("k{i}"))));
        assert!(Filter::default().may_contain("anything"));
    }
}
