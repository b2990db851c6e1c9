//! `edgehook serve`: the component behind a real HTTP/1.1 server, with real clocks and
//! randomness and a timer that calls `tick` when the component says work is due.

use crate::runtime::{HostEnv, HttpResponse, Rest, Runtime};
use anyhow::{Context as _, Result};
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

/// The most of a request body the server reads; the component answers 413 past its limits.
const BODY_READ_LIMIT: usize = 256 * 1024 + 1;
/// The least time between two ticks that a request's wake-up (not a due time) starts.
const WAKE_INTERVAL: Duration = Duration::from_millis(250);
/// How long shutdown waits for in-flight requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);

/// A running server's shared parts.
#[derive(Clone)]
pub struct Server {
    runtime: &'static Runtime,
    env: HostEnv,
    /// Woken when a request may have created due work (publish, replay, ...).
    wake: Arc<Notify>,
    /// Every connection and every unfinished invocation holds a receiver; shutdown waits
    /// until all are gone.
    inflight: Arc<watch::Sender<()>>,
    /// How long shutdown waits for work in flight.
    grace: Duration,
}

impl Server {
    /// A server for the embedded component over `env`.
    pub fn new(env: HostEnv) -> Result<Self> {
        Ok(Server {
            runtime: Runtime::embedded()?,
            env,
            wake: Arc::new(Notify::new()),
            inflight: Arc::new(watch::channel(()).0),
            grace: SHUTDOWN_GRACE,
        })
    }

    /// The same server with another shutdown grace period (default 15 s).
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Serves on `listener` until `shutdown` turns true, then stops accepting and waits (up to
    /// a grace period) for requests in flight.
    pub async fn run(
        self,
        listener: TcpListener,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<()> {
        let mut timer = tokio::spawn(self.clone().timer(shutdown.clone()));
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => { log_line("warn", "accept failed", &[("error", e.to_string())]); continue; }
                    };
                    // Responses are written whole; Nagle would only hold them back.
                    let _ = stream.set_nodelay(true);
                    let server = self.clone();
                    let guard = self.inflight.subscribe();
                    let mut stop = shutdown.clone();
                    let stopping = async move { stop.wait_for(|stopping| *stopping).await.is_ok() };
                    tokio::spawn(async move {
                        let service = service_fn(move |req| {
                            let server = server.clone();
                            async move { Ok::<_, Infallible>(server.respond(req, peer).await) }
                        });
                        let conn = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service);
                        let mut conn = std::pin::pin!(conn);
                        // At shutdown an idle keep-alive connection closes at once, and one
                        // with a request in flight closes after its response: neither holds
                        // the shutdown for the grace period.
                        tokio::select! {
                            _ = conn.as_mut() => {}
                            true = stopping => {
                                conn.as_mut().graceful_shutdown();
                                let _ = conn.await;
                            }
                        }
                        drop(guard);
                    });
                }
                _ = shutdown.changed() => break,
            }
        }
        drop(listener);
        // Connections and invocations hold receivers; closed() resolves when all are gone.
        // A tick in progress gets the same grace period. Attempts cut off by it stay leased
        // and run again after a restart.
        let deadline = tokio::time::Instant::now() + self.grace;
        let _ = tokio::time::timeout_at(deadline, self.inflight.closed()).await;
        if tokio::time::timeout_at(deadline, &mut timer).await.is_err() {
            timer.abort();
            log_line("info", "shutdown cut a tick short", &[]);
        }
        Ok(())
    }

    async fn respond(
        &self,
        req: hyper::Request<Incoming>,
        peer: SocketAddr,
    ) -> hyper::Response<Full<Bytes>> {
        let started = Instant::now();
        let method = req.method().to_string();
        let path = req.uri().path().to_owned();
        let outcome = self.forward(req).await;
        let response = match outcome {
            Ok(resp) => resp,
            Err(e) => {
                log_line(
                    "error",
                    "request failed in the host",
                    &[("error", format!("{e:#}"))],
                );
                HttpResponse {
                    status: 500,
                    headers: vec![("content-type".into(), "application/json".into())],
                    body: Bytes::from_static(
                        br#"{"error":{"code":"internal","message":"Internal error.","details":[]},"requestId":null}"#,
                    ),
                }
            }
        };
        log_line(
            "info",
            "request",
            &[
                ("method", method),
                ("path", path),
                ("status", response.status.to_string()),
                (
                    "requestId",
                    response.header("x-request-id").unwrap_or("").to_owned(),
                ),
                (
                    "ms",
                    format!("{:.3}", started.elapsed().as_secs_f64() * 1000.0),
                ),
                ("peer", peer.to_string()),
            ],
        );
        if response.status == 202 {
            // An event was accepted or a delivery replayed: work is due now.
            self.wake.notify_one();
        }
        let mut builder = hyper::Response::builder().status(response.status);
        for (n, v) in &response.headers {
            builder = builder.header(n, v);
        }
        builder
            .body(Full::new(response.body))
            .unwrap_or_else(|_| hyper::Response::new(Full::new(Bytes::new())))
    }

    async fn forward(&self, req: hyper::Request<Incoming>) -> Result<HttpResponse> {
        let (parts, mut body) = req.into_parts();
        let mut buf = BytesMut::new();
        while buf.len() < BODY_READ_LIMIT {
            match body.frame().await {
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        buf.extend_from_slice(&data);
                    }
                }
                None => break,
            }
        }
        buf.truncate(BODY_READ_LIMIT);
        let req = hyper::Request::from_parts(parts, Full::new(buf.freeze()));
        let (response, rest) = self.runtime.handle_detached(&self.env, req).await?;
        // The client has its answer; work the component does after it (attempt 1 of an
        // accepted event) finishes on its own.
        match rest {
            Rest::Ended(outcome) => report_rest(outcome.map_err(anyhow::Error::from)),
            Rest::Running(task) => {
                let guard = self.inflight.subscribe();
                tokio::spawn(async move {
                    let _guard = guard;
                    report_rest(Rest::Running(task).finish().await);
                });
            }
        }
        Ok(response)
    }

    /// Calls `tick` when due, when woken by a request, and once at start (work left by a
    /// previous run). Does nothing while nothing is due.
    ///
    /// A wake comes with every accepted event, whose first attempts the component already
    /// runs in the same invocation; the tick after it is the safety net (and learns when the
    /// retries are due), so wakes are coalesced: at most one tick per [`WAKE_INTERVAL`].
    async fn timer(self, mut shutdown: watch::Receiver<bool>) {
        let mut next_due: Option<u64> = Some(0);
        let mut last_tick = Instant::now() - WAKE_INTERVAL;
        loop {
            let wait = next_due.map(|due| Duration::from_millis(due.saturating_sub(now_ms())));
            tokio::select! {
                _ = async { match wait { Some(w) => tokio::time::sleep(w).await, None => std::future::pending().await } } => {}
                _ = self.wake.notified() => {
                    let earliest = last_tick + WAKE_INTERVAL;
                    tokio::select! {
                        _ = tokio::time::sleep_until(earliest.into()) => {}
                        _ = shutdown.changed() => return,
                    }
                }
                _ = shutdown.changed() => return,
            }
            last_tick = Instant::now();
            match self.runtime.tick(&self.env).await {
                Ok(report) => {
                    if report.attempted > 0 {
                        log_line(
                            "info",
                            "tick",
                            &[
                                ("attempted", report.attempted.to_string()),
                                ("succeeded", report.succeeded.to_string()),
                                ("failed", report.failed.to_string()),
                            ],
                        );
                    }
                    next_due = report.next_due_ms;
                }
                Err(e) => {
                    log_line("error", "tick failed", &[("error", format!("{e:#}"))]);
                    next_due = Some(now_ms() + 1000);
                }
            }
        }
    }
}

/// Binds `addr`.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (is another server running there?)"))
}

/// Wall time, ms since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Logs an invocation that trapped (or whose task failed) after its response was sent.
fn report_rest(outcome: Result<()>) {
    if let Err(e) = outcome {
        log_line(
            "error",
            "component failed after responding",
            &[("error", format!("{e:#}"))],
        );
    }
}

/// Writes one structured (JSON) log line to stdout (through [`crate::log`]).
pub fn log_line(level: &str, msg: &str, fields: &[(&str, String)]) {
    let line = LogLine {
        ts: now_ms(),
        level,
        msg,
        fields,
    };
    // Encoded whole, then queued whole: lines from concurrent requests never mix.
    let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
    bytes.push(b'\n');
    crate::log::write_line(&bytes);
}

/// One log line: `ts`, `level` and `msg` first, then the fields in the order given.
struct LogLine<'a> {
    ts: u64,
    level: &'a str,
    msg: &'a str,
    fields: &'a [(&'a str, String)],
}

impl serde::Serialize for LogLine<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = s.serialize_map(Some(3 + self.fields.len()))?;
        map.serialize_entry("ts", &self.ts)?;
        map.serialize_entry("level", self.level)?;
        map.serialize_entry("msg", self.msg)?;
        for (k, v) in self.fields {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::{Outbound, OutboundFuture};
    use crate::store::{KvStore, MemoryStore};
    use std::collections::BTreeMap;
    use wasmtime_wasi_http::{RequestOptions, WasiBody};

    /// A network where every request hangs (an endpoint that never answers).
    struct Hang(Arc<Notify>);

    impl Outbound for Hang {
        fn send(&self, _: http::Request<WasiBody>, _: Option<RequestOptions>) -> OutboundFuture {
            self.0.notify_one();
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_does_not_wait_for_a_tick_beyond_the_grace_period() {
        let sent = Arc::new(Notify::new());
        let config: BTreeMap<String, String> = [
            ("admin_token", "t"),
            ("allow_private_targets", "true"),
            ("attempt_timeout_ms", "120000"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let env = HostEnv {
            kv: KvStore::Local(Arc::new(MemoryStore::new())),
            config: Arc::new(config),
            clock: None,
            outbound: Arc::new(Hang(sent.clone())),
            seed: None,
            guest_log: None,
        };
        let rt = Runtime::embedded().expect("runtime");
        let req = |method: &str, path: &str, auth: &str, body: &str| {
            http::Request::builder()
                .method(method)
                .uri(format!("http://test{path}"))
                .header("authorization", format!("Bearer {auth}"))
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_owned())))
                .expect("request")
        };
        let key = rt
            .handle(&env, req("POST", "/internal/v1/clients/acme/keys", "t", ""))
            .await
            .expect("key")
            .json()["data"]["apiKey"]
            .as_str()
            .expect("apiKey")
            .to_owned();
        let create = r#"{"url":"http://127.0.0.1:9/x","eventTypes":["load.created"]}"#;
        let created = rt
            .handle(&env, req("POST", "/v1/webhooks", &key, create))
            .await
            .expect("create");
        assert_eq!(created.status, 201);
        // Published through the export (no tick of its own): the server's timer sends it, and
        // the attempt hangs for its 2-minute timeout.
        rt.publish(&env, "load.created", br#"{"id":"L"}"#)
            .await
            .expect("publish")
            .expect("accepted");
        let server = Server::new(env)
            .expect("server")
            .with_shutdown_grace(Duration::from_millis(300));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let (stop, stop_rx) = watch::channel(false);
        let running = tokio::spawn(server.run(listener, stop_rx));
        tokio::time::timeout(Duration::from_secs(60), sent.notified())
            .await
            .expect("the timer sends the attempt");
        let _ = stop.send(true);
        let stopped = tokio::time::timeout(Duration::from_secs(10), running).await;
        assert!(
            matches!(stopped, Ok(Ok(Ok(())))),
            "shutdown waits for the grace period, not for the tick: {stopped:?}"
        );
    }
}
