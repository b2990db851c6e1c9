//! The `peer` section (opt-in; never in the default run nor in CI): edgehook side by side
//! with Svix's open-source server, the same work through each one's own API, on the same
//! machine, to the same loopback receiver, which checks every delivery's signature with the
//! scheme of the system that sent it (a delivery that does not verify fails the section).
//!
//! - `edgehook serve` ([`systems::start_edgehook`]): its default embedded store, a process
//!   of its own;
//! - Svix ([`systems::start_svix`]): its server built from source at a pinned commit
//!   ([`systems::SVIX_COMMIT`], `$EDGEHOOK_BENCH_SVIX`), a throwaway PostgreSQL cluster and a
//!   Redis queue with persistence, as its docs say for production on one node.
//!
//! Rows, each edgehook's figure with Svix's as the baseline (the ratio is edgehook / Svix;
//! each figure the mean of [`ROUNDS`] rounds in which the two take turns, the first to go
//! swapping every round):
//!
//! - signed deliveries/s at fan-out 1 and 10: a fixed number of deliveries published as
//!   fast as 32 connections go, to the last one received; CPU time per delivery of every
//!   process of the system (Svix's counts PostgreSQL's and Redis'), from `/proc`;
//! - latency from a publish accepted (its 2xx read), and from its scheduled send, to the
//!   first attempt received at each of 10 endpoints, p50, p99 and max, at 100 and 500
//!   events/s for 60 s (an open model: [`traffic::open_model`]);
//! - create-endpoint and list-endpoints (50) requests/s over 32 connections;
//! - each system's memory at the end (proportional set size of all its processes).

mod procs;
mod systems;
mod traffic;

pub use systems::{AS_SERVE, run_as_serve};

use crate::load::{MakeRequest, load};
use crate::table::Row;
use anyhow::{Result, ensure};
use procs::tree_cpu;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use systems::{Api, Group, System};
use traffic::{Receipts, load_of};

/// Rounds each figure is the mean of (`--quick`: 1).
const ROUNDS: usize = 2;
/// Endpoints of the fan-out-10 group, and of each latency event.
const FANOUT: usize = 10;
/// Connections of the closed-loop runs.
const CONNECTIONS: usize = 32;

/// How long and how much, full or `--quick`.
struct Plan {
    rounds: usize,
    deliveries: usize,
    latency_for: Duration,
    drain_cap: Duration,
    api_for: Duration,
}

/// One system's groups: fan-out 1 and 10 (to the receiver), and one listed.
struct Setup {
    one: Group,
    ten: Group,
    listed: Group,
}

/// What one system measured in one round, by row.
#[derive(Default, Clone)]
struct Figures(Vec<f64>);

/// The section. Interrupted (SIGINT, SIGTERM), it stops every process it started before
/// it exits.
pub async fn peer(quick: bool) -> Result<Vec<Row>> {
    let svix_bin = systems::svix_binary()?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        rows = run(&svix_bin, quick) => rows,
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted: every process stopped"),
        _ = term.recv() => anyhow::bail!("terminated: every process stopped"),
    }
}

/// The section's runs, the systems stopped when it returns or is dropped.
async fn run(svix_bin: &std::path::Path, quick: bool) -> Result<Vec<Row>> {
    let plan = match quick {
        true => Plan {
            rounds: 1,
            deliveries: 2_000,
            latency_for: Duration::from_secs(10),
            drain_cap: Duration::from_secs(10),
            api_for: Duration::from_secs(3),
        },
        false => Plan {
            rounds: ROUNDS,
            deliveries: 10_000,
            latency_for: Duration::from_secs(60),
            drain_cap: Duration::from_secs(30),
            api_for: Duration::from_secs(10),
        },
    };
    let (receiver, receipts) = traffic::receiver().await?;
    let edgehook = systems::start_edgehook().await?;
    let svix = systems::start_svix(svix_bin).await?;
    let setups = [
        set_up(&edgehook.api, receiver, &receipts).await?,
        set_up(&svix.api, receiver, &receipts).await?,
    ];
    let systems = [&edgehook, &svix];
    let mut figures = [Vec::new(), Vec::new()];
    for round in 0..plan.rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for s in order {
            let f = measure(systems[s], &setups[s], &receipts, &plan, round).await?;
            figures[s].push(f);
        }
    }
    let memory = systems.map(|s| procs::tree_memory(&s.pids()) as f64 / (1 << 20) as f64);
    ensure!(
        receipts.rejected() == 0,
        "{} deliveries did not verify",
        receipts.rejected()
    );
    Ok(rows(&figures, memory))
}

/// The groups of one system, their endpoints at the receiver registered with their schemes.
async fn set_up(api: &Api, receiver: u16, receipts: &Receipts) -> Result<Setup> {
    let name = api.kind.name();
    let one = api
        .group(&format!("{name}-one"), "load.status_changed")
        .await?;
    let ten = api.group(&format!("{name}-ten"), "load.updated").await?;
    for (group, tag, n) in [(&one, "one", 1), (&ten, "ten", FANOUT)] {
        for j in 0..n {
            let path = format!("/{name}/{tag}/{j}");
            let url = format!("http://127.0.0.1:{receiver}{path}");
            receipts.expect(&path, api.endpoint(group, &url).await?);
        }
    }
    let listed = api.group(&format!("{name}-listed"), "load.created").await?;
    for j in 0..50 {
        api.endpoint(&listed, &format!("http://127.0.0.1:9/listed/{j}"))
            .await?;
    }
    Ok(Setup { one, ten, listed })
}

/// Every figure of one round on `sys`, in the order [`ROWS`] names them. The creates of
/// round `round` go to a group of their own (edgehook caps a client's subscriptions).
async fn measure(
    sys: &System,
    setup: &Setup,
    receipts: &Receipts,
    plan: &Plan,
    round: usize,
) -> Result<Figures> {
    let name = sys.api.kind.name();
    eprintln!("peer: {name}: deliveries ...");
    let mut f = Vec::new();
    for (group, fanout) in [(&setup.one, 1), (&setup.ten, FANOUT)] {
        let (rate, cpu) = deliveries(sys, group, fanout, plan.deliveries, receipts).await?;
        f.extend([rate, cpu]);
    }
    for rate in [100.0, 500.0] {
        eprintln!("peer: {name}: latency at {rate} events/s ...");
        let l = steady(&sys.api, &setup.ten, rate, plan, receipts).await?;
        eprintln!(
            "peer: {name}: {rate} events/s: {} publishes refused, {} deliveries missing at the cap",
            l.refused, l.missing
        );
        f.extend(l.p);
        f.extend(l.from_send);
    }
    eprintln!("peer: {name}: create and list ...");
    let creates = format!("{name}-creates-{round}");
    let group = sys.api.group(&creates, "load.created").await?;
    let (api, n) = (sys.api.clone(), AtomicUsize::new(0));
    let create: MakeRequest = Arc::new(move || {
        let i = n.fetch_add(1, Ordering::Relaxed);
        api.create(&group, &format!("http://127.0.0.1:9/created/{i}"))
    });
    let (api, group) = (sys.api.clone(), setup.listed.clone());
    let list: MakeRequest = Arc::new(move || api.list(&group));
    let port = sys.api.port;
    let create = load(port, CONNECTIONS, plan.api_for, usize::MAX, create).await?;
    let list = load(port, CONNECTIONS, plan.api_for, usize::MAX, list).await?;
    f.extend([create.rps, list.rps]);
    Ok(Figures(f))
}

/// Signed deliveries/s at `fanout`: `total` deliveries' events published as fast as
/// [`CONNECTIONS`] go, timed to the last delivery verified; and the CPU time per delivery
/// of all the system's processes (µs), with its split by part on stderr.
async fn deliveries(
    sys: &System,
    group: &Group,
    fanout: usize,
    total: usize,
    receipts: &Receipts,
) -> Result<(f64, f64)> {
    let name = sys.api.kind.name();
    let events = total.div_ceil(fanout);
    let expected = events * fanout;
    let before = receipts.verified();
    let cpu0: Vec<Duration> = sys.parts.iter().map(|(_, p)| tree_cpu(&[*p])).collect();
    let started = Instant::now();
    let (api, g, n) = (sys.api.clone(), group.clone(), AtomicUsize::new(0));
    let publish: MakeRequest =
        Arc::new(move || api.publish(&g, &load_of(n.fetch_add(1, Ordering::Relaxed))));
    load(sys.api.port, CONNECTIONS, WAIT, events, publish).await?;
    while receipts.verified() - before < expected {
        ensure!(
            started.elapsed() < WAIT,
            "{name}: {} of {expected} deliveries in {WAIT:?} ({} did not verify)",
            receipts.verified() - before,
            receipts.rejected()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = expected as f64 / started.elapsed().as_secs_f64();
    let mut split = Vec::new();
    let mut cpu = 0.0;
    for ((part, pid), at0) in sys.parts.iter().zip(cpu0) {
        let us = (tree_cpu(&[*pid]) - at0).as_secs_f64() * 1e6 / expected as f64;
        split.push(format!("{part} {us:.0}"));
        cpu += us;
    }
    receipts.take_log();
    eprintln!(
        "peer: {name}: fan-out {fanout}: {rate:.0} deliveries/s, CPU per delivery {cpu:.0} us ({})",
        split.join(", ")
    );
    Ok((rate, cpu))
}

/// The most a closed-loop run may take.
const WAIT: Duration = Duration::from_secs(600);

/// The latency run: `rate` events/s to `group` ([`FANOUT`] endpoints) for the plan's time,
/// the deliveries waited for up to the plan's cap after it.
async fn steady(
    api: &Api,
    group: &Group,
    rate: f64,
    plan: &Plan,
    receipts: &Receipts,
) -> Result<traffic::Latency> {
    receipts.take_log();
    let n = (rate * plan.latency_for.as_secs_f64()).round() as usize;
    let (a, g) = (api.clone(), group.clone());
    let make: traffic::MakeEvent = Arc::new(move |i| a.publish(&g, &load_of(i)));
    let before = receipts.verified();
    let (t0, accepted) = traffic::open_model(api.port, rate, n, make).await?;
    let expected = accepted.iter().flatten().count() * FANOUT;
    let cap = Instant::now() + plan.drain_cap;
    while receipts.verified() - before < expected && Instant::now() < cap {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let run = traffic::Run {
        t0,
        rate,
        accepted: &accepted,
    };
    Ok(traffic::latency(
        &run,
        receipts.take_log(),
        receipts.origin,
        FANOUT,
        cap.min(Instant::now()),
    ))
}

/// The rows' names, units, in the order [`measure`] gives the figures.
const ROWS: [(&str, &str); 18] = [
    ("deliveries/s, fan-out 1", "d/s"),
    ("CPU per delivery, fan-out 1, all processes", "us"),
    ("deliveries/s, fan-out 10", "d/s"),
    ("CPU per delivery, fan-out 10, all processes", "us"),
    ("latency 100 ev/s x 10, accepted to received: p50", "ms"),
    ("latency 100 ev/s x 10, accepted to received: p99", "ms"),
    ("latency 100 ev/s x 10, accepted to received: max", "ms"),
    ("latency 100 ev/s x 10, sent to received: p50", "ms"),
    ("latency 100 ev/s x 10, sent to received: p99", "ms"),
    ("latency 100 ev/s x 10, sent to received: max", "ms"),
    ("latency 500 ev/s x 10, accepted to received: p50", "ms"),
    ("latency 500 ev/s x 10, accepted to received: p99", "ms"),
    ("latency 500 ev/s x 10, accepted to received: max", "ms"),
    ("latency 500 ev/s x 10, sent to received: p50", "ms"),
    ("latency 500 ev/s x 10, sent to received: p99", "ms"),
    ("latency 500 ev/s x 10, sent to received: max", "ms"),
    ("create endpoint, 32 conns", "r/s"),
    ("list endpoints (50), 32 conns", "r/s"),
];

/// edgehook's figures beside Svix's, each the mean of its rounds; then memory.
fn rows(figures: &[Vec<Figures>; 2], memory: [f64; 2]) -> Vec<Row> {
    let mean = |s: usize, k: usize| {
        let runs = &figures[s];
        runs.iter().map(|f| f.0[k]).sum::<f64>() / runs.len().max(1) as f64
    };
    let mut rows: Vec<Row> = ROWS
        .iter()
        .enumerate()
        .map(|(k, (name, unit))| {
            Row::reported(
                format!("peer: {name} (edgehook vs Svix)"),
                mean(0, k),
                unit,
                Some(mean(1, k)),
            )
        })
        .collect();
    rows.push(Row::reported(
        "peer: memory at the end, all processes (edgehook vs Svix)".into(),
        memory[0],
        "MiB",
        Some(memory[1]),
    ));
    rows
}
