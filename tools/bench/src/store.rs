//! The embedded store under `serve` (opt-in: `edgehook-bench store`). This is the section
//! the store's engine was chosen by (BENCHMARKS.md, "The embedded store"), run then once per
//! engine in alternating rounds. In order:
//!
//! - in a process that has run nothing else, delivery records made by the component at
//!   fan-out 100 until the store holds 1,000,000 (`EDGEHOOK_BENCH_ENGINE_RECORDS`; `quick`:
//!   10,000): bytes on disk per record (the blocks the store's files take, as `du` counts
//!   them), the process's RSS and live heap then, and the restart (the store closed, opened
//!   again, its first key read);
//! - signed deliveries/s sustained at fan-out 1, 33 and 100 (`serve` over loopback, events
//!   published as fast as 32 connections go, to a loopback receiver answering 200);
//! - latency under a steady rate at **60 % of the deliveries/s this store sustained at
//!   fan-out 33 in the same run** (the latency section's open model: 100 subscriptions over
//!   the three types, 33 deliveries an event; 60 s, `quick`: 3 s), judged at p99 <= 25 ms;
//! - create and list against `/healthz` (the serve section's rows).

use crate::latency;
use crate::load::plain_server;
use crate::procmem::rss;
use crate::serve::{api_against_healthz, sustained};
use crate::setup::{durable_store, open_store};
use crate::table::Row;
use anyhow::{Context as _, Result};
use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

/// The share of the sustained rate the latency run is judged at.
const SHARE: f64 = 0.6;
/// Deliveries an event in the latency run: 100 subscriptions over three types.
const PER_EVENT: f64 = 100.0 / 3.0;

/// The section.
pub async fn store(quick: bool) -> Result<Vec<Row>> {
    let hits = Arc::new(AtomicUsize::new(0));
    let receiver = plain_server(Bytes::from_static(b"ok"), hits.clone()).await?;
    let total = if quick { 1_000 } else { 20_000 };
    // First, while the process holds nothing else: its RSS is then the store's and serve's.
    let mut rows = records(quick, receiver, &hits).await?;
    let mut at_33 = 0.0;
    for fanout in [1, 33, 100] {
        let kv = durable_store(&format!("store-{fanout}"))?;
        let (rate, cpu, _) = sustained(kv, fanout, total, receiver, &hits).await?;
        if fanout == 33 {
            at_33 = rate;
        }
        rows.push(Row::reported(
            format!("store: deliveries/s, fan-out {fanout} (CPU {cpu:.0} us a delivery)"),
            rate,
            "d/s",
            None,
        ));
    }
    let secs = if quick { 3 } else { 60 };
    for share in shares()? {
        let events = share * at_33 / PER_EVENT;
        let latency = latency::at_rate(events, Duration::from_secs(secs)).await?;
        let pct = (share * 100.0).round();
        rows.extend(latency.into_iter().map(|mut r| {
            r.name = format!("store: {} at {pct} %", r.name);
            r
        }));
    }
    let api = api_against_healthz(Duration::from_secs(if quick { 1 } else { 5 }), 32).await?;
    rows.extend(api.into_iter().map(|mut r| {
        r.name = format!("store: {}", r.name);
        r
    }));
    Ok(rows)
}

/// The shares of the sustained rate the latency run is made at: [`SHARE`], or the
/// comma-separated list in `EDGEHOOK_BENCH_STORE_SHARES` (e.g. `0.6,0.4,0.2`, to find the
/// share a build holds the p99 target at).
fn shares() -> Result<Vec<f64>> {
    let Ok(list) = std::env::var("EDGEHOOK_BENCH_STORE_SHARES") else {
        return Ok(vec![SHARE]);
    };
    list.split(',')
        .map(|s| {
            s.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| *x > 0.0 && *x <= 1.0)
                .with_context(|| {
                    format!("EDGEHOOK_BENCH_STORE_SHARES: {s:?} is no share in (0, 1]")
                })
        })
        .collect()
}

/// Delivery records made at fan-out 100 until the store holds the section's count: bytes
/// on disk per record, RSS, and the restart.
async fn records(quick: bool, receiver: u16, hits: &AtomicUsize) -> Result<Vec<Row>> {
    let want: usize = match std::env::var("EDGEHOOK_BENCH_ENGINE_RECORDS") {
        Ok(n) => n.parse().context("EDGEHOOK_BENCH_ENGINE_RECORDS")?,
        Err(_) if quick => 10_000,
        Err(_) => 1_000_000,
    };
    let dir = edgehook_testkit::try_temp_dir("bench-store-records")?;
    let rss_before = rss()?;
    crate::ALLOCATOR.start();
    let heap_before = crate::ALLOCATOR.snapshot();
    let kv = open_store(&dir)?;
    // 100 subscriptions set up, nothing delivered: what the records add is measured from here.
    let empty = edgehook_runtime::embedded::disk_bytes(&dir)?;
    let started = Instant::now();
    let (_, _, rss_full) = sustained(kv, 100, want, receiver, hits).await?;
    let heap_now = crate::ALLOCATOR.snapshot();
    let heap = heap_now.bytes_since(&heap_before);
    for (size, blocks, bytes) in heap_now.since(&heap_before, 1 << 20) {
        eprintln!("store: live heap in blocks of up to {size} B: {blocks:+}, {bytes:+} B");
    }
    let made = started.elapsed();
    // `sustained` stopped its server, and the store's last handle went with it.
    let disk = edgehook_runtime::embedded::disk_bytes(&dir)?;
    let reopen = Instant::now();
    let kv = open_store(&dir)?;
    let first = kv
        .list_keys(None, 1)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    let restart = reopen.elapsed();
    anyhow::ensure!(!first.is_empty(), "the reopened store is empty");
    drop(kv);
    let _ = std::fs::remove_dir_all(&dir);
    let per = (disk.saturating_sub(empty)) as f64 / want as f64;
    Ok(vec![
        Row::reported(
            format!(
                "store: bytes on disk per delivery record at {want} (made in {:.0} s)",
                made.as_secs_f64()
            ),
            per,
            "B",
            None,
        ),
        Row::reported(
            format!(
                "store: RSS at {want} records, live heap +{:.1} MiB (vs before the store was \
                 opened)",
                heap as f64 / 1048576.0
            ),
            rss_full as f64 / 1048576.0,
            "MiB",
            Some(rss_before as f64 / 1048576.0),
        ),
        Row::reported(
            format!("store: restart at {want} records (open, then the first key)"),
            restart.as_secs_f64() * 1000.0,
            "ms",
            None,
        ),
    ])
}
