//! The loopback webhook receiver of every test, tool and benchmark.
//!
//! [`Receiver`] is an HTTP/1.1 server on a free port of 127.0.0.1 (or `::1`, or both; HTTPS
//! with a certificate of a fresh test CA if asked) that answers each request as it is told
//! (one [`Answer`] for all, changed at will, or a rule of the request and those before it),
//! counts requests, connections and requests in flight, keeps every request it got
//! ([`Received`]: method, path, headers, body, arrival), and can hold requests in flight
//! until released.
//!
//! [`serve`] and [`loopback`] are its bare core: a closure answers each request, nothing is
//! counted or kept. The benchmark's receivers, whose cost per request is measured under
//! load, and its servers that are not receivers (the baselines, the forwarder) use it.
//!
//! Both read each request's body whole (at most [`BODY_LIMIT`]; past it, 413) before
//! answering, keep connections alive, set `TCP_NODELAY`, and give a head, or an idle
//! keep-alive connection, 30 s.

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;

/// The largest body read; a delivery is at most 256 KiB.
pub const BODY_LIMIT: usize = 1 << 20;
/// How long a request's head may take, and a keep-alive connection may sit idle.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// What a server of this module answers with.
pub type Response = hyper::Response<Full<Bytes>>;

// ---------------------------------------------------------------------------------------
// The core: a closure per request

/// Answers every request on `listener` with `respond(head, body)`, the body read whole,
/// until accepting fails (its error is returned).
pub async fn serve<F, Fut>(listener: TcpListener, respond: F) -> std::io::Result<()>
where
    F: Fn(http::request::Parts, Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
{
    accept(listener, None, None, respond).await
}

/// [`serve`] on a free port of 127.0.0.1, in a task of its own on the current runtime.
/// Returns the port; the server runs until the runtime ends.
pub async fn loopback<F, Fut>(respond: F) -> std::io::Result<u16>
where
    F: Fn(http::request::Parts, Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
{
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(serve(listener, respond));
    Ok(port)
}

/// Accepts connections on `listener` (counting them in `accepted`, if given; over TLS with
/// `tls`, if given) and serves each in a task of its own.
async fn accept<F, Fut>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    accepted: Option<Arc<AtomicUsize>>,
    respond: F,
) -> std::io::Result<()>
where
    F: Fn(http::request::Parts, Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
{
    loop {
        let (stream, _) = listener.accept().await?;
        if let Some(accepted) = &accepted {
            accepted.fetch_add(1, Ordering::SeqCst);
        }
        let _ = stream.set_nodelay(true);
        let respond = respond.clone();
        match &tls {
            None => {
                tokio::spawn(connection(stream, respond));
            }
            Some(tls) => {
                let tls = tls.clone();
                tokio::spawn(async move {
                    if let Ok(stream) = tls.accept(stream).await {
                        connection(stream, respond).await;
                    }
                });
            }
        }
    }
}

/// Serves one connection's requests with `respond`.
async fn connection<S, F, Fut>(io: S, respond: F)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(http::request::Parts, Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response> + Send + 'static,
{
    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let respond = respond.clone();
        async move {
            let (head, body) = req.into_parts();
            let Ok(body) = Limited::new(body, BODY_LIMIT).collect().await else {
                let mut too_large = Response::new(Full::new(Bytes::from_static(
                    b"body too large, or cut short",
                )));
                *too_large.status_mut() = http::StatusCode::PAYLOAD_TOO_LARGE;
                return Ok(too_large);
            };
            Ok::<_, std::convert::Infallible>(respond(head, body.to_bytes()).await)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(io), svc)
        .await;
}

// ---------------------------------------------------------------------------------------
// The receiver

/// One request a [`Receiver`] got.
#[derive(Debug, Clone)]
pub struct Received {
    /// Its method.
    pub method: http::Method,
    /// Its path (without the query).
    pub path: String,
    /// Its headers.
    pub headers: http::HeaderMap,
    /// Its body, whole.
    pub body: Bytes,
    /// When it arrived.
    pub at: Instant,
    /// When it arrived, in milliseconds since the Unix epoch.
    pub unix_ms: u64,
}

impl Received {
    /// The value of header `name`, if it is there and is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// How a [`Receiver`] answers a request: a status, headers and a body, at once or after a
/// delay, or never.
#[derive(Debug, Clone)]
pub struct Answer {
    status: http::StatusCode,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    body: Bytes,
    delay: Duration,
    never: bool,
}

impl Default for Answer {
    /// 200 with the body `ok`, at once.
    fn default() -> Self {
        Answer::status(200).body("ok")
    }
}

impl Answer {
    /// 200 with the body `ok`, at once.
    pub fn ok() -> Answer {
        Answer::default()
    }

    /// `status` with an empty body, at once. Panics if `status` is not a status code.
    pub fn status(status: u16) -> Answer {
        Answer {
            status: http::StatusCode::from_u16(status)
                .unwrap_or_else(|_| panic!("{status} is not an HTTP status")),
            headers: Vec::new(),
            body: Bytes::new(),
            delay: Duration::ZERO,
            never: false,
        }
    }

    /// No answer at all: the request stays in flight until the client gives up.
    pub fn never() -> Answer {
        Answer {
            never: true,
            ..Answer::default()
        }
    }

    /// With header `name: value` too. Panics if either is not valid in a header.
    pub fn header(mut self, name: &str, value: &str) -> Answer {
        let name = http::HeaderName::try_from(name).expect("a header name");
        let value = http::HeaderValue::try_from(value).expect("a header value");
        self.headers.push((name, value));
        self
    }

    /// With `body` as the body.
    pub fn body(mut self, body: impl Into<Bytes>) -> Answer {
        self.body = body.into();
        self
    }

    /// Sent `delay` after the request has arrived.
    pub fn after(mut self, delay: Duration) -> Answer {
        self.delay = delay;
        self
    }

    fn into_response(self) -> Response {
        let mut response = Response::new(Full::new(self.body));
        *response.status_mut() = self.status;
        response.headers_mut().extend(self.headers);
        response
    }
}

/// A rule that answers a request, given the requests the receiver kept before it (oldest
/// first; none if it keeps none).
type Rule = dyn Fn(&Received, &[Received]) -> Answer + Send + Sync;

/// How a receiver answers.
#[derive(Clone)]
enum Respond {
    Always(Answer),
    By(Arc<Rule>),
}

/// Where a receiver listens.
#[derive(Clone, Copy)]
enum Bind {
    V4,
    V6,
    /// The same port on 127.0.0.1 and, where the machine has it, `::1`.
    Both,
}

/// What a receiver's tasks share with its handle.
struct State {
    respond: Mutex<Respond>,
    keep: bool,
    kept: Mutex<Vec<Received>>,
    hits: AtomicUsize,
    connections: Arc<AtomicUsize>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    hold: AtomicBool,
    held: AtomicUsize,
    release: Notify,
    arrived: Notify,
}

/// A receiver, configured before it starts: [`Receiver::builder`].
pub struct ReceiverBuilder {
    respond: Respond,
    keep: bool,
    bind: Bind,
    tls: Option<Vec<String>>,
}

impl ReceiverBuilder {
    /// Answers every request with `answer` (until [`Receiver::answer_with`] says otherwise).
    pub fn answer(mut self, answer: Answer) -> Self {
        self.respond = Respond::Always(answer);
        self
    }

    /// Answers each request with `rule(request, earlier)`, `earlier` being the requests
    /// received before it, oldest first (none with [`keep_nothing`](Self::keep_nothing)).
    pub fn answer_by(
        mut self,
        rule: impl Fn(&Received, &[Received]) -> Answer + Send + Sync + 'static,
    ) -> Self {
        self.respond = Respond::By(Arc::new(rule));
        self
    }

    /// Keeps no request, only counts them (a long run's receiver).
    pub fn keep_nothing(mut self) -> Self {
        self.keep = false;
        self
    }

    /// Listens on `::1` instead of 127.0.0.1.
    pub fn ipv6(mut self) -> Self {
        self.bind = Bind::V6;
        self
    }

    /// Listens on one port of both 127.0.0.1 and, where the machine has it, `::1`.
    pub fn both_loopbacks(mut self) -> Self {
        self.bind = Bind::Both;
        self
    }

    /// Serves HTTPS with a certificate for `names` (e.g. `127.0.0.1`, a host name) issued by
    /// a fresh CA ([`Receiver::ca_pem`]).
    pub fn tls(mut self, names: &[&str]) -> Self {
        self.tls = Some(names.iter().map(|n| (*n).to_owned()).collect());
        self
    }

    /// Starts the receiver on the current tokio runtime; it runs until the runtime ends.
    /// Panics if no port can be bound.
    pub async fn start(self) -> Receiver {
        let listeners = bind(self.bind).await;
        let addr = listeners[0].local_addr().expect("a bound address");
        let (tls, ca_pem) = match &self.tls {
            Some(names) => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let (acceptor, ca_pem) = crate::tls::acceptor(&names);
                (Some(acceptor), Some(ca_pem))
            }
            None => (None, None),
        };
        let state = Arc::new(State {
            respond: Mutex::new(self.respond),
            keep: self.keep,
            kept: Mutex::default(),
            hits: AtomicUsize::new(0),
            connections: Arc::default(),
            in_flight: AtomicUsize::new(0),
            most_in_flight: AtomicUsize::new(0),
            hold: AtomicBool::new(false),
            held: AtomicUsize::new(0),
            release: Notify::new(),
            arrived: Notify::new(),
        });
        for listener in listeners {
            let shared = state.clone();
            let respond = move |head, body| receive(shared.clone(), head, body);
            let accepted = Some(state.connections.clone());
            tokio::spawn(accept(listener, tls.clone(), accepted, respond));
        }
        Receiver {
            addr,
            ca_pem,
            state,
        }
    }
}

/// Binds the listeners of `bind`, on a free port.
async fn bind(bind: Bind) -> Vec<TcpListener> {
    let v4 = (Ipv4Addr::LOCALHOST, 0);
    match bind {
        Bind::V4 => vec![TcpListener::bind(v4).await.expect("bind 127.0.0.1")],
        Bind::V6 => vec![
            TcpListener::bind((Ipv6Addr::LOCALHOST, 0))
                .await
                .expect("bind ::1"),
        ],
        Bind::Both => {
            for _ in 0..20 {
                let first = TcpListener::bind(v4).await.expect("bind 127.0.0.1");
                let port = first.local_addr().expect("a bound address").port();
                match TcpListener::bind((Ipv6Addr::LOCALHOST, port)).await {
                    Ok(second) => return vec![first, second],
                    Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
                    Err(_) => return vec![first], // no IPv6 loopback here
                }
            }
            panic!("no port free on both loopback addresses");
        }
    }
}

/// Counts a request in flight while it lives.
struct InFlight(Arc<State>);

impl InFlight {
    fn new(state: Arc<State>) -> InFlight {
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.most_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(state)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A receiver's answer to one request: counted, kept, held while held, answered as told.
async fn receive(state: Arc<State>, head: http::request::Parts, body: Bytes) -> Response {
    let _in_flight = InFlight::new(state.clone());
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let request = Received {
        method: head.method,
        path: head.uri.path().to_owned(),
        headers: head.headers,
        body,
        at: Instant::now(),
        unix_ms,
    };
    let answer = {
        let mut kept = lock(&state.kept);
        let respond = lock(&state.respond).clone();
        let answer = match respond {
            Respond::Always(answer) => answer,
            Respond::By(rule) => rule(&request, &kept),
        };
        if state.keep {
            kept.push(request);
        }
        state.hits.fetch_add(1, Ordering::SeqCst);
        answer
    };
    state.arrived.notify_waiters();
    if state.hold.load(Ordering::SeqCst) {
        state.held.fetch_add(1, Ordering::SeqCst);
        let released = state.release.notified();
        if state.hold.load(Ordering::SeqCst) {
            released.await;
        }
    }
    if answer.never {
        std::future::pending::<()>().await;
    }
    if !answer.delay.is_zero() {
        tokio::time::sleep(answer.delay).await;
    }
    answer.into_response()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running receiver (it runs until its runtime ends). Clones share it.
#[derive(Clone)]
pub struct Receiver {
    addr: SocketAddr,
    ca_pem: Option<String>,
    state: Arc<State>,
}

impl Receiver {
    /// A receiver to configure: by default it listens on 127.0.0.1 over plain HTTP, answers
    /// 200 `ok` at once and keeps every request.
    pub fn builder() -> ReceiverBuilder {
        ReceiverBuilder {
            respond: Respond::Always(Answer::ok()),
            keep: true,
            bind: Bind::V4,
            tls: None,
        }
    }

    /// The default receiver ([`builder`](Self::builder)), started on the current runtime.
    pub async fn start() -> Receiver {
        Receiver::builder().start().await
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Its address (the 127.0.0.1 one when it listens on both loopbacks).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL of `path` (`/...`) on it: `http://127.0.0.1:PORT/...` (`https`, `[::1]` as it
    /// listens).
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        let host = match self.addr.ip() {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        };
        format!("{scheme}://{host}:{}{path}", self.addr.port())
    }

    /// The certificate of the CA that issued its certificate, as PEM (what a client must
    /// trust). Panics if it serves plain HTTP.
    pub fn ca_pem(&self) -> &str {
        self.ca_pem
            .as_deref()
            .expect("a receiver started with tls()")
    }

    /// Answers every request from now on with `answer`.
    pub fn answer_with(&self, answer: Answer) {
        *lock(&self.state.respond) = Respond::Always(answer);
    }

    /// Requests received so far.
    pub fn hits(&self) -> usize {
        self.state.hits.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// The most requests it has had in flight at once.
    pub fn most_in_flight(&self) -> usize {
        self.state.most_in_flight.load(Ordering::SeqCst)
    }

    /// Every request kept so far, oldest first.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.state.kept).clone()
    }

    /// The requests kept so far whose path is `path`, oldest first.
    pub fn received_on(&self, path: &str) -> Vec<Received> {
        let kept = lock(&self.state.kept);
        kept.iter().filter(|r| r.path == path).cloned().collect()
    }

    /// Waits until it has received `n` requests in all (no deadline: the caller sets one).
    pub async fn hits_reach(&self, n: usize) {
        loop {
            let next = self.state.arrived.notified();
            if self.hits() >= n {
                return;
            }
            next.await;
        }
    }

    /// From now on, holds each request in flight (received and counted, not answered)
    /// until [`release`](Self::release).
    pub fn hold(&self) {
        self.state.hold.store(true, Ordering::SeqCst);
    }

    /// How many requests were held so far.
    pub fn held(&self) -> usize {
        self.state.held.load(Ordering::SeqCst)
    }

    /// Stops holding, and answers the requests held.
    pub fn release(&self) {
        self.state.hold.store(false, Ordering::SeqCst);
        self.state.release.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HttpClient;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[tokio::test]
    async fn it_keeps_each_request_and_answers_as_its_rule_says() {
        let receiver = Receiver::builder()
            .answer_by(|request, earlier| {
                let before = earlier.iter().filter(|r| r.path == request.path).count();
                match before {
                    0 => Answer::status(503).header("retry-after", "3"),
                    _ => Answer::ok().body("again"),
                }
            })
            .start()
            .await;
        let client = HttpClient::new();
        let post = |path: &str| {
            let mut req = crate::http::request("POST", &receiver.url(path), "", "{\"n\":1}");
            req.headers_mut()
                .insert("x-test", http::HeaderValue::from_static("yes"));
            req
        };
        let (head, _) = client.send(post("/a")).await.expect("first");
        assert_eq!(head.status, 503);
        assert_eq!(head.headers["retry-after"], "3");
        let (head, body) = client.send(post("/a")).await.expect("second");
        assert_eq!((head.status.as_u16(), &body[..]), (200, &b"again"[..]));
        let (head, _) = client.send(post("/b")).await.expect("other path");
        assert_eq!(head.status, 503);
        assert_eq!(receiver.hits(), 3);
        let got = receiver.received_on("/a");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].method, http::Method::POST);
        assert_eq!(got[0].header("x-test"), Some("yes"));
        assert_eq!(got[0].text(), "{\"n\":1}");
        assert!(got[0].at <= got[1].at && got[0].unix_ms > 0);
        receiver.answer_with(Answer::status(410));
        let (status, _) = client.call("GET", &receiver.url("/c")).await.expect("c");
        assert_eq!(status, 410);
    }

    #[tokio::test]
    async fn held_requests_wait_for_the_release() {
        let receiver = Receiver::builder().keep_nothing().start().await;
        receiver.hold();
        let url = receiver.url("/held");
        let sent = tokio::spawn(async move { HttpClient::new().call("GET", &url).await });
        receiver.hits_reach(1).await;
        assert_eq!(receiver.most_in_flight(), 1);
        assert!(!sent.is_finished());
        receiver.release();
        let (status, body) = sent.await.expect("task").expect("answered");
        assert_eq!((status, body.as_str()), (200, "ok"));
        assert_eq!((receiver.held(), receiver.connections()), (1, 1));
        assert!(receiver.received().is_empty(), "keep_nothing keeps nothing");
    }

    #[tokio::test]
    async fn https_is_served_with_a_certificate_of_its_own_ca() {
        let receiver = Receiver::builder().tls(&["127.0.0.1"]).start().await;
        assert!(receiver.url("/x").starts_with("https://127.0.0.1:"));
        let tcp = tokio::net::TcpStream::connect(receiver.addr())
            .await
            .expect("connect");
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
        let mut tls = crate::tls::connector(receiver.ca_pem(), &[b"http/1.1"])
            .connect(name, tcp)
            .await
            .expect("the handshake verifies against the receiver's CA");
        let request = b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        tls.write_all(request).await.expect("write");
        let mut got = Vec::new();
        let _ = tls.read_to_end(&mut got).await;
        let got = String::from_utf8_lossy(&got);
        assert!(
            got.starts_with("HTTP/1.1 200") && got.ends_with("ok"),
            "{got}"
        );
        assert_eq!(receiver.received_on("/x").len(), 1);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_413_without_reaching_respond() {
        let port = loopback(|_, body: Bytes| async move {
            Response::new(Full::new(Bytes::from(format!("read {}", body.len()))))
        })
        .await
        .expect("server");
        let send = |len: usize| async move {
            let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect");
            let head = format!(
                "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
            );
            conn.write_all(head.as_bytes()).await.expect("head");
            // The server may answer and close before the whole body is written.
            let _ = conn.write_all(&vec![b'x'; len]).await;
            let mut got = Vec::new();
            let _ = conn.read_to_end(&mut got).await;
            String::from_utf8_lossy(&got).into_owned()
        };
        let fits = send(BODY_LIMIT).await;
        assert!(
            fits.starts_with("HTTP/1.1 200") && fits.ends_with(&format!("read {BODY_LIMIT}")),
            "{fits}"
        );
        let over = send(BODY_LIMIT + 1).await;
        assert!(over.starts_with("HTTP/1.1 413"), "{over}");
    }

    #[tokio::test]
    async fn both_loopbacks_share_one_port() {
        let receiver = Receiver::builder().both_loopbacks().start().await;
        let v4 = format!("http://127.0.0.1:{}/", receiver.port());
        let (status, _) = HttpClient::new().call("GET", &v4).await.expect("v4");
        assert_eq!(status, 200);
        // Where the machine has no IPv6 loopback, the receiver has only the one.
        if let Ok(mut v6) = tokio::net::TcpStream::connect(("::1", receiver.port())).await {
            let request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
            v6.write_all(request).await.expect("write");
            let mut got = Vec::new();
            let _ = v6.read_to_end(&mut got).await;
            assert!(got.starts_with(b"HTTP/1.1 200"));
            assert_eq!((receiver.hits(), receiver.connections()), (2, 2));
        }
    }
}
