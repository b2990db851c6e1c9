//! The file store's tests: durability, torn tails, damage, failed writes, compaction.

use super::*;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

pub(super) fn temp_dir(name: &str) -> PathBuf {
    edgehook_testkit::temp_dir(&format!("filestore-{name}"))
}

#[test]
fn survives_reopen_and_cuts_a_torn_tail() {
    let dir = temp_dir("reopen");
    {
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
        s.set("a", b"1").expect("set");
        s.set("b", b"2").expect("set");
        s.delete("a").expect("delete");
        assert_eq!(s.increment("n", 5), Ok(5));
        assert_eq!(s.compare_and_swap("b", Some(b"2"), b"3"), Ok(true));
    }
    // A crash mid-append leaves half a record.
    let mut f = OpenOptions::new()
        .append(true)
        .open(dir.join(LOG_FILE))
        .expect("log");
    f.write_all(&encode(OP_SET, "c", b"torn")[..7])
        .expect("write");
    drop(f);
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
    assert_eq!(s.get("a"), Ok(None));
    assert_eq!(s.get("b"), Ok(Some(b"3".to_vec())));
    assert_eq!(s.get("n"), Ok(Some(b"5".to_vec())));
    assert_eq!(s.get("c"), Ok(None));
    s.set("d", b"4").expect("append after the cut");
    drop(s);
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
    assert_eq!(s.get("d"), Ok(Some(b"4".to_vec())));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn scan_counts_what_the_store_holds() {
    let dir = temp_dir("scan");
    assert_eq!(scan(&dir).expect("no log yet"), LogStats::default());
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
    s.set("a", b"1").expect("set");
    s.set("b", b"22").expect("set");
    s.set("a", b"333").expect("overwrite");
    s.delete("b").expect("delete");
    let stats = scan(&dir).expect("scan");
    assert_eq!(stats.keys, s.len() as u64);
    assert_eq!(stats.live_bytes, s.lock().live_bytes);
    assert_eq!(
        stats.log_bytes,
        std::fs::metadata(dir.join(LOG_FILE)).expect("log").len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_opener_of_the_same_store_is_refused_until_the_first_closes() {
    let dir = temp_dir("lock");
    let first = FileStore::open(&dir, SyncPolicy::Always).expect("open");
    first.set("a", b"1").expect("set");
    let second = FileStore::open(&dir, SyncPolicy::Always)
        .err()
        .expect("refused");
    assert_eq!(second.kind(), std::io::ErrorKind::WouldBlock);
    assert!(
        second
            .to_string()
            .contains("in use by another edgehook process")
    );
    // The refused opener read nothing and cut nothing.
    first.set("b", b"2").expect("set");
    drop(first);
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("open after the first closed");
    assert_eq!(s.get("a"), Ok(Some(b"1".to_vec())));
    assert_eq!(s.get("b"), Ok(Some(b"2".to_vec())));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_write_that_fails_part_way_is_taken_back_and_later_writes_survive() {
    let dir = temp_dir("short");
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
    s.set("a", b"1").expect("set");
    s.lock().short_write = Some(7);
    assert!(s.set("b", b"lost").is_err(), "the short write fails");
    assert_eq!(s.get("b"), Ok(None), "a failed write changes nothing");
    s.set("c", b"3").expect("the next write goes on");
    drop(s);
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
    assert_eq!(s.get("a"), Ok(Some(b"1".to_vec())));
    assert_eq!(s.get("b"), Ok(None));
    assert_eq!(
        s.get("c"),
        Ok(Some(b"3".to_vec())),
        "the write after the failed one was not stranded behind half a record"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A batch write is one append: cut short anywhere, it is taken back whole (with one
/// append a record, the records before the cut would stand).
#[test]
fn a_batch_write_that_fails_part_way_is_taken_back_whole() {
    let dir = temp_dir("short-batch");
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
    s.set("a", b"1").expect("set");
    let batch = vec![
        ("a".to_owned(), b"new".to_vec()),
        ("b".to_owned(), b"2".to_vec()),
        ("c".to_owned(), b"3".to_vec()),
    ];
    // Past the first record (17 bytes of framing, "a", "new"), inside the second.
    s.lock().short_write = Some(25);
    assert!(s.set_many(&batch).is_err(), "the short write fails");
    let read = |s: &FileStore| ["a", "b", "c"].map(|k| s.get(k).expect("get"));
    assert_eq!(read(&s), [Some(b"1".to_vec()), None, None]);
    s.set("d", b"4").expect("the next write goes on");
    drop(s);
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
    assert_eq!(read(&s), [Some(b"1".to_vec()), None, None]);
    assert_eq!(s.get("d"), Ok(Some(b"4".to_vec())));
    s.set_many(&batch).expect("set_many");
    drop(s);
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
    assert_eq!(
        read(&s),
        [
            Some(b"new".to_vec()),
            Some(b"2".to_vec()),
            Some(b"3".to_vec())
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A crash in the middle of a batch's append (the process killed, not the write failed):
/// the records before the cut stand, the one cut is gone, as for records appended one by
/// one.
#[test]
fn a_batch_cut_by_a_crash_keeps_the_records_before_the_cut() {
    let dir = temp_dir("torn-batch");
    {
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
        let batch = vec![
            ("a".to_owned(), b"1".to_vec()),
            ("b".to_owned(), b"2".to_vec()),
        ];
        s.set_many(&batch).expect("set_many");
    }
    let log = dir.join(LOG_FILE);
    let len = std::fs::metadata(&log).expect("log").len();
    OpenOptions::new()
        .write(true)
        .open(&log)
        .expect("log")
        .set_len(len - 3)
        .expect("cut");
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
    assert_eq!(s.get("a"), Ok(Some(b"1".to_vec())));
    assert_eq!(s.get("b"), Ok(None));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_write_that_cannot_be_taken_back_refuses_writes_until_a_restart() {
    let dir = temp_dir("refuse");
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
    s.set("a", b"1").expect("set");
    // A handle that can neither write nor cut: the write fails, and so does its undo.
    s.lock().file = File::open(dir.join(LOG_FILE)).expect("read-only handle");
    assert!(s.set("b", b"2").is_err());
    let refused = s.set("c", b"3").expect_err("refused");
    assert!(
        refused.0.contains("refused until edgehook restarts"),
        "{refused:?}"
    );
    assert_eq!(s.get("a"), Ok(Some(b"1".to_vec())), "reads still answer");
    drop(s);
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("a restart recovers");
    s.set("d", b"4").expect("writes again");
    assert_eq!(s.get("a"), Ok(Some(b"1".to_vec())));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn damage_before_whole_records_refuses_to_open_and_cuts_nothing() {
    let dir = temp_dir("damage");
    {
        let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
        s.set("a", b"first value").expect("set");
        s.set("b", b"2").expect("set");
        s.set("c", b"3").expect("set");
    }
    let path = dir.join(LOG_FILE);
    let mut bytes = std::fs::read(&path).expect("log");
    let at = bytes
        .windows(5)
        .position(|w| w == b"first")
        .expect("a's value");
    bytes[at] ^= 0x20;
    std::fs::write(&path, &bytes).expect("damage it");
    let err = FileStore::open(&dir, SyncPolicy::Always)
        .err()
        .expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    let text = err.to_string();
    assert!(
        text.contains("damaged") && text.contains("byte 0"),
        "{text}"
    );
    assert_eq!(std::fs::read(&path).expect("log"), bytes, "nothing was cut");
    // A torn tail is still cut: half a record, or zeros (blocks a crash left unwritten).
    bytes[at] ^= 0x20;
    bytes.extend_from_slice(&[0u8; 64]);
    std::fs::write(&path, &bytes).expect("zero tail");
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("a torn tail is cut");
    assert_eq!(s.get("c"), Ok(Some(b"3".to_vec())));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_store_is_readable_by_its_owner_only() {
    let dir = temp_dir("mode");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(dir.join(LOG_FILE), b"").expect("an earlier version's log");
    std::fs::set_permissions(dir.join(LOG_FILE), std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
    s.set("sub:x", b"whsec_...").expect("set");
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join(LOG_FILE)), 0o600);
    assert_eq!(mode(&dir.join(LOCK_FILE)), 0o600);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn values_are_read_from_the_log_and_follow_it_through_compaction() {
    let dir = temp_dir("slots");
    let s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
    s.set_cache_bytes(0); // every read from the log
    for i in 0..100 {
        s.set(&format!("k{i:03}"), format!("value {i}").as_bytes())
            .expect("set");
    }
    for i in 0..50 {
        s.set(&format!("k{i:03}"), format!("second {i}").as_bytes())
            .expect("overwrite");
    }
    s.delete("k099").expect("delete");
    let before = s.stats();
    assert_eq!(before.keys, 99);
    assert_eq!(before.key_bytes, 99 * 4);
    s.compact().expect("compact");
    let after = s.stats();
    assert_eq!(after.live_bytes, before.live_bytes);
    assert_eq!(
        after.log_bytes,
        std::fs::metadata(dir.join(LOG_FILE)).expect("log").len(),
        "the compacted log holds exactly the live data"
    );
    assert_eq!(after.log_bytes, after.live_bytes);
    // Every key reads its last value from the new log, and writes go on after it.
    assert_eq!(s.get("k007"), Ok(Some(b"second 7".to_vec())));
    assert_eq!(s.get("k070"), Ok(Some(b"value 70".to_vec())));
    assert_eq!(s.get("k099"), Ok(None));
    s.set("k100", b"after").expect("set after compaction");
    assert_eq!(
        s.get_many(&["k100".into(), "k000".into(), "nope".into()]),
        Ok(vec![
            Some(b"after".to_vec()),
            Some(b"second 0".to_vec()),
            None
        ])
    );
    assert_eq!(
        s.compare_and_swap("k000", Some(b"second 1"), b"x"),
        Ok(false)
    );
    assert_eq!(s.compare_and_swap("k000", Some(b"second"), b"x"), Ok(false));
    assert_eq!(
        s.compare_and_swap("k000", Some(b"second 0"), b"x"),
        Ok(true)
    );
    assert_eq!(s.compare_and_swap("new", None, b"y"), Ok(true));
    assert_eq!(s.compare_and_swap("new", None, b"z"), Ok(false));
    // A record larger than the buffer the replay reads through.
    let big: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    s.set("big", &big).expect("set");
    drop(s);
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
    s.set_cache_bytes(0);
    assert_eq!(s.get("k000"), Ok(Some(b"x".to_vec())));
    assert_eq!(s.get("new"), Ok(Some(b"y".to_vec())));
    assert_eq!(s.get("k100"), Ok(Some(b"after".to_vec())));
    assert_eq!(s.get("big"), Ok(Some(big)));
    assert_eq!(s.len(), 102);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_record_damaged_after_it_was_written_is_an_error_not_wrong_bytes() {
    let dir = temp_dir("read-damage");
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
    s.set_cache_bytes(0); // a cached value would hide the damage until it is evicted
    s.set("a", b"first value").expect("set");
    s.set("b", b"2").expect("set");
    // Damage a's value in the file under the open store.
    let path = dir.join(LOG_FILE);
    let mut bytes = std::fs::read(&path).expect("log");
    let at = bytes
        .windows(5)
        .position(|w| w == b"first")
        .expect("a's value");
    bytes[at] ^= 0x20;
    std::fs::write(&path, &bytes).expect("damage it");
    let err = s.get("a").expect_err("damage is an error");
    assert!(err.0.contains("damaged"), "{err:?}");
    assert_eq!(s.get("b"), Ok(Some(b"2".to_vec())), "other keys still read");
    // A compaction does not copy the damage: it fails, and the log stays as it is.
    assert!(s.compact().is_err());
    assert_eq!(std::fs::read(&path).expect("log"), bytes);
    // The damaged key can be written again, and then reads.
    s.set("a", b"again").expect("set");
    assert_eq!(s.get("a"), Ok(Some(b"again".to_vec())));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A seeded random number below `n`, each call the next (xorshift64).
fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

/// The value cache answers exactly what the log answers: the same random sequence of sets,
/// overwrites, deletes, counters, compare-and-swaps and compactions on a store without a
/// cache and on one whose cache is small enough to evict all the time, every read compared.
#[test]
fn the_value_cache_answers_what_the_log_answers() {
    let dirs = [temp_dir("cache-off"), temp_dir("cache-small")];
    let stores = dirs
        .iter()
        .map(|d| FileStore::open(d, SyncPolicy::Every(Duration::from_secs(3600))).expect("open"))
        .collect::<Vec<_>>();
    stores[0].set_cache_bytes(0);
    stores[1].set_cache_bytes(16 * 1024);
    let mut next = xorshift(0x2545_f491_4f6c_dd1d);
    for step in 0..20_000 {
        let key = format!("k{}", next(300));
        let value = vec![b'a' + next(26) as u8; next(400) as usize];
        let other = format!("k{}", next(300));
        let answers = stores
            .iter()
            .map(|s| match step % 7 {
                0..=2 => s.set(&key, &value).map(|()| None),
                3 => s.delete(&key).map(|()| None),
                4 => s.get(&key),
                5 => s
                    .compare_and_swap(&key, Some(&value[..value.len() / 2]), &value)
                    .map(|ok| Some(vec![u8::from(ok)])),
                _ => s
                    .get_many(&[key.clone(), other.clone()])
                    .map(|v| Some(format!("{v:?}").into_bytes())),
            })
            .collect::<Vec<_>>();
        assert_eq!(answers[0], answers[1], "step {step}, {key}");
        if step % 5_000 == 4_999 {
            stores
                .iter()
                .for_each(|s| assert!(s.compact().expect("compact").is_some()));
        }
    }
    assert!(stores[1].stats().cache_bytes <= 16 * 1024);
    for i in 0..300 {
        let key = format!("k{i}");
        assert_eq!(stores[0].get(&key), stores[1].get(&key), "{key}");
    }
    drop(stores);
    dirs.iter().for_each(|d| {
        let _ = std::fs::remove_dir_all(d);
    });
}

/// The last handle of a store closes it, its directory's lock released, even while the
/// maintenance thread is in a job that holds the store (a merge or a compaction): an open of
/// the same directory right after finds it free. (The drop used to return at once, and the
/// reopen of the index test below failed now and then: "in use by another edgehook
/// process".)
#[test]
fn the_last_handle_dropped_during_a_maintenance_job_leaves_the_directory_free() {
    let dir = temp_dir("drop-during-job");
    let s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
    s.set("k", b"v").expect("set");
    let (holding, held) = std::sync::mpsc::channel();
    let (go, wait) = std::sync::mpsc::channel();
    s.start(Job::Hold { holding, go: wait });
    held.recv().expect("the job holds the store");
    let dropper = std::thread::spawn(move || drop(s));
    go.send(()).expect("go on");
    dropper.join().expect("dropped");
    let again = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600)))
        .expect("the directory is free once the last handle is dropped");
    assert_eq!(again.get("k"), Ok(Some(b"v".to_vec())));
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The key index (#28 point 5: memory that does not grow with the keys): the store answers
/// what a map answers through merges of the index (started by the writes, on their own
/// threads, and forced), compactions and reopens: every read, every listing by cursor, the
/// key count and the live bytes.
#[test]
fn the_key_index_answers_what_a_map_answers_through_merges_compactions_and_reopens() {
    let dir = temp_dir("index-model");
    let mut s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
    let setup = |s: &FileStore| {
        s.set_cache_bytes(0); // every read through the index
        s.lock().merge_at = 50;
    };
    setup(&s);
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    let check = |s: &FileStore, model: &BTreeMap<String, Vec<u8>>, step: usize| {
        assert_eq!(s.len(), model.len(), "step {step}");
        let live: u64 = model
            .iter()
            .map(|(k, v)| (k.len() + v.len() + 17) as u64)
            .sum();
        assert_eq!(s.stats().live_bytes, live, "step {step}");
        let mut listed = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = s.list_keys(cursor.as_deref(), 7).expect("list");
            if page.is_empty() {
                break;
            }
            cursor = page.last().cloned();
            listed.extend(page);
        }
        assert_eq!(
            listed,
            model.keys().cloned().collect::<Vec<_>>(),
            "step {step}"
        );
        for (k, v) in model {
            assert_eq!(s.get(k).as_ref(), Ok(&Some(v.clone())), "step {step}: {k}");
        }
    };
    for step in 0..6_000 {
        let key = format!("k{:04}", next(800));
        match next(10) {
            0..=4 => {
                let value = vec![b'a' + next(26) as u8; 1 + next(60) as usize];
                s.set(&key, &value).expect("set");
                model.insert(key.clone(), value);
            }
            5 => {
                // A batch of one to four, the first key sometimes twice.
                let mut batch: Vec<(String, Vec<u8>)> = Vec::new();
                for i in 0..1 + next(4) {
                    let k = match i {
                        0 => key.clone(),
                        _ => format!("k{:04}", next(800)),
                    };
                    batch.push((k, vec![b'a' + next(26) as u8; 1 + next(60) as usize]));
                }
                if next(3) == 0 {
                    batch.push((key.clone(), b"again".to_vec()));
                }
                s.set_many(&batch).expect("set_many");
                model.extend(batch);
            }
            6 | 7 => {
                s.delete(&key).expect("delete");
                model.remove(&key);
            }
            8 => assert_eq!(s.get(&key), Ok(model.get(&key).cloned()), "{step}: {key}"),
            _ => {
                let expected = model.get(&key).cloned();
                let swapped = s.compare_and_swap(&key, expected.as_deref(), b"cas");
                assert_eq!(swapped, Ok(true), "{step}: {key}");
                model.insert(key.clone(), b"cas".to_vec());
            }
        }
        match step % 1_000 {
            333 => s.merge_now(),
            666 => assert!(s.compact().expect("compact").is_some()),
            999 => {
                check(&s, &model, step);
                drop(s);
                s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600)))
                    .expect("reopen");
                setup(&s);
                check(&s, &model, step);
            }
            _ => {}
        }
    }
    check(&s, &model, 6_000);
    let stats = s.stats();
    assert!(stats.index_bytes > 0, "the keys are in the runs' files");
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A store opened in `dir` (fsynced hourly) holding `key-00000` .. `key-{n-1}`, each "v".
fn with_keys(dir: &Path, n: usize) -> FileStore {
    let s = FileStore::open(dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
    for i in 0..n {
        s.set(&format!("key-{i:05}"), b"v").expect("set");
    }
    s
}

/// Memory holds only the changes since the last merge.
#[test]
fn the_index_keeps_in_memory_only_the_changes_since_its_last_merge() {
    let dir = temp_dir("index-recent");
    let s = with_keys(&dir, 5_000);
    assert_eq!(s.stats().recent_keys, 5_000);
    s.merge_now();
    let stats = s.stats();
    assert_eq!((stats.recent_keys, stats.keys), (0, 5_000));
    assert!(stats.index_bytes >= 5_000 * 29, "{stats:?}");
    s.delete("key-00007").expect("delete");
    s.set("key-00008", b"w").expect("overwrite");
    assert_eq!(s.stats().recent_keys, 2);
    assert_eq!(s.get("key-00007"), Ok(None));
    assert_eq!(s.get("key-00008"), Ok(Some(b"w".to_vec())));
    assert_eq!(s.get("key-04999"), Ok(Some(b"v".to_vec())));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A key no run of the index holds is answered by the runs' filters, without reading a block
/// of their files: the new keys of writes, and reads of absent keys. A key a run holds is
/// read.
#[test]
fn a_lookup_of_a_key_the_index_runs_lack_reads_no_block() {
    let dir = temp_dir("index-filter");
    let s = with_keys(&dir, 5_000);
    s.set_cache_bytes(0);
    s.merge_now();
    let stats = s.stats();
    // One run, its filter sized for its 5,000 keys (10 bits each, in 64-byte blocks).
    assert_eq!(
        (stats.index_runs, stats.index_reads, stats.filter_bytes),
        (1, 0, 6_272)
    );
    for i in 0..1_000 {
        s.set(&format!("key-{i:05}-new"), b"w")
            .expect("set a new key");
        assert_eq!(s.get(&format!("key-{i:05}-absent")), Ok(None));
    }
    // 2,000 lookups of absent keys; a few false positives of the filter read a block.
    let reads = s.stats().index_reads;
    assert!(reads < 100, "{reads} blocks read");
    assert_eq!(s.get("key-00042"), Ok(Some(b"v".to_vec())));
    assert_eq!(s.stats().index_reads, reads + 1);
    // The next merge writes the 1,001 changes as a run of their own, newer than the 5,000
    // (which it leaves as they are), with its own filter: each new key is found in it, and
    // absent keys are still answered without a read.
    s.delete("key-00043").expect("delete");
    s.merge_now();
    let stats = s.stats();
    assert_eq!((stats.index_runs, stats.filter_bytes), (2, 6_272 + 1_280));
    for i in 0..1_000 {
        assert_eq!(s.get(&format!("key-{i:05}-new")), Ok(Some(b"w".to_vec())));
        assert_eq!(s.get(&format!("key-{i:05}-gone")), Ok(None));
    }
    assert_eq!(s.get("key-00043"), Ok(None));
    let reads = s.stats().index_reads;
    assert!((1_000..1_100).contains(&reads), "{reads} blocks read");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The index's files have no name (no file is left in the store's directory, and one an
/// earlier process left is removed).
#[test]
fn the_index_files_have_no_name() {
    let dir = temp_dir("index-names");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("kv.idx.1.0"), b"left by a killed process").expect("stale");
    let s = with_keys(&dir, 5_000);
    s.merge_now();
    let names: Vec<String> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("kv.idx"))
        .collect();
    assert!(names.is_empty(), "index files with names: {names:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A merge that cannot write its file (the store's directory is gone for a moment) keeps its
/// changes: every key still reads, and the next merge, once the directory is back, succeeds.
#[test]
fn a_failed_merge_of_the_index_keeps_its_changes() {
    let dir = temp_dir("index-merge-fails");
    let moved = temp_dir("index-merge-fails-moved");
    let s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
    s.set_cache_bytes(0);
    for i in 0..300 {
        s.set(&format!("a{i:03}"), b"1").expect("set");
    }
    s.merge_now();
    for i in 0..300 {
        s.set(&format!("b{i:03}"), b"2").expect("set");
    }
    s.delete("a005").expect("delete");
    std::fs::rename(&dir, &moved).expect("move the directory away");
    s.merge_now();
    std::fs::rename(&moved, &dir).expect("put it back");
    assert_eq!(s.stats().recent_keys, 301, "the changes are back in memory");
    assert!(
        s.lock().merge_retry_at > 301,
        "not tried again on every write"
    );
    let check = |s: &FileStore| {
        assert_eq!(s.len(), 599);
        assert_eq!(s.get("a004"), Ok(Some(b"1".to_vec())));
        assert_eq!(s.get("a005"), Ok(None));
        assert_eq!(s.get("b299"), Ok(Some(b"2".to_vec())));
    };
    check(&s);
    s.merge_now();
    assert_eq!(s.stats().recent_keys, 0);
    check(&s);
    assert_eq!(
        s.list_keys(Some("a299"), 2),
        Ok(vec!["b000".into(), "b001".into()])
    );
    let _ = std::fs::remove_dir_all(&dir);
}
