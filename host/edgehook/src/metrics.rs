//! `serve --metrics-listen`: the Prometheus endpoint, on its own address (loopback by
//! default) so that it is never exposed with the API by accident.
//!
//! `GET /metrics` answers the registry of `edgehook_runtime::metrics` in the Prometheus text
//! format; anything else is 404. Before it answers, it counts the disabled subscriptions
//! through the component's operator API (at most once per [`DISABLED_TTL`], and at most
//! [`DISABLED_PAGES`] pages of 100): the only figure that is read, not counted as it
//! happens.

use anyhow::{Context as _, Result};
use bytes::Bytes;
use edgehook_runtime::metrics::{CONTENT_TYPE, Metrics};
use edgehook_runtime::net::{NetOptions, NetOutbound};
use edgehook_runtime::store::KvStore;
use edgehook_runtime::{HostEnv, Runtime};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How long a count of disabled subscriptions is reused by later scrapes.
pub const DISABLED_TTL: Duration = Duration::from_secs(30);
/// The most pages of the operator's disabled list one count reads (100 each).
pub const DISABLED_PAGES: usize = 1000;

/// Where `serve` answers `GET /metrics` unless told otherwise (9464: the port Prometheus
/// exporters commonly take).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9464";

/// The imports `serve` runs the component with: `kv` with every operation timed, real
/// outbound HTTP as `net` says with every attempt counted, `config` as the component's
/// settings, and its stderr read for metrics events (the other lines pass on to the
/// process's stderr), all into one registry. The benchmarks build theirs here too, so that
/// they measure `serve` as it runs.
pub fn served_env(
    kv: KvStore,
    config: BTreeMap<String, String>,
    net: &NetOptions,
) -> Result<HostEnv> {
    let metrics = Arc::new(Metrics::new());
    let outbound = NetOutbound::new(net)?.with_metrics(metrics.clone());
    Ok(HostEnv {
        kv: kv.metered(metrics.clone()),
        config: Arc::new(config),
        clock: None,
        outbound: Arc::new(outbound),
        seed: None,
        guest_log: None,
        metrics: Some(metrics),
    })
}

/// The metrics endpoint's listener: none with `off`; none (with a warning) when the default
/// address is taken, so that a second `serve` on one machine still starts; an error when an
/// address given explicitly cannot be bound.
pub async fn bind(listen: &str) -> Result<Option<tokio::net::TcpListener>> {
    if listen == "off" {
        return Ok(None);
    }
    let addr: SocketAddr = listen
        .parse()
        .with_context(|| format!("--metrics-listen {listen}: expected HOST:PORT or off"))?;
    match crate::serve::bind(addr).await {
        Ok(listener) => Ok(Some(listener)),
        Err(e) if listen == DEFAULT_LISTEN => {
            tracing::warn!(
                addr = %listen,
                error = %format!("{e:#}"),
                "metrics endpoint not started: its default address is taken (set --metrics-listen)"
            );
            Ok(None)
        }
        Err(e) => Err(e.context(format!("--metrics-listen {listen}"))),
    }
}

/// Where the endpoint on `listener` answers, for the `listening` log line (`off`: none).
pub fn url(listener: Option<&TcpListener>) -> String {
    match listener.map(TcpListener::local_addr) {
        Some(Ok(addr)) => format!("http://{addr}/metrics"),
        Some(Err(e)) => e.to_string(),
        None => "off".to_owned(),
    }
}

/// What the endpoint needs: the runtime and environment to ask the operator API with, and
/// the registry.
#[derive(Clone)]
pub struct Endpoint {
    runtime: &'static Runtime,
    env: HostEnv,
    metrics: Arc<Metrics>,
    /// When the disabled subscriptions were last counted (the gauge holds the count).
    counted: Arc<Mutex<Option<Instant>>>,
}

impl Endpoint {
    /// The endpoint of `env`'s metrics (none if `env` has none: a fresh registry then).
    pub fn new(runtime: &'static Runtime, env: HostEnv) -> Self {
        let metrics = env.metrics.clone().unwrap_or_default();
        Endpoint {
            runtime,
            env,
            metrics,
            counted: Arc::new(Mutex::new(None)),
        }
    }

    /// Serves on `listener`, if any, in a task of its own (see [`Endpoint::run`]).
    pub fn spawn(self, listener: Option<TcpListener>, shutdown: watch::Receiver<bool>) {
        if let Some(listener) = listener {
            tokio::spawn(self.run(listener, shutdown));
        }
    }

    /// Serves `GET /metrics` on `listener` until `shutdown` turns true.
    pub async fn run(self, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
        loop {
            let stream = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = shutdown.changed() => return,
            };
            let endpoint = self.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<Incoming>| {
                    let endpoint = endpoint.clone();
                    async move { Ok::<_, Infallible>(endpoint.answer(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(30))
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    async fn answer(&self, req: hyper::Request<Incoming>) -> hyper::Response<Full<Bytes>> {
        let (status, content_type, body) =
            match (req.method() == hyper::Method::GET, req.uri().path()) {
                (true, "/metrics") => {
                    self.count_disabled().await;
                    (200, CONTENT_TYPE, self.metrics.encode())
                }
                _ => (404, "text/plain", "not found: GET /metrics\n".to_owned()),
            };
        hyper::Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .unwrap_or_else(|_| hyper::Response::new(Full::new(Bytes::new())))
    }

    /// Refreshes the disabled-subscription gauge if its count is older than [`DISABLED_TTL`].
    async fn count_disabled(&self) {
        let fresh = self
            .counted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() < DISABLED_TTL);
        if fresh {
            return;
        }
        let count = self.disabled().await.ok();
        self.metrics.set_disabled(count);
        *self.counted.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Walks the operator's disabled list (deleted subscriptions are in it, and not counted).
    async fn disabled(&self) -> Result<u64> {
        let token = self
            .env
            .config
            .get("admin_token")
            .ok_or_else(|| anyhow::anyhow!("no admin token"))?;
        let mut count = 0;
        let mut cursor: Option<String> = None;
        for _ in 0..DISABLED_PAGES {
            let mut uri = "http://localhost/internal/v1/subscriptions?limit=100".to_owned();
            if let Some(c) = &cursor {
                uri.push_str("&cursor=");
                uri.push_str(c);
            }
            let req = http::Request::get(uri)
                .header("authorization", format!("Bearer {token}"))
                .body(Full::new(Bytes::new()))?;
            let resp = self.runtime.handle(&self.env, req).await?;
            anyhow::ensure!(resp.status == 200, "status {}", resp.status);
            let page: serde_json::Value = serde_json::from_slice(&resp.body)?;
            let data = page["data"].as_array().cloned().unwrap_or_default();
            count += data
                .iter()
                .filter(|s| s["disabledReason"] != "deleted")
                .count() as u64;
            match page["nextCursor"].as_str() {
                Some(next) if page["hasMore"] == true => cursor = Some(next.to_owned()),
                _ => return Ok(count),
            }
        }
        anyhow::bail!("more than {DISABLED_PAGES} pages")
    }
}
