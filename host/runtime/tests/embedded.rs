//! The embedded store's promises: an acknowledged write survives the process
//! being killed (`kill -9` of a child process that writes, then the store reopened), one
//! process at a time, a directory of another format refused with a clear message (never read
//! as empty), a backup taken while writes go on, owner-only files, and the `counters` bucket
//! kept out of the engine. The key-value rules themselves are the conformance suite's
//! (`kv_conformance`).

use edgehook_component::model::ids::ClientId;
use edgehook_component::storage::keys;
use edgehook_runtime::embedded::{self, Durability, FjallStore};
use edgehook_runtime::store::KvBackend;
use edgehook_testkit::{DEADLINE, temp_dir};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The child's store directory ([`child_writes_until_killed`]).
const CHILD_DIR: &str = "EDGEHOOK_EMBEDDED_CHILD_DIR";

fn open(dir: &Path) -> FjallStore {
    embedded::open(dir, Durability::DEFAULT).unwrap_or_else(|e| panic!("open: {e}"))
}

/// The message of the error opening `dir` ends with (empty if it opened).
fn open_error(dir: &Path) -> String {
    embedded::open(dir, Durability::DEFAULT)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

/// The value the child writes at key `n`: long enough to span pages, different per key.
fn value(n: u64) -> Vec<u8> {
    format!("{n}:{}", "x".repeat(200 + (n % 97) as usize)).into_bytes()
}

/// In the child process (only when [`CHILD_DIR`] is set; a no-op in the suite): writes keys
/// `k<n>` (a single write, then a compare-and-swap, then every tenth a batch of three),
/// printing `acked <n>` once each has returned, until it is killed.
#[test]
fn child_writes_until_killed() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let store = open(Path::new(&dir));
    for n in 0u64.. {
        let key = format!("k{n:08}");
        store.set(&key, b"first").expect("set");
        assert!(
            store
                .compare_and_swap(&key, Some(b"first"), &value(n))
                .expect("cas")
        );
        if n % 10 == 0 {
            let batch: Vec<(String, Vec<u8>)> = (0..3)
                .map(|i| (format!("b{n:08}-{i}"), value(n + i)))
                .collect();
            store.set_many(&batch).expect("set_many");
        }
        println!("acked {n}");
    }
}

#[test]
fn an_acknowledged_write_survives_the_process_being_killed() {
    let dir = temp_dir("embedded-kill");
    let mut child = Command::new(std::env::current_exe().expect("this binary"))
        .args([
            "--exact",
            "embedded::child_writes_until_killed",
            "--nocapture",
        ])
        .env(CHILD_DIR, &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the child runs");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut acked = None;
    let end = Instant::now() + DEADLINE;
    // Killed mid-stream, after enough writes that the engine has rotated its memtable and
    // flushed a table at least once.
    while acked.is_none_or(|n| n < 20_000) {
        assert!(Instant::now() < end, "the child stopped writing");
        let line = lines.next().expect("the child's output").expect("a line");
        if let Some(n) = line.strip_prefix("acked ") {
            acked = Some(n.parse::<u64>().expect("a number"));
        }
    }
    child.kill().expect("SIGKILL");
    // What it acknowledged after we stopped reading counts too.
    let last = lines
        .map_while(Result::ok)
        .filter_map(|l| l.strip_prefix("acked ").and_then(|n| n.parse::<u64>().ok()))
        .last()
        .or(acked)
        .expect("acknowledged writes");
    child.wait().expect("reaped");
    let store = open(&dir);
    for n in 0..=last {
        let key = format!("k{n:08}");
        assert_eq!(
            store.get(&key).expect("get"),
            Some(value(n)),
            "acknowledged write {key} lost or torn (last acknowledged {last})"
        );
        if n % 10 == 0 {
            let got = store.get(&format!("b{n:08}-2")).expect("get");
            assert_eq!(got, Some(value(n + 2)), "batch {n}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_opener_of_the_same_directory_is_refused_until_the_first_closes() {
    let dir = temp_dir("embedded-lock");
    let first = open(&dir);
    let message = open_error(&dir);
    assert!(
        message.contains("in use by another edgehook process"),
        "{message:?}"
    );
    drop(first);
    // Free as soon as the last handle is dropped (the sync thread holds no handle).
    for _ in 0..20 {
        drop(open(&dir));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_directory_of_an_earlier_format_stops_the_open_and_is_left_as_it_was() {
    for old in ["kv.log", "edgehook.sqlite3"] {
        let dir = temp_dir("embedded-old");
        let bytes = b"\x01\x03\x00\x00\x00key\x01\x00\x00\x00v0123456789";
        std::fs::write(dir.join(old), bytes).expect("an old file");
        let message = open_error(&dir);
        assert!(
            message.contains(old) && message.contains("does not read"),
            "{message:?}"
        );
        let files: Vec<_> = std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(files, [old], "nothing added");
        assert_eq!(std::fs::read(dir.join(old)).expect("file"), bytes);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn the_store_directory_is_the_owners_only() {
    let dir = temp_dir("embedded-modes");
    let store = open(&dir.join("store"));
    store.set("k", b"secret").expect("set");
    store.flush().expect("flush");
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&dir.join("store")), 0o700);
    assert_eq!(mode(&dir.join("store/lock")), 0o600);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_counters_bucket_is_in_memory_beside_the_engine() {
    let dir = temp_dir("embedded-counters");
    let store = open(&dir);
    let counters = store.counters().expect("a counters store of its own");
    let count = keys::rate(&ClientId::trusted("acme"), 1);
    assert_eq!(counters.increment(&count, 1), Ok(1));
    assert_eq!(store.get(&count), Ok(None));
    drop((counters, store));
    assert_eq!(open(&dir).len(), Ok(0), "nothing of it in the journal");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_copy_made_while_writes_go_on_is_one_consistent_store() {
    let dir = temp_dir("embedded-copy");
    let store = open(&dir.join("store"));
    for n in 0..2_000u64 {
        store.set(&format!("k{n:08}"), &value(n)).expect("set");
    }
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            for n in 2_000..6_000u64 {
                // Each pair written as one batch: a consistent copy has both or neither.
                let pair = [
                    (format!("k{n:08}"), value(n)),
                    (format!("m{n:08}"), value(n)),
                ];
                store.set_many(&pair).expect("set_many");
            }
        })
    };
    let copied = store.copy_to(&dir.join("copy")).expect("copy");
    writer.join().expect("writer");
    let copy = open(&dir.join("copy"));
    assert_eq!(copy.len(), Ok(copied.keys));
    assert!(copied.keys >= 2_000, "{copied:?}");
    for n in 2_000..6_000u64 {
        let k = copy.get(&format!("k{n:08}")).expect("get");
        let m = copy.get(&format!("m{n:08}")).expect("get");
        assert_eq!(k.is_some(), m.is_some(), "half a batch in the copy at {n}");
    }
    let again = store.copy_to(&dir.join("copy")).err();
    assert!(again.is_some_and(|e| e.to_string().contains("is not empty")));
    drop((copy, store));
    // Offline (no server): `backup` opens the store itself.
    let offline = embedded::backup(&dir.join("store"), &dir.join("offline")).expect("backup");
    assert_eq!(offline.keys, 10_000);
    let _ = std::fs::remove_dir_all(&dir);
}
