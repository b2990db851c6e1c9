//! Real outbound HTTP for `edgehook serve`: pooled keep-alive connections, rustls with the
//! webpki roots (plus an optional extra CA), and an SSRF guard: names are resolved by the
//! host, every resolved address must be globally routable, and the connection goes to the
//! checked address (pinned), so a DNS answer cannot change between the check and the use.
//! Redirects are never followed (a 3xx is handed to the component, which counts it a failure).

use crate::outbound::{Outbound, OutboundFuture};
use crate::serve::log_line;
use bytes::Bytes;
use edgehook_component::validate::{is_global_v4, is_global_v6};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls_pki_types::ServerName;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
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

/// Whether an address may be connected to when private targets are not allowed.
pub fn is_global(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or_else(|| is_global_v6(v6), is_global_v4),
    }
}

/// Why a connection was not made; carried through the client's error to pick the
/// `wasi:http` error code the component sees.
#[derive(Debug)]
pub enum ConnectError {
    /// The name did not resolve.
    NotFound(String),
    /// An address it resolved to is not public.
    Prohibited(IpAddr),
    /// No address accepted the connection.
    Refused(io::Error),
    /// Connecting (TCP or TLS) took too long.
    Timeout,
    /// The TLS handshake failed.
    Tls(io::Error),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::NotFound(h) => write!(f, "cannot resolve {h}"),
            ConnectError::Prohibited(ip) => write!(f, "{ip} is not a public address"),
            ConnectError::Refused(e) => write!(f, "connect: {e}"),
            ConnectError::Timeout => f.write_str("connect timed out"),
            ConnectError::Tls(e) => write!(f, "tls: {e}"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// A TCP connection, with or without TLS.
pub enum Stream {
    /// Plain TCP (only to allowed private targets over `http`).
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

/// Resolves, checks, pins and connects.
#[derive(Clone)]
pub struct Connector {
    tls: TlsConnector,
    allow_private: bool,
}

impl Connector {
    async fn connect(self, uri: http::Uri) -> Result<TokioIo<Stream>, ConnectError> {
        let https = uri.scheme_str() == Some("https");
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((host.as_str(), port))
                .await
                .map_err(|_| ConnectError::NotFound(host.clone()))?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(ConnectError::NotFound(host));
        }
        if !self.allow_private
            && let Some(bad) = addrs.iter().find(|a| !is_global(a.ip()))
        {
            // One non-public answer refuses the name: no mixing public and private answers.
            return Err(ConnectError::Prohibited(bad.ip()));
        }
        let connect = async {
            let mut last = None;
            for addr in &addrs {
                match TcpStream::connect(addr).await {
                    Ok(s) => return Ok(s),
                    Err(e) => last = Some(e),
                }
            }
            Err(ConnectError::Refused(
                last.unwrap_or_else(|| io::Error::other("no address")),
            ))
        };
        let tcp = tokio::time::timeout(DEFAULT_CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| ConnectError::Timeout)??;
        let _ = tcp.set_nodelay(true);
        if !https {
            return Ok(TokioIo::new(Stream::Plain(tcp)));
        }
        let name = ServerName::try_from(host.clone())
            .map_err(|e| ConnectError::Tls(io::Error::other(e.to_string())))?;
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
}

/// How `NetOutbound` connects.
#[derive(Debug, Clone, Default)]
pub struct NetOptions {
    /// Allow non-global addresses and plain `http` (local development and tests only).
    pub allow_private: bool,
    /// PEM file with extra CA certificates to trust besides the webpki roots.
    pub extra_ca: Option<std::path::PathBuf>,
}

impl NetOutbound {
    /// A pooled client.
    pub fn new(options: &NetOptions) -> anyhow::Result<Self> {
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
            allow_private: options.allow_private,
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(32)
            .build(connector);
        Ok(NetOutbound { client })
    }
}

fn classify(e: &hyper_util::client::legacy::Error) -> HttpError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(c) = s.downcast_ref::<ConnectError>() {
            return match c {
                ConnectError::NotFound(_) => HttpError::DestinationNotFound,
                ConnectError::Prohibited(_) => HttpError::DestinationIpProhibited,
                ConnectError::Refused(_) => HttpError::ConnectionRefused,
                ConnectError::Timeout => HttpError::ConnectionTimeout,
                ConnectError::Tls(_) => HttpError::TlsProtocolError,
            };
        }
        source = s.source();
    }
    if e.is_connect() {
        HttpError::ConnectionRefused
    } else {
        HttpError::HttpProtocolError
    }
}

impl Outbound for NetOutbound {
    fn send(
        &self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> OutboundFuture {
        let client = self.client.clone();
        Box::pin(async move {
            let started = Instant::now();
            let (parts, body) = request.into_parts();
            let body = body.collect().await?.to_bytes();
            let delivery = parts
                .headers
                .get("x-service-delivery-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            // Never log a query string: partners sometimes put tokens there.
            let target = format!(
                "{}://{}{}",
                parts.uri.scheme_str().unwrap_or("https"),
                parts.uri.authority().map(|a| a.as_str()).unwrap_or(""),
                parts.uri.path()
            );
            let req = http::Request::from_parts(parts, Full::new(body));
            let limit = options
                .and_then(|o| o.first_byte_timeout)
                .unwrap_or(DEFAULT_RESPONSE_TIMEOUT);
            let outcome = match tokio::time::timeout(limit, client.request(req)).await {
                Err(_) => Err(HttpError::ConnectionReadTimeout),
                Ok(Err(e)) => Err(classify(&e)),
                Ok(Ok(resp)) => Ok(resp),
            };
            let ms = format!("{:.1}", started.elapsed().as_secs_f64() * 1000.0);
            match outcome {
                Ok(resp) => {
                    let (parts, mut incoming) = resp.into_parts();
                    log_line(
                        "info",
                        "delivery attempt",
                        &[
                            ("deliveryId", delivery),
                            ("target", target),
                            ("status", parts.status.as_u16().to_string()),
                            ("ms", ms),
                        ],
                    );
                    // Read the body (bounded) in the background so the connection can go back
                    // to the pool; the component only needs the status.
                    tokio::spawn(async move {
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
                    log_line(
                        "warn",
                        "delivery attempt",
                        &[
                            ("deliveryId", delivery),
                            ("target", target),
                            ("error", format!("{e:?}")),
                            ("ms", ms),
                        ],
                    );
                    Err(e)
                }
            }
        })
    }
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
