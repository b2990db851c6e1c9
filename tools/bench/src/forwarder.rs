//! A second floor for the latency section: a plain native forwarder, the least any
//! HTTP-in, HTTP-out webhook sender built on the same crates can cost on this machine.
//!
//! It takes the same events on the same path `serve` does, answers each 202 at once, and
//! POSTs its load to every subscription of its type (the same URLs on the same receiver),
//! signed with the component's own HMAC-SHA256 code and with the same headers a delivery
//! carries, through a pooled hyper client with at most [`PER_TARGET`] requests in flight to
//! the receiver, as `serve`'s outbound path does. It keeps nothing: no store, no queue, no
//! retries, no component, no log line. So its CPU per delivery is what the two HTTP
//! exchanges (the event's share and the delivery's) and the signing cost with hyper and
//! tokio on this machine, and its deliveries/s is the most a sender on this stack could
//! deliver here: a bound on what `serve` can reach, measured in the same run.

use anyhow::Result;
use bytes::Bytes;
use edgehook_component::model::events::EVENT_TYPES;
use edgehook_component::model::signing::sign;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::Semaphore;

/// Requests in flight to one receiver, and idle connections kept to it: `serve`'s default
/// (`edgehook_runtime::gate::DEFAULT_PER_TARGET`).
const PER_TARGET: usize = 64;

/// The secret every delivery is signed with.
const SECRET: &str = "whsec_forwarder-floor";

/// Starts the forwarder on the current runtime (where `serve` runs in the latency
/// section): `subscriptions` URLs `/s<j>` on `receiver`, round-robin over the event types as
/// the section's subscriptions are. Returns its port. It runs until the runtime ends.
pub async fn start(receiver: u16, subscriptions: usize) -> Result<u16> {
    let mut urls: Vec<Vec<http::Uri>> = vec![Vec::new(); EVENT_TYPES.len()];
    for j in 0..subscriptions {
        urls[j % EVENT_TYPES.len()].push(format!("http://127.0.0.1:{receiver}/s{j}").parse()?);
    }
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let forwarder = Arc::new(Forwarder {
        urls,
        client: Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(PER_TARGET)
            .build(connector),
        gate: Arc::new(Semaphore::new(PER_TARGET)),
        sent: AtomicU64::new(0),
    });
    let port = edgehook_testkit::receiver::loopback(move |head, body| {
        let forwarder = forwarder.clone();
        async move {
            let kind = head
                .headers
                .get("x-service-event")
                .and_then(|v| v.to_str().ok())
                .and_then(|t| EVENT_TYPES.iter().position(|e| *e == t));
            let status = match kind {
                Some(kind) => {
                    forwarder.fan_out(kind, body);
                    http::StatusCode::ACCEPTED
                }
                None => http::StatusCode::BAD_REQUEST,
            };
            let mut response = hyper::Response::new(Full::new(Bytes::new()));
            *response.status_mut() = status;
            response
        }
    })
    .await?;
    Ok(port)
}

/// The forwarder's state: each event type's URLs, the pooled client, the receiver's gate.
struct Forwarder {
    urls: Vec<Vec<http::Uri>>,
    client: Client<HttpConnector, Full<Bytes>>,
    gate: Arc<Semaphore>,
    /// Deliveries sent, for their ids.
    sent: AtomicU64,
}

impl Forwarder {
    /// Sends `body` to every URL of event type `kind`, each a task of its own.
    fn fan_out(self: &Arc<Self>, kind: usize, body: Bytes) {
        for at in 0..self.urls[kind].len() {
            let (me, body) = (self.clone(), body.clone());
            tokio::spawn(async move {
                let Ok(_place) = me.gate.clone().acquire_owned().await else {
                    return;
                };
                let n = me.sent.fetch_add(1, Ordering::Relaxed);
                let timestamp = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let request = http::Request::post(me.urls[kind][at].clone())
                    .header("content-type", "application/json")
                    .header("user-agent", "edgehook-forwarder-floor")
                    .header("x-service-delivery-id", format!("dlv_{n:026}"))
                    .header("x-service-event", EVENT_TYPES[kind])
                    .header("x-service-timestamp", timestamp.to_string())
                    .header("x-service-signature", sign(SECRET, timestamp, &body))
                    .body(Full::new(body));
                let Ok(request) = request else { return };
                if let Ok(response) = me.client.request(request).await {
                    let _ = response.into_body().collect().await;
                }
            });
        }
    }
}
