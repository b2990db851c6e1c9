//! The peer section's traffic: the loopback receiver both systems deliver to, which checks
//! every request's signature with the scheme of the endpoint it came to and logs its arrival,
//! and the open-model generator (each publish sent at its scheduled time, whether or not
//! earlier ones were answered), with the latency it reads off both.

use anyhow::{Context as _, Result};
use bytes::Bytes;
use edgehook_testkit::signature::{verifies, verifies_standard};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How an endpoint's deliveries are signed, with its secret.
#[derive(Clone)]
pub enum Scheme {
    /// edgehook's default: `X-Service-Signature`, hex HMAC-SHA256 over `<timestamp>.<body>`.
    Edgehook(String),
    /// Standard Webhooks (Svix): `svix-signature` (or `webhook-signature`), `v1,` base64
    /// over `<id>.<timestamp>.<body>`, the key `whsec_` + base64.
    Standard(String),
}

impl Scheme {
    fn verifies(&self, head: &http::request::Parts, body: &[u8]) -> bool {
        let header = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| head.headers.get(*n)?.to_str().ok())
        };
        match self {
            Scheme::Edgehook(secret) => verifies(
                secret,
                header(&["x-service-timestamp"]),
                header(&["x-service-signature"]),
                body,
            ),
            Scheme::Standard(secret) => verifies_standard(
                secret,
                header(&["svix-id", "webhook-id"]),
                header(&["svix-timestamp", "webhook-timestamp"]),
                header(&["svix-signature", "webhook-signature"]),
                body,
            ),
        }
    }
}

/// What the receiver saw.
pub struct Receipts {
    /// The instant arrivals are measured from.
    pub origin: Instant,
    secrets: RwLock<HashMap<String, Scheme>>,
    verified: AtomicUsize,
    rejected: AtomicUsize,
    /// Per verified request: the event (`"id":"L<i>"` in its body), the endpoint (the last
    /// segment of its path) and its arrival, ns since `origin`.
    log: Mutex<Vec<(u32, u32, u64)>>,
}

impl Receipts {
    /// Deliveries to `path` are checked with `scheme`.
    pub fn expect(&self, path: &str, scheme: Scheme) {
        let mut secrets = self.secrets.write().expect("secrets");
        secrets.insert(path.to_owned(), scheme);
    }

    /// Requests whose signature verified.
    pub fn verified(&self) -> usize {
        self.verified.load(Ordering::Relaxed)
    }

    /// Requests whose signature did not verify (or that came to an unknown path).
    pub fn rejected(&self) -> usize {
        self.rejected.load(Ordering::Relaxed)
    }

    /// The log so far, emptied.
    pub fn take_log(&self) -> Vec<(u32, u32, u64)> {
        std::mem::take(&mut *self.log.lock().expect("log"))
    }

    fn receive(&self, head: &http::request::Parts, body: &[u8]) {
        let at = self.origin.elapsed().as_nanos() as u64;
        let path = head.uri.path();
        let good = {
            let secrets = self.secrets.read().expect("secrets");
            secrets.get(path).is_some_and(|s| s.verifies(head, body))
        };
        if !good {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.verified.fetch_add(1, Ordering::Relaxed);
        let endpoint = path.rsplit('/').next().and_then(|s| s.parse().ok());
        if let (Some(event), Some(endpoint)) = (event_of(body), endpoint) {
            self.log.lock().expect("log").push((event, endpoint, at));
        }
    }
}

/// The event a body belongs to: the digits after `"id":"L`.
fn event_of(body: &[u8]) -> Option<u32> {
    const MARK: &[u8] = br#""id":"L"#;
    let at = body.windows(MARK.len()).position(|w| w == MARK)? + MARK.len();
    let digits = body[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&body[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// The load of event `i`.
pub fn load_of(i: usize) -> String {
    format!(r#"{{"id":"L{i}","status":"ASSIGNED","eligibleForTracking":true}}"#)
}

/// The receiver on a free loopback port (the test kit's bare server): 200 to every request,
/// each checked and counted.
pub async fn receiver() -> Result<(u16, Arc<Receipts>)> {
    let receipts = Arc::new(Receipts {
        origin: Instant::now(),
        secrets: RwLock::default(),
        verified: AtomicUsize::new(0),
        rejected: AtomicUsize::new(0),
        log: Mutex::new(Vec::with_capacity(1 << 20)),
    });
    let r = receipts.clone();
    let port = edgehook_testkit::receiver::loopback(move |head, body| {
        let r = r.clone();
        async move {
            r.receive(&head, &body);
            hyper::Response::new(Full::new(Bytes::from_static(b"ok")))
        }
    })
    .await?;
    Ok((port, receipts))
}

/// The request that publishes event `i`.
pub type MakeEvent = Arc<dyn Fn(usize) -> http::Request<Full<Bytes>> + Send + Sync>;

/// Keep-alive connections the generator sends over (a send waits for a free one).
const CONNECTIONS: usize = 256;

/// Sends `n` publishes to `port` at `rate` a second from a moment just after the
/// connections are open (`t0`, returned), never waiting for an answer before the next is
/// due; event `i` is due at `t0 + i / rate`. Per event, the instant its 2xx answer arrived
/// (`None`: refused or failed).
pub async fn open_model(
    port: u16,
    rate: f64,
    n: usize,
    make: MakeEvent,
) -> Result<(Instant, Vec<Option<Instant>>)> {
    let mut conns = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        conns.push(connect(port).await?);
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<usize>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut workers = Vec::new();
    for mut conn in conns {
        let (rx, make) = (rx.clone(), make.clone());
        workers.push(tokio::spawn(async move {
            let mut answered = Vec::new();
            loop {
                let Some(i) = rx.lock().await.recv().await else {
                    return answered;
                };
                let sent = async {
                    conn.ready().await?;
                    let resp = conn.send_request(make(i)).await?;
                    let ok = resp.status().is_success();
                    resp.into_body().collect().await?;
                    Ok::<_, anyhow::Error>(ok)
                };
                match sent.await {
                    Ok(true) => answered.push((i, Instant::now())),
                    Ok(false) => {}
                    Err(_) => match connect(port).await {
                        Ok(c) => conn = c,
                        Err(_) => return answered,
                    },
                }
            }
        }));
    }
    let t0 = Instant::now() + Duration::from_millis(20);
    for i in 0..n {
        tokio::time::sleep_until((t0 + due(i, rate)).into()).await;
        tx.send(i)?;
    }
    drop(tx);
    let mut accepted = vec![None; n];
    for w in workers {
        for (i, at) in w.await? {
            accepted[i] = Some(at);
        }
    }
    Ok((t0, accepted))
}

/// When event `i` is due after the generator's start, at `rate` a second.
pub fn due(i: usize, rate: f64) -> Duration {
    Duration::from_nanos((i as f64 * 1e9 / rate) as u64)
}

/// A keep-alive HTTP/1.1 connection to `port` on loopback.
pub async fn connect(port: u16) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
    let _ = stream.set_nodelay(true);
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(send)
}

/// Latency to the first attempt received, ms.
pub struct Latency {
    /// From the publish accepted (its 2xx read): p50, p99 and the max, ms (a delivery that
    /// never came counted at the cap; one received before the answer was read, 0).
    pub p: [f64; 3],
    /// From the publish's scheduled send (the open model's start point: it includes the
    /// publish's own time): p50, p99 and the max, ms.
    pub from_send: [f64; 3],
    /// Deliveries that had not come by the cap.
    pub missing: usize,
    /// Publishes not accepted.
    pub refused: usize,
}

/// The run [`latency`] reads: when the generator started, its rate, and each event's
/// answer ([`open_model`]).
pub struct Run<'a> {
    /// The generator's start.
    pub t0: Instant,
    /// Events a second.
    pub rate: f64,
    /// Per event, when its 2xx was read.
    pub accepted: &'a [Option<Instant>],
}

/// The latency of each accepted event's first attempt at each of its `fanout` endpoints,
/// from `log` (the receiver's), a delivery not there counted as arriving at `cap`.
pub fn latency(
    run: &Run<'_>,
    mut log: Vec<(u32, u32, u64)>,
    origin: Instant,
    fanout: usize,
    cap: Instant,
) -> Latency {
    log.sort_unstable();
    log.dedup_by_key(|(event, endpoint, _)| (*event, *endpoint));
    let ns = |t: Instant| t.saturating_duration_since(origin).as_nanos() as u64;
    let sent = |i: usize| run.t0 + due(i, run.rate);
    let mut per_event = vec![0usize; run.accepted.len()];
    let (mut from_ok, mut from_send) = (Vec::new(), Vec::new());
    for (event, _, at) in log {
        let i = event as usize;
        if let Some(Some(ok)) = run.accepted.get(i) {
            per_event[i] += 1;
            from_ok.push(Duration::from_nanos(at.saturating_sub(ns(*ok))));
            from_send.push(Duration::from_nanos(at.saturating_sub(ns(sent(i)))));
        }
    }
    let mut missing = 0;
    for (i, ok) in run.accepted.iter().enumerate() {
        if let Some(ok) = ok {
            let short = fanout.saturating_sub(per_event[i]);
            missing += short;
            from_ok.extend(std::iter::repeat_n(
                cap.saturating_duration_since(*ok),
                short,
            ));
            let never = cap.saturating_duration_since(sent(i));
            from_send.extend(std::iter::repeat_n(never, short));
        }
    }
    let figures = |mut all: Vec<Duration>| {
        all.sort_unstable();
        let ms = |p: f64| edgehook_testkit::percentile(&all, p).as_secs_f64() * 1e3;
        [ms(0.5), ms(0.99), ms(1.0)]
    };
    Latency {
        p: figures(from_ok),
        from_send: figures(from_send),
        missing,
        refused: run.accepted.iter().filter(|a| a.is_none()).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_is_mapped_to_its_event_by_the_load_id() {
        assert_eq!(event_of(load_of(42).as_bytes()), Some(42));
        let wrapped = format!(r#"{{"eventType":"x","payload":{}}}"#, load_of(7));
        assert_eq!(event_of(wrapped.as_bytes()), Some(7));
        assert_eq!(event_of(br#"{"id":"X1"}"#), None);
    }

    #[test]
    fn latency_counts_first_attempts_and_the_missing_at_the_cap() {
        let origin = Instant::now();
        let at = |ms: u64| origin + Duration::from_millis(ms);
        let accepted = vec![Some(at(10)), None, Some(at(20))];
        let ms = |m: u64| m * 1_000_000;
        // Event 0 at both endpoints (one twice: a retry), event 2 at one of two.
        let log = vec![
            (0, 0, ms(15)),
            (0, 1, ms(30)),
            (0, 1, ms(90)),
            (2, 0, ms(21)),
        ];
        // Sent at 0 and 2 ms (1,000 a second from the origin).
        let run = Run {
            t0: origin,
            rate: 1000.0,
            accepted: &accepted,
        };
        let l = latency(&run, log, origin, 2, at(120));
        assert_eq!((l.missing, l.refused), (1, 1));
        assert_eq!(l.p[2], 100.0, "the missing one at the cap");
        assert_eq!(l.p[0], 20.0, "of 1, 5, 20 and 100 ms, nearest rank");
        assert_eq!(
            l.from_send,
            [30.0, 118.0, 118.0],
            "of 15, 19, 30 and 118 ms"
        );
    }
}
