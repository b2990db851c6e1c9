//! `edgehook-bench`: runs the benchmark suite and prints one table, every figure beside a
//! baseline measured in the same run, on the same machine, the same way, as a ratio:
//!
//! - API latency (in process) against the empty component ([`edgehook_runtime::Baseline`]);
//! - instantiate time against the empty component;
//! - `edgehook serve` throughput over loopback against a plain hyper server;
//! - delivery rate against the loopback receiver's own capacity;
//! - latency under a steady arrival rate (an open model: event to first attempt received)
//!   against the same load sent straight to the receiver;
//! - CPU time per `serve` request and per delivery (steal and waiting excluded, so builds
//!   compare on a shared machine) against the same figure for those baselines;
//! - simulation speed, component size and cost growth against their targets or smallest size.
//!
//! Build it in release: `cargo run --release -p edgehook-bench`.
//! `--quick` shortens every measurement (for a smoke run; the figures are then noisy). The
//! exact rows (fuel, store operations) are judged against a committed baseline ([`exact`]):
//! more than 5 % over it is exit status 3.
//! Section names (`size`, `api`, `fuel`, `serve`, `delivery`, `latency`, `simulation`, `growth`,
//! `redis`, `spin`, `store`, `peer`) run only those; `store` (minutes, a large store on disk)
//! and `peer` (edgehook beside Svix's server: [`peer`]) run only when named. `redis` runs
//! only where `EDGEHOOK_BENCH_REDIS` names a server (`redis://127.0.0.1:6379`); `spin` only
//! where a Spin CLI is found (`$SPIN_BIN`, else `<repo>/../shared/tools/spin`). The whole
//! suite skips them otherwise, and says so.
//! With `EDGEHOOK_BENCH_OTLP=http://HOST:PORT` the servers export traces there, as
//! `serve --otlp-endpoint` does (its cost: BENCHMARKS.md, `serve` and `delivery`).

mod api;
mod exact;
mod forwarder;
mod heap;
mod latency;
mod load;
mod measure;
mod peer;
mod procmem;
mod redis;
mod scale;
mod serve;
mod setup;
mod spin;
mod store;
mod table;

use anyhow::Result;
use clap::{Parser, ValueEnum};
use edgehook_runtime::log;
use edgehook_testkit::progress::Progress;
use std::time::Duration;

/// The same allocator as the `edgehook` binary, so `serve` is measured as it runs, with an
/// account of the live heap that the `store` section switches on.
#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting::new();

/// edgehook-bench: the benchmark suite. Prints one table, every figure beside a baseline
/// measured in the same run (BENCHMARKS.md has the method and the latest results). Build it
/// in release: `cargo run --release -p edgehook-bench`.
#[derive(Parser)]
#[command(
    version,
    after_help = "Progress goes to stderr (a line redrawn in place on a terminal, plain lines \
                  otherwise); the servers' log lines, then the table, go to stdout.\n\n\
                  Exit status:\n  0  the suite ran and printed its table\n  \
                  1  a measurement failed (the error is printed)\n  \
                  2  usage error: an unknown flag or section\n  \
                  3  an exact row (fuel, store operations) exceeds its committed baseline by \
                  more than 5 %"
)]
struct Args {
    /// Shorten every measurement (a smoke run; the figures are then noisy).
    #[arg(long)]
    quick: bool,
    /// Record this run's exact rows (fuel, store operations) as the committed baseline
    /// (tools/bench/exact-baseline.json) instead of judging them against it.
    #[arg(long)]
    write_baseline: bool,
    /// Sections to run (default: all but `store`, which runs only when named). `redis` runs only where EDGEHOOK_BENCH_REDIS names a
    /// server (redis://127.0.0.1:6379); `spin` only where a Spin CLI is found ($SPIN_BIN, else
    /// ../shared/tools/spin).
    #[arg(value_enum)]
    sections: Vec<Section>,
}

/// A part of the suite.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Section {
    /// Component and baseline sizes.
    Size,
    /// API latency and instantiation.
    Api,
    /// The guest's work per request, in fuel.
    Fuel,
    /// `serve` throughput over real sockets.
    Serve,
    /// Delivery rate to loopback receivers.
    Delivery,
    /// Latency under a steady arrival rate (open model).
    Latency,
    /// Simulation speed.
    Simulation,
    /// How costs grow with the data.
    Growth,
    /// Latency over Redis.
    Redis,
    /// The same component under `spin up` against `serve`.
    Spin,
    /// The embedded store under `serve`: sustained deliveries, latency at 60 % of them,
    /// bytes on disk, RSS and restart at 1,000,000 delivery records (opt-in: 5 minutes and
    /// a gigabyte of disk, not in the default run).
    Store,
    /// edgehook beside Svix's server (PostgreSQL, Redis) on the same load and receiver
    /// (opt-in: about 15 minutes; needs Svix's server built, see BENCHMARKS.md).
    Peer,
}

/// Every section, in the order they run, with what the progress line says.
const ALL: [(Section, &str); 12] = [
    (Section::Size, "sizes"),
    (Section::Api, "api latency and instantiate"),
    (Section::Fuel, "guest fuel"),
    (Section::Serve, "serve throughput"),
    (Section::Delivery, "delivery rate"),
    (Section::Latency, "latency under a steady rate"),
    (Section::Simulation, "simulation speed"),
    (Section::Growth, "cost growth"),
    (Section::Redis, "redis latency"),
    (Section::Spin, "spin against serve"),
    (Section::Store, "the embedded store"),
    (Section::Peer, "side by side with Svix"),
];

/// Sections that run only when named (they take minutes and fill the disk).
const OPT_IN: [Section; 2] = [Section::Store, Section::Peer];

fn main() -> Result<()> {
    // The peer section runs `edgehook serve` as a process of its own: this binary again.
    if std::env::var_os(peer::AS_SERVE).is_some() {
        return peer::run_as_serve();
    }
    let args = Args::parse();
    // The servers it runs in process log their warnings and errors, not a line per request
    // or attempt (the table is what the bench prints); EDGEHOOK_LOG says otherwise.
    let filter = std::env::var(log::FILTER_ENV).unwrap_or_else(|_| log::QUIET_FILTER.into());
    log::init(log::Format::Text, &filter).map_err(anyhow::Error::msg)?;
    // Traces exported to a collector at this address, as `serve --otlp-endpoint` does: what
    // they cost (BENCHMARKS.md, the `serve` and `delivery` tables).
    if let Ok(endpoint) = std::env::var("EDGEHOOK_BENCH_OTLP") {
        edgehook_runtime::otlp::install(&endpoint, "edgehook-bench").map_err(anyhow::Error::msg)?;
    }
    let chosen: Vec<(Section, &str)> = ALL
        .into_iter()
        .filter(|(s, _)| {
            args.sections.contains(s) || (args.sections.is_empty() && !OPT_IN.contains(s))
        })
        .collect();
    let (n, secs, deliveries) = if args.quick {
        (200, 1, 1000)
    } else {
        (2000, 5, 10_000)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut progress = Progress::stderr();
    let mut rows = Vec::new();
    for (i, (section, what)) in chosen.iter().enumerate() {
        let step = format!("[{}/{}] {what} ...", i + 1, chosen.len());
        if progress.is_shown() {
            progress.phase(&step, 0);
        } else {
            eprintln!("{step}");
        }
        match section {
            Section::Size => rows.extend(scale::size()),
            Section::Api => rows.extend(rt.block_on(api::api_latency(n))?),
            Section::Fuel => rows.extend(rt.block_on(api::guest_fuel())?),
            Section::Serve => {
                let secs = Duration::from_secs(secs);
                rows.extend(rt.block_on(serve::serve_throughput(secs, 32))?);
                rows.extend(rt.block_on(serve::api_against_healthz(secs, 32))?);
            }
            Section::Delivery => rows.extend(rt.block_on(serve::delivery_rate(deliveries))?),
            Section::Latency => rows.extend(rt.block_on(latency::steady_rate(args.quick))?),
            Section::Simulation => rows.extend(scale::simulation_speed()?),
            Section::Growth => {
                rows.extend(rt.block_on(scale::cost_growth())?);
                let cycles = if args.quick { 2_000 } else { 100_000 };
                rows.extend(rt.block_on(scale::history_growth(cycles))?);
            }
            Section::Redis => match std::env::var("EDGEHOOK_BENCH_REDIS") {
                Ok(url) => rows.extend(rt.block_on(redis::redis_latency(
                    &url,
                    n / 2,
                    Duration::from_secs(secs),
                    32,
                ))?),
                Err(_) => {
                    progress.clear();
                    eprintln!("redis: skipped (set EDGEHOOK_BENCH_REDIS=redis://host:port)");
                }
            },
            Section::Store => rows.extend(rt.block_on(store::store(args.quick))?),
            Section::Peer => rows.extend(rt.block_on(peer::peer(args.quick))?),
            Section::Spin => match edgehook_sim::spin::find_binary() {
                Some(binary) => rows.extend(rt.block_on(spin::spin_vs_serve(
                    &binary,
                    n / 4,
                    Duration::from_secs(secs),
                    32,
                ))?),
                None => {
                    progress.clear();
                    eprintln!(
                        "spin: skipped (no Spin CLI: set SPIN_BIN, or put it at ../shared/tools/spin)"
                    );
                }
            },
        }
    }
    progress.clear();
    // The servers' log lines first, then the table.
    log::flush();
    table::print(&rows);
    if args.write_baseline {
        exact::write_baseline(&rows)?;
        eprintln!("wrote {}", exact::baseline_path().display());
        return Ok(());
    }
    let regressions = exact::regressions(&rows)?;
    if !regressions.is_empty() {
        for r in &regressions {
            eprintln!("{r}");
        }
        std::process::exit(3);
    }
    Ok(())
}
