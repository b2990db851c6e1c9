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

/// For each id of `v`, whether it is the first of its value in `v`: what a `BTreeSet` of
/// the ids seen so far would answer, id by id, without one (a tree costs several KiB of
/// code per item type; this is one function, for ids only). Sorts the places, not the ids,
/// so `v` keeps its order; O(n log n), as the tree was, for the thousands of ids of a large
/// fan-out or a tick.
pub fn firsts(v: &[&str]) -> Vec<bool> {
    let mut places: Vec<usize> = (0..v.len()).collect();
    // By value, then by place: the first place of each value leads its run.
    sort_by(&mut places, |a, b| match v[*a].cmp(v[*b]) {
        std::cmp::Ordering::Equal => a < b,
        order => order.is_lt(),
    });
    let mut first = vec![false; v.len()];
    for (n, p) in places.iter().enumerate() {
        first[*p] = n == 0 || v[places[n - 1]] != v[*p];
    }
    first
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

    /// Any list: the same answers, item by item, as a `BTreeSet` of the items seen so far.
    #[test]
    fn firsts_are_what_a_btree_set_says() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for range in [1u64, 2, 5, 40, 1000] {
            for n in [0usize, 1, 2, 3, 17, 300] {
                let v: Vec<String> = (0..n)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        format!("sub_{}", state % range)
                    })
                    .collect();
                let v: Vec<&str> = v.iter().map(String::as_str).collect();
                let mut seen = std::collections::BTreeSet::new();
                let want: Vec<bool> = v.iter().map(|x| seen.insert(*x)).collect();
                assert_eq!(firsts(&v), want, "{v:?}");
            }
        }
        let ids = ["b", "a", "b", "c", "a"];
        assert_eq!(firsts(&ids), [true, true, false, true, false]);
    }
}
