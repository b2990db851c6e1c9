//! Load over loopback: the load generator, the servers it measures (`edgehook serve`'s, the
//! empty component behind the same kind of server, a plain hyper server).

use crate::measure::{cpu_per, percentile_us, process_cpu};
use crate::setup::{create_many, issue_key, req};
use anyhow::Result;
use bytes::Bytes;
use edgehook::serve::Server;
use edgehook_runtime::{Baseline, HostEnv, Runtime};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The test kit's bare receiver answering every request with `body`, counted in `hits`;
/// the throughput baseline.
pub async fn plain_server(body: Bytes, hits: Arc<AtomicUsize>) -> Result<u16> {
    let port = edgehook_testkit::receiver::loopback(move |_, _| {
        let (body, hits) = (body.clone(), hits.clone());
        async move {
            hits.fetch_add(1, Ordering::Relaxed);
            hyper::Response::new(Full::new(body))
        }
    })
    .await?;
    Ok(port)
}

/// The empty component behind the same kind of hyper server: every request is read whole,
/// then handled by a fresh instance of `bench/empty`, as `edgehook serve` does with ours. The
/// floor of any one-instance-per-request server on this machine.
pub async fn empty_component_server(env: HostEnv) -> Result<u16> {
    let baseline = Arc::new(Baseline::new()?);
    let port = edgehook_testkit::receiver::loopback(move |head, body| {
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
    .await?;
    Ok(port)
}

/// What a load run measured.
pub struct LoadResult {
    /// Requests per second.
    pub rps: f64,
    /// p99 latency, µs.
    pub p99: f64,
    /// Process CPU time per request, µs (load generator included).
    pub cpu: f64,
}

/// Drives `connections` keep-alive connections sending `make()` for `duration` (or until
/// `limit` requests).
pub async fn load(
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
                loop {
                    let resp = send.send_request(make()).await?;
                    let status = resp.status();
                    resp.into_body().collect().await?;
                    // A server that is full says 503: sent again shortly, as a publisher
                    // would, and the wait counts in the request's time.
                    if status == hyper::StatusCode::SERVICE_UNAVAILABLE
                        && started.elapsed() < duration
                    {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    anyhow::ensure!(status.is_success(), "status {status}");
                    break;
                }
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
        p99: percentile_us(&all, 0.99),
        cpu: cpu_per(cpu0, all.len()),
    })
}

/// A request the load generator sends, made afresh for each send.
pub type MakeRequest = Arc<dyn Fn() -> http::Request<Full<Bytes>> + Send + Sync>;

/// `edgehook serve`'s server on `env`, on a free loopback port, with a client of 10
/// subscriptions: the port and that client's `GET /v1/webhooks`.
pub async fn serve_webhooks(env: &HostEnv) -> Result<(u16, MakeRequest)> {
    let rt = Runtime::embedded()?;
    let key = issue_key(rt, env, "bench").await?;
    create_many(rt, env, &key, "s", 10, "load.created").await?;
    let port = spawn_serve(env.clone()).await?;
    Ok((port, Arc::new(move || req("GET", "/v1/webhooks", &key, ""))))
}

/// `edgehook serve`'s server on `env`, on a free loopback port, running until the runtime
/// stops: its port.
pub async fn spawn_serve(env: HostEnv) -> Result<u16> {
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
