//! Footprint: the embedded file store's bytes on disk per subscription and per delivery
//! record, and the process's resident memory as they grow (issue #28, point 5).
//!
//! The real `serve` path: `edgehook serve`'s `Server` in this process over the file store in
//! a fresh directory (fsynced every 100 ms, as `serve` runs it), real outbound HTTP to a
//! loopback receiver answering 200. Subscriptions are created through the API
//! (`Runtime::handle`, the component's own request handling, as the other sections do) in
//! clients of 1,000; events are published through `serve`'s ingest over HTTP, so every
//! delivery record is the component's own, with its attempt. 100 subscriptions listen to
//! `load.created`, which is the only type published (fan-out 100); the rest listen to the
//! other two types and are never delivered to.
//!
//! At each checkpoint, once the receiver has every attempt and the store has stopped changing
//! (its key count and live bytes the same for a second): the process's `VmRSS` (and, to
//! stderr, its anonymous and file parts, its largest anonymous mappings, and the live heap by
//! size class from the bench's allocator, [`crate::heap`]), the store's
//! own accounting ([`StoreStats`]), the log file as it stands, then the log after a forced
//! compaction ([`FileStore::compact`], what the store does by itself at 4x the live data) and
//! its size on disk, and the live bytes by kind of key (listed to stderr). Per subscription
//! and per delivery record are differences between checkpoints, so what the empty store and
//! the earlier phase hold is not counted; an event's record and body are shared by its 100
//! deliveries and counted in the per-delivery figure (their bytes divided by the deliveries).
//!
//! Baselines, same run: the process's RSS before the store is opened, and with the empty store
//! open and `serve` running.

use crate::load::plain_server;
use crate::measure::proc_status_bytes;
use crate::procmem::{mappings, pool_rss, rss, top_anonymous};
use crate::setup::{create, issue_key, served};
use crate::table::Row;
use anyhow::{Context as _, Result, ensure};
use bytes::Bytes;
use edgehook::serve::Server;
use edgehook_runtime::Runtime;
use edgehook_runtime::filestore::{FileStore, LOG_FILE, StoreStats, SyncPolicy};
use edgehook_runtime::store::{KvBackend, KvStore, MemoryStore};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Subscriptions that listen to the published type: the fan-out.
const FANOUT: usize = 100;
/// Subscriptions per client (each client has its key, its lists and counters).
const PER_CLIENT: usize = 1000;
/// The type published; the other subscriptions listen to the other two.
const PUBLISHED: &str = "load.created";
/// The target: bytes on disk per delivery record.
const DISK_TARGET: f64 = 1024.0;
/// RSS growth per delivery record counted as not growing (900,000 records x 8 B = 7 MiB,
/// within the allocator's own noise).
const RSS_FLAT: f64 = 8.0;

/// What was measured at one checkpoint.
struct Checkpoint {
    subscriptions: usize,
    deliveries: usize,
    rss: u64,
    /// Of `rss`, the anonymous memory (heap, stacks, the instances' memories) and the
    /// file pages mapped (the compiled component, the program).
    rss_anon: u64,
    rss_file: u64,
    /// The live heap by size class (the bench's allocator's account).
    heap: crate::heap::Snapshot,
    /// Of `rss`, what the instance pool's reservation holds resident (its slots keep up to
    /// 2 MiB of each memory they ran mapped: it grows with the most instances run at once).
    pool_rss: u64,
    /// The largest resident anonymous mappings: (size, resident bytes).
    top: Vec<(u64, u64)>,
    stats: StoreStats,
    /// The log file's length before the forced compaction.
    log_file: u64,
    /// The log file's length after it, and the blocks it takes on disk.
    compacted: u64,
    allocated: u64,
    /// How long the forced compaction took.
    compact_secs: f64,
    /// The longest a store read waited while it ran (the lock is held only at its start and
    /// end).
    read_wait_ms: f64,
    /// Live keys and bytes (key + value + 17 framing) by kind of key.
    kinds: BTreeMap<String, (u64, u64)>,
}

/// The section: subscriptions to 10,000 and 100,000, then delivery records to 100,000,
/// 500,000 and 1,000,000 (`quick`: a hundredth of each).
pub async fn footprint(quick: bool) -> Result<Vec<Row>> {
    let scale = if quick { 100 } else { 1 };
    let sub_steps: Vec<usize> = [10_000, 100_000].iter().map(|n| n / scale).collect();
    // `EDGEHOOK_BENCH_FOOTPRINT_STEPS=100000,500000,1000000,2000000`: other checkpoints (a
    // longer run shows whether RSS levels off once the working set has filled).
    let delivery_steps: Vec<usize> = match std::env::var("EDGEHOOK_BENCH_FOOTPRINT_STEPS") {
        Ok(list) => list
            .split(',')
            .map(|n| {
                n.trim()
                    .parse::<usize>()
                    .context("EDGEHOOK_BENCH_FOOTPRINT_STEPS")
            })
            .collect::<Result<_>>()?,
        Err(_) => [100_000, 500_000, 1_000_000]
            .iter()
            .map(|n| n / scale)
            .collect(),
    };
    let rss_before = rss()?;
    crate::ALLOCATOR.start();
    let dir = edgehook_testkit::try_temp_dir("bench-footprint")?;
    let store = Arc::new(FileStore::open(
        &dir,
        SyncPolicy::Every(Duration::from_millis(100)),
    )?);
    // `EDGEHOOK_BENCH_FOOTPRINT_CACHE=<bytes>`: the value cache's budget (0: off), to see
    // what it adds.
    if let Some(bytes) = std::env::var("EDGEHOOK_BENCH_FOOTPRINT_CACHE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        store.set_cache_bytes(bytes);
    }
    let e = served(KvStore::Local(store.clone()))?;
    let hits = Arc::new(AtomicUsize::new(0));
    let receiver = plain_server(Bytes::from_static(b"ok"), hits.clone()).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let server = Server::new(e.clone())?.with_shutdown_grace(Duration::from_secs(1));
    let running = tokio::spawn(server.run(listener, stop_rx));
    let rt = Runtime::embedded()?;
    // The empty store, with serve and the receiver running and the component compiled.
    let empty = checkpoint(&store, &dir, 0, 0).await?;
    let mut points = vec![empty];

    let started = Instant::now();
    let mut created = 0usize;
    for &target in &sub_steps {
        while created < target {
            let client = created / PER_CLIENT;
            let n = PER_CLIENT.min(target - created);
            let key = issue_key(rt, &e, &format!("c{client}")).await?;
            let mut tasks = Vec::new();
            // Two at a time: the runtime has two workers.
            for half in 0..2 {
                let (e, key) = (e.clone(), key.clone());
                let range = (created + half..created + n).step_by(2);
                tasks.push(tokio::spawn(async move {
                    for i in range {
                        let (url, event) = if i < FANOUT {
                            (format!("http://127.0.0.1:{receiver}/s{i}"), PUBLISHED)
                        } else if i % 2 == 0 {
                            (format!("https://o{i}.example.com/x"), "load.updated")
                        } else {
                            (format!("https://o{i}.example.com/x"), "load.status_changed")
                        };
                        create(rt, &e, &key, &url, event).await?;
                    }
                    Ok::<_, anyhow::Error>(())
                }));
            }
            for t in tasks {
                t.await??;
            }
            created += n;
        }
        settle(&store, &hits, 0).await?;
        points.push(checkpoint(&store, &dir, created, 0).await?);
    }
    let create_secs = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut published = 0usize;
    for &target in &delivery_steps {
        let events = target / FANOUT;
        publish(port, published..events, &hits).await?;
        published = events;
        settle(&store, &hits, published * FANOUT).await?;
        points.push(checkpoint(&store, &dir, created, published * FANOUT).await?);
    }
    let delivery_rate = (published * FANOUT) as f64 / started.elapsed().as_secs_f64();
    for (i, p) in points.iter().enumerate() {
        report(p, &points[0], &points[i.saturating_sub(1)]);
    }
    let mut rows = rows(&points, rss_before, create_secs, delivery_rate);
    rows.push(read_cost(&store)?);
    let _ = stop.send(true);
    let _ = running.await;
    drop((e, store));
    let last = points.last().map_or(0, |p| p.compacted);
    rows.extend(reopen(&dir, last).await?);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}

/// What a store read costs: the mean of `get` over up to 10,000 delivery records (their keys
/// listed from `dlv:` on), ten rounds, against the in-memory store's `get` of the same keys
/// and values, timed the same way.
fn read_cost(store: &FileStore) -> Result<Row> {
    let keys = store
        .list_keys(Some("dlv:"), 10_000)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let memory = MemoryStore::new();
    for (k, v) in keys.iter().zip(
        store
            .get_many(&keys)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?,
    ) {
        memory
            .set(k, &v.unwrap_or_default())
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    let mean_ns = |kv: &dyn KvBackend| -> Result<f64> {
        let started = Instant::now();
        for _ in 0..10 {
            for k in &keys {
                std::hint::black_box(kv.get(k).map_err(|e| anyhow::anyhow!("{e:?}"))?);
            }
        }
        Ok(started.elapsed().as_nanos() as f64 / (10 * keys.len().max(1)) as f64)
    };
    let baseline = mean_ns(&memory)?;
    let ours = mean_ns(store)?;
    Ok(Row {
        name: format!(
            "footprint: store get of a delivery record, mean of {} (vs in memory)",
            keys.len()
        ),
        value: ours,
        unit: "ns",
        baseline: Some(baseline),
        target: "-".into(),
        met: None,
    })
}

/// A restart: the store closed, then opened again on its (compacted) log of `log_bytes`;
/// the process's RSS before and after, the most it was resident while opening (`VmHWM`,
/// reset first through `/proc/self/clear_refs`), and how long the open took. In process, so
/// the allocator may reuse what the closed store freed: the figures show what opening adds
/// beyond that (a log read whole would add its size), not a fresh process's total.
async fn reopen(dir: &Path, log_bytes: u64) -> Result<Vec<Row>> {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    // The server's last tasks let go of the store as they end.
    let started = Instant::now();
    let before = rss()?;
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let opened = Instant::now();
    let store = loop {
        match FileStore::open(dir, SyncPolicy::Every(Duration::from_millis(100))) {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                ensure!(started.elapsed() < Duration::from_secs(30), "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    let secs = opened.elapsed().as_secs_f64();
    let after = rss()?;
    let peak = proc_status_bytes("VmHWM").unwrap_or(0);
    let keys = store.len();
    drop(store);
    let row = Row::reported;
    Ok(vec![
        row(
            format!("footprint: restart: RSS once open, {keys} keys (vs closed)"),
            mib(after),
            "MiB",
            Some(mib(before)),
        ),
        row(
            format!(
                "footprint: restart: peak RSS opening a {:.0} MiB log (vs closed)",
                mib(log_bytes)
            ),
            mib(peak),
            "MiB",
            Some(mib(before)),
        ),
        row(
            "footprint: restart: time to open (replay the log)".into(),
            secs,
            "s",
            None,
        ),
    ])
}

/// Publishers, each on a keep-alive connection of its own.
const PUBLISHERS: usize = 4;
/// Events published but not yet delivered (all their attempts received) at most: `serve`
/// answers 503 when every instance is busy for 2 s, which an unbounded backlog of
/// deliveries makes happen, so the events are fed at the rate they are delivered.
/// `EDGEHOOK_BENCH_FOOTPRINT_IN_FLIGHT` sets another number (how much RSS moves with the
/// attempts in flight, not with the records).
const IN_FLIGHT_EVENTS: usize = 30;

fn in_flight_events() -> usize {
    std::env::var("EDGEHOOK_BENCH_FOOTPRINT_IN_FLIGHT")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(IN_FLIGHT_EVENTS)
}

/// Publishes events `range` (type [`PUBLISHED`], load `{"id":"L<i>",...}`) to `serve`'s
/// ingest, at most [`IN_FLIGHT_EVENTS`] ahead of the deliveries the receiver has counted; an
/// event answered 503 (not accepted: nothing was stored) is sent again after a pause.
async fn publish(port: u16, range: std::ops::Range<usize>, hits: &Arc<AtomicUsize>) -> Result<()> {
    let next = Arc::new(AtomicUsize::new(range.start));
    let ahead = in_flight_events() * FANOUT;
    let mut tasks = Vec::new();
    for _ in 0..PUBLISHERS {
        let (next, hits, end) = (next.clone(), hits.clone(), range.end);
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
            let _ = stream.set_nodelay(true);
            let (mut send, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    return Ok::<_, anyhow::Error>(());
                }
                while hits.load(Ordering::Relaxed) + ahead < i * FANOUT {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                loop {
                    send.ready().await?;
                    let resp = send.send_request(event(i)).await?;
                    let status = resp.status();
                    resp.into_body().collect().await?;
                    if status.is_success() {
                        break;
                    }
                    ensure!(status.as_u16() == 503, "publish: {status}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Event `i` as published.
fn event(i: usize) -> http::Request<Full<Bytes>> {
    http::Request::post("/internal/v1/events")
        .header("host", "127.0.0.1")
        .header("authorization", "Bearer bench")
        .header("content-type", "application/json")
        .header("x-service-event", PUBLISHED)
        .body(Full::new(Bytes::from(format!(
            r#"{{"id":"L{i}","status":"ASSIGNED","eligibleForTracking":true}}"#
        ))))
        .expect("request")
}

/// Waits for `want` attempts at the receiver, then for the store to stop changing: its key
/// count and live bytes the same for a second (an attempt's outcome is written after the
/// receiver answers it).
async fn settle(store: &FileStore, hits: &AtomicUsize, want: usize) -> Result<()> {
    let started = Instant::now();
    let cap = Duration::from_secs(1800);
    while hits.load(Ordering::Relaxed) < want {
        ensure!(started.elapsed() < cap, "deliveries did not complete");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let figures = || {
        let s = store.stats();
        (s.keys, s.live_bytes)
    };
    let (mut last, mut since) = (figures(), Instant::now());
    while since.elapsed() < Duration::from_secs(1) {
        ensure!(started.elapsed() < cap, "the store did not settle");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = figures();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    Ok(())
}

/// Measures a settled store: RSS first (before this function's own reads allocate), the
/// store's accounting, the log as it stands, then compacted, then the live bytes by kind.
async fn checkpoint(
    store: &FileStore,
    dir: &Path,
    subscriptions: usize,
    deliveries: usize,
) -> Result<Checkpoint> {
    let rss = rss()?;
    let rss_anon = proc_status_bytes("RssAnon").unwrap_or(0);
    let rss_file = proc_status_bytes("RssFile").unwrap_or(0);
    let heap = crate::ALLOCATOR.snapshot();
    let maps = mappings();
    let pool_rss = pool_rss(&maps);
    let top = top_anonymous(&maps, 8);
    let stats = store.stats();
    let log = dir.join(LOG_FILE);
    let log_file = std::fs::metadata(&log)?.len();
    let compacting = Instant::now();
    // A reader beside it: the longest one read waits is how long the lock was held.
    let done = std::sync::atomic::AtomicBool::new(false);
    let (compacted, read_wait) = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut longest = std::time::Duration::ZERO;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let asked = Instant::now();
                let _ = std::hint::black_box(store.get("health"));
                longest = longest.max(asked.elapsed());
            }
            longest
        });
        let compacted = store.compact();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (compacted, reader.join().unwrap_or_default())
    });
    compacted.map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let compact_secs = compacting.elapsed().as_secs_f64();
    let read_wait_ms = read_wait.as_secs_f64() * 1e3;
    let meta = std::fs::metadata(&log)?;
    let mut kinds: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let keys = store
            .list_keys(cursor.as_deref(), 10_000)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let Some(last) = keys.last().cloned() else {
            break;
        };
        let values = store
            .get_many(&keys)
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        for (k, v) in keys.iter().zip(values) {
            let size = (k.len() + v.map_or(0, |v| v.len()) + 17) as u64;
            let entry = kinds.entry(kind(k)).or_default();
            entry.0 += 1;
            entry.1 += size;
        }
        cursor = Some(last);
    }
    Ok(Checkpoint {
        subscriptions,
        deliveries,
        rss,
        rss_anon,
        rss_file,
        heap,
        pool_rss,
        top,
        stats,
        log_file,
        compacted: meta.len(),
        allocated: meta.blocks() * 512,
        compact_secs,
        read_wait_ms,
        kinds,
    })
}

/// The kind of a key, for the breakdown: its first segment (`dlv`, `sub`, `evt`, ...); a
/// client's keys by what they are (`client:subs`, `client:keys`, ...); event bodies apart.
fn kind(key: &str) -> String {
    let mut parts = key.split(':');
    let first = parts.next().unwrap_or_default();
    match first {
        "client" => format!("client:{}", parts.nth(1).unwrap_or_default()),
        "evt" if key.ends_with(":body") => "evt:body".into(),
        _ => first.into(),
    }
}

/// Prints a checkpoint's figures and its breakdown to stderr.
/// One checkpoint on stderr, with the live heap since `empty` and its change by size class
/// since `prev`.
fn report(p: &Checkpoint, empty: &Checkpoint, prev: &Checkpoint) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mibi = |b: i64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "footprint: {} delivery records: RSS anonymous {:.1} MiB, file {:.1} MiB; live heap \
         {:+.1} MiB since the empty store, {:+.1} MiB since the last checkpoint",
        p.deliveries,
        mib(p.rss_anon),
        mib(p.rss_file),
        mibi(p.heap.bytes_since(&empty.heap)),
        mibi(p.heap.bytes_since(&prev.heap)),
    );
    for (size, rss) in &p.top {
        eprintln!(
            "  anonymous mapping of {:>10.1} MiB: {:>7.1} MiB resident",
            mib(*size),
            mib(*rss)
        );
    }
    for (size, blocks, bytes) in p.heap.since(&prev.heap, 1 << 20) {
        eprintln!(
            "  heap blocks <= {size:>9} B: {blocks:+9} blocks {:+8.1} MiB",
            mibi(bytes)
        );
    }
    eprintln!(
        "footprint: {} subscriptions, {} delivery records: RSS {:.1} MiB (instance pool {:.1}); \
         store {} keys, \
         live {:.1} MiB (keys {:.1} MiB; index file {:.1} MiB, {} recent keys in memory; \
         cache {:.1} MiB); log {:.1} MiB, \
         compacted {:.1} MiB ({:.1} MiB allocated) in {:.2} s, a read waiting {:.1} ms at most",
        p.subscriptions,
        p.deliveries,
        mib(p.rss),
        mib(p.pool_rss),
        p.stats.keys,
        mib(p.stats.live_bytes),
        mib(p.stats.key_bytes),
        mib(p.stats.index_bytes),
        p.stats.recent_keys,
        mib(p.stats.cache_bytes),
        mib(p.log_file),
        mib(p.compacted),
        mib(p.allocated),
        p.compact_secs,
        p.read_wait_ms,
    );
    for (kind, (keys, bytes)) in &p.kinds {
        eprintln!("  {kind:<20} {keys:>9} keys {bytes:>12} B");
    }
}

/// Live bytes of the kinds `pick` selects.
fn bytes_of(p: &Checkpoint, pick: impl Fn(&str) -> bool) -> u64 {
    p.kinds
        .iter()
        .filter(|(k, _)| pick(k))
        .map(|(_, (_, b))| b)
        .sum()
}

/// The table's rows.
fn rows(points: &[Checkpoint], rss_before: u64, create_secs: f64, rate: f64) -> Vec<Row> {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let row = Row::reported;
    let empty = &points[0];
    let subs: Vec<&Checkpoint> = points.iter().filter(|p| p.deliveries == 0).collect();
    let dels: Vec<&Checkpoint> = points.iter().filter(|p| p.deliveries > 0).collect();
    let full_subs = subs.last().copied().unwrap_or(empty);
    let mut rows = vec![
        row(
            "footprint: RSS before the store is opened".into(),
            mib(rss_before),
            "MiB",
            None,
        ),
        row(
            "footprint: RSS, empty store, serve running (vs before)".into(),
            mib(empty.rss),
            "MiB",
            Some(mib(rss_before)),
        ),
    ];
    for p in subs.iter().skip(1) {
        rows.push(row(
            format!(
                "footprint: RSS at {} subscriptions (vs empty store)",
                p.subscriptions
            ),
            mib(p.rss),
            "MiB",
            Some(mib(empty.rss)),
        ));
    }
    let n_subs = full_subs.subscriptions.max(1) as f64;
    let per_sub_disk = full_subs.compacted.saturating_sub(empty.compacted) as f64 / n_subs;
    let sub_record = bytes_of(full_subs, |k| k == "sub") as f64 / n_subs;
    rows.push(row(
        format!(
            "footprint: disk per subscription, compacted, 0-{} (vs its sub: record)",
            full_subs.subscriptions
        ),
        per_sub_disk,
        "B",
        Some(sub_record),
    ));
    rows.push(row(
        "footprint: RSS per subscription (vs its disk)".into(),
        full_subs.rss.saturating_sub(empty.rss) as f64 / n_subs,
        "B",
        Some(per_sub_disk),
    ));
    for p in &dels {
        rows.push(row(
            format!(
                "footprint: RSS at {} delivery records (vs none)",
                p.deliveries
            ),
            mib(p.rss),
            "MiB",
            Some(mib(full_subs.rss)),
        ));
        rows.push(row(
            format!(
                "footprint: log at {} delivery records, as written (vs compacted)",
                p.deliveries
            ),
            mib(p.log_file),
            "MiB",
            Some(mib(p.compacted)),
        ));
    }
    if let (Some(first), Some(last)) = (dels.first(), dels.last()) {
        let n = last.deliveries as f64;
        let per = |pick: &dyn Fn(&str) -> bool| {
            bytes_of(last, pick).saturating_sub(bytes_of(full_subs, pick)) as f64 / n
        };
        let disk = last.compacted.saturating_sub(full_subs.compacted) as f64 / n;
        let record = per(&|k| k == "dlv");
        let mut r = row(
            format!(
                "footprint: disk per delivery record, compacted, all keys, 0-{} (vs dlv: alone)",
                last.deliveries
            ),
            disk,
            "B",
            Some(record),
        );
        r.target = "<= 1 KiB".into();
        r.met = Some(disk <= DISK_TARGET);
        rows.push(r);
        let evt = per(&|k| k == "evt" || k == "evt:body");
        let history = per(&|k| k == "subdlv");
        rows.extend([
            row(
                "footprint: .. of which the delivery record, dlv:".into(),
                record,
                "B",
                None,
            ),
            row(
                format!("footprint: .. the event's record and body, evt:, / {FANOUT}"),
                evt,
                "B",
                None,
            ),
            row(
                "footprint: .. the history lists, subdlv:".into(),
                history,
                "B",
                None,
            ),
            row(
                "footprint: .. the rest (queue, retention, counters)".into(),
                disk - record - evt - history,
                "B",
                None,
            ),
        ]);
        if let [.., before, end] = dels[..]
            && dels.len() > 2
        {
            let stretch = (end.deliveries - before.deliveries).max(1) as f64;
            rows.push(row(
                format!(
                    "footprint: RSS growth per delivery record, {}-{} (the last stretch)",
                    before.deliveries, end.deliveries
                ),
                (end.rss as f64 - before.rss as f64) / stretch,
                "B",
                None,
            ));
        }
        let span = (last.deliveries - first.deliveries).max(1) as f64;
        let judged = |name: String, growth: f64| {
            let mut r = row(name, growth / span, "B", Some(disk));
            r.target = format!("~0 (<= {RSS_FLAT} B)");
            r.met = Some(growth / span <= RSS_FLAT);
            r
        };
        rows.push(judged(
            format!(
                "footprint: RSS growth per delivery record, {}-{} (vs its disk)",
                first.deliveries, last.deliveries
            ),
            last.rss as f64 - first.rss as f64,
        ));
        // The same without the instance pool's resident slots, which grow with the most
        // instances run at once (the load's shape), not with the records.
        let outside = |p: &Checkpoint| p.rss as f64 - p.pool_rss as f64;
        rows.push(judged(
            format!(
                "footprint: .. outside the instance pool (pool {:.1} -> {:.1} MiB)",
                first.pool_rss as f64 / (1 << 20) as f64,
                last.pool_rss as f64 / (1 << 20) as f64
            ),
            outside(last) - outside(first),
        ));
        // What the program holds (the allocator's account of live blocks), apart from what
        // the allocator keeps resident around them.
        rows.push(row(
            "footprint: live heap growth per delivery record (vs its disk)".into(),
            last.heap.bytes_since(&first.heap) as f64 / span,
            "B",
            Some(disk),
        ));
        // The key index: its base file (on disk; memory holds a block's first key each).
        let index = |p: &Checkpoint| p.stats.index_bytes as f64;
        rows.push(row(
            "footprint: the key index's file per delivery record (vs disk)".into(),
            (index(last) - index(full_subs)) / n,
            "B",
            Some(disk),
        ));
    }
    rows.push(row(
        format!(
            "footprint: subscriptions created/s ({} in {create_secs:.0} s)",
            full_subs.subscriptions
        ),
        full_subs.subscriptions as f64 / create_secs,
        "s/s",
        None,
    ));
    rows.push(row(
        "footprint: deliveries/s while filling".into(),
        rate,
        "d/s",
        None,
    ));
    if let Some(last) = points.last() {
        rows.push(row(
            format!(
                "footprint: forced compaction at {} records",
                last.stats.keys
            ),
            last.compact_secs,
            "s",
            None,
        ));
        rows.push(row(
            "footprint: longest store read during it (vs the compaction)".into(),
            last.read_wait_ms,
            "ms",
            Some(last.compact_secs * 1e3),
        ));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_grouped_by_what_they_hold() {
        assert_eq!(kind("dlv:abc"), "dlv");
        assert_eq!(kind("evt:abc:body"), "evt:body");
        assert_eq!(kind("evt:abc"), "evt");
        assert_eq!(kind("client:c1:subs:0"), "client:subs");
        assert_eq!(kind("client:c1:live"), "client:live");
        assert_eq!(kind("duedir"), "duedir");
        assert_eq!(kind("subdlv:s1:3"), "subdlv");
    }
}
