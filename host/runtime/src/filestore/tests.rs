//! The file store's tests: durability, torn tails, damage, failed writes, compaction.

use super::*;
use std::os::unix::fs::PermissionsExt;

fn temp_dir(name: &str) -> PathBuf {
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
fn compaction_keeps_the_live_data() {
    let dir = temp_dir("compact");
    let s = FileStore::open(&dir, SyncPolicy::Every(Duration::from_secs(3600))).expect("open");
    let value = vec![7u8; 1 << 16];
    for i in 0..1200 {
        s.set(&format!("k{}", i % 10), &value).expect("set");
    }
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

/// #28: a compaction holds the store's lock only at its start and its end. What is written
/// while it copies (a new key, an overwrite, a delete, a counter) is in the compacted log:
/// read back at once, and after a restart; reads go on meanwhile; one compaction at a time.
#[test]
fn writes_made_while_a_compaction_copies_are_kept() {
    let dir = temp_dir("compact-meanwhile");
    let s = FileStore::open(&dir, SyncPolicy::Always).expect("open");
    for i in 0..100 {
        s.set(&format!("k{i:03}"), b"old").expect("set");
    }
    for i in 0..50 {
        s.set(&format!("k{i:03}"), b"x").expect("overwrite");
    }
    let snapshot = s
        .lock()
        .begin_compaction()
        .expect("begin")
        .expect("a snapshot");
    assert!(
        s.lock().begin_compaction().expect("begin").is_none(),
        "one compaction at a time"
    );
    let copied = snapshot.copy(&dir).expect("copy");
    s.set("new", b"during").expect("set while it copies");
    s.set("k060", b"changed")
        .expect("overwrite while it copies");
    s.delete("k070").expect("delete while it copies");
    assert_eq!(s.increment("n", 5), Ok(5));
    assert_eq!(s.get("k080"), Ok(Some(b"old".to_vec())), "reads go on");
    let before = std::fs::metadata(dir.join(LOG_FILE)).expect("log").len();
    s.lock()
        .finish_compaction(snapshot, copied)
        .expect("finish");
    let after = std::fs::metadata(dir.join(LOG_FILE)).expect("log").len();
    assert!(after < before, "compacted: {before} -> {after}");
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
