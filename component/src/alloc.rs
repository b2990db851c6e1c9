//! The component's allocator: the standard library's (dlmalloc on `wasm32`) behind a small
//! cache of freed blocks per size class.
//!
//! A request or a delivery allocates and frees thousands of small blocks (keys, ids, header
//! names and values, records being encoded), and dlmalloc's `malloc` and `free` took about
//! 30 % of the guest's own time under `serve`'s delivery load (a profile).
//! Small blocks (up to [`LARGEST`] bytes, alignment up to [`ALIGN`], dlmalloc's own on
//! `wasm32`, so a block is made by its plain `malloc`) are rounded up to a multiple of
//! [`STEP`]; a freed one is kept on its class's list and handed out again by the next
//! allocation of that class, a push and a pop instead of dlmalloc's bins. Each class keeps at
//! most [`KEPT`] blocks (beyond that a freed block goes back to dlmalloc), so the cache holds
//! at most 136 KiB of memory that dlmalloc could reuse for other sizes. Larger blocks, and
//! blocks with a larger alignment, go to dlmalloc directly.
//!
//! The component is single-threaded (`wasm32-wasip2` has no threads): the lists need no
//! lock, and the cell that holds them is only touched by one call at a time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;

/// The size classes' step.
const STEP: usize = 16;
/// The largest alignment a cached block serves: what dlmalloc's `malloc` gives on `wasm32`
/// (a larger one takes its slower `memalign`).
const ALIGN: usize = 8;
/// The largest block the cache serves.
const LARGEST: usize = 256;
/// Size classes: `STEP`, `2 * STEP`, ... `LARGEST`.
const CLASSES: usize = LARGEST / STEP;
/// Freed blocks a class keeps at most.
const KEPT: u32 = 64;

/// Each class's list of freed blocks: the first block, and how many.
struct Lists {
    head: [*mut u8; CLASSES],
    len: [u32; CLASSES],
}

/// The global allocator ([`Cached`]'s lists, behind a cell: see the module doc).
pub struct Cached(UnsafeCell<Lists>);

// SAFETY: wasm32-wasip2 has one thread; nothing runs while an allocation runs. (Natively,
// where the unit tests run, a `Cached` is never shared.)
#[cfg(target_arch = "wasm32")]
unsafe impl Sync for Cached {}

#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: Cached = Cached::new();

impl Cached {
    /// An allocator with empty lists.
    const fn new() -> Self {
        Cached(UnsafeCell::new(Lists {
            head: [ptr::null_mut(); CLASSES],
            len: [0; CLASSES],
        }))
    }
}

/// The class of a small layout, and the layout its blocks are made with.
fn class(layout: Layout) -> Option<(usize, Layout)> {
    if layout.size() == 0 || layout.size() > LARGEST || layout.align() > ALIGN {
        return None;
    }
    let class = (layout.size() - 1) / STEP;
    let block = Layout::from_size_align((class + 1) * STEP, ALIGN).ok()?;
    Some((class, block))
}

// SAFETY: blocks come from `System` with the class's layout, and a block on a list is not
// in use (it was freed by its owner): a list's link lives in the block's first word.
unsafe impl GlobalAlloc for Cached {
    // Out of line, as dlmalloc's are: inlined at every allocation site, the lists' code
    // added about 100 KiB to the component (out of line: 25 KiB).
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some((class, block)) = class(layout) else {
            // SAFETY: the caller's layout, as given.
            return unsafe { System.alloc(layout) };
        };
        // SAFETY: one thread (see `Sync`); no other reference to the lists is live.
        let lists = unsafe { &mut *self.0.get() };
        let head = lists.head[class];
        if head.is_null() {
            // SAFETY: a non-zero size.
            return unsafe { System.alloc(block) };
        }
        // SAFETY: `head` is a freed block of this class; its first word is the next one.
        lists.head[class] = unsafe { head.cast::<*mut u8>().read() };
        lists.len[class] -= 1;
        head
    }

    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some((class, block)) = class(layout) else {
            // SAFETY: allocated by `System` with this layout.
            return unsafe { System.dealloc(ptr, layout) };
        };
        // SAFETY: one thread (see `Sync`).
        let lists = unsafe { &mut *self.0.get() };
        if lists.len[class] >= KEPT {
            // SAFETY: every block of this class was made with `block`.
            return unsafe { System.dealloc(ptr, block) };
        }
        // SAFETY: the block holds a pointer (at least `STEP` bytes, aligned to `ALIGN`) and is
        // no longer in use.
        unsafe { ptr.cast::<*mut u8>().write(lists.head[class]) };
        lists.head[class] = ptr;
        lists.len[class] += 1;
    }

    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new) = Layout::from_size_align(new_size, layout.align()) else {
            return ptr::null_mut();
        };
        match (class(layout), class(new)) {
            // The block already holds the new size.
            (Some((old, _)), Some((now, _))) if old == now => ptr,
            // Both large: dlmalloc can grow the block in place.
            // SAFETY: allocated by `System` with `layout`.
            (None, None) => unsafe { System.realloc(ptr, layout, new_size) },
            _ => {
                // SAFETY: a valid layout; the old block is copied up to the smaller size.
                let moved = unsafe { self.alloc(new) };
                if !moved.is_null() {
                    // SAFETY: both blocks hold at least the smaller size, and differ.
                    unsafe {
                        ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).expect("layout")
    }

    #[test]
    fn a_freed_small_block_is_handed_out_again_to_its_class_only() {
        let a = Cached::new();
        unsafe {
            let p = a.alloc(layout(20));
            assert_eq!(p as usize % ALIGN, 0);
            // A larger alignment is not cached.
            let wide = Layout::from_size_align(32, 2 * ALIGN).expect("layout");
            let w = a.alloc(wide);
            assert_eq!(w as usize % (2 * ALIGN), 0);
            a.dealloc(w, wide);
            assert_eq!((*a.0.get()).len.iter().sum::<u32>(), 0);
            a.dealloc(p, layout(20));
            // 17..=32 bytes are one class: the same block comes back.
            let q = a.alloc(layout(32));
            assert_eq!(q, p);
            a.dealloc(q, layout(32));
            // Another class does not take it.
            let r = a.alloc(layout(48));
            assert_ne!(r, p);
            a.dealloc(r, layout(48));
            // A large block is not cached: it goes back to the system allocator.
            let big = a.alloc(layout(LARGEST + 1));
            a.dealloc(big, layout(LARGEST + 1));
            assert_eq!((*a.0.get()).len[1], 1);
            assert_eq!((*a.0.get()).len[2], 1);
            assert_eq!((*a.0.get()).len.iter().sum::<u32>(), 2);
        }
    }

    #[test]
    fn a_class_keeps_at_most_kept_blocks() {
        let a = Cached::new();
        unsafe {
            let blocks: Vec<*mut u8> = (0..KEPT + 10).map(|_| a.alloc(layout(64))).collect();
            for p in &blocks {
                a.dealloc(*p, layout(64));
            }
            assert_eq!((*a.0.get()).len[3], KEPT);
            // Empty the list again, so the test frees what it holds.
            for _ in 0..KEPT {
                let p = a.alloc(layout(64));
                System.dealloc(p, Layout::from_size_align(64, ALIGN).expect("layout"));
            }
            assert!((*a.0.get()).head[3].is_null());
        }
    }

    #[test]
    fn realloc_keeps_the_bytes_and_the_block_within_its_class() {
        let a = Cached::new();
        unsafe {
            let p = a.alloc(layout(10));
            for i in 0..10 {
                p.add(i).write(i as u8);
            }
            // Within the class (up to 16 bytes): the same block.
            assert_eq!(a.realloc(p, layout(10), 16), p);
            // Into a larger class, then past the cache: the bytes move with it.
            let q = a.realloc(p, layout(16), 100);
            let r = a.realloc(q, layout(100), 4096);
            let s = a.realloc(r, layout(4096), 8192);
            for i in 0..10 {
                assert_eq!(s.add(i).read(), i as u8);
            }
            a.dealloc(s, layout(8192));
            // The small blocks it left are cached for reuse.
            assert_eq!((*a.0.get()).len[0], 1);
            assert_eq!((*a.0.get()).len[6], 1);
        }
    }
}
