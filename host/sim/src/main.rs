//! `edgehook-sim`: a whole-system scenario on the simulation host, its ledger audited.

use anyhow::{Result, bail};
use clap::Parser;
use edgehook_sim::scenario::{self, Scenario};
use edgehook_testkit::command::exit_on_error;
use edgehook_testkit::progress::Progress;

/// The allocator `edgehook` serves with, so a scenario's speed compares with before.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// edgehook-sim: run a whole-system scenario on the simulation host (virtual time, simulated
/// endpoints) and audit every delivery; exits non-zero if the ledger does not balance.
#[derive(Parser)]
#[command(version, after_help = EXIT_STATUS)]
struct Args {
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

/// What `edgehook-sim --help` says of exit codes; `main` makes it true.
const EXIT_STATUS: &str = "Exit status:
  0    the ledger balances
  1    failure: an error (printed on stderr), or a ledger that does not balance
  2    usage error: an unknown flag, a missing or invalid value
  101  a bug (a panic); please report it";

fn main() {
    exit_on_error(simulate(Args::parse()));
}

fn simulate(args: Args) -> Result<()> {
    let s = Scenario {
        subscriptions: args.subscriptions,
        events: args.events,
        failing_percent: args.failing_percent,
        seed: args.seed,
        ..Default::default()
    };
    let mut progress = Progress::stderr();
    let outcome = scenario::run_with(&s, &mut progress)?;
    drop(progress);
    println!("{outcome:#?}");
    match outcome.check(&s) {
        Ok(()) => {
            println!("ledger balances: every delivery ended as the schedule says");
            Ok(())
        }
        Err(problems) => bail!("the ledger does not balance:\n{}", problems.join("\n")),
    }
}
