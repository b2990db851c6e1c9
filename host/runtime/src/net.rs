//! Real outbound HTTP for `edgehook serve`: pooled keep-alive connections, rustls with the
//! webpki roots (plus an optional extra CA), and an SSRF guard: every request URL is checked
//! again with the component's own rules ([`validate::target_url`], so validation and sending
//! read a URL the same way), names are resolved by the host through a [`Resolve`], every
//! resolved address must be globally routable, and the connection goes to the checked
//! address (pinned), so a DNS answer cannot change between the check and the use. Redirects
//! are never followed (a 3xx is handed to the component, which counts it a failure). With
//! an egress proxy ([`NetOptions::egress_proxy`]) every connection is a tunnel through it
//! ([`crate::proxy`]) to the checked address; everything else stays as it is.

use crate::gate::{DEFAULT_PER_TARGET, Gates};
use crate::log::ATTEMPTS;
use crate::metrics::Metrics;
use crate::outbound::{Outbound, OutboundFuture};
use crate::proxy::{self, EgressProxy, TunnelError};
use bytes::Bytes;
use edgehook_component::model::validate::{
    self, HostKind, TargetPolicy, is_global_v4, is_global_v6,
};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::ServerName;
use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

/// Time allowed to connect (TCP + TLS) when the request does not say.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed to the response head when the request does not say.
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most of a response body read (and thrown away) to keep the connection reusable.
const DRAIN_LIMIT: usize = 64 * 1024;

/// The message of the warning `edgehook serve` logs on start when `allow_http` or
/// `allow_private_targets` is on.
pub const RELAXED: &str = "outbound policy relaxed: for local development and tests only";

/// What a policy lets deliveries reach, in words (the `outbound` field of `serve`'s
/// `listening` line).
pub fn describe(policy: TargetPolicy) -> &'static str {
    match (policy.allow_http, policy.allow_private) {
        (false, false) => "https to public addresses only",
        (true, false) => "https and plain http (--allow-http), to public addresses only",
        (false, true) => {
            "https only, to any address: loopback and private ones too (--allow-private-targets)"
        }
        (true, true) => {
            "https and plain http, to any address: loopback and private ones too \
             (--allow-http --allow-private-targets)"
        }
    }
}

/// Whether an address may be connected to when private targets are not allowed.
pub fn is_global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or_else(|| is_global_v6(v6), is_global_v4),
    }
}

/// The future a [`Resolve`] returns: the addresses of a name, with the port set.
pub type ResolveFuture = Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send>>;

/// Turns a host name into addresses: the sender's one seam. Production uses
/// [`SystemResolver`]; tests give names private answers from a static map, so no test ever
/// queries DNS. Whatever it answers is checked (every address must be public) and pinned.
pub trait Resolve: Send + Sync + 'static {
    /// The addresses of `host` (a DNS name that passed the component's URL rules; never an
    /// IP literal, those are not resolved) with `port` set.
    fn resolve(&self, host: &str, port: u16) -> ResolveFuture;
}

/// The operating system's resolver (`getaddrinfo`, through tokio's `lookup_host`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> ResolveFuture {
        let host = host.to_owned();
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// A fixed table of names and their addresses, and nothing else: the resolver tests use, so
/// no test ever queries DNS. Names not in the table do not resolve. It records every name it
/// is asked for.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver {
    table: Arc<BTreeMap<String, Vec<IpAddr>>>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl StaticResolver {
    /// A resolver answering each name (lower case, no trailing dot) with its addresses.
    pub fn new(table: impl IntoIterator<Item = (String, Vec<IpAddr>)>) -> Self {
        StaticResolver {
            table: Arc::new(table.into_iter().collect()),
            asked: Arc::default(),
        }
    }

    /// Every name asked for so far, in order.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Resolve for StaticResolver {
    fn resolve(&self, host: &str, port: u16) -> ResolveFuture {
        self.asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(host.to_owned());
        let answer = self.table.get(host).map(|ips| {
            ips.iter()
                .map(|ip| SocketAddr::new(*ip, port))
                .collect::<Vec<_>>()
        });
        Box::pin(async move {
            answer.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not in the table"))
        })
    }
}

/// Why a connection was not made; carried through the client's error to pick the
/// `wasi:http` error code the component sees.
#[derive(Debug)]
pub enum ConnectError {
    /// The URL breaks the component's rules (scheme, syntax, a non-public host); nothing
    /// was resolved.
    Refused(Refusal),
    /// The name did not resolve.
    NotFound(String),
    /// An address it resolved to is not public.
    Prohibited(IpAddr),
    /// No address accepted the connection.
    Unreachable(io::Error),
    /// Connecting (TCP or TLS) took too long.
    Timeout,
    /// The TLS handshake failed.
    Tls(io::Error),
    /// The egress proxy could not be reached, or refused the tunnel (its status says why).
    Proxy(TunnelError),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Refused(e) => write!(f, "target refused: {e:?}"),
            ConnectError::NotFound(h) => write!(f, "cannot resolve {h}"),
            ConnectError::Prohibited(ip) => write!(f, "{ip} is not a public address"),
            ConnectError::Unreachable(e) => write!(f, "connect: {e}"),
            ConnectError::Timeout => f.write_str("connect timed out"),
            ConnectError::Tls(e) => write!(f, "tls: {e}"),
            ConnectError::Proxy(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ConnectError {}

/// A TCP connection (to the target, or a tunnel to it through the egress proxy), with or
/// without TLS.
pub enum Stream {
    /// Plain TCP (only for `http` targets, when `allow_http` is on).
    Plain(TcpStream),
    /// TLS over TCP.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Why [`check_target`] refused a URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The host is a non-public address or a local name (`private_target`).
    NotPublic,
    /// Plain `http` while `http` is not allowed (`https_required`).
    NotHttps,
    /// The URL is malformed by the component's rules (`invalid_url`, `url_too_long`).
    Invalid,
}

impl Refusal {
    /// The `wasi:http` error the component sees for it.
    pub fn http_error(self) -> HttpError {
        match self {
            Refusal::NotPublic => HttpError::DestinationIpProhibited,
            Refusal::NotHttps => HttpError::HttpRequestDenied,
            Refusal::Invalid => HttpError::HttpRequestUriInvalid,
        }
    }
}

/// Checks a request URL with the component's own rules ([`validate::target_url`]): what the
/// component would refuse at create is refused here too, and the host is read by the same
/// parser (every WHATWG IPv4 notation, bracketed IPv6, ASCII names only).
pub fn check_target(
    uri: &http::Uri,
    policy: TargetPolicy,
) -> Result<(validate::TargetUrl, HostKind), Refusal> {
    let raw = format!(
        "{}://{}{}",
        uri.scheme_str().unwrap_or(""),
        uri.authority().map_or("", |a| a.as_str()),
        uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let target = validate::target_url(&raw, policy).map_err(|p| match p.code {
        "private_target" => Refusal::NotPublic,
        "https_required" => Refusal::NotHttps,
        _ => Refusal::Invalid,
    })?;
    let kind = validate::host_kind(&target.host).map_err(|_| Refusal::Invalid)?;
    Ok((target, kind))
}

/// Resolves, checks, pins and connects (directly, or through the egress proxy).
#[derive(Clone)]
pub struct Connector {
    tls: TlsConnector,
    policy: TargetPolicy,
    resolver: Arc<dyn Resolve>,
    proxy: Option<Arc<EgressProxy>>,
}

impl Connector {
    /// A TCP stream to the first of `addrs` (all checked) that takes one: a connection of its
    /// own, or a tunnel through the egress proxy. With a proxy nothing ever connects
    /// directly.
    async fn open(&self, addrs: &[SocketAddr]) -> Result<TcpStream, ConnectError> {
        let mut last = None;
        for addr in addrs {
            let opened = match &self.proxy {
                None => TcpStream::connect(addr)
                    .await
                    .map_err(ConnectError::Unreachable),
                Some(p) => proxy::tunnel(p, *addr).await.map_err(ConnectError::Proxy),
            };
            match opened {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ConnectError::Unreachable(io::Error::other("no address"))))
    }

    async fn connect(self, uri: http::Uri) -> Result<TokioIo<Stream>, ConnectError> {
        let (target, kind) = check_target(&uri, self.policy).map_err(ConnectError::Refused)?;
        let https = target.scheme == "https";
        let port = target.port.unwrap_or(if https { 443 } else { 80 });
        let addrs: Vec<SocketAddr> = match kind {
            HostKind::V4(ip) => vec![SocketAddr::new(IpAddr::V4(ip), port)],
            HostKind::V6(ip) => vec![SocketAddr::new(IpAddr::V6(ip), port)],
            HostKind::Name => self
                .resolver
                .resolve(&target.host, port)
                .await
                .map_err(|_| ConnectError::NotFound(target.host.clone()))?,
        };
        if addrs.is_empty() {
            return Err(ConnectError::NotFound(target.host));
        }
        if !self.policy.allow_private
            && let Some(bad) = addrs.iter().find(|a| !is_global(a.ip()))
        {
            // One non-public answer refuses the name: no mixing public and private answers.
            return Err(ConnectError::Prohibited(bad.ip()));
        }
        let tcp = tokio::time::timeout(DEFAULT_CONNECT_TIMEOUT, self.open(&addrs))
            .await
            .map_err(|_| ConnectError::Timeout)??;
        let _ = tcp.set_nodelay(true);
        if !https {
            return Ok(TokioIo::new(Stream::Plain(tcp)));
        }
        let name = match kind {
            HostKind::V4(ip) => ServerName::IpAddress(IpAddr::V4(ip).into()),
            HostKind::V6(ip) => ServerName::IpAddress(IpAddr::V6(ip).into()),
            HostKind::Name => ServerName::try_from(target.host)
                .map_err(|e| ConnectError::Tls(io::Error::other(e.to_string())))?,
        };
        let tls = tokio::time::timeout(DEFAULT_CONNECT_TIMEOUT, self.tls.connect(name, tcp))
            .await
            .map_err(|_| ConnectError::Timeout)?
            .map_err(ConnectError::Tls)?;
        Ok(TokioIo::new(Stream::Tls(Box::new(tls))))
    }
}

impl tower_service::Service<http::Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        Box::pin(self.clone().connect(uri))
    }
}

/// The real network, as an [`Outbound`].
#[derive(Clone)]
pub struct NetOutbound {
    client: Client<Connector, Full<Bytes>>,
    gates: Arc<Gates>,
    policy: TargetPolicy,
    metrics: Option<Arc<Metrics>>,
}

/// How `NetOutbound` connects.
#[derive(Debug, Clone)]
pub struct NetOptions {
    /// Allow plain `http://` targets (to hosts otherwise allowed; local development and
    /// tests only): `--allow-http`.
    pub allow_http: bool,
    /// Allow targets that are, or resolve to, non-global addresses, and local names (`https`
    /// still required unless `allow_http`; local development and tests only):
    /// `--allow-private-targets`.
    pub allow_private: bool,
    /// PEM file with extra CA certificates to trust besides the webpki roots.
    pub extra_ca: Option<std::path::PathBuf>,
    /// Send every delivery through this HTTP `CONNECT` proxy (`--egress-proxy`): targets are
    /// checked, resolved and pinned as without it, and the proxy is asked for the checked
    /// address; none is ever connected to directly.
    pub egress_proxy: Option<EgressProxy>,
    /// Requests in flight to one target (scheme, host and port) at most, and the idle
    /// connections kept for it ([`crate::gate`]): `--max-connections-per-target`.
    pub connections_per_target: usize,
}

impl Default for NetOptions {
    /// Both switches off, no extra CA, no proxy, [`DEFAULT_PER_TARGET`] connections.
    fn default() -> Self {
        NetOptions {
            allow_http: false,
            allow_private: false,
            extra_ca: None,
            egress_proxy: None,
            connections_per_target: DEFAULT_PER_TARGET,
        }
    }
}

impl NetOptions {
    /// Both switches on, no extra CA: what tests and benchmarks delivering to `http`
    /// receivers on 127.0.0.1 use.
    pub fn open() -> Self {
        NetOptions {
            allow_http: true,
            allow_private: true,
            ..NetOptions::default()
        }
    }

    /// The component's URL policy for these options.
    pub fn policy(&self) -> TargetPolicy {
        TargetPolicy {
            allow_http: self.allow_http,
            allow_private: self.allow_private,
        }
    }
}

impl NetOutbound {
    /// A pooled client that resolves names with the system resolver.
    pub fn new(options: &NetOptions) -> anyhow::Result<Self> {
        Self::with_resolver(options, Arc::new(SystemResolver))
    }

    /// A pooled client that resolves names with `resolver` (tests: a static map).
    pub fn with_resolver(options: &NetOptions, resolver: Arc<dyn Resolve>) -> anyhow::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = &options.extra_ca {
            use rustls_pki_types::pem::PemObject;
            for cert in rustls_pki_types::CertificateDer::pem_file_iter(path)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?
            {
                let cert = cert.map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| anyhow::anyhow!("CA in {}: {e}", path.display()))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = Connector {
            tls: TlsConnector::from(Arc::new(config)),
            policy: options.policy(),
            resolver,
            proxy: options.egress_proxy.clone().map(Arc::new),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(options.connections_per_target)
            .build(connector);
        Ok(NetOutbound {
            client,
            gates: Gates::new(options.connections_per_target),
            policy: options.policy(),
            metrics: None,
        })
    }

    /// This sender, counting every attempt (status class, duration) in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

/// The `wasi:http` error for a failed request, and what the connector said of it (for the
/// log line: which address was not public, what the proxy answered).
fn classify(e: &hyper_util::client::legacy::Error) -> (HttpError, Option<String>) {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(c) = s.downcast_ref::<ConnectError>() {
            let code = match c {
                ConnectError::Refused(r) => r.http_error(),
                ConnectError::NotFound(_) => HttpError::DestinationNotFound,
                ConnectError::Prohibited(_) => HttpError::DestinationIpProhibited,
                ConnectError::Unreachable(_) => HttpError::ConnectionRefused,
                ConnectError::Timeout => HttpError::ConnectionTimeout,
                ConnectError::Tls(_) => HttpError::TlsProtocolError,
                // A proxy that cannot be reached or refuses the tunnel is, to the component,
                // a connection that was refused: a failed attempt, retried as any.
                ConnectError::Proxy(_) => HttpError::ConnectionRefused,
            };
            return (code, Some(c.to_string()));
        }
        source = s.source();
    }
    if e.is_connect() {
        (HttpError::ConnectionRefused, None)
    } else {
        (HttpError::HttpProtocolError, None)
    }
}

impl Outbound for NetOutbound {
    fn send(
        &self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> OutboundFuture {
        let client = self.client.clone();
        let gates = self.gates.clone();
        let metrics = self.metrics.clone();
        // Refused before anything else (the connector checks again where it connects): a
        // URL the component's rules refuse is never resolved, connected to, or pooled.
        let checked = check_target(request.uri(), self.policy).map(|_| ());
        Box::pin(async move {
            let started = Instant::now();
            let (mut parts, body) = request.into_parts();
            if let Err(refusal) = checked {
                if let Some(m) = &metrics {
                    m.observe_attempt(Err("refused"), started.elapsed().as_secs_f64());
                }
                tracing::warn!(
                    target: ATTEMPTS,
                    target = %parts.uri.host().unwrap_or(""),
                    error = ?refusal,
                    "delivery refused"
                );
                return Err(refusal.http_error());
            }
            let body = body.collect().await?.to_bytes();
            let traced = crate::otlp::begin_attempt(&mut parts.headers);
            let delivery = parts
                .headers
                .get("x-service-delivery-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            // Scheme and authority only: partners' URLs carry tokens in their paths (Slack,
            // Discord, Teams) and queries. The delivery id says which subscription it was.
            let target = format!(
                "{}://{}",
                parts.uri.scheme_str().unwrap_or("https"),
                parts.uri.authority().map(|a| a.as_str()).unwrap_or(""),
            );
            let req = http::Request::from_parts(parts, Full::new(body));
            let limit = options
                .and_then(|o| o.first_byte_timeout)
                .unwrap_or(DEFAULT_RESPONSE_TIMEOUT);
            // A place among the target's connections first; the time is the receiver's from
            // here (the wait counts toward the component's deadline for the attempt).
            let pass = gates.enter(&target).await;
            let started = Instant::now();
            let mut cause = None;
            let outcome = match tokio::time::timeout(limit, client.request(req)).await {
                Err(_) => Err(HttpError::ConnectionReadTimeout),
                Ok(Err(e)) => {
                    let (code, said) = classify(&e);
                    cause = said;
                    Err(code)
                }
                Ok(Ok(resp)) => Ok(resp),
            };
            let elapsed = started.elapsed().as_secs_f64();
            if let Some(m) = &metrics {
                let status = match &outcome {
                    Ok(resp) => Ok(resp.status().as_u16()),
                    Err(HttpError::ConnectionReadTimeout) => Err("timeout"),
                    Err(_) => Err("error"),
                };
                m.observe_attempt(status, elapsed);
            }
            let ms = format!("{:.1}", elapsed * 1000.0);
            if let Some(ids) = traced {
                end_attempt_span(ids, &delivery, &target, &outcome, elapsed);
            }
            match outcome {
                Ok(resp) => {
                    let (parts, mut incoming) = resp.into_parts();
                    tracing::info!(
                        target: ATTEMPTS,
                        deliveryId = %delivery,
                        target = %target,
                        status = parts.status.as_u16(),
                        ms = %ms,
                        "delivery attempt"
                    );
                    // Read the body (bounded) in the background so the connection can go back
                    // to the pool; the component only needs the status.
                    // The place is given back when the connection is free again.
                    tokio::spawn(async move {
                        let _pass = pass;
                        let mut read = 0usize;
                        let drain = async {
                            while let Some(Ok(frame)) = incoming.frame().await {
                                read += frame.data_ref().map_or(0, Bytes::len);
                                if read > DRAIN_LIMIT {
                                    break;
                                }
                            }
                        };
                        let _ = tokio::time::timeout(Duration::from_secs(5), drain).await;
                    });
                    let empty = Full::new(Bytes::new())
                        .map_err(|never| match never {})
                        .boxed_unsync();
                    Ok(http::Response::from_parts(parts, empty))
                }
                Err(e) => {
                    tracing::warn!(
                        target: ATTEMPTS,
                        deliveryId = %delivery,
                        target = %target,
                        error = ?e,
                        ms = %ms,
                        cause = cause.as_deref(),
                        "delivery attempt"
                    );
                    Err(e)
                }
            }
        })
    }
}

/// Ends an attempt's span: its ids, the receiver's status (or the error) and the time it
/// took.
fn end_attempt_span(
    ids: crate::otlp::AttemptIds,
    delivery: &str,
    target: &str,
    outcome: &Result<http::Response<hyper::body::Incoming>, HttpError>,
    elapsed: f64,
) {
    use crate::otlp::Value;
    let mut attributes = vec![
        ("edgehook.subscription_id", Value::Str(ids.subscription_id)),
        ("edgehook.event_id", Value::Str(ids.event_id)),
        ("edgehook.delivery_id", Value::Str(delivery.to_owned())),
        ("edgehook.attempt", Value::Int(ids.attempt)),
        ("server.address", Value::Str(target.to_owned())),
        (
            "edgehook.duration_ms",
            Value::Int((elapsed * 1000.0) as i64),
        ),
    ];
    let failed = match outcome {
        Ok(resp) => {
            let status = resp.status().as_u16();
            attributes.push(("http.response.status_code", Value::Int(i64::from(status))));
            !(200..300).contains(&status)
        }
        Err(e) => {
            attributes.push(("error.type", Value::Str(format!("{e:?}"))));
            true
        }
    };
    ids.span.end(
        "POST delivery".into(),
        crate::otlp::Kind::Client,
        attributes,
        failed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_addresses() {
        for ip in [
            "127.0.0.1",
            "10.0.0.1",
            "169.254.169.254",
            "::1",
            "::ffff:10.0.0.1",
            "fd00::1",
            "0.0.0.0",
        ] {
            assert!(!is_global(ip.parse().expect("ip")), "{ip}");
        }
        for ip in ["93.184.216.34", "2606:4700::1111", "::ffff:93.184.216.34"] {
            assert!(is_global(ip.parse().expect("ip")), "{ip}");
        }
    }
}
