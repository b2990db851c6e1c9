//! What the cluster costs, measured: deliveries/s, `serve`'s CPU per delivery, Redis's CPU
//! and commands per delivery, and publish latency, with 1, 2 and 3 `serve` instances on a
//! Redis Cluster, and with `--kv-wait-replicas 1` against 0. An ignored test (it wants a
//! release binary in `EDGEHOOK_BIN` and a quiet machine):
//! `cargo test -p edgehook --test system cluster::measure -- --ignored --nocapture`. Its
//! figures are in BENCHMARKS.md ("Redis Cluster") and docs/scaling.md.

use super::{Instance, call, receiver, serve};
use edgehook::cli::Remote;
use edgehook_testkit::redis::redis_or_skip;
use edgehook_testkit::rediscluster::{RedisCluster, command, info_field};
use edgehook_testkit::rt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Fan-out of every event.
const FAN_OUT: usize = 10;

/// A process's CPU time so far (user + system), from `/proc/<pid>/stat`.
fn cpu_of(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (in parentheses, which may hold spaces).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// The cluster's CPU time (user + system) and commands processed so far, summed over nodes.
fn redis_totals(cluster: &RedisCluster) -> (Duration, u64) {
    let mut cpu = 0.0;
    let mut commands = 0;
    for port in cluster.ports() {
        if let Ok(info) = command(port, &["INFO", "cpu"]) {
            for field in ["used_cpu_user", "used_cpu_sys"] {
                cpu += info_field(&info, field)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0);
            }
        }
        if let Ok(info) = command(port, &["INFO", "stats"]) {
            commands += info_field(&info, "total_commands_processed")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    (Duration::from_secs_f64(cpu), commands)
}

/// One measurement's figures.
struct Figures {
    deliveries_per_s: f64,
    serve_cpu_per_delivery: Duration,
    redis_cpu_per_delivery: Duration,
    commands_per_delivery: f64,
    publish_p50: Duration,
    publish_p99: Duration,
}

/// `instances` `serve`s on a fresh cluster; `publishers` publish (closed loop, round robin)
/// for `seconds`; then waits for every delivery.
fn measure(instances: usize, wait_replicas: u32, publishers: usize, seconds: u64) -> Figures {
    let rt = rt();
    let cluster = RedisCluster::start(3, 1, 2000);
    let recv = receiver(&rt);
    let token = format!("measure-token-{}", std::process::id());
    let servers: Vec<Instance> = (0..instances)
        .map(|i| serve(&cluster, &token, wait_replicas, &format!("measure-{i}")))
        .collect();
    let operator = Remote::new(&servers[0].base, &token).expect("client");
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
    let partner = Remote::new(&servers[0].base, &key).expect("client");
    for i in 0..FAN_OUT {
        let body = format!(
            r#"{{"url":"http://127.0.0.1:{}/s{i}","eventTypes":["load.updated"]}}"#,
            recv.port
        );
        let (status, out) = call(&rt, &partner, "POST", "/v1/webhooks", Some(body));
        assert_eq!(status, 201, "{out}");
    }
    let pids: Vec<u32> = servers.iter().map(|s| s.proc.child.id()).collect();
    let serve_cpu = || pids.iter().map(|p| cpu_of(*p)).sum::<Duration>();
    let (cpu0, redis0) = (serve_cpu(), redis_totals(&cluster));
    let stop = Arc::new(AtomicBool::new(false));
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    let started = Instant::now();
    let tasks: Vec<_> = (0..publishers)
        .map(|p| {
            let (stop, latencies, accepted) = (stop.clone(), latencies.clone(), accepted.clone());
            let remote = Remote::new(&bases[p % bases.len()], &token).expect("client");
            rt.spawn(async move {
                let headers = [
                    ("content-type".to_owned(), "application/json".to_owned()),
                    ("x-service-event".to_owned(), "load.updated".to_owned()),
                ];
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let body = format!(r#"{{"id":"P{p}-{n}","status":"IN_TRANSIT"}}"#);
                    n += 1;
                    let t = Instant::now();
                    let answer = remote
                        .call(
                            "POST",
                            "/internal/v1/events",
                            Some(body.into_bytes()),
                            &headers,
                        )
                        .await;
                    if matches!(answer, Ok((202, _))) {
                        accepted.fetch_add(1, Ordering::SeqCst);
                        latencies
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(t.elapsed());
                    }
                }
            })
        })
        .collect();
    std::thread::park_timeout(Duration::from_secs(seconds));
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        rt.block_on(t).expect("publisher");
    }
    let want = accepted.load(Ordering::SeqCst) * FAN_OUT;
    let received = || recv.counts.lock().unwrap_or_else(|e| e.into_inner()).len();
    let _ = edgehook_testkit::poll(Duration::from_secs(120), edgehook_testkit::POLL, || {
        received() >= want
    });
    let elapsed = started.elapsed();
    let delivered = received().max(1);
    let (cpu1, redis1) = (serve_cpu(), redis_totals(&cluster));
    let mut latencies = std::mem::take(&mut *latencies.lock().unwrap_or_else(|e| e.into_inner()));
    latencies.sort();
    let n = delivered as u32;
    Figures {
        deliveries_per_s: delivered as f64 / elapsed.as_secs_f64(),
        serve_cpu_per_delivery: (cpu1 - cpu0) / n,
        redis_cpu_per_delivery: (redis1.0.saturating_sub(redis0.0)) / n,
        commands_per_delivery: (redis1.1 - redis0.1) as f64 / delivered as f64,
        publish_p50: edgehook_testkit::percentile(&latencies, 0.5),
        publish_p99: edgehook_testkit::percentile(&latencies, 0.99),
    }
}

#[test]
#[ignore = "a measurement: wants a release binary (EDGEHOOK_BIN) and a quiet machine"]
fn measure_instances_and_the_wait() {
    if !redis_or_skip() {
        return;
    }
    let seconds = std::env::var("EDGEHOOK_MEASURE_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    println!(
        "| instances | --kv-wait-replicas | deliveries/s | serve CPU/delivery | Redis CPU/delivery \
         | Redis commands/delivery | publish p50 | publish p99 |"
    );
    for (instances, wait) in [(1, 0), (2, 0), (3, 0), (3, 1), (1, 1)] {
        let f = measure(instances, wait, 8, seconds);
        println!(
            "| {instances} | {wait} | {:.0} | {:.0} µs | {:.0} µs | {:.1} | {:.1} ms | {:.1} ms |",
            f.deliveries_per_s,
            f.serve_cpu_per_delivery.as_secs_f64() * 1e6,
            f.redis_cpu_per_delivery.as_secs_f64() * 1e6,
            f.commands_per_delivery,
            f.publish_p50.as_secs_f64() * 1e3,
            f.publish_p99.as_secs_f64() * 1e3,
        );
    }
}
