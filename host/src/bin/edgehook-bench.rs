//! `edgehook-bench`: runs the benchmark suite and prints one table, every figure beside a
//! baseline measured in the same run. Build it in release:
//! `cargo run --release -p edgehook-host --bin edgehook-bench`.
//! `--quick` shortens every measurement (for a smoke run; the figures are then noisy).

use anyhow::Result;
use edgehook_host::bench;
use std::time::Duration;

fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let (n, secs, deliveries) = if quick {
        (200, 1, 1000)
    } else {
        (2000, 5, 10_000)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut rows = bench::size();
    eprintln!("api latency and instantiate ...");
    rows.extend(rt.block_on(bench::api_latency(n))?);
    eprintln!("serve throughput ...");
    rows.extend(rt.block_on(bench::serve_throughput(Duration::from_secs(secs), 32))?);
    eprintln!("delivery rate ...");
    rows.extend(rt.block_on(bench::delivery_rate(deliveries))?);
    eprintln!("simulation speed ...");
    rows.extend(bench::simulation_speed()?);
    eprintln!("cost growth ...");
    rows.extend(rt.block_on(bench::cost_growth())?);
    bench::print(&rows);
    Ok(())
}
