//! The key index against a model (a sorted map of the live keys), through merges that fold
//! some runs or all of them.

use super::*;
use std::collections::BTreeMap;

fn slot(at: u64) -> Slot {
    Slot {
        at,
        len: at % 7 + 1,
    }
}

/// A small deterministic generator (xorshift), so a failing case replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Merges the index's recent changes as the store does (`all`: into every run).
fn merge_now(dir: &Path, index: &mut KeyIndex, all: bool) -> u64 {
    let frozen = index.freeze().expect("not frozen");
    let merged = merge(dir, &frozen, all, None).expect("merge");
    let written = merged.run.as_ref().map_or(0, |r| r.entries());
    drop(index.install(merged));
    written
}

/// Every live key and its place, as the index reads them one by one and walks them.
fn check(index: &KeyIndex, model: &BTreeMap<String, Slot>, keys: u64) {
    for k in 0..keys {
        let key = format!("k{k:04}");
        assert_eq!(
            index.get(&key).expect("get"),
            model.get(&key).copied(),
            "{key}"
        );
    }
    let all: Vec<String> = model.keys().cloned().collect();
    assert_eq!(index.keys_after(None, usize::MAX).expect("walk"), all);
    // From a key listed and from one that is not, with a limit.
    for after in ["k0100", "k0100x"] {
        let want: Vec<String> = model
            .range::<str, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
            .take(7)
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(index.keys_after(Some(after), 7).expect("walk"), want);
    }
}

/// Sets and deletes at random over a few hundred keys, merged at random points (into some
/// runs or all of them): every key reads what the model holds, and a walk lists the model's
/// keys in order, at every merge. Deleted keys stay hidden while an older run still lists
/// them, and a merge of every run leaves none of them behind.
#[test]
fn the_index_reads_what_a_model_holds_through_merges_of_some_runs_or_all() {
    let dir = edgehook_testkit::temp_dir("filestore-runs-model");
    let keys = 600;
    for seed in 1..=4u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut index = KeyIndex::new();
        let mut model = BTreeMap::new();
        let mut at = 0;
        for step in 0..6_000 {
            let key = format!("k{:04}", rng.below(keys));
            if rng.below(3) == 0 {
                if model.remove(&key).is_some() {
                    index.remove(&key);
                }
            } else {
                at += 1;
                let old = index.get(&key).expect("get");
                assert_eq!(old, model.insert(key.clone(), slot(at)), "{key}");
                index.set(&key, slot(at), old);
            }
            if rng.below(40) == 0 {
                merge_now(&dir, &mut index, rng.below(8) == 0);
                check(&index, &model, keys);
            }
            assert_eq!(index.len(), model.len() as u64, "step {step}");
        }
        check(&index, &model, keys);
        merge_now(&dir, &mut index, true);
        assert_eq!(index.runs.len(), 1);
        assert_eq!(
            index.runs[0].entries(),
            model.len() as u64,
            "no deleted key kept"
        );
        check(&index, &model, keys);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A key deleted while an older run lists it is kept in the new run as deleted (it hides the
/// older entry), and dropped once the merge reaches the oldest run.
#[test]
fn a_deleted_key_is_kept_as_such_until_a_merge_reaches_the_oldest_run() {
    let dir = edgehook_testkit::temp_dir("filestore-runs-gone");
    let mut index = KeyIndex::new();
    for i in 0..1_000 {
        index.set(&format!("k{i:04}"), slot(i), None);
    }
    merge_now(&dir, &mut index, false);
    index.remove("k0007");
    index.set("new", slot(5_000), None);
    // Two changes against a run of 1,000: the merge writes a run of its own.
    assert_eq!(merge_now(&dir, &mut index, false), 2);
    assert_eq!(index.runs.len(), 2);
    assert_eq!(index.get("k0007").expect("get"), None);
    assert_eq!(index.get("k0008").expect("get"), Some(slot(8)));
    assert_eq!(index.runs[0].entries(), 2, "the deletion kept as an entry");
    assert_eq!(
        index.keys_after(Some("k0006"), 2).expect("walk"),
        ["k0008", "k0009"]
    );
    assert_eq!(merge_now(&dir, &mut index, true), 1_000);
    assert_eq!(index.runs.len(), 1);
    assert_eq!(index.get("k0007").expect("get"), None);
    assert_eq!(index.len(), 1_000);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The runs' sizes grow geometrically: after 256 merges of 100 new keys each there are at
/// most 9 runs (log2(256) + 1), and the merges wrote each key about log2 times, not the
/// whole index each time (a merge into one base wrote 3.3 million entries for these
/// 25,600 keys; these merges write under 10 % of that).
#[test]
fn a_merge_rewrites_a_few_runs_not_the_whole_index() {
    let dir = edgehook_testkit::temp_dir("filestore-runs-levels");
    let mut index = KeyIndex::new();
    let (merges, each) = (256u64, 100u64);
    let mut written = 0;
    let mut most_runs = 0;
    for m in 0..merges {
        for i in 0..each {
            index.set(&format!("k{m:03}-{i:03}"), slot(m * each + i), None);
        }
        written += merge_now(&dir, &mut index, false);
        most_runs = most_runs.max(index.runs.len());
    }
    let whole_index_each_time = each * merges * (merges + 1) / 2;
    assert!(most_runs <= 9, "{most_runs} runs");
    assert!(
        written <= each * merges * 9,
        "{written} entries written, {whole_index_each_time} with one base"
    );
    assert!(written * 10 < whole_index_each_time);
    assert_eq!(index.get("k000-000").expect("get"), Some(slot(0)));
    assert_eq!(index.get("k255-099").expect("get"), Some(slot(25_599)));
    assert_eq!(index.len(), each * merges);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A paced merge rests after each chunk three times as long as the chunk took, timed from
/// the end of the rest before; a merge smaller than a chunk never rests.
#[test]
fn a_paced_merge_rests_three_times_as_long_as_each_chunk_took() {
    let t0 = std::time::Instant::now();
    let ms = std::time::Duration::from_millis;
    let mut pace = Pace::new(t0);
    for _ in 1..Pace::CHUNK {
        assert_eq!(
            pace.entry(|| unreachable!("read only at a chunk's end")),
            None
        );
    }
    assert_eq!(pace.entry(|| t0 + ms(10)), Some(ms(30)));
    pace.rested(t0 + ms(40));
    for _ in 1..Pace::CHUNK {
        assert_eq!(pace.entry(|| t0), None);
    }
    assert_eq!(pace.entry(|| t0 + ms(45)), Some(ms(15)));

    // Through a merge: 40,000 entries rest twice; 100 entries paced, not at all.
    let dir = edgehook_testkit::temp_dir("filestore-runs-pace");
    let mut index = KeyIndex::new();
    assert_eq!(paced_merge(&dir, &mut index, "k", 40_000), 2);
    assert_eq!(index.runs[0].entries(), 40_000);
    assert_eq!(paced_merge(&dir, &mut index, "n", 100), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sets `keys` keys named `prefix` and a number, merges them at a pace; how often it rested.
fn paced_merge(dir: &Path, index: &mut KeyIndex, prefix: &str, keys: u64) -> usize {
    for i in 0..keys {
        index.set(&format!("{prefix}{i:05}"), slot(i), None);
    }
    let frozen = index.freeze().expect("not frozen");
    let mut rests = 0;
    let mut pace = Pace::new(std::time::Instant::now());
    let merged = merge(dir, &frozen, false, Some((&mut pace, &mut |_| rests += 1))).expect("merge");
    drop(index.install(merged));
    rests
}
