//! The host's Prometheus metrics: one registry per process, fed from three places.
//!
//! - **The component's metrics events**: after every run of attempts (a tick, or the attempts
//!   a request made due) the component writes one JSON line to stderr, `{"type":"tick"|
//!   "attempts", ...}` (`TickReport::emit` in the core). A runtime whose [`HostEnv`] carries
//!   [`Metrics`] takes those lines off the guest's stderr ([`Metrics::observe_event`]) before
//!   the log sees them: deliveries by final outcome, event-to-first-attempt latency, and the
//!   tick's gauges (due backlog and its oldest entry, replay jobs); and one
//!   `{"type":"secret_unreadable"}` line per attempt not sent because its signing secret
//!   opens under neither sealing key. What only the component
//!   knows reaches the host this way, with no interface added to the WIT world.
//! - **The host's own edges**: every outgoing attempt ([`crate::net::NetOutbound`]: status
//!   class, duration), every store operation ([`KvStore::metered`]: latency, errors), every
//!   API request (`edgehook serve`: route template, method, status, duration).
//! - **Scrape-time reads**: `edgehook serve` counts disabled subscriptions through the
//!   operator API when scraped ([`Metrics::set_disabled`]).
//!
//! Handles to every labelled series the hot paths touch are made once, here: recording an
//! attempt or a store operation is an atomic add, no map lookup.
//!
//! [`HostEnv`]: crate::HostEnv

use crate::store::{KvBackend, KvFuture, KvStore, RemoteKv, StoreResult};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The `Content-Type` of [`Metrics::encode`]'s text (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// One label, both parts fixed.
type Label = [(&'static str, &'static str); 1];
/// A family of histograms that all share one set of buckets.
type Histograms = Family<Label, Histogram, fn() -> Histogram>;

/// Every route of the APIs as the OpenAPI document names it (`{id}` written `:id`, which
/// every exposition parser takes in a label value), plus the host's own. A request is
/// counted under its route's template (ids never become label values); any other path is
/// `other`.
pub const ROUTES: &[&str] = &[
    "/healthz",
    "/readyz",
    "/v1/webhooks",
    "/v1/webhooks/:id",
    "/v1/webhooks/:id/enable",
    "/v1/webhooks/:id/test",
    "/v1/webhooks/:id/rotate-secret",
    "/v1/webhooks/:id/deliveries",
    "/v1/webhooks/:id/deliveries/:deliveryId/replay",
    "/v1/webhooks/:id/replays",
    "/v1/replays/:id",
    "/v1/replays/:id/cancel",
    "/v1/portal/sessions",
    "/v1/portal/sessions/current",
    "/internal/v1/settings",
    "/internal/v1/clients/:clientId/keys",
    "/internal/v1/clients/:clientId/keys/:keyId",
    "/internal/v1/clients/:clientId/portal-links",
    "/internal/v1/ingest-keys",
    "/internal/v1/ingest-keys/:keyId",
    "/internal/v1/events",
    "/internal/v1/tick",
    "/internal/v1/subscriptions",
    "/internal/v1/subscriptions/:id",
    "/internal/v1/subscriptions/:id/disable",
    "/internal/v1/subscriptions/:id/enable",
    "/internal/v1/subscriptions/:id/test",
    "/internal/v1/subscriptions/:id/deliveries",
    "/internal/v1/deliveries",
    "/internal/v1/deliveries/:id",
    "/internal/v1/deliveries/:id/replay",
    "/internal/v1/replays",
    "/internal/v1/replays/:id",
    "/internal/v1/replays/:id/cancel",
    "/internal/v1/secrets/reseal",
    "/v1/notification-endpoint",
    "/internal/v1/subscriptions/:id/rotate-secret",
    "/v1/events",
    "/v1/events/:eventId",
    "/internal/v1/events/:eventId",
];

/// The template of [`ROUTES`] that `path` matches (a `:name` segment matches any non-empty
/// segment), or `"other"`.
pub fn route_of(path: &str) -> &'static str {
    ROUTES
        .iter()
        .find(|route| matches_route(route, path))
        .copied()
        .unwrap_or("other")
}

/// Whether `path` has `route`'s segments (a `:name` segment matches any non-empty one),
/// walked side by side without collecting either (this runs on every request).
fn matches_route(route: &str, path: &str) -> bool {
    let (mut pattern, mut segments) = (route.split('/'), path.split('/'));
    loop {
        match (pattern.next(), segments.next()) {
            (None, None) => return true,
            (Some(p), Some(s)) if p == s || (p.starts_with(':') && !s.is_empty()) => {}
            _ => return false,
        }
    }
}

/// The status classes of an attempt: the endpoint's answer, or why there was none.
pub const ATTEMPT_CLASSES: [&str; 7] = ["2xx", "3xx", "4xx", "5xx", "timeout", "error", "refused"];
/// The store operations, as [`KvBackend`] names them.
pub const STORE_OPS: [&str; 8] = [
    "get",
    "get_many",
    "set",
    "delete",
    "list_keys",
    "increment",
    "compare_and_swap",
    "set_many",
];

/// The component's metrics event of an attempt whose signing secret did not open.
const UNOPENED_EVENT: &str = "{\"type\":\"secret_unreadable\"}";

/// The process's metrics (see the module doc). Shared by every call: `Arc<Metrics>`.
pub struct Metrics {
    registry: Registry,
    deliveries: [Counter; 3],
    attempts: [Counter; 7],
    attempt_seconds: Histogram,
    first_attempt_seconds: Histogram,
    backlog: Gauge,
    oldest_due_ms: AtomicU64,
    oldest_due_age: Gauge<f64, AtomicU64>,
    replays: Gauge,
    disabled: Gauge,
    ticks: Counter,
    last_tick: Gauge<f64, AtomicU64>,
    requests: Family<Vec<(&'static str, String)>, Counter>,
    request_seconds: Histograms,
    store_seconds: Vec<Histogram>,
    store_errors: Vec<Counter>,
    events_unread: Counter,
    secrets_unreadable: Counter,
}

/// Latency buckets for requests, attempts and store operations (seconds).
const LATENCY: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Buckets for event-to-first-attempt latency (seconds): from at once to ten minutes late.
const LAG: [f64; 14] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 600.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY)
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric registered, at zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("edgehook");
        let deliveries: Family<Label, Counter> = Family::default();
        registry.register(
            "deliveries",
            "Deliveries that ended, by final outcome: succeeded (a 2xx), failed (attempts exhausted, or 410 Gone), cancelled (subscription disabled or deleted)",
            deliveries.clone(),
        );
        let attempts: Family<Label, Counter> = Family::default();
        registry.register(
            "delivery_attempts",
            "Delivery attempts sent by this process, by status class (2xx..5xx, or timeout, error, refused when there was no answer)",
            attempts.clone(),
        );
        let attempt_seconds = latency_histogram();
        registry.register_with_unit(
            "delivery_attempt_duration",
            "Time from sending an attempt to its answer's status line (or its failure)",
            Unit::Seconds,
            attempt_seconds.clone(),
        );
        let first_attempt_seconds = Histogram::new(LAG);
        registry.register_with_unit(
            "event_to_first_attempt",
            "Time from an event's acceptance to the start of its deliveries' first attempts",
            Unit::Seconds,
            first_attempt_seconds.clone(),
        );
        let backlog = Gauge::default();
        registry.register(
            "due_backlog",
            "Due queue entries the last tick left unread (attempts due now and not yet run)",
            backlog.clone(),
        );
        let oldest_due_age = Gauge::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "due_oldest_age",
            "Age of the oldest due queue entry the last tick left unread (0 when none)",
            Unit::Seconds,
            oldest_due_age.clone(),
        );
        let replays = Gauge::default();
        registry.register(
            "replay_jobs_running",
            "Replay jobs in progress, as of the last tick",
            replays.clone(),
        );
        let disabled = Gauge::default();
        registry.register(
            "disabled_subscriptions",
            "Disabled subscriptions, counted at scrape time (-1 when they could not be counted)",
            disabled.clone(),
        );
        let ticks = Counter::default();
        registry.register("ticks", "Ticks run (scheduler.tick calls)", ticks.clone());
        let last_tick = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "last_tick_timestamp_seconds",
            "When the last tick ended (Unix time): a timer that stopped shows as a growing age",
            last_tick.clone(),
        );
        let requests: Family<Vec<(&'static str, String)>, Counter> = Family::default();
        registry.register(
            "http_requests",
            "API requests answered, by route template, method and status",
            requests.clone(),
        );
        let request_seconds: Histograms = Family::new_with_constructor(latency_histogram);
        registry.register_with_unit(
            "http_request_duration",
            "Time to answer an API request, by route template",
            Unit::Seconds,
            request_seconds.clone(),
        );
        let store_family: Histograms = Family::new_with_constructor(latency_histogram);
        registry.register_with_unit(
            "store_operation_duration",
            "Key-value store operations and their latency, by operation",
            Unit::Seconds,
            store_family.clone(),
        );
        let error_family: Family<Label, Counter> = Family::default();
        registry.register(
            "store_errors",
            "Key-value store operations that failed, by operation",
            error_family.clone(),
        );
        let events_unread = Counter::default();
        registry.register(
            "metrics_events_unreadable",
            "Metrics events from the component that could not be read (a host and component version mismatch)",
            events_unread.clone(),
        );
        let secrets_unreadable = Counter::default();
        registry.register(
            "secrets_unreadable",
            "Delivery attempts and test deliveries not sent because the subscription's signing secret opens under neither seal_key nor seal_previous_key",
            secrets_unreadable.clone(),
        );
        Metrics {
            deliveries: ["succeeded", "failed", "cancelled"]
                .map(|o| deliveries.get_or_create_owned(&[("outcome", o)])),
            attempts: ATTEMPT_CLASSES.map(|c| attempts.get_or_create_owned(&[("class", c)])),
            store_seconds: STORE_OPS
                .iter()
                .map(|op| store_family.get_or_create_owned(&[("op", *op)]))
                .collect(),
            store_errors: STORE_OPS
                .iter()
                .map(|op| error_family.get_or_create_owned(&[("op", *op)]))
                .collect(),
            registry,
            attempt_seconds,
            first_attempt_seconds,
            backlog,
            oldest_due_ms: AtomicU64::new(0),
            oldest_due_age,
            replays,
            disabled,
            ticks,
            last_tick,
            requests,
            request_seconds,
            events_unread,
            secrets_unreadable,
        }
    }

    /// The metrics in the Prometheus text format ([`CONTENT_TYPE`]), as of now.
    pub fn encode(&self) -> String {
        let oldest = self.oldest_due_ms.load(Ordering::Relaxed);
        let age = match oldest {
            0 => 0.0,
            ms => (unix_ms().saturating_sub(ms)) as f64 / 1000.0,
        };
        self.oldest_due_age.set(age);
        let mut out = String::with_capacity(16 * 1024);
        // Writing to a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        out
    }

    /// Reads one metrics event line of the component's (see the module doc). Returns false
    /// if `line` is not one (it belongs to the log).
    pub fn observe_event(&self, line: &str) -> bool {
        if line == UNOPENED_EVENT {
            self.secrets_unreadable.inc();
            return true;
        }
        let tick = line.starts_with("{\"type\":\"tick\"");
        if !tick && !line.starts_with("{\"type\":\"attempts\"") {
            return false;
        }
        let Ok(event) = serde_json::from_str::<Event>(line) else {
            self.events_unread.inc();
            return true;
        };
        self.deliveries[0].inc_by(event.succeeded);
        self.deliveries[1].inc_by(event.exhausted);
        self.deliveries[2].inc_by(event.cancelled);
        for lag in &event.first_lag_ms {
            self.first_attempt_seconds.observe(*lag as f64 / 1000.0);
        }
        if tick {
            self.ticks.inc();
            self.last_tick.set(unix_ms() as f64 / 1000.0);
            self.backlog.set(event.backlog);
            let oldest = if event.backlog > 0 {
                event.oldest_due_ms
            } else {
                0
            };
            self.oldest_due_ms.store(oldest, Ordering::Relaxed);
            self.replays.set(event.replays);
        }
        true
    }

    /// Counts one attempt sent to an endpoint: its answer's status, or the error class when
    /// there was none (`"timeout"`, `"error"`, `"refused"` by the SSRF rules).
    pub fn observe_attempt(&self, status: Result<u16, &'static str>, seconds: f64) {
        let class = match status {
            Ok(code) => match code / 100 {
                2 => 0,
                3 => 1,
                4 => 2,
                _ => 3,
            },
            Err("timeout") => 4,
            Err("refused") => 6,
            Err(_) => 5,
        };
        self.attempts[class].inc();
        self.attempt_seconds.observe(seconds);
    }

    /// Counts one API request answered.
    pub fn observe_request(&self, method: &str, path: &str, status: u16, seconds: f64) {
        let route = route_of(path);
        let method = match method {
            "GET" | "POST" | "DELETE" | "PUT" | "PATCH" | "HEAD" | "OPTIONS" => method,
            _ => "other",
        };
        self.requests
            .get_or_create(&vec![
                ("route", route.to_owned()),
                ("method", method.to_owned()),
                ("status", status.to_string()),
            ])
            .inc();
        self.request_seconds
            .get_or_create(&[("route", route)])
            .observe(seconds);
    }

    /// Sets the disabled-subscription count (`None`: it could not be counted, shown as -1).
    pub fn set_disabled(&self, count: Option<u64>) {
        self.disabled
            .set(count.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX)));
    }

    fn store_op<T>(&self, op: usize, started: Instant, result: &StoreResult<T>) {
        self.store_seconds[op].observe(started.elapsed().as_secs_f64());
        if result.is_err() {
            self.store_errors[op].inc();
        }
    }
}

/// A metrics event as the component writes it.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    succeeded: u64,
    exhausted: u64,
    cancelled: u64,
    backlog: i64,
    oldest_due_ms: u64,
    replays: i64,
    first_lag_ms: Vec<u64>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl KvStore {
    /// This store with every operation timed and counted in `metrics`.
    pub fn metered(self, metrics: Arc<Metrics>) -> KvStore {
        match self {
            KvStore::Local(inner) => KvStore::Local(Arc::new(Metered { inner, metrics })),
            KvStore::Remote(inner) => KvStore::Remote(Arc::new(Metered { inner, metrics })),
        }
    }
}

/// A store whose operations [`Metrics`] times.
struct Metered<B: ?Sized> {
    inner: Arc<B>,
    metrics: Arc<Metrics>,
}

impl<B: ?Sized> Metered<B> {
    fn time<T>(&self, op: usize, f: impl FnOnce() -> StoreResult<T>) -> StoreResult<T> {
        let started = Instant::now();
        let result = f();
        self.metrics.store_op(op, started, &result);
        result
    }
}

impl KvBackend for Metered<dyn KvBackend> {
    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        self.time(0, || self.inner.get(key))
    }
    fn get_many(&self, keys: &[String]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        self.time(1, || self.inner.get_many(keys))
    }
    fn set(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.time(2, || self.inner.set(key, value))
    }
    fn delete(&self, key: &str) -> StoreResult<()> {
        self.time(3, || self.inner.delete(key))
    }
    fn list_keys(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        self.time(4, || self.inner.list_keys(cursor, limit))
    }
    fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        self.time(5, || self.inner.increment(key, delta))
    }
    fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<bool> {
        self.time(6, || self.inner.compare_and_swap(key, expected, new))
    }
    fn set_many(&self, entries: &[(String, Vec<u8>)]) -> StoreResult<()> {
        self.time(7, || self.inner.set_many(entries))
    }
    fn counters(&self) -> Option<Arc<dyn KvBackend>> {
        let counters = Metered {
            inner: self.inner.counters()?,
            metrics: self.metrics.clone(),
        };
        Some(Arc::new(counters))
    }
    fn settles(&self) -> bool {
        self.inner.settles()
    }
    fn settle(&self) -> StoreResult<()> {
        self.inner.settle()
    }
}

impl Metered<dyn RemoteKv> {
    fn timed<'a, T: Send + 'a>(&'a self, op: usize, f: KvFuture<'a, T>) -> KvFuture<'a, T> {
        Box::pin(async move {
            let started = Instant::now();
            let result = f.await;
            self.metrics.store_op(op, started, &result);
            result
        })
    }
}

impl RemoteKv for Metered<dyn RemoteKv> {
    fn get<'a>(&'a self, key: &'a str) -> KvFuture<'a, Option<Vec<u8>>> {
        self.timed(0, self.inner.get(key))
    }
    fn get_many<'a>(&'a self, keys: &'a [String]) -> KvFuture<'a, Vec<Option<Vec<u8>>>> {
        self.timed(1, self.inner.get_many(keys))
    }
    fn set<'a>(&'a self, key: &'a str, value: &'a [u8]) -> KvFuture<'a, ()> {
        self.timed(2, self.inner.set(key, value))
    }
    fn delete<'a>(&'a self, key: &'a str) -> KvFuture<'a, ()> {
        self.timed(3, self.inner.delete(key))
    }
    fn list_keys<'a>(&'a self, cursor: Option<&'a str>, limit: usize) -> KvFuture<'a, Vec<String>> {
        self.timed(4, self.inner.list_keys(cursor, limit))
    }
    fn increment<'a>(&'a self, key: &'a str, delta: i64) -> KvFuture<'a, i64> {
        self.timed(5, self.inner.increment(key, delta))
    }
    fn compare_and_swap<'a>(
        &'a self,
        key: &'a str,
        expected: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> KvFuture<'a, bool> {
        self.timed(6, self.inner.compare_and_swap(key, expected, new))
    }
    fn set_many<'a>(&'a self, entries: &'a [(String, Vec<u8>)]) -> KvFuture<'a, ()> {
        self.timed(7, self.inner.set_many(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::{EventTap, GuestLog};

    /// Every path of the OpenAPI document is a route of its own, and an id in it is not a
    /// label value.
    #[test]
    fn every_documented_path_is_counted_under_its_template() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../../docs/openapi.json")).expect("openapi.json");
        let paths = doc["paths"].as_object().expect("paths");
        for path in paths.keys() {
            let template: String = path
                .split('/')
                .map(
                    |s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                        Some(name) => format!(":{name}"),
                        None => s.to_owned(),
                    },
                )
                .collect::<Vec<_>>()
                .join("/");
            assert_eq!(route_of(&template), template, "{path}");
        }
        assert_eq!(
            paths.len() + 1,
            ROUTES.len(),
            "ROUTES: the document's, and /readyz"
        );
        assert_eq!(
            route_of("/v1/webhooks/sub_0123456789abcdef01234567/deliveries"),
            "/v1/webhooks/:id/deliveries"
        );
        assert_eq!(route_of("/v1/webhooks//deliveries"), "other");
        assert_eq!(route_of("/v1/webhooks/"), "other");
        assert_eq!(route_of("/wp-admin"), "other");
    }

    fn counter(m: &Metrics, name: &str) -> String {
        m.encode()
            .lines()
            .filter(|l| l.starts_with(name))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_components_events_are_counted_and_taken_off_the_log() {
        let m = Arc::new(Metrics::new());
        let log = GuestLog::default();
        let mut tap = EventTap::new(m.clone(), Some(log.clone()));
        let lines = concat!(
            "{\"type\":\"attempts\",\"succeeded\":2,\"failed\":1,\"exhausted\":1,\"cancelled\":0,",
            "\"backlog\":0,\"oldestDueMs\":0,\"replays\":0,\"firstLagMs\":[3,4000]}\n",
            "{\"type\":\"subscription.disabled\",\"subscriptionId\":\"sub_1\"}\n",
            "{\"type\":\"secret_unreadable\"}\n",
            "{\"type\":\"tick\",\"succeeded\":0,\"failed\":0,\"exhausted\":0,\"cancelled\":5,",
            "\"backlog\":7,\"oldestDueMs\":1000,\"replays\":2,\"firstLagMs\":[]}\n",
            "{\"type\":\"tick\",\"broken\n",
        );
        // Written in pieces that split lines, as a guest's stderr may be.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        for chunk in lines.as_bytes().chunks(7) {
            let written =
                tokio::io::AsyncWrite::poll_write(std::pin::Pin::new(&mut tap), &mut cx, chunk);
            assert!(matches!(written, std::task::Poll::Ready(Ok(n)) if n == chunk.len()));
        }
        assert_eq!(
            log.text(),
            "{\"type\":\"subscription.disabled\",\"subscriptionId\":\"sub_1\"}\n"
        );
        let text = m.encode();
        for want in [
            "edgehook_deliveries_total{outcome=\"succeeded\"} 2",
            "edgehook_deliveries_total{outcome=\"failed\"} 1",
            "edgehook_deliveries_total{outcome=\"cancelled\"} 5",
            "edgehook_event_to_first_attempt_seconds_count 2",
            "edgehook_event_to_first_attempt_seconds_bucket{le=\"0.005\"} 1",
            "edgehook_event_to_first_attempt_seconds_bucket{le=\"5\"} 2",
            "edgehook_due_backlog 7",
            "edgehook_replay_jobs_running 2",
            "edgehook_ticks_total 1",
            "edgehook_metrics_events_unreadable_total 1",
            "edgehook_secrets_unreadable_total 1",
        ] {
            assert!(text.contains(want), "{want} in\n{text}");
        }
        // The oldest entry was due at 1970-01-01T00:00:01: its age is now.
        let age = counter(&m, "edgehook_due_oldest_age_seconds");
        let age: f64 = age.rsplit(' ').next().unwrap_or("").parse().expect("age");
        assert!(age > 1.7e9, "{age}");
    }

    #[test]
    fn attempts_store_operations_and_requests_are_counted() {
        let m = Arc::new(Metrics::new());
        m.observe_attempt(Ok(204), 0.002);
        m.observe_attempt(Ok(503), 0.002);
        m.observe_attempt(Err("timeout"), 5.0);
        m.observe_attempt(Err("refused"), 0.0);
        m.observe_request("GET", "/v1/webhooks/sub_1", 200, 0.001);
        m.observe_request("BREW", "/coffee", 418, 0.001);
        let kv = KvStore::Local(Arc::new(crate::store::MemoryStore::new())).metered(m.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(async {
            kv.set("a", b"x").await.expect("set");
            kv.get("a").await.expect("get");
            assert!(kv.increment("a", 1).await.is_err(), "not a counter");
        });
        let text = m.encode();
        for want in [
            "edgehook_delivery_attempts_total{class=\"2xx\"} 1",
            "edgehook_delivery_attempts_total{class=\"5xx\"} 1",
            "edgehook_delivery_attempts_total{class=\"timeout\"} 1",
            "edgehook_delivery_attempts_total{class=\"refused\"} 1",
            "edgehook_delivery_attempt_duration_seconds_count 4",
            "edgehook_http_requests_total{route=\"/v1/webhooks/:id\",method=\"GET\",status=\"200\"} 1",
            "edgehook_http_requests_total{route=\"other\",method=\"other\",status=\"418\"} 1",
            "edgehook_store_operation_duration_seconds_count{op=\"set\"} 1",
            "edgehook_store_operation_duration_seconds_count{op=\"get\"} 1",
            "edgehook_store_errors_total{op=\"increment\"} 1",
            "edgehook_store_errors_total{op=\"get\"} 0",
        ] {
            assert!(text.contains(want), "{want} in\n{text}");
        }
    }
}
