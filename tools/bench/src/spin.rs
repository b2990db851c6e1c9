//! The `spin` section: the same `.wasm` under `spin up` (the project's `spin.toml`, Spin's
//! default SQLite store; see [`edgehook_sim::spin`]) and under `edgehook serve` (the real
//! server, its embedded store), both on loopback, driven by the same load generator in
//! one run.
//! Each row is Spin's figure with serve's as the baseline:
//!
//! - `GET /healthz` throughput (one store read per request);
//! - `GET /v1/webhooks` of a client with 50 subscriptions: p50 latency one request at a time,
//!   and throughput under concurrent load;
//! - fan-out 1: one event published → its signed delivery received at a loopback receiver,
//!   p50 and p99 one event at a time.
//!
//! The one-at-a-time figures are taken twice: on one kept-alive connection, and on a new
//! connection per request (see [`Connect`] for why they differ on Spin).
//!
//! Deliveries go to a plain-http receiver on 127.0.0.1 on both (Spin: with
//! `http://127.0.0.1:*` added to the manifest's `allowed_outbound_hosts`), so neither side pays
//! for TLS. A measurement that fails (e.g. a Spin store bug answering 503) is reported and
//! left out; the others still run.

use crate::load::{LoadResult, MakeRequest, load, spawn_serve};
use crate::measure::percentile_us;
use crate::setup::{durable_store, env};
use crate::table::Row;
use anyhow::{Context as _, Result, ensure};
use bytes::Bytes;
use edgehook_runtime::net::{NetOptions, NetOutbound};
use edgehook_sim::spin::{self, SpinApp, SpinOptions};
use edgehook_testkit::receiver::Receiver;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The operator token both servers get (as the other sections' `env`).
const ADMIN: &str = "bench";
/// Subscriptions of the listing client.
const LISTED: usize = 50;
/// The load a fan-out-1 event carries.
const LOAD: &[u8] = br#"{"id":"L-1","status":"ASSIGNED","eligibleForTracking":true}"#;

/// A request with a path-only target and a `Host` header, as a client sends it.
fn request(method: &str, path: &str, bearer: &str, body: &[u8]) -> http::Request<Full<Bytes>> {
    let mut r = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json");
    if !bearer.is_empty() {
        r = r.header("authorization", format!("Bearer {bearer}"));
    }
    r.body(Full::new(Bytes::copy_from_slice(body)))
        .expect("a valid request")
}

/// One keep-alive connection to a server on loopback.
struct Conn(hyper::client::conn::http1::SendRequest<Full<Bytes>>);

impl Conn {
    async fn open(port: u16) -> Result<Conn> {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let _ = stream.set_nodelay(true);
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(Conn(send))
    }

    /// Sends `req`; fails unless it answers `want`. The body.
    async fn call(&mut self, req: http::Request<Full<Bytes>>, want: u16) -> Result<Bytes> {
        let what = format!("{} {}", req.method(), req.uri());
        self.0.ready().await?;
        let resp = self.0.send_request(req).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        ensure!(
            status == want,
            "{what}: wanted {want}, got {status} {}",
            String::from_utf8_lossy(&body)
        );
        Ok(body)
    }
}

/// One server under test, set up alike: a client with [`LISTED`] subscriptions that never
/// get an event, and a client with one subscription of `load.updated` to the receiver.
struct Target {
    port: u16,
    list_key: String,
}

async fn set_up(port: u16, receiver: u16) -> Result<Target> {
    let mut c = Conn::open(port).await?;
    let mut key = async |client: &str| -> Result<String> {
        let path = format!("/internal/v1/clients/{client}/keys");
        let body = c.call(request("POST", &path, ADMIN, b""), 201).await?;
        let v: serde_json::Value = serde_json::from_slice(&body)?;
        Ok(v["data"]["apiKey"].as_str().context("apiKey")?.to_owned())
    };
    let (list_key, fan_key) = (key("list").await?, key("fan").await?);
    let mut subscribe = async |key: &str, url: &str, event: &str| -> Result<()> {
        let body = format!(r#"{{"url":"{url}","eventTypes":["{event}"]}}"#);
        c.call(request("POST", "/v1/webhooks", key, body.as_bytes()), 201)
            .await?;
        Ok(())
    };
    for i in 0..LISTED {
        let url = format!("https://s{i}.example.com/hook");
        subscribe(&list_key, &url, "load.created").await?;
    }
    let url = format!("http://127.0.0.1:{receiver}/fan");
    subscribe(&fan_key, &url, "load.updated").await?;
    Ok(Target { port, list_key })
}

/// `edgehook serve` on a free loopback port: the bench's settings, the embedded store, the real
/// outbound sender (private targets allowed, for the receiver).
async fn start_serve() -> Result<u16> {
    let mut e = env(durable_store("spin-serve")?);
    e.outbound = Arc::new(NetOutbound::new(&NetOptions::open())?);
    spawn_serve(e).await
}

/// `spin up` on the project's manifest with the same settings as [`start_serve`].
async fn start_spin(binary: &Path) -> Result<SpinApp> {
    // The receiver is plain http on loopback: both development switches.
    let variables = [
        ("admin_token", ADMIN),
        // Required by the manifest; a bench key.
        (
            "seal_key",
            "be11be11be11be11be11be11be11be11be11be11be11be11be11be11be11be11",
        ),
        ("subscription_limit", "100000"),
        ("rate_limit_per_minute", "1000000"),
        ("allow_private_targets", "true"),
        ("allow_http", "true"),
    ];
    let options = SpinOptions {
        binary: binary.to_owned(),
        runtime_config: None,
        files: Vec::new(),
        variables: variables
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        start_timeout: Duration::from_secs(120),
    };
    tokio::task::spawn_blocking(move || spin::start("bench", &["http://127.0.0.1:*"], &options))
        .await?
}

/// How the one-at-a-time measurements connect.
#[derive(Clone, Copy)]
enum Connect {
    /// One keep-alive connection for every request, as a pooled client.
    KeepAlive,
    /// A new connection for each request (its connect is timed too: ~0.1 ms on loopback).
    /// Spin 4.0.2 never sets `TCP_NODELAY` and writes a response's head and body apart, so on
    /// a kept-alive connection the body waits for the client's delayed ACK (~40 ms); a new
    /// connection is in Linux's quick-ACK mode and does not wait.
    Fresh,
}

/// A connection for the next request: `kept` again, or a new one.
async fn conn_for(port: u16, how: Connect, kept: &mut Option<Conn>) -> Result<&mut Conn> {
    if matches!(how, Connect::Fresh) || kept.is_none() {
        *kept = Some(Conn::open(port).await?);
    }
    kept.as_mut().context("a connection")
}

/// Sorted latencies of `n` requests `make` builds, one at a time.
async fn one_at_a_time(
    port: u16,
    n: usize,
    how: Connect,
    make: &MakeRequest,
) -> Result<Vec<Duration>> {
    let mut kept = None;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        conn_for(port, how, &mut kept)
            .await?
            .call(make(), 200)
            .await?;
        out.push(t.elapsed());
    }
    out.sort_unstable();
    Ok(out)
}

/// Sorted times from sending a fan-out-1 publish to its delivery arriving, `n` events one
/// at a time.
async fn publish_to_delivery(
    port: u16,
    n: usize,
    how: Connect,
    receiver: &Receiver,
) -> Result<Vec<Duration>> {
    let mut kept = None;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let before = receiver.hits();
        let mut publish = request("POST", "/internal/v1/events", ADMIN, LOAD);
        let event = http::HeaderValue::from_static("load.updated");
        publish.headers_mut().insert("x-service-event", event);
        let t = Instant::now();
        conn_for(port, how, &mut kept)
            .await?
            .call(publish, 202)
            .await?;
        tokio::time::timeout(Duration::from_secs(30), receiver.hits_reach(before + 1))
            .await
            .context("the delivery did not arrive within 30 s")?;
        out.push(t.elapsed());
    }
    out.sort_unstable();
    Ok(out)
}

/// One comparison: the figures `f` measures on each target, serve first; a row per name,
/// Spin's figure beside serve's. A failure is printed and leaves the rows out.
async fn compare<F, Fut>(
    rows: &mut Vec<Row>,
    names: &[String],
    unit: &'static str,
    targets: [&Target; 2],
    f: F,
) where
    F: Fn(u16, String) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<f64>>>,
{
    let measured = async {
        let serve = f(targets[0].port, targets[0].list_key.clone()).await?;
        let spin = f(targets[1].port, targets[1].list_key.clone()).await?;
        Ok::<_, anyhow::Error>((spin, serve))
    };
    match measured.await {
        Ok((spin, serve)) => {
            for ((name, spin), serve) in names.iter().zip(spin).zip(serve) {
                rows.push(Row {
                    name: format!("spin: {name} (vs serve)"),
                    value: spin,
                    unit,
                    baseline: Some(serve),
                    target: "-".into(),
                    met: None,
                });
            }
        }
        Err(e) => eprintln!("spin: {}: failed, left out: {e:#}", names.join("; ")),
    }
}

/// The section. `n` requests or events for each latency, `duration` and `connections` for
/// each throughput.
pub async fn spin_vs_serve(
    binary: &Path,
    n: usize,
    duration: Duration,
    connections: usize,
) -> Result<Vec<Row>> {
    // The test kit's receiver: 200 at once, every request counted, none kept.
    let receiver = Receiver::builder().keep_nothing().start().await;
    let serve_port = start_serve().await?;
    let spin = start_spin(binary).await?;
    let spin_port: u16 = spin.addr.rsplit(':').next().unwrap_or("").parse()?;
    let serve = set_up(serve_port, receiver.port())
        .await
        .context("setting up serve")?;
    let spin_target = set_up(spin_port, receiver.port())
        .await
        .with_context(|| format!("setting up Spin; its output:\n{}", spin.log_tail(20)))?;
    let targets = [&serve, &spin_target];
    let throughput = |make: fn(&str) -> http::Request<Full<Bytes>>| {
        move |port: u16, key: String| async move {
            let make: MakeRequest = Arc::new(move || make(&key));
            let r: LoadResult = load(port, connections, duration, usize::MAX, make).await?;
            Ok(vec![r.rps])
        }
    };
    let healthz = |_: &str| request("GET", "/healthz", "", b"");
    let list = |key: &str| request("GET", "/v1/webhooks?limit=50", key, b"");

    let mut rows = Vec::new();
    let names = [format!("GET /healthz, {connections} conns")];
    compare(&mut rows, &names, "r/s", targets, throughput(healthz)).await;
    for (how, label) in [
        (Connect::KeepAlive, "kept conn"),
        (Connect::Fresh, "new conns"),
    ] {
        let names = [format!("list of {LISTED}, p50, {label}")];
        compare(&mut rows, &names, "us", targets, |port, key| async move {
            let make: MakeRequest = Arc::new(move || list(&key));
            let times = one_at_a_time(port, n, how, &make).await?;
            Ok(vec![percentile_us(&times, 0.5)])
        })
        .await;
    }
    let names = [format!("list of {LISTED}, {connections} conns")];
    compare(&mut rows, &names, "r/s", targets, throughput(list)).await;
    let events = (n / 4).max(10);
    let receiver = &receiver;
    for (how, label) in [
        (Connect::KeepAlive, "kept conn"),
        (Connect::Fresh, "new conns"),
    ] {
        let names = ["p50", "p99"].map(|p| format!("publish to delivery, {p}, {label}"));
        compare(&mut rows, &names, "us", targets, |port, _| async move {
            let times = publish_to_delivery(port, events, how, receiver).await?;
            Ok(vec![
                percentile_us(&times, 0.5),
                percentile_us(&times, 0.99),
            ])
        })
        .await;
    }
    if rows.len() < 8 {
        eprintln!("spin: Spin's output:\n{}", spin.log_tail(20));
    }
    drop(spin);
    Ok(rows)
}
