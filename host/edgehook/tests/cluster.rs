//! Three `edgehook serve` instances on a Redis Cluster (3 primaries + 3 replicas, started by
//! the test on loopback ports: [`edgehook_testkit::rediscluster`]) under a steady publish
//! load, with a ledger of every event accepted (202): one primary is killed (`SIGKILL`)
//! mid-load and started again once its replica has taken over (it rejoins as a replica),
//! and later one `serve` instance is killed and started again. Then every delivery the
//! ledger expects must reach the receiver: with `--kv-wait-replicas 1`, none may be lost.
//! Duplicates (a delivery sent again after its instance died before recording it) are
//! counted by delivery id.
//!
//! The short run is part of `cargo test`; the long one, with and without the wait, and each
//! again with the victim's replica stopped for a second before the kill (a lagging replica:
//! what the wait protects against), is
//! `cargo test -p edgehook --test system cluster::long -- --ignored --nocapture`
//! (`EDGEHOOK_CLUSTER_SECONDS`, `EDGEHOOK_CLUSTER_RATE`, and `EDGEHOOK_BIN` for a release
//! binary; its figures are in BENCHMARKS.md). Without `redis-server` these tests are
//! skipped, except under CI.

mod measure;

use crate::common::Proc;
use edgehook::cli::Remote;
use edgehook_component::delivery::delivery_id;
use edgehook_component::model::ids::{EventId, SubscriptionId};
use edgehook_testkit::receiver::Answer;
use edgehook_testkit::redis::redis_or_skip;
use edgehook_testkit::rediscluster::RedisCluster;
use edgehook_testkit::{POLL, poll, rt, temp_dir, wait_within};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One run's shape.
struct Run {
    /// `--kv-wait-replicas`.
    wait_replicas: u32,
    /// Events published per second, in total.
    rate: u32,
    /// How long the load lasts.
    load: Duration,
    /// When (from the load's start) a primary is killed.
    kill_primary_at: Duration,
    /// How long the victim's replica is stopped (`SIGSTOP`) just before the primary is
    /// killed: a replica that lags, the window in which an acknowledged write exists on the
    /// primary alone.
    stall_replica: Option<Duration>,
    /// Whether each delivery's first attempt fails (see [`receiver_failing_first`]).
    fail_first: bool,
    /// When a `serve` instance is killed.
    kill_serve_at: Duration,
    /// Subscriptions each event fans out to.
    subscriptions: usize,
}

/// What a run saw.
#[derive(Debug, Default)]
struct Report {
    accepted: usize,
    refused: BTreeMap<String, usize>,
    expected: usize,
    delivered: usize,
    lost: usize,
    duplicates: usize,
    failover: Duration,
    cluster_whole: Duration,
    serve_ready: Duration,
    drained: Duration,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "accepted {} (not accepted: {:?}), deliveries expected {}, delivered {}, lost {}, \
             duplicates {}; primary killed -> replica serving {:.1} s -> cluster whole {:.1} s; \
             serve killed -> restarted and ready {:.1} s; last delivery {:.1} s after the load",
            self.accepted,
            self.refused,
            self.expected,
            self.delivered,
            self.lost,
            self.duplicates,
            self.failover.as_secs_f64(),
            self.cluster_whole.as_secs_f64(),
            self.serve_ready.as_secs_f64(),
            self.drained.as_secs_f64(),
        )
    }
}

/// The test kit's receiver answering 200, counting requests per delivery id (and keeping
/// none: the long run sends millions).
struct Receiver {
    port: u16,
    counts: Arc<Mutex<BTreeMap<String, usize>>>,
}

fn receiver(rt: &tokio::runtime::Runtime) -> Receiver {
    receiver_failing_first(rt, false)
}

/// The receiver; with `fail_first`, each delivery's first attempt is answered 503, so every
/// delivery is sent again from what the store holds (its record, the due queue).
fn receiver_failing_first(rt: &tokio::runtime::Runtime, fail_first: bool) -> Receiver {
    let counts: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let c = counts.clone();
    let receiver = edgehook_testkit::receiver::Receiver::builder()
        .keep_nothing()
        .answer_by(move |request, _| {
            let id = request.header("x-service-delivery-id").unwrap_or("");
            let mut counts = c.lock().unwrap_or_else(|p| p.into_inner());
            let n = counts.entry(id.to_owned()).or_default();
            *n += 1;
            if fail_first && *n == 1 {
                Answer::status(503)
            } else {
                Answer::ok()
            }
        });
    let port = rt.block_on(receiver.start()).port();
    Receiver { port, counts }
}

/// The `edgehook` binary: `EDGEHOOK_BIN` (e.g. a release build, for the long run), else the
/// one cargo built for this test.
fn binary() -> PathBuf {
    std::env::var_os("EDGEHOOK_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_edgehook")),
        PathBuf::from,
    )
}

/// A `serve` instance on the cluster.
struct Instance {
    proc: Proc,
    base: String,
    dir: PathBuf,
}

fn serve(cluster: &RedisCluster, token: &str, wait: u32, name: &str) -> Instance {
    let dir = temp_dir(name);
    let mut command = Command::new(binary());
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
        ])
        .args(["--allow-http", "--allow-private-targets"])
        .args(["--kv", &cluster.url(), "--admin-token", token])
        .args(["--kv-wait-replicas", &wait.to_string()])
        .args(["--kv-retry-for-ms", "15000"])
        .args(["--set", "attempt_timeout_ms=2000"])
        .args(["--set", "retry_delays_ms=1000,2000"])
        .current_dir(&dir);
    let mut proc = Proc::spawn(command);
    let base = format!("http://{}", proc.address());
    Instance { proc, base, dir }
}

fn call(
    rt: &tokio::runtime::Runtime,
    remote: &Remote,
    method: &str,
    path: &str,
    body: Option<String>,
) -> (u16, Value) {
    let json = [("content-type".to_owned(), "application/json".to_owned())];
    let (status, text) = rt
        .block_on(remote.call(method, path, body.map(String::into_bytes), &json))
        .unwrap_or_else(|e| panic!("{method} {path}: {e:#}"));
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn ready(rt: &tokio::runtime::Runtime, base: &str) -> bool {
    let probe = Remote::new(base, "none").expect("client");
    rt.block_on(probe.call("GET", "/readyz", None, &[]))
        .is_ok_and(|(status, _)| status == 200)
}

/// The ledger of the publish load: every accepted event's id, and how many were refused.
#[derive(Default)]
struct Ledger {
    accepted: Vec<String>,
    /// Publishes not accepted, by answer (a status, or `no answer`).
    refused: BTreeMap<String, usize>,
}

fn run(shape: &Run) -> Report {
    let rt = rt();
    let mut cluster = RedisCluster::start(3, 1, 1000);
    let recv = receiver_failing_first(&rt, shape.fail_first);
    // Requests a delivery needs to count as delivered: the first fails with `fail_first`.
    let needed = if shape.fail_first { 2 } else { 1 };
    let token = format!("cluster-token-{}", std::process::id());
    let mut instances: Vec<Instance> = (0..3)
        .map(|i| {
            serve(
                &cluster,
                &token,
                shape.wait_replicas,
                &format!("cluster-serve-{i}"),
            )
        })
        .collect();
    let operator = Remote::new(&instances[0].base, &token).expect("client");
    let (status, issued) = call(
        &rt,
        &operator,
        "POST",
        "/internal/v1/clients/acme/keys",
        None,
    );
    assert_eq!(status, 201, "{issued}");
    let key = issued["data"]["apiKey"]
        .as_str()
        .expect("apiKey")
        .to_owned();
    let partner = Remote::new(&instances[1].base, &key).expect("client");
    let mut subs = Vec::new();
    for i in 0..shape.subscriptions {
        let body = format!(
            r#"{{"url":"http://127.0.0.1:{}/s{i}","eventTypes":["load.updated"]}}"#,
            recv.port
        );
        let (status, out) = call(&rt, &partner, "POST", "/v1/webhooks", Some(body));
        assert_eq!(status, 201, "{out}");
        subs.push(out["data"]["id"].as_str().expect("id").to_owned());
    }

    // The load: `rate` publishes a second, round robin over the live instances, each in a
    // task of its own (a publish held up by a failover does not hold up the next).
    let live: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(
        instances.iter().map(|i| i.base.clone()).collect(),
    ));
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (live, ledger, stop, token) =
            (live.clone(), ledger.clone(), stop.clone(), token.clone());
        let every = Duration::from_secs_f64(1.0 / f64::from(shape.rate));
        rt.spawn(async move {
            let mut tick = tokio::time::interval(every);
            let mut n = 0u64;
            let mut tasks = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                tick.tick().await;
                let base = {
                    let live = live.lock().unwrap_or_else(|p| p.into_inner());
                    live[n as usize % live.len()].clone()
                };
                let (ledger, token) = (ledger.clone(), token.clone());
                let body = format!(r#"{{"id":"L{n}","status":"IN_TRANSIT"}}"#);
                n += 1;
                tasks.push(tokio::spawn(async move {
                    let remote = Remote::new(&base, &token).expect("client");
                    let headers = [
                        ("content-type".to_owned(), "application/json".to_owned()),
                        ("x-service-event".to_owned(), "load.updated".to_owned()),
                    ];
                    let answer = remote
                        .call(
                            "POST",
                            "/internal/v1/events",
                            Some(body.into_bytes()),
                            &headers,
                        )
                        .await;
                    let mut ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
                    match answer {
                        Ok((202, text)) => {
                            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                            match v["data"]["eventId"].as_str() {
                                Some(id) => ledger.accepted.push(id.to_owned()),
                                None => {
                                    *ledger.refused.entry("202 without id".into()).or_default() += 1
                                }
                            }
                        }
                        Ok((status, _)) => {
                            *ledger.refused.entry(status.to_string()).or_default() += 1
                        }
                        Err(_) => *ledger.refused.entry("no answer".into()).or_default() += 1,
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        })
    };

    let started = Instant::now();
    let mut report = Report::default();
    // A primary dies mid-load; once its replica serves its slots it comes back (as a
    // replica: starting it before the failover would bring back an empty primary).
    std::thread::park_timeout(shape.kill_primary_at);
    let victim = cluster.primaries()[0];
    let replica = cluster.replicas_of(victim);
    if let Some(stall) = shape.stall_replica {
        for r in &replica {
            cluster.pause(*r, true);
        }
        std::thread::park_timeout(stall);
    }
    cluster.kill(victim);
    for r in replica.iter().filter(|_| shape.stall_replica.is_some()) {
        cluster.pause(*r, false);
    }
    let killed = Instant::now();
    wait_within(Duration::from_secs(30), "a replica to take over", || {
        let primaries = cluster.primaries();
        if primaries.len() == 3 && !primaries.contains(&victim) {
            Ok(())
        } else {
            Err(format!("primaries {primaries:?}"))
        }
    });
    report.failover = killed.elapsed();
    cluster.restart(victim);
    cluster.wait_whole(Duration::from_secs(60));
    report.cluster_whole = killed.elapsed();

    // Later a `serve` instance dies and is started again.
    if let Some(left) = shape.kill_serve_at.checked_sub(started.elapsed()) {
        std::thread::park_timeout(left);
    }
    let gone = instances.remove(2);
    live.lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|b| *b != gone.base);
    let mut gone = gone;
    gone.proc.kill();
    let killed = Instant::now();
    let back = serve(&cluster, &token, shape.wait_replicas, "cluster-serve-2b");
    wait_within(
        Duration::from_secs(60),
        "the restarted instance to be ready",
        || ready(&rt, &back.base),
    );
    report.serve_ready = killed.elapsed();
    live.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(back.base.clone());
    instances.push(back);

    if let Some(left) = shape.load.checked_sub(started.elapsed()) {
        std::thread::park_timeout(left);
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    rt.block_on(load).expect("the load");
    let load_ended = Instant::now();

    let ledger = std::mem::take(&mut *ledger.lock().unwrap_or_else(|p| p.into_inner()));
    let expected: BTreeSet<String> = ledger
        .accepted
        .iter()
        .flat_map(|e| {
            let e = EventId::trusted(e.as_str());
            subs.iter()
                .map(move |s| delivery_id(&e, &SubscriptionId::trusted(s.as_str())).into_string())
        })
        .collect();
    let counts = || {
        recv.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    };
    // Every expected delivery arrives, or, after 60 s of waiting, the ones missing count as
    // lost.
    let _ = poll(Duration::from_secs(60), POLL, || {
        let got = counts();
        expected
            .iter()
            .all(|id| got.get(id).is_some_and(|n| *n >= needed))
    });
    report.drained = load_ended.elapsed();
    let got = counts();
    report.accepted = ledger.accepted.len();
    report.refused = ledger.refused;
    report.expected = expected.len();
    report.delivered = expected
        .iter()
        .filter(|id| got.get(*id).is_some_and(|n| *n >= needed))
        .count();
    report.lost = report.expected - report.delivered;
    report.duplicates = got
        .iter()
        .filter(|(id, _)| expected.contains(*id))
        .map(|(_, n)| n.saturating_sub(needed))
        .sum();
    drop(instances);
    drop(gone);
    report
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.proc.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_primary_and_an_instance_killed_under_load_lose_nothing_acknowledged() {
    if !redis_or_skip() {
        return;
    }
    let report = run(&Run {
        wait_replicas: 1,
        rate: 20,
        load: Duration::from_secs(12),
        kill_primary_at: Duration::from_secs(3),
        stall_replica: None,
        fail_first: false,
        kill_serve_at: Duration::from_secs(8),
        subscriptions: 2,
    });
    println!("3 serve on a Redis Cluster, --kv-wait-replicas 1: {report}");
    // The seconds before the kill alone make 60 events; a busy machine may refuse much of
    // the rest with 503 while the cluster fails over, which a publisher retries.
    assert!(report.accepted >= 50, "the load ran: {report}");
    assert_eq!(report.lost, 0, "nothing acknowledged may be lost: {report}");
    assert!(
        report.duplicates * 10 <= report.expected,
        "duplicates stay a few (a delivery sent again after its instance died): {report}"
    );
}

/// The long run, with the wait and without: `cargo test -p edgehook --test system
/// cluster::long -- --ignored --nocapture`.
#[test]
#[ignore = "long: four runs of up to a minute of load; its figures are in BENCHMARKS.md"]
fn long() {
    if !redis_or_skip() {
        return;
    }
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let seconds = env("EDGEHOOK_CLUSTER_SECONDS", 60);
    let rate = env("EDGEHOOK_CLUSTER_RATE", 50) as u32;
    // The wait on and off; then each with a lagging replica and every first attempt failing
    // (so every delivery is sent from what the store kept).
    let runs = [
        (1, None, false),
        (0, None, false),
        (1, Some(1), true),
        (0, Some(1), true),
    ];
    for (wait_replicas, stall, fail_first) in runs {
        let stall_replica = stall.map(Duration::from_secs);
        let report = run(&Run {
            wait_replicas,
            rate,
            load: Duration::from_secs(seconds),
            kill_primary_at: Duration::from_secs(seconds / 4),
            stall_replica,
            fail_first,
            kill_serve_at: Duration::from_secs(seconds * 2 / 3),
            subscriptions: 10,
        });
        println!(
            "cluster long run: {seconds} s at {rate} events/s x 10, --kv-wait-replicas \
             {wait_replicas}, replica stopped {stall:?} s before the kill, first attempts \
             failing: {fail_first}: {report}"
        );
    }
}

/// `serve --kv rediss://... --extra-ca`: the store over TLS, trusting the CA the operator
/// gave (a `redis-server` with a TLS port only, its certificate from a CA made here).
#[test]
fn serve_keeps_its_state_in_redis_over_tls_with_the_extra_ca() {
    if !redis_or_skip() {
        return;
    }
    let redis = edgehook_testkit::rediscluster::TlsRedis::start();
    let rt = rt();
    let dir = temp_dir("cluster-tls-serve");
    let ca = redis.dir.join("ca.pem");
    let mut command = Command::new(binary());
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
        ])
        .args(["--kv", &redis.url(), "--admin-token", "tls-token"])
        .arg("--extra-ca")
        .arg(&ca)
        .current_dir(&dir);
    let mut proc = Proc::spawn(command);
    let base = format!("http://{}", proc.address());
    assert!(ready(&rt, &base), "ready on a Redis over TLS");
    let operator = Remote::new(&base, "tls-token").expect("client");
    let (status, issued) = call(
        &rt,
        &operator,
        "POST",
        "/internal/v1/clients/acme/keys",
        None,
    );
    assert_eq!(status, 201, "a key issued, so written over TLS: {issued}");
    let listening = proc.wait_for("the listening line", |l| l.contains("\"msg\":\"listening"));
    assert!(listening.contains("rediss://127.0.0.1"), "{listening}");
    drop(proc);
    let _ = std::fs::remove_dir_all(&dir);
}
