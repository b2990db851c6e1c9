//! OpenTelemetry traces, opt-in: spans the host records ([`record`]: a request `serve`
//! answered, a delivery attempt it made) sent to a collector as OTLP over HTTP/protobuf
//! (`POST <endpoint>/v1/traces`, `application/x-protobuf`) by one thread of its own.
//!
//! Off unless [`install`] was called: then [`enabled`] is one atomic load and nothing else
//! runs. On, [`record`] appends the finished span to a buffer (bounded: past
//! [`MAX_QUEUED`] spans, new ones are dropped and counted, never waited for), and the
//! exporter thread sends what has gathered every [`INTERVAL`] or as soon as
//! [`BATCH`] spans wait, one request each; a failed POST drops its batch (a collector that
//! is down costs the service nothing but those spans). [`flush`] sends what is queued and
//! waits for it (`serve` calls it when it stops).
//!
//! The messages are encoded here, by hand: the dozen fields of `ExportTraceServiceRequest`
//! that a span uses, in protobuf's wire format (opentelemetry-proto's `trace.proto`). The
//! tests decode them with the `opentelemetry-proto` crate's own types. Why not the SDK:
//! docs/design/host.md, "Traces".

use rand::{Rng as _, SeedableRng as _, TryRng as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Spans that may wait for the exporter; past this, new spans are dropped.
pub const MAX_QUEUED: usize = 8192;
/// Spans sent in one request at most; this many waiting wakes the exporter at once.
pub const BATCH: usize = 512;
/// How long the exporter lets spans gather before it sends them.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// A W3C trace context: the trace, the span that is the parent of what comes next, and the
/// flags (bit 0: sampled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceContext {
    /// The trace id (never all zero).
    pub trace_id: [u8; 16],
    /// The parent span's id (never all zero).
    pub span_id: [u8; 8],
    /// The trace flags.
    pub flags: u8,
}

impl TraceContext {
    /// Reads a `traceparent` header value (`00-<32 hex>-<16 hex>-<2 hex>`; a later version's
    /// longer value is read by its first four parts, as the W3C recommendation says).
    /// `None` for anything else, an all-zero id among it.
    pub fn parse(value: &str) -> Option<TraceContext> {
        let mut parts = value.trim().split('-');
        let version = parts.next()?;
        let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
        if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
            return None;
        }
        hex_bytes::<1>(version)?;
        let ctx = TraceContext {
            trace_id: hex_bytes(trace)?,
            span_id: hex_bytes(span)?,
            flags: hex_bytes::<1>(flags)?[0],
        };
        (ctx.trace_id != [0; 16] && ctx.span_id != [0; 8]).then_some(ctx)
    }

    /// The `traceparent` header value naming this context.
    pub fn header(&self) -> String {
        let mut s = String::with_capacity(55);
        s.push_str("00-");
        push_hex(&mut s, &self.trace_id);
        s.push('-');
        push_hex(&mut s, &self.span_id);
        s.push('-');
        push_hex(&mut s, &[self.flags]);
        s
    }

    /// The context of a new span in this trace, its child.
    pub fn child(&self) -> TraceContext {
        TraceContext {
            span_id: new_span_id(),
            ..*self
        }
    }

    /// The context of a new trace's first span.
    pub fn root() -> TraceContext {
        let mut trace_id = [0u8; 16];
        while trace_id == [0; 16] {
            fill_random(&mut trace_id);
        }
        TraceContext {
            trace_id,
            span_id: new_span_id(),
            flags: 1,
        }
    }
}

fn new_span_id() -> [u8; 8] {
    let mut id = [0u8; 8];
    while id == [0; 8] {
        fill_random(&mut id);
    }
    id
}

/// Random bytes from a generator per thread, seeded from the operating system.
fn fill_random(buf: &mut [u8]) {
    thread_local! {
        static RNG: std::cell::RefCell<rand::rngs::StdRng> = std::cell::RefCell::new({
            let mut seed = [0u8; 32];
            let _ = rand::rngs::SysRng.try_fill_bytes(&mut seed);
            rand::rngs::StdRng::from_seed(seed)
        });
    }
    RNG.with(|rng| rng.borrow_mut().fill_bytes(buf));
}

fn hex_bytes<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = text.as_bytes();
    if bytes.len() != 2 * N {
        return None;
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in bytes.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

fn push_hex(s: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
}

/// What kind of span: one the service answers, or one it makes of a receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A request the service answered (OTLP `SPAN_KIND_SERVER`).
    Server,
    /// A request the service made (OTLP `SPAN_KIND_CLIENT`).
    Client,
}

/// An attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Text.
    Str(String),
    /// A whole number.
    Int(i64),
}

/// A finished span.
#[derive(Clone, Debug)]
pub struct Span {
    /// Its trace and its own id.
    pub context: TraceContext,
    /// Its parent's id, if it has one.
    pub parent: Option<[u8; 8]>,
    /// Its name, e.g. `POST /internal/v1/events`.
    pub name: String,
    /// Server or client.
    pub kind: Kind,
    /// When it began and ended, ns since the epoch.
    pub start_ns: u64,
    /// When it ended, ns since the epoch.
    pub end_ns: u64,
    /// Its attributes, in order.
    pub attributes: Vec<(&'static str, Value)>,
    /// Whether it failed (OTLP status `ERROR`; otherwise `UNSET`).
    pub error: bool,
}

/// A span begun: its context, its parent, when it began.
#[derive(Clone, Debug)]
pub struct Begun {
    /// Its trace and its own id.
    pub context: TraceContext,
    /// Its parent's id, if it has one.
    pub parent: Option<[u8; 8]>,
    /// When it began, ns since the epoch.
    pub start_ns: u64,
}

impl Begun {
    /// A span beginning now: a child of `parent` (a request's `traceparent`), or the root
    /// of a new trace.
    pub fn child_of(parent: Option<TraceContext>) -> Begun {
        let (context, parent) = match parent {
            Some(p) => (p.child(), Some(p.span_id)),
            None => (TraceContext::root(), None),
        };
        Begun {
            context,
            parent,
            start_ns: now_ns(),
        }
    }

    /// Ends it now and queues it for export.
    pub fn end(
        self,
        name: String,
        kind: Kind,
        attributes: Vec<(&'static str, Value)>,
        error: bool,
    ) {
        record(Span {
            context: self.context,
            parent: self.parent,
            name,
            kind,
            start_ns: self.start_ns,
            end_ns: now_ns(),
            attributes,
            error,
        });
    }
}

/// Begins the span of a request the service answers: a child of the request's valid
/// `traceparent`, or a new trace; the request's `traceparent` becomes the span's own, so
/// that what the component keeps of it (a publish: with its event) names this span.
pub fn begin_request(headers: &mut http::HeaderMap) -> Begun {
    let parent = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(TraceContext::parse);
    let begun = Begun::child_of(parent);
    if let Ok(value) = http::HeaderValue::from_str(&begun.context.header()) {
        headers.insert("traceparent", value);
    }
    begun
}

/// The low-cardinality name of a request path: a segment that is an id (`sub_...`,
/// `dlv_...`, a number) becomes `{id}`.
pub fn route(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        let id = segment.len() >= 12 && segment.contains('_')
            || !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit());
        out.push_str(if id { "{id}" } else { segment });
    }
    out
}

/// What an attempt's [`HOST_HEADER`](edgehook_component::model::trace::HOST_HEADER) says.
#[derive(Clone, Debug)]
pub struct AttemptIds {
    /// The subscription.
    pub subscription_id: String,
    /// The event.
    pub event_id: String,
    /// The attempt's number (1: the first).
    pub attempt: i64,
    /// The span of the attempt, begun: a child of the publish's.
    pub span: Begun,
}

/// Takes the component's [`HOST_HEADER`](edgehook_component::model::trace::HOST_HEADER)
/// off an attempt's request and begins its span (a child of the trace context it names, the
/// publish's); a `traceparent` the request carries for the receiver (its subscription asked
/// for it) is set to the attempt's span. `None` without the header (or with one that does
/// not parse).
pub fn begin_attempt(headers: &mut http::HeaderMap) -> Option<AttemptIds> {
    use edgehook_component::model::trace::HOST_HEADER;
    let value = headers.remove(HOST_HEADER)?;
    let mut parts = value.to_str().ok()?.split(' ');
    let (subscription_id, event_id) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let attempt = parts.next()?.parse().ok()?;
    let span = Begun::child_of(parts.next().and_then(TraceContext::parse));
    if headers.contains_key("traceparent")
        && let Ok(value) = http::HeaderValue::from_str(&span.context.header())
    {
        headers.insert("traceparent", value);
    }
    Some(AttemptIds {
        subscription_id,
        event_id,
        attempt,
        span,
    })
}

/// Wall time, ns since the epoch.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The exporter, once [`install`]ed.
struct Exporter {
    queue: Mutex<Queue>,
    /// Signalled when spans are queued past a batch or a flush is asked for.
    wake: Condvar,
    /// Signalled when a round of sending ends.
    sent: Condvar,
}

#[derive(Default)]
struct Queue {
    spans: Vec<Span>,
    /// Rounds asked for by [`flush`], and rounds finished.
    asked: u64,
    done: u64,
}

static ON: AtomicBool = AtomicBool::new(false);
static DROPPED: AtomicU64 = AtomicU64::new(0);

fn exporter() -> &'static OnceLock<Arc<Exporter>> {
    static EXPORTER: OnceLock<Arc<Exporter>> = OnceLock::new();
    &EXPORTER
}

/// Whether spans are recorded (an exporter is installed).
#[inline]
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Spans dropped because the queue was full.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Starts exporting to `endpoint` (`http://host:port`, the collector's OTLP/HTTP base; a
/// path ending in `/v1/traces` is taken as it is), naming the service `service`. Once per
/// process; a second call fails.
pub fn install(endpoint: &str, service: &str) -> Result<(), String> {
    let url = traces_url(endpoint)?;
    let exp = Arc::new(Exporter {
        queue: Mutex::new(Queue::default()),
        wake: Condvar::new(),
        sent: Condvar::new(),
    });
    exporter()
        .set(exp.clone())
        .map_err(|_| "the trace exporter is already installed".to_owned())?;
    let resource = wire::resource(service);
    std::thread::Builder::new()
        .name("edgehook-otlp".into())
        .spawn(move || run(&exp, &url, &resource))
        .map_err(|e| format!("could not start the trace exporter: {e}"))?;
    ON.store(true, Ordering::Relaxed);
    Ok(())
}

/// The URL spans are POSTed to.
fn traces_url(endpoint: &str) -> Result<http::Uri, String> {
    let base = endpoint.trim_end_matches('/');
    let full = match base.ends_with("/v1/traces") {
        true => base.to_owned(),
        false => format!("{base}/v1/traces"),
    };
    let uri: http::Uri = full
        .parse()
        .map_err(|e| format!("OTLP endpoint {endpoint:?}: {e}"))?;
    match uri.scheme_str() {
        Some("http") if uri.host().is_some() => Ok(uri),
        _ => Err(format!(
            "OTLP endpoint {endpoint:?}: expected http://HOST:PORT (a local collector or agent)"
        )),
    }
}

/// Queues a finished span for export (nothing if no exporter is installed).
pub fn record(span: Span) {
    let Some(exp) = exporter().get() else { return };
    let mut q = exp.queue.lock().unwrap_or_else(|p| p.into_inner());
    if q.spans.len() >= MAX_QUEUED {
        DROPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    q.spans.push(span);
    if q.spans.len() == BATCH {
        exp.wake.notify_one();
    }
}

/// Sends every span queued so far and waits until that is done (or failed), at most the
/// time one export may take and a little more.
pub fn flush() {
    let Some(exp) = exporter().get() else { return };
    let mut q = exp.queue.lock().unwrap_or_else(|p| p.into_inner());
    q.asked += 1;
    let target = q.asked;
    exp.wake.notify_one();
    let until = std::time::Instant::now() + EXPORT_TIMEOUT + INTERVAL;
    while q.done < target {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        q = exp
            .sent
            .wait_timeout(q, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

/// The exporter thread: gathers, encodes, POSTs, forever.
fn run(exp: &Exporter, url: &http::Uri, resource: &[u8]) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        ON.store(false, Ordering::Relaxed);
        return;
    };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    loop {
        let (spans, asked) = {
            let mut q = exp.queue.lock().unwrap_or_else(|p| p.into_inner());
            if q.spans.len() < BATCH && q.asked == q.done {
                q = exp
                    .wake
                    .wait_timeout(q, INTERVAL)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            (std::mem::take(&mut q.spans), q.asked)
        };
        for batch in spans.chunks(BATCH) {
            let body = wire::request(resource, batch);
            let post = async {
                let req = http::Request::post(url.clone())
                    .header("content-type", "application/x-protobuf")
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                    .ok()?;
                let resp = client.request(req).await.ok()?;
                http_body_util::BodyExt::collect(resp.into_body())
                    .await
                    .ok()
            };
            let _ = rt.block_on(async { tokio::time::timeout(EXPORT_TIMEOUT, post).await });
        }
        let mut q = exp.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.done = asked;
        exp.sent.notify_all();
    }
}

/// Protobuf's wire format for the messages of `opentelemetry/proto/collector/trace/v1`.
mod wire {
    use super::{Kind, Span, Value};

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn tag(out: &mut Vec<u8>, field: u64, wire_type: u64) {
        varint(out, field << 3 | wire_type);
    }

    fn bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
        tag(out, field, 2);
        varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }

    fn message(out: &mut Vec<u8>, field: u64, f: impl FnOnce(&mut Vec<u8>)) {
        let mut inner = Vec::new();
        f(&mut inner);
        bytes(out, field, &inner);
    }

    fn fixed64(out: &mut Vec<u8>, field: u64, v: u64) {
        tag(out, field, 1);
        out.extend_from_slice(&v.to_le_bytes());
    }

    /// `KeyValue { key = 1; AnyValue value = 2 }`, `AnyValue { string = 1; int64 = 3 }`.
    fn attribute(out: &mut Vec<u8>, field: u64, key: &str, value: &Value) {
        message(out, field, |kv| {
            bytes(kv, 1, key.as_bytes());
            message(kv, 2, |any| match value {
                Value::Str(s) => bytes(any, 1, s.as_bytes()),
                Value::Int(i) => {
                    tag(any, 3, 0);
                    varint(any, *i as u64);
                }
            });
        });
    }

    /// `Resource { repeated KeyValue attributes = 1 }` with `service.name`.
    pub(super) fn resource(service: &str) -> Vec<u8> {
        let mut out = Vec::new();
        attribute(&mut out, 1, "service.name", &Value::Str(service.to_owned()));
        attribute(
            &mut out,
            1,
            "service.version",
            &Value::Str(env!("CARGO_PKG_VERSION").to_owned()),
        );
        out
    }

    /// `Span`: trace_id 1, span_id 2, parent_span_id 4, name 5, kind 6, start 7, end 8,
    /// attributes 9, status 15 (`Status { code = 3 }`).
    fn span(out: &mut Vec<u8>, s: &Span) {
        message(out, 2, |m| {
            bytes(m, 1, &s.context.trace_id);
            bytes(m, 2, &s.context.span_id);
            if let Some(parent) = &s.parent {
                bytes(m, 4, parent);
            }
            bytes(m, 5, s.name.as_bytes());
            tag(m, 6, 0);
            varint(
                m,
                match s.kind {
                    Kind::Server => 2,
                    Kind::Client => 3,
                },
            );
            fixed64(m, 7, s.start_ns);
            fixed64(m, 8, s.end_ns);
            for (k, v) in &s.attributes {
                attribute(m, 9, k, v);
            }
            if s.error {
                message(m, 15, |st| {
                    tag(st, 3, 0);
                    varint(st, 2);
                });
            }
        });
    }

    /// `ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1 }`;
    /// `ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2 }`;
    /// `ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2 }`.
    pub(super) fn request(resource: &[u8], spans: &[Span]) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + 256 * spans.len());
        message(&mut out, 1, |rs| {
            bytes(rs, 1, resource);
            message(rs, 2, |ss| {
                message(ss, 1, |scope| bytes(scope, 1, b"edgehook"));
                for s in spans {
                    span(ss, s);
                }
            });
        });
        out
    }
}

/// The encoded export request of `spans` (for tests of the format).
pub fn encode(service: &str, spans: &[Span]) -> Vec<u8> {
    wire::request(&wire::resource(service), spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_and_written_back_the_same() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ctx = TraceContext::parse(text).expect("valid");
        assert_eq!(ctx.flags, 1);
        assert_eq!(ctx.header(), text);
        let child = ctx.child();
        assert_eq!(child.trace_id, ctx.trace_id);
        assert_ne!(child.span_id, ctx.span_id);
        // A later version's longer value is read by its first four parts.
        assert!(TraceContext::parse(&format!("01{}-extra", &text[2..])).is_some());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_request_span_is_the_child_of_its_traceparent_and_takes_its_place() {
        let mut headers = http::HeaderMap::new();
        let given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        headers.insert("traceparent", http::HeaderValue::from_static(given));
        let begun = begin_request(&mut headers);
        let parent = TraceContext::parse(given).expect("valid");
        assert_eq!(begun.context.trace_id, parent.trace_id);
        assert_eq!(begun.parent, Some(parent.span_id));
        assert_eq!(headers["traceparent"], begun.context.header().as_str());
        // Without one (or with a broken one): a new trace.
        headers.insert("traceparent", http::HeaderValue::from_static("00-junk"));
        let root = begin_request(&mut headers);
        assert_eq!(root.parent, None);
        assert_ne!(root.context.trace_id, parent.trace_id);
    }

    #[test]
    fn an_attempts_header_is_taken_off_and_names_its_ids_and_parent() {
        let publish = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut headers = http::HeaderMap::new();
        let value = format!("sub_1 evt_2 3 {publish}");
        headers.insert(
            "x-edgehook-trace",
            http::HeaderValue::from_str(&value).expect("value"),
        );
        headers.insert("traceparent", http::HeaderValue::from_static(publish));
        let ids = begin_attempt(&mut headers).expect("named");
        assert!(!headers.contains_key("x-edgehook-trace"));
        assert_eq!(
            (ids.subscription_id.as_str(), ids.event_id.as_str()),
            ("sub_1", "evt_2")
        );
        assert_eq!(ids.attempt, 3);
        assert_eq!(
            ids.span.parent,
            Some([0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7])
        );
        // The receiver's traceparent names the attempt's span.
        assert_eq!(headers["traceparent"], ids.span.context.header().as_str());
        assert!(begin_attempt(&mut http::HeaderMap::new()).is_none());
    }

    #[test]
    fn routes_name_ids_as_such() {
        assert_eq!(
            route("/v1/webhooks/sub_0123456789abcdef/deliveries"),
            "/v1/webhooks/{id}/deliveries"
        );
        assert_eq!(route("/internal/v1/events"), "/internal/v1/events");
        assert_eq!(route("/v1/things/42"), "/v1/things/{id}");
    }

    #[test]
    fn the_endpoint_is_the_collectors_base_or_its_traces_path() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318")
                .expect("base")
                .to_string(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://otel:4318/v1/traces/")
                .expect("full")
                .to_string(),
            "http://otel:4318/v1/traces"
        );
        assert!(traces_url("otel:4318").is_err());
        assert!(traces_url("https://otel:4318").is_err());
    }
}
