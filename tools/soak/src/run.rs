//! The soak: the real `edgehook serve` binary under sustained partner API and publish
//! load, with 30 % of the subscriptions on failing loopback receivers, for a set duration;
//! then three verdicts (docs/soak.md explains them and records a run):
//!
//! - **memory flat**: the server's RSS, sampled from `/proc/<pid>/status`, does not grow in
//!   the load's last third beyond what the growth of its in-memory store explains
//!   ([`memory`]);
//! - **no unexpected errors**: every answer has its operation's status (zero 5xx), and the
//!   server logs nothing at `error` level, no `warn` but failed delivery attempts, nothing on
//!   stderr;
//! - **every delivery accounted for**: after the load stops and a grace period, every event
//!   x matching subscription has its delivery, each in exactly one legitimate state, with as
//!   many attempts recorded as requests received, signatures verified ([`ledger`]).
//!
//! The command stops by itself (every loop is bounded by the duration), talks to 127.0.0.1
//! only, and exits non-zero when a verdict fails.

use crate::api::{Api, Op};
use crate::ledger::{Ledger, Rules, State};
use crate::memory::{self, Bound, Sample};
use crate::receivers::Receivers;
use crate::records::{Behavior, DeliveryView};
use crate::server::ServerProc;
use crate::shared::lock;
use crate::traffic::Ctx;
use crate::{ledger, traffic};
use anyhow::{Context as _, Result, bail};
use edgehook_runtime::embedded;
use edgehook_testkit::progress::Progress;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `edgehook` binary to run as the server.
    pub server_bin: PathBuf,
    /// How long the load runs.
    pub duration: Duration,
    /// Events published per second (all publishers together).
    pub events_per_sec: f64,
    /// Partner API requests per second (all clients together).
    pub api_rps: f64,
    /// Partner API clients.
    pub api_clients: usize,
    /// Publishers.
    pub publishers: usize,
    /// Subscriptions created before the load that live through it.
    pub subscriptions: usize,
    /// Share of subscriptions on failing receivers, percent.
    pub failing_percent: u32,
    /// The server's `attempt_timeout_ms`.
    pub attempt_timeout_ms: u64,
    /// The server's `max_concurrency` (attempts one tick runs at once).
    pub max_concurrency: u32,
    /// Seconds between RSS samples.
    pub sample_every: Duration,
    /// Read the store's size every this many samples.
    pub store_every: u32,
    /// How long in-flight work gets after the load stops.
    pub grace: Duration,
    /// Randomness seed (subscriptions, event types, loads).
    pub seed: u64,
    /// Keep the temporary directory (the store and the server's log, for a look afterwards).
    pub keep: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            server_bin: PathBuf::from("edgehook"),
            duration: Duration::from_secs(600),
            events_per_sec: 4.0,
            api_rps: 40.0,
            api_clients: 4,
            publishers: 2,
            subscriptions: 20,
            failing_percent: 30,
            attempt_timeout_ms: 3000,
            max_concurrency: 16,
            sample_every: Duration::from_secs(5),
            store_every: 3,
            grace: Duration::from_secs(15),
            seed: 1,
            keep: false,
        }
    }
}

/// Parses `600`, `600s`, `10m` or `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: a duration is a number with s, m or h, e.g. 10m"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{s:?}: the unit is s, m or h")),
    };
    if secs == 0 {
        return Err("the duration must be at least 1 s".into());
    }
    Ok(Duration::from_secs(secs))
}

/// Waits until `until` after `since`, redrawing `progress` (seconds since `since`) every
/// second meanwhile.
async fn wait_showing(progress: &mut Progress, since: Instant, until: Duration) {
    loop {
        let left = until.saturating_sub(since.elapsed());
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(Duration::from_secs(1))).await;
        progress.set(since.elapsed().as_secs());
    }
}

/// What a run found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every verdict passed.
    pub passed: bool,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Runs the soak and prints its report. `Ok(outcome)` whether or not the verdicts pass; `Err`
/// when the soak itself could not run.
pub fn run(opts: &Options) -> Result<Outcome> {
    let dir = edgehook_testkit::try_temp_dir("soak").context("creating a temporary directory")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let outcome = rt.block_on(soak(opts, &dir));
    rt.shutdown_timeout(Duration::from_secs(1));
    if opts.keep {
        println!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    outcome
}

async fn soak(opts: &Options, dir: &std::path::Path) -> Result<Outcome> {
    let data_dir = dir.join("data");
    let store_dir = data_dir.join("store");
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let token = format!(
        "eha_soak_{:016x}{:016x}",
        rng.random::<u64>(),
        rng.random::<u64>()
    );
    let settings = vec![
        (
            "attempt_timeout_ms".to_owned(),
            opts.attempt_timeout_ms.to_string(),
        ),
        (
            "max_concurrency".to_owned(),
            opts.max_concurrency.to_string(),
        ),
        ("subscription_limit".to_owned(), "1000".to_owned()),
    ];
    let receivers = Receivers::start(opts.attempt_timeout_ms + 2000).await?;
    let log_file = dir.join("server.log");
    let mut server = ServerProc::start(&opts.server_bin, &data_dir, &token, &settings, &log_file)?;
    println!(
        "edgehook-soak: server pid {} on {} (store {}), load for {} s",
        server.pid(),
        server.addr,
        store_dir.display(),
        opts.duration.as_secs()
    );
    println!(
        "  {} events/s from {} publishers; {} API requests/s from {} clients; {} lasting \
         subscriptions; {} % of subscriptions failing (500/503/refused/timeout); \
         attempt_timeout_ms={}; max_concurrency={}; seed {}",
        opts.events_per_sec,
        opts.publishers,
        opts.api_rps,
        opts.api_clients,
        opts.subscriptions,
        opts.failing_percent,
        opts.attempt_timeout_ms,
        opts.max_concurrency,
        opts.seed
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let empty = server.sample().context("reading the server's /proc")?;

    let ctx = Arc::new(Ctx {
        api: Api::new(&server.addr),
        receivers,
        admin: token.clone(),
        failing_percent: opts.failing_percent,
        subs: Default::default(),
        events: Default::default(),
        stop: Default::default(),
    });
    let mut fixed_keys = Vec::new();
    for i in 0..4 {
        fixed_keys.push(ctx.issue_key(&format!("soak-fixed-{i}")).await?);
    }
    ctx.create_fixed(&fixed_keys, opts.subscriptions, &mut rng)
        .await?;
    let mut client_keys = Vec::new();
    for i in 0..opts.api_clients {
        client_keys.push(ctx.issue_key(&format!("soak-api-{i}")).await?);
    }

    // The load.
    let started = Instant::now();
    let mut tasks = Vec::new();
    let api_interval = Duration::from_secs_f64(opts.api_clients as f64 / opts.api_rps.max(0.01));
    for (i, key) in client_keys.into_iter().enumerate() {
        tasks.push(tokio::spawn(traffic::api_client(
            ctx.clone(),
            i,
            key,
            api_interval,
            opts.seed.wrapping_add(100 + i as u64),
        )));
    }
    let pub_interval =
        Duration::from_secs_f64(opts.publishers as f64 / opts.events_per_sec.max(0.01));
    for i in 0..opts.publishers {
        tasks.push(tokio::spawn(traffic::publisher(
            ctx.clone(),
            i,
            pub_interval,
            opts.seed.wrapping_add(200 + i as u64),
        )));
    }
    let mut samples: Vec<Sample> = Vec::new();
    let mut k = 0u32;
    // On a terminal, a line counting the seconds (stderr); the samples are the log.
    let mut progress = Progress::stderr();
    progress.phase("soak: load, seconds", opts.duration.as_secs());
    while started.elapsed() < opts.duration {
        let next = opts.sample_every * (k + 1);
        wait_showing(&mut progress, started, next).await;
        progress.clear();
        let Some(mut s) = server.sample() else {
            bail!("the server is gone: {:?}", server.logs().unexpected_lines);
        };
        s.t_s = started.elapsed().as_secs_f64();
        if k.is_multiple_of(opts.store_every.max(1)) {
            s.store_live_bytes = embedded::disk_bytes(&store_dir).ok();
        }
        k += 1;
        let stats = ctx.api.stats();
        println!(
            "[{:>5.0} s] rss {:>7.1} MiB  store {:>7}  fds {:>4}  threads {:>3}  answers {:>7} \
             ({} unexpected)  events {:>6}  received {:>7}  unexpected log lines {}",
            s.t_s,
            mib(s.rss_kib),
            s.store_live_bytes.map_or("-".to_owned(), |b| format!(
                "{:.1} MiB",
                b as f64 / 1048576.0
            )),
            s.fds,
            s.threads,
            stats.total(),
            stats.unexpected() + stats.transport_errors,
            lock(&ctx.events).len(),
            ctx.receivers.count(),
            server.logs().unexpected
        );
        samples.push(s);
    }
    ctx.stop.store(true, Ordering::Relaxed);
    let load_secs = started.elapsed().as_secs_f64();
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(60), t).await;
    }
    progress.clear();
    println!(
        "load stopped after {load_secs:.0} s; {} s grace for work in flight",
        opts.grace.as_secs()
    );
    progress.phase("soak: grace, seconds", opts.grace.as_secs());
    wait_showing(&mut progress, Instant::now(), opts.grace).await;
    progress.phase("soak: reading every delivery through the operator API", 0);

    // The ledger.
    let rules = Rules {
        overdue_slack_ms: opts.attempt_timeout_ms + 10_000,
        ..Rules::default()
    };
    let (ledger, collect_secs) = account(&ctx, &rules).await;
    progress.clear();
    let after_load = server.sample();

    // Clean shutdown, then the same store in a fresh server: what holding it costs.
    let stop = server.terminate(Duration::from_secs(30));
    let logs = server.logs();
    let clean_stop = matches!(&stop, Ok(s) if s.success()) && logs.stopped;
    let final_store = embedded::disk_bytes(&store_dir).unwrap_or_default();
    let reopened =
        match ServerProc::start(&opts.server_bin, &data_dir, &token, &settings, &log_file) {
            Ok(mut again) => {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let s = again.sample();
                let _ = again.terminate(Duration::from_secs(30));
                s
            }
            Err(e) => {
                println!("could not reopen the store: {e:#}");
                None
            }
        };
    let factor = reopened.and_then(|r| memory::factor(empty.rss_kib, r.rss_kib, final_store));
    let verdict = memory::verdict(&samples, load_secs, factor.unwrap_or(0.0), Bound::default());

    // The report.
    let stats = ctx.api.stats();
    println!();
    println!("== answers by operation and status (expected status in brackets)");
    for op in Op::ALL {
        let line: Vec<String> = stats
            .by_op
            .iter()
            .filter(|((o, _), _)| *o == op)
            .map(|((_, status), n)| {
                let mark = if *status == op.expected() {
                    ""
                } else {
                    " UNEXPECTED"
                };
                format!("{status}: {n}{mark}")
            })
            .collect();
        if !line.is_empty() {
            println!(
                "  {:<40} [{}]  {}",
                op.name(),
                op.expected(),
                line.join(", ")
            );
        }
    }
    println!(
        "  total {}, unexpected statuses {}, 5xx {}, no answer {}; problems found in answers {}",
        stats.total(),
        stats.unexpected(),
        stats.server_errors(),
        stats.transport_errors,
        stats.problems
    );
    for p in &stats.problem_lines {
        println!("    {p}");
    }
    println!("== server log");
    for ((level, msg), n) in &logs.by_level_msg {
        println!("  {level:<5} {msg:<40} {n}");
    }
    println!(
        "  lines {}, unexpected {}, 5xx answered {}",
        logs.lines, logs.unexpected, logs.server_5xx
    );
    for l in &logs.unexpected_lines {
        println!("    {l}");
    }
    print_ledger(&ledger, collect_secs);
    println!("== memory (RSS of the server process; thirds of the {load_secs:.0} s load)");
    println!(
        "  empty server {:.1} MiB; after the load {:.1} MiB (peak {:.1} MiB); final store \
         {:.1} MiB on disk; a server reopening it {:.1} MiB",
        mib(empty.rss_kib),
        after_load.map_or(0.0, |s| mib(s.rss_kib)),
        after_load.map_or(0.0, |s| mib(s.hwm_kib)),
        final_store as f64 / 1048576.0,
        reopened.map_or(0.0, |s| mib(s.rss_kib)),
    );
    for (name, t) in [
        ("first (warm-up)", verdict.first),
        ("middle", verdict.middle),
        ("last", verdict.last),
    ] {
        println!(
            "  {name:<16} samples {:>3}  RSS {:>7.1} MiB  store {:>6.1} MiB  net {:>7.1} MiB  \
             fds <= {}  threads <= {}",
            t.samples, t.rss_mib, t.store_mib, t.net_mib, t.fds_max, t.threads_max
        );
    }
    let how = match factor {
        Some(f) => format!("{f:.2} RSS bytes per live byte, measured by reopening the store"),
        None => "not measured: the store is under 4 MiB, so raw RSS is judged".to_owned(),
    };
    println!(
        "  RSS grew {:.1} MiB from the middle to the last third; the store's growth explains \
         {:.1} MiB (factor {how}); unexplained {:.1} MiB, bound {:.1} MiB",
        verdict.rss_growth_mib, verdict.explained_mib, verdict.unexplained_mib, verdict.bound_mib
    );
    let rss_series: Vec<String> = samples
        .iter()
        .map(|s| format!("{:.0}", mib(s.rss_kib)))
        .collect();
    println!(
        "  RSS series (MiB, every {} s): {}",
        opts.sample_every.as_secs(),
        rss_series.join(" ")
    );

    let no_errors = stats.unexpected() == 0
        && stats.transport_errors == 0
        && stats.problems == 0
        && logs.unexpected == 0
        && logs.server_5xx == 0;
    let accounted = ledger.problems.is_empty() && ledger.deliveries > 0;
    let verdicts = [
        ("memory flat", verdict.flat),
        ("descriptors flat", verdict.fds_flat),
        ("no unexpected errors", no_errors),
        ("every delivery accounted for", accounted),
        ("clean shutdown on SIGTERM", clean_stop),
    ];
    println!("== verdicts");
    for (name, ok) in verdicts {
        println!("  {name:<32} {}", if ok { "PASS" } else { "FAIL" });
    }
    Ok(Outcome {
        passed: verdicts.iter().all(|(_, ok)| *ok),
    })
}

/// Reads every subscription's state and deliveries, checks the ledger, and reads again what
/// may have been caught mid-attempt (up to 6 times, 3 s apart). Returns the ledger and how
/// long reading took.
async fn account(ctx: &Arc<Ctx>, rules: &Rules) -> (Ledger, f64) {
    let started = Instant::now();
    let ids: Vec<String> = lock(&ctx.subs).iter().map(|s| s.id.clone()).collect();
    let mut states = BTreeMap::new();
    let mut deliveries: BTreeMap<String, DeliveryView> = BTreeMap::new();
    let mut set = tokio::task::JoinSet::new();
    for chunk in ids.chunks(ids.len().div_ceil(4).max(1)) {
        let (ctx, chunk) = (ctx.clone(), chunk.to_vec());
        set.spawn(async move {
            let mut out = Vec::new();
            for id in chunk {
                let state = ctx.sub_state(&id).await;
                let history = ctx.history(&id).await;
                out.push((id, state, history));
            }
            out
        });
    }
    while let Some(done) = set.join_next().await {
        for (id, state, history) in done.unwrap_or_default() {
            if let Some(state) = state {
                states.insert(id.clone(), state);
            }
            for d in history.into_iter().flatten() {
                deliveries.insert(d.id.clone(), d);
            }
        }
    }
    let collect_secs = started.elapsed().as_secs_f64();
    let mut round = 0;
    loop {
        let mut subs = lock(&ctx.subs).clone();
        for s in &mut subs {
            s.state = states.get(&s.id).cloned();
        }
        let events = lock(&ctx.events).clone();
        let received = ctx.receivers.snapshot();
        let ledger = ledger::check(
            &subs,
            &events,
            &deliveries,
            &received,
            edgehook_runtime::log::now_ms(),
            rules,
        );
        let again: Vec<String> = ledger
            .problems
            .iter()
            .filter(|p| ledger::TRANSIENT.contains(&p.kind))
            .filter_map(|p| p.recheck.clone())
            .collect();
        let disable_problems: Vec<String> = subs
            .iter()
            .filter(|s| {
                ledger
                    .problems
                    .iter()
                    .any(|p| p.kind == "disable rule" && p.detail.starts_with(&s.id))
            })
            .map(|s| s.id.clone())
            .collect();
        round += 1;
        if round > 6 || (again.is_empty() && disable_problems.is_empty()) {
            return (ledger, collect_secs);
        }
        println!(
            "re-reading {} deliveries and {} subscriptions that may have been mid-attempt",
            again.len(),
            disable_problems.len()
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        for id in again {
            if let Some(d) = ctx.delivery(&id).await {
                deliveries.insert(id, d);
            }
        }
        for id in disable_problems {
            if let Some(state) = ctx.sub_state(&id).await {
                states.insert(id.clone(), state);
            }
            for d in ctx.history(&id).await.into_iter().flatten() {
                deliveries.insert(d.id.clone(), d);
            }
        }
    }
}

/// The value at `p` of `v`, nearest rank (0 when `v` is empty).
fn percentile(v: &[u64], p: f64) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    edgehook_testkit::percentile(&v, p)
}

fn print_ledger(l: &Ledger, collect_secs: f64) {
    println!("== ledger (read through the operator API in {collect_secs:.1} s)");
    println!(
        "  events {}, deliveries announced {}, found {}; attempts {} / {} / {} (1st / 2nd / 3rd); \
         requests received {}",
        l.events,
        l.announced,
        l.deliveries,
        l.attempts[0],
        l.attempts[1],
        l.attempts[2],
        l.received
    );
    for state in State::ALL {
        let per: Vec<String> = Behavior::ALL
            .iter()
            .filter_map(|b| {
                l.by_behavior
                    .get(&(*b, state))
                    .map(|n| format!("{} {n}", b.name()))
            })
            .collect();
        println!(
            "  {:<52} {:>7}  ({})",
            state.name(),
            l.by_state.get(&state).copied().unwrap_or(0),
            per.join(", ")
        );
    }
    for (i, late) in l.lateness_ms.iter().enumerate() {
        if !late.is_empty() {
            println!(
                "  attempt {} started after due: p50 {} ms, p99 {} ms, max {} ms",
                i + 1,
                percentile(late, 0.5),
                percentile(late, 0.99),
                percentile(late, 1.0)
            );
        }
    }
    for (i, gaps) in l.retry_gap_ms.iter().enumerate() {
        if !gaps.is_empty() {
            println!(
                "  attempt {} reached its receiver after attempt {} by: min {:.1} s, p50 {:.1} s, \
                 p99 {:.1} s, max {:.1} s (schedule: {} s + up to 10 %)",
                i + 2,
                i + 1,
                percentile(gaps, 0.0) as f64 / 1000.0,
                percentile(gaps, 0.5) as f64 / 1000.0,
                percentile(gaps, 0.99) as f64 / 1000.0,
                percentile(gaps, 1.0) as f64 / 1000.0,
                [60, 300][i]
            );
        }
    }
    let subs: Vec<String> = l
        .subscriptions
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!("  subscriptions: {}", subs.join(", "));
    let counts = l.problem_counts();
    if counts.is_empty() {
        println!("  problems: none");
    }
    for (kind, n) in counts {
        println!("  PROBLEM {kind}: {n}");
        for p in l.problems.iter().filter(|p| p.kind == kind).take(5) {
            println!("    {}", p.detail);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("600"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("10 minutes").is_err());
        assert!(parse_duration("").is_err());
    }
}
