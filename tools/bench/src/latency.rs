//! Latency under a steady rate: events sent to `edgehook serve` at a constant arrival rate
//! (an open model: send `i` is scheduled at `t0 + i / rate` before the run starts, and is
//! made on time whether or not earlier sends have been answered, so a slow server cannot slow
//! the load down and hide its latency), 100 subscriptions spread round-robin over the three
//! event types, all pointing at one loopback receiver. Each delivery's latency is the time
//! from its event's **scheduled** send time (the earliest, so the most conservative, start
//! point: it includes any lateness of the generator and any wait for a connection) to the
//! moment the receiver has read its first attempt whole. The receiver maps a delivery to its
//! event by the load's `"id":"L<i>"` (the body is delivered byte for byte).
//!
//! The judged run is made at [`SHARE`] of the deliveries/s this build sustains at fan-out 33
//! on the same store, measured first in the same run ([`sustained_at_33`], the delivery
//! section's closed loop): a rate the build can carry, so its p99 is latency, not a queue
//! that grows with the run.
//!
//! The baseline, measured in the same run at the same rate: the same generator sending the
//! same bodies straight to the same kind of receiver (one hop, no component): the floor of
//! the generator, hyper and loopback on this machine. Beside the judged run, a second one:
//! the same load to a native forwarder in `serve`'s place ([`crate::forwarder`]), the least
//! a sender on this stack costs here.
//!
//! The generator and the receiver each run on a runtime of their own (one thread each), so
//! the server's queue of tasks does not delay a send or a receive instant; all three share
//! the machine's two cores, as they share them in the other sections.
//!
//! `serve` runs on the embedded store, synced to disk every 100 ms, as `edgehook serve` runs
//! by default; `EDGEHOOK_BENCH_LATENCY_STORE=memory` runs it on the in-memory
//! store instead (no file, no fsync), to see what the store's disk work costs.

use crate::load::plain_server;
use crate::measure::{cpu_per, process_cpu};
use crate::serve::sustained;
use crate::setup::{create, durable_store, issue_key, served};
use crate::table::Row;
use anyhow::{Context as _, Result};
use bytes::Bytes;
use edgehook::serve::Server;
use edgehook_component::model::events::EVENT_TYPES;
use edgehook_runtime::Runtime;
use edgehook_runtime::store::{KvStore, MemoryStore};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

/// The section's subscriptions: 100, spread round-robin over the event types (34, 33, 33).
const SUBSCRIPTIONS: usize = 100;
/// The share of the deliveries/s sustained at fan-out 33 the judged run is made at.
pub const SHARE: f64 = 0.6;
/// Keep-alive connections the generator sends over; a send waits for a free one (that wait
/// counts in its latency, which starts at the scheduled time).
const CONNECTIONS: usize = 1024;
/// The target: the judged run's p99, in ms.
const P99_TARGET_MS: f64 = 25.0;

/// One measured run: a rate, for how long, to how many subscriptions.
#[derive(Clone, Copy)]
struct Plan {
    /// Events per second, scheduled.
    rate: f64,
    /// How long events are sent.
    duration: Duration,
    /// Subscriptions, round-robin over the event types.
    subscriptions: usize,
    /// How long after the load stops the run waits for the backlog to arrive.
    drain_cap: Duration,
    /// Whether its p99 is judged against [`P99_TARGET_MS`].
    judged: bool,
}

/// The latency section. First the deliveries/s this build sustains at fan-out 33 (20,000
/// deliveries; `quick`: 1,000), then the judged run: [`SHARE`] of that rate, 100
/// subscriptions, 60 s (`quick`: 3 s), p99 <= 25 ms. Two more, shorter (20 s; `quick`: 1 s):
/// the same subscriptions at 100 events/s, and 1,000 events/s to 3 subscriptions (fan-out
/// 1). Each beside the same rate sent straight to the receiver; the backlog is waited for up
/// to 30 s (`quick`: 3 s).
pub async fn steady_rate(quick: bool) -> Result<Vec<Row>> {
    let secs = |full: u64, short: u64| Duration::from_secs(if quick { short } else { full });
    let cap = secs(30, 3);
    let mut rows = Vec::new();
    // `EDGEHOOK_BENCH_LATENCY_RATE=250` sends that many events a second in the judged run
    // instead of the share of the sustained rate (which is then not measured).
    let judged_rate = match std::env::var("EDGEHOOK_BENCH_LATENCY_RATE") {
        Ok(r) => r
            .parse()
            .context("EDGEHOOK_BENCH_LATENCY_RATE: events a second")?,
        Err(_) => {
            let sustained = sustained_at_33(if quick { 1_000 } else { 20_000 }).await?;
            rows.push(Row::reported(
                format!(
                    "latency: deliveries/s sustained at fan-out 33 (judged at {:.0} % of it)",
                    SHARE * 100.0
                ),
                sustained,
                "d/s",
                None,
            ));
            events_at(SHARE, sustained)
        }
    };
    let mut plans = vec![
        (judged_rate, secs(60, 3), SUBSCRIPTIONS, true),
        (100.0, secs(20, 1), SUBSCRIPTIONS, false),
        (1000.0, secs(20, 1), EVENT_TYPES.len(), false),
    ];
    // `EDGEHOOK_BENCH_LATENCY_FIRST=30` runs only the judged run, for that many seconds:
    // builds compared in alternating runs of minutes, not of the whole section's.
    // The native forwarder's floor ([`crate::forwarder`]) is measured beside the judged
    // run, for 20 s (`quick`: 1 s; it settles at once), and left out of those alternating
    // runs unless `EDGEHOOK_BENCH_FORWARDER=1` (then as long as they are).
    let mut forwarder_for = Some(secs(20, 1));
    if let Ok(s) = std::env::var("EDGEHOOK_BENCH_LATENCY_FIRST") {
        let s: u64 = s.parse().context("EDGEHOOK_BENCH_LATENCY_FIRST: seconds")?;
        plans.truncate(1);
        plans[0].1 = Duration::from_secs(s);
        forwarder_for =
            (std::env::var("EDGEHOOK_BENCH_FORWARDER").as_deref() == Ok("1")).then_some(plans[0].1);
    }
    let threads = LoadThreads::start()?;
    let mut floors: Vec<(f64, Figures)> = Vec::new();
    for (rate, duration, subscriptions, judged) in plans {
        let plan = Plan {
            rate,
            duration,
            subscriptions,
            drain_cap: cap,
            judged,
        };
        let floor = match floors.iter().find(|(r, _)| *r == rate) {
            Some((_, f)) => f.clone(),
            None => {
                let f = run_direct(&threads, plan).await?;
                floors.push((rate, f.clone()));
                f
            }
        };
        let ours = run_serve(&threads, plan).await?;
        rows.extend(rows_for(plan, &ours, &floor));
        if let Some(duration) = forwarder_for
            && plan.judged
        {
            let floor_plan = Plan { duration, ..plan };
            let native = run_forwarder(&threads, floor_plan).await?;
            rows.extend(forwarder_rows(floor_plan, &native, &ours));
        }
    }
    Ok(rows)
}

/// Signed deliveries/s `serve` sustains at fan-out 33 on the store the section runs on,
/// `total` deliveries published as fast as 32 connections go (the delivery section's closed
/// loop, [`sustained`]): what the judged rate is a share of.
pub async fn sustained_at_33(total: usize) -> Result<f64> {
    let hits = Arc::new(AtomicUsize::new(0));
    let receiver = plain_server(Bytes::from_static(b"ok"), hits.clone()).await?;
    let (rate, _, _) = sustained(store("latency-sustained")?, 33, total, receiver, &hits).await?;
    Ok(rate)
}

/// Events/s to the section's 100 subscriptions (33.3 deliveries an event) that ask for
/// `share` of `deliveries` a second.
pub fn events_at(share: f64, deliveries: f64) -> f64 {
    share * deliveries * EVENT_TYPES.len() as f64 / SUBSCRIPTIONS as f64
}

/// The store `serve` runs on in this section: the embedded store in a fresh directory named
/// after `name` (synced every 100 ms, as `serve` runs it), or the in-memory store where
/// `EDGEHOOK_BENCH_LATENCY_STORE=memory`.
fn store(name: &str) -> Result<KvStore> {
    if std::env::var("EDGEHOOK_BENCH_LATENCY_STORE").as_deref() == Ok("memory") {
        return Ok(KvStore::Local(Arc::new(MemoryStore::new())));
    }
    durable_store(name)
}

/// The generator's and the receiver's runtimes, one thread each, stopped when dropped.
struct LoadThreads {
    generator: Handle,
    receiver: Handle,
    _stop: tokio::sync::watch::Sender<()>,
}

impl LoadThreads {
    fn start() -> Result<Self> {
        let (stop, _) = tokio::sync::watch::channel(());
        let spawn = |name: &str| -> Result<Handle> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = rt.handle().clone();
            let mut stopped = stop.subscribe();
            std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(move || {
                    rt.block_on(async move { while stopped.changed().await.is_ok() {} })
                })?;
            Ok(handle)
        };
        Ok(LoadThreads {
            generator: spawn("bench-generator")?,
            receiver: spawn("bench-receiver")?,
            _stop: stop,
        })
    }
}

/// What the receiver saw: per request, the event, the subscription (`/s<j>`; 0 for the
/// baseline) and when it was read whole, in ns since `origin`.
struct Receipts {
    origin: Instant,
    log: Mutex<Vec<(u32, u32, u64)>>,
    count: AtomicUsize,
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

/// A receiver on its own runtime, answering 200 to everything and logging each receipt.
async fn receiver(threads: &LoadThreads, origin: Instant) -> Result<(u16, Arc<Receipts>)> {
    let receipts = Arc::new(Receipts {
        origin,
        log: Mutex::new(Vec::with_capacity(1 << 20)),
        count: AtomicUsize::new(0),
    });
    let r = receipts.clone();
    let port = threads
        .receiver
        .spawn(edgehook_testkit::receiver::loopback(move |head, body| {
            let r = r.clone();
            async move {
                let at = r.origin.elapsed().as_nanos() as u64;
                let sub = head
                    .uri
                    .path()
                    .strip_prefix("/s")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                if let Some(event) = event_of(&body) {
                    r.log.lock().expect("receipts").push((event, sub, at));
                    r.count.fetch_add(1, Ordering::Relaxed);
                }
                hyper::Response::new(Full::new(Bytes::from_static(b"ok")))
            }
        }))
        .await??;
    Ok((port, receipts))
}

/// `EDGEHOOK_BENCH_LATENCY_DUMP=<file>`: every delivery of the run as a line `<scheduled send,
/// us from the start> <latency, us> <event>`, after a line `# <the start, Unix us>` (a tail's
/// shape in time: periodic stalls, and what in `serve`'s log lines up with them). The last
/// run of the section writes it.
fn dump_file(start_us: u64) -> Option<std::io::BufWriter<std::fs::File>> {
    let path = std::env::var_os("EDGEHOOK_BENCH_LATENCY_DUMP")?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).ok()?);
    writeln!(out, "# {start_us}").ok()?;
    Some(out)
}

/// The load of event `i`.
fn body(i: usize) -> Bytes {
    Bytes::from(format!(
        r#"{{"id":"L{i}","status":"ASSIGNED","eligibleForTracking":true}}"#
    ))
}

/// Event `i`'s type: round-robin over the types, as the subscriptions are.
fn event_type(i: usize) -> &'static str {
    EVENT_TYPES[i % EVENT_TYPES.len()]
}

/// Send `i`'s scheduled time after `t0`.
fn scheduled(i: usize, rate: f64) -> Duration {
    Duration::from_nanos((i as f64 * 1e9 / rate) as u64)
}

/// The request the generator sends for event `i`.
type MakeEvent = Arc<dyn Fn(usize) -> http::Request<Full<Bytes>> + Send + Sync>;

/// What the generator did.
#[derive(Default)]
struct Generated {
    /// The events answered 2xx.
    accepted: Vec<usize>,
    /// Answers other than 2xx (a 503 when `serve` has no instance free for 2 s, say).
    refused: usize,
    /// The status of the last of them.
    refused_status: Option<u16>,
    /// Exchanges that failed (the connection is made again).
    failed: usize,
    /// The most the generator's own clock loop woke after a send's scheduled time.
    dispatch_lag: Duration,
    /// The most a send was written after its scheduled time: the generator's lateness plus
    /// any wait for a free connection (all busy: the server answers slowly).
    send_lag: Duration,
}

/// Opens [`CONNECTIONS`] keep-alive connections to `port`, then sends `n` events at `rate`
/// from a moment just after (`t0`, returned), never waiting for an answer before the next
/// send is due.
async fn generate(port: u16, rate: f64, n: usize, make: MakeEvent) -> Result<(Instant, Generated)> {
    let mut conns = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        conns.push(connect(port).await?);
    }
    let t0 = Instant::now() + Duration::from_millis(20);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<usize>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut workers = Vec::new();
    for conn in conns {
        let (rx, make) = (rx.clone(), make.clone());
        workers.push(tokio::spawn(async move {
            let mut out = Generated::default();
            let mut conn = Some(conn);
            loop {
                let Some(i) = rx.lock().await.recv().await else {
                    return Ok::<_, anyhow::Error>(out);
                };
                if conn.is_none() {
                    conn = Some(connect(port).await?);
                }
                let send = conn.as_mut().context("connection")?;
                out.send_lag = out
                    .send_lag
                    .max(t0.elapsed().saturating_sub(scheduled(i, rate)));
                let answered = async {
                    send.ready().await?;
                    let resp = send.send_request(make(i)).await?;
                    let status = resp.status();
                    resp.into_body().collect().await?;
                    Ok::<_, anyhow::Error>(status)
                }
                .await;
                match answered {
                    Ok(s) if s.is_success() => out.accepted.push(i),
                    Ok(s) => {
                        out.refused += 1;
                        out.refused_status = Some(s.as_u16());
                    }
                    Err(_) => {
                        out.failed += 1;
                        conn = None;
                    }
                }
            }
        }));
    }
    let mut dispatch_lag = Duration::ZERO;
    for i in 0..n {
        let due = t0 + scheduled(i, rate);
        if Instant::now() < due {
            tokio::time::sleep_until(due.into()).await;
        }
        dispatch_lag = dispatch_lag.max(due.elapsed());
        tx.send(i)?;
    }
    drop(tx);
    let mut all = Generated {
        dispatch_lag,
        ..Generated::default()
    };
    for w in workers {
        let g = w.await??;
        all.accepted.extend(g.accepted);
        all.refused += g.refused;
        all.refused_status = all.refused_status.or(g.refused_status);
        all.failed += g.failed;
        all.send_lag = all.send_lag.max(g.send_lag);
    }
    Ok((t0, all))
}

/// A keep-alive HTTP/1.1 connection to `port` on loopback.
async fn connect(port: u16) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let _ = stream.set_nodelay(true);
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(send)
}

/// What one run measured.
#[derive(Clone)]
struct Figures {
    /// Latency percentiles p50, p99, p99.9 and the max, ms (deliveries that never arrived
    /// counted as arriving at the cap: a lower bound).
    p: [f64; 4],
    /// Events answered 2xx per second of load.
    accepted_rate: f64,
    /// Events answered other than 2xx, the status of one of them, and exchanges that failed.
    not_accepted: (usize, Option<u16>, usize),
    /// Deliveries (first attempts) received while the load ran, per second.
    delivered_rate: f64,
    /// Deliveries the accepted events asked for, per second of load.
    demanded_rate: f64,
    /// Process CPU per delivery received (generator, server and receiver), µs.
    cpu: f64,
    /// Deliveries not yet received when the load stopped.
    backlog: usize,
    /// From the load's end to the last delivery, s (the cap if some never came).
    drain: f64,
    /// Deliveries that had not arrived at the cap.
    missing: usize,
    /// Attempts received more than once (retries).
    repeats: usize,
    /// The generator's lateness (its own, and with the wait for a connection), ms.
    lag: (f64, f64),
}

/// The same load straight to the receiver: the floor.
async fn run_direct(threads: &LoadThreads, plan: Plan) -> Result<Figures> {
    let (port, receipts) = receiver(threads, Instant::now()).await?;
    let make: MakeEvent = Arc::new(|i| {
        http::Request::post("/s0")
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .body(Full::new(body(i)))
            .expect("request")
    });
    measure(threads, plan, port, &receipts, make, |_| 1).await
}

/// The same load to the native forwarder ([`crate::forwarder`]) in `serve`'s place.
async fn run_forwarder(threads: &LoadThreads, plan: Plan) -> Result<Figures> {
    let (receiver_port, receipts) = receiver(threads, Instant::now()).await?;
    let port = crate::forwarder::start(receiver_port, plan.subscriptions).await?;
    let fanout = fanouts(plan);
    measure(threads, plan, port, &receipts, event_request(), |i| {
        fanout[i % fanout.len()]
    })
    .await
}

/// Deliveries an event of each type asks for: the subscriptions round-robin over the types.
fn fanouts(plan: Plan) -> Vec<usize> {
    (0..EVENT_TYPES.len())
        .map(|t| {
            (0..plan.subscriptions)
                .filter(|j| j % EVENT_TYPES.len() == t)
                .count()
        })
        .collect()
}

/// Event `i` as the generator sends it to `serve` (and to the forwarder).
fn event_request() -> MakeEvent {
    Arc::new(|i| {
        http::Request::post("/internal/v1/events")
            .header("host", "127.0.0.1")
            .header("authorization", "Bearer bench")
            .header("content-type", "application/json")
            .header("x-service-event", event_type(i))
            .body(Full::new(body(i)))
            .expect("request")
    })
}

/// The load to `edgehook serve` on the durable store `--store` chose (synced every 100 ms
/// as `serve` runs it; the memory store where `EDGEHOOK_BENCH_LATENCY_STORE=memory`),
/// `plan.subscriptions` subscriptions round-robin over the event types.
async fn run_serve(threads: &LoadThreads, plan: Plan) -> Result<Figures> {
    let (receiver_port, receipts) = receiver(threads, Instant::now()).await?;
    let e = served(store(&format!("latency-{:.0}", plan.rate))?)?;
    let rt = Runtime::embedded()?;
    let key = issue_key(rt, &e, "latency").await?;
    for j in 0..plan.subscriptions {
        let url = format!("http://127.0.0.1:{receiver_port}/s{j}");
        create(rt, &e, &key, &url, event_type(j)).await?;
    }
    let fanout = fanouts(plan);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let server = Server::new(e)?.with_shutdown_grace(Duration::from_secs(1));
    let running = tokio::spawn(server.run(listener, stop_rx));
    let figures = measure(threads, plan, port, &receipts, event_request(), |i| {
        fanout[i % fanout.len()]
    })
    .await;
    let _ = stop.send(true);
    let _ = running.await;
    figures
}

/// One run at `rate` events/s to the section's 100 subscriptions for `duration`, beside the
/// same rate sent straight to the receiver, its p99 judged: the rows of [`steady_rate`]
/// for it.
pub async fn at_rate(rate: f64, duration: Duration) -> Result<Vec<Row>> {
    let threads = LoadThreads::start()?;
    let plan = Plan {
        rate,
        duration,
        subscriptions: SUBSCRIPTIONS,
        drain_cap: Duration::from_secs(30),
        judged: true,
    };
    let floor = run_direct(&threads, plan).await?;
    let ours = run_serve(&threads, plan).await?;
    Ok(rows_for(plan, &ours, &floor))
}

/// Runs the generator at `plan` against `port`, waits for the deliveries (`fanout(i)` for
/// each accepted event `i`) up to the cap, and reads the figures off the receipts.
async fn measure(
    threads: &LoadThreads,
    plan: Plan,
    port: u16,
    receipts: &Receipts,
    make: MakeEvent,
    fanout: impl Fn(usize) -> usize,
) -> Result<Figures> {
    let n = (plan.rate * plan.duration.as_secs_f64()).round() as usize;
    let cpu0 = process_cpu();
    let rate = plan.rate;
    let (t0, generated) = threads
        .generator
        .spawn(generate(port, rate, n, make))
        .await??;
    let expected: usize = generated.accepted.iter().map(|&i| fanout(i)).sum();
    let stop = t0 + plan.duration;
    let cap = stop + plan.drain_cap;
    while receipts.count.load(Ordering::Relaxed) < expected && Instant::now() < cap {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let received = receipts.count.load(Ordering::Relaxed);
    let cpu = cpu_per(cpu0, received);
    let mut log = std::mem::take(&mut *receipts.log.lock().expect("receipts"));
    log.sort_unstable();
    let total = log.len();
    log.dedup_by_key(|(event, sub, _)| (*event, *sub));
    let base = t0.duration_since(receipts.origin).as_nanos() as u64;
    let stop_ns = base + plan.duration.as_nanos() as u64;
    let mut per_event = vec![0usize; n];
    let mut latencies = Vec::with_capacity(expected);
    let (mut in_load, mut last) = (0usize, 0u64);
    // Origin's nanoseconds → the run's start in Unix microseconds (to line up with serve's log).
    let start_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as u64
        - (receipts.origin.elapsed().as_nanos() as u64 - base) / 1000;
    let mut dump = dump_file(start_us);
    for &(event, _, at) in &log {
        let i = event as usize;
        let Some(count) = per_event.get_mut(i) else {
            continue; // not an event of this run
        };
        *count += 1;
        let due = base + scheduled(i, rate).as_nanos() as u64;
        latencies.push(Duration::from_nanos(at.saturating_sub(due)));
        if let Some(d) = dump.as_mut() {
            let _ = writeln!(
                d,
                "{} {} {i}",
                (due - base) / 1000,
                (at - due.min(at)) / 1000
            );
        }
        in_load += usize::from(at <= stop_ns);
        last = last.max(at);
    }
    let cap_ns = stop_ns + plan.drain_cap.as_nanos() as u64;
    let mut missing = 0;
    for &i in &generated.accepted {
        let short = fanout(i).saturating_sub(per_event[i]);
        missing += short;
        let due = base + scheduled(i, rate).as_nanos() as u64;
        latencies.extend(std::iter::repeat_n(
            Duration::from_nanos(cap_ns - due),
            short,
        ));
    }
    latencies.sort_unstable();
    let ms = |p: f64| edgehook_testkit::percentile(&latencies, p).as_secs_f64() * 1e3;
    let secs = plan.duration.as_secs_f64();
    Ok(Figures {
        p: [ms(0.5), ms(0.99), ms(0.999), ms(1.0)],
        accepted_rate: generated.accepted.len() as f64 / secs,
        not_accepted: (
            generated.refused,
            generated.refused_status,
            generated.failed,
        ),
        delivered_rate: in_load as f64 / secs,
        demanded_rate: expected as f64 / secs,
        cpu,
        backlog: expected.saturating_sub(in_load),
        drain: if missing > 0 {
            plan.drain_cap.as_secs_f64()
        } else {
            last.saturating_sub(stop_ns) as f64 / 1e9
        },
        missing,
        repeats: total - log.len(),
        lag: (
            generated.dispatch_lag.as_secs_f64() * 1e3,
            generated.send_lag.as_secs_f64() * 1e3,
        ),
    })
}

impl Plan {
    /// The run as its rows name it: rate, subscriptions, duration.
    fn label(&self) -> String {
        format!(
            "{:.0} ev/s, {} subs, {} s",
            self.rate,
            self.subscriptions,
            self.duration.as_secs()
        )
    }
}

/// The table's rows for one run beside its floor.
fn rows_for(plan: Plan, ours: &Figures, floor: &Figures) -> Vec<Row> {
    let at = plan.label();
    let row = Row::reported;
    let mut rows = Vec::new();
    for (k, label) in ["p50", "p99", "p99.9", "max"].iter().enumerate() {
        let mut r = row(
            format!("latency {at}: {label} (vs direct to receiver)"),
            ours.p[k],
            "ms",
            Some(floor.p[k]),
        );
        if *label == "p99" && plan.judged {
            r.target = format!("<= {P99_TARGET_MS} ms");
            r.met = Some(ours.p[k] <= P99_TARGET_MS);
        }
        rows.push(r);
    }
    rows.extend([
        row(
            {
                let (refused, status, failed) = ours.not_accepted;
                let status = status.map_or(String::new(), |s| format!(" ({s})"));
                let not = format!("{refused} refused{status}, {failed} failed");
                format!("latency {at}: events accepted/s (vs scheduled); {not}")
            },
            ours.accepted_rate,
            "e/s",
            Some(plan.rate),
        ),
        row(
            format!("latency {at}: deliveries/s in the load (vs asked for)"),
            ours.delivered_rate,
            "d/s",
            Some(ours.demanded_rate),
        ),
        row(
            format!("latency {at}: CPU per delivery (vs one direct request)"),
            ours.cpu,
            "us",
            Some(floor.cpu),
        ),
        row(
            format!(
                "latency {at}: backlog at load end; {} missing at the cap, {} repeats",
                ours.missing, ours.repeats
            ),
            ours.backlog as f64,
            "d",
            Some(floor.backlog as f64),
        ),
        row(
            format!(
                "latency {at}: drain after load end (cap {} s)",
                plan.drain_cap.as_secs()
            ),
            ours.drain,
            "s",
            Some(floor.drain),
        ),
        row(
            format!(
                "latency {at}: generator late, max (own loop {:.1} ms; direct {:.1})",
                ours.lag.0, floor.lag.0
            ),
            ours.lag.1,
            "ms",
            Some(floor.lag.1),
        ),
    ]);
    rows
}

/// The native forwarder's rows, `serve`'s figures as their baseline (so each ratio says how
/// far `serve` is from the floor the stack sets).
fn forwarder_rows(plan: Plan, native: &Figures, ours: &Figures) -> Vec<Row> {
    let at = plan.label();
    let row = Row::reported;
    vec![
        row(
            format!("native forwarder {at}: p99 (vs serve)"),
            native.p[1],
            "ms",
            Some(ours.p[1]),
        ),
        row(
            format!(
                "native forwarder {at}: deliveries/s in the load (vs serve; {:.0} asked for)",
                native.demanded_rate
            ),
            native.delivered_rate,
            "d/s",
            Some(ours.delivered_rate),
        ),
        row(
            format!("native forwarder {at}: CPU per delivery (vs serve)"),
            native.cpu,
            "us",
            Some(ours.cpu),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_is_mapped_to_its_event_by_the_load_id() {
        assert_eq!(event_of(&body(0)), Some(0));
        assert_eq!(event_of(&body(123_456)), Some(123_456));
        assert_eq!(event_of(br#"{"id":"X1"}"#), None);
    }

    #[test]
    fn sends_are_scheduled_at_the_rate() {
        assert_eq!(scheduled(0, 1000.0), Duration::ZERO);
        assert_eq!(scheduled(1500, 1000.0), Duration::from_millis(1500));
        assert_eq!(scheduled(3, 3000.0), Duration::from_millis(1));
    }
}
