//! The simulated network: [`SimNet`], endpoints keyed by URL that answer from a script on
//! virtual time, every request recorded exactly as sent. Nothing leaves the process.

use crate::clock::VirtualClock;
use bytes::Bytes;
use edgehook_runtime::outbound::{Outbound, OutboundFuture};
use http_body_util::{BodyExt, Full};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

/// What a simulated endpoint does with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Answers at once with this status (and an empty body).
    Status(u16),
    /// Answers with `status` after `delay` of virtual time. When the delay reaches the
    /// attempt's first-byte timeout, the guest sees a timeout instead.
    Delayed {
        /// Virtual time before the answer.
        delay: Duration,
        /// The status then.
        status: u16,
    },
    /// The connection is refused.
    Refused,
    /// The name does not resolve.
    NoSuchHost,
    /// The connection is reset mid-response.
    Reset,
    /// Answers at once with `status` and a `Retry-After: value` header (a 429 or 503
    /// asking to wait).
    RetryAfter {
        /// The status.
        status: u16,
        /// The header's value, as sent.
        value: &'static str,
    },
}

/// One request a simulated endpoint received, exactly as sent.
#[derive(Debug, Clone)]
pub struct Received {
    /// The full URL.
    pub url: String,
    /// The method.
    pub method: String,
    /// Headers in the order sent (lower-case names), values as raw bytes.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The raw body bytes.
    pub body: Vec<u8>,
    /// Virtual wall time when it arrived (ms since the epoch).
    pub at_ms: u64,
}

impl Received {
    /// The first value of a header, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

#[derive(Default)]
struct Endpoint {
    script: VecDeque<Reply>,
    /// What it answers once the script is used up.
    then: Option<Reply>,
}

#[derive(Default)]
struct NetInner {
    endpoints: BTreeMap<String, Endpoint>,
    received: Vec<Received>,
    gate: Option<(Arc<tokio::sync::Barrier>, Duration)>,
    gate_timeouts: usize,
}

/// The simulated network: endpoints keyed by URL, each with a script of replies. Every
/// request is recorded. Nothing ever leaves the process; a URL without an endpoint gets
/// [`Reply::NoSuchHost`].
#[derive(Clone)]
pub struct SimNet {
    inner: Arc<Mutex<NetInner>>,
    clock: VirtualClock,
}

impl SimNet {
    /// An empty network on the given clock.
    pub fn new(clock: VirtualClock) -> Self {
        SimNet {
            inner: Arc::default(),
            clock,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NetInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets up (or replaces) the endpoint at `url`: it answers with `script` in order, then
    /// with the script's last reply forever (200 for an empty script).
    pub fn endpoint(&self, url: &str, script: impl IntoIterator<Item = Reply>) {
        let script: VecDeque<Reply> = script.into_iter().collect();
        let then = Some(script.back().cloned().unwrap_or(Reply::Status(200)));
        self.lock()
            .endpoints
            .insert(url.to_owned(), Endpoint { script, then });
    }

    /// Holds every response until `n` requests are in flight together (a barrier), giving up
    /// after `deadline` of real time. Proves that attempts really run concurrently: a
    /// sender that waits for each response before the next request never fills the barrier.
    pub fn hold_until_in_flight(&self, n: usize, deadline: Duration) {
        self.lock().gate = Some((Arc::new(tokio::sync::Barrier::new(n)), deadline));
    }

    /// How many requests gave up waiting at the barrier.
    pub fn gate_timeouts(&self) -> usize {
        self.lock().gate_timeouts
    }

    /// Every request received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }

    /// The requests received by one URL.
    pub fn received_by(&self, url: &str) -> Vec<Received> {
        self.lock()
            .received
            .iter()
            .filter(|r| r.url == url)
            .cloned()
            .collect()
    }

    fn next_reply(&self, url: &str) -> Reply {
        let mut inner = self.lock();
        match inner.endpoints.get_mut(url) {
            None => Reply::NoSuchHost,
            Some(ep) => ep
                .script
                .pop_front()
                .or_else(|| ep.then.clone())
                .unwrap_or(Reply::Status(200)),
        }
    }
}

impl Outbound for SimNet {
    fn send(
        &self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> OutboundFuture {
        let net = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await?.to_bytes();
            let url = parts.uri.to_string();
            net.lock().received.push(Received {
                url: url.clone(),
                method: parts.method.to_string(),
                headers: parts
                    .headers
                    .iter()
                    .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
                    .collect(),
                body: body.to_vec(),
                at_ms: net.clock.now_ms(),
            });
            let gate = net.lock().gate.clone();
            if let Some((barrier, deadline)) = gate
                && tokio::time::timeout(deadline, barrier.wait())
                    .await
                    .is_err()
            {
                net.lock().gate_timeouts += 1;
            }
            let timeout = options.and_then(|o| o.first_byte_timeout);
            let mut retry_after = None;
            let status = match net.next_reply(&url) {
                Reply::Status(s) => s,
                Reply::RetryAfter { status, value } => {
                    retry_after = Some(value);
                    status
                }
                Reply::Delayed { delay, status } => {
                    if timeout.is_some_and(|t| delay >= t) {
                        return Err(HttpError::ConnectionReadTimeout);
                    }
                    status
                }
                Reply::Refused => return Err(HttpError::ConnectionRefused),
                Reply::NoSuchHost => return Err(HttpError::DestinationNotFound),
                Reply::Reset => return Err(HttpError::ConnectionTerminated),
            };
            let mut response = http::Response::builder().status(status);
            if let Some(value) = retry_after {
                response = response.header("retry-after", value);
            }
            let response = response
                .body(
                    Full::new(Bytes::new())
                        .map_err(|never| match never {})
                        .boxed_unsync(),
                )
                .map_err(|e| HttpError::InternalError(Some(e.to_string())))?;
            Ok(response)
        })
    }
}
