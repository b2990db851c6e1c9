//! Sending: the [`Sender`] a host's outbound HTTP stands behind, and what goes out and comes back.

use std::rc::Rc;

pub use edgehook_records::delivery::SendError;

/// An HTTP request to send for one attempt.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// `https` (or `http` where private targets are allowed).
    pub scheme: String,
    /// `host[:port]`.
    pub authority: String,
    /// Path and query.
    pub path_and_query: String,
    /// Headers, in order.
    pub headers: Vec<(String, String)>,
    /// The raw body (shared between deliveries of one event).
    pub body: Rc<Vec<u8>>,
}

/// What came back for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendResult {
    /// The status code, or why there was none.
    pub outcome: Result<u16, SendError>,
    /// Time from the start of [`Sender::send_all`] to the response head (or the error), in
    /// ms. The longest of a batch is how long the batch took: the tick's clock moves on by it.
    pub latency_ms: u64,
    /// The `Retry-After` header of a 429 or 503, as sent (read by the core, with its clock).
    pub retry_after: Option<String>,
}

impl SendResult {
    /// A request that was never sent: `error` at once.
    pub fn unsent(error: SendError) -> SendResult {
        SendResult {
            outcome: Err(error),
            latency_ms: 0,
            retry_after: None,
        }
    }
}

/// Sends requests, all at once, each within `timeout_ms`. The shell implements it over
/// `wasi:http/outgoing-handler`. Redirects are never followed.
pub trait Sender {
    /// One result per request, in order.
    fn send_all(&self, requests: &[Outgoing], timeout_ms: u64) -> Vec<SendResult>;
}

/// A sender that refuses everything (for hosts and tests with no network).
pub struct NoNetwork;

impl Sender for NoNetwork {
    fn send_all(&self, requests: &[Outgoing], _timeout_ms: u64) -> Vec<SendResult> {
        requests
            .iter()
            .map(|_| SendResult::unsent(SendError::Other("no network")))
            .collect()
    }
}
