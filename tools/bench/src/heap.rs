//! The bench's allocator: mimalloc (as the `edgehook` binary runs), with an account of the
//! live heap by size class that the `store` section switches on. It tells apart what
//! the program holds (live blocks, by size) from what the allocator keeps resident around
//! them, which RSS alone mixes.
//!
//! Off, it costs one relaxed load per allocation. On, two relaxed atomic adds per
//! allocation and per free. Blocks freed after it was switched on but allocated before
//! count negative, so the account is read as a difference between two points
//! ([`Snapshot::since`]), both taken while it is on.
#![allow(
    unsafe_code,
    reason = "a global allocator is an unsafe trait; every call goes to mimalloc unchanged"
)]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// Size classes: powers of two, class `i` holding blocks of `2^(i-1) + 1 ..= 2^i` bytes.
const CLASSES: usize = 40;

/// mimalloc with the account.
pub struct Counting {
    on: AtomicBool,
    blocks: [AtomicI64; CLASSES],
    bytes: [AtomicI64; CLASSES],
}

#[allow(
    clippy::declare_interior_mutable_const,
    reason = "only an array initializer: each element is a new atomic"
)]
const ZERO: AtomicI64 = AtomicI64::new(0);

impl Counting {
    /// The allocator, its account off.
    pub const fn new() -> Self {
        Self {
            on: AtomicBool::new(false),
            blocks: [ZERO; CLASSES],
            bytes: [ZERO; CLASSES],
        }
    }

    /// Starts the account (it is never switched off again: frees must keep counting).
    pub fn start(&self) {
        self.on.store(true, Ordering::Relaxed);
    }

    /// The account now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            blocks: std::array::from_fn(|i| self.blocks[i].load(Ordering::Relaxed)),
            bytes: std::array::from_fn(|i| self.bytes[i].load(Ordering::Relaxed)),
        }
    }

    fn count(&self, size: usize, sign: i64) {
        if self.on.load(Ordering::Relaxed) {
            let class = (usize::BITS - size.saturating_sub(1).leading_zeros()) as usize;
            let class = class.min(CLASSES - 1);
            self.blocks[class].fetch_add(sign, Ordering::Relaxed);
            self.bytes[class].fetch_add(sign * size as i64, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call is passed to mimalloc unchanged; the account only reads sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.count(layout.size(), 1);
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.count(layout.size(), 1);
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.count(layout.size(), -1);
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.count(layout.size(), -1);
        self.count(new_size, 1);
        // SAFETY: the caller's contract, passed on.
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
    }
}

/// The live heap by size class at one point.
#[derive(Clone)]
pub struct Snapshot {
    blocks: [i64; CLASSES],
    bytes: [i64; CLASSES],
}

impl Snapshot {
    /// Live bytes added since `earlier` (negative: freed).
    pub fn bytes_since(&self, earlier: &Snapshot) -> i64 {
        self.bytes.iter().sum::<i64>() - earlier.bytes.iter().sum::<i64>()
    }

    /// The size classes whose live bytes changed by at least `min` since `earlier`, largest
    /// change first: (the class's largest block size, blocks added, bytes added).
    pub fn since(&self, earlier: &Snapshot, min: i64) -> Vec<(u64, i64, i64)> {
        let mut out: Vec<(u64, i64, i64)> = (0..CLASSES)
            .map(|i| {
                (
                    1u64 << i,
                    self.blocks[i] - earlier.blocks[i],
                    self.bytes[i] - earlier.bytes[i],
                )
            })
            .filter(|(_, _, b)| b.abs() >= min)
            .collect();
        out.sort_by_key(|(_, _, b)| -b.abs());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_follows_allocations_by_class() {
        let heap = Counting::new();
        heap.start();
        let before = heap.snapshot();
        heap.count(48, 1);
        heap.count(48, 1);
        heap.count(4096, 1);
        heap.count(48, -1);
        let after = heap.snapshot();
        assert_eq!(after.bytes_since(&before), 48 + 4096);
        assert_eq!(after.since(&before, 1), vec![(4096, 1, 4096), (64, 1, 48)]);
        // Off, nothing is counted.
        let off = Counting::new();
        off.count(100, 1);
        assert_eq!(off.snapshot().bytes_since(&before), 0);
    }
}
