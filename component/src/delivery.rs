//! The delivery engine: fan-out of published events, signed attempts, retries on the host's
//! timer, automatic disabling, history and replay.
//!
//! **Records.** `evt:{id}` (type, body hash, matched subscriptions) and `evt:{id}:body` (the
//! raw load). `dlv:{id}` is one delivery: one event to one subscription, with every attempt
//! (binary: [`Delivery::encode`]).
//! Its id is derived from (event, subscription), so it is the same on every retry and replay,
//! and a resumed fan-out finds the deliveries it already made.
//!
//! **Due queue.** Attempts are due on whole seconds (retries) or at publish time (attempt 1).
//! Second `s` has an [`AppendLog`] `due:{s}` of delivery ids, and `duedir` lists the seconds
//! that have one. A tick reads the seconds that are due, claims each delivery by
//! compare-and-swap on its record (a lease), sends, and records the outcome. The record is
//! the truth; queue entries are hints, and stale ones are skipped. A retry's queue entry is
//! written before the record says it is due, so a crash never loses one; a crash mid-attempt
//! leaves a lease that expires and the attempt runs again (receivers dedupe by delivery id).

use crate::applog::{AppendLog, Entry};
use crate::codec::{Reader, Writer};
use crate::directory::{self, Directory};
use crate::env::Env;
use crate::error::ApiError;
use crate::events::{self, PublishError, PublishReceipt};
use crate::ids::IdKind;
use crate::keys::{self, Key};
use crate::kv::{Kv, KvError, Update, update, update_seen, update_seldom};
use crate::scheduler::TickReport;
use crate::signing;
use crate::subscriptions::{self, Status as SubStatus, Subscription};
use crate::validate;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::rc::Rc;

/// Attempts per run (the original delivery, and each replay).
pub const MAX_ATTEMPTS: usize = 3;
/// Delay before attempt 2 and before attempt 3, after the previous attempt failed.
pub const RETRY_DELAYS_MS: [u64; 2] = [60_000, 300_000];
/// `User-Agent` of every delivery.
pub const USER_AGENT: &str = concat!("edgehook/", env!("CARGO_PKG_VERSION"));
/// Most attempts one tick runs; more due work is reported as due now.
pub const MAX_ATTEMPTS_PER_TICK: usize = 2000;
/// A tick starts no batch once it has run this long (by its senders' clocks); what is left is
/// reported as due now, so the host ticks again with a fresh view (and can stop in between).
pub const TICK_TIME_BUDGET_MS: u64 = 20_000;
/// Extra lease time beyond the attempt timeout before another instance may take over.
const LEASE_MARGIN_MS: u64 = 5_000;
/// Seconds a processed queue second is kept before it is deleted (tolerates clock skew
/// between instances appending to it).
const QUEUE_GRACE_S: u64 = 60;
/// How far back a disable looks for pending deliveries to cancel.
const CANCEL_LOOKBACK: u64 = 2048;

/// Where a delivery is in its life.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    /// An attempt is due now or later.
    Pending,
    /// An attempt got a 2xx.
    Succeeded,
    /// Every attempt of the run failed (or the endpoint answered 410 Gone).
    Failed,
    /// The subscription was disabled before the delivery finished.
    Cancelled,
}

/// One attempt to deliver.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// Run number: 0 for the original delivery, 1.. for replays.
    pub run: u32,
    /// Attempt number within the run (1..=3).
    pub number: u32,
    /// When it was due (ms since the epoch).
    pub due_at: u64,
    /// When it was sent.
    pub started_at: u64,
    /// The endpoint's status code, if it answered.
    pub status_code: Option<u16>,
    /// The network error or timeout, if it did not.
    pub error: Option<String>,
    /// Time to the response head, in ms.
    pub latency_ms: u64,
    /// Whether it counted as a success.
    pub succeeded: bool,
}

/// A delivery: one event to one subscription. Stored binary ([`Delivery::encode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// `dlv_...`, fixed per (event, subscription).
    pub id: String,
    /// The event.
    pub event_id: String,
    /// Its type (the `X-Service-Event` header).
    pub event_type: String,
    /// The subscription.
    pub subscription_id: String,
    /// When it was created.
    pub created_at: u64,
    /// Where it is in its life.
    pub status: Status,
    /// Every attempt, of every run.
    pub attempts: Vec<Attempt>,
    /// Current run (0 = original, 1.. = replays).
    pub run: u32,
    /// When the next attempt is due, while pending.
    pub next_attempt_at: Option<u64>,
    /// Until when an instance holds the attempt in flight.
    pub lease_until: Option<u64>,
    /// Which tick holds it.
    pub lease_owner: Option<String>,
    /// When it reached its final state.
    pub finished_at: Option<u64>,
}

/// First byte of a delivery record ([`Delivery::encode`]): its format's version.
const DELIVERY_V1: u8 = 0xD1;

impl Status {
    fn code(self) -> u8 {
        match self {
            Status::Pending => 0,
            Status::Succeeded => 1,
            Status::Failed => 2,
            Status::Cancelled => 3,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        [
            Status::Pending,
            Status::Succeeded,
            Status::Failed,
            Status::Cancelled,
        ]
        .get(usize::from(code))
        .copied()
    }
}

impl Delivery {
    /// The stored record: `DELIVERY_V1` (0xD1), then every field in declaration order (see
    /// [`crate::codec`]), each attempt's fields in theirs. A delivery is written three times
    /// in its life at least (fan-out, claim, outcome), so it is copied rather than escaped.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(DELIVERY_V1, 160 + 48 * self.attempts.len());
        w.str(&self.id)
            .str(&self.event_id)
            .str(&self.event_type)
            .str(&self.subscription_id)
            .u64(self.created_at)
            .u8(self.status.code())
            .list(&self.attempts, |w, a| {
                w.u32(a.run)
                    .u32(a.number)
                    .u64(a.due_at)
                    .u64(a.started_at)
                    .opt(a.status_code, Writer::u16)
                    .opt(a.error.as_deref(), Writer::str)
                    .u64(a.latency_ms)
                    .bool(a.succeeded)
            })
            .u32(self.run)
            .opt(self.next_attempt_at, Writer::u64)
            .opt(self.lease_until, Writer::u64)
            .opt(self.lease_owner.as_deref(), Writer::str)
            .opt(self.finished_at, Writer::u64);
        w.finish()
    }

    /// Reads a stored record ([`Delivery::encode`]). A damaged record is an error.
    pub fn decode(bytes: &[u8]) -> Result<Delivery, KvError> {
        Self::decode_binary(bytes).ok_or_else(|| KvError("corrupt delivery record".into()))
    }

    fn decode_binary(bytes: &[u8]) -> Option<Delivery> {
        let mut r = Reader::new(bytes, DELIVERY_V1)?;
        let (id, event_id, event_type, subscription_id) = (r.str()?, r.str()?, r.str()?, r.str()?);
        let created_at = r.u64()?;
        let status = Status::from_code(r.u8()?)?;
        let attempts = r.list(32, |r| {
            Some(Attempt {
                run: r.u32()?,
                number: r.u32()?,
                due_at: r.u64()?,
                started_at: r.u64()?,
                status_code: r.opt(Reader::u16)?,
                error: r.opt(Reader::str)?,
                latency_ms: r.u64()?,
                succeeded: r.bool()?,
            })
        })?;
        let d = Delivery {
            id,
            event_id,
            event_type,
            subscription_id,
            created_at,
            status,
            attempts,
            run: r.u32()?,
            next_attempt_at: r.opt(Reader::u64)?,
            lease_until: r.opt(Reader::u64)?,
            lease_owner: r.opt(Reader::str)?,
            finished_at: r.opt(Reader::u64)?,
        };
        r.end()?;
        Some(d)
    }

    fn attempts_in_run(&self) -> usize {
        self.attempts.iter().filter(|a| a.run == self.run).count()
    }

    /// The operator view.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "eventId": self.event_id,
            "eventType": self.event_type,
            "subscriptionId": self.subscription_id,
            "status": self.status,
            "createdAt": self.created_at,
            "nextAttemptAt": self.next_attempt_at,
            "finishedAt": self.finished_at,
            "replays": self.run,
            "attempts": self.attempts,
        })
    }
}

/// A published event, as stored (`evt:{id}`; its body is stored beside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// `evt_...`.
    pub id: String,
    /// One of [`events::EVENT_TYPES`].
    pub event_type: String,
    /// When it was accepted (ms since the epoch).
    pub created_at: u64,
    /// Hex SHA-256 of the load: a retry under the same idempotency key must carry the same.
    pub body_sha256: String,
    /// The subscriptions it is delivered to (one delivery each).
    pub subscriptions: Vec<String>,
    /// Whether every delivery has been created.
    pub fanned_out: bool,
}

/// First byte of an event record ([`EventRecord::encode`]): its format's version.
const EVENT_V1: u8 = 0xE5;

impl EventRecord {
    /// The stored record: `EVENT_V1`, then every field in declaration order (see
    /// [`crate::codec`]). Every publish writes one.
    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(EVENT_V1, 128 + 32 * self.subscriptions.len());
        w.str(&self.id)
            .str(&self.event_type)
            .u64(self.created_at)
            .str(&self.body_sha256)
            .list(&self.subscriptions, |w, s| w.str(s))
            .bool(self.fanned_out);
        w.finish()
    }

    /// Reads a stored record ([`EventRecord::encode`]). Damage is an error.
    pub fn decode(bytes: &[u8]) -> Result<EventRecord, KvError> {
        Self::decode_binary(bytes).ok_or_else(|| KvError("corrupt event record".into()))
    }

    fn decode_binary(bytes: &[u8]) -> Option<EventRecord> {
        let mut r = Reader::new(bytes, EVENT_V1)?;
        let (id, event_type, created_at, body_sha256) = (r.str()?, r.str()?, r.u64()?, r.str()?);
        let subscriptions = r.list(4, Reader::str)?;
        let event = EventRecord {
            id,
            event_type,
            created_at,
            body_sha256,
            subscriptions,
            fanned_out: r.bool()?,
        };
        r.end()?;
        Some(event)
    }
}

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
    /// The status code, or the error (`timeout`, `connection refused`, ...).
    pub outcome: Result<u16, String>,
    /// Time from the start of [`Sender::send_all`] to the response head (or the error), in
    /// ms. The longest of a batch is how long the batch took: the tick's clock moves on by it.
    pub latency_ms: u64,
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
            .map(|_| SendResult {
                outcome: Err("no network".into()),
                latency_ms: 0,
            })
            .collect()
    }
}

/// The delivery id of (event, subscription).
pub fn delivery_id(event_id: &str, subscription_id: &str) -> String {
    let digest = Sha256::new()
        .chain_update(event_id)
        .chain_update("/")
        .chain_update(subscription_id)
        .finalize();
    let mut id = String::from("dlv_");
    crate::ids::push_hex(&mut id, &digest[..12]);
    id
}

/// When the attempt after `failed_attempts` failed ones is due, or `None` after the last.
/// `random` picks the jitter: up to +10 % of the delay. Retries fall on whole seconds.
pub fn retry_due(failed_at_ms: u64, failed_attempts: usize, random: u64) -> Option<u64> {
    retry_due_after(&RETRY_DELAYS_MS, failed_at_ms, failed_attempts, random)
}

/// [`retry_due`] with the delays of the `retry_delays_ms` setting (SPEC's 60 s and 300 s
/// unless an operator changes them, e.g. a test that must not wait a minute).
pub fn retry_due_after(
    delays: &[u64; 2],
    failed_at_ms: u64,
    failed_attempts: usize,
    random: u64,
) -> Option<u64> {
    let delay = *delays.get(failed_attempts.checked_sub(1)?)?;
    // Up to +10 % (short delays: within their second, which the due time is rounded up to).
    let jitter_span = (delay / 10).saturating_sub(999).max(1);
    let due = failed_at_ms + delay + random % jitter_span;
    Some(due.div_ceil(1000) * 1000)
}

fn second_of(ms: u64) -> u64 {
    ms / 1000
}

fn due_log(second: u64) -> AppendLog {
    AppendLog::new(keys::due(second))
}

fn history_log(subscription_id: &str) -> AppendLog {
    AppendLog::new(keys::subscription_deliveries(subscription_id))
}

fn retention_log(day: u64) -> AppendLog {
    AppendLog::new(keys::retention(day))
}

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// The due and retention directories as publish read them, in one batch with its listeners'
/// records: fan-out writes either only when its second or day is missing. (A directory
/// drops a second or a day only long after anyone could still add to it, so a keep decided
/// on this read is as good as one decided on a fresh one.)
struct SeenDirectories {
    due: Option<Vec<u8>>,
    retention: Option<Vec<u8>>,
}

/// Puts `item` (an event id, or the store key of an idempotency record) in the retention log
/// of the day of `at_ms`, so the tick purges it once that day is past the retention period.
/// `seen`: the retention directory as read already, if it was.
pub(crate) fn retain<K: Kv>(
    kv: &K,
    at_ms: u64,
    item: &str,
    seen: Option<Option<&[u8]>>,
) -> Result<(), KvError> {
    let day = at_ms / DAY_MS;
    retention_log(day).append(kv, &[item])?;
    days_add(kv, day, seen)
}

/// Adds a day to the retention directory (its days, each with the value 0); `seen`: the
/// directory as read already, if it was.
fn days_add<K: Kv>(kv: &K, day: u64, seen: Option<Option<&[u8]>>) -> Result<(), KvError> {
    // Every event of the day after the first finds its day there.
    let add = |cur: Option<&[u8]>| {
        if let Some(cur) = cur
            && directory::contains(cur, day)?
        {
            return Ok(Update::Keep(()));
        }
        let mut days = cur.map(directory::decode).transpose()?.unwrap_or_default();
        days.insert(day, 0);
        Ok(Update::Write(directory::encode(&days), ()))
    };
    match seen {
        Some(seen) => update_seen(kv, &keys::RETENTION_DIRECTORY, seen, add),
        None => update_seldom(kv, &keys::RETENTION_DIRECTORY, add),
    }
    .map_err(kv_from_update)
}

/// Removes a day from the retention directory.
fn days_remove<K: Kv>(kv: &K, day: u64) -> Result<(), KvError> {
    update(kv, &keys::RETENTION_DIRECTORY, |cur| {
        let mut days = cur.map(directory::decode).transpose()?.unwrap_or_default();
        if days.remove(&day).is_none() {
            return Ok(Update::Keep(()));
        }
        Ok(Update::Write(directory::encode(&days), ()))
    })
    .map_err(kv_from_update)
}

fn kv_from_update(e: crate::kv::UpdateError<KvError>) -> KvError {
    match e {
        crate::kv::UpdateError::Kv(e) | crate::kv::UpdateError::Rejected(e) => e,
        crate::kv::UpdateError::Contended => KvError("compare-and-swap contended".into()),
    }
}

/// Queues delivery ids in the seconds they are due: the entries first, then the directory
/// (`seen`: as read already, if it was). A second with no ids is neither queued nor listed.
fn enqueue<K: Kv>(
    kv: &K,
    by_second: &BTreeMap<u64, Vec<String>>,
    seen: Option<Option<&[u8]>>,
) -> Result<(), KvError> {
    let seconds: Vec<u64> = by_second
        .iter()
        .filter(|(_, ids)| !ids.is_empty())
        .map(|(second, _)| *second)
        .collect();
    if seconds.is_empty() {
        return Ok(());
    }
    for (second, ids) in by_second {
        due_log(*second).append(kv, ids)?;
    }
    // Every event of the second after the first finds its second there, by a search of
    // the record (nothing decoded: the directory lists every second of the last minute).
    let add = |cur: Option<&[u8]>| {
        if let Some(cur) = cur {
            let mut listed = true;
            for second in &seconds {
                listed &= directory::contains(cur, *second)?;
            }
            if listed {
                return Ok(Update::Keep(()));
            }
        }
        let mut dir = cur.map(directory::decode).transpose()?.unwrap_or_default();
        for second in &seconds {
            dir.entry(*second).or_insert(0);
        }
        Ok(Update::Write(directory::encode(&dir), ()))
    };
    match seen {
        Some(seen) => update_seen(kv, &keys::DUE_DIRECTORY, seen, add),
        None => update_seldom(kv, &keys::DUE_DIRECTORY, add),
    }
    .map_err(kv_from_update)
}

/// Accepts an event: stores it once, creates one delivery per active subscription listening
/// to its type, and queues attempt 1 of each as due now.
///
/// With an `idempotency_key`, the event id is derived from it: publishing again with the
/// same key and the same body returns the same event (finishing a fan-out that failed
/// half-way) instead of delivering twice.
pub fn publish<K: Kv>(
    env: &Env<'_, K>,
    event_type: &str,
    load: &[u8],
    idempotency_key: Option<&str>,
) -> Result<PublishReceipt, PublishError> {
    publish_inner(env, event_type, load, idempotency_key, false).map(|(receipt, _)| receipt)
}

/// [`publish`], and for a new event the deliveries it made, with what attempt 1 needs
/// ([`Prepared`]): the invocation that runs attempt 1 at once reads none of it again.
pub fn publish_prepared<K: Kv>(
    env: &Env<'_, K>,
    event_type: &str,
    load: &[u8],
    idempotency_key: Option<&str>,
) -> Result<(PublishReceipt, Option<Prepared>), PublishError> {
    publish_inner(env, event_type, load, idempotency_key, true)
}

/// Publishes; `prepare`: also hand back what attempt 1 needs (a copy of the body and the
/// subscriptions), which only a caller that runs attempt 1 at once wants.
fn publish_inner<K: Kv>(
    env: &Env<'_, K>,
    event_type: &str,
    load: &[u8],
    idempotency_key: Option<&str>,
    prepare: bool,
) -> Result<(PublishReceipt, Option<Prepared>), PublishError> {
    events::validate(event_type, load)?;
    let store = |e: KvError| PublishError::StoreUnavailable(e.0);
    let body_sha256 = crate::ids::hex(&Sha256::digest(load));
    let event_id = match idempotency_key {
        Some(k) => {
            let digest = Sha256::new()
                .chain_update("ingest/")
                .chain_update(k)
                .finalize();
            let mut id = String::from("evt_");
            crate::ids::push_hex(&mut id, &digest[..12]);
            id
        }
        None => IdKind::Event.generate(env.entropy),
    };
    // Without a key the id is fresh: there is nothing to find.
    let existing = match idempotency_key {
        Some(_) => env.kv.get(&keys::event(&event_id)).map_err(store)?,
        None => None,
    };
    let replayed = existing.is_some();
    let mut listeners = Vec::new();
    let mut seen = None;
    let event = match existing {
        Some(existing) => {
            let existing = EventRecord::decode(&existing).map_err(store)?;
            if existing.event_type != event_type || existing.body_sha256 != body_sha256 {
                return Err(PublishError::Conflict(
                    "This Idempotency-Key was already used for a different event. Use a new key for a new event.".into(),
                ));
            }
            existing
        }
        None => {
            let (found, directories) = active_listeners(env, event_type).map_err(store)?;
            (listeners, seen) = (found, Some(directories));
            let event = EventRecord {
                id: event_id.clone(),
                event_type: event_type.to_owned(),
                created_at: env.now_ms,
                body_sha256,
                subscriptions: listeners.iter().map(|s| s.id.clone()).collect(),
                fanned_out: false,
            };
            env.kv
                .set(&keys::event_body(&event_id), load)
                .map_err(store)?;
            // A keyed event is recorded before its fan-out, so a retry with the key finds
            // it and resumes. A key-less one cannot be retried: its record is written once,
            // when its fan-out is done.
            if idempotency_key.is_some() {
                env.kv
                    .set(&keys::event(&event_id), &event.encode())
                    .map_err(store)?;
            }
            event
        }
    };
    let origin = match (replayed, idempotency_key) {
        (true, _) => Origin::Resumed,
        (false, Some(_)) => Origin::Keyed,
        (false, None) => Origin::Fresh,
    };
    let written = if event.fanned_out {
        Vec::new()
    } else {
        fan_out(env, &event, origin, seen.as_ref()).map_err(store)?
    };
    // Only a new event's listeners were loaded here; a resumed one is run from the store.
    let prepared = (prepare && !replayed).then(|| Prepared {
        body: Rc::new(load.to_vec()),
        items: written
            .into_iter()
            .filter_map(|w| {
                let sub = listeners
                    .iter()
                    .find(|s| s.id == w.delivery.subscription_id)?
                    .clone();
                Some((w, sub))
            })
            .collect(),
    });
    let deliveries = u32::try_from(event.subscriptions.len()).unwrap_or(u32::MAX);
    let receipt = PublishReceipt {
        event_id,
        deliveries,
        next_due_ms: (deliveries > 0).then_some(event.created_at),
        replayed,
    };
    Ok((receipt, prepared))
}

/// A delivery record as fan-out wrote it: the record and its exact bytes, so a claim that
/// finds those bytes unchanged needs not parse them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    delivery: Delivery,
    bytes: Vec<u8>,
}

/// What attempt 1 of a new event needs, handed from [`publish_prepared`] to [`run_now`] in
/// the same invocation: the deliveries fan-out wrote (still claimed by compare-and-swap
/// against the store before they are sent), their subscriptions as publish read them, and
/// the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    body: Rc<Vec<u8>>,
    items: Vec<(Written, Subscription)>,
}

/// The active subscriptions listening to `event_type`, and the due and retention
/// directories, read in the same batch as their records.
fn active_listeners<K: Kv>(
    env: &Env<'_, K>,
    event_type: &str,
) -> Result<(Vec<Subscription>, SeenDirectories), KvError> {
    let ids = subscriptions::fanout_ids(env, event_type).map_err(api_to_kv)?;
    let mut batch: Vec<Key> = ids.iter().map(|id| keys::subscription(id)).collect();
    batch.push(keys::DUE_DIRECTORY.clone());
    batch.push(keys::RETENTION_DIRECTORY.clone());
    let mut values = env.kv.get_many(&batch)?;
    let seen = SeenDirectories {
        retention: values.pop().flatten(),
        due: values.pop().flatten(),
    };
    let listeners = values
        .into_iter()
        .flatten()
        .filter_map(|b| Subscription::decode(&b).ok())
        .filter(|s| s.status == SubStatus::Active && s.event_types.iter().any(|t| t == event_type))
        .collect();
    Ok((listeners, seen))
}

fn api_to_kv(e: ApiError) -> KvError {
    KvError(e.log.unwrap_or(e.message))
}

/// Where the event of a fan-out comes from, which decides what the fan-out must check in
/// the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A key-less publish: the event id is fresh and random, so no other call knows it.
    /// There are no deliveries to find and none to race with: records are plainly written.
    Fresh,
    /// A new event under an idempotency key: a concurrent publish with the same key may be
    /// writing the same deliveries (and running them), so each record is created only if
    /// absent.
    Keyed,
    /// An event an earlier try began: the deliveries it made are skipped.
    Resumed,
}

/// Creates the event's deliveries. Every step is idempotent, so a failed fan-out can run
/// again and resumes where it stopped: queue entries first, then per delivery its history
/// entry and the record that makes it real.
fn fan_out<K: Kv>(
    env: &Env<'_, K>,
    event: &EventRecord,
    origin: Origin,
    seen: Option<&SeenDirectories>,
) -> Result<Vec<Written>, KvError> {
    let all: Vec<(String, String)> = event
        .subscriptions
        .iter()
        .map(|s| (s.clone(), delivery_id(&event.id, s)))
        .collect();
    // A resumed fan-out skips the deliveries an earlier try already made (their history and
    // queue entries were written before their record), so retries make progress.
    // A new event has no deliveries yet: only a resumed fan-out looks.
    let record_keys: Vec<Key> = all.iter().map(|(_, d)| keys::delivery(d)).collect();
    let existing = match origin {
        Origin::Resumed => env.kv.get_many(&record_keys)?,
        Origin::Fresh | Origin::Keyed => vec![None; record_keys.len()],
    };
    let todo: Vec<&(String, String)> = all
        .iter()
        .zip(existing)
        .filter(|(_, record)| record.is_none())
        .map(|(pair, _)| pair)
        .collect();
    // Queued in the current second (a new event's own). A resumed fan-out may run long
    // after its event's second was settled: an entry there, read by a tick before its
    // record below is written, would be taken for a failed publish's leftover and passed.
    // Its records are still due at the event's time, that is at once. (Never a second
    // before the event's: due later than its entry's second, an entry counts as stale.)
    let mut queue = BTreeMap::new();
    queue.insert(
        second_of(env.now_ms.max(event.created_at)),
        todo.iter().map(|(_, d)| d.clone()).collect::<Vec<_>>(),
    );
    enqueue(env.kv, &queue, seen.map(|s| s.due.as_deref()))?;
    // Then one delivery at a time (history entry, then the record that makes it real), so a
    // failure part-way keeps every delivery finished before it.
    let mut written = Vec::with_capacity(todo.len());
    for (sub, dlv) in todo {
        history_log(sub).append(env.kv, std::slice::from_ref(dlv))?;
        let record = Delivery {
            id: dlv.clone(),
            event_id: event.id.clone(),
            event_type: event.event_type.clone(),
            subscription_id: sub.clone(),
            created_at: event.created_at,
            status: Status::Pending,
            attempts: Vec::new(),
            run: 0,
            next_attempt_at: Some(event.created_at),
            lease_until: None,
            lease_owner: None,
            finished_at: None,
        };
        let bytes = record.encode();
        let wrote = match origin {
            Origin::Fresh => {
                env.kv.set(&keys::delivery(dlv), &bytes)?;
                true
            }
            Origin::Keyed | Origin::Resumed => update(env.kv, &keys::delivery(dlv), |cur| {
                Ok::<_, KvError>(match cur {
                    Some(_) => Update::Keep(false),
                    None => Update::Write(bytes.clone(), true),
                })
            })
            .map_err(kv_from_update)?,
        };
        if wrote {
            written.push(Written {
                delivery: record,
                bytes,
            });
        }
    }
    retain(
        env.kv,
        event.created_at,
        &event.id,
        seen.map(|s| s.retention.as_deref()),
    )?;
    let mut done = event.clone();
    done.fanned_out = true;
    env.kv.set(&keys::event(&event.id), &done.encode())?;
    Ok(written)
}

/// Reads a delivery record.
pub fn load<K: Kv>(env: &Env<'_, K>, id: &str) -> Result<Option<Delivery>, ApiError> {
    if !IdKind::Delivery.matches(id) {
        return Ok(None);
    }
    match env.kv.get(&keys::delivery(id))? {
        None => Ok(None),
        Some(b) => Delivery::decode(&b).map(Some).map_err(ApiError::internal),
    }
}

/// What a tick decided for one claimed delivery.
struct Claimed {
    delivery: Delivery,
    due_at: u64,
    /// The record as the claim wrote it: if the store still holds exactly these bytes when
    /// the outcome is recorded, they need not be parsed again.
    bytes: Vec<u8>,
}

/// A tick's view of the time. `Env::now_ms` is read once, when the call starts, but a tick
/// runs batch after batch, each up to the attempt timeout: leases, signature timestamps,
/// attempt times and retry schedules must use the time a batch really starts. The clock moves
/// on by how long each batch took, as its [`Sender`] measured it (the core reads no clock).
struct TickClock {
    start_ms: u64,
    elapsed_ms: std::cell::Cell<u64>,
}

impl TickClock {
    fn now(&self) -> u64 {
        self.start_ms + self.elapsed_ms.get()
    }

    fn out_of_time(&self) -> bool {
        self.elapsed_ms.get() >= TICK_TIME_BUDGET_MS
    }

    /// `env` as of now.
    fn env<'a, K: Kv>(&self, env: &Env<'a, K>) -> Env<'a, K> {
        Env {
            now_ms: self.now(),
            kv: env.kv,
            settings: env.settings,
            entropy: env.entropy,
        }
    }
}

/// The due-queue directory: each second with a queue, and how many of its entries a tick has
/// already seen through (a watermark on entry numbers), so finished seconds cost one read.
fn read_directory<K: Kv>(kv: &K) -> Result<Directory, KvError> {
    kv.get(&keys::DUE_DIRECTORY)?
        .map(|b| directory::decode(&b))
        .transpose()
        .map(Option::unwrap_or_default)
}

/// Runs the attempts a request has just made due — attempt 1 of every delivery of an
/// accepted event, or the first attempt of a replay — right after its response is out, in
/// batches of `max_concurrency`. Only those deliveries: their records are read directly,
/// not found by scanning the due queue, so this costs the same whatever else is queued
/// (retries and anything this misses are the next tick's, through their queue entries).
pub fn run_now<K: Kv>(env: &Env<'_, K>, sender: &dyn Sender, work: &RunNow) -> TickReport {
    let mut report = TickReport::default();
    let ids: Vec<String> = match work {
        RunNow::Delivery(id) => vec![id.clone()],
        RunNow::Prepared(p) => p.items.iter().map(|(w, _)| w.delivery.id.clone()).collect(),
        RunNow::Event(event_id) => match env.kv.get(&keys::event(event_id)) {
            Ok(Some(b)) => match EventRecord::decode(&b) {
                Ok(event) => event
                    .subscriptions
                    .iter()
                    .map(|sub| delivery_id(event_id, sub))
                    .collect(),
                Err(_) => return report,
            },
            _ => return report,
        },
    };
    let prepared = match work {
        RunNow::Prepared(p) => Some(p.as_ref()),
        _ => None,
    };
    let tick_id = IdKind::Request.generate(env.entropy);
    let clock = TickClock {
        start_ms: env.now_ms,
        elapsed_ms: std::cell::Cell::new(0),
    };
    let batch_size = env.settings.max_concurrency.max(1) as usize;
    for (n, batch) in ids
        .chunks(batch_size)
        .take(MAX_ATTEMPTS_PER_TICK / batch_size)
        .enumerate()
    {
        if clock.out_of_time() {
            break; // the rest is the tick's, through the queue
        }
        let known = prepared.map(|p| {
            let start = n * batch_size;
            (&p.items[start..start + batch.len()], &p.body)
        });
        // A failed batch is left to the tick (its queue entries are still there).
        let _ = run_batch(
            &clock.env(env),
            sender,
            &tick_id,
            batch,
            known,
            &clock,
            &mut report,
        );
    }
    report
}

/// What a batch of [`run_now`] already knows: the prepared deliveries matching its ids, one
/// for one, and their body.
type Known<'a> = Option<(&'a [(Written, Subscription)], &'a Rc<Vec<u8>>)>;

/// The deliveries a request made due at once (see [`run_now`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunNow {
    /// Attempt 1 of every delivery of this accepted event.
    Event(String),
    /// Attempt 1 of every delivery of a new event, with what publish already read.
    Prepared(Box<Prepared>),
    /// The replayed delivery.
    Delivery(String),
}

/// Runs every attempt that is due now (up to [`MAX_ATTEMPTS_PER_TICK`]), purges records past
/// retention, and reports when the next attempt is due. Store failures are not fatal: what
/// could not be done stays queued for a later tick.
pub fn tick<K: Kv>(env: &Env<'_, K>, sender: &dyn Sender) -> TickReport {
    let mut report = TickReport::default();
    let tick_id = IdKind::Request.generate(env.entropy);
    let now = env.now_ms;
    let Ok(directory) = read_directory(env.kv) else {
        report.next_due_ms = Some(now + 1000);
        return report;
    };
    let mut next_due: Option<u64> = None;
    let mut note_due = |t: u64| next_due = Some(next_due.map_or(t, |n| n.min(t)));
    let due: Vec<(u64, u64)> = directory
        .iter()
        .map(|(s, seen)| (*s, *seen))
        .filter(|(s, _)| s * 1000 <= now)
        .collect();
    // Each due second's length, read through its counter (`increment(key, 0)`: a counter's
    // bytes are the host's own, so never `get`).
    let lens: Result<Vec<u64>, KvError> =
        due.iter().map(|(s, _)| due_log(*s).len(env.kv)).collect();
    let Ok(lens) = lens else {
        report.next_due_ms = Some(now + 1000);
        return report;
    };
    let clock = TickClock {
        start_ms: now,
        elapsed_ms: std::cell::Cell::new(0),
    };
    let mut seen_now: Vec<(u64, u64)> = Vec::new();
    let mut expired: Vec<u64> = Vec::new();
    // Read every due second first, then send their candidates together: batches span
    // seconds, so one slow attempt in each second does not cost a whole batch per second.
    let mut scans: Vec<SecondScan> = Vec::new();
    let mut candidates = 0;
    for ((second, seen), len) in due.iter().copied().zip(lens) {
        if len <= seen {
            if (second + QUEUE_GRACE_S) * 1000 < now {
                expired.push(second);
            }
            continue;
        }
        if candidates >= MAX_ATTEMPTS_PER_TICK {
            note_due(now); // enough for this tick; the next one reads on
            continue;
        }
        match scan_second(env, second, seen, len) {
            Ok(scan) => {
                candidates += scan.candidates.len();
                scans.push(scan);
            }
            Err(_) => note_due(now + 1000),
        }
    }
    run_candidates(env, sender, &tick_id, &mut scans, &clock, &mut report);
    for scan in &scans {
        let outcome = scan.outcome(now);
        seen_now.push((scan.second, outcome.seen));
        if let Some(t) = outcome.unfinished_until {
            note_due(t);
        }
    }
    for second in &expired {
        let _ = due_log(*second).delete_all(env.kv);
    }
    // Record the watermarks and drop expired seconds; a concurrent enqueue only ever adds.
    let _ = update(env.kv, &keys::DUE_DIRECTORY, |cur| {
        let mut dir = cur.map(directory::decode).transpose()?.unwrap_or_default();
        for (second, seen) in &seen_now {
            if let Some(entry) = dir.get_mut(second) {
                *entry = (*entry).max(*seen);
            }
        }
        for second in &expired {
            if dir.get(second) == directory.get(second) {
                dir.remove(second);
            }
        }
        if seen_now.is_empty() && expired.is_empty() {
            return Ok(Update::Keep(()));
        }
        Ok::<_, KvError>(Update::Write(directory::encode(&dir), ()))
    });
    let _ = purge_expired(env);
    // Read the directory again: this tick queued retries into later seconds.
    match read_directory(env.kv) {
        Ok(dir) => {
            if let Some(s) = dir.keys().find(|s| **s * 1000 > now) {
                note_due(*s * 1000);
            }
        }
        Err(_) => note_due(now + 1000),
    }
    report.next_due_ms = next_due;
    report
}

struct SecondOutcome {
    /// When something in this second can next be worked on, if anything is left.
    unfinished_until: Option<u64>,
    /// Entries up to this number need no further look.
    seen: u64,
}

/// One due second as a tick read it: its candidates, and what keeps its watermark back.
struct SecondScan {
    second: u64,
    /// The highest entry number the watermark may reach (no gap below it).
    ceiling: u64,
    /// Whether an entry below the last one is still being written.
    gap: bool,
    /// Deliveries to attempt: (entry number, id, whether its last attempt timed out).
    candidates: Vec<(u64, String, bool)>,
    unfinished_until: Option<u64>,
    first_unfinished: Option<u64>,
}

impl SecondScan {
    /// Entry `seq` is not done with until `until`.
    fn hold(&mut self, seq: u64, until: u64) {
        self.unfinished_until = Some(self.unfinished_until.map_or(until, |u| u.min(until)));
        self.first_unfinished = Some(self.first_unfinished.map_or(seq, |f| f.min(seq)));
    }

    fn outcome(&self, now: u64) -> SecondOutcome {
        let mut unfinished_until = self.unfinished_until;
        if self.gap {
            unfinished_until = Some(unfinished_until.map_or(now + 1000, |u| u.min(now + 1000)));
        }
        SecondOutcome {
            unfinished_until,
            seen: self
                .first_unfinished
                .map_or(self.ceiling, |f| self.ceiling.min(f - 1)),
        }
    }
}

/// Reads a due second's new entries and their records: which deliveries are due now, and
/// which entries must stay unseen (records not written yet, leases held). `len`: its
/// counter, as the tick read it.
fn scan_second<K: Kv>(
    env: &Env<'_, K>,
    second: u64,
    seen: u64,
    len: u64,
) -> Result<SecondScan, KvError> {
    let now = env.now_ms;
    let entries: Vec<Entry<String>> = due_log(second).read(env.kv, seen, usize::MAX)?;
    let last_seq = entries.iter().map(|e| e.seq).max().unwrap_or(seen);
    // Past the grace period nothing more arrives in this second: what is missing by then was
    // lost by an appender that failed, not still on its way.
    let settled = (second + QUEUE_GRACE_S) * 1000 < now;
    // Concurrent appenders reserve numbers first and write pages after, so entry 52 can be
    // readable before entry 51. The watermark never passes a gap while one may still fill.
    let mut contiguous = seen;
    for e in &entries {
        if e.seq == contiguous + 1 {
            contiguous = e.seq;
        } else if e.seq > contiguous + 1 {
            break;
        }
    }
    // Settled, every number handed out is either read or lost, the last ones too (an
    // appender that reserved them and failed to write its page): the watermark reaches the
    // counter, or the second would never be found finished and expire.
    let mut scan = SecondScan {
        second,
        ceiling: if settled {
            len.max(last_seq)
        } else {
            contiguous
        },
        gap: !settled && contiguous < last_seq,
        candidates: Vec::new(),
        unfinished_until: None,
        first_unfinished: None,
    };
    // One look per delivery, at its first entry in this second.
    let mut first_seq: Vec<(String, u64)> = entries.into_iter().map(|e| (e.item, e.seq)).collect();
    first_seq.sort_unstable();
    first_seq.dedup_by(|later, first| later.0 == first.0);
    let keys: Vec<Key> = first_seq.iter().map(|(id, _)| keys::delivery(id)).collect();
    let records = env.kv.get_many(&keys)?;
    // A queue entry is written before its delivery record: an entry without a record is a
    // fan-out still in progress (look again shortly) unless the second is settled, when it
    // can only be left over from a publish that failed.
    for ((_, seq), record) in first_seq.iter().zip(records) {
        let Some(d) = record.and_then(|r| Delivery::decode(&r).ok()) else {
            if !settled {
                scan.hold(*seq, now + 1000);
            }
            continue;
        };
        if d.status != Status::Pending {
            // A replay queues its entry (in its own second) before it makes the record
            // pending again, so a record that finished before this entry's second began
            // may be a replay in progress: like a missing record, the entry waits until
            // the second is settled. A record that finished within the entry's second is
            // taken as the end of the run the entry was queued for (the common case, which
            // must not hold every second for its grace period): a replay in the very second
            // its delivery finished is not told apart by this. Nor is a cancelled one held:
            // its subscription is disabled for good, so it is never replayed, and its
            // retries' entries in later seconds would each hold their second for nothing.
            let replayable = matches!(d.status, Status::Succeeded | Status::Failed);
            if !settled && replayable && d.finished_at.is_some_and(|f| f < second * 1000) {
                scan.hold(*seq, now + 1000);
            }
            continue;
        }
        let Some(due) = d.next_attempt_at else {
            continue;
        };
        if second_of(due) > second {
            continue; // rescheduled into a later second
        }
        match d.lease_until {
            Some(until) if until > now => scan.hold(*seq, until),
            _ => {
                let slow = d
                    .attempts
                    .last()
                    .is_some_and(|a| a.run == d.run && a.error.as_deref() == Some("timeout"));
                scan.candidates.push((*seq, d.id, slow));
            }
        }
    }
    scan.candidates.sort_unstable_by_key(|(seq, _, _)| *seq);
    Ok(scan)
}

/// Sends the candidates of every scanned second, `max_concurrency` at a time. A batch lasts
/// as long as its slowest attempt, so deliveries whose last attempt timed out go last, in
/// batches of their own: one endpoint that hangs does not hold up everyone's retries. What is
/// not sent (budget, time, store failures, leases held by others, not due yet) holds its
/// second back.
fn run_candidates<K: Kv>(
    env: &Env<'_, K>,
    sender: &dyn Sender,
    tick_id: &str,
    scans: &mut [SecondScan],
    clock: &TickClock,
    report: &mut TickReport,
) {
    let now = env.now_ms;
    // (scan, entry number, id, slow), fast ones first, oldest second first; one per id.
    let mut work: Vec<(usize, u64, String, bool)> = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    for (i, scan) in scans.iter().enumerate() {
        for (seq, id, slow) in &scan.candidates {
            if ids.insert(id.as_str()) {
                work.push((i, *seq, id.clone(), *slow));
            }
        }
    }
    work.sort_by_key(|(_, _, _, slow)| *slow);
    let mut budget = MAX_ATTEMPTS_PER_TICK;
    let batch_size = env.settings.max_concurrency.max(1) as usize;
    let mut start = 0;
    while start < work.len() {
        // A batch never mixes slow and fast deliveries.
        let slow = work[start].3;
        let end = (start + batch_size).min(work.len());
        let end = work[start..end]
            .iter()
            .position(|w| w.3 != slow)
            .map_or(end, |p| start + p);
        let batch = &work[start..end];
        start = end;
        if budget < batch.len() || clock.out_of_time() {
            for (i, seq, _, _) in batch {
                scans[*i].hold(*seq, now);
            }
            continue;
        }
        budget -= batch.len();
        let ids: Vec<String> = batch.iter().map(|(_, _, id, _)| id.clone()).collect();
        match run_batch(&clock.env(env), sender, tick_id, &ids, None, clock, report) {
            Ok(waits) => {
                for (id, wait) in waits {
                    hold_entries(scans, &id, wait);
                }
            }
            Err(_) => {
                for (i, seq, _, _) in batch {
                    scans[*i].hold(*seq, now + 1000);
                }
            }
        }
    }
}

/// Holds back, in every scanned second, the entries of a delivery a batch left unsent
/// because of `wait` (each second's own entry: a delivery listed in two seconds is sent
/// through the first, and the other must not be passed either while the delivery waits).
fn hold_entries(scans: &mut [SecondScan], id: &str, wait: Wait) {
    for scan in scans.iter_mut() {
        let seqs: Vec<u64> = scan
            .candidates
            .iter()
            .filter(|(_, c, _)| c == id)
            .map(|(seq, _, _)| *seq)
            .collect();
        for seq in seqs {
            match wait {
                // Another tick holds it: it may die mid-attempt, so the second is not done
                // with the entry until the lease runs out.
                Wait::Leased(until) => scan.hold(seq, until),
                // Due later in this second: sent by a tick that reads a later clock.
                Wait::Due(due) if second_of(due) <= scan.second => scan.hold(seq, due),
                // Due in a later second, whose own entry stands for it: this one is stale.
                Wait::Due(_) => {}
            }
        }
    }
}

/// Why a batch left a delivery it was given unsent for now, though its queue entry is not
/// done with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Another tick holds its lease until then.
    Leased(u64),
    /// It is pending but due only then: a publish (or replay) made it due after this tick
    /// read its clock, within the second the tick is scanning.
    Due(u64),
}

/// What a claim found.
enum Claim {
    /// Ours now.
    Claimed(Box<Claimed>),
    /// Not to be sent now, and not done with either.
    Wait(Wait),
    /// Nothing to do (finished, gone).
    Skip,
}

/// Claims, sends and records one batch of due deliveries, concurrently; `env.now_ms` is when
/// the batch starts. Moves `clock` on by the time the sending took. Returns the deliveries
/// that are not done with: left unsent (held by another tick, or not due yet), or sent
/// while another tick took them over.
fn run_batch<K: Kv>(
    env: &Env<'_, K>,
    sender: &dyn Sender,
    tick_id: &str,
    ids: &[String],
    known: Known<'_>,
    clock: &TickClock,
    report: &mut TickReport,
) -> Result<Vec<(String, Wait)>, KvError> {
    let now = env.now_ms;
    // Which of `ids` each claimed delivery is.
    let mut claimed_at: Vec<usize> = Vec::new();
    let lease_until = now + env.settings.attempt_timeout_ms + LEASE_MARGIN_MS;
    let mut claimed: Vec<Claimed> = Vec::new();
    let mut held: Vec<(String, Wait)> = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let written = known.map(|(items, _)| &items[i].0);
        let outcome = update(env.kv, &keys::delivery(id), |cur| {
            let Some(bytes) = cur else {
                return Ok(Update::Keep(Claim::Skip));
            };
            // Unchanged since fan-out wrote it in this invocation: no need to parse it.
            let mut d: Delivery = match written.filter(|w| w.bytes == bytes) {
                Some(w) => w.delivery.clone(),
                None => Delivery::decode(bytes)?,
            };
            let due = match d.next_attempt_at {
                Some(due) if d.status == Status::Pending => due,
                _ => return Ok(Update::Keep(Claim::Skip)),
            };
            if let Some(until) = d.lease_until.filter(|u| *u > now) {
                return Ok(Update::Keep(Claim::Wait(Wait::Leased(until))));
            }
            if due > now {
                // Made due after this tick read its clock: a publish later in the same
                // second enqueued it before the tick scanned that second. Not sent now, and
                // its entry must wait for it (else the watermark passes the only pointer).
                return Ok(Update::Keep(Claim::Wait(Wait::Due(due))));
            }
            d.lease_until = Some(lease_until);
            d.lease_owner = Some(tick_id.to_owned());
            let bytes = d.encode();
            Ok(Update::Write(
                bytes.clone(),
                Claim::Claimed(Box::new(Claimed {
                    delivery: d,
                    due_at: due,
                    bytes,
                })),
            ))
        })
        .map_err(kv_from_update)?;
        match outcome {
            Claim::Claimed(c) => {
                claimed.push(*c);
                claimed_at.push(i);
            }
            Claim::Wait(wait) => held.push((id.clone(), wait)),
            Claim::Skip => {}
        }
    }
    if claimed.is_empty() {
        return Ok(held);
    }
    let sub_ids: Vec<String> = claimed
        .iter()
        .map(|c| c.delivery.subscription_id.clone())
        .collect();
    // Publish read the subscriptions of a prepared batch moments ago, in this invocation.
    let subs = match known {
        Some((items, _)) => claimed_at
            .iter()
            .map(|i| Some(items[*i].1.clone()))
            .collect(),
        None => subscriptions::load_many(env, &sub_ids).map_err(api_to_kv)?,
    };
    let mut bodies: Vec<(String, Rc<Vec<u8>>)> = Vec::new();
    if let Some(((w, _), body)) = known.and_then(|(items, body)| Some((items.first()?, body))) {
        bodies.push((w.delivery.event_id.clone(), body.clone()));
    }
    let mut to_send: Vec<(usize, Outgoing)> = Vec::new();
    let mut results: Vec<Option<SendResult>> = vec![None; claimed.len()];
    let mut cancelled = vec![false; claimed.len()];
    for (i, (c, sub)) in claimed.iter().zip(&subs).enumerate() {
        let Some(sub) = sub.as_ref().filter(|s| s.status == SubStatus::Active) else {
            cancelled[i] = true;
            continue;
        };
        let body = match bodies.iter().find(|(e, _)| *e == c.delivery.event_id) {
            Some((_, b)) => b.clone(),
            None => {
                let Some(b) = env.kv.get(&keys::event_body(&c.delivery.event_id))? else {
                    cancelled[i] = true;
                    continue;
                };
                let b = Rc::new(b);
                bodies.push((c.delivery.event_id.clone(), b.clone()));
                b
            }
        };
        let policy = env.settings.target_policy();
        if !policy.allows_all() && validate::target_url(&sub.url, policy).is_err() {
            // Created while private targets or http were allowed, and they no longer are: the
            // attempt fails here, before anything is sent (SSRF check at send time).
            results[i] = Some(SendResult {
                outcome: Err(DESTINATION_REFUSED.into()),
                latency_ms: 0,
            });
            continue;
        }
        match outgoing(env, &c.delivery, sub, body) {
            Some(req) => to_send.push((i, req)),
            None => cancelled[i] = true,
        }
    }
    let requests: Vec<Outgoing> = to_send.iter().map(|(_, r)| r.clone()).collect();
    let sent = sender.send_all(&requests, env.settings.attempt_timeout_ms);
    let took = sent.iter().map(|r| r.latency_ms).max().unwrap_or(0);
    clock.elapsed_ms.set(clock.elapsed_ms.get() + took);
    for ((i, _), result) in to_send.iter().zip(sent) {
        results[*i] = Some(result);
    }
    held.extend(record_outcomes(
        env, tick_id, claimed, subs, results, cancelled, report,
    )?);
    Ok(held)
}

/// The error of an attempt refused before sending: the target is not public and private
/// targets are not allowed (the same words the shell uses for a host's refusal).
pub const DESTINATION_REFUSED: &str = "destination not allowed";

/// The signed request for one attempt, or `None` if the stored URL no longer parses.
fn outgoing<K: Kv>(
    env: &Env<'_, K>,
    d: &Delivery,
    sub: &Subscription,
    body: Rc<Vec<u8>>,
) -> Option<Outgoing> {
    let url = validate::target_url(&sub.url, validate::TargetPolicy::OPEN).ok()?;
    let timestamp = env.now_ms / 1000;
    let signature = signing::sign(&sub.signing_secret.0, timestamp, &body);
    let authority = match url.port {
        Some(p) => format!("{}:{p}", url.host),
        None => url.host.clone(),
    };
    Some(Outgoing {
        scheme: url.scheme,
        authority,
        path_and_query: url.path_and_query,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("content-length".into(), body.len().to_string()),
            ("user-agent".into(), USER_AGENT.into()),
            ("x-service-delivery-id".into(), d.id.clone()),
            ("x-service-event".into(), d.event_type.clone()),
            ("x-service-timestamp".into(), timestamp.to_string()),
            ("x-service-signature".into(), signature),
        ],
        body,
    })
}

/// What one attempt did to its delivery.
enum Verdict {
    Succeeded,
    Retry(u64),
    Failed { gone: bool },
    Cancelled,
}

/// What writing one outcome found.
enum Recorded {
    /// The outcome is in the record.
    Written,
    /// Nothing to write: the delivery is finished, or gone.
    Nothing,
    /// Our lease ran out during the attempt and another tick claimed the delivery: that
    /// tick records (it may die first), so the entry waits as for any lease held.
    Lost(Option<Wait>),
}

/// Writes each claimed delivery's outcome (and what follows from it: retries queued,
/// streaks, disabling). Returns the deliveries another tick took over meanwhile, whose queue
/// entries are not done with.
fn record_outcomes<K: Kv>(
    env: &Env<'_, K>,
    tick_id: &str,
    claimed: Vec<Claimed>,
    subs: Vec<Option<Subscription>>,
    results: Vec<Option<SendResult>>,
    cancelled: Vec<bool>,
    report: &mut TickReport,
) -> Result<Vec<(String, Wait)>, KvError> {
    let now = env.now_ms;
    let mut verdicts = Vec::with_capacity(claimed.len());
    let mut retries: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for ((c, result), cancel) in claimed.iter().zip(&results).zip(&cancelled) {
        let verdict = match (cancel, result) {
            (true, _) | (false, None) => Verdict::Cancelled,
            (false, Some(r)) => match r.outcome {
                Ok(code) if (200..300).contains(&code) => Verdict::Succeeded,
                Ok(410) => Verdict::Failed { gone: true },
                _ => match retry_due_after(
                    &env.settings.retry_delays_ms,
                    now,
                    c.delivery.attempts_in_run() + 1,
                    env.random_below(u64::MAX),
                ) {
                    Some(due) => {
                        retries
                            .entry(second_of(due))
                            .or_default()
                            .push(c.delivery.id.clone());
                        Verdict::Retry(due)
                    }
                    None => Verdict::Failed { gone: false },
                },
            },
        };
        verdicts.push(verdict);
    }
    // Queue entries for retries first: a crash after this leaves a hint, never a lost retry.
    // A store hiccup gets two more tries; if the queue still cannot be written, the retries
    // are not recorded (their attempts run again when the lease expires) but every other
    // outcome is.
    let queued = (0..3).any(|_| enqueue(env.kv, &retries, None).is_ok());
    let mut failure: Option<KvError> = (!queued).then(|| KvError("could not queue retries".into()));
    let mut lost: Vec<(String, Wait)> = Vec::new();
    // (subscription, any success) per subscription touched by this batch.
    let mut streaks: Vec<(String, bool)> = Vec::new();
    let mut note_streak =
        |sub: &str, success: bool| match streaks.iter_mut().find(|(s, _)| s == sub) {
            Some((_, any)) => *any |= success,
            None => streaks.push((sub.to_owned(), success)),
        };
    for ((c, result), verdict) in claimed.iter().zip(results).zip(&verdicts) {
        if !queued && matches!(verdict, Verdict::Retry(_)) {
            continue;
        }
        let attempt = result.map(|r| Attempt {
            run: c.delivery.run,
            number: u32::try_from(c.delivery.attempts_in_run() + 1).unwrap_or(u32::MAX),
            due_at: c.due_at,
            started_at: now,
            status_code: r.outcome.as_ref().ok().copied(),
            error: r.outcome.as_ref().err().cloned(),
            latency_ms: r.latency_ms,
            succeeded: matches!(verdict, Verdict::Succeeded),
        });
        let written = update(env.kv, &keys::delivery(&c.delivery.id), |cur| {
            let Some(bytes) = cur else {
                return Ok(Update::Keep(Recorded::Nothing));
            };
            // Unchanged since the claim wrote it (the rule): no need to parse it.
            let mut d: Delivery = match bytes == c.bytes.as_slice() {
                true => c.delivery.clone(),
                false => Delivery::decode(bytes)?,
            };
            if d.status != Status::Pending {
                return Ok(Update::Keep(Recorded::Nothing));
            }
            if d.lease_owner.as_deref() != Some(tick_id) {
                // Lost the lease: the newer holder records. Until it has, the entry is not
                // done with (the holder may die mid-attempt): it waits for that lease, or for
                // the due time the holder wrote when it recorded a retry.
                let wait = match (d.lease_until, d.next_attempt_at) {
                    (Some(until), _) => Some(Wait::Leased(until)),
                    (None, Some(due)) => Some(Wait::Due(due)),
                    (None, None) => None,
                };
                return Ok(Update::Keep(Recorded::Lost(wait)));
            }
            d.attempts.extend(attempt.clone());
            d.lease_until = None;
            d.lease_owner = None;
            match verdict {
                Verdict::Succeeded => d.status = Status::Succeeded,
                Verdict::Retry(due) => d.next_attempt_at = Some(*due),
                Verdict::Failed { .. } => d.status = Status::Failed,
                Verdict::Cancelled => d.status = Status::Cancelled,
            }
            if d.status != Status::Pending {
                d.next_attempt_at = None;
                d.finished_at = Some(now);
            }
            Ok(Update::Write(d.encode(), Recorded::Written))
        })
        .map_err(kv_from_update);
        // One record that cannot be written must not cost the others theirs: that attempt
        // is sent again when its lease expires; the rest are recorded now.
        match written {
            Ok(Recorded::Written) => {}
            Ok(Recorded::Nothing) => continue,
            Ok(Recorded::Lost(wait)) => {
                lost.extend(wait.map(|w| (c.delivery.id.clone(), w)));
                continue;
            }
            Err(e) => {
                failure = Some(e);
                continue;
            }
        }
        match verdict {
            Verdict::Succeeded => {
                report.attempted += 1;
                report.succeeded += 1;
                note_streak(&c.delivery.subscription_id, true);
            }
            Verdict::Retry(_) => {
                report.attempted += 1;
                report.failed += 1;
            }
            Verdict::Failed { gone } => {
                report.attempted += 1;
                report.failed += 1;
                if *gone {
                    let _ = disable(env, &c.delivery.subscription_id, "gone");
                } else {
                    note_streak(&c.delivery.subscription_id, false);
                }
            }
            Verdict::Cancelled => {}
        }
    }
    for (sub_id, success) in streaks {
        let known = subs
            .iter()
            .flatten()
            .find(|s| s.id == sub_id)
            .map(|s| s.consecutive_failures);
        if success && known == Some(0) {
            continue; // nothing to reset
        }
        let _ = record_streak(env, &sub_id, success);
    }
    failure.map_or(Ok(lost), Err)
}

/// Resets (success) or extends (a delivery ended failed) a subscription's failure streak,
/// disabling it when the streak reaches the configured limit.
fn record_streak<K: Kv>(env: &Env<'_, K>, sub_id: &str, success: bool) -> Result<(), ApiError> {
    let limit = env.settings.disable_after_failures;
    let reached = update(env.kv, &keys::subscription(sub_id), |cur| {
        let Some(bytes) = cur else {
            return Ok(Update::Keep(false));
        };
        let mut sub = Subscription::decode(bytes)?;
        if sub.status != SubStatus::Active {
            return Ok(Update::Keep(false));
        }
        if success {
            if sub.consecutive_failures == 0 {
                return Ok(Update::Keep(false));
            }
            sub.consecutive_failures = 0;
        } else {
            sub.consecutive_failures += 1;
        }
        let reached = sub.consecutive_failures >= limit;
        Ok(Update::Write(sub.encode(), reached))
    })?;
    if reached {
        disable(env, sub_id, "repeated_failures")?;
    }
    Ok(())
}

/// Disables a subscription (any owner) and cancels its pending deliveries.
pub fn disable<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &str,
    reason: &str,
) -> Result<Option<Subscription>, ApiError> {
    let sub = subscriptions::disable(env, sub_id, None, reason)?;
    if sub.is_some() {
        // Committed; deliveries this misses are cancelled when they come due.
        let _ = cancel_pending(env, sub_id);
    }
    Ok(sub)
}

/// Marks the subscription's pending deliveries cancelled (the recent ones: older ones have
/// long finished). Deliveries this misses are cancelled when they come due.
pub fn cancel_pending<K: Kv>(env: &Env<'_, K>, sub_id: &str) -> Result<u32, ApiError> {
    let log = history_log(sub_id);
    let len = log.len(env.kv)?;
    let entries: Vec<Entry<String>> =
        log.read(env.kv, len.saturating_sub(CANCEL_LOOKBACK), usize::MAX)?;
    let keys: Vec<Key> = entries.iter().map(|e| keys::delivery(&e.item)).collect();
    let now = env.now_ms;
    let mut cancelled = 0;
    for (key, value) in keys.iter().zip(env.kv.get_many(&keys)?) {
        let pending = value
            .and_then(|b| Delivery::decode(&b).ok())
            .is_some_and(|d| d.status == Status::Pending && d.lease_until.is_none_or(|u| u <= now));
        if !pending {
            continue;
        }
        let done = update(env.kv, key, |cur| {
            let Some(bytes) = cur else {
                return Ok(Update::Keep(false));
            };
            let mut d: Delivery = Delivery::decode(bytes).map_err(ApiError::internal)?;
            if d.status != Status::Pending || d.lease_until.is_some_and(|u| u > now) {
                return Ok(Update::Keep(false));
            }
            d.status = Status::Cancelled;
            d.next_attempt_at = None;
            d.finished_at = Some(now);
            Ok(Update::Write(d.encode(), true))
        })?;
        cancelled += u32::from(done);
    }
    Ok(cancelled)
}

/// Re-runs a finished delivery: same id, body and event; fresh timestamps and signatures;
/// up to [`MAX_ATTEMPTS`] attempts again, the first due now.
pub fn replay<K: Kv>(env: &Env<'_, K>, id: &str) -> Result<Delivery, ApiError> {
    let d = load(env, id)?.ok_or_else(|| ApiError::not_found("Delivery"))?;
    let sub = subscriptions::load(env, &d.subscription_id)?;
    if sub.as_ref().is_none_or(|s| s.status != SubStatus::Active) {
        return Err(ApiError::conflict(
            "The delivery's subscription is disabled, so it cannot be replayed. The partner must \
             create a new subscription (with a new secret) once the endpoint is fixed.",
        ));
    }
    if d.status == Status::Pending {
        return Err(ApiError::conflict(
            "The delivery is still in progress; replay it once it has finished.",
        ));
    }
    let now = env.now_ms;
    let mut queue = BTreeMap::new();
    queue.insert(second_of(now), vec![id.to_owned()]);
    enqueue(env.kv, &queue, None)?;
    let replayed = update(env.kv, &keys::delivery(id), |cur| {
        let Some(bytes) = cur else {
            return Err(ApiError::not_found("Delivery"));
        };
        let mut d: Delivery = Delivery::decode(bytes).map_err(ApiError::internal)?;
        if d.status == Status::Pending {
            return Err(ApiError::conflict(
                "The delivery is already being replayed.",
            ));
        }
        d.status = Status::Pending;
        d.run += 1;
        d.next_attempt_at = Some(now);
        d.finished_at = None;
        Ok(Update::Write(d.encode(), d))
    })?;
    Ok(replayed)
}

/// A page of a subscription's deliveries, oldest first, after history position `after`.
pub fn history<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &str,
    after: u64,
    limit: usize,
) -> Result<(Vec<(u64, Delivery)>, bool), ApiError> {
    let entries: Vec<Entry<String>> = history_log(sub_id).read(env.kv, after, limit + 1)?;
    let has_more = entries.len() > limit;
    let entries = &entries[..entries.len().min(limit)];
    let keys: Vec<Key> = entries.iter().map(|e| keys::delivery(&e.item)).collect();
    let mut out: Vec<(u64, Delivery)> = Vec::new();
    for (e, v) in entries.iter().zip(env.kv.get_many(&keys)?) {
        if let Some(d) = v.and_then(|b| Delivery::decode(&b).ok()) {
            // A fan-out retried after a failure may have listed a delivery twice.
            if !out.iter().any(|(_, seen)| seen.id == d.id) {
                out.push((e.seq, d));
            }
        }
    }
    Ok((out, has_more))
}

/// Deletes events and deliveries older than the retention period (whole days at a time), and
/// the idempotency records listed with them that have expired.
fn purge_expired<K: Kv>(env: &Env<'_, K>) -> Result<(), KvError> {
    let keep_from_day = env
        .now_ms
        .saturating_sub(u64::from(env.settings.retention_days) * DAY_MS)
        / DAY_MS;
    let days = env
        .kv
        .get(&keys::RETENTION_DIRECTORY)?
        .map(|b| directory::decode(&b))
        .transpose()?
        .unwrap_or_default();
    for day in days.into_keys().filter(|d| *d < keep_from_day) {
        let log = retention_log(day);
        let items: Vec<Entry<String>> = log.read(env.kv, 0, usize::MAX)?;
        for event_id in items.iter().map(|e| &e.item) {
            // An idempotency record's key, listed on the day it was claimed; else an event.
            if event_id.starts_with(keys::IDEMPOTENCY_PREFIX) {
                crate::idempotency::purge(env, &Key::from_stored(event_id.as_str()))?;
                continue;
            }
            if let Some(bytes) = env.kv.get(&keys::event(event_id))? {
                let event = EventRecord::decode(&bytes)?;
                for sub in &event.subscriptions {
                    env.kv
                        .delete(&keys::delivery(&delivery_id(event_id, sub)))?;
                }
            }
            env.kv.delete(&keys::event_body(event_id))?;
            env.kv.delete(&keys::event(event_id))?;
        }
        log.delete_all(env.kv)?;
        days_remove(env.kv, day)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::env::SeededEntropy;
    use crate::kv::MemoryKv;
    use crate::subscriptions::Secret;
    use std::cell::{Cell, RefCell};

    /// An `Env` over a test store at `now`.
    fn env_at<'a, K: Kv>(
        kv: &'a K,
        settings: &'a Settings,
        entropy: &'a SeededEntropy,
        now: u64,
    ) -> Env<'a, K> {
        Env {
            now_ms: now,
            kv,
            settings,
            entropy,
        }
    }

    /// A store that runs `hook` once, just before the first compare-and-swap on a key with
    /// `prefix` (a way to put another instance's tick inside a publish), and records every
    /// key read (get, get_many, compare-and-swap), every key plainly written (set) and every
    /// key a compare-and-swap began on.
    struct HookKv<'a> {
        inner: &'a MemoryKv,
        prefix: &'static str,
        hook: RefCell<Option<Box<dyn FnOnce() + 'a>>>,
        reads: RefCell<Vec<String>>,
        sets: RefCell<Vec<String>>,
        cas: RefCell<Vec<String>>,
    }

    impl<'a> HookKv<'a> {
        fn new(inner: &'a MemoryKv, prefix: &'static str, hook: impl FnOnce() + 'a) -> Self {
            HookKv {
                inner,
                prefix,
                hook: RefCell::new(Some(Box::new(hook))),
                reads: RefCell::default(),
                sets: RefCell::default(),
                cas: RefCell::default(),
            }
        }
    }

    impl Kv for HookKv<'_> {
        type Cas = <MemoryKv as Kv>::Cas;
        fn get(
            &self,
            key: &(impl crate::keys::AsKey + ?Sized),
        ) -> Result<Option<Vec<u8>>, KvError> {
            let key = key.key_str();
            self.reads.borrow_mut().push(key.to_owned());
            self.inner.get(key)
        }
        fn set(
            &self,
            key: &(impl crate::keys::AsKey + ?Sized),
            value: &[u8],
        ) -> Result<(), KvError> {
            let key = key.key_str();
            self.sets.borrow_mut().push(key.to_owned());
            self.inner.set(key, value)
        }
        fn delete(&self, key: &(impl crate::keys::AsKey + ?Sized)) -> Result<(), KvError> {
            let key = key.key_str();
            self.inner.delete(key)
        }
        fn get_many(
            &self,
            keys: &[impl crate::keys::AsKey],
        ) -> Result<Vec<Option<Vec<u8>>>, KvError> {
            self.reads
                .borrow_mut()
                .extend(keys.iter().map(|k| k.key_str().to_owned()));
            self.inner.get_many(keys)
        }
        fn increment(
            &self,
            key: &(impl crate::keys::AsKey + ?Sized),
            delta: i64,
        ) -> Result<i64, KvError> {
            let key = key.key_str();
            self.inner.increment(key, delta)
        }
        fn cas_begin(
            &self,
            key: &(impl crate::keys::AsKey + ?Sized),
        ) -> Result<(Self::Cas, Option<Vec<u8>>), KvError> {
            let key = key.key_str();
            self.reads.borrow_mut().push(key.to_owned());
            self.cas.borrow_mut().push(key.to_owned());
            if key.starts_with(self.prefix) {
                let hook = self.hook.borrow_mut().take();
                if let Some(hook) = hook {
                    hook();
                }
            }
            self.inner.cas_begin(key)
        }
        fn cas_swap(&self, cas: Self::Cas, value: &[u8]) -> Result<bool, KvError> {
            self.inner.cas_swap(cas, value)
        }
    }

    /// Answers 200 to everything and counts.
    struct Counting(Cell<usize>);

    impl Sender for Counting {
        fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
            self.0.set(self.0.get() + requests.len());
            requests
                .iter()
                .map(|_| SendResult {
                    outcome: Ok(200),
                    latency_ms: 0,
                })
                .collect()
        }
    }

    fn active_subscription(kv: &MemoryKv) -> String {
        let sub = Subscription {
            id: "sub_000000000000000000000001".into(),
            client_id: "acme".into(),
            url: "https://hooks.example.com/x".into(),
            event_types: vec!["load.created".into()],
            signing_secret: Secret("whsec_test".into()),
            status: SubStatus::Active,
            disabled_reason: None,
            created_at: 0,
            disabled_at: None,
            seq: 1,
            consecutive_failures: 0,
            fanout_seqs: vec![1],
        };
        kv.set(&keys::subscription(&sub.id), &sub.encode())
            .expect("set");
        crate::applog::AppendLog::new(keys::fanout("load.created"))
            .append(kv, std::slice::from_ref(&sub.id))
            .expect("append");
        sub.id
    }

    fn pending_delivery(kv: &MemoryKv, sub: &str, event: &str, due: u64) -> String {
        let id = delivery_id(event, sub);
        let d = Delivery {
            id: id.clone(),
            event_id: event.into(),
            event_type: "load.created".into(),
            subscription_id: sub.into(),
            created_at: due,
            status: Status::Pending,
            attempts: Vec::new(),
            run: 0,
            next_attempt_at: Some(due),
            lease_until: None,
            lease_owner: None,
            finished_at: None,
        };
        kv.set(&keys::delivery(&id), &d.encode()).expect("set");
        kv.set(&keys::event_body(event), br#"{"id":"L"}"#)
            .expect("set");
        id
    }

    /// A delivery with every kind of field set: answered and unanswered attempts of two
    /// runs, a lease, no finish.
    fn full_delivery() -> Delivery {
        let attempt = |run, number, status_code, error: Option<&str>| Attempt {
            run,
            number,
            due_at: 1_767_225_600_000 + u64::from(number),
            started_at: 1_767_225_600_500,
            status_code,
            error: error.map(str::to_owned),
            latency_ms: 12,
            succeeded: status_code == Some(204),
        };
        Delivery {
            id: delivery_id("evt_a", "sub_b"),
            event_id: "evt_a".into(),
            event_type: "load.status_changed".into(),
            subscription_id: "sub_b".into(),
            created_at: 1_767_225_600_000,
            status: Status::Pending,
            attempts: vec![
                attempt(0, 1, None, Some("connection refused")),
                attempt(0, 2, Some(503), None),
                attempt(0, 3, Some(204), None),
                attempt(1, 1, None, Some("timeout \"é\"")),
            ],
            run: 1,
            next_attempt_at: Some(1_767_225_660_000),
            lease_until: Some(1_767_225_675_000),
            lease_owner: Some("tick_1".into()),
            finished_at: None,
        }
    }

    #[test]
    fn a_delivery_record_is_binary_and_reads_back_whole() {
        for status in [
            Status::Pending,
            Status::Succeeded,
            Status::Failed,
            Status::Cancelled,
        ] {
            let mut d = full_delivery();
            d.status = status;
            let bytes = d.encode();
            assert_eq!(bytes[0], DELIVERY_V1);
            assert_eq!(Delivery::decode(&bytes), Ok(d));
        }
        let bare = Delivery {
            attempts: Vec::new(),
            next_attempt_at: None,
            lease_until: None,
            lease_owner: None,
            finished_at: Some(5),
            ..full_delivery()
        };
        assert_eq!(Delivery::decode(&bare.encode()), Ok(bare));
    }

    #[test]
    fn a_damaged_delivery_record_is_an_error_not_a_panic_or_a_guess() {
        let bytes = full_delivery().encode();
        crate::codec::assert_only_whole_records_read(&bytes, |b| Delivery::decode(b).is_ok());
        // An unknown status, and an attempt count far beyond what the record holds: the
        // status byte follows the version, four strings (length + bytes) and `created_at`.
        let d = full_delivery();
        let strings = [&d.id, &d.event_id, &d.event_type, &d.subscription_id];
        let status_at = 1 + strings.iter().map(|s| 4 + s.len()).sum::<usize>() + 8;
        assert_eq!(bytes[status_at], Status::Pending.code());
        assert_eq!(bytes[status_at + 1], 4, "four attempts");
        let mut bad = bytes.clone();
        bad[status_at] = 9;
        assert!(Delivery::decode(&bad).is_err(), "status 9");
        let mut many = bytes.clone();
        many[status_at + 1..status_at + 5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Delivery::decode(&many).is_err(), "u32::MAX attempts");
        assert!(Delivery::decode(b"{\"id\":").is_err(), "broken JSON");
    }

    fn sample_event() -> EventRecord {
        EventRecord {
            id: "evt_0123456789abcdef01234567".into(),
            event_type: "load.status_changed".into(),
            created_at: 1_767_225_600_123,
            body_sha256: "ab".repeat(32),
            subscriptions: vec!["sub_a".into(), "sub_é".into(), String::new()],
            fanned_out: true,
        }
    }

    #[test]
    fn an_event_record_reads_back_and_damage_is_an_error() {
        let event = sample_event();
        let bytes = event.encode();
        assert_eq!(bytes[0], EVENT_V1);
        assert_eq!(EventRecord::decode(&bytes), Ok(event.clone()));
        crate::codec::assert_only_whole_records_read(&bytes, |b| EventRecord::decode(b).is_ok());
        // The flag is the last byte; a count of subscriptions beyond what the record holds.
        let mut bad = bytes.clone();
        *bad.last_mut().expect("flag") = 2;
        assert!(EventRecord::decode(&bad).is_err(), "flag 2");
        let count_at = 1 + (4 + event.id.len()) + (4 + event.event_type.len()) + 8 + (4 + 64);
        assert_eq!(bytes[count_at], 3);
        let mut many = bytes.clone();
        many[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            EventRecord::decode(&many).is_err(),
            "u32::MAX subscriptions"
        );
    }

    /// Record codecs round-trip any record, however many subscriptions an event fans out
    /// to (its size hint must not underflow for a large fan-out).
    #[test]
    fn an_event_record_with_a_large_fan_out_reads_back_whole() {
        let event = EventRecord {
            subscriptions: (0..1_000).map(|n| format!("sub_{n:024x}")).collect(),
            ..sample_event()
        };
        let bytes = event.encode();
        assert_eq!(EventRecord::decode(&bytes), Ok(event));
    }

    /// Only the binary formats are read: event and delivery records in the JSON no release
    /// wrote are damage (an error, never a guess).
    #[test]
    fn records_in_another_format_are_not_read() {
        let event = format!(
            r#"{{"id":"evt_0123456789abcdef01234567","eventType":"load.created","createdAt":1,"bodySha256":"{}","subscriptions":[],"fannedOut":true}}"#,
            "ab".repeat(32)
        );
        assert!(EventRecord::decode(event.as_bytes()).is_err());
        let delivery = r#"{"id":"dlv_1","eventId":"evt_1","eventType":"load.created","subscriptionId":"sub_1","createdAt":1,"status":"pending","attempts":[],"run":0,"nextAttemptAt":1,"leaseUntil":null,"leaseOwner":null,"finishedAt":null}"#;
        assert!(Delivery::decode(delivery.as_bytes()).is_err());
    }

    #[test]
    fn attempt_1_of_a_new_event_reads_neither_event_nor_subscription_nor_body_again() {
        let kv = MemoryKv::new();
        let reads = HookKv::new(&kv, "", || {});
        let settings = Settings::default();
        let entropy = SeededEntropy::new(6);
        let now = 1_767_225_600_000;
        let env = Env {
            now_ms: now,
            kv: &reads,
            settings: &settings,
            entropy: &entropy,
        };
        let sub = active_subscription(&kv);
        let (receipt, prepared) =
            publish_prepared(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
        let prepared = prepared.expect("a new event is prepared");
        reads.reads.borrow_mut().clear();
        let sent = Counting(Cell::new(0));
        let report = run_now(&env, &sent, &RunNow::Prepared(Box::new(prepared)));
        assert_eq!(
            (report.attempted, report.succeeded, sent.0.get()),
            (1, 1, 1)
        );
        let read = reads.reads.borrow().clone();
        let dlv = keys::delivery(&delivery_id(&receipt.event_id, &sub));
        assert!(
            read.contains(&dlv.to_string()),
            "the record is still claimed against the store"
        );
        for key in [
            keys::event(&receipt.event_id),
            keys::event_body(&receipt.event_id),
            keys::subscription(&sub),
        ] {
            assert!(
                !read.contains(&key.to_string()),
                "{key} was read again: {read:?}"
            );
        }
        // A replayed publish (the event exists) is run from the store.
        let (again, prepared) = publish_prepared(&env, "load.created", br#"{"id":"L"}"#, None)
            .map(|(r, p)| (r.replayed, p))
            .expect("publish");
        assert!(!again && prepared.is_some(), "no key: a second, new event");
    }

    /// The event record stored under `key`, parsed.
    fn stored_event(kv: &MemoryKv, key: &str) -> EventRecord {
        let bytes = kv.get(key).expect("store").expect("a record");
        assert_eq!(
            bytes.first(),
            Some(&EVENT_V1),
            "event records are written binary"
        );
        EventRecord::decode(&bytes).expect("a whole record")
    }

    /// The delivery record stored under `key`, decoded.
    fn stored_delivery(kv: &MemoryKv, key: &str) -> Delivery {
        let bytes = kv.get(key).expect("store").expect("a record");
        Delivery::decode(&bytes).expect("a whole record")
    }

    #[test]
    fn a_keyless_publish_reads_no_delivery_or_event_record_and_writes_its_event_once() {
        let kv = MemoryKv::new();
        let ops = HookKv::new(&kv, "", || {});
        let settings = Settings::default();
        let entropy = SeededEntropy::new(8);
        let env = Env {
            now_ms: 1_767_225_600_000,
            kv: &ops,
            settings: &settings,
            entropy: &entropy,
        };
        let sub = active_subscription(&kv);
        let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
        let dlv = keys::delivery(&delivery_id(&receipt.event_id, &sub));
        let evt = keys::event(&receipt.event_id);
        let reads = ops.reads.borrow().clone();
        assert!(
            !reads.contains(&dlv.to_string()) && !reads.contains(&evt.to_string()),
            "a fresh id has nothing to find or race with: {reads:?}"
        );
        let sets = ops.sets.borrow().clone();
        assert_eq!(sets.iter().filter(|k| **k == evt).count(), 1, "{sets:?}");
        assert!(
            sets.contains(&dlv.to_string()),
            "the record is written: {sets:?}"
        );
        // What it wrote is whole: the event says it is fanned out, the delivery is due.
        let event = stored_event(&kv, &evt);
        assert!(event.fanned_out && event.subscriptions == vec![sub]);
        let d = stored_delivery(&kv, &dlv);
        assert_eq!(d.status, Status::Pending);
    }

    #[test]
    fn a_keyed_event_id_is_derived_from_its_key_alone() {
        // A retry with the same key, by this version or the next, must find the same event:
        // the id is the first 96 bits of SHA-256("ingest/<key>") (Python's hashlib).
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let (a, b) = (SeededEntropy::new(1), SeededEntropy::new(2));
        let first = publish(
            &env_at(&kv, &settings, &a, 1_000),
            "load.created",
            br#"{"id":"L"}"#,
            Some("k-1"),
        );
        let again = publish(
            &env_at(&kv, &settings, &b, 2_000),
            "load.created",
            br#"{"id":"L"}"#,
            Some("k-1"),
        );
        let (first, again) = (first.expect("publish"), again.expect("retry"));
        assert_eq!(first.event_id, "evt_cb13832da16abf18f4cdc094");
        assert_eq!(again.event_id, first.event_id);
        assert!(again.replayed);
    }

    #[test]
    fn a_keyed_publish_never_overwrites_a_delivery_a_concurrent_one_already_sent() {
        // Two ingests with the same key: the second finds the event the first recorded,
        // makes the delivery and sends attempt 1, all while the first is between its event
        // record and its delivery record. The first must then leave that delivery alone.
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(9);
        let now = 1_767_225_600_000;
        let sent = Counting(Cell::new(0));
        let sub = active_subscription(&kv);
        let other = || {
            let env = env_at(&kv, &settings, &entropy, now);
            let (receipt, prepared) =
                publish_prepared(&env, "load.created", br#"{"id":"L"}"#, Some("k1"))
                    .expect("second publish");
            assert!(receipt.replayed, "the first one's event record is there");
            assert!(prepared.is_none(), "a resumed event runs from the store");
            let report = run_now(&env, &sent, &RunNow::Event(receipt.event_id));
            assert_eq!(report.succeeded, 1);
        };
        let hooked = HookKv::new(&kv, "dlv:", other);
        let env = Env {
            now_ms: now,
            kv: &hooked,
            settings: &settings,
            entropy: &entropy,
        };
        let (receipt, prepared) =
            publish_prepared(&env, "load.created", br#"{"id":"L"}"#, Some("k1"))
                .expect("first publish");
        let report = run_now(
            &env_at(&kv, &settings, &entropy, now),
            &sent,
            &RunNow::Prepared(Box::new(prepared.expect("prepared"))),
        );
        assert_eq!((report.attempted, sent.0.get()), (0, 1), "sent once");
        let dlv = keys::delivery(&delivery_id(&receipt.event_id, &sub));
        let d = stored_delivery(&kv, &dlv);
        assert_eq!(d.status, Status::Succeeded, "not reset to pending");
    }

    #[test]
    fn a_prepared_delivery_changed_in_the_store_is_not_sent_from_memory() {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(7);
        let env = env_at(&kv, &settings, &entropy, 1_767_225_600_000);
        let sub = active_subscription(&kv);
        let (_, prepared) =
            publish_prepared(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
        // Between fan-out and attempt 1, the subscription is disabled: its pending
        // deliveries are cancelled in the store.
        disable(&env, &sub, "operator").expect("disable");
        let sent = Counting(Cell::new(0));
        let prepared = prepared.expect("prepared");
        let report = run_now(&env, &sent, &RunNow::Prepared(Box::new(prepared)));
        assert_eq!(
            (report.attempted, sent.0.get()),
            (0, 0),
            "the store decides"
        );
    }

    #[test]
    fn a_publish_into_a_second_and_day_already_queued_begins_no_compare_and_swap_on_their_directories()
     {
        // The due-queue and retention directories change only for an event that is the
        // first of its second (day); every other event reads them once and writes nothing,
        // without beginning a compare-and-swap (three host calls) on them.
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(8);
        let now = 1_767_225_600_000;
        active_subscription(&kv);
        let first = HookKv::new(&kv, "", || {});
        publish(
            &env_at(&first, &settings, &entropy, now),
            "load.created",
            br#"{"id":"L1"}"#,
            None,
        )
        .expect("first publish");
        let began = first.cas.borrow().clone();
        for dir in [keys::DUE_DIRECTORY, keys::RETENTION_DIRECTORY] {
            assert!(
                began.iter().any(|k| *k == dir),
                "the first event adds its {dir} entry"
            );
        }
        let second = HookKv::new(&kv, "", || {});
        publish(
            &env_at(&second, &settings, &entropy, now + 10),
            "load.created",
            br#"{"id":"L2"}"#,
            None,
        )
        .expect("second publish");
        let began = second.cas.borrow().clone();
        for dir in [keys::DUE_DIRECTORY, keys::RETENTION_DIRECTORY] {
            assert!(
                !began.iter().any(|k| *k == dir),
                "{dir}: compare-and-swaps began on {began:?}"
            );
            assert!(
                second.reads.borrow().iter().any(|k| *k == dir),
                "{dir} is still read"
            );
        }
        let dir = directory::decode(&kv.get(&keys::DUE_DIRECTORY).ok().flatten().expect("dir"))
            .expect("directory");
        assert_eq!(dir.keys().copied().collect::<Vec<_>>(), vec![now / 1000]);
    }

    /// A publish reads the due and retention directories in the batch that reads its
    /// listeners' records, and writes neither when its second and day are listed: 15 store
    /// operations for one listener (the fan-out list's counter and page; the records and
    /// directories; the body; three appends of three; the delivery record; the event
    /// record), not 17.
    #[test]
    fn a_publish_reads_the_directories_with_its_listeners_records() {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(5);
        let env = env_at(&kv, &settings, &entropy, 1_767_225_600_000);
        active_subscription(&kv);
        publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("lists second and day");
        let before = kv.ops();
        let receipt = publish(&env, "load.created", br#"{"id":"L2"}"#, None).expect("publish");
        assert_eq!(receipt.deliveries, 1);
        assert_eq!(kv.ops() - before, 15);
    }

    /// An event nobody listens to queues nothing: its second is not listed in the due
    /// directory (a tick would only visit an empty queue there).
    #[test]
    fn an_event_nobody_listens_to_lists_no_due_second() {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(5);
        let env = env_at(&kv, &settings, &entropy, 1_767_225_600_000);
        let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
        assert_eq!(receipt.deliveries, 0);
        assert_eq!(kv.get(&keys::DUE_DIRECTORY).expect("get"), None);
        assert!(
            kv.get(&keys::RETENTION_DIRECTORY).expect("get").is_some(),
            "the event itself is kept for its retention"
        );
    }

    #[test]
    fn run_now_sends_only_its_own_event_and_its_cost_ignores_the_queue() {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(5);
        let now = 1_767_225_600_000;
        let env = env_at(&kv, &settings, &entropy, now);
        active_subscription(&kv);
        let cost = |queued: usize| {
            // `queued` other deliveries are due in the same second (another instance's).
            let second = now / 1000;
            let others: Vec<String> = (0..queued)
                .map(|i| pending_delivery(&kv, "sub_other", &format!("evt_o{queued}_{i}"), now))
                .collect();
            enqueue(&kv, &BTreeMap::from([(second, others)]), None).expect("enqueue");
            let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
            let sent = Counting(Cell::new(0));
            let before = kv.ops();
            let report = run_now(&env, &sent, &RunNow::Event(receipt.event_id.clone()));
            let ops = kv.ops() - before;
            assert_eq!((report.attempted, report.succeeded), (1, 1));
            assert_eq!(sent.0.get(), 1, "only its own delivery");
            let d = load(
                &env,
                &delivery_id(&receipt.event_id, "sub_000000000000000000000001"),
            )
            .expect("load")
            .expect("record");
            assert_eq!(d.status, Status::Succeeded);
            ops
        };
        assert_eq!(
            cost(0),
            cost(300),
            "store operations with 0 and 300 others queued"
        );
        let sent = Counting(Cell::new(0));
        assert_eq!(
            run_now(&env, &sent, &RunNow::Event("evt_missing".into())).attempted,
            0,
            "an unknown event runs nothing"
        );
    }

    #[test]
    fn the_watermark_never_passes_a_queue_number_still_being_written() {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(4);
        let now = 1_767_225_600_000;
        let env = env_at(&kv, &settings, &entropy, now);
        let sub = active_subscription(&kv);
        let second = now / 1000;
        // Appender A reserved number 1 but has not written it yet; appender B wrote number 2.
        kv.increment(&due_log(second).counter_key(), 1)
            .expect("reserve");
        let b = pending_delivery(&kv, &sub, "evt_b", now);
        enqueue(&kv, &BTreeMap::from([(second, vec![b])]), None).expect("enqueue");
        let sent = Counting(Cell::new(0));
        assert_eq!(tick(&env, &sent).attempted, 1, "B is sent");
        // A finishes writing number 1; the next tick must still look at it.
        let a = pending_delivery(&kv, &sub, "evt_a", now);
        update(&kv, &due_log(second).page_key(0), |cur| {
            let mut entries = cur
                .map(|b| crate::applog::decode_page(b).expect("page"))
                .unwrap_or_default();
            entries.push(Entry {
                seq: 1,
                item: a.clone().into_bytes(),
            });
            Ok::<_, KvError>(Update::Write(crate::applog::encode_page(&entries), ()))
        })
        .expect("write the reserved entry");
        assert_eq!(tick(&env, &sent).attempted, 1, "A is sent too");
        assert_eq!(sent.0.get(), 2);
    }

    #[test]
    fn a_tick_between_queue_entry_and_record_does_not_lose_the_delivery() {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(3);
        let now = 1_767_225_600_500;
        let env = |kv| Env {
            now_ms: now,
            kv,
            settings: &settings,
            entropy: &entropy,
        };
        active_subscription(&kv);
        let sent = Counting(Cell::new(0));
        // Another instance ticks after the queue entry is written, before the record is
        // (at the subscription's history entry, which comes between them).
        let hooked = HookKv::new(&kv, "subdlv:", || {
            let report = tick(&env(&kv), &sent);
            assert_eq!(report.attempted, 0, "no record yet: nothing to send");
            assert!(
                report.next_due_ms.is_some_and(|t| t <= now + 1000),
                "it looks again soon"
            );
        });
        let hooked_env = Env {
            now_ms: now,
            kv: &hooked,
            settings: &settings,
            entropy: &entropy,
        };
        let receipt =
            publish(&hooked_env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
        assert_eq!(receipt.deliveries, 1);
        assert!(
            hooked.hook.borrow().is_none(),
            "the hook ran inside the publish"
        );
        let report = tick(&env(&kv), &sent);
        assert_eq!(
            (report.attempted, sent.0.get()),
            (1, 1),
            "the delivery is still found and sent"
        );
    }

    /// Answers every request with a timeout that took `latency_ms`, noting what each request
    /// carried and the lease its delivery had while it was in flight.
    struct Slow<'a> {
        kv: &'a MemoryKv,
        latency_ms: u64,
        /// (delivery id, X-Service-Timestamp, lease_until during the attempt)
        seen: RefCell<Vec<(String, u64, Option<u64>)>>,
    }

    impl Sender for Slow<'_> {
        fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
            requests
                .iter()
                .map(|r| {
                    let header = |n: &str| {
                        r.headers
                            .iter()
                            .find(|(k, _)| k == n)
                            .map(|(_, v)| v.clone())
                            .unwrap_or_default()
                    };
                    let id = header("x-service-delivery-id");
                    let lease = self
                        .kv
                        .get(&keys::delivery(&id))
                        .ok()
                        .flatten()
                        .and_then(|b| Delivery::decode(&b).ok())
                        .and_then(|d| d.lease_until);
                    let ts = header("x-service-timestamp").parse().unwrap_or(0);
                    self.seen.borrow_mut().push((id, ts, lease));
                    SendResult {
                        outcome: Err("timeout".into()),
                        latency_ms: self.latency_ms,
                    }
                })
                .collect()
        }
    }

    fn queued(kv: &MemoryKv, sub: &str, events: &[&str], now: u64) -> Vec<String> {
        let ids: Vec<String> = events
            .iter()
            .map(|e| pending_delivery(kv, sub, e, now))
            .collect();
        enqueue(kv, &BTreeMap::from([(now / 1000, ids.clone())]), None).expect("enqueue");
        ids
    }

    #[test]
    fn a_long_tick_signs_leases_and_schedules_each_batch_when_it_is_sent() {
        // Found by the soak (edgehook soak): a tick read the clock once, so a batch sent 20 s
        // into a tick was signed 20 s in the past, leased until 5 s before it was claimed
        // (another tick could claim and send it again) and retried 20 s early.
        let kv = MemoryKv::new();
        let settings = Settings {
            max_concurrency: 1,
            attempt_timeout_ms: 10_000,
            ..Settings::default()
        };
        let entropy = SeededEntropy::new(5);
        let now = 1_767_225_600_000;
        let env = env_at(&kv, &settings, &entropy, now);
        let sub = active_subscription(&kv);
        queued(&kv, &sub, &["evt_a", "evt_b"], now);
        let slow = Slow {
            kv: &kv,
            latency_ms: 10_000,
            seen: RefCell::default(),
        };
        assert_eq!(tick(&env, &slow).attempted, 2);
        let seen = slow.seen.borrow();
        assert_eq!(seen[0].1, now / 1000);
        let (id, timestamp, lease) = &seen[1];
        assert_eq!(*timestamp, (now + 10_000) / 1000, "signed when it is sent");
        // docs/design/delivery.md: leased for the attempt timeout + 5 s from when it is claimed.
        assert_eq!(seen[0].2, Some(now + 10_000 + 5_000));
        assert_eq!(
            *lease,
            Some(now + 10_000 + 10_000 + 5_000),
            "leased from when it is sent"
        );
        let d = load(&env, id).expect("load").expect("record");
        assert_eq!(d.attempts[0].started_at, now + 10_000);
        assert!(
            d.next_attempt_at
                .is_some_and(|t| t >= now + 10_000 + RETRY_DELAYS_MS[0]),
            "retried a minute after it was sent: {:?}",
            d.next_attempt_at
        );
    }

    /// The delivery ids of a batch of requests, in order.
    fn delivery_ids(requests: &[Outgoing]) -> Vec<String> {
        requests
            .iter()
            .filter_map(|r| {
                r.headers
                    .iter()
                    .find(|(n, _)| n == "x-service-delivery-id")
                    .map(|(_, v)| v.clone())
            })
            .collect()
    }

    /// Answers 500 to the deliveries in `failing`, 200 to the rest; records each batch's ids.
    struct ByDelivery {
        failing: Vec<String>,
        batches: RefCell<Vec<Vec<String>>>,
    }

    impl Sender for ByDelivery {
        fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
            let ids = delivery_ids(requests);
            let results = ids
                .iter()
                .map(|id| SendResult {
                    outcome: Ok(if self.failing.contains(id) { 500 } else { 200 }),
                    latency_ms: 1,
                })
                .collect();
            self.batches.borrow_mut().push(ids);
            results
        }
    }

    #[test]
    fn deliveries_to_one_subscription_run_together_and_a_success_in_the_batch_outweighs_a_final_failure()
     {
        // DESIGN: deliveries to one subscription run in parallel; docs/design/http.md
        // (failure streak): a batch with both a success and a final failure for one subscription
        // counts as a success. With a threshold of one failure, the final failure alone
        // disables (the control run below).
        for (failing, disabled) in [(&["evt_b"][..], false), (&["evt_a", "evt_b"][..], true)] {
            let kv = MemoryKv::new();
            let settings = Settings {
                disable_after_failures: 1,
                ..Settings::default()
            };
            let entropy = SeededEntropy::new(9);
            let now = 1_767_225_600_000;
            let env = env_at(&kv, &settings, &entropy, now);
            let sub = active_subscription(&kv);
            let ids = queued(&kv, &sub, &["evt_a", "evt_b"], now);
            // evt_b's delivery has failed twice: its attempt now is its last.
            let mut last = load(&env, &ids[1]).expect("load").expect("record");
            for number in 1..=2 {
                last.attempts.push(Attempt {
                    run: 0,
                    number,
                    due_at: now,
                    started_at: now,
                    status_code: Some(500),
                    error: None,
                    latency_ms: 1,
                    succeeded: false,
                });
            }
            kv.set(&keys::delivery(&ids[1]), &last.encode())
                .expect("set");
            let sender = ByDelivery {
                failing: failing.iter().map(|e| delivery_id(e, &sub)).collect(),
                batches: RefCell::default(),
            };
            assert_eq!(tick(&env, &sender).attempted, 2);
            assert_eq!(
                *sender.batches.borrow(),
                vec![ids.clone()],
                "both in one batch, in flight together"
            );
            let status = |id: &str| load(&env, id).expect("load").expect("record").status;
            assert_eq!(status(&ids[1]), Status::Failed, "its last attempt");
            let record = kv
                .get(&keys::subscription(&sub))
                .expect("get")
                .expect("record");
            let record = Subscription::decode(&record).expect("decode");
            assert_eq!(
                record.status == SubStatus::Disabled,
                disabled,
                "failing {failing:?}: {record:?}"
            );
        }
    }

    #[test]
    fn a_tick_starts_no_batch_after_its_time_budget_and_reports_the_rest_due() {
        let kv = MemoryKv::new();
        let settings = Settings {
            max_concurrency: 1,
            attempt_timeout_ms: 15_000,
            ..Settings::default()
        };
        let entropy = SeededEntropy::new(6);
        let now = 1_767_225_600_000;
        let env = |now_ms| Env {
            now_ms,
            kv: &kv,
            settings: &settings,
            entropy: &entropy,
        };
        let sub = active_subscription(&kv);
        queued(&kv, &sub, &["evt_a", "evt_b", "evt_c", "evt_d"], now);
        let slow = Slow {
            kv: &kv,
            latency_ms: 15_000,
            seen: RefCell::default(),
        };
        let report = tick(&env(now), &slow);
        assert_eq!(report.attempted, 2, "15 s, then 30 s: over the 20 s budget");
        assert_eq!(report.next_due_ms, Some(now), "the rest is due now");
        assert_eq!(tick(&env(now + 30_000), &slow).attempted, 2);
        assert_eq!(slow.seen.borrow().len(), 4);
    }

    #[test]
    fn a_delivery_another_tick_holds_is_looked_at_again_when_its_lease_runs_out() {
        // Another instance claims the delivery between this tick's read of the queue and its
        // own claim, then dies mid-attempt. This tick must not move its watermark past the
        // entry: it is the only pointer to the delivery.
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(7);
        let now = 1_767_225_600_000;
        let sub = active_subscription(&kv);
        let id = queued(&kv, &sub, &["evt_a"], now).remove(0);
        let hooked = HookKv::new(&kv, "dlv:", || {
            let bytes = kv.get(&keys::delivery(&id)).expect("get").expect("record");
            let mut d = Delivery::decode(&bytes).expect("record");
            d.lease_until = Some(now + 15_000);
            d.lease_owner = Some("another instance".into());
            kv.set(&keys::delivery(&id), &d.encode()).expect("set");
        });
        let sent = Counting(Cell::new(0));
        let report = tick(
            &Env {
                now_ms: now,
                kv: &hooked,
                settings: &settings,
                entropy: &entropy,
            },
            &sent,
        );
        assert_eq!(report.attempted, 0, "the other instance holds it");
        assert!(
            report.next_due_ms.is_some_and(|t| t <= now + 15_000),
            "it looks again when the lease ends: {:?}",
            report.next_due_ms
        );
        let later = Env {
            now_ms: now + 16_000,
            kv: &kv,
            settings: &settings,
            entropy: &entropy,
        };
        assert_eq!(
            tick(&later, &sent).attempted,
            1,
            "sent once the lease is over"
        );
        assert_eq!(sent.0.get(), 1);
    }

    #[test]
    fn an_event_published_after_a_tick_read_its_clock_is_sent_by_a_later_tick() {
        // A tick reads its clock at T - 200; a publish at T, in the same second, enqueues
        // before the tick scans that second. The tick must not send a delivery due after its
        // clock, nor move the second's watermark past it: through `events.publish` (no
        // run_now) the queue entry is the only pointer to attempt 1.
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(11);
        let t = 1_767_225_600_300;
        active_subscription(&kv);
        let receipt = publish(
            &env_at(&kv, &settings, &entropy, t),
            "load.created",
            br#"{"id":"L"}"#,
            None,
        )
        .expect("publish");
        assert_eq!(receipt.deliveries, 1);
        let sent = Counting(Cell::new(0));
        let early = tick(&env_at(&kv, &settings, &entropy, t - 200), &sent);
        assert_eq!(early.attempted, 0, "not due at the tick's clock");
        assert_eq!(early.next_due_ms, Some(t), "due at its publish time");
        let later = tick(&env_at(&kv, &settings, &entropy, t + 5_000), &sent);
        assert_eq!(later.attempted, 1, "sent by the next tick");
        assert_eq!(sent.0.get(), 1);
    }

    #[test]
    fn a_tick_between_a_replays_queue_entry_and_its_record_does_not_lose_the_replay() {
        // A replay queues its entry first, then makes the record pending again. A tick in
        // between finds a finished record: it must not take the entry for done, or the
        // replay stays pending for good (and a second replay answers 409).
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(12);
        let now = 1_767_225_600_000;
        let sub = active_subscription(&kv);
        let id = queued(&kv, &sub, &["evt_a"], now).remove(0);
        let sent = Counting(Cell::new(0));
        assert_eq!(
            tick(&env_at(&kv, &settings, &entropy, now), &sent).succeeded,
            1
        );
        let at = now + 120_000;
        let hooked = HookKv::new(&kv, "dlv:", || {
            let report = tick(&env_at(&kv, &settings, &entropy, at), &sent);
            assert_eq!(report.attempted, 0, "the record is not pending yet");
        });
        let replayed = replay(&env_at(&hooked, &settings, &entropy, at), &id).expect("replay");
        assert_eq!(replayed.status, Status::Pending);
        assert!(
            hooked.hook.borrow().is_none(),
            "the tick ran inside the replay"
        );
        let later = tick(&env_at(&kv, &settings, &entropy, at + 1_000), &sent);
        assert_eq!(later.attempted, 1, "the replay's attempt is sent");
        assert_eq!(sent.0.get(), 2);
        let env = env_at(&kv, &settings, &entropy, at + 2_000);
        assert_eq!(
            load(&env, &id).expect("load").expect("record").status,
            Status::Succeeded
        );
        replay(&env, &id).expect("finished, so it can be replayed again");
    }

    #[test]
    fn a_fan_out_resumed_after_its_events_second_settled_is_not_lost_to_a_tick() {
        // A keyed publish recorded its event and failed before its fan-out. Its retry, two
        // minutes later, resumes the fan-out; a tick runs between the queue entry and the
        // delivery record. An entry in the event's own (settled) second would be taken for
        // a failed publish's leftover and passed, and the delivery never sent.
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(13);
        let now = 1_767_225_600_000;
        active_subscription(&kv);
        let load = br#"{"id":"L"}"#;
        // Six operations (the event looked for, the fan-out list's counter and page, the
        // listeners' records and directories, the body, the event record), then the store
        // fails.
        kv.fail_at(Some(7));
        let first = publish(
            &env_at(&kv, &settings, &entropy, now),
            "load.created",
            load,
            Some("k1"),
        );
        kv.fail_at(None);
        assert!(first.is_err(), "the first try fails");
        let events: Vec<String> = kv
            .dump()
            .keys()
            .filter(|k| k.starts_with("evt:") && !k.ends_with(":body"))
            .cloned()
            .collect();
        assert_eq!(events.len(), 1, "its event is recorded: {events:?}");
        let event_id = stored_event(&kv, &events[0]).id;
        assert!(
            kv.dump().keys().all(|k| !k.starts_with("dlv:")),
            "no delivery made"
        );
        let at = now + 120_000;
        let sent = Counting(Cell::new(0));
        let hooked = HookKv::new(&kv, "subdlv:", || {
            let report = tick(&env_at(&kv, &settings, &entropy, at), &sent);
            assert_eq!(report.attempted, 0, "no record yet");
        });
        let retry = publish(
            &env_at(&hooked, &settings, &entropy, at),
            "load.created",
            load,
            Some("k1"),
        )
        .expect("the retry resumes");
        assert!(retry.replayed && retry.event_id == event_id);
        assert!(hooked.hook.borrow().is_none(), "the tick ran inside");
        let later = tick(&env_at(&kv, &settings, &entropy, at + 1_000), &sent);
        assert_eq!(later.attempted, 1, "the resumed delivery is sent");
        assert_eq!(sent.0.get(), 1);
    }

    /// Answers 200 after `latency_ms`, but while each request is in flight (its attempt
    /// outliving its lease) another instance claims its delivery until `lease_until`.
    struct TakenOver<'a> {
        kv: &'a MemoryKv,
        latency_ms: u64,
        lease_until: u64,
    }

    impl Sender for TakenOver<'_> {
        fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
            for id in delivery_ids(requests) {
                let mut d = stored_delivery(self.kv, &keys::delivery(&id));
                d.lease_owner = Some("another instance".into());
                d.lease_until = Some(self.lease_until);
                self.kv.set(&keys::delivery(&id), &d.encode()).expect("set");
            }
            requests
                .iter()
                .map(|_| SendResult {
                    outcome: Ok(200),
                    latency_ms: self.latency_ms,
                })
                .collect()
        }
    }

    #[test]
    fn a_tick_that_lost_its_lease_does_not_pass_the_entry_the_new_holder_needs() {
        // This tick's attempt outlives its lease (16 s against 15), another instance claims
        // the delivery meanwhile. The outcome is the new holder's to record; if that holder
        // dies, the queue entry is the only pointer left, so this tick must not move the
        // watermark past it.
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(14);
        let now = 1_767_225_600_000;
        let sub = active_subscription(&kv);
        let id = queued(&kv, &sub, &["evt_a"], now).remove(0);
        let sender = TakenOver {
            kv: &kv,
            latency_ms: 16_000,
            lease_until: now + 31_000,
        };
        let report = tick(&env_at(&kv, &settings, &entropy, now), &sender);
        assert_eq!(report.attempted, 0, "not recorded by the tick that lost it");
        assert!(
            report.next_due_ms.is_some_and(|t| t <= now + 31_000),
            "looked at again when the new lease ends: {:?}",
            report.next_due_ms
        );
        let d = stored_delivery(&kv, &keys::delivery(&id));
        assert_eq!(d.lease_owner.as_deref(), Some("another instance"));
        // The new holder died mid-attempt; once its lease is over, the delivery is sent.
        let sent = Counting(Cell::new(0));
        let later = tick(&env_at(&kv, &settings, &entropy, now + 32_000), &sent);
        assert_eq!(later.attempted, 1, "sent once the new lease is over");
        assert_eq!(sent.0.get(), 1);
    }

    #[test]
    fn a_settled_second_whose_last_append_failed_expires() {
        // An appender reserved the last number of the second (the counter went up) and
        // failed to write its page: a gap at the end. Once the second is settled, nothing
        // can fill it; the second must still be found finished and leave the directory.
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(15);
        let now = 1_767_225_600_000;
        let sub = active_subscription(&kv);
        queued(&kv, &sub, &["evt_a"], now);
        kv.increment(&due_log(now / 1000).counter_key(), 1)
            .expect("reserve");
        let sent = Counting(Cell::new(0));
        for at in [now, now + 120_000, now + 180_000] {
            tick(&env_at(&kv, &settings, &entropy, at), &sent);
        }
        assert_eq!(sent.0.get(), 1);
        let dir = read_directory(&kv).expect("directory");
        assert!(
            !dir.contains_key(&(now / 1000)),
            "the second is gone: {dir:?}"
        );
        assert_eq!(
            kv.get(&due_log(now / 1000).counter_key()).expect("get"),
            None,
            "and its queue deleted"
        );
    }

    #[test]
    fn a_retry_cancelled_before_its_second_holds_nothing_when_that_second_comes() {
        // Attempt 1 failed and attempt 2 is queued a minute ahead; then the subscription is
        // disabled, which cancels the delivery. When the retry's second comes, its entry is
        // done with: no replay can follow a cancel, so the tick does not look again.
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(16);
        let now = 1_767_225_600_000;
        let sub = active_subscription(&kv);
        let env = env_at(&kv, &settings, &entropy, now);
        let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
        let id = delivery_id(&receipt.event_id, &sub);
        let failing = ByDelivery {
            failing: vec![id.clone()],
            batches: RefCell::default(),
        };
        assert_eq!(tick(&env, &failing).failed, 1);
        let retry_at = load(&env, &id)
            .expect("load")
            .expect("record")
            .next_attempt_at
            .expect("attempt 2 queued");
        disable(
            &env_at(&kv, &settings, &entropy, now + 1_000),
            &sub,
            "operator",
        )
        .expect("disable");
        let d = load(&env, &id).expect("load").expect("record");
        assert_eq!(d.status, Status::Cancelled);
        let sent = Counting(Cell::new(0));
        let report = tick(&env_at(&kv, &settings, &entropy, retry_at + 500), &sent);
        assert_eq!(report.attempted, 0);
        assert_eq!(report.next_due_ms, None, "nothing left to look at");
    }

    /// Answers 200 to everything and notes the delivery ids of each batch.
    #[derive(Default)]
    struct Batches(RefCell<Vec<Vec<String>>>);

    impl Sender for Batches {
        fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
            self.0.borrow_mut().push(delivery_ids(requests));
            requests
                .iter()
                .map(|_| SendResult {
                    outcome: Ok(200),
                    latency_ms: 5,
                })
                .collect()
        }
    }

    #[test]
    fn one_batch_takes_due_deliveries_from_several_seconds() {
        // Found by the soak: the tick sent each second's deliveries as a batch of its own,
        // so with one slow retry in every second a single ticker did one second of retries
        // per attempt timeout and fell further behind every second.
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(8);
        let now = 1_767_225_600_000;
        let env = env_at(&kv, &settings, &entropy, now);
        let sub = active_subscription(&kv);
        for (i, event) in ["evt_a", "evt_b", "evt_c"].iter().enumerate() {
            queued(&kv, &sub, &[event], now - 3000 + i as u64 * 1000);
        }
        let batches = Batches::default();
        assert_eq!(tick(&env, &batches).attempted, 3);
        assert_eq!(batches.0.borrow().len(), 1, "{:?}", batches.0.borrow());
    }

    #[test]
    fn retries_whose_last_attempt_timed_out_go_last_in_batches_of_their_own() {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(9);
        let now = 1_767_225_600_000;
        let env = env_at(&kv, &settings, &entropy, now);
        let sub = active_subscription(&kv);
        let ids = queued(&kv, &sub, &["evt_a", "evt_b", "evt_c", "evt_d"], now);
        // a and c timed out on attempt 1 (a minute ago) and are due for attempt 2.
        for id in [&ids[0], &ids[2]] {
            let bytes = kv.get(&keys::delivery(id)).expect("get").expect("record");
            let mut d = Delivery::decode(&bytes).expect("record");
            d.attempts.push(Attempt {
                run: 0,
                number: 1,
                due_at: now - 70_000,
                started_at: now - 70_000,
                status_code: None,
                error: Some("timeout".into()),
                latency_ms: 10_000,
                succeeded: false,
            });
            kv.set(&keys::delivery(id), &d.encode()).expect("set");
        }
        let batches = Batches::default();
        assert_eq!(tick(&env, &batches).attempted, 4);
        let sent = batches.0.borrow();
        assert_eq!(
            *sent,
            vec![
                vec![ids[1].clone(), ids[3].clone()],
                vec![ids[0].clone(), ids[2].clone()]
            ]
        );
    }

    /// Answers every request with one outcome: a status code, or a network error.
    struct Answer(Result<u16, &'static str>);

    impl Sender for Answer {
        fn send_all(&self, requests: &[Outgoing], _: u64) -> Vec<SendResult> {
            requests
                .iter()
                .map(|_| SendResult {
                    outcome: self.0.map_err(str::to_owned),
                    latency_ms: 3,
                })
                .collect()
        }
    }

    fn stored_subscription(kv: &MemoryKv, id: &str) -> Subscription {
        let bytes = kv
            .get(&keys::subscription(id))
            .expect("get")
            .expect("record");
        Subscription::decode(&bytes).expect("decode")
    }

    /// SPEC §3.3, §8 and DESIGN "Delivery": a non-2xx answer (5xx, 3xx, 4xx) or a network
    /// error is a failure; the attempts are numbered 1, 2, 3 in the record; attempt 2 is due
    /// about 60 s after attempt 1 failed and attempt 3 about 300 s after attempt 2 (up to
    /// +10 %, on whole seconds); after the third failure the delivery is failed, nothing more
    /// is due, and the subscription's failure streak counts that one delivery once.
    #[test]
    fn a_failing_delivery_gets_three_numbered_attempts_on_the_retry_schedule_then_fails() {
        for outcome in [
            Ok(500),
            Ok(302),
            Ok(429),
            Ok(199),
            Err("connection refused"),
        ] {
            let kv = MemoryKv::new();
            let settings = Settings::default();
            let entropy = SeededEntropy::new(11);
            let start = 1_767_225_600_000;
            let sub = active_subscription(&kv);
            let id = queued(&kv, &sub, &["evt_a"], start).remove(0);
            let sender = Answer(outcome);
            let mut now = start;
            for (number, delay) in [(1u32, Some(60_000)), (2, Some(300_000)), (3, None)] {
                let report = tick(&env_at(&kv, &settings, &entropy, now), &sender);
                assert_eq!(
                    (report.attempted, report.succeeded, report.failed),
                    (1, 0, 1),
                    "{outcome:?}: attempt {number}"
                );
                let d = stored_delivery(&kv, &keys::delivery(&id));
                let last = d.attempts.last().expect("the attempt is recorded");
                assert_eq!(d.attempts.len(), number as usize, "{outcome:?}");
                assert_eq!(
                    last.number, number,
                    "{outcome:?}: attempts are numbered from 1"
                );
                assert_eq!(last.started_at, now);
                assert!(!last.succeeded);
                assert_eq!(last.status_code, outcome.ok(), "{outcome:?}");
                assert_eq!(last.error.as_deref(), outcome.err(), "{outcome:?}");
                match delay {
                    Some(delay) => {
                        assert_eq!(d.status, Status::Pending, "{outcome:?}: {number}");
                        assert_eq!(d.finished_at, None);
                        let due = d.next_attempt_at.expect("the next attempt is due");
                        assert!(
                            (now + delay..=now + delay + delay / 10).contains(&due),
                            "{outcome:?}: attempt {} due {} ms after attempt {number}",
                            number + 1,
                            due - now
                        );
                        assert_eq!(due % 1000, 0, "retries fall on whole seconds");
                        assert_eq!(report.next_due_ms, Some(due));
                        let early = tick(&env_at(&kv, &settings, &entropy, due - 1000), &sender);
                        assert_eq!(early.attempted, 0, "not before it is due");
                        now = due;
                    }
                    None => {
                        assert_eq!(d.status, Status::Failed, "{outcome:?}: the last attempt");
                        assert_eq!(d.next_attempt_at, None);
                        assert_eq!(d.finished_at, Some(now));
                    }
                }
                let streak = stored_subscription(&kv, &sub).consecutive_failures;
                assert_eq!(streak, u32::from(delay.is_none()), "{outcome:?}: {number}");
            }
            let later = tick(&env_at(&kv, &settings, &entropy, now + 3_600_000), &sender);
            assert_eq!(later.attempted, 0, "{outcome:?}: at most 3 attempts");
        }
    }

    /// DESIGN "Delivery": success is any 2xx, at the first attempt or a retry; it ends the
    /// delivery succeeded and resets the failure streak.
    #[test]
    fn any_2xx_answer_is_a_success_even_on_a_retry() {
        for code in [200, 202, 204, 299] {
            let kv = MemoryKv::new();
            let settings = Settings::default();
            let entropy = SeededEntropy::new(12);
            let now = 1_767_225_600_000;
            let sub = active_subscription(&kv);
            let mut record = stored_subscription(&kv, &sub);
            record.consecutive_failures = 2;
            kv.set(&keys::subscription(&sub), &record.encode())
                .expect("set");
            let id = queued(&kv, &sub, &["evt_a"], now).remove(0);
            let first = tick(&env_at(&kv, &settings, &entropy, now), &Answer(Ok(503)));
            assert_eq!(first.failed, 1);
            let due = stored_delivery(&kv, &keys::delivery(&id))
                .next_attempt_at
                .expect("a retry");
            let report = tick(&env_at(&kv, &settings, &entropy, due), &Answer(Ok(code)));
            assert_eq!(
                (report.attempted, report.succeeded, report.failed),
                (1, 1, 0),
                "{code}"
            );
            let d = stored_delivery(&kv, &keys::delivery(&id));
            assert_eq!(d.status, Status::Succeeded, "{code}");
            assert_eq!((d.next_attempt_at, d.finished_at), (None, Some(due)));
            let last = d.attempts.last().expect("attempt");
            assert_eq!((last.number, last.succeeded), (2, true), "{code}");
            assert_eq!(
                stored_subscription(&kv, &sub).consecutive_failures,
                0,
                "{code}: a success resets the streak"
            );
        }
    }

    /// DESIGN "Delivery": 410 Gone disables the subscription at once (reason `gone`), and the
    /// delivery fails without a retry; another 4xx is retried and disables nothing.
    #[test]
    fn a_410_gone_fails_the_delivery_and_disables_the_subscription_at_once() {
        for (code, gone) in [(410, true), (404, false)] {
            let kv = MemoryKv::new();
            let settings = Settings::default();
            let entropy = SeededEntropy::new(13);
            let now = 1_767_225_600_000;
            let sub = active_subscription(&kv);
            let id = queued(&kv, &sub, &["evt_a"], now).remove(0);
            let report = tick(&env_at(&kv, &settings, &entropy, now), &Answer(Ok(code)));
            assert_eq!((report.attempted, report.failed), (1, 1), "{code}");
            let d = stored_delivery(&kv, &keys::delivery(&id));
            let record = stored_subscription(&kv, &sub);
            if gone {
                assert_eq!(d.status, Status::Failed, "no retry after 410");
                assert_eq!(d.next_attempt_at, None);
                assert_eq!(record.status, SubStatus::Disabled);
                assert_eq!(record.disabled_reason.as_deref(), Some("gone"));
            } else {
                assert_eq!(d.status, Status::Pending, "{code} is retried");
                assert!(d.next_attempt_at.is_some());
                assert_eq!(record.status, SubStatus::Active);
            }
        }
    }

    /// DESIGN "Delivery": a subscription is disabled (reason `repeated_failures`) when its
    /// last `disable_after_failures` deliveries all ended failed; any success resets the
    /// streak; a subscription no longer active is left alone.
    #[test]
    fn the_failure_streak_disables_at_the_configured_count_and_a_success_resets_it() {
        let kv = MemoryKv::new();
        let settings = Settings {
            disable_after_failures: 3,
            ..Settings::default()
        };
        let entropy = SeededEntropy::new(14);
        let now = 1_767_225_600_000;
        let env = env_at(&kv, &settings, &entropy, now);
        let sub = active_subscription(&kv);
        let streak = || {
            let s = stored_subscription(&kv, &sub);
            (s.consecutive_failures, s.status)
        };
        record_streak(&env, &sub, false).expect("streak");
        record_streak(&env, &sub, false).expect("streak");
        assert_eq!(streak(), (2, SubStatus::Active));
        record_streak(&env, &sub, true).expect("reset");
        assert_eq!(
            streak(),
            (0, SubStatus::Active),
            "a success resets the streak"
        );
        record_streak(&env, &sub, true).expect("nothing to reset");
        assert_eq!(streak(), (0, SubStatus::Active));
        for n in 1..=2 {
            record_streak(&env, &sub, false).expect("streak");
            assert_eq!(streak(), (n, SubStatus::Active), "{n} of 3");
        }
        record_streak(&env, &sub, false).expect("streak");
        assert_eq!(streak(), (3, SubStatus::Disabled), "the third in a row");
        let record = stored_subscription(&kv, &sub);
        assert_eq!(record.disabled_reason.as_deref(), Some("repeated_failures"));
        assert_eq!(record.disabled_at, Some(now));
        record_streak(&env, &sub, false).expect("disabled: left alone");
        record_streak(&env, &sub, true).expect("disabled: left alone");
        assert_eq!(streak(), (3, SubStatus::Disabled));
        record_streak(&env, "sub_000000000000000000000009", false).expect("no such record");
    }

    /// DESIGN "Delivery": disabling cancels the subscription's pending attempts; a delivery
    /// another tick holds a live lease on is left to that tick, and finished deliveries stay
    /// as they are. Disabling twice cancels nothing more.
    #[test]
    fn disabling_cancels_pending_deliveries_but_not_leased_or_finished_ones() {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(15);
        let now = 1_767_225_600_000;
        let env = env_at(&kv, &settings, &entropy, now);
        let sub = active_subscription(&kv);
        let ids: Vec<String> = [
            "evt_due",
            "evt_later",
            "evt_leased",
            "evt_lapsed",
            "evt_done",
        ]
        .iter()
        .map(|e| pending_delivery(&kv, &sub, e, now + 60_000))
        .collect();
        let edit = |id: &str, f: &dyn Fn(&mut Delivery)| {
            let mut d = stored_delivery(&kv, &keys::delivery(id));
            f(&mut d);
            kv.set(&keys::delivery(id), &d.encode()).expect("set");
        };
        edit(&ids[2], &|d| {
            d.lease_until = Some(now + 1);
            d.lease_owner = Some("tick_other".into());
        });
        edit(&ids[3], &|d| {
            d.lease_until = Some(now);
            d.lease_owner = Some("tick_dead".into());
        });
        edit(&ids[4], &|d| {
            d.status = Status::Succeeded;
            d.next_attempt_at = None;
            d.finished_at = Some(now - 1);
        });
        history_log(&sub).append(&kv, &ids).expect("history");
        let disabled = disable(&env, &sub, "operator").expect("disable");
        assert_eq!(
            disabled.map(|s| (s.status, s.disabled_reason)),
            Some((SubStatus::Disabled, Some("operator".to_owned())))
        );
        let status = |id: &str| stored_delivery(&kv, &keys::delivery(id));
        for id in [&ids[0], &ids[1], &ids[3]] {
            let d = status(id);
            assert_eq!(d.status, Status::Cancelled, "{id}");
            assert_eq!((d.next_attempt_at, d.finished_at), (None, Some(now)));
        }
        assert_eq!(status(&ids[2]).status, Status::Pending, "leased elsewhere");
        assert_eq!(status(&ids[4]).status, Status::Succeeded);
        assert_eq!(status(&ids[4]).finished_at, Some(now - 1));
        assert_eq!(disable(&env, &sub, "operator").expect("again"), None);
        // The lease runs out: a later cancel takes that one too, and only that one.
        let later = env_at(&kv, &settings, &entropy, now + 1);
        assert_eq!(cancel_pending(&later, &sub).expect("cancel"), 1);
        assert_eq!(status(&ids[2]).status, Status::Cancelled);
        assert_eq!(cancel_pending(&later, &sub).expect("cancel"), 0);
    }

    /// Disabling decides under compare-and-swap: a delivery that another tick leased, or
    /// that finished, between the cancel's read and its write is left as it is; one whose
    /// lease runs out exactly now is cancelled. Deliveries already finished when it reads
    /// begin no compare-and-swap at all.
    #[test]
    fn a_delivery_leased_or_finished_while_disabling_is_left_as_it_is() {
        let now = 1_767_225_600_000;
        type Change = fn(&mut Delivery, u64);
        let cases: [(&str, Change, Status); 3] = [
            (
                "leased",
                |d, now| {
                    d.lease_until = Some(now + 10_000);
                    d.lease_owner = Some("tick_other".into());
                },
                Status::Pending,
            ),
            (
                "lease runs out now",
                |d, now| {
                    d.lease_until = Some(now);
                    d.lease_owner = Some("tick_dead".into());
                },
                Status::Cancelled,
            ),
            (
                "finished",
                |d, now| {
                    d.status = Status::Succeeded;
                    d.next_attempt_at = None;
                    d.finished_at = Some(now);
                },
                Status::Succeeded,
            ),
        ];
        for (what, change, expected) in cases {
            let kv = MemoryKv::new();
            let settings = Settings::default();
            let entropy = SeededEntropy::new(16);
            let sub = active_subscription(&kv);
            let id = pending_delivery(&kv, &sub, "evt_a", now + 60_000);
            let done = pending_delivery(&kv, &sub, "evt_done", now);
            let mut finished = stored_delivery(&kv, &keys::delivery(&done));
            finished.status = Status::Failed;
            finished.finished_at = Some(now - 1);
            kv.set(&keys::delivery(&done), &finished.encode())
                .expect("set");
            history_log(&sub)
                .append(&kv, &[done.clone(), id.clone()])
                .expect("history");
            let key: &'static str = Box::leak(keys::delivery(&id).to_string().into_boxed_str());
            let hooked = HookKv::new(&kv, key, || {
                let mut d = stored_delivery(&kv, key);
                change(&mut d, now);
                kv.set(key, &d.encode()).expect("set");
            });
            let env = env_at(&hooked, &settings, &entropy, now);
            let cancelled = cancel_pending(&env, &sub).expect("cancel");
            let d = stored_delivery(&kv, key);
            assert_eq!(d.status, expected, "{what}");
            assert_eq!(
                cancelled,
                u32::from(expected == Status::Cancelled),
                "{what}"
            );
            assert!(
                !hooked
                    .cas
                    .borrow()
                    .contains(&keys::delivery(&done).to_string()),
                "{what}: no compare-and-swap on a delivery read as finished"
            );
        }
    }

    #[test]
    fn retries_follow_the_schedule_with_bounded_jitter() {
        for random in [0, 1, 4_999, 5_000, u64::MAX] {
            let second = retry_due(1_000_500, 1, random).expect("attempt 2");
            assert!((1_060_500..=1_066_500).contains(&second), "{second}");
            assert_eq!(second % 1000, 0);
            let third = retry_due(1_000_500, 2, random).expect("attempt 3");
            assert!((1_300_500..=1_330_500).contains(&third), "{third}");
        }
        assert_eq!(retry_due(0, 3, 0), None);
        assert_eq!(retry_due(0, 0, 0), None);
    }

    /// `retry_delays_ms` moves the schedule (short delays for tests and operators): each
    /// retry comes after its delay, on a whole second, at most a second late, never panics.
    #[test]
    fn retry_delays_come_from_the_setting() {
        for random in [0, 1, 999, u64::MAX] {
            let second = retry_due_after(&[1000, 2000], 5_500, 1, random).expect("attempt 2");
            assert!(
                (6_500..=7_000).contains(&second) && second.is_multiple_of(1000),
                "{second}"
            );
            let third = retry_due_after(&[1000, 2000], 5_500, 2, random).expect("attempt 3");
            assert!(
                (7_500..=8_000).contains(&third) && third.is_multiple_of(1000),
                "{third}"
            );
        }
        assert_eq!(retry_due_after(&[1000, 2000], 0, 3, 0), None);
        let settings = Settings::from_pairs([("retry_delays_ms", "1000, 2000")]).expect("parses");
        assert_eq!(settings.retry_delays_ms, [1000, 2000]);
        assert_eq!(Settings::default().retry_delays_ms, RETRY_DELAYS_MS);
        for bad in ["60000", "60000,300000,900000", "999,5000", "a,b", ""] {
            let err = Settings::from_pairs([("retry_delays_ms", bad)]);
            assert!(
                bad.is_empty() || err.is_err(),
                "{bad:?} must be refused: {err:?}"
            );
        }
    }

    /// Jitter happens: different random inputs spread the due times over the whole +10 %
    /// window (on whole seconds), never below the un-jittered delay nor past the bound.
    #[test]
    fn retry_jitter_spreads_due_times_within_the_bound() {
        let failed_at = 1_000_000;
        for (attempts, delay) in [(1, 60_000), (2, 300_000)] {
            let dues: std::collections::BTreeSet<u64> = (0..2_000u64)
                .map(|i| retry_due(failed_at, attempts, i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
                .map(|due| due.expect("a retry"))
                .collect();
            let (lo, hi) = (failed_at + delay, failed_at + delay + delay / 10);
            assert!(dues.iter().all(|d| (lo..=hi).contains(d)), "{dues:?}");
            let seconds = delay / 10 / 1000;
            assert!(
                dues.len() as u64 >= seconds * 9 / 10,
                "attempt {}: {} distinct due seconds over a {seconds} s window",
                attempts + 1,
                dues.len()
            );
            assert!(
                *dues.first().expect("some") <= lo + 1000,
                "the window's start is used"
            );
            assert!(
                *dues.last().expect("some") >= hi - 1000,
                "the window's end is used"
            );
        }
    }

    #[test]
    fn delivery_ids_are_stable_per_event_and_subscription() {
        let a = delivery_id("evt_1", "sub_1");
        assert_eq!(a, delivery_id("evt_1", "sub_1"));
        assert_ne!(a, delivery_id("evt_1", "sub_2"));
        assert_ne!(a, delivery_id("evt_2", "sub_1"));
        assert!(IdKind::Delivery.matches(&a));
        // The derivation itself is fixed (records written by earlier versions are found
        // again by it): the first 96 bits of SHA-256("<event>/<subscription>"), computed
        // with Python's hashlib.
        assert_eq!(a, "dlv_f8aaea693ec0b48f06dae934");
    }
}
