//! What every section sets up alike: the host environment and settings, requests as the
//! benchmarks send them, API keys and subscriptions, the embedded store, a realistic load.

use crate::measure::timed;
use anyhow::{Context as _, Result, ensure};
use bytes::Bytes;
use edgehook_runtime::embedded::{self, Durability};
use edgehook_runtime::net::NetOptions;
use edgehook_runtime::store::KvStore;
use edgehook_runtime::{HostEnv, Runtime};
use http_body_util::Full;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The host every section runs the component on: `kv`, the bench's settings (admin token
/// `bench`, limits out of the way, loopback receivers allowed), real clocks, no network.
pub fn env(kv: KvStore) -> HostEnv {
    HostEnv {
        kv,
        config: Arc::new(settings()),
        ..HostEnv::in_memory()
    }
}

/// The host `edgehook serve` runs the component on (`edgehook::metrics::served_env`: every
/// store operation and attempt counted, metrics events read off the guest's stderr), with
/// the bench's settings and real outbound HTTP to loopback receivers: for the sections
/// that measure deliveries through `serve`.
pub fn served(kv: KvStore) -> Result<HostEnv> {
    edgehook::metrics::served_env(kv, settings(), &NetOptions::open())
}

/// The bench's settings: the admin token `bench`, limits out of the way, loopback receivers
/// over plain HTTP allowed; with `EDGEHOOK_BENCH_SEAL_KEY` set, that `seal_key` (secrets
/// sealed at rest, so each attempt opens one); with traces exported (`EDGEHOOK_BENCH_OTLP`),
/// attempts named to the host (`trace_context`).
fn settings() -> BTreeMap<String, String> {
    let mut settings: BTreeMap<String, String> = [
        ("admin_token", "bench"),
        ("subscription_limit", "100000"),
        ("allow_private_targets", "true"),
        ("allow_http", "true"),
        // The limiter still counts every request (its store operation is measured); the
        // benchmarks just must not be refused.
        ("rate_limit_per_minute", "1000000"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    if let Ok(key) = std::env::var("EDGEHOOK_BENCH_SEAL_KEY") {
        settings.insert("seal_key".to_owned(), key);
    }
    if edgehook_runtime::otlp::enabled() {
        settings.insert("trace_context".to_owned(), "true".to_owned());
    }
    settings
}

/// A JSON request with a bearer token, as the benchmarks send them.
pub fn req(method: &str, path: &str, auth: &str, body: &str) -> http::Request<Full<Bytes>> {
    edgehook_testkit::http::request(method, &format!("http://bench{path}"), auth, body)
}

/// Issues an API key for `client` through the operator API.
pub async fn issue_key(rt: &Runtime, env: &HostEnv, client: &str) -> Result<String> {
    let resp = rt
        .handle(
            env,
            req(
                "POST",
                &format!("/internal/v1/clients/{client}/keys"),
                "bench",
                "",
            ),
        )
        .await?;
    ensure!(resp.status == 201, "issue key: {}", resp.status);
    Ok(resp.json()["data"]["apiKey"]
        .as_str()
        .context("apiKey")?
        .to_owned())
}

/// Creates a subscription of `key`'s to `event` at `url`; its id.
pub async fn create(
    rt: &Runtime,
    env: &HostEnv,
    key: &str,
    url: &str,
    event: &str,
) -> Result<String> {
    let body = format!(r#"{{"url":"{url}","eventTypes":["{event}"]}}"#);
    let resp = rt
        .handle(env, req("POST", "/v1/webhooks", key, &body))
        .await?;
    ensure!(resp.status == 201, "create: {}", resp.status);
    Ok(resp.json()["data"]["id"].as_str().context("id")?.to_owned())
}

/// Creates `n` subscriptions `https://{prefix}{i}.example.com/x` for `key`.
pub async fn create_many(
    rt: &Runtime,
    env: &HostEnv,
    key: &str,
    prefix: &str,
    n: usize,
    event: &str,
) -> Result<()> {
    for i in 0..n {
        create(
            rt,
            env,
            key,
            &format!("https://{prefix}{i}.example.com/x"),
            event,
        )
        .await?;
    }
    Ok(())
}

/// Times `n` calls of the request `make` builds; each must answer `want`.
pub async fn timed_request(
    rt: &Runtime,
    env: &HostEnv,
    n: usize,
    want: u16,
    make: impl Fn() -> http::Request<Full<Bytes>>,
) -> Result<Vec<Duration>> {
    timed(n, |_| async {
        let resp = rt.handle(env, make()).await?;
        ensure!(resp.status == want, "wanted {want}, got {}", resp.status);
        Ok(())
    })
    .await
}

/// A fan-out-1 event as the benchmarks publish it: a small load, `load.status_changed`.
pub fn event_request() -> http::Request<Full<Bytes>> {
    let mut event = req(
        "POST",
        "/internal/v1/events",
        "bench",
        r#"{"id":"L-1","status":"ASSIGNED","eligibleForTracking":true}"#,
    );
    event.headers_mut().insert(
        "x-service-event",
        http::HeaderValue::from_static("load.status_changed"),
    );
    event
}

/// The embedded store in a fresh directory, synced as `edgehook serve` syncs it (every
/// 100 ms).
pub fn durable_store(name: &str) -> Result<KvStore> {
    let dir = edgehook_testkit::try_temp_dir(&format!("bench-{name}"))?;
    open_store(&dir)
}

/// Opens the embedded store in `dir`, synced every 100 ms.
pub fn open_store(dir: &std::path::Path) -> Result<KvStore> {
    Ok(KvStore::Local(Arc::new(embedded::open(
        dir,
        Durability::DEFAULT,
    )?)))
}

/// A load of a realistic size: a load with forty stops, about 5.7 KiB of JSON.
pub fn large_load() -> String {
    let stops: Vec<String> = (0..40)
        .map(|i| {
            format!(
                r#"{{"seq":{i},"city":"Springfield {i}","lat":41.{i}5,"lon":-87.6{i},"window":{{"from":"2026-11-22T08:00:00Z","to":"2026-11-22T10:00:00Z"}},"done":false}}"#
            )
        })
        .collect();
    format!(
        r#"{{"id":"L-1","status":"ASSIGNED","eligibleForTracking":true,"stops":[{}]}}"#,
        stops.join(",")
    )
}
