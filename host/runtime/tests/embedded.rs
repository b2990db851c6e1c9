//! The embedded store's promises: an acknowledged write survives the process
//! being killed (`kill -9` of a child process that writes, then the store reopened), one
//! process at a time, a directory of another format refused with a clear message (never read
//! as empty), a backup taken while writes go on, owner-only files, the `counters` bucket
//! kept out of the engine, the group commit of `Durability::Always` (writers share
//! fsyncs, none returns before a sync that began after its write, a failed sync fails every
//! write it was to cover), and `Durability::Answer`'s one sync a settle (writes wait for
//! none; a settle covers every write before it, shared by the settles in flight; after a
//! failed sync every settle fails). The key-value rules themselves are the conformance suite's
//! (`kv_conformance`).

use edgehook_component::model::ids::ClientId;
use edgehook_component::storage::keys;
use edgehook_runtime::embedded::{self, Durability, FjallStore, GroupCommit};
use edgehook_runtime::store::{KvBackend, KvStore, StoreError, StoreResult};
use edgehook_testkit::{DEADLINE, temp_dir};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread::JoinHandle;
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

#[test]
fn writers_in_flight_under_always_share_fsyncs_and_every_write_survives_a_reopen() {
    const THREADS: u64 = 8;
    const EACH: u64 = 150;
    let dir = temp_dir("embedded-group");
    let store = embedded::open(&dir, Durability::Always).expect("open");
    let start = Arc::new(Barrier::new(THREADS as usize));
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, start) = (store.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for n in t * EACH..(t + 1) * EACH {
                    store.set(&format!("g{n:06}"), &value(n)).expect("set");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().expect("writer");
    }
    let (writes, syncs) = (THREADS * EACH, store.syncs());
    assert!(syncs < writes, "{syncs} fsyncs for {writes} writes");
    drop(store);
    let store = open(&dir);
    for n in 0..writes {
        assert_eq!(
            store.get(&format!("g{n:06}")),
            Ok(Some(value(n))),
            "write {n}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_lone_writer_under_always_gets_an_fsync_per_write() {
    let dir = temp_dir("embedded-lone");
    let store = embedded::open(&dir, Durability::Always).expect("open");
    for n in 0..20u64 {
        store.set(&format!("k{n:08}"), &value(n)).expect("set");
    }
    // A compare-and-swap that writes nothing is synced too: what it read was durable.
    assert_eq!(store.compare_and_swap("k00000000", None, b"no"), Ok(false));
    assert_eq!(store.increment("count", 2), Ok(2));
    let pair = [("a".to_owned(), value(1)), ("b".to_owned(), value(2))];
    store.set_many(&pair).expect("set_many");
    store.delete("k00000001").expect("delete");
    assert_eq!(store.syncs(), 24);
    drop(store);
    let store = open(&dir);
    assert_eq!(store.get("k00000019"), Ok(Some(value(19))));
    assert_eq!(store.get("k00000001"), Ok(None));
    assert_eq!(store.get("b"), Ok(Some(value(2))));
    assert_eq!(store.syncs(), 0, "none under Durability::Every");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sync that counts its runs in `runs` and answers `outcome`.
fn counted(
    runs: &Arc<AtomicU64>,
    outcome: StoreResult<()>,
) -> impl FnOnce() -> StoreResult<()> + Send + use<> {
    let runs = runs.clone();
    move || {
        runs.fetch_add(1, Ordering::SeqCst);
        outcome
    }
}

/// Write `seq` waited for on a thread of its own, led by a sync that tells `began` when it
/// starts and then waits for `end`'s outcome.
fn slow_leader(
    commit: &Arc<GroupCommit>,
    seq: u64,
) -> (
    JoinHandle<StoreResult<()>>,
    mpsc::Receiver<()>,
    mpsc::Sender<StoreResult<()>>,
) {
    let (began_tx, began) = mpsc::channel();
    let (end, end_rx) = mpsc::channel();
    let commit = commit.clone();
    let leader = std::thread::spawn(move || {
        commit.wait(seq, move || {
            began_tx.send(()).expect("test waits");
            end_rx.recv().expect("an outcome")
        })
    });
    (leader, began, end)
}

fn waiter(
    commit: &Arc<GroupCommit>,
    seq: u64,
    sync: impl FnOnce() -> StoreResult<()> + Send + 'static,
) -> JoinHandle<StoreResult<()>> {
    let commit = commit.clone();
    std::thread::spawn(move || commit.wait(seq, sync))
}

#[test]
fn a_sync_covers_the_writes_applied_before_it_began_and_no_later_one() {
    let commit = Arc::new(GroupCommit::default());
    let (first, second) = (commit.applied(), commit.applied());
    let (leader, began, end) = slow_leader(&commit, first);
    began.recv().expect("the sync began");
    let late = commit.applied();
    let (covered_runs, late_runs) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let covered = waiter(&commit, second, counted(&covered_runs, Ok(())));
    let own = waiter(&commit, late, counted(&late_runs, Ok(())));
    end.send(Ok(())).expect("the leader waits");
    assert_eq!(leader.join().expect("leader"), Ok(()));
    assert_eq!(covered.join().expect("covered"), Ok(()));
    assert_eq!(own.join().expect("late"), Ok(()));
    assert_eq!(
        covered_runs.load(Ordering::SeqCst),
        0,
        "covered: no sync of its own"
    );
    assert_eq!(
        late_runs.load(Ordering::SeqCst),
        1,
        "applied after: a sync of its own"
    );
    assert_eq!(commit.syncs(), 2);
    // Covered already: returns at once.
    assert_eq!(commit.wait(second, || panic!("synced again")), Ok(()));
}

#[test]
fn a_failed_sync_fails_every_write_it_was_to_cover_even_after_a_later_one_succeeds() {
    let disk = || StoreError::Backend("store: fsync: I/O error".to_owned());
    let commit = Arc::new(GroupCommit::default());
    let (first, second, third) = (commit.applied(), commit.applied(), commit.applied());
    let (leader, began, end) = slow_leader(&commit, first);
    began.recv().expect("the sync began");
    let runs = Arc::new(AtomicU64::new(0));
    let follower = waiter(&commit, second, counted(&runs, Ok(())));
    end.send(Err(disk())).expect("the leader waits");
    assert_eq!(leader.join().expect("leader"), Err(disk()));
    assert_eq!(follower.join().expect("follower"), Err(disk()));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "no sync of its own");
    // A write applied after the failed sync began gets a sync of its own, which succeeds;
    // the third write, applied before it began and asking only now, still gets its failure.
    let fourth = commit.applied();
    assert_eq!(commit.wait(fourth, counted(&runs, Ok(()))), Ok(()));
    assert_eq!(commit.wait(third, counted(&runs, Ok(()))), Err(disk()));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(commit.syncs(), 2);
}

#[test]
fn one_writer_at_a_time_syncs_each_write() {
    let commit = GroupCommit::default();
    let runs = Arc::new(AtomicU64::new(0));
    for _ in 0..5 {
        let seq = commit.applied();
        assert_eq!(commit.wait(seq, counted(&runs, Ok(()))), Ok(()));
    }
    assert_eq!((runs.load(Ordering::SeqCst), commit.syncs()), (5, 5));
}

#[test]
fn under_answer_writes_wait_for_no_sync_and_a_settle_syncs_them_all_at_once() {
    let dir = temp_dir("embedded-answer");
    let store = embedded::open(&dir, Durability::Answer).expect("open");
    for n in 0..20u64 {
        store.set(&format!("k{n:08}"), &value(n)).expect("set");
    }
    assert_eq!(store.compare_and_swap("k00000000", None, b"no"), Ok(false));
    assert_eq!(store.syncs(), 0, "no write waited for a sync");
    store.settle().expect("settle");
    assert_eq!(store.syncs(), 1, "one sync for 21 writes");
    store.settle().expect("settle");
    assert_eq!(store.syncs(), 1, "nothing new: nothing to sync");
    store.delete("k00000001").expect("delete");
    store.settle().expect("settle");
    assert_eq!(store.syncs(), 2);
    drop(store);
    let store = open(&dir);
    assert_eq!(store.get("k00000019"), Ok(Some(value(19))));
    assert_eq!(store.get("k00000001"), Ok(None));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn settles_in_flight_share_syncs_and_every_write_survives_a_reopen() {
    const THREADS: u64 = 8;
    const ROUNDS: u64 = 20;
    let dir = temp_dir("embedded-answer-group");
    let store = embedded::open(&dir, Durability::Answer).expect("open");
    let start = Arc::new(Barrier::new(THREADS as usize));
    let requests: Vec<_> = (0..THREADS)
        .map(|t| {
            let (store, start) = (store.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for round in 0..ROUNDS {
                    // A request: a few writes, then the settle before its answer.
                    for i in 0..5 {
                        let n = (t * ROUNDS + round) * 5 + i;
                        store.set(&format!("r{n:06}"), &value(n)).expect("set");
                    }
                    store.settle().expect("settle");
                }
            })
        })
        .collect();
    for request in requests {
        request.join().expect("request");
    }
    let (settles, syncs) = (THREADS * ROUNDS, store.syncs());
    assert!(syncs < settles, "{syncs} fsyncs for {settles} settles");
    drop(store);
    let store = open(&dir);
    for n in 0..THREADS * ROUNDS * 5 {
        assert_eq!(
            store.get(&format!("r{n:06}")),
            Ok(Some(value(n))),
            "write {n}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_barrier_syncs_what_was_applied_before_it_and_nothing_twice() {
    let commit = Arc::new(GroupCommit::default());
    assert_eq!(commit.barrier(|| panic!("nothing applied")), Ok(()));
    commit.applied();
    let (began_tx, began) = mpsc::channel();
    let (end, end_rx) = mpsc::channel::<StoreResult<()>>();
    let slow = {
        let commit = commit.clone();
        std::thread::spawn(move || {
            commit.barrier(move || {
                began_tx.send(()).expect("test waits");
                end_rx.recv().expect("an outcome")
            })
        })
    };
    began.recv().expect("the sync began");
    commit.applied();
    let runs = Arc::new(AtomicU64::new(0));
    let late = {
        let (commit, sync) = (commit.clone(), counted(&runs, Ok(())));
        std::thread::spawn(move || commit.barrier(sync))
    };
    end.send(Ok(())).expect("the leader waits");
    assert_eq!(slow.join().expect("slow"), Ok(()));
    assert_eq!(late.join().expect("late"), Ok(()));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "applied after the first began: its own"
    );
    assert_eq!(commit.barrier(|| panic!("synced again")), Ok(()));
    assert_eq!(commit.syncs(), 2);
}

#[test]
fn after_a_failed_sync_every_barrier_fails() {
    let disk = || StoreError::Backend("store: fsync: I/O error".to_owned());
    let commit = GroupCommit::default();
    commit.applied();
    assert_eq!(commit.barrier(|| Err(disk())), Err(disk()));
    assert_eq!(
        commit.barrier(|| panic!("covered")),
        Err(disk()),
        "nothing new"
    );
    commit.applied();
    let runs = Arc::new(AtomicU64::new(0));
    assert_eq!(
        commit.barrier(counted(&runs, Ok(()))),
        Err(disk()),
        "a later one succeeds"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// `serve` runs the store behind its metrics (`KvStore::metered`): the settle of
/// `Durability::Answer` must reach the store through them.
#[test]
fn the_metered_store_settles_as_the_store_beneath() {
    let dir = temp_dir("embedded-metered");
    let store = embedded::open(&dir, Durability::Answer).expect("open");
    let metrics = Arc::new(edgehook_runtime::metrics::Metrics::new());
    let KvStore::Local(metered) = KvStore::Local(Arc::new(store.clone())).metered(metrics) else {
        panic!("a local store stays local");
    };
    assert!(metered.settles());
    metered.set("k", b"v").expect("set");
    assert_eq!(store.syncs(), 0);
    metered.settle().expect("settle");
    assert_eq!(store.syncs(), 1, "the settle reached the store");
    drop((metered, store));
    let _ = std::fs::remove_dir_all(&dir);
}
