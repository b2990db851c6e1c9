//! `edgehook-bench`: runs the benchmark suite and prints one table, every figure beside a
//! baseline measured in the same run. Build it in release:
//! `cargo run --release -p edgehook-host --bin edgehook-bench`.
//! `--quick` shortens every measurement (for a smoke run; the figures are then noisy).
//! Section names (`size`, `api`, `fuel`, `serve`, `delivery`, `simulation`, `growth`,
//! `redis`, `spin`) run only those. `redis` runs only where `EDGEHOOK_BENCH_REDIS` names a
//! server (`redis://127.0.0.1:6379`); `spin` only where a Spin CLI is found (`$SPIN_BIN`, else
//! `<repo>/../shared/tools/spin`). The whole suite skips them otherwise, and says so.

use anyhow::{Result, bail};
use edgehook_host::bench;
use std::time::Duration;

/// The same allocator as the `edgehook` binary, so `serve` is measured as it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SECTIONS: [&str; 9] = [
    "size",
    "api",
    "fuel",
    "serve",
    "delivery",
    "simulation",
    "growth",
    "redis",
    "spin",
];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let chosen: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if let Some(bad) = chosen.iter().find(|c| !SECTIONS.contains(c)) {
        bail!("unknown section {bad:?}; sections: {}", SECTIONS.join(", "));
    }
    let run = |s: &str| chosen.is_empty() || chosen.contains(&s);
    let (n, secs, deliveries) = if quick {
        (200, 1, 1000)
    } else {
        (2000, 5, 10_000)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    if run("size") {
        rows.extend(bench::size());
    }
    if run("api") {
        eprintln!("api latency and instantiate ...");
        rows.extend(rt.block_on(bench::api_latency(n))?);
    }
    if run("fuel") {
        eprintln!("guest fuel ...");
        rows.extend(rt.block_on(bench::guest_fuel())?);
    }
    if run("serve") {
        eprintln!("serve throughput ...");
        rows.extend(rt.block_on(bench::serve_throughput(Duration::from_secs(secs), 32))?);
    }
    if run("delivery") {
        eprintln!("delivery rate ...");
        rows.extend(rt.block_on(bench::delivery_rate(deliveries))?);
    }
    if run("simulation") {
        eprintln!("simulation speed ...");
        rows.extend(bench::simulation_speed()?);
    }
    if run("growth") {
        eprintln!("cost growth ...");
        rows.extend(rt.block_on(bench::cost_growth())?);
    }
    if run("redis") {
        match std::env::var("EDGEHOOK_BENCH_REDIS") {
            Ok(url) => {
                eprintln!("redis latency ...");
                rows.extend(rt.block_on(bench::redis_latency(
                    &url,
                    n / 2,
                    Duration::from_secs(secs),
                    32,
                ))?);
            }
            Err(_) => eprintln!("redis: skipped (set EDGEHOOK_BENCH_REDIS=redis://host:port)"),
        }
    }
    if run("spin") {
        match edgehook_host::spin::find_binary() {
            Some(spin) => {
                eprintln!("spin against serve ...");
                rows.extend(rt.block_on(bench::spin::spin_vs_serve(
                    &spin,
                    n / 4,
                    Duration::from_secs(secs),
                    32,
                ))?);
            }
            None => eprintln!(
                "spin: skipped (no Spin CLI: set SPIN_BIN, or put it at ../shared/tools/spin)"
            ),
        }
    }
    // The servers' log lines first, then the table.
    edgehook_host::log::flush();
    bench::print(&rows);
    Ok(())
}
