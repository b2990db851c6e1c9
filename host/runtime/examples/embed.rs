//! Embedding the edgehook component in your own Rust service (docs/embedding.md): your own
//! in-process key-value store, your own outbound policy, your own timer.
//!
//! The store is a `BTreeMap` behind a mutex ([`KvBackend`]: reads, writes, counters and the
//! compare-and-swap the component's claims rely on; the runtime's `keys_after` and
//! `add_to_counter` do the listing and the counters' text). The outbound policy sends nothing
//! itself: it refuses every host outside an allow list before any connection, and for the
//! allowed ones it hands the signed request to the platform (here: prints it, and answers
//! 204), as a platform that queues deliveries on its own egress would. The timer is a loop
//! calling `tick` until nothing is due.
//!
//! Run it: `cargo run -p edgehook-runtime --example embed` (CI runs it).

use anyhow::{Result, ensure};
use bytes::Bytes;
use edgehook_runtime::outbound::{Outbound, OutboundFuture};
use edgehook_runtime::store::{KvBackend, KvStore, StoreResult, add_to_counter, keys_after};
use edgehook_runtime::{HostEnv, Runtime};
use http_body_util::{BodyExt as _, Full};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

/// An in-process store: one flat keyspace in a map.
#[derive(Default)]
struct MapStore(Mutex<BTreeMap<String, Vec<u8>>>);

impl MapStore {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl KvBackend for MapStore {
    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(self.map().get(key).cloned())
    }

    fn set(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.map().insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    fn delete(&self, key: &str) -> StoreResult<()> {
        self.map().remove(key);
        Ok(())
    }

    fn list_keys(&self, cursor: Option<&str>, limit: usize) -> StoreResult<Vec<String>> {
        Ok(keys_after(&self.map(), cursor, limit))
    }

    fn increment(&self, key: &str, delta: i64) -> StoreResult<i64> {
        let mut map = self.map();
        let next = add_to_counter(key, map.get(key), delta)?;
        map.insert(key.to_owned(), next.to_string().into_bytes());
        Ok(next)
    }

    fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> StoreResult<bool> {
        let mut map = self.map();
        if map.get(key).map(Vec::as_slice) != expected {
            return Ok(false);
        }
        map.insert(key.to_owned(), new.to_vec());
        Ok(true)
    }
}

/// The platform's outbound policy: hosts outside `allow` are refused before any connection
/// (the component records `destination not allowed`); the others are handed to the
/// platform, which here prints them and answers 204.
struct Policy {
    allow: Vec<String>,
    sent: Mutex<Vec<String>>,
}

/// The policy as the runtime holds it (the platform keeps another handle to read `sent`).
struct Egress(Arc<Policy>);

impl Outbound for Egress {
    fn send(&self, request: http::Request<WasiBody>, _: Option<RequestOptions>) -> OutboundFuture {
        let policy = self.0.clone();
        Box::pin(async move {
            let host = request.uri().host().unwrap_or("").to_owned();
            if !policy.allow.contains(&host) {
                return Err(HttpError::HttpRequestDenied);
            }
            let (parts, body) = request.into_parts();
            let body = body.collect().await?.to_bytes();
            let event = parts
                .headers
                .get("x-service-event")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("?");
            println!(
                "delivery to {} ({event}): {}",
                parts.uri,
                String::from_utf8_lossy(&body)
            );
            policy
                .sent
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(parts.uri.to_string());
            let empty = Full::new(Bytes::new())
                .map_err(|never| match never {})
                .boxed_unsync();
            http::Response::builder()
                .status(204)
                .body(empty)
                .map_err(|e| HttpError::InternalError(Some(e.to_string())))
        })
    }
}

fn request(
    method: &str,
    path: &str,
    token: &str,
    body: &str,
) -> Result<http::Request<Full<Bytes>>> {
    Ok(http::Request::builder()
        .method(method)
        .uri(format!("http://edgehook.internal{path}"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))?)
}

fn main() -> Result<()> {
    let policy = Arc::new(Policy {
        allow: vec!["hooks.partner.example".to_owned()],
        sent: Mutex::default(),
    });
    let env = HostEnv {
        kv: KvStore::Local(Arc::new(MapStore::default())),
        config: Arc::new(BTreeMap::from([(
            "admin_token".to_owned(),
            "op-token".to_owned(),
        )])),
        clock: None,
        outbound: Arc::new(Egress(policy.clone())),
        seed: None,
        guest_log: None,
        metrics: None,
    };
    let runtime = Runtime::embedded()?;
    let tokio = tokio::runtime::Runtime::new()?;
    tokio.block_on(async {
        // The operator issues a key for a partner; the partner subscribes two URLs.
        let issued = runtime
            .handle(
                &env,
                request("POST", "/internal/v1/clients/acme/keys", "op-token", "")?,
            )
            .await?;
        ensure!(issued.status == 201, "issue: {}", issued.status);
        let key: serde_json::Value = serde_json::from_slice(&issued.body)?;
        let key = key["data"]["apiKey"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        for url in [
            "https://hooks.partner.example/in",
            "https://elsewhere.example/in",
        ] {
            let body = format!(r#"{{"url":"{url}","eventTypes":["load.created"]}}"#);
            let created = runtime
                .handle(&env, request("POST", "/v1/webhooks", &key, &body)?)
                .await?;
            ensure!(created.status == 201, "create: {}", created.status);
        }
        // The platform publishes an event through the `events` export, then drives the
        // timer: `tick` until nothing is due now.
        let receipt = runtime
            .publish(&env, "load.created", br#"{"id":"L-1","status":"ASSIGNED"}"#)
            .await?
            .map_err(|e| anyhow::anyhow!("publish refused: {e:?}"))?;
        println!(
            "published {} to {} subscriptions",
            receipt.event_id, receipt.deliveries
        );
        for _ in 0..3 {
            let report = runtime.tick(&env).await?;
            println!(
                "tick: {} attempted, {} succeeded, {} failed",
                report.attempted, report.succeeded, report.failed
            );
        }
        Ok(())
    })?;
    let sent = policy
        .sent
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    ensure!(
        sent == ["https://hooks.partner.example/in"],
        "only the allowed host was sent to: {sent:?}"
    );
    println!("the allowed host got its delivery; the other was refused by the policy");
    Ok(())
}
