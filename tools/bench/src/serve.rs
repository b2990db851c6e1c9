//! `edgehook serve` over loopback: its throughput against a plain hyper server and the
//! empty component, and its delivery rate against the receiver's own capacity.

use crate::load::{
    MakeRequest, empty_component_server, load, plain_server, serve_webhooks, spawn_serve,
};
use crate::measure::{cpu_per, process_cpu};
use crate::setup::{create, create_many, durable_store, env, issue_key, req, served};
use crate::table::Row;
use anyhow::{Context as _, Result, ensure};
use bytes::Bytes;
use edgehook::serve::Server;
use edgehook_runtime::Runtime;
use edgehook_runtime::metrics::Metrics;
use edgehook_runtime::store::{KvStore, MemoryStore};
use http_body_util::Full;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// `edgehook serve` (the real server, durable store) over loopback: `GET /v1/webhooks` under
/// concurrent load, against a plain hyper server answering the same bytes.
pub async fn serve_throughput(duration: Duration, connections: usize) -> Result<Vec<Row>> {
    let env = env(durable_store("serve")?);
    let (port, list) = serve_webhooks(&env).await?;
    let sample = Runtime::embedded()?.handle(&env, list()).await?.body;
    let base_port = plain_server(sample, Arc::default()).await?;
    let empty_port = empty_component_server(env.clone()).await?;
    let base = load(base_port, connections, duration, usize::MAX, list.clone()).await?;
    let empty = load(empty_port, connections, duration, usize::MAX, list.clone()).await?;
    let ours = load(port, connections, duration, usize::MAX, list).await?;
    let (rps, p99) = (ours.rps, ours.p99);
    // The same server with its Prometheus metrics on (as `edgehook serve` runs): every store
    // operation timed, every request counted, the component's events read off its stderr.
    let metrics = Arc::new(Metrics::new());
    let mut metered = crate::setup::env(durable_store("serve-metrics")?.metered(metrics.clone()));
    metered.metrics = Some(metrics);
    let (metered_port, metered_list) = serve_webhooks(&metered).await?;
    let with = load(
        metered_port,
        connections,
        duration,
        usize::MAX,
        metered_list,
    )
    .await?;
    Ok(vec![
        Row {
            name: format!("serve GET /v1/webhooks with metrics, {connections} conns (vs without)"),
            value: with.rps,
            unit: "r/s",
            baseline: Some(rps),
            target: "within noise".into(),
            met: None,
        },
        Row {
            name: "serve GET /v1/webhooks p99 with metrics (vs without)".into(),
            value: with.p99,
            unit: "us",
            baseline: Some(p99),
            target: "within noise".into(),
            met: None,
        },
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
            target: "-".into(),
            met: None,
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
            target: "-".into(),
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
    // `EDGEHOOK_BENCH_FANOUTS=1,1,1` runs only those (to profile one of them).
    let fanouts = match std::env::var("EDGEHOOK_BENCH_FANOUTS") {
        Ok(list) => list
            .split(',')
            .map(|f| f.trim().parse::<usize>().context("EDGEHOOK_BENCH_FANOUTS"))
            .collect::<Result<Vec<_>>>()?,
        Err(_) => vec![1, 100, 1000],
    };
    for fanout in fanouts {
        let kv = KvStore::Local(Arc::new(MemoryStore::new()));
        let (rate, cpu, _) = sustained(kv, fanout, total, receiver, &hits).await?;
        // The delivery targets: 10,000 at fan-out 1 and 20,000 at fan-out 100; fan-out 1,000 is
        // reported.
        let target = match fanout {
            1 => Some(10_000.0),
            100 => Some(20_000.0),
            _ => None,
        };
        rows.push(Row {
            name: format!("deliveries/s, fan-out {fanout} (vs receiver capacity)"),
            value: rate,
            unit: "d/s",
            baseline: Some(capacity.rps),
            target: target.map_or("-".into(), |t| format!(">= {t} d/s")),
            met: target.map(|t| rate >= t),
        });
        rows.push(Row {
            name: format!("CPU per delivery, fan-out {fanout} (vs one receiver exchange)"),
            value: cpu,
            unit: "us",
            baseline: Some(capacity.cpu),
            // What the rate target allows on the 2 cores: 2 s of CPU a second.
            target: target.map_or("-".into(), |t| {
                format!("{}k/s on 2 cores={:.0}", t / 1000.0, 2e6 / t)
            }),
            met: None,
        });
    }
    Ok(rows)
}

/// `edgehook serve`'s (embedded store) create, list (a client with 50) and delete
/// requests/s over `connections` keep-alive connections, each against the same server's
/// `GET /healthz` (its cheapest request: the component answers from one store read) in the
/// same run (the list's in [`FLOOR_ROUNDS`] rounds alternating with `/healthz`'s, each a
/// share of `duration`). Creates go to a client of their own with a fresh URL each; the
/// deletes then delete what the creates made, each once.
pub async fn api_against_healthz(duration: Duration, connections: usize) -> Result<Vec<Row>> {
    let env = served(durable_store("api-floor")?)?;
    let rt = Runtime::embedded()?;
    let lister = issue_key(rt, &env, "lister").await?;
    create_many(rt, &env, &lister, "l", 50, "load.created").await?;
    let writer = issue_key(rt, &env, "writer").await?;
    let port = spawn_serve(env.clone()).await?;
    let run = |make: MakeRequest, limit: usize| load(port, connections, duration, limit, make);
    // `/healthz` and the list in alternating rounds: the machine's load drifts within a
    // run, and the ratio is what is judged, so both take their share of the same drift.
    let (mut healthz, mut list) = (Vec::new(), Vec::new());
    for _ in 0..FLOOR_ROUNDS {
        let round = duration / FLOOR_ROUNDS;
        let health = Arc::new(|| req("GET", "/healthz", "", ""));
        healthz.push(load(port, connections, round, usize::MAX, health).await?);
        let key = lister.clone();
        let listing = Arc::new(move || req("GET", "/v1/webhooks?limit=50", &key, ""));
        list.push(load(port, connections, round, usize::MAX, listing).await?);
    }
    let ratios: Vec<String> = (healthz.iter().zip(&list))
        .map(|(h, l)| format!("{:.2}", l.rps / h.rps))
        .collect();
    eprintln!("serve list / healthz, round by round: {}", ratios.join(" "));
    let mean = |runs: &[crate::load::LoadResult]| {
        runs.iter().map(|r| r.rps).sum::<f64>() / runs.len().max(1) as f64
    };
    let (healthz, list) = (mean(&healthz), mean(&list));
    let created = Arc::new(AtomicUsize::new(0));
    let create = {
        let (key, n) = (writer.clone(), created.clone());
        run(
            Arc::new(move || {
                let i = n.fetch_add(1, Ordering::Relaxed);
                let body =
                    format!(r#"{{"url":"http://127.0.0.1:9/c{i}","eventTypes":["load.created"]}}"#);
                req("POST", "/v1/webhooks", &key, &body)
            }),
            usize::MAX,
        )
        .await?
    };
    let ids = Arc::new(all_ids(rt, &env, &writer).await?);
    ensure!(!ids.is_empty(), "the creates made nothing to delete");
    let delete = {
        let (key, list, next) = (writer.clone(), ids.clone(), Arc::new(AtomicUsize::new(0)));
        run(
            Arc::new(move || {
                let id = &list[next.fetch_add(1, Ordering::Relaxed) % list.len()];
                req("DELETE", &format!("/v1/webhooks/{id}"), &key, "")
            }),
            ids.len(),
        )
        .await?
    };
    let row = |name: &str, rps: f64, target: Option<f64>| Row {
        name: format!("serve {name}, {connections} conns (vs its GET /healthz)"),
        value: rps,
        unit: "r/s",
        baseline: Some(healthz),
        target: target.map_or("- (reported)".into(), |t| format!(">= {t}x healthz")),
        met: target.map(|t| rps >= t * healthz),
    };
    Ok(vec![
        row("GET /healthz", healthz, None),
        row("list (50)", list, Some(0.6)),
        row("create", create.rps, None),
        row("delete", delete.rps, None),
    ])
}

/// Rounds of `/healthz` and the list (50) in [`api_against_healthz`], alternating.
const FLOOR_ROUNDS: u32 = 5;

/// Every subscription id of the client of `key`, page by page.
async fn all_ids(rt: &Runtime, env: &edgehook_runtime::HostEnv, key: &str) -> Result<Vec<String>> {
    let mut ids = Vec::new();
    let mut cursor = String::new();
    loop {
        let path = match cursor.is_empty() {
            true => "/v1/webhooks?limit=100".to_owned(),
            false => format!("/v1/webhooks?limit=100&cursor={cursor}"),
        };
        let page = rt.handle(env, req("GET", &path, key, "")).await?;
        ensure!(page.status == 200, "list: {}", page.status);
        let json = page.json();
        let data = json["data"].as_array().cloned().unwrap_or_default();
        ids.extend(
            data.iter()
                .filter_map(|s| s["id"].as_str().map(str::to_owned)),
        );
        match json["nextCursor"].as_str() {
            Some(next) if json["hasMore"] == true => cursor = next.to_owned(),
            _ => return Ok(ids),
        }
    }
}

/// Signed deliveries/s from `serve` on `kv` at fan-out `fanout` (subscriptions to the
/// `receiver` port, counted in `hits`), `total` deliveries published as fast as 32
/// connections go, the process's CPU per delivery (µs), and its RSS once the last delivery
/// has arrived (bytes; `serve` and the store still open).
pub async fn sustained(
    kv: KvStore,
    fanout: usize,
    total: usize,
    receiver: u16,
    hits: &AtomicUsize,
) -> Result<(f64, f64, u64)> {
    let body =
        Bytes::from_static(br#"{"id":"L-1","status":"ASSIGNED","eligibleForTracking":true}"#);
    let e = served(kv)?;
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
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(server.run(listener, stop_rx));
    let events = total.div_ceil(fanout).max(1);
    let expected = events * fanout;
    let before = hits.load(Ordering::Relaxed);
    let cpu0 = process_cpu();
    let started = Instant::now();
    let publish: MakeRequest = Arc::new(move || {
        http::Request::post("/internal/v1/events")
            .header("host", "127.0.0.1")
            .header("authorization", "Bearer bench")
            .header("content-type", "application/json")
            .header("x-service-event", "load.updated")
            .body(Full::new(body.clone()))
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
    let rss = crate::procmem::rss()?;
    let _ = stop.send(true);
    let _ = running.await;
    Ok((rate, cpu, rss))
}
