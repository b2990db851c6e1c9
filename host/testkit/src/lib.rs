//! # edgehook testkit
//!
//! What the host's tests and the development tools (`edgehook-sim`, `edgehook-bench`,
//! `edgehook-soak`) share, written once: fresh temporary directories, a runtime, the one
//! wait with a deadline ([`wait_for`]), the rule for tests that need software a machine
//! may lack ([`skipped`]), `redis-server` and Spin as child processes ([`redis`], a Redis
//! Cluster and a TLS Redis: [`rediscluster`], [`spin`]), a certificate authority for
//! loopback HTTPS ([`tls`]), a plain HTTP client ([`http`]), the loopback webhook receiver
//! ([`receiver`]), an HTTP `CONNECT` proxy ([`proxy`]), how a command is run for its
//! conventions ([`command`]), progress lines ([`progress`]), the SSRF corpus ([`ssrf`]), an
//! independent signature check ([`signature`]) and percentiles.
//!
//! It depends on none of the project's crates, so any of them can use it (as a
//! dev-dependency, or, for the tools, a dependency) without a cycle.

pub mod command;
pub mod http;
pub mod progress;
pub mod proxy;
pub mod receiver;
pub mod redis;
pub mod rediscluster;
pub mod secrets;
pub mod signature;
pub mod spin;
pub mod ssrf;
pub mod tls;

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// How long any wait in a test may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// How often [`wait_for`] looks again.
pub const POLL: Duration = Duration::from_millis(20);

/// What a condition polled by [`poll`] and [`wait_for`] returns: `true`, `Some(value)` or
/// `Ok(value)` once it holds; `false`, `None`, or `Err(what is seen instead)` until then.
pub trait Ready {
    /// What the wait returns once the condition holds.
    type Value;
    /// The value once it holds; otherwise what was seen instead, if the condition says.
    fn check(self) -> Result<Self::Value, Option<String>>;
}

impl Ready for bool {
    type Value = ();
    fn check(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

impl<T> Ready for Option<T> {
    type Value = T;
    fn check(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: std::fmt::Display> Ready for Result<T, E> {
    type Value = T;
    fn check(self) -> Result<T, Option<String>> {
        self.map_err(|seen| Some(seen.to_string()))
    }
}

/// Checks `ready` every `every` (from this thread) until it holds, for at most `within`:
/// its value, or, if it never held, what it last saw instead (if it says).
pub fn poll<R: Ready>(
    within: Duration,
    every: Duration,
    mut ready: impl FnMut() -> R,
) -> Result<R::Value, Option<String>> {
    let end = std::time::Instant::now() + within;
    loop {
        let seen = match ready().check() {
            Ok(value) => return Ok(value),
            Err(seen) => seen,
        };
        let Some(left) = end.checked_duration_since(std::time::Instant::now()) else {
            return Err(seen);
        };
        std::thread::park_timeout(every.min(left));
    }
}

/// Waits, checking every [`POLL`], until `ready` holds: its value. Panics if it does not
/// within [`DEADLINE`], naming `what` and what `ready` last saw.
pub fn wait_for<R: Ready>(what: &str, ready: impl FnMut() -> R) -> R::Value {
    wait_within(DEADLINE, what, ready)
}

/// [`wait_for`] with a deadline of its own, `within` (a wait that is part of what a test
/// measures, or longer than [`DEADLINE`]).
pub fn wait_within<R: Ready>(within: Duration, what: &str, ready: impl FnMut() -> R) -> R::Value {
    poll(within, POLL, ready).unwrap_or_else(|seen| match seen {
        Some(seen) => panic!("timed out after {within:?} waiting for {what}: {seen}"),
        None => panic!("timed out after {within:?} waiting for {what}"),
    })
}

/// A fresh, empty directory `<temp>/edgehook-<name>-<pid>` (whatever was there is removed).
pub fn try_temp_dir(name: &str) -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("edgehook-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// [`try_temp_dir`] for a test: panics if the directory cannot be made.
pub fn temp_dir(name: &str) -> PathBuf {
    try_temp_dir(name).unwrap_or_else(|e| panic!("temporary directory {name}: {e}"))
}

/// A port of 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    l.local_addr().expect("addr").port()
}

/// A two-thread runtime.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("a tokio runtime: {e}"))
}

/// Whether `CI` is set (to anything but empty, `0` or `false`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// A test that cannot run here because `why` (no `redis-server`, no Spin, no Node.js or
/// Python packages for the example hosts): prints a loud
/// `SKIPPED` line so README's test command still passes on such a machine; under CI (`CI`
/// set) it fails instead, since `.ci/run` provides them all.
pub fn skipped(why: &str) {
    assert!(
        !in_ci(),
        "{why}, and CI is set: CI must run this test (.ci/run installs redis-server and the \
         packages of examples/node and examples/python; Spin is found at $SPIN_BIN, else \
         <repo>/../shared/tools/spin)"
    );
    // Straight to stderr: the test harness captures `eprintln!` of a passing test.
    let _ = writeln!(
        std::io::stderr(),
        "\n==================== SKIPPED: {why} ====================\n"
    );
}

/// The value at `p` (0.0 to 1.0) of `sorted`, nearest rank (rounded); `T::default()` when
/// there is none.
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_returns_what_its_condition_gave_or_what_it_last_saw() {
        let mut n = 0;
        let got = wait_for("the third look", || {
            n += 1;
            (n == 3).then_some(n * 10)
        });
        assert_eq!(got, 30);
        wait_for("a true condition", || true);
        let short = Duration::from_millis(30);
        let seen = poll(short, Duration::from_millis(5), || {
            Err::<(), _>(format!("{n} looks"))
        });
        assert_eq!(seen, Err(Some("3 looks".to_owned())));
        assert_eq!(poll(short, POLL, || false), Err(None));
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v = [1u64, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile(&v, 0.5), 6);
        assert_eq!(percentile(&v, 0.99), 10);
        assert_eq!(percentile::<u64>(&[], 0.5), 0);
    }
}
