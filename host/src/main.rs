//! `edgehook`: run the webhook service, and talk to a running one.

use anyhow::{Result, bail};
use clap::{Parser, Subcommand};
use edgehook_host::HostEnv;
use edgehook_host::outbound::NoNetwork;
use edgehook_host::serve::{Server, bind, log_line};
use edgehook_host::store::MemoryStore;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// edgehook: outbound webhooks as one WebAssembly component.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service: the partner API, the operator API and deliveries.
    Serve(ServeArgs),
    /// Run a whole-system scenario on the simulation host (virtual time, simulated
    /// endpoints) and audit every delivery; exits non-zero if the ledger does not balance.
    Simulate(SimulateArgs),
}

#[derive(clap::Args)]
struct SimulateArgs {
    /// Subscriptions (all listening to load.updated).
    #[arg(long, default_value_t = 1000)]
    subscriptions: usize,
    /// Events, one per virtual second.
    #[arg(long, default_value_t = 1000)]
    events: usize,
    /// Percentage of endpoints that always fail.
    #[arg(long, default_value_t = 30)]
    failing_percent: u64,
    /// Randomness seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080", env = "EDGEHOOK_LISTEN")]
    listen: SocketAddr,
    /// Bearer token for the operator API (/internal/v1/...).
    #[arg(long, env = "EDGEHOOK_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// A component setting, as key=value (repeatable), e.g. --set attempt_timeout_ms=5000.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::Simulate(args) => simulate(args),
    }
}

fn simulate(args: SimulateArgs) -> Result<()> {
    let s = edgehook_host::scenario::Scenario {
        subscriptions: args.subscriptions,
        events: args.events,
        failing_percent: args.failing_percent,
        seed: args.seed,
        ..Default::default()
    };
    let outcome = edgehook_host::scenario::run(&s)?;
    println!("{outcome:#?}");
    match outcome.check(&s) {
        Ok(()) => {
            println!("ledger balances: every delivery ended as the schedule says");
            Ok(())
        }
        Err(problems) => bail!("the ledger does not balance:\n{}", problems.join("\n")),
    }
}

fn serve(args: ServeArgs) -> Result<()> {
    let mut config = BTreeMap::new();
    for pair in &args.settings {
        let Some((k, v)) = pair.split_once('=') else {
            bail!("--set takes KEY=VALUE, got {pair:?}");
        };
        config.insert(k.trim().to_owned(), v.to_owned());
    }
    if let Some(token) = args.admin_token {
        config.insert("admin_token".into(), token);
    }
    let env = HostEnv {
        kv: Arc::new(MemoryStore::new()),
        config: Arc::new(config),
        clock: None,
        outbound: Arc::new(NoNetwork),
        seed: None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let server = Server::new(env)?;
        let listener = bind(args.listen).await?;
        log_line(
            "info",
            "listening",
            &[("addr", listener.local_addr()?.to_string())],
        );
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            log_line("info", "shutting down", &[]);
            let _ = stop_tx.send(true);
        });
        server.run(listener, stop_rx).await
    })
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
