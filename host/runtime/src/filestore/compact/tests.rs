//! The log's compaction: what it keeps, what it does while the store is in use, a failed one.

use super::super::tests::temp_dir;
use super::super::{COMPACT_MIN_BYTES, FileStore, LOG_FILE, SyncPolicy};
use super::*;
use crate::store::KvBackend;
use std::os::unix::fs::MetadataExt;

/// Step 1 of a compaction of `s` (none may be under way).
fn begin(s: &FileStore) -> Snapshot {
    s.lock()
        .begin_compaction()
        .expect("begin")
        .expect("a snapshot")
}

#[test]
fn compaction_keeps_the_live_data() {
    let dir = temp_dir("compact");
    let s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
    let value = vec![7u8; 1 << 16];
    for i in 0..1200 {
        s.set(&format!("k{}", i % 10), &value).expect("set");
    }
    s.idle(); // the maintenance thread has done the compactions the writes made due
    let log = std::fs::metadata(dir.join(LOG_FILE)).expect("log").len();
    assert!(
        log < COMPACT_MIN_BYTES + (2 << 20),
        "log was compacted: {log}"
    );
    drop(s);
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
    assert_eq!(s.len(), 10);
    assert_eq!(s.get("k3"), Ok(Some(value)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_compaction_does_not_fail_the_write_that_set_it_off() {
    let dir = temp_dir("compact-fails");
    let s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
    // The temporary file cannot be created.
    std::fs::create_dir_all(dir.join(format!("{LOG_FILE}.tmp"))).expect("block it");
    let value = vec![7u8; 1 << 16];
    for i in 0..400 {
        s.set(&format!("k{}", i % 10), &value)
            .unwrap_or_else(|e| panic!("write {i} failed: {e:?}"));
    }
    s.set("k3", b"new").expect("set");
    assert_eq!(s.get("k3"), Ok(Some(b"new".to_vec())));
    s.idle();
    let retry_at = s.lock().compact_from;
    assert!(
        retry_at > COMPACT_MIN_BYTES,
        "not tried again on every write: {retry_at}"
    );
    drop(s);
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
    assert_eq!(s.get("k3"), Ok(Some(b"new".to_vec())));
    assert_eq!(s.len(), 10);
    let _ = std::fs::remove_dir_all(&dir);
}

/// #28: a compaction holds the store's lock only at its start and its end. What is written
/// while it copies (a new key, an overwrite, a delete, a counter) is in the compacted log:
/// read back at once, and after a restart; reads go on meanwhile; one compaction at a time.
#[test]
fn writes_made_while_a_compaction_copies_are_kept() {
    let dir = temp_dir("compact-meanwhile");
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
    s.set_cache_bytes(0); // reads follow the index to the new log
    for i in 0..100 {
        s.set(&format!("k{i:03}"), b"old").expect("set");
    }
    for i in 0..50 {
        s.set(&format!("k{i:03}"), b"x").expect("overwrite");
    }
    let snapshot = begin(&s);
    assert!(
        s.lock().begin_compaction().expect("begin").is_none(),
        "one compaction at a time"
    );
    let copied = snapshot.copy(&dir, None).expect("copy");
    s.set("new", b"during").expect("set while it copies");
    s.set("k060", b"changed")
        .expect("overwrite while it copies");
    s.delete("k070").expect("delete while it copies");
    assert_eq!(s.increment("n", 5), Ok(5));
    assert_eq!(s.get("k080"), Ok(Some(b"old".to_vec())), "reads go on");
    let before = std::fs::metadata(dir.join(LOG_FILE)).expect("log").len();
    let retired = s
        .lock()
        .finish_compaction(snapshot, copied)
        .expect("finish");
    let after = std::fs::metadata(dir.join(LOG_FILE)).expect("log").len();
    assert!(after < before, "compacted: {before} -> {after}");
    // The old log, unlinked by the rename, is handed back still open, to be closed (its
    // blocks freed) after the lock: closed under it, at 1.25 million records, a read beside
    // the compaction waited 261 ms.
    let old = retired.old_log().metadata().expect("old log");
    assert_eq!((old.nlink(), old.len()), (0, before));
    drop(retired);
    let check = |s: &FileStore| {
        assert_eq!(s.get("new"), Ok(Some(b"during".to_vec())));
        assert_eq!(s.get("k060"), Ok(Some(b"changed".to_vec())));
        assert_eq!(s.get("k070"), Ok(None));
        assert_eq!(s.get("k010"), Ok(Some(b"x".to_vec())));
        assert_eq!(s.get("k099"), Ok(Some(b"old".to_vec())));
        assert_eq!(s.increment("n", 0), Ok(5));
    };
    check(&s);
    assert_eq!(s.len(), 101);
    s.set("later", b"1").expect("a write after it");
    drop(s);
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("reopen");
    check(&s);
    assert_eq!(s.get("later"), Ok(Some(b"1".to_vec())));
    assert_eq!(s.len(), 102);
    assert!(s.lock().begin_compaction().expect("begin").is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A write that makes the log due for compaction does not wait for it: the maintenance
/// thread runs it (held busy here by the test), and writes go on meanwhile (a compaction at
/// a million keys takes 2 s, which a writer, a runtime worker, used to wait for).
#[test]
fn writes_do_not_wait_for_the_compaction_they_make_due() {
    let dir = temp_dir("compact-background");
    let s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
    let busy = s.maintenance.lock().expect("maintenance");
    let (done, finished) = std::sync::mpsc::channel();
    let writer = s.clone();
    std::thread::spawn(move || {
        let value = vec![7u8; 1 << 16];
        for i in 0..400 {
            writer.set(&format!("k{}", i % 10), &value).expect("set");
        }
        let _ = done.send(());
    });
    finished
        .recv_timeout(Duration::from_secs(60))
        .expect("the writes finished while the compaction waited");
    assert!(s.lock().compact_pending, "a compaction is due");
    let log = || std::fs::metadata(dir.join(LOG_FILE)).expect("log").len();
    let before = log();
    assert!(before > COMPACT_MIN_BYTES, "{before}");
    drop(busy);
    s.idle();
    assert!(log() < before / 4, "compacted: {before} -> {}", log());
    assert_eq!(s.get("k3"), Ok(Some(vec![7u8; 1 << 16])));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Step 3: what is written while the records are copied follows them into the new log
/// without the lock, in rounds until at most [`TAIL_LEFT`] is left, and at most
/// [`TAIL_ROUNDS`] of them however fast the log grows; step 4, under the lock, copies only
/// the rest. Every write lands once, in order: read back at once and after a restart.
#[test]
fn the_tail_written_during_the_copy_follows_it_without_the_lock_in_bounded_rounds() {
    let dir = temp_dir("compact-tail");
    let s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
    for i in 0..100 {
        s.set(&format!("k{i:03}"), b"old").expect("set");
    }
    let snapshot = begin(&s);
    let mut copied = snapshot.copy(&dir, None).expect("copy");
    let tmp = || {
        std::fs::metadata(tmp_path(&dir))
            .expect("temporary log")
            .len()
    };
    let records = tmp();
    s.set("small", b"1").expect("a write during the copy");
    copied
        .catch_up(&snapshot, || s.lock().log_bytes)
        .expect("catch up");
    assert_eq!(tmp(), records, "less than TAIL_LEFT is left to step 4");
    // A log that grows by more than TAIL_LEFT before each look at its length.
    let big = vec![9u8; (TAIL_LEFT + 4096) as usize];
    let mut looks = 0;
    copied
        .catch_up(&snapshot, || {
            looks += 1;
            s.set(&format!("big{looks}"), &big).expect("set");
            s.lock().log_bytes
        })
        .expect("catch up");
    assert_eq!(looks, TAIL_ROUNDS);
    let last_look = s.lock().log_bytes;
    assert_eq!(
        tmp(),
        records + (last_look - snapshot.end),
        "copied to the last look"
    );
    s.set("after", b"2").expect("a write after the last round");
    s.delete("k050").expect("a delete after it");
    let retired = s
        .lock()
        .finish_compaction(snapshot, copied)
        .expect("finish");
    drop(retired);
    let check = |s: &FileStore| {
        assert_eq!(s.get("small"), Ok(Some(b"1".to_vec())));
        for i in 1..=TAIL_ROUNDS {
            assert_eq!(s.get(&format!("big{i}")), Ok(Some(big.clone())));
        }
        assert_eq!(s.get("after"), Ok(Some(b"2".to_vec())));
        assert_eq!(s.get("k050"), Ok(None));
        assert_eq!(s.get("k099"), Ok(Some(b"old".to_vec())));
        assert_eq!(
            s.len(),
            100 - 1 + 2 + TAIL_ROUNDS,
            "k050 gone; small, after, the bigs"
        );
    };
    check(&s);
    drop(s);
    check(&FileStore::open(&dir, SyncPolicy::Always).expect("reopen"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The store's own compaction is paced as a merge is: the copy rests after each chunk of
/// records ([`Pace`]), and a copy smaller than a chunk never rests.
#[test]
fn a_paced_copy_rests_after_each_chunk_of_records() {
    let dir = temp_dir("compact-pace");
    let s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
    let rests = |s: &FileStore| {
        s.idle(); // a merge the writes made due is done (one job at a time)
        let snapshot = begin(s);
        let mut rests = 0;
        let mut pace = Pace::new(std::time::Instant::now());
        let copied = snapshot
            .copy(&dir, Some((&mut pace, &mut |_| rests += 1)))
            .expect("copy");
        drop(
            s.lock()
                .finish_compaction(snapshot, copied)
                .expect("finish"),
        );
        rests
    };
    for i in 0..100 {
        s.set(&format!("k{i:05}"), b"v").expect("set");
    }
    assert_eq!(rests(&s), 0);
    let batch: Vec<_> = (100..40_000)
        .map(|i| (format!("k{i:05}"), b"v".to_vec()))
        .collect();
    s.set_many(&batch).expect("set many");
    assert_eq!(rests(&s), 2, "40,000 records: two whole chunks");
    assert_eq!(s.get("k39999"), Ok(Some(b"v".to_vec())));
    let _ = std::fs::remove_dir_all(&dir);
}
