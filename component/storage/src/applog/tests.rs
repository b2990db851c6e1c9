//! The append log's own tests.

use super::*;
use crate::kv::MemoryKv;

#[test]
fn append_and_read_across_pages() {
    let kv = MemoryKv::new();
    let log = AppendLog::new(Key::from_stored("t"));
    let items: Vec<String> = (0..300).map(|i| format!("x{i}")).collect();
    let seqs = log.append(&kv, &items[..200]).expect("append");
    assert_eq!(seqs.first(), Some(&1));
    log.append(&kv, &items[200..]).expect("append");
    let all: Vec<Entry<String>> = log.read(&kv, 0, 1000).expect("read");
    assert_eq!(all.len(), 300);
    assert!(
        all.iter()
            .enumerate()
            .all(|(i, e)| e.seq == i as u64 + 1 && e.item == items[i])
    );
    let some: Vec<Entry<String>> = log.read(&kv, 127, 3).expect("read");
    assert_eq!(
        some.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [128, 129, 130]
    );
    log.delete_all(&kv).expect("delete");
    assert!(kv.dump().is_empty());
}

/// A read is the counter (through `increment(key, 0)`) and one batch of the pages the
/// limit may need: two store operations whatever the list's length.
#[test]
fn a_read_is_the_counter_and_one_batch_of_pages() {
    let kv = MemoryKv::new();
    let log = AppendLog::new(Key::from_stored("t"));
    let cost = |after: u64, limit: usize| {
        let before = kv.ops();
        let entries = log.read(&kv, after, limit).expect("read");
        (kv.ops() - before, entries.len())
    };
    assert_eq!(
        cost(0, usize::MAX),
        (1, 0),
        "an empty list: the counter alone"
    );
    let items: Vec<String> = (0..600).map(|i| format!("x{i}")).collect();
    log.append(&kv, &items[..100]).expect("append");
    assert_eq!(cost(0, usize::MAX), (2, 100));
    assert_eq!(
        cost(60, 51),
        (2, 40),
        "a page from the middle of the first page"
    );
    assert_eq!(cost(100, 10), (1, 0), "nothing after the last entry");
    log.append(&kv, &items[100..]).expect("append");
    assert_eq!(cost(120, 5), (2, 5));
    assert_eq!(cost(120, 51), (2, 51), "across a page boundary");
    assert_eq!(cost(0, 300), (2, 300));
    assert_eq!(cost(0, 500), (2, 500));
    assert_eq!(cost(0, usize::MAX), (2, 600), "five pages at once");
    assert_eq!(cost(0, 0), (0, 0));
    // Removed entries make pages short: the read goes on with one more batch.
    for seq in 1..=128 {
        log.remove(&kv, seq).expect("remove");
    }
    assert_eq!(
        cost(0, 10),
        (2, 10),
        "page 0 emptied: page 1 came in the batch"
    );
    for seq in 129..=256 {
        log.remove(&kv, seq).expect("remove");
    }
    assert_eq!(
        cost(0, 10),
        (3, 10),
        "pages 0 and 1 emptied: page 2 read next"
    );
}

#[test]
fn remove_rewrites_one_page_and_keeps_the_numbering() {
    let kv = MemoryKv::new();
    let log = AppendLog::new(Key::from_stored("t"));
    let items: Vec<String> = (0..300).map(|i| format!("x{i}")).collect();
    log.append(&kv, &items).expect("append");
    let untouched = kv.get("t:p0").expect("get");
    log.remove(&kv, 200).expect("remove");
    log.remove(&kv, 200).expect("removing twice is fine");
    log.remove(&kv, 5000)
        .expect("removing a number never handed out is fine");
    assert_eq!(
        kv.get("t:p0").expect("get"),
        untouched,
        "other pages untouched"
    );
    let all: Vec<Entry<String>> = log.read(&kv, 0, 1000).expect("read");
    assert_eq!(all.len(), 299);
    assert!(all.iter().all(|e| e.seq != 200));
    let next = log.append(&kv, &["new".to_owned()]).expect("append");
    assert_eq!(next, [301], "numbers are never reused");
}

#[test]
fn a_page_is_extended_without_decoding_it_and_modify_rewrites_one_entry() {
    let kv = MemoryKv::new();
    let log = AppendLog::with_page_size(Key::from_stored("t"), 4);
    log.append(&kv, &["a", "b"]).expect("append");
    let before = kv.get("t:p0").expect("get").expect("page");
    log.append(&kv, &["c"]).expect("append");
    let after = kv.get("t:p0").expect("get").expect("page");
    assert_eq!(
        after[..before.len()],
        before[..],
        "the old bytes are kept as they were"
    );
    assert!(
        log.modify(&kv, 2, |item| Some([item, b"!"].concat()))
            .expect("modify")
    );
    assert!(
        !log.modify(&kv, 2, |_| None).expect("modify"),
        "None writes nothing"
    );
    assert!(
        !log.modify(&kv, 9, |_| Some(Vec::new())).expect("modify"),
        "no entry 9"
    );
    let items: Vec<String> = log
        .read(&kv, 0, 10)
        .expect("read")
        .into_iter()
        .map(|e| e.item)
        .collect();
    assert_eq!(items, ["a", "b!", "c"]);
}

#[test]
fn a_page_that_is_not_binary_is_refused_and_never_overwritten() {
    let kv = MemoryKv::new();
    let log = AppendLog::new(Key::from_stored("t"));
    kv.increment("t:n", 2).expect("counter");
    let damaged = br#"[{"seq":2,"item":"y"},{"seq":1,"item":"x"}]"#;
    kv.set("t:p0", damaged).expect("set");
    assert!(log.read(&kv, 0, 10).is_err(), "reading it fails");
    assert!(log.append(&kv, &["z"]).is_err(), "appending to it fails");
    assert_eq!(kv.get("t:p0").expect("get").as_deref(), Some(&damaged[..]));
}

#[test]
fn a_damaged_page_is_an_error_not_a_panic() {
    let mut page = encode_page(&[Entry {
        seq: 1,
        item: b"abc".to_vec(),
    }]);
    assert_eq!(decode_page(&page).expect("whole").len(), 1);
    for cut in 2..page.len() {
        assert!(decode_page(&page[..cut]).is_err(), "cut at {cut}");
    }
    page[9] = 0xff; // the length now runs past the end
    assert!(decode_page(&page).is_err());
    assert!(decode_page(b"").is_err());
    assert!(decode_page(b"[{").is_err());
}

/// Appends one item and returns its number.
fn push(log: &AppendLog, kv: &MemoryKv, item: &str) -> Result<u64, KvError> {
    Ok(log.append(kv, &[item])?[0])
}

/// Store operations and keys read by `f`.
fn cost<T>(kv: &MemoryKv, f: impl FnOnce() -> T) -> (u64, u64, T) {
    let (ops, keys) = (kv.ops(), kv.keys_read());
    let out = f();
    (kv.ops() - ops, kv.keys_read() - keys, out)
}

/// With a page directory, a full read (publish's fan-out list) and a page
/// read (list's 50 and one more) cost the same store operations after 2,000 or 20,000
/// appends and removals as before them, and the same keys after 2,000 as after 20,000 (a
/// few sealed pages more than fresh, read on speculation in the same batch); a log
/// without one reads every page ever written.
#[test]
fn a_directory_log_reads_cost_the_same_after_any_history() {
    let measure = |log: &AppendLog, kv: &MemoryKv| {
        let (ops, keys, all) = cost(kv, || log.read(kv, 0, usize::MAX).expect("read"));
        let (page_ops, page_keys, page) = cost(kv, || log.read(kv, 0, 51).expect("page"));
        assert_eq!(all.len(), 50);
        assert_eq!(page.len(), 50);
        (ops, keys, page_ops, page_keys)
    };
    let kv = MemoryKv::new();
    let log = AppendLog::with_directory(Key::from_stored("d"), 32);
    let plain = AppendLog::with_page_size(Key::from_stored("p"), 32);
    for log in [&log, &plain] {
        for i in 0..50 {
            push(log, &kv, &format!("keep{i}")).expect("append");
        }
    }
    let fresh = measure(&log, &kv);
    let (ops, keys, page_ops, page_keys) = measure(&plain, &kv);
    assert_eq!(
        fresh,
        (ops, keys + 1, page_ops, page_keys + 1),
        "no history: the same cost, and the directory read in the same batch"
    );
    let churn = |cycles: usize| {
        for i in 0..cycles {
            for log in [&log, &plain] {
                let seq = push(log, &kv, &format!("churn{i}")).expect("append");
                log.remove(&kv, seq).expect("remove");
            }
        }
    };
    churn(2_000);
    let after = measure(&log, &kv);
    churn(18_000);
    assert_eq!(
        measure(&log, &kv),
        after,
        "flat: 2,000 cycles cost what 20,000 do"
    );
    let (ops, keys, page_ops, page_keys) = after;
    assert_eq!(
        (ops, page_ops),
        (fresh.0, fresh.2),
        "the same store operations"
    );
    // Keys: the first batch's sealed pages read on speculation, never more.
    assert!(keys <= fresh.1 + pagedir::WINDOW + 1, "{after:?} {fresh:?}");
    assert!(page_keys <= fresh.3 + 3, "{after:?} {fresh:?}");
    let (_, keys, page_ops, _) = measure(&plain, &kv);
    assert!(keys > 600 && page_ops > 200, "{keys} keys, {page_ops} ops");
    // What is left of the churn: sealed pages of one byte, and a directory of two pages.
    let dump = kv.dump();
    let sealed = dump
        .iter()
        .filter(|(k, v)| k.starts_with("d:p") && v.as_slice() == [SEALED_PAGE])
        .count();
    assert!(sealed >= 620, "{sealed} sealed pages");
    assert!(dump["d:d"].len() <= 1 + 8 * 3, "{:?}", dump["d:d"]);
}

/// A page sealed between an append's reservation of its number and its write (a tidy that
/// saw the number handed out and the page empty): the entry takes a new number on a later
/// page, and reads find it.
#[test]
fn an_append_whose_page_was_sealed_takes_new_numbers() {
    let kv = MemoryKv::new();
    let log = AppendLog::with_directory(Key::from_stored("d"), 4);
    for i in 0..3 {
        push(&log, &kv, &format!("x{i}")).expect("append");
    }
    kv.set("d:p0", &[SEALED_PAGE]).expect("seal"); // as if emptied and sealed
    let seqs = log.append(&kv, &["late", "later"]).expect("append");
    assert_eq!(seqs, [6, 5], "4 landed on the sealed page: its item took 6");
    let items: Vec<String> = log
        .read(&kv, 0, 10)
        .expect("read")
        .into_iter()
        .map(|e| e.item)
        .collect();
    assert_eq!(items, ["later", "late"]);
    assert_eq!(
        kv.get("d:p0").expect("get").as_deref(),
        Some(&[SEALED_PAGE][..])
    );
}

/// The rule readers rely on, checked on the store's contents: no page the directory does
/// not list holds an entry.
fn assert_unlisted_pages_are_empty(kv: &MemoryKv, context: &str) {
    let dump = kv.dump();
    let directory = pagedir::decode_for_tests(dump.get("d:d").map(Vec::as_slice));
    for (key, value) in &dump {
        let Some(page) = key.strip_prefix("d:p") else {
            continue;
        };
        let page: u64 = page.parse().expect("page number");
        let listed = page >= directory.0 || directory.1.contains(&page);
        let entries = decode_page(value).expect("a readable page");
        assert!(
            listed || entries.is_empty(),
            "{context}: page {page} unlisted"
        );
        if value.as_slice() == [SEALED_PAGE] {
            assert!(
                page < kv_len(kv).div_ceil(4),
                "{context}: sealed ahead of numbers"
            );
        }
    }
}

fn kv_len(kv: &MemoryKv) -> u64 {
    crate::kv::read_counter(kv, "d:n").expect("counter") as u64
}

/// Reads `log` from the start, whole and in pages of 3, and checks both give `live` (in
/// order).
fn assert_reads_give(log: &AppendLog, kv: &MemoryKv, live: &[(u64, String)], context: &str) {
    let all: Vec<(u64, String)> = log
        .read(kv, 0, usize::MAX)
        .expect("read")
        .into_iter()
        .map(|e| (e.seq, e.item))
        .collect();
    assert_eq!(all, live, "{context}");
    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let page = log.read(kv, after, 3).expect("page");
        let Some(last) = page.last() else { break };
        after = last.seq;
        paged.extend(page.into_iter().map(|e| (e.seq, e.item)));
    }
    assert_eq!(paged, live, "{context}: in pages of 3");
}

/// The page directory's fault sweep: a run of appends and removals (page size 4, so pages fill,
/// empty and get sealed often) with the store failing at operation `n`, for every `n` the
/// run has: every write of an append, a removal, a seal and a directory change cut short
/// in turn. A failed append leaves no entry; a failed removal is retried, as a caller
/// would. After each run, reads from the start, in pages of 3, and full, give exactly the
/// entries appended and not removed, and no entry sits on a page the directory leaves out.
#[test]
fn a_directory_log_cut_short_anywhere_loses_and_shows_no_entry() {
    let run = |fail: Option<u64>| {
        let kv = MemoryKv::new();
        let log = AppendLog::with_directory(Key::from_stored("d"), 4);
        kv.fail_at(fail);
        let mut live: Vec<(u64, String)> = Vec::new();
        let mut rng = 7u64;
        for step in 0..160u64 {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let pick = (rng >> 33) as usize;
            if live.len() > 3 && !pick.is_multiple_of(3) {
                let (seq, _) = live.remove(pick % live.len());
                if log.remove(&kv, seq).is_err() {
                    log.remove(&kv, seq).expect("retried");
                }
            } else {
                let item = format!("i{step}");
                if let Ok(seq) = push(&log, &kv, &item) {
                    live.push((seq, item));
                }
            }
        }
        kv.fail_at(None);
        live.sort();
        let context = format!("fault at {fail:?}");
        assert_reads_give(&log, &kv, &live, &context);
        assert_unlisted_pages_are_empty(&kv, &context);
        kv.ops()
    };
    let total = run(None);
    let sealed_pages_without_faults = {
        // The run does seal pages, so the sweep covers the tidy's writes.
        let kv_ops = total;
        assert!(kv_ops > 500, "{kv_ops}");
        kv_ops
    };
    for n in 1..=sealed_pages_without_faults {
        run(Some(n));
    }
}

fn seqs<T>(entries: Vec<Entry<T>>) -> Vec<u64> {
    entries.into_iter().map(|e| e.seq).collect()
}

/// A log made with `new` keeps each page in `PARTS` keys, so an append copies one part at
/// most, not the page (a busy subscription's history appends to a 5 KiB page once a
/// delivery otherwise).
#[test]
fn an_append_copies_its_part_not_the_whole_page() {
    let kv = MemoryKv::new();
    let log = AppendLog::new(Key::from_stored("t"));
    let item = "dlv_0123456789abcdef01234567";
    let mut largest = 0;
    for _ in 0..=PAGE {
        push(&log, &kv, item).expect("append");
        let dump = kv.dump();
        largest = largest.max(dump.values().map(Vec::len).max().unwrap_or(0));
    }
    let part = (PAGE / PARTS) as usize;
    assert_eq!(largest, 1 + part * (12 + item.len()));
    let keys: Vec<String> = kv.dump().into_keys().collect();
    let mut want = vec!["t:n".to_string(), "t:p0".to_string()];
    want.extend((1..PARTS).map(|j| format!("t:p0.{j}")));
    want.sort();
    want.push("t:p1".into());
    assert_eq!(keys, want);
    assert_eq!(
        seqs(log.read(&kv, 0, 1000).expect("read")),
        (1..=PAGE + 1).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(log.read(&kv, 40, 50).expect("read")),
        (41..=90).collect::<Vec<_>>()
    );
    log.delete_all(&kv).expect("delete");
    assert!(kv.dump().is_empty());
}

/// A store an earlier version wrote holds whole pages under the page key. Entries appended
/// since go to their parts; a read takes both, in order, and `modify`, `remove`,
/// `read_page` and `drop_page` find an entry wherever it is.
#[test]
fn a_whole_page_an_earlier_version_wrote_is_read_with_the_parts_added_since() {
    let kv = MemoryKv::new();
    let prefix = Key::from_stored("h");
    let whole = AppendLog::with_page_size(prefix.clone(), PAGE);
    let log = AppendLog::new(prefix);
    for i in 1..=70 {
        push(&whole, &kv, &format!("old{i}")).expect("append");
    }
    for i in 71..=140 {
        push(&log, &kv, &format!("new{i}")).expect("append");
    }
    // 71-128 went to the later parts of page 0, 129-140 to page 1.
    let range = |a: u64, b: u64| (a..=b).collect::<Vec<_>>();
    assert_eq!(seqs(log.read(&kv, 0, 1000).expect("read")), range(1, 140));
    assert_eq!(seqs(log.read(&kv, 64, 10).expect("read")), range(65, 74));
    assert_eq!(seqs(log.read(&kv, 100, 5).expect("read")), range(101, 105));
    fn x(s: &'static str) -> impl FnMut(&[u8]) -> Option<Vec<u8>> {
        move |_| Some(s.as_bytes().to_vec())
    }
    assert!(log.modify(&kv, 40, x("x40")).expect("modify an old entry"));
    assert!(log.modify(&kv, 80, x("x80")).expect("modify a new one"));
    log.remove(&kv, 50).expect("remove");
    log.remove(&kv, 90).expect("remove");
    assert!(
        !log.modify(&kv, 50, x("none"))
            .expect("modify a removed entry")
    );
    let page: Vec<(u64, String)> = log
        .read_page(&kv, 0)
        .expect("read page")
        .into_iter()
        .map(|e| (e.seq, String::from_utf8(e.item).expect("text")))
        .collect();
    let want: Vec<u64> = range(1, 128)
        .into_iter()
        .filter(|s| ![50, 90].contains(s))
        .collect();
    assert_eq!(page.iter().map(|e| e.0).collect::<Vec<_>>(), want);
    assert!(page.contains(&(40, "x40".into())) && page.contains(&(80, "x80".into())));
    assert!(page.contains(&(70, "old70".into())) && page.contains(&(71, "new71".into())));
    assert!(log.drop_page(&kv, 0).expect("drop"));
    assert!(
        kv.dump().keys().all(|k| !k.starts_with("h:p0")),
        "{:?}",
        kv.dump().keys()
    );
    assert_eq!(seqs(log.read(&kv, 0, 1000).expect("read")), range(129, 140));
}

/// The fault sweep of pages in parts: appends, modifies and removes over pages an earlier
/// version began whole (page size 8 in parts of 2, so parts and pages fill often), then the
/// first page dropped, with the store failing at operation `n`, for every `n` the run has.
/// A failed append leaves no entry; a failed modify, removal or drop is retried, as a caller
/// would. After each run, reads from the start, whole and in pages of 3, give exactly the
/// entries appended, as last modified, and not removed or dropped.
#[test]
fn a_log_in_parts_cut_short_anywhere_loses_and_shows_no_entry() {
    let run = |fail: Option<u64>| {
        let kv = MemoryKv::new();
        let whole = AppendLog::with_page_size(Key::from_stored("q"), 8);
        let log = AppendLog {
            parts: 4,
            ..AppendLog::with_page_size(Key::from_stored("q"), 8)
        };
        let mut live: Vec<(u64, String)> = Vec::new();
        for i in 0..11 {
            let item = format!("w{i}");
            live.push((push(&whole, &kv, &item).expect("append"), item));
        }
        kv.fail_at(fail);
        let mut rng = 11u64;
        for step in 0..90u64 {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let pick = (rng >> 33) as usize;
            if live.len() > 3 && pick.is_multiple_of(4) {
                let (seq, _) = live.remove(pick % live.len());
                if log.remove(&kv, seq).is_err() {
                    log.remove(&kv, seq).expect("retried");
                }
            } else if live.len() > 3 && pick % 4 == 1 {
                let at = pick % live.len();
                let item = format!("m{step}");
                let set = |_: &[u8]| Some(item.as_bytes().to_vec());
                let seq = live[at].0;
                if log.modify(&kv, seq, set).is_err() {
                    assert!(log.modify(&kv, seq, set).expect("retried"));
                }
                live[at].1 = item;
            } else {
                let item = format!("i{step}");
                if let Ok(seq) = push(&log, &kv, &item) {
                    live.push((seq, item));
                }
            }
        }
        if log.drop_page(&kv, 0).is_err() {
            assert!(log.drop_page(&kv, 0).expect("retried"));
        }
        live.retain(|(seq, _)| *seq > 8);
        kv.fail_at(None);
        live.sort();
        let context = format!("fault at {fail:?}");
        assert_reads_give(&log, &kv, &live, &context);
        kv.ops()
    };
    let total = run(None);
    assert!(total > 200, "{total}");
    for n in 1..=total {
        run(Some(n));
    }
}
