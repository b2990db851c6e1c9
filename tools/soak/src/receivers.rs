//! The soak's loopback receivers, one per [`Behavior`]: the test kit's receiver, each
//! keeping every request it gets and answering as its behavior says.

use crate::records::{Behavior, Received};
use anyhow::Result;
use edgehook_testkit::receiver::{Answer, Receiver};
use std::collections::BTreeMap;
use std::time::Duration;

/// The loopback receivers, one per [`Behavior`] (the refused one is a port bound with nothing
/// listening), keeping every request they get.
pub struct Receivers {
    receivers: BTreeMap<Behavior, Receiver>,
    /// The refused port, held so nothing else takes it.
    refused: tokio::net::TcpSocket,
}

impl Receivers {
    /// Starts them; the timeout receiver answers after `slow_ms`.
    pub async fn start(slow_ms: u64) -> Result<Receivers> {
        let mut receivers = BTreeMap::new();
        for b in Behavior::ALL {
            let answer = match b {
                Behavior::Refused => continue,
                Behavior::Ok => Answer::ok(),
                Behavior::Status500 => Answer::status(500).body("ok"),
                Behavior::Status503 => Answer::status(503).body("ok"),
                Behavior::Timeout => Answer::ok().after(Duration::from_millis(slow_ms)),
            };
            receivers.insert(b, Receiver::builder().answer(answer).start().await);
        }
        let refused = tokio::net::TcpSocket::new_v4()?;
        refused.bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))?;
        Ok(Receivers { receivers, refused })
    }

    /// The subscription URL of `path` on the receiver with behavior `b`.
    pub fn url(&self, b: Behavior, path: &str) -> String {
        let port = match self.receivers.get(&b) {
            Some(receiver) => receiver.port(),
            None => self.refused.local_addr().map_or(0, |a| a.port()),
        };
        format!("http://127.0.0.1:{port}{path}")
    }

    /// Every request received so far, in arrival order.
    pub fn snapshot(&self) -> Vec<Received> {
        let mut all: Vec<_> = self
            .receivers
            .values()
            .flat_map(Receiver::received)
            .collect();
        all.sort_by_key(|r| r.at);
        let record = |r: &edgehook_testkit::receiver::Received| {
            let header = |n: &str| r.header(n).map(str::to_owned);
            Received {
                path: r.path.clone(),
                delivery_id: header("x-service-delivery-id"),
                event_type: header("x-service-event"),
                timestamp: header("x-service-timestamp"),
                signature: header("x-service-signature"),
                body: r.body.clone(),
                at_ms: r.unix_ms,
            }
        };
        all.iter().map(record).collect()
    }

    /// How many requests were received so far.
    pub fn count(&self) -> usize {
        self.receivers.values().map(Receiver::hits).sum()
    }
}
