//! `serve`'s own tests: idle and slow connections, every instance taken, a host error's
//! envelope, the timer, shutdown while an attempt hangs, a long response (more than one
//! write), and the store settled before an answer leaves.

use super::*;
use edgehook_runtime::outbound::{Outbound, OutboundFuture};
use edgehook_runtime::store::{KvBackend, KvStore, MemoryStore, StoreError, StoreResult};
use edgehook_testkit::http::request;
use edgehook_testkit::{DEADLINE, POLL};
use std::collections::BTreeMap;
use wasmtime_wasi_http::{RequestOptions, WasiBody};

/// A request to the component with a bearer token and a JSON body.
fn req(method: &str, path: &str, bearer: &str, body: &str) -> http::Request<Full<Bytes>> {
    request(method, &format!("http://serve{path}"), bearer, body)
}

/// A network where every request hangs (an endpoint that never answers).
struct Hang(Arc<Notify>);

impl Outbound for Hang {
    fn send(&self, req: http::Request<WasiBody>, _: Option<RequestOptions>) -> OutboundFuture {
        self.0.notify_one();
        // The request is kept (its body too): dropping it would end the guest's body
        // write at once, and the attempt with it, instead of hanging.
        Box::pin(async move {
            let _req = req;
            std::future::pending().await
        })
    }
}

/// A store with one subscription to `load.created` at an endpoint that never answers
/// (attempts hang for two minutes); `sent` is notified at each attempt. Admin token `t`.
async fn hanging_subscription(sent: Arc<Notify>) -> HostEnv {
    let kv = KvStore::Local(Arc::new(MemoryStore::new()));
    subscription_on(kv, Arc::new(Hang(sent))).await
}

/// [`hanging_subscription`] on `kv`, its attempts sent through `outbound`.
async fn subscription_on(kv: KvStore, outbound: Arc<dyn Outbound>) -> HostEnv {
    let config: BTreeMap<String, String> = [
        ("admin_token", "t"),
        ("allow_private_targets", "true"),
        ("allow_http", "true"),
        ("attempt_timeout_ms", "120000"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let env = HostEnv {
        kv,
        config: Arc::new(config),
        clock: None,
        outbound,
        seed: None,
        guest_log: None,
        metrics: None,
    };
    let rt = Runtime::embedded().expect("runtime");
    let key = rt
        .handle(&env, req("POST", "/internal/v1/clients/acme/keys", "t", ""))
        .await
        .expect("key")
        .data_text("apiKey")
        .expect("apiKey");
    let create = r#"{"url":"http://127.0.0.1:9/x","eventTypes":["load.created"]}"#;
    let created = rt
        .handle(&env, req("POST", "/v1/webhooks", &key, create))
        .await
        .expect("create");
    assert_eq!(created.status, 201);
    env
}

/// Serves `server` on a loopback port; returns its address and the shutdown switch.
async fn serving(server: Server) -> (SocketAddr, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stop_rx) = watch::channel(false);
    tokio::spawn(server.run(listener, stop_rx));
    (addr, stop)
}

/// Writes `request` on a new connection and reads what comes back until the server
/// closes it (or 10 s pass: a failure, not a wait the test relies on).
async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    conn.write_all(request).await.expect("write");
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut got)).await;
    assert!(
        read.is_ok(),
        "the server kept the connection open: {}",
        String::from_utf8_lossy(&got)
    );
    String::from_utf8_lossy(&got).into_owned()
}

/// A server over `env` whose limits on slow clients are 300 ms each.
fn impatient(env: HostEnv) -> Server {
    let short = Duration::from_millis(300);
    Server::new(env).expect("server").with_timeouts(Timeouts {
        header: short,
        body: short,
        instance: short,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_no_head_or_sits_idle_is_closed() {
    let env = hanging_subscription(Arc::new(Notify::new())).await;
    let (addr, _stop) = serving(impatient(env)).await;
    // Nothing at all, then half a head (slowloris).
    let got = exchange(addr, b"").await;
    assert!(!got.contains("200 OK"), "{got}");
    let got = exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await;
    assert!(!got.contains("200 OK"), "{got}");
    // A whole request on a keep-alive connection, then nothing: answered, then closed.
    let got = exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_arrive_in_time_is_a_408_with_a_request_id() {
    let env = hanging_subscription(Arc::new(Notify::new())).await;
    let (addr, _stop) = serving(impatient(env)).await;
    let got = exchange(
        addr,
        b"POST /v1/webhooks HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"url\"",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains(r#""code":"request_timeout""#), "{got}");
    assert!(got.contains(r#""requestId":"req_"#), "{got}");
    assert!(got.to_lowercase().contains("x-request-id: req_"), "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_finds_every_instance_taken_gets_a_503_with_a_request_id() {
    let sent = Arc::new(Notify::new());
    let env = hanging_subscription(sent.clone()).await;
    let (addr, _stop) = serving(impatient(env).with_instances(1)).await;
    // The event's attempt 1 hangs, and keeps the only instance after the 202.
    let event = b"POST /internal/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n\
        Content-Type: application/json\r\nX-Service-Event: load.created\r\n\
        Content-Length: 10\r\nConnection: close\r\n\r\n{\"id\":\"L\"}";
    let got = exchange(addr, event).await;
    assert!(got.starts_with("HTTP/1.1 202"), "{got}");
    tokio::time::timeout(Duration::from_secs(10), sent.notified())
        .await
        .expect("attempt 1 is under way");
    let got = exchange(
        addr,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(got.contains(r#""code":"overloaded""#), "{got}");
    assert!(got.contains(r#""requestId":"req_"#), "{got}");
    assert!(got.to_lowercase().contains("retry-after: 1"), "{got}");
}

#[test]
fn a_host_error_is_the_components_envelope_with_a_fresh_request_id() {
    let a = host_error(ApiError::internal("cause, for the log only"));
    let b = host_error(ApiError::internal("cause, for the log only"));
    assert_eq!(a.status, 500);
    let id = a.header("x-request-id").expect("x-request-id").to_owned();
    assert!(
        edgehook_component::model::ids::IdKind::Request.matches(&id),
        "{id}"
    );
    assert_ne!(b.header("x-request-id"), Some(id.as_str()));
    let body: serde_json::Value = serde_json::from_slice(&a.body).expect("json");
    assert_eq!(body["requestId"], id.as_str());
    assert_eq!(body["error"]["code"], "internal");
    assert!(!String::from_utf8_lossy(&a.body).contains("cause"));
}

#[test]
fn the_timer_ticks_when_due_and_at_least_every_idle_period() {
    let idle = Duration::from_secs(5);
    // Nothing due here: another instance on the same store may still queue work.
    assert_eq!(tick_wait(None, 1_000, idle), idle);
    assert_eq!(tick_wait(Some(1_000 + 60_000), 1_000, idle), idle);
    assert_eq!(
        tick_wait(Some(1_250), 1_000, idle),
        Duration::from_millis(250)
    );
    assert_eq!(tick_wait(Some(500), 1_000, idle), Duration::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_a_tick_beyond_the_grace_period() {
    let sent = Arc::new(Notify::new());
    let env = hanging_subscription(sent.clone()).await;
    let rt = Runtime::embedded().expect("runtime");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_response_arrives_whole_and_framed_by_its_length() {
    let env = hanging_subscription(Arc::new(Notify::new())).await;
    let rt = Runtime::embedded().expect("runtime");
    let key = rt
        .handle(
            &env,
            req("POST", "/internal/v1/clients/lister/keys", "t", ""),
        )
        .await
        .expect("key")
        .data_text("apiKey")
        .expect("apiKey");
    for i in 0..30 {
        let create =
            format!(r#"{{"url":"http://127.0.0.1:9/l{i}","eventTypes":["load.created"]}}"#);
        let created = rt
            .handle(&env, req("POST", "/v1/webhooks", &key, &create))
            .await;
        assert_eq!(created.expect("create").status, 201);
    }
    let (addr, _stop) = serving(Server::new(env).expect("server")).await;
    let list = format!(
        "GET /v1/webhooks?limit=50 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
         Connection: close\r\n\r\n"
    );
    let got = exchange(addr, list.as_bytes()).await;
    let (head, body) = got.split_once("\r\n\r\n").expect("a head and a body");
    let head = head.to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    // Longer than one 4096-byte write, and framed by its length, not in chunks.
    assert!(body.len() > 4096, "{}", body.len());
    assert!(
        head.contains(&format!("content-length: {}\r\n", body.len())),
        "{head}"
    );
    assert!(!head.contains("transfer-encoding"), "{head}");
    let json: serde_json::Value = serde_json::from_str(body).expect("the whole body is JSON");
    assert_eq!(json["data"].as_array().map(Vec::len), Some(30));
}

/// The in-memory store, counting its settles ([`KvBackend::settle`]) and failing them once
/// told to (as a disk whose fsync fails).
#[derive(Default)]
struct Settling {
    inner: MemoryStore,
    settles: std::sync::atomic::AtomicU64,
    fail: std::sync::atomic::AtomicBool,
}

impl KvBackend for Settling {
    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        self.inner.get(key)
    }
    fn set(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.inner.set(key, value)
    }
    fn delete(&self, key: &str) -> StoreResult<()> {
        self.inner.delete(key)
    }
    fn list_keys(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        self.inner.list_keys(cursor, limit)
    }
    fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        self.inner.increment(key, delta)
    }
    fn compare_and_swap(&self, key: &str, old: Option<&[u8]>, new: &[u8]) -> StoreResult<bool> {
        self.inner.compare_and_swap(key, old, new)
    }
    fn settles(&self) -> bool {
        true
    }
    fn settle(&self) -> StoreResult<()> {
        use std::sync::atomic::Ordering::SeqCst;
        self.settles.fetch_add(1, SeqCst);
        match self.fail.load(SeqCst) {
            true => Err(StoreError::Backend("store: fsync: I/O error".to_owned())),
            false => Ok(()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_leaves_once_the_store_settled_and_a_failed_settle_is_a_503() {
    use std::sync::atomic::Ordering::SeqCst;
    let store = Arc::new(Settling::default());
    let config = [("admin_token", "t")].map(|(k, v)| (k.to_owned(), v.to_owned()));
    let env = HostEnv {
        kv: KvStore::Local(store.clone()),
        config: Arc::new(config.into_iter().collect()),
        clock: None,
        outbound: Arc::new(Hang(Arc::new(Notify::new()))),
        seed: None,
        guest_log: None,
        metrics: None,
    };
    let (addr, _stop) = serving(Server::new(env).expect("server")).await;
    // The timer's first tick, at start, settles what it wrote.
    let ticked = edgehook_testkit::poll(DEADLINE, POLL, || store.settles.load(SeqCst) >= 1);
    assert!(ticked.is_ok(), "the tick settles");
    let key = b"POST /internal/v1/clients/acme/keys HTTP/1.1\r\nHost: x\r\n\
        Authorization: Bearer t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let before = store.settles.load(SeqCst);
    let got = exchange(addr, key).await;
    assert!(got.starts_with("HTTP/1.1 201"), "{got}");
    assert!(
        store.settles.load(SeqCst) > before,
        "settled before the answer"
    );
    store.fail.store(true, SeqCst);
    let got = exchange(addr, key).await;
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(got.contains(r#""code":"store_unavailable""#), "{got}");
    assert!(got.contains("may or may not"), "{got}");
    assert!(got.contains(r#""requestId":"req_"#), "{got}");
    assert!(got.to_lowercase().contains("retry-after: 1"), "{got}");
}

/// A network that refuses every request at once, counting them.
#[derive(Default)]
struct Refuse(std::sync::atomic::AtomicU64);

impl Outbound for Refuse {
    fn send(&self, _: http::Request<WasiBody>, _: Option<RequestOptions>) -> OutboundFuture {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_fsync_always_an_attempt_leaves_only_once_the_store_settled() {
    use std::sync::atomic::Ordering::SeqCst;
    let store = Arc::new(Settling::default());
    let net = Arc::new(Refuse::default());
    let kv = KvStore::Local(store.clone());
    let outbound = edgehook_runtime::outbound::settle_first(kv.clone(), net.clone());
    let env = subscription_on(kv, outbound).await;
    let rt = Runtime::embedded().expect("runtime");
    let publish = || {
        let mut r = req("POST", "/internal/v1/events", "t", r#"{"id":"L"}"#);
        let event = http::HeaderValue::from_static("load.created");
        r.headers_mut().insert("x-service-event", event);
        r
    };
    store.fail.store(true, SeqCst);
    let accepted = rt.handle(&env, publish()).await.expect("publish");
    assert_eq!(accepted.status, 202);
    assert_eq!(net.0.load(SeqCst), 0, "not sent: the store did not settle");
    assert!(store.settles.load(SeqCst) >= 1);
    store.fail.store(false, SeqCst);
    let accepted = rt.handle(&env, publish()).await.expect("publish");
    assert_eq!(accepted.status, 202);
    assert_eq!(net.0.load(SeqCst), 1, "sent once settled");
}
