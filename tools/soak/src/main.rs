//! `edgehook-soak`: the real `edgehook serve` binary under sustained partner API and publish
//! load, with 30 % of the subscriptions on failing loopback receivers, for a set duration;
//! then three verdicts: memory flat, no unexpected answer or log line, every delivery
//! accounted for ([`run`] says how; docs/soak.md explains them and records a run).
//!
//! `cargo run --release -p edgehook-soak` (10 minutes; `-- --duration 60s` for a smoke run).
//! The server is the workspace's `edgehook`, built first with the profile this tool was built
//! with, so the soaked server is always the code just built; `--server-bin` soaks another.

mod api;
mod ledger;
mod memory;
mod receivers;
mod records;
mod run;
mod server;
mod shared;
mod traffic;

use anyhow::{Context as _, Result, bail, ensure};
use clap::Parser;
use edgehook_testkit::command::exit_on_error;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// edgehook-soak: run `edgehook serve` as a child process under sustained API and publish
/// load (loopback only, 30 % failing receivers), sample its memory, then check every answer,
/// log line and delivery; exits non-zero if a check fails (docs/soak.md).
#[derive(Parser)]
#[command(version, after_help = EXIT_STATUS)]
struct Args {
    /// How long the load runs: 600, 600s, 10m, 1h. `--duration 60s` is a smoke run.
    #[arg(long, default_value = "10m", value_parser = run::parse_duration)]
    duration: Duration,
    /// Events published per second.
    #[arg(long, default_value_t = 4.0)]
    events_per_sec: f64,
    /// Partner API requests per second (all clients).
    #[arg(long, default_value_t = 40.0)]
    api_rps: f64,
    /// Partner API clients (each creates, lists, reads and deletes its own subscriptions).
    #[arg(long, default_value_t = 4)]
    api_clients: usize,
    /// Subscriptions that live through the whole run.
    #[arg(long, default_value_t = 20)]
    subscriptions: usize,
    /// Percentage of subscriptions on failing receivers (500, 503, refused, timeout).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(0..=100))]
    failing_percent: u32,
    /// The server's attempt timeout, ms (the timeout receiver answers 2 s after it).
    #[arg(long, default_value_t = 3000)]
    attempt_timeout_ms: u64,
    /// The server's max_concurrency (attempts one tick runs at once; 16 is the server's
    /// default).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
    max_concurrency: u32,
    /// Seconds between memory samples.
    #[arg(long, default_value_t = 5)]
    sample_secs: u64,
    /// Seconds in-flight work gets after the load stops.
    #[arg(long, default_value_t = 15)]
    grace_secs: u64,
    /// Randomness seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the temporary directory with the store.
    #[arg(long)]
    keep: bool,
    /// The `edgehook` binary to soak (default: the workspace's, built first with this tool's
    /// profile: `cargo build -p edgehook`).
    #[arg(long)]
    server_bin: Option<PathBuf>,
}

/// What `edgehook-soak --help` says of exit codes; `main` makes it true.
const EXIT_STATUS: &str = "Exit status:
  0    every check passed
  1    failure: an error (printed on stderr), or a check that failed
  2    usage error: an unknown flag, a missing or invalid value
  101  a bug (a panic); please report it";

fn main() {
    exit_on_error(soak(Args::parse()));
}

fn soak(args: Args) -> Result<()> {
    let server_bin = match args.server_bin {
        Some(p) => p,
        None => build_server()?,
    };
    let options = run::Options {
        server_bin,
        duration: args.duration,
        events_per_sec: args.events_per_sec,
        api_rps: args.api_rps,
        api_clients: args.api_clients.max(1),
        subscriptions: args.subscriptions,
        failing_percent: args.failing_percent,
        attempt_timeout_ms: args.attempt_timeout_ms,
        max_concurrency: args.max_concurrency,
        sample_every: Duration::from_secs(args.sample_secs.max(1)),
        grace: Duration::from_secs(args.grace_secs),
        seed: args.seed,
        keep: args.keep,
        ..Default::default()
    };
    let outcome = run::run(&options)?;
    if !outcome.passed {
        bail!("the soak found problems (see the verdicts above)");
    }
    Ok(())
}

/// The workspace's `edgehook`, built now with the cargo and profile this tool was built with
/// into the same target directory, so it lands beside this executable: `cargo build -p
/// edgehook [--release]`, then `<target>/<profile>/edgehook`.
fn build_server() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this executable")?;
    let profile_dir = exe.parent().context("this executable's directory")?;
    let target_dir = profile_dir
        .parent()
        .context("this executable is not in a cargo target directory: pass --server-bin")?;
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .context("this executable's directory has no name")?;
    // `cargo run` says which cargo it is; run by hand, the one on PATH.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let mut build = Command::new(cargo);
    build
        .args([
            "build",
            "--package",
            "edgehook",
            "--manifest-path",
            manifest,
        ])
        .arg("--target-dir")
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            build.arg("--release");
        }
        other => {
            build.args(["--profile", other]);
        }
    }
    eprintln!("edgehook-soak: building the server (cargo build --package edgehook, {profile})");
    let status = build.status().context("running cargo to build edgehook")?;
    ensure!(
        status.success(),
        "building edgehook failed (see cargo's errors above); or pass --server-bin"
    );
    let bin = profile_dir.join(format!("edgehook{}", std::env::consts::EXE_SUFFIX));
    if !bin.is_file() {
        bail!("cargo built edgehook, but not at {}", bin.display());
    }
    Ok(bin)
}
