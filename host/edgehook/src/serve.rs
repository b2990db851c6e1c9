//! `edgehook serve`: the component behind a real HTTP/1.1 server, with real clocks and
//! randomness and a timer that calls `tick` when the component says work is due.

use anyhow::{Context as _, Result};
use bytes::{Bytes, BytesMut};
use edgehook_component::model::error::ApiError;
use edgehook_runtime::log::{REQUESTS, now_ms};
use edgehook_runtime::otlp;
use edgehook_runtime::store::KvStore;
use edgehook_runtime::{Baseline, HostEnv, HttpResponse, POOL_INSTANCES, Rest, Runtime, Warm};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};

/// The readiness route, answered by the host ([`Server::ready`]).
const READY_PATH: &str = "/readyz";

/// How long `/readyz` waits for the store.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// The header that names the client's address to the component (Spin's name for it).
const CLIENT_ADDR: &str = "spin-client-addr";

const BODY_READ_LIMIT: usize = 256 * 1024 + 1;
/// The least time between two ticks that a request's wake-up (not a due time) starts.
const WAKE_INTERVAL: Duration = Duration::from_millis(250);
/// How long shutdown waits for in-flight requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);
/// The longest the timer waits between two ticks, whatever the component said was due: work
/// another instance sharing the store queued (retries of a stopped `serve`, events published
/// through another instance) is picked up within this.
const IDLE_TICK: Duration = Duration::from_secs(5);
/// How long a connection may take to send a request's head, and how long a keep-alive
/// connection may sit idle between requests (hyper's header read timeout).
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a request's body may take to arrive, once its head has.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once; past it, new ones wait in the kernel's listen backlog.
const MAX_CONNECTIONS: usize = 4096;
/// How long accepting pauses after a failure (out of file descriptors, say): no busy loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How long a request waits for a free component instance before it is answered 503.
const INSTANCE_WAIT: Duration = Duration::from_secs(2);

/// The server's limits on slow and idle clients (defaults: the constants above).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// A request's head, and the idle wait between two requests of a connection.
    pub header: Duration,
    /// A request's body, from its head.
    pub body: Duration,
    /// A free component instance, before a 503.
    pub instance: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header: HEADER_TIMEOUT,
            body: BODY_TIMEOUT,
            instance: INSTANCE_WAIT,
        }
    }
}

/// A running server's shared parts.
#[derive(Clone)]
pub struct Server {
    /// The embedded component's instances for `env`, kept between calls.
    warm: Arc<Warm>,
    env: HostEnv,
    /// Woken when a request may have created due work (publish, replay, ...).
    wake: Arc<Notify>,
    /// Every connection and every unfinished invocation holds a receiver; shutdown waits
    /// until all are gone.
    inflight: Arc<watch::Sender<()>>,
    /// How long shutdown waits for work in flight.
    grace: Duration,
    /// Limits on slow and idle clients.
    timeouts: Timeouts,
    /// One permit per connection being served.
    connections: Arc<Semaphore>,
    /// One permit per component instance (the pool's slots): a request holds one until its
    /// invocation ends, attempts after the response included, and a tick for its run. A
    /// request that finds them all taken waits a little, then gets a 503, rather than
    /// failing to instantiate; the timer waits its turn (the semaphore is first come, first
    /// served).
    instances: Arc<Semaphore>,
    /// With TLS: the certificate new connections are accepted with (reloadable).
    tls: Option<Arc<crate::tls::Tls>>,
    /// The web portal's component: `/portal` and `/portal/...` go to it, everything else to
    /// the service's ([`crate::portal::is_portal`]).
    portal: &'static Baseline,
    /// One permit per instance of the portal's pool (its own, as its engine is).
    portal_instances: Arc<Semaphore>,
}

impl Server {
    /// A server for the embedded component over `env`.
    pub fn new(env: HostEnv) -> Result<Self> {
        Ok(Server {
            warm: Arc::new(Runtime::serving()?.warm(env.clone())),
            env,
            wake: Arc::new(Notify::new()),
            inflight: Arc::new(watch::channel(()).0),
            grace: SHUTDOWN_GRACE,
            timeouts: Timeouts::default(),
            connections: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            instances: Arc::new(Semaphore::new(POOL_INSTANCES as usize)),
            tls: None,
            portal: Baseline::portal()?,
            portal_instances: Arc::new(Semaphore::new(POOL_INSTANCES as usize)),
        })
    }

    /// The same server answering HTTPS (HTTP/2 or HTTP/1.1, as the client's ALPN asks) with
    /// `tls`'s certificate.
    pub fn with_tls(mut self, tls: Arc<crate::tls::Tls>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The same server with another shutdown grace period (default 15 s).
    pub fn with_shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The same server with other limits on slow and idle clients.
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// The same server with room for only `n` component instances at once (requests past
    /// them wait, then get a 503); for tests.
    pub fn with_instances(mut self, n: usize) -> Self {
        self.instances = Arc::new(Semaphore::new(n));
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
            // At the connection limit, wait for one to close before accepting more.
            let permit = tokio::select! {
                permit = self.connections.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => break,
                },
                _ = shutdown.changed() => break,
            };
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // Out of file descriptors, say: pause rather than spin, and let
                            // connections close meanwhile.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::select! {
                                _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                                _ = shutdown.changed() => break,
                            }
                            continue;
                        }
                    };
                    // Responses are written whole; Nagle would only hold them back.
                    let _ = stream.set_nodelay(true);
                    let server = self.clone();
                    let guard = self.inflight.subscribe();
                    let mut stop = shutdown.clone();
                    let stopping = async move { stop.wait_for(|stopping| *stopping).await.is_ok() };
                    let header_timeout = self.timeouts.header;
                    let tls = self.tls.clone();
                    tokio::spawn(async move {
                        let _permit = permit;
                        let service = service_fn(move |req| {
                            let server = server.clone();
                            async move { Ok::<_, Infallible>(server.respond(req, peer).await) }
                        });
                        let Some(tls) = tls else {
                            http1(TokioIo::new(stream), service, header_timeout, stopping).await;
                            drop(guard);
                            return;
                        };
                        // A handshake that fails or takes longer than a request's headers
                        // may closes the connection.
                        let accepted =
                            tokio::time::timeout(header_timeout, tls.acceptor().accept(stream))
                                .await;
                        if let Ok(Ok(stream)) = accepted {
                            match stream.get_ref().1.alpn_protocol() == Some(&b"h2"[..]) {
                                true => http2(TokioIo::new(stream), service, stopping).await,
                                false => {
                                    let io = TokioIo::new(stream);
                                    http1(io, service, header_timeout, stopping).await
                                }
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
            tracing::info!("shutdown cut a tick short");
        }
        Ok(())
    }

    async fn respond(
        &self,
        mut req: hyper::Request<Incoming>,
        peer: SocketAddr,
    ) -> hyper::Response<Full<Bytes>> {
        let started = Instant::now();
        // The component limits failed authentication per source address, which it reads
        // where Spin puts it: the peer's, never one the client sent.
        if let Ok(addr) = hyper::header::HeaderValue::from_str(&peer.to_string()) {
            req.headers_mut().insert(CLIENT_ADDR, addr);
        }
        let method = req.method().to_string();
        let path = req.uri().path().to_owned();
        let span = otlp::enabled().then(|| otlp::begin_request(req.headers_mut()));
        let outcome = match (req.method() == hyper::Method::GET, path.as_str()) {
            (true, READY_PATH) => Ok(self.ready().await),
            (_, p) if crate::portal::is_portal(p) => self.portal(req).await,
            _ => self.forward(req).await,
        };
        let response = match outcome {
            Ok(resp) => resp,
            Err(e) => {
                let response = host_error(ApiError::internal(""));
                tracing::error!(
                    target: REQUESTS,
                    error = %format!("{e:#}"),
                    requestId = response.header("x-request-id").unwrap_or(""),
                    "request failed in the host"
                );
                response
            }
        };
        let elapsed = started.elapsed().as_secs_f64();
        if let Some(m) = &self.env.metrics {
            m.observe_request(&method, &path, response.status, elapsed);
        }
        tracing::info!(
            target: REQUESTS,
            method = %method,
            path = %path,
            status = response.status,
            requestId = response.header("x-request-id").unwrap_or(""),
            ms = %format!("{:.3}", elapsed * 1000.0),
            peer = %peer,
            "request"
        );
        if let Some(span) = span {
            end_request_span(span, &method, &path, &response);
        }
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

    /// `GET /readyz`: readiness, answered by the host. 200 when the store answers a read
    /// within [`READY_TIMEOUT`], else 503 `store_unavailable` (a load balancer stops sending
    /// requests; `/healthz`, the component's own answer, stays the liveness probe).
    async fn ready(&self) -> HttpResponse {
        let probe = tokio::time::timeout(
            READY_TIMEOUT,
            self.env
                .kv
                .get(edgehook_component::storage::keys::HEALTH_PROBE.as_str()),
        )
        .await;
        match probe {
            Ok(Ok(_)) => {
                let body = Bytes::from_static(b"{\"status\":\"ready\"}");
                HttpResponse {
                    status: 200,
                    headers: vec![("content-type".into(), "application/json".into())],
                    body,
                }
            }
            Ok(Err(e)) => host_error(ApiError::store_unavailable(e)),
            Err(_) => host_error(ApiError::store_unavailable(
                "the store did not answer in time",
            )),
        }
    }

    async fn forward(&self, req: hyper::Request<Incoming>) -> Result<HttpResponse> {
        let (parts, body) = req.into_parts();
        let buf = match tokio::time::timeout(self.timeouts.body, read_body(body)).await {
            Ok(Ok(buf)) => buf,
            Ok(Err(e)) => {
                return Ok(host_error(ApiError::bad_request(format!(
                    "The request body could not be read: {e}."
                ))));
            }
            Err(_) => {
                return Ok(host_error(
                    ApiError::new(
                        408,
                        "request_timeout",
                        "The request body did not arrive in time.",
                    )
                    .with_header("connection", "close"),
                ));
            }
        };
        let permit = match self.slot(&self.instances).await {
            Ok(permit) => permit,
            Err(busy) => return Ok(busy),
        };
        let req = hyper::Request::from_parts(parts, Full::new(buf));
        let (response, rest) = self.warm.handle_detached(req).await?;
        // Nothing is answered before the store holds it as durably as it promises
        // (`--fsync-always`: on disk).
        let settled = self.env.kv.settle().await;
        // The client has its answer; work the component does after it (attempt 1 of an
        // accepted event) finishes on its own, and keeps its instance until then.
        match rest {
            Rest::Ended(outcome) => report_rest(outcome.map_err(anyhow::Error::from)),
            Rest::Running(task) => {
                let guard = self.inflight.subscribe();
                let kv = self.env.kv.clone();
                tokio::spawn(async move {
                    let _guard = guard;
                    let _permit = permit;
                    report_rest(Rest::Running(task).finish().await);
                    settle_after(&kv, "the work after an answer").await;
                });
            }
        }
        if let Err(e) = settled {
            tracing::error!(error = %e, "store sync before an answer failed");
            let unsynced = ApiError::new(
                503,
                "store_unavailable",
                "The service's storage could not make the change durable; it may or may not \
                 have taken effect. Retry later (with the same Idempotency-Key).",
            );
            return Ok(host_error(unsynced.with_header("retry-after", "1")));
        }
        Ok(response)
    }

    /// A free instance of `pool`'s component, waited for up to the instance timeout; else the
    /// 503 `overloaded` to answer.
    async fn slot(
        &self,
        pool: &Arc<Semaphore>,
    ) -> std::result::Result<tokio::sync::OwnedSemaphorePermit, HttpResponse> {
        // A free slot at once (the common case) sets no timer.
        let permit = match pool.clone().try_acquire_owned() {
            Ok(permit) => Ok(permit),
            Err(_) => tokio::time::timeout(self.timeouts.instance, pool.clone().acquire_owned())
                .await
                .map_err(|_| ())
                .and_then(|p| p.map_err(|_| ())),
        };
        permit.map_err(|()| {
            host_error(
                ApiError::new(
                    503,
                    "overloaded",
                    "The service is at capacity; nothing was changed. Retry later.",
                )
                .with_header("retry-after", "1"),
            )
        })
    }

    /// `/portal` and `/portal/...`: the web portal's component ([`Baseline::portal`]), static
    /// files only. The request's body is not read (the portal answers `GET` and `HEAD`; any
    /// other method is its 405), and the portal never works after its response.
    async fn portal(&self, req: hyper::Request<Incoming>) -> Result<HttpResponse> {
        let permit = match self.slot(&self.portal_instances).await {
            Ok(permit) => permit,
            Err(busy) => return Ok(busy),
        };
        let (parts, _body) = req.into_parts();
        let response = self
            .portal
            .handle(
                &self.env,
                hyper::Request::from_parts(parts, Full::new(Bytes::new())),
            )
            .await;
        drop(permit);
        response
    }

    /// Calls `tick` when due, when woken by a request, once at start (work left by a
    /// previous run), and at least every [`IDLE_TICK`] (work queued by another instance on
    /// the same store).
    ///
    /// A wake comes with every accepted event, whose first attempts the component already
    /// runs in the same invocation; the tick after it is the safety net (and learns when the
    /// retries are due), so wakes are coalesced: at most one tick per [`WAKE_INTERVAL`].
    async fn timer(self, mut shutdown: watch::Receiver<bool>) {
        let mut next_due: Option<u64> = Some(0);
        let mut last_tick = Instant::now() - WAKE_INTERVAL;
        loop {
            let wait = tick_wait(next_due, now_ms(), IDLE_TICK);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.wake.notified() => {
                    let earliest = last_tick + WAKE_INTERVAL;
                    tokio::select! {
                        _ = tokio::time::sleep_until(earliest.into()) => {}
                        _ = shutdown.changed() => return,
                    }
                }
                _ = shutdown.changed() => return,
            }
            let permit = tokio::select! {
                permit = self.instances.clone().acquire_owned() => permit,
                _ = shutdown.changed() => return,
            };
            last_tick = Instant::now();
            let ticked = self.warm.tick().await;
            settle_after(&self.env.kv, "a tick").await;
            drop(permit);
            match ticked {
                Ok(report) => {
                    if report.attempted > 0 {
                        tracing::info!(
                            attempted = report.attempted,
                            succeeded = report.succeeded,
                            failed = report.failed,
                            "tick"
                        );
                    }
                    next_due = report.next_due_ms;
                }
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "tick failed");
                    next_due = Some(now_ms() + 1000);
                }
            }
        }
    }
}

/// Syncs what an invocation that answers nobody (`what`) wrote, as an answer would
/// ([`KvStore::settle`]); a failure is logged (every later answer fails too).
async fn settle_after(kv: &KvStore, what: &str) {
    if let Err(e) = kv.settle().await {
        tracing::error!(error = %e, "store sync after {what} failed");
    }
}

/// Reads a request body, at most [`BODY_READ_LIMIT`] bytes of it (the component answers 413
/// past its limits without the rest).
async fn read_body(mut body: Incoming) -> Result<Bytes, hyper::Error> {
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
    Ok(buf.freeze())
}

/// Serves one HTTP/1.1 connection. hyper's header read timeout only runs with a timer; it
/// also ends a keep-alive connection idle for as long. At shutdown an idle keep-alive
/// connection closes at once, and one with a request in flight closes after its response:
/// neither holds the shutdown for the grace period.
async fn http1<I, S>(
    io: I,
    service: S,
    header_timeout: Duration,
    stopping: impl std::future::Future<Output = bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = Full<Bytes>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        true = stopping => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Serves one HTTP/2 connection (a TLS client that chose `h2`), shut down as [`http1`].
async fn http2<I, S>(io: I, service: S, stopping: impl std::future::Future<Output = bool>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = Full<Bytes>>,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let conn = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .timer(TokioTimer::new())
        .serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        true = stopping => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// An error the host answers itself (the component never saw the request, or failed): the
/// component's error envelope, with a request id of the component's kind, in the body and
/// in `X-Request-Id`.
pub fn host_error(error: ApiError) -> HttpResponse {
    struct OsEntropy;
    impl edgehook_component::model::env::Entropy for OsEntropy {
        fn fill(&self, buf: &mut [u8]) {
            use rand::TryRng as _;
            // Without the operating system's randomness the id is zeros: still an answer.
            let _ = rand::rngs::SysRng.try_fill_bytes(buf);
        }
    }
    let request_id = edgehook_component::model::ids::request_id(&OsEntropy);
    let response = error
        .into_response(&request_id)
        .with_header("x-request-id", &request_id);
    HttpResponse {
        status: response.status,
        headers: response.headers,
        body: Bytes::from(response.body),
    }
}

/// How long the timer waits before its next tick: until the next due time, or the idle tick
/// if that comes first (another instance on the same store may have queued work this one was
/// never told of).
fn tick_wait(next_due_ms: Option<u64>, now_ms: u64, idle: Duration) -> Duration {
    next_due_ms
        .map(|due| Duration::from_millis(due.saturating_sub(now_ms)))
        .map_or(idle, |w| w.min(idle))
}

/// Binds `addr`.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (is another server running there?)"))
}

/// Ends a request's span: its route, status and request id, and the event id of a publish.
fn end_request_span(span: otlp::Begun, method: &str, path: &str, response: &HttpResponse) {
    let mut attributes = vec![
        ("http.request.method", otlp::Value::Str(method.to_owned())),
        ("url.path", otlp::Value::Str(path.to_owned())),
        (
            "http.response.status_code",
            otlp::Value::Int(i64::from(response.status)),
        ),
    ];
    if let Some(id) = response.header("x-request-id") {
        attributes.push(("edgehook.request_id", otlp::Value::Str(id.to_owned())));
    }
    if response.status == 202
        && let Ok(body) = serde_json::from_slice::<serde_json::Value>(&response.body)
        && let Some(id) = body["data"]["eventId"].as_str()
    {
        attributes.push(("edgehook.event_id", otlp::Value::Str(id.to_owned())));
    }
    let name = format!("{method} {}", otlp::route(path));
    span.end(name, otlp::Kind::Server, attributes, response.status >= 500);
}

/// Logs an invocation that trapped (or whose task failed) after its response was sent.
fn report_rest(outcome: Result<()>) {
    if let Err(e) = outcome {
        tracing::error!(
            error = %format!("{e:#}"),
            "component failed after responding"
        );
    }
}

#[cfg(test)]
mod tests;
