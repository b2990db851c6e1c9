//! The soak's loopback receivers, one per [`Behavior`]: each records every request it gets
//! (path, delivery headers, raw body, arrival time) and answers as its behavior says.

use crate::records::{Behavior, Received};
use crate::shared::lock;
use anyhow::Result;
use bytes::Bytes;
use edgehook_runtime::log::now_ms;
use http_body_util::Full;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The loopback receivers, one per [`Behavior`] (the refused one is a port bound with nothing
/// listening), recording every request they get.
pub struct Receivers {
    ports: BTreeMap<Behavior, u16>,
    log: Arc<Mutex<Vec<Received>>>,
    /// Holds the refused port so nothing else takes it.
    _refused: tokio::net::TcpSocket,
}

impl Receivers {
    /// Starts them; the timeout receiver answers after `slow_ms`.
    pub async fn start(slow_ms: u64) -> Result<Receivers> {
        let log: Arc<Mutex<Vec<Received>>> = Arc::default();
        let mut ports = BTreeMap::new();
        for b in Behavior::ALL {
            if b != Behavior::Refused {
                ports.insert(b, receiver(b, slow_ms, log.clone()).await?);
            }
        }
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))?;
        ports.insert(Behavior::Refused, socket.local_addr()?.port());
        Ok(Receivers {
            ports,
            log,
            _refused: socket,
        })
    }

    /// The subscription URL of `path` on the receiver with behavior `b`.
    pub fn url(&self, b: Behavior, path: &str) -> String {
        let port = self.ports.get(&b).copied().unwrap_or(0);
        format!("http://127.0.0.1:{port}{path}")
    }

    /// Every request received so far.
    pub fn snapshot(&self) -> Vec<Received> {
        lock(&self.log).clone()
    }

    /// How many requests were received so far.
    pub fn count(&self) -> usize {
        lock(&self.log).len()
    }
}

async fn receiver(b: Behavior, slow_ms: u64, log: Arc<Mutex<Vec<Received>>>) -> Result<u16> {
    edgehook::receiver::loopback(move |parts: http::request::Parts, body: Bytes| {
        let log = log.clone();
        async move {
            let header = |n: &str| {
                parts
                    .headers
                    .get(n)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            lock(&log).push(Received {
                path: parts.uri.path().to_owned(),
                delivery_id: header("x-service-delivery-id"),
                event_type: header("x-service-event"),
                timestamp: header("x-service-timestamp"),
                signature: header("x-service-signature"),
                body,
                at_ms: now_ms(),
            });
            let status = match b {
                Behavior::Status500 => 500,
                Behavior::Status503 => 503,
                Behavior::Timeout => {
                    tokio::time::sleep(Duration::from_millis(slow_ms)).await;
                    200
                }
                Behavior::Ok | Behavior::Refused => 200,
            };
            let mut resp = hyper::Response::new(Full::new(Bytes::from_static(b"ok")));
            *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
            resp
        }
    })
    .await
}
