//! One small in-place sort for every list the component orders (pages of entries, candidate
//! deliveries, ids before a batch read).
//!
//! `slice::sort_unstable` is fast, and large: each element type gets its own copy of
//! pattern-defeating quicksort with its small-sort networks and heapsort fallback, about
//! 3.5 KiB of code apiece, 26 KiB for the component's six types (of a size-budgeted
//! component). The lists sorted here hold at most a few hundred items (a page, a tick's
//! candidates), where an O(n log n) heapsort of a few hundred bytes per type costs
//! nothing measurable.

/// Sorts `v` in place so that no element is `less` than the one before it. Not stable.
/// O(n) comparisons for a sorted input, O(n log n) for any other; `less` must be a strict
/// weak order.
pub fn sort_by<T>(v: &mut [T], mut less: impl FnMut(&T, &T) -> bool) {
    // Most lists arrive sorted (a page's entries, a second's candidates): one pass says so.
    if v.windows(2).all(|w| !less(&w[1], &w[0])) {
        return;
    }
    let n = v.len();
    // Moves the element at `root` down the max-heap held in `v[..end]`.
    let mut sift = |v: &mut [T], mut root: usize, end: usize| {
        loop {
            let mut child = 2 * root + 1;
            if child >= end {
                break;
            }
            if child + 1 < end && less(&v[child], &v[child + 1]) {
                child += 1;
            }
            if !less(&v[root], &v[child]) {
                break;
            }
            v.swap(root, child);
            root = child;
        }
    };
    for root in (0..n / 2).rev() {
        sift(v, root, n);
    }
    for end in (1..n).rev() {
        v.swap(0, end);
        sift(v, 0, end);
    }
}

/// Sorts `v` in place by its natural order. Not stable.
pub fn sort<T: Ord>(v: &mut [T]) {
    sort_by(v, |a, b| a < b);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length up to 40, each over many orders (sorted, reversed, with duplicates,
    /// shuffled by a fixed generator): the result is the standard library's sort.
    #[test]
    fn sorts_like_the_standard_library() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for n in 0..=40usize {
            for round in 0..50 {
                let mut v: Vec<u64> = match round {
                    0 => (0..n as u64).collect(),
                    1 => (0..n as u64).rev().collect(),
                    2 => vec![7; n],
                    _ => (0..n).map(|_| next() % (1 + n as u64 / 2)).collect(),
                };
                let mut want = v.clone();
                want.sort_unstable();
                sort(&mut v);
                assert_eq!(v, want, "n = {n}, round {round}");
            }
        }
        let mut pairs = vec![(3, "c"), (1, "a"), (2, "b"), (1, "z")];
        sort_by(&mut pairs, |a, b| a.0 < b.0);
        assert_eq!(pairs.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 1, 2, 3]);
    }
}
