//! The benchmark suite behind `edgehook-bench`. Every figure that matters is printed beside a
//! baseline measured in the same run, on the same machine, the same way, as a ratio:
//!
//! - API latency (in process) against the empty component ([`crate::runtime::Baseline`]);
//! - instantiate time against the empty component;
//! - `edgehook serve` throughput over loopback against a plain hyper server;
//! - delivery rate against the loopback receiver's own capacity;
//! - CPU time per `serve` request and per delivery (steal and waiting excluded, so builds
//!   compare on a shared machine) against the same figure for those baselines;
//! - simulation speed, component size and cost growth against their targets or smallest size.

use crate::net::{NetOptions, NetOutbound};
use crate::outbound::NoNetwork;
use crate::runtime::{Baseline, HostEnv, Runtime};
use crate::scenario::{self, Scenario};
use crate::serve::Server;
use crate::store::{KvStore, MemoryStore, RemoteKv};
use anyhow::{Context as _, Result, ensure};
use bytes::Bytes;
use edgehook_component::{directory, keys::DUE_DIRECTORY};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub mod spin;

/// One line of the results table.
#[derive(Debug, Clone)]
pub struct Row {
    /// What was measured.
    pub name: String,
    /// The measurement.
    pub value: f64,
    /// Its unit.
    pub unit: &'static str,
    /// The baseline measured in the same run, if any.
    pub baseline: Option<f64>,
    /// The target, as text.
    pub target: String,
    /// Whether the target is met.
    pub met: Option<bool>,
}

impl Row {
    fn ratio(&self) -> Option<f64> {
        self.baseline.filter(|b| *b > 0.0).map(|b| self.value / b)
    }
}

/// Prints the table.
pub fn print(rows: &[Row]) {
    println!(
        "{:<52} {:>14} {:>14} {:>8}  {:<22} met",
        "benchmark", "value", "baseline", "ratio", "target"
    );
    for r in rows {
        let base = r.baseline.map_or("-".to_owned(), |b| format!("{b:.1}"));
        let ratio = r.ratio().map_or("-".to_owned(), |x| format!("{x:.2}x"));
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        println!(
            "{:<52} {:>10.1} {:<3} {:>14} {:>8}  {:<22} {met}",
            r.name, r.value, r.unit, base, ratio, r.target
        );
    }
}

/// CPU time this process has used so far, all threads (live and ended), from
/// `/proc/self/stat`; `None` where there is no such file. Unlike wall-clock time it does not
/// count time the machine gave to other guests (steal), nor time spent waiting, so CPU per
/// request compares builds on a shared machine where requests per second cannot.
pub fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces:
    // state is the first, utime the 12th, stime the 13th (clock ticks).
    let mut fields = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // USER_HZ: 100 on Linux (the ABI fixes it, whatever the kernel's own tick rate).
    Some(Duration::from_millis((utime + stime) * 10))
}

/// Process CPU time (µs) per unit of work since `since` (`NaN` where it cannot be read).
fn cpu_per(since: Option<Duration>, units: usize) -> f64 {
    match (since, process_cpu()) {
        (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64() * 1e6 / units.max(1) as f64,
        _ => f64::NAN,
    }
}

/// The CPU equivalent of `serve`'s target: 10,000 requests/s on 2 cores is 200 µs of CPU
/// per request, load generator included.
const CPU_PER_REQUEST_TARGET: &str = "10k/s on 2 cores=200";
/// The CPU equivalent of the delivery target: 5,000 deliveries/s on 2 cores is 400 µs.
const CPU_PER_DELIVERY_TARGET: &str = "5k/s on 2 cores=400";

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn env(kv: KvStore) -> HostEnv {
    let config: BTreeMap<String, String> = [
        ("admin_token", "bench"),
        ("subscription_limit", "100000"),
        ("allow_private_targets", "true"),
        ("allow_http", "true"),
        // The limiter still counts every request (its store operation is measured); the
        // benchmarks just must not be refused.
        ("rate_limit_per_minute", "1000000"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    HostEnv {
        kv,
        config: Arc::new(config),
        clock: None,
        outbound: Arc::new(NoNetwork),
        seed: None,
        guest_log: None,
    }
}

/// A JSON request with a bearer token, as the benchmarks and the server's tests send them.
pub(crate) fn req(method: &str, path: &str, auth: &str, body: &str) -> http::Request<Full<Bytes>> {
    http::Request::builder()
        .method(method)
        .uri(format!("http://bench{path}"))
        .header("authorization", format!("Bearer {auth}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("a valid request")
}

async fn issue_key(rt: &Runtime, env: &HostEnv, client: &str) -> Result<String> {
    let resp = rt
        .handle(
            env,
            req(
                "POST",
                &format!("/internal/v1/clients/{client}/keys"),
                "bench",
                "",
            ),
        )
        .await?;
    ensure!(resp.status == 201, "issue key: {}", resp.status);
    Ok(resp.json()["data"]["apiKey"]
        .as_str()
        .context("apiKey")?
        .to_owned())
}

async fn create(rt: &Runtime, env: &HostEnv, key: &str, url: &str, event: &str) -> Result<String> {
    let body = format!(r#"{{"url":"{url}","eventTypes":["{event}"]}}"#);
    let resp = rt
        .handle(env, req("POST", "/v1/webhooks", key, &body))
        .await?;
    ensure!(resp.status == 201, "create: {}", resp.status);
    Ok(resp.json()["data"]["id"].as_str().context("id")?.to_owned())
}

/// Creates `n` subscriptions `https://{prefix}{i}.example.com/x` for `key`.
async fn create_many(
    rt: &Runtime,
    env: &HostEnv,
    key: &str,
    prefix: &str,
    n: usize,
    event: &str,
) -> Result<()> {
    for i in 0..n {
        create(
            rt,
            env,
            key,
            &format!("https://{prefix}{i}.example.com/x"),
            event,
        )
        .await?;
    }
    Ok(())
}

/// Times `n` runs of `f`; returns the sorted durations.
async fn timed<F, Fut>(n: usize, mut f: F) -> Result<Vec<Duration>>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        f(i).await?;
        out.push(t.elapsed());
    }
    out.sort_unstable();
    Ok(out)
}

/// Times `n` calls of the request `make` builds; each must answer `want`.
async fn timed_request(
    rt: &Runtime,
    env: &HostEnv,
    n: usize,
    want: u16,
    make: impl Fn() -> http::Request<Full<Bytes>>,
) -> Result<Vec<Duration>> {
    timed(n, |_| async {
        let resp = rt.handle(env, make()).await?;
        ensure!(resp.status == want, "wanted {want}, got {}", resp.status);
        Ok(())
    })
    .await
}

/// A fan-out-1 event as the benchmarks publish it: a small load, `load.status_changed`.
fn event_request() -> http::Request<Full<Bytes>> {
    let mut event = req(
        "POST",
        "/internal/v1/events",
        "bench",
        r#"{"id":"L-1","status":"ASSIGNED","eligibleForTracking":true}"#,
    );
    event.headers_mut().insert(
        "x-service-event",
        http::HeaderValue::from_static("load.status_changed"),
    );
    event
}

/// In-process API latency (p50, p99) of create, list (50 subscriptions) and delete, beside
/// the empty component; and instantiate time of both.
pub async fn api_latency(n: usize) -> Result<Vec<Row>> {
    let rt = Runtime::embedded()?;
    let baseline = Baseline::new()?;
    let env = env(KvStore::Local(Arc::new(MemoryStore::new())));
    let key = issue_key(rt, &env, "bench").await?;
    let lister = issue_key(rt, &env, "lister").await?;
    create_many(rt, &env, &lister, "l", 50, "load.created").await?;
    // Warm up both (first calls fault in pages).
    for _ in 0..50 {
        baseline.handle(&env, req("GET", "/", "", "")).await?;
        rt.handle(&env, req("GET", "/healthz", "", "")).await?;
    }
    let empty = timed(n, |_| async {
        baseline
            .handle(&env, req("GET", "/", "", ""))
            .await
            .map(|_| ())
    })
    .await?;
    // The floor of this component: its smallest request (settings, the bucket, one store
    // read, a JSON answer) through the same path. What a create or list costs above it is
    // the work of the operation itself.
    let health = timed_request(rt, &env, n, 200, || req("GET", "/healthz", "", "")).await?;
    let created: std::cell::RefCell<Vec<String>> = std::cell::RefCell::default();
    let create_t = timed(n, |i| {
        let (env, key, created) = (&env, &key, &created);
        async move {
            let id = create(
                rt,
                env,
                key,
                &format!("https://c{i}.example.com/x"),
                "load.updated",
            )
            .await?;
            created.borrow_mut().push(id);
            Ok(())
        }
    })
    .await?;
    let list_t = timed_request(rt, &env, n, 200, || {
        req("GET", "/v1/webhooks?limit=50", &lister, "")
    })
    .await?;
    let ids = created.into_inner();
    let delete_t = timed(n, |i| {
        let (env, key, id) = (&env, &key, ids[i].clone());
        async move {
            let resp = rt
                .handle(env, req("DELETE", &format!("/v1/webhooks/{id}"), key, ""))
                .await?;
            ensure!(resp.status == 200, "delete: {}", resp.status);
            Ok(())
        }
    })
    .await?;
    let (e50, e99) = (percentile(&empty, 0.5), percentile(&empty, 0.99));
    let mut rows = Vec::new();
    rows.push(Row {
        name: "in-process GET /healthz p50 (vs empty handler)".into(),
        value: percentile(&health, 0.5),
        unit: "us",
        baseline: Some(e50),
        target: "- (this component's floor)".into(),
        met: None,
    });
    for (name, t) in [
        ("create", &create_t),
        ("list (50 subscriptions)", &list_t),
        ("delete", &delete_t),
    ] {
        for (p, label, base) in [(0.5, "p50", e50), (0.99, "p99", e99)] {
            let v = percentile(t, p);
            rows.push(Row {
                name: format!("in-process {name} {label} (vs empty handler)"),
                value: v,
                unit: "us",
                baseline: Some(base),
                target: "<= 2x empty handler".into(),
                met: Some(v <= 2.0 * base),
            });
        }
    }
    let inst = timed(n * 2, |_| rt.instantiate_only(&env)).await?;
    let inst_empty = timed(n * 2, |_| baseline.instantiate_only(&env)).await?;
    let mean = |t: &[Duration]| {
        t.iter().map(Duration::as_secs_f64).sum::<f64>() / t.len().max(1) as f64 * 1e6
    };
    rows.push(Row {
        name: "instantiate with pooling, mean (vs empty component)".into(),
        value: mean(&inst),
        unit: "us",
        baseline: Some(mean(&inst_empty)),
        target: "<= 50 us".into(),
        met: Some(mean(&inst) <= 50.0),
    });
    Ok(rows)
}

/// The guest's own work per request, in fuel (wasmtime's count of the WebAssembly
/// operators executed), beside the empty component's: healthz, create, list (50), delete,
/// and one event published to one subscription (the ingest and its attempt 1, sent to a
/// simulated endpoint answering 200). Fuel does not move with the machine's speed or load,
/// so two builds compare exactly; it leaves out what the host does (host calls, hyper,
/// instantiation), which the latency and CPU rows measure.
pub async fn guest_fuel() -> Result<Vec<Row>> {
    let rt = Runtime::metered(crate::runtime::COMPONENT_WASM)?;
    let baseline = Baseline::metered()?;
    let clock = crate::clock::VirtualClock::new(1_767_225_600_000);
    let net = crate::outbound::SimNet::new(clock.clone());
    let store = Arc::new(MemoryStore::new());
    let mut env = env(KvStore::Local(store.clone()));
    env.outbound = Arc::new(net.clone());
    // Virtual time: every event falls in the same second, so the rows are exact.
    env.clock = Some(clock.clone());
    let key = issue_key(&rt, &env, "bench").await?;
    let lister = issue_key(&rt, &env, "lister").await?;
    create_many(&rt, &env, &lister, "l", 50, "load.created").await?;
    let hook = "https://hook.example.com/in";
    net.endpoint(hook, []);
    create(&rt, &env, &key, hook, "load.status_changed").await?;
    let (_, empty) = baseline
        .handle_metered(&env, req("GET", "/", "", ""))
        .await?;
    // Each request's fuel, and its store operations (each a host call; with `--kv redis` a
    // round trip).
    let fuel = |r: http::Request<Full<Bytes>>, want: u16| {
        let (rt, env, store) = (&rt, &env, &store);
        async move {
            let ops = store.ops();
            let (resp, fuel) = rt.handle_metered(env, r).await?;
            ensure!(resp.status == want, "wanted {want}, got {}", resp.status);
            Ok::<_, anyhow::Error>((resp, (fuel, store.ops() - ops)))
        }
    };
    let (_, health) = fuel(req("GET", "/healthz", "", ""), 200).await?;
    let body = r#"{"url":"https://f.example.com/x","eventTypes":["load.updated"]}"#;
    let (created, create) = fuel(req("POST", "/v1/webhooks", &key, body), 201).await?;
    let id = created.json()["data"]["id"]
        .as_str()
        .context("id")?
        .to_owned();
    let (_, list) = fuel(req("GET", "/v1/webhooks?limit=50", &lister, ""), 200).await?;
    let delete_path = format!("/v1/webhooks/{id}");
    let (_, delete) = fuel(req("DELETE", &delete_path, &key, ""), 200).await?;
    let sent = net.received().len();
    let (_, publish) = fuel(event_request(), 202).await?;
    ensure!(
        net.received().len() == sent + 1,
        "the event's attempt 1 was not sent in its invocation"
    );
    // The next event of the same second (its second already listed, as for most events
    // under load), then one more with 360 other seconds listed in the due directory, as under
    // steady load (a second stays for its minute of grace; retries add seconds ahead): the
    // two must cost the same, the directory searched rather than parsed.
    let (_, publish_again) = fuel(event_request(), 202).await?;
    let listed = env
        .kv
        .get(&DUE_DIRECTORY)
        .await?
        .context("the due directory")?;
    let mut dir = directory::decode(&listed)?;
    let second = clock.now_ms() / 1000;
    dir.extend((1..=360).map(|s| (second - 400 + s, 0)));
    env.kv.set(&DUE_DIRECTORY, &directory::encode(&dir)).await?;
    let (_, publish_queued) = fuel(event_request(), 202).await?;
    // A load the size of a real one (forty stops), for a type nobody listens to now (the one
    // subscription to it was deleted above): validating, hashing and storing it.
    let load = large_load();
    let mut big = req("POST", "/internal/v1/events", "bench", &load);
    big.headers_mut().insert(
        "x-service-event",
        http::HeaderValue::from_static("load.updated"),
    );
    let (_, ingest_large) = fuel(big, 202).await?;
    let large_name = format!(
        "ingest, {:.1} KiB load, no listener",
        load.len() as f64 / 1024.0
    );
    let requests = [
        ("GET /healthz", health),
        ("create", create),
        ("list (50 subscriptions)", list),
        ("delete", delete),
        ("event, fan-out 1 (ingest + attempt 1)", publish),
        ("next event of its second, fan-out 1", publish_again),
        ("next event, 360 more seconds queued", publish_queued),
        (&large_name, ingest_large),
    ];
    let fuel_rows = requests.iter().map(|(name, (fuel, _))| Row {
        name: format!("guest fuel per {name} (vs empty handler)"),
        value: *fuel as f64,
        unit: "fuel",
        baseline: Some(empty as f64),
        target: "- (exact; compares builds)".into(),
        met: None,
    });
    let ops_rows = requests.iter().map(|(name, (_, ops))| Row {
        name: format!("store operations per {name}"),
        value: *ops as f64,
        unit: "ops",
        baseline: None,
        target: "- (exact; compares builds)".into(),
        met: None,
    });
    Ok(fuel_rows.chain(ops_rows).collect())
}

/// A [`RedisStore`](crate::redisstore::RedisStore) at `url` whose keys go under `prefix`.
async fn redis_store(url: &str, prefix: &str) -> Result<Arc<crate::redisstore::RedisStore>> {
    let store = crate::redisstore::RedisStore::open_with(
        url,
        crate::redisstore::RedisOptions {
            prefix: prefix.to_owned(),
            ..Default::default()
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{}", e.0))?;
    Ok(Arc::new(store))
}

/// p50 of `n` reads of one key through `store`: one round trip.
async fn round_trip(store: &dyn RemoteKv, n: usize) -> Result<f64> {
    let times = timed(n, |_| async {
        store
            .get("rtt")
            .await
            .map(|_| ())
            .map_err(|e| anyhow::anyhow!("{}", e.0))
    })
    .await?;
    Ok(percentile(&times, 0.5))
}

/// Requests/s of `GET /v1/webhooks` (a client of 10 subscriptions) at `edgehook serve`'s
/// server on `store`.
async fn serve_rps(store: KvStore, connections: usize, duration: Duration) -> Result<f64> {
    let (port, list) = serve_webhooks(&env(store)).await?;
    Ok(load(port, connections, duration, usize::MAX, list)
        .await?
        .rps)
}

/// A TCP relay on a free loopback port to `target`, holding everything it relays for `delay`
/// in each direction, in order: a store in another zone, on loopback.
async fn delay_line(target: std::net::SocketAddr, delay: Duration) -> Result<u16> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(target).await else {
                    return;
                };
                let (_, _) = (client.set_nodelay(true), server.set_nodelay(true));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::join!(
                    delayed(client_read, server_write, delay),
                    delayed(server_read, client_write, delay)
                );
            });
        }
    });
    Ok(port)
}

/// Copies `from` to `to`, each chunk written `delay` after it was read.
async fn delayed(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (chunks, mut queued) = tokio::sync::mpsc::unbounded_channel();
    let reader = async move {
        let mut buf = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf).await {
            if chunks
                .send((tokio::time::Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                break;
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
    };
    tokio::join!(reader, writer);
}

/// `url` with its host and port replaced by `127.0.0.1:{port}` (password and db kept).
fn redis_url_at(url: &str, port: u16) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let userinfo = authority.rsplit_once('@').map(|(u, _)| format!("{u}@"));
    Some(format!(
        "{scheme}://{}127.0.0.1:{port}{path}",
        userinfo.unwrap_or_default()
    ))
}

/// The API and publish over Redis (`--kv redis://...`, as a deployment sharing one store
/// runs), where every store operation is a network round trip: create, list (50) and a
/// fan-out-1 publish (to its 202; its attempt 1, to a simulated endpoint, finishes before
/// the next publish, untimed), p50, each against one round trip (a `GET` of one key through
/// the same store) measured in the same run. Then `edgehook serve`'s throughput for
/// `GET /v1/webhooks` over this Redis against the same over the file store, and over the
/// same Redis behind a delay line (each way 0.5 ms, rounded up to tokio's millisecond timer:
/// a store a few milliseconds away, its round trip measured) against the direct one. Needs a
/// Redis on TCP: `EDGEHOOK_BENCH_REDIS=redis://127.0.0.1:6379`; the keys go under a prefix
/// of their own, removed afterwards.
pub async fn redis_latency(
    url: &str,
    n: usize,
    duration: Duration,
    connections: usize,
) -> Result<Vec<Row>> {
    let prefix = format!("edgehook-bench-{}:", std::process::id());
    let store = redis_store(url, &prefix).await?;
    let rt = Runtime::embedded()?;
    let net = crate::outbound::SimNet::new(crate::clock::VirtualClock::new(0));
    let hook = "https://hook.example.com/in";
    net.endpoint(hook, []);
    let mut env = env(KvStore::Remote(store.clone()));
    env.outbound = Arc::new(net);
    let key = issue_key(rt, &env, "bench").await?;
    let lister = issue_key(rt, &env, "lister").await?;
    create_many(rt, &env, &lister, "l", 50, "load.created").await?;
    create(rt, &env, &key, hook, "load.status_changed").await?;
    let rtt = round_trip(store.as_ref(), n).await?;
    let body = r#"{"url":"https://f.example.com/x","eventTypes":["load.updated"]}"#;
    let create =
        timed_request(rt, &env, n, 201, || req("POST", "/v1/webhooks", &key, body)).await?;
    let list = timed_request(rt, &env, n, 200, || {
        req("GET", "/v1/webhooks?limit=50", &lister, "")
    })
    .await?;
    // To the 202; attempt 1 then finishes before the next publish, outside the timing.
    let mut publish = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let (resp, rest) = rt.handle_detached(&env, event_request()).await?;
        publish.push(t.elapsed());
        ensure!(resp.status == 202, "publish: {}", resp.status);
        rest.finish().await?;
    }
    publish.sort_unstable();
    // Throughput, each server with a keyspace of its own.
    let on_file = serve_rps(file_store("redis-file")?, connections, duration).await?;
    let direct = redis_store(url, &format!("{prefix}direct:")).await?;
    let on_redis = serve_rps(KvStore::Remote(direct), connections, duration).await?;
    let target = match redis::Client::open(url)?.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port) => tokio::net::lookup_host((host.as_str(), *port))
            .await?
            .next()
            .context("the Redis host resolves to no address")?,
        _ => anyhow::bail!("the redis section needs a Redis on TCP"),
    };
    let far_port = delay_line(target, Duration::from_micros(500)).await?;
    let far_url = redis_url_at(url, far_port).context("a redis:// URL")?;
    let far = redis_store(&far_url, &format!("{prefix}far:")).await?;
    let far_rtt = round_trip(far.as_ref(), n.min(200)).await?;
    let on_far = serve_rps(KvStore::Remote(far), connections, duration).await?;
    // Leave the server as it was found.
    loop {
        let keys = store
            .list_keys(None, 1000)
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.0))?;
        if keys.is_empty() {
            break;
        }
        for k in keys {
            store
                .delete(&k)
                .await
                .map_err(|e| anyhow::anyhow!("{}", e.0))?;
        }
    }
    let mut rows = vec![Row {
        name: "redis: one store round trip (GET), p50".into(),
        value: rtt,
        unit: "us",
        baseline: None,
        target: "-".into(),
        met: None,
    }];
    for (name, times) in [
        ("create", create),
        ("list (50 subscriptions)", list),
        ("publish, fan-out 1 (to the 202)", publish),
    ] {
        rows.push(Row {
            name: format!("redis: {name}, p50 (vs one round trip)"),
            value: percentile(&times, 0.5),
            unit: "us",
            baseline: Some(rtt),
            target: "- (round trips per call)".into(),
            met: None,
        });
    }
    rows.extend([
        Row {
            name: format!("redis: serve GET /v1/webhooks, {connections} conns (vs file store)"),
            value: on_redis,
            unit: "r/s",
            baseline: Some(on_file),
            target: "-".into(),
            met: None,
        },
        Row {
            name: "redis via delay line: one round trip (GET), p50 (vs direct)".into(),
            value: far_rtt,
            unit: "us",
            baseline: Some(rtt),
            target: "-".into(),
            met: None,
        },
        Row {
            name: format!(
                "redis via delay line: serve GET /v1/webhooks, {connections} conns (vs direct)"
            ),
            value: on_far,
            unit: "r/s",
            baseline: Some(on_redis),
            target: "-".into(),
            met: None,
        },
    ]);
    Ok(rows)
}

/// A load of a realistic size: a load with forty stops, about 5.7 KiB of JSON.
fn large_load() -> String {
    let stops: Vec<String> = (0..40)
        .map(|i| {
            format!(
                r#"{{"seq":{i},"city":"Springfield {i}","lat":41.{i}5,"lon":-87.6{i},"window":{{"from":"2026-11-22T08:00:00Z","to":"2026-11-22T10:00:00Z"}},"done":false}}"#
            )
        })
        .collect();
    format!(
        r#"{{"id":"L-1","status":"ASSIGNED","eligibleForTracking":true,"stops":[{}]}}"#,
        stops.join(",")
    )
}

/// Component size against the budget, the empty component as baseline.
pub fn size() -> Vec<Row> {
    let size = crate::COMPONENT_WASM.len() as f64 / 1024.0;
    vec![Row {
        name: "component size (vs empty component)".into(),
        value: size,
        unit: "KiB",
        baseline: Some(crate::runtime::EMPTY_WASM.len() as f64 / 1024.0),
        target: "<= 512 KiB".into(),
        met: Some(size <= 512.0),
    }]
}

/// A plain hyper server answering every request with `body`; the throughput baseline.
async fn plain_server(body: Bytes, hits: Arc<AtomicUsize>) -> Result<u16> {
    crate::receiver::loopback(move |_, _| {
        let (body, hits) = (body.clone(), hits.clone());
        async move {
            hits.fetch_add(1, Ordering::Relaxed);
            hyper::Response::new(Full::new(body))
        }
    })
    .await
}

/// The empty component behind the same kind of hyper server: every request is read whole,
/// then handled by a fresh instance of `bench/empty`, as `edgehook serve` does with ours. The
/// floor of any one-instance-per-request server on this machine.
async fn empty_component_server(env: HostEnv) -> Result<u16> {
    let baseline = Arc::new(Baseline::new()?);
    crate::receiver::loopback(move |head, body| {
        let (baseline, env) = (baseline.clone(), env.clone());
        async move {
            let req = hyper::Request::from_parts(head, Full::new(body));
            match baseline.handle(&env, req).await {
                Ok(r) => hyper::Response::new(Full::new(r.body)),
                Err(_) => {
                    let mut r = hyper::Response::new(Full::new(Bytes::new()));
                    *r.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
                    r
                }
            }
        }
    })
    .await
}

/// What a load run measured.
struct LoadResult {
    /// Requests per second.
    rps: f64,
    /// p99 latency, µs.
    p99: f64,
    /// Process CPU time per request, µs (load generator included).
    cpu: f64,
}

/// Drives `connections` keep-alive connections sending `make()` for `duration` (or until
/// `limit` requests).
async fn load(
    port: u16,
    connections: usize,
    duration: Duration,
    limit: usize,
    make: MakeRequest,
) -> Result<LoadResult> {
    let cpu0 = process_cpu();
    let started = Instant::now();
    let sent = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (make, sent) = (make.clone(), sent.clone());
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
            let _ = stream.set_nodelay(true);
            let (mut send, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            let mut lat = Vec::new();
            while started.elapsed() < duration && sent.fetch_add(1, Ordering::Relaxed) < limit {
                let t = Instant::now();
                let resp = send.send_request(make()).await?;
                let status = resp.status();
                resp.into_body().collect().await?;
                anyhow::ensure!(status.is_success(), "status {status}");
                lat.push(t.elapsed());
            }
            Ok::<_, anyhow::Error>(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let secs = started.elapsed().as_secs_f64();
    all.sort_unstable();
    Ok(LoadResult {
        rps: all.len() as f64 / secs,
        p99: percentile(&all, 0.99),
        cpu: cpu_per(cpu0, all.len()),
    })
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("edgehook-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A request the load generator sends, made afresh for each send.
type MakeRequest = Arc<dyn Fn() -> http::Request<Full<Bytes>> + Send + Sync>;

/// The embedded file store in a fresh directory, flushed as `edgehook serve` flushes it.
fn file_store(name: &str) -> Result<KvStore> {
    let store = crate::filestore::FileStore::open(
        &temp_dir(name),
        crate::filestore::SyncPolicy::Every(Duration::from_millis(100)),
    )?;
    Ok(KvStore::Local(Arc::new(store)))
}

/// `edgehook serve`'s server on `env`, on a free loopback port, with a client of 10
/// subscriptions: the port and that client's `GET /v1/webhooks`.
async fn serve_webhooks(env: &HostEnv) -> Result<(u16, MakeRequest)> {
    let rt = Runtime::embedded()?;
    let key = issue_key(rt, env, "bench").await?;
    create_many(rt, env, &key, "s", 10, "load.created").await?;
    let port = spawn_serve(env.clone()).await?;
    Ok((port, Arc::new(move || req("GET", "/v1/webhooks", &key, ""))))
}

/// `edgehook serve`'s server on `env`, on a free loopback port, running until the runtime
/// stops: its port.
async fn spawn_serve(env: HostEnv) -> Result<u16> {
    let server = Server::new(env)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        // The sender lives as long as the server: it stops when the runtime does.
        let _stop = stop;
        server.run(listener, stop_rx).await
    });
    Ok(port)
}

/// `edgehook serve` (the real server, durable store) over loopback: `GET /v1/webhooks` under
/// concurrent load, against a plain hyper server answering the same bytes.
pub async fn serve_throughput(duration: Duration, connections: usize) -> Result<Vec<Row>> {
    let env = env(file_store("serve")?);
    let (port, list) = serve_webhooks(&env).await?;
    let sample = Runtime::embedded()?.handle(&env, list()).await?.body;
    let base_port = plain_server(sample, Arc::default()).await?;
    let empty_port = empty_component_server(env.clone()).await?;
    let base = load(base_port, connections, duration, usize::MAX, list.clone()).await?;
    let empty = load(empty_port, connections, duration, usize::MAX, list.clone()).await?;
    let ours = load(port, connections, duration, usize::MAX, list).await?;
    let (rps, p99) = (ours.rps, ours.p99);
    Ok(vec![
        Row {
            name: format!("serve GET /v1/webhooks, {connections} conns (vs empty component)"),
            value: rps,
            unit: "r/s",
            baseline: Some(empty.rps),
            target: "-".into(),
            met: None,
        },
        Row {
            name: format!("serve GET /v1/webhooks, {connections} connections (vs plain hyper)"),
            value: rps,
            unit: "r/s",
            baseline: Some(base.rps),
            target: ">= 10000 r/s".into(),
            met: Some(rps >= 10_000.0),
        },
        Row {
            name: "serve GET /v1/webhooks p99 (vs plain hyper)".into(),
            value: p99,
            unit: "us",
            baseline: Some(base.p99),
            target: "-".into(),
            met: None,
        },
        Row {
            name: "serve CPU per request (vs empty component)".into(),
            value: ours.cpu,
            unit: "us",
            baseline: Some(empty.cpu),
            target: CPU_PER_REQUEST_TARGET.into(),
            met: None,
        },
    ])
}

/// Events published to the real server → signed deliveries completed at a loopback receiver,
/// per second, for fan-out 1, 100 and 1,000; against the receiver's own capacity at the same
/// concurrency.
pub async fn delivery_rate(total: usize) -> Result<Vec<Row>> {
    let hits = Arc::new(AtomicUsize::new(0));
    let receiver = plain_server(Bytes::from_static(b"ok"), hits.clone()).await?;
    let body =
        Bytes::from_static(br#"{"id":"L-1","status":"ASSIGNED","eligibleForTracking":true}"#);
    let b = body.clone();
    let make: MakeRequest = Arc::new(move || {
        http::Request::post("/hook")
            .header("host", "127.0.0.1")
            .body(Full::new(b.clone()))
            .expect("request")
    });
    let capacity = load(receiver, 16, Duration::from_secs(60), total, make).await?;
    let mut rows = Vec::new();
    for fanout in [1usize, 100, 1000] {
        let store = MemoryStore::new();
        let mut e = env(KvStore::Local(Arc::new(store)));
        e.outbound = Arc::new(NetOutbound::new(&NetOptions::open())?);
        let rt = Runtime::embedded()?;
        for c in 0..fanout.div_ceil(100) {
            let key = issue_key(rt, &e, &format!("c{c}")).await?;
            for i in 0..100.min(fanout - c * 100) {
                create(
                    rt,
                    &e,
                    &key,
                    &format!("http://127.0.0.1:{receiver}/s{c}-{i}"),
                    "load.updated",
                )
                .await?;
            }
        }
        let server = Server::new(e.clone())?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(server.run(listener, stop_rx));
        let events = total.div_ceil(fanout).max(1);
        let expected = events * fanout;
        let before = hits.load(Ordering::Relaxed);
        let cpu0 = process_cpu();
        let started = Instant::now();
        let b = body.clone();
        let publish: MakeRequest = Arc::new(move || {
            http::Request::post("/internal/v1/events")
                .header("host", "127.0.0.1")
                .header("authorization", "Bearer bench")
                .header("content-type", "application/json")
                .header("x-service-event", "load.updated")
                .body(Full::new(b.clone()))
                .expect("request")
        });
        load(port, 32, Duration::from_secs(600), events, publish).await?;
        while hits.load(Ordering::Relaxed) - before < expected {
            ensure!(
                started.elapsed() < Duration::from_secs(600),
                "deliveries did not complete"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let rate = expected as f64 / started.elapsed().as_secs_f64();
        let cpu = cpu_per(cpu0, expected);
        rows.push(Row {
            name: format!("deliveries/s, fan-out {fanout} (vs receiver capacity)"),
            value: rate,
            unit: "d/s",
            baseline: Some(capacity.rps),
            target: ">= 5000 d/s".into(),
            met: Some(rate >= 5000.0),
        });
        rows.push(Row {
            name: format!("CPU per delivery, fan-out {fanout} (vs one receiver exchange)"),
            value: cpu,
            unit: "us",
            baseline: Some(capacity.cpu),
            target: CPU_PER_DELIVERY_TARGET.into(),
            met: None,
        });
    }
    Ok(rows)
}

/// 10,000 deliveries through the full retry schedule on the simulation host.
pub fn simulation_speed() -> Result<Vec<Row>> {
    let s = Scenario {
        subscriptions: 100,
        events: 100,
        ..Scenario::default()
    };
    let o = scenario::run(&s)?;
    o.check(&s).map_err(|p| anyhow::anyhow!("ledger: {p:?}"))?;
    let secs = o.wall.as_secs_f64();
    Ok(vec![Row {
        name: format!(
            "simulation: {} deliveries, {} attempts, 30% failing",
            o.created, o.attempts
        ),
        value: secs,
        unit: "s",
        baseline: None,
        target: "< 5 s".into(),
        met: Some(secs < 5.0),
    }])
}

/// Publish and list cost at 10, 1,000 and 10,000 subscriptions in the store: 10 of them
/// match the published type and the listing client has 50; the rest belong to others.
pub async fn cost_growth() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut first: Option<(f64, f64)> = None;
    for total in [10usize, 1000, 10_000] {
        let store = Arc::new(MemoryStore::new());
        let env = env(KvStore::Local(store.clone()));
        let rt = Runtime::embedded()?;
        let key = issue_key(rt, &env, "owner").await?;
        create_many(rt, &env, &key, "m", 10, "load.created").await?;
        let lister = issue_key(rt, &env, "lister").await?;
        create_many(rt, &env, &lister, "l", 50, "load.updated").await?;
        let mut others = String::new();
        for i in 0..total.saturating_sub(10) {
            if i % 10_000 == 0 {
                others = issue_key(rt, &env, &format!("other{i}")).await?;
            }
            create(
                rt,
                &env,
                &others,
                &format!("https://o{i}.example.com/x"),
                "load.status_changed",
            )
            .await?;
        }
        let runs = 200;
        let ops0 = store.ops();
        let publish = timed(runs, |_| async {
            rt.publish(&env, "load.created", br#"{"id":"L"}"#)
                .await?
                .map_err(|e| anyhow::anyhow!("{e:?}"))?;
            Ok(())
        })
        .await?;
        let publish_ops = (store.ops() - ops0) as f64 / runs as f64;
        let list = timed(runs, |_| async {
            rt.handle(&env, req("GET", "/v1/webhooks?limit=50", &lister, ""))
                .await
                .map(|_| ())
        })
        .await?;
        let (p, l) = (percentile(&publish, 0.5), percentile(&list, 0.5));
        let (p0, l0) = *first.get_or_insert((p, l));
        rows.push(Row {
            name: format!(
                "publish (10 matching) at {total} subscriptions, p50; {publish_ops:.0} ops"
            ),
            value: p,
            unit: "us",
            baseline: Some(p0),
            target: "flat as total grows".into(),
            met: Some(p <= 2.0 * p0),
        });
        rows.push(Row {
            name: format!("list (50 own) at {total} subscriptions, p50"),
            value: l,
            unit: "us",
            baseline: Some(l0),
            target: "flat as total grows".into(),
            met: Some(l <= 2.0 * l0),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fuel counts the guest's work exactly: the same request uses the same fuel every time,
    /// a request doing more work uses more, the empty component almost none, and a runtime
    /// that does not meter says so rather than reporting a number.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fuel_counts_the_guests_work_exactly() {
        let rt = Runtime::metered(crate::runtime::COMPONENT_WASM).expect("metered runtime");
        let env = env(KvStore::Local(Arc::new(MemoryStore::new())));
        let health = || req("GET", "/healthz", "", "");
        let (resp, first) = rt.handle_metered(&env, health()).await.expect("healthz");
        assert_eq!(resp.status, 200);
        let (_, again) = rt.handle_metered(&env, health()).await.expect("healthz");
        assert_eq!(first, again, "the same request, the same fuel");
        let key = issue_key(&rt, &env, "fuel").await.expect("key");
        let body = r#"{"url":"https://f.example.com/x","eventTypes":["load.updated"]}"#;
        let (resp, create) = rt
            .handle_metered(&env, req("POST", "/v1/webhooks", &key, body))
            .await
            .expect("create");
        assert_eq!(resp.status, 201);
        assert!(
            create > first,
            "a create ({create}) does more than healthz ({first})"
        );
        let (_, empty) = Baseline::metered()
            .expect("metered baseline")
            .handle_metered(&env, health())
            .await
            .expect("empty");
        assert!(
            0 < empty && empty * 10 < first,
            "empty {empty}, healthz {first}"
        );
        let unmetered = Runtime::new(crate::runtime::COMPONENT_WASM).expect("runtime");
        assert!(unmetered.handle_metered(&env, health()).await.is_err());
    }

    /// Under steady load the due directory lists every second of the last minute and more
    /// (retries add seconds ahead). A publish into a second it already lists must cost the
    /// same however many it lists: the component searches the record, it does not parse it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_publish_costs_the_same_whatever_the_due_directory_lists() {
        let rt = Runtime::metered(crate::runtime::COMPONENT_WASM).expect("metered runtime");
        let clock = crate::clock::VirtualClock::new(1_767_225_600_000);
        let net = crate::outbound::SimNet::new(clock.clone());
        let mut env = env(KvStore::Local(Arc::new(MemoryStore::new())));
        env.clock = Some(clock.clone());
        env.outbound = Arc::new(net.clone());
        let key = issue_key(&rt, &env, "dir").await.expect("key");
        let hook = "https://hook.example.com/in";
        net.endpoint(hook, []);
        create(&rt, &env, &key, hook, "load.updated")
            .await
            .expect("subscription");
        let publish = || {
            let mut r = req(
                "POST",
                "/internal/v1/events",
                "bench",
                r#"{"id":"L-1","status":"ASSIGNED"}"#,
            );
            r.headers_mut().insert(
                "x-service-event",
                http::HeaderValue::from_static("load.updated"),
            );
            rt.handle_metered(&env, r)
        };
        let (resp, _) = publish().await.expect("first event lists its second");
        assert_eq!(resp.status, 202);
        let (_, one_listed) = publish().await.expect("second event");
        let mut dir = directory::decode(
            &env.kv
                .get(&DUE_DIRECTORY)
                .await
                .expect("store")
                .expect("the directory"),
        )
        .expect("readable");
        assert_eq!(dir.len(), 1, "{dir:?}");
        dir.extend((0..2000).map(|s| (1_767_000_000 + 3 * s, 5)));
        env.kv
            .set(&DUE_DIRECTORY, &directory::encode(&dir))
            .await
            .expect("store");
        let (resp, many_listed) = publish().await.expect("third event");
        assert_eq!(resp.status, 202);
        assert!(
            many_listed.abs_diff(one_listed) * 100 < one_listed,
            "1 second listed: {one_listed} fuel; 2,001: {many_listed}"
        );
        assert_eq!(net.received().len(), 3, "each event's attempt 1 was sent");
    }

    #[test]
    fn the_delay_lines_url_keeps_all_but_the_address() {
        assert_eq!(
            redis_url_at("redis://:pw@cache.internal:6379/2", 9).as_deref(),
            Some("redis://:pw@127.0.0.1:9/2")
        );
        assert_eq!(
            redis_url_at("redis://h:1", 9).as_deref(),
            Some("redis://127.0.0.1:9")
        );
        assert_eq!(redis_url_at("not a url", 9), None);
    }

    /// `process_cpu` reads this process's own CPU time (not a constant field, not its
    /// children's): burning CPU on this thread moves it forward, by no more than the wall
    /// time that passed times the threads that could have run.
    #[test]
    fn process_cpu_counts_this_process_working() {
        let Some(start) = process_cpu() else {
            return; // no /proc: the benchmark prints NaN there
        };
        let wall = Instant::now();
        let mut x = 0u64;
        let burned = loop {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            let now = process_cpu().expect("readable a moment ago");
            if now - start >= Duration::from_millis(50) {
                break now - start;
            }
            assert!(
                wall.elapsed() < Duration::from_secs(30),
                "30 s of busy work did not show as 50 ms of CPU"
            );
        };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        assert!(burned <= wall.elapsed() * threads + Duration::from_millis(20));
    }
}
