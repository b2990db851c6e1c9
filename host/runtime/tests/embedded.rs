//! The embedded store's promises, on each engine: an acknowledged write survives the process
//! being killed (`kill -9` of a child process that writes, then the store reopened), one
//! process at a time, a directory of another format refused with a clear message (never read
//! as empty), a backup taken while writes go on, owner-only files, and the `counters` bucket
//! kept out of the engine. The key-value rules themselves are the conformance suite's
//! (`kv_conformance`).

use edgehook_runtime::embedded::{self, Durability, EmbeddedStore, Engine};
use edgehook_testkit::{DEADLINE, temp_dir};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

const ENGINES: [Engine; 2] = [Engine::Sqlite, Engine::Fjall];
/// The child's store directory and engine ([`child_writes_until_killed`]).
const CHILD_DIR: &str = "EDGEHOOK_EMBEDDED_CHILD_DIR";
const CHILD_ENGINE: &str = "EDGEHOOK_EMBEDDED_CHILD_ENGINE";

fn open(engine: Engine, dir: &Path) -> Arc<dyn EmbeddedStore> {
    embedded::open(engine, dir, Durability::DEFAULT)
        .unwrap_or_else(|e| panic!("open {}: {e}", engine.name()))
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
    let (Ok(dir), Ok(engine)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_ENGINE)) else {
        return;
    };
    let engine = Engine::parse(&engine).expect("engine");
    let store = open(engine, Path::new(&dir));
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
    for engine in ENGINES {
        let dir = temp_dir(&format!("embedded-kill-{}", engine.name()));
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .args([
                "--exact",
                "embedded::child_writes_until_killed",
                "--nocapture",
            ])
            .env(CHILD_DIR, &dir)
            .env(CHILD_ENGINE, engine.name())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the child runs");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut acked = None;
        let end = Instant::now() + DEADLINE;
        // Killed mid-stream, after enough writes that the engine has flushed and rolled
        // files (memtables, WAL pages) at least once.
        while acked.is_none_or(|n| n < 20_000) {
            assert!(
                Instant::now() < end,
                "{}: the child stopped writing",
                engine.name()
            );
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
        let store = open(engine, &dir);
        for n in 0..=last {
            let key = format!("k{n:08}");
            assert_eq!(
                store.get(&key).expect("get"),
                Some(value(n)),
                "{}: acknowledged write {key} lost or torn (last acknowledged {last})",
                engine.name()
            );
            if n % 10 == 0 {
                let got = store.get(&format!("b{n:08}-2")).expect("get");
                assert_eq!(got, Some(value(n + 2)), "{}: batch {n}", engine.name());
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_second_process_on_the_same_directory_is_refused_until_the_first_closes() {
    for engine in ENGINES {
        let dir = temp_dir(&format!("embedded-lock-{}", engine.name()));
        let first = open(engine, &dir);
        let second = embedded::open(engine, &dir, Durability::DEFAULT).err();
        let message = second.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("in use by another edgehook process"),
            "{}: {message:?}",
            engine.name()
        );
        drop(first);
        drop(open(engine, &dir));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_directory_of_the_retired_format_stops_the_open_and_is_left_as_it_was() {
    for engine in ENGINES {
        let dir = temp_dir(&format!("embedded-old-{}", engine.name()));
        let old = b"\x01\x03\x00\x00\x00key\x01\x00\x00\x00v0123456789";
        std::fs::write(dir.join("kv.log"), old).expect("an old log");
        let message = embedded::open(engine, &dir, Durability::DEFAULT)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            message.contains("kv.log") && message.contains("does not read"),
            "{}: {message:?}",
            engine.name()
        );
        let files: Vec<_> = std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(files, ["kv.log"], "{}: nothing added", engine.name());
        assert_eq!(std::fs::read(dir.join("kv.log")).expect("log"), old);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_directory_of_the_other_engine_is_refused_not_read_as_empty() {
    let dir = temp_dir("embedded-other");
    let store = open(Engine::Sqlite, &dir);
    store.set("k", b"v").expect("set");
    drop(store);
    let message = embedded::open(Engine::Fjall, &dir, Durability::DEFAULT)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(message.contains("holds a sqlite store"), "{message:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_store_files_are_the_owners_only() {
    for engine in ENGINES {
        let dir = temp_dir(&format!("embedded-modes-{}", engine.name()));
        let store = open(engine, &dir.join("store"));
        store.set("k", b"secret").expect("set");
        store.flush().expect("flush");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&dir.join("store")), 0o700, "{}", engine.name());
        for entry in std::fs::read_dir(dir.join("store")).expect("dir") {
            let path = entry.expect("entry").path();
            if path.is_file() {
                assert_eq!(
                    mode(&path) & 0o077,
                    0,
                    "{}: {}",
                    engine.name(),
                    path.display()
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn the_counters_bucket_is_in_memory_beside_the_engine() {
    for engine in ENGINES {
        let dir = temp_dir(&format!("embedded-counters-{}", engine.name()));
        let store = open(engine, &dir);
        let counters = store.counters().expect("a counters store of its own");
        assert_eq!(counters.increment("rate:acme:1", 1), Ok(1));
        assert_eq!(store.get("rate:acme:1"), Ok(None), "{}", engine.name());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_backup_taken_while_writes_go_on_is_one_consistent_store() {
    let dir = temp_dir("embedded-backup");
    let store = open(Engine::Sqlite, &dir.join("store"));
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
    let copied = embedded::backup(&dir.join("store"), &dir.join("copy")).expect("backup");
    writer.join().expect("writer");
    let copy = open(Engine::Sqlite, &dir.join("copy"));
    assert_eq!(copy.len(), Ok(copied.keys));
    assert!(copied.keys >= 2_000, "{copied:?}");
    for n in 2_000..6_000u64 {
        let k = copy.get(&format!("k{n:08}")).expect("get");
        let m = copy.get(&format!("m{n:08}")).expect("get");
        assert_eq!(k.is_some(), m.is_some(), "half a batch in the copy at {n}");
    }
    let again = embedded::backup(&dir.join("store"), &dir.join("copy")).err();
    assert!(again.is_some_and(|e| e.to_string().contains("is not empty")));
    let _ = std::fs::remove_dir_all(&dir);
}
