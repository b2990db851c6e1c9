//! `edgehook serve` over loopback: its throughput against a plain hyper server and the
//! empty component, and its delivery rate against the receiver's own capacity.

use crate::load::{MakeRequest, empty_component_server, load, plain_server, serve_webhooks};
use crate::measure::{CPU_PER_DELIVERY_TARGET, CPU_PER_REQUEST_TARGET, cpu_per, process_cpu};
use crate::setup::{create, env, file_store, issue_key};
use crate::table::Row;
use anyhow::{Result, ensure};
use bytes::Bytes;
use edgehook::serve::Server;
use edgehook_runtime::Runtime;
use edgehook_runtime::metrics::Metrics;
use edgehook_runtime::net::{NetOptions, NetOutbound};
use edgehook_runtime::store::{KvStore, MemoryStore};
use http_body_util::Full;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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
    // The same server with its Prometheus metrics on (as `edgehook serve` runs): every store
    // operation timed, every request counted, the component's events read off its stderr.
    let metrics = Arc::new(Metrics::new());
    let mut metered = crate::setup::env(file_store("serve-metrics")?.metered(metrics.clone()));
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
