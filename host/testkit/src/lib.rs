//! # edgehook testkit
//!
//! What the host's tests and the development tools (`edgehook-sim`, `edgehook-bench`,
//! `edgehook-soak`) share, written once: fresh temporary directories, a runtime, waits with a
//! deadline, the rule for tests that need software a machine may lack ([`skipped`]),
//! `redis-server` and Spin as child processes ([`redis`], a Redis Cluster and a TLS
//! Redis: [`rediscluster`], [`spin`]), a certificate authority
//! for loopback HTTPS ([`tls`]), a plain HTTP client ([`http`]), an HTTP `CONNECT` proxy
//! ([`proxy`]), how a command is run for its conventions ([`command`]), progress lines
//! ([`progress`]), the SSRF corpus ([`ssrf`]), an independent signature check
//! ([`signature`]) and percentiles.
//!
//! It depends on none of the project's crates, so any of them can use it (as a
//! dev-dependency, or, for the tools, a dependency) without a cycle.

pub mod command;
pub mod http;
pub mod progress;
pub mod proxy;
pub mod redis;
pub mod rediscluster;
pub mod signature;
pub mod spin;
pub mod ssrf;
pub mod tls;

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// How long any wait in a test may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(60);

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
    fn percentiles_are_nearest_rank() {
        let v = [1u64, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile(&v, 0.5), 6);
        assert_eq!(percentile(&v, 0.99), 10);
        assert_eq!(percentile::<u64>(&[], 0.5), 0);
    }
}
