//! Publish and fan-out: an event stored once, one delivery per active listener, attempt 1 of each queued as due now.

use crate::claim::{LEASE_MARGIN_MS, MAX_ATTEMPTS_PER_TICK, TICK_TIME_BUDGET_MS};
use crate::history::history_log;
use crate::queue::{SeenDirectories, enqueue, second_of};
use edgehook_model::env::Env;
use edgehook_model::events::{self, PublishError, PublishReceipt};
use edgehook_model::ids::{DeliveryId, EventId, Generate, SubscriptionId, request_id};
use edgehook_records::delivery::{Delivery, EventRecord, Status, delivery_id};
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{CAS_ATTEMPTS, Kv, KvError, Update, update};
use edgehook_storage::retention;
use edgehook_subscriptions::{self as subscriptions, Status as SubStatus, Subscription};
use sha2::{Digest, Sha256};
use std::rc::Rc;

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
    let load_hash = crate::loads::load_hash(&events::load_id(event_type, load)?);
    let body_sha256 = edgehook_model::ids::hex(&Sha256::digest(load));
    let event_id = event_id_for(env, idempotency_key);
    let keyed = idempotency_key.is_some();
    let mut found = find_or_record(
        env,
        (event_type, &load_hash),
        &event_id,
        &body_sha256,
        keyed,
    )
    .map_err(store)?;
    let replayed = found.existing.is_some();
    let origin = origin_of(replayed, idempotency_key);
    // A key-less event run at once by this invocation: the batches its run starts for
    // certain are written leased to it, which so claims nothing ([`RunLease`]).
    let lease = (prepare && !found.active.is_empty() && origin == Origin::Fresh)
        .then(|| RunLease::for_run_now(env));
    let event = settle(
        env,
        &mut found,
        (&event_id, event_type),
        &body_sha256,
        load,
        keyed,
    )?;
    let written = match event.fanned_out {
        true => Vec::new(),
        false => fan_out_found(env, &event, origin, &found, lease.as_ref(), load).map_err(store)?,
    };
    let prepared = (prepare && !replayed).then(|| prepared(lease, load, written, &found.active));
    let deliveries = u32::try_from(event.subscriptions.len()).unwrap_or(u32::MAX);
    let receipt = PublishReceipt {
        event_id,
        deliveries,
        next_due_ms: (deliveries > 0).then_some(event.created_at),
        replayed,
    };
    Ok((receipt, prepared))
}

/// A store failure, as a publish reports it.
fn store(e: KvError) -> PublishError {
    PublishError::StoreUnavailable(e.to_string())
}

/// The event id of a publish: derived from its idempotency key, or fresh and random.
fn event_id_for<K: Kv>(env: &Env<'_, K>, idempotency_key: Option<&str>) -> EventId {
    match idempotency_key {
        Some(k) => {
            let digest = Sha256::new()
                .chain_update("ingest/")
                .chain_update(k)
                .finalize();
            let mut id = String::from("evt_");
            edgehook_model::ids::push_hex(&mut id, &digest[..12]);
            EventId::trusted(id)
        }
        None => EventId::generate(env.entropy),
    }
}

/// What a publish found or made of its event before its fan-out.
struct Found {
    /// A new event's active listeners (none loaded for one found under its key).
    active: Vec<Subscription>,
    /// The due and retention directories, as a new event's listeners' lookup read them.
    seen: Option<SeenDirectories>,
    /// The new event's record, if this publish made it.
    created: Option<EventRecord>,
    /// The event's record as found under its key, if it was.
    existing: Option<Vec<u8>>,
}

/// Finds a keyed event's record, or makes a new one (listed for retention first, then in
/// its load id's index; a keyed one recorded at once, created only if absent).
fn find_or_record<K: Kv>(
    env: &Env<'_, K>,
    (event_type, load_hash): (&str, &str),
    event_id: &EventId,
    body_sha256: &str,
    keyed: bool,
) -> Result<Found, KvError> {
    // Without a key the id is fresh: there is nothing to find.
    let existing = match keyed {
        true => env.kv.get(&keys::event(event_id))?,
        false => None,
    };
    if existing.is_some() {
        return Ok(Found {
            active: Vec::new(),
            seen: None,
            created: None,
            existing,
        });
    }
    let (active, skipped, seen) = listeners(env, event_type)?;
    let event = EventRecord {
        id: event_id.clone(),
        event_type: event_type.to_owned(),
        created_at: env.now_ms,
        body_sha256: body_sha256.to_owned(),
        subscriptions: active.iter().map(|s| s.id.clone()).collect(),
        fanned_out: false,
        skipped,
        trace: env.trace.map(str::to_owned),
    };
    // A keyed event is recorded before its fan-out, so a retry with the key finds it and
    // resumes; it is created only if absent, so of two publishes with the same key racing
    // past the read above exactly one makes it, and the other is judged against it (a
    // different body is a conflict). A key-less one cannot be retried: its record is
    // written once, when its fan-out is done.
    // Listed for the retention purge before anything of it is written, so a publish that
    // fails at any later step leaves nothing the purge cannot find.
    retention::retain(
        env.kv,
        event.created_at,
        &crate::loads::retention_item(&event.id, load_hash),
        Some(seen.retention.as_deref()),
    )?;
    // Then its load id's index (`loads`), which the retention item names for the purge.
    crate::loads::index(env.kv, event.created_at, load_hash, &event.id)?;
    let existing = match keyed {
        true => create_if_absent(env.kv, &keys::event(event_id), &event.encode())?,
        false => None,
    };
    let created = existing.is_none().then_some(event);
    Ok(Found {
        active,
        seen: Some(seen),
        created,
        existing,
    })
}

/// The event this publish fans out: its own new one (a keyed one's body written after its
/// record), or the one found under its key, if it is the same event (its body written again
/// while its fan-out is unfinished); a different one is a conflict.
fn settle<K: Kv>(
    env: &Env<'_, K>,
    found: &mut Found,
    (event_id, event_type): (&EventId, &str),
    body_sha256: &str,
    load: &[u8],
    keyed: bool,
) -> Result<EventRecord, PublishError> {
    let write_body = || env.kv.set(&keys::event_body(event_id), load).map_err(store);
    if let Some(event) = found.created.take() {
        // The body after the keyed record: a publish that lost the race above must not
        // have replaced the winner's body with its own. A fresh event's body goes in the
        // batch of its records (`fan_out`).
        if keyed {
            write_body()?;
        }
        return Ok(event);
    }
    let Some(existing) = found.existing.as_deref() else {
        return Err(store(KvError::Missing("event record")));
    };
    let existing = EventRecord::decode(existing).map_err(store)?;
    if existing.event_type != event_type || existing.body_sha256 != body_sha256 {
        return Err(PublishError::Conflict(
            "This Idempotency-Key was already used for a different event. Use a new key for a new event.".into(),
        ));
    }
    if !existing.fanned_out {
        // Its publish may have stopped between its record and its body (or still be
        // there): the body is the same bytes, so writing it again is harmless.
        write_body()?;
    }
    Ok(existing)
}

/// Fans out the event `found` settled on: FIFO subscriptions' deliveries wait their turn
/// (`fifo.rs`); a resumed event's listeners were not loaded, their records say which.
fn fan_out_found<K: Kv>(
    env: &Env<'_, K>,
    event: &EventRecord,
    origin: Origin,
    found: &Found,
    lease: Option<&RunLease>,
    load: &[u8],
) -> Result<Vec<Written>, KvError> {
    let fifo: Vec<SubscriptionId> = match origin {
        Origin::Resumed => fifo_ids(
            subscriptions::load_many(env, &event.subscriptions)
                .map_err(|e| KvError::Refused(e.message))?
                .iter()
                .flatten(),
        ),
        Origin::Fresh | Origin::Keyed => fifo_ids(found.active.iter()),
    };
    let body = (origin == Origin::Fresh).then_some(load);
    fan_out(env, event, origin, found.seen.as_ref(), &fifo, lease, body)
}

/// What attempt 1 of a new event needs: the deliveries fan-out wrote, each with its
/// subscription. The deliveries were written in their listeners' order: each listener is
/// looked for from the one after the last found (then from the start), so pairing them is
/// linear, not quadratic, in the fan-out.
fn prepared(
    lease: Option<RunLease>,
    load: &[u8],
    written: Vec<Written>,
    active: &[Subscription],
) -> Prepared {
    let mut at = 0;
    Prepared {
        lease_owner: lease.map(|l| l.owner),
        body: Rc::new(load.to_vec()),
        items: written
            .into_iter()
            .filter_map(|w| {
                let i = (at..active.len())
                    .chain(0..at)
                    .find(|&i| active[i].id == w.delivery.subscription_id)?;
                at = i + 1;
                Some((w, active[i].clone()))
            })
            .collect(),
    }
}

/// Where the event of a publish comes from: an event found under its key, a new keyed one,
/// or a fresh one.
fn origin_of(replayed: bool, idempotency_key: Option<&str>) -> Origin {
    match (replayed, idempotency_key) {
        (true, _) => Origin::Resumed,
        (false, Some(_)) => Origin::Keyed,
        (false, None) => Origin::Fresh,
    }
}

/// The lease a key-less publish writes into the records of the batches its [`run_now`]
/// (in the same invocation) starts for certain, which then sends them without a claim (two
/// store operations a delivery: the claim's read and its compare-and-swap).
///
/// Safe because nobody else can have touched them: their event id is fresh and random,
/// known to no other call until their queue entries are read; a tick that reads them finds
/// the lease held and waits, and cancelling (`health.rs`) passes leased deliveries by. If
/// the invocation ends before it sends them, the lease runs out as a claimed one's would,
/// and a tick sends them then, through their queue entries.
///
/// The run sends its deliveries `max_concurrency` at a time, a batch after the one before
/// has ended, so batch `k` starts at most `k` attempt timeouts after the first (by the
/// run's clock, which moves by the attempts' durations), and its lease is that much longer.
/// Only the batches that start within the run's time budget ([`TICK_TIME_BUDGET_MS`]) are
/// leased: the run starts no batch after that, and the ones left wait for the tick, which a
/// lease would hold off. With the default 10 s timeout that is two batches (32 deliveries).
///
/// [`run_now`]: crate::tick::run_now
pub(crate) struct RunLease {
    pub(crate) owner: String,
    /// When the first batch's lease ends; batch `k`'s ends `k` steps later.
    first_until: u64,
    step_ms: u64,
    batch: usize,
    batches: usize,
}

impl RunLease {
    /// The lease for the run that follows this publish: the id it runs under; the first
    /// batch's as long as a claim of its own would last.
    fn for_run_now<K: Kv>(env: &Env<'_, K>) -> Self {
        let batch = env.settings.max_concurrency.max(1) as usize;
        let step_ms = env.settings.attempt_timeout_ms.max(1);
        // Batch k starts by k steps; it starts for certain if that is inside the budget.
        let batches = usize::try_from(TICK_TIME_BUDGET_MS.div_ceil(step_ms))
            .unwrap_or(1)
            .clamp(1, (MAX_ATTEMPTS_PER_TICK / batch).max(1));
        RunLease {
            owner: request_id(env.entropy),
            first_until: env.now_ms + step_ms + LEASE_MARGIN_MS,
            step_ms,
            batch,
            batches,
        }
    }

    /// When the lease of the run's `n`th delivery (from 0, in the order it sends them)
    /// ends; `None` past the leased batches.
    fn until(&self, n: usize) -> Option<u64> {
        let k = n / self.batch;
        (k < self.batches).then(|| self.first_until + k as u64 * self.step_ms)
    }
}

/// Publishes an event of our own (an operator alert, `alert.rs`) to one subscription id:
/// stored and delivered like any event (listed for retention, body, record, one delivery,
/// retried on the schedule), without the checks of a load. Its attempt 1 is due at the next
/// whole second, so a tick that raises one reports it due (a tick reads again only the
/// seconds after its own when it ends).
pub(crate) fn publish_internal<K: Kv>(
    env: &Env<'_, K>,
    event_type: &str,
    body: &[u8],
    subscription_id: &SubscriptionId,
) -> Result<(), KvError> {
    let event = EventRecord {
        id: EventId::generate(env.entropy),
        event_type: event_type.to_owned(),
        created_at: (second_of(env.now_ms) + 1) * 1000,
        body_sha256: edgehook_model::ids::hex(&Sha256::digest(body)),
        subscriptions: vec![subscription_id.to_owned()],
        fanned_out: false,
        skipped: Vec::new(),
        trace: None,
    };
    retention::retain(env.kv, event.created_at, &event.id, None)?;
    fan_out(env, &event, Origin::Fresh, None, &[], None, Some(body))?;
    Ok(())
}

/// Writes `value` under `key` only if the key holds nothing (a compare-and-swap expecting
/// absence). `None`: written; else what the key holds, which was not changed.
fn create_if_absent<K: Kv>(kv: &K, key: &Key, value: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
    for _ in 0..CAS_ATTEMPTS {
        let (cas, current) = kv.cas_begin(key)?;
        if current.is_some() {
            return Ok(current);
        }
        if kv.cas_swap(cas, value)? {
            return Ok(None);
        }
    }
    Err(KvError::Contended(key.to_string()))
}

/// A delivery record as fan-out wrote it: the record and its exact bytes, so a claim that
/// finds those bytes unchanged needs not parse them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub(crate) delivery: Delivery,
    pub(crate) bytes: Vec<u8>,
}

/// What attempt 1 of a new event needs, handed from [`publish_prepared`] to [`run_now`](crate::tick::run_now) in
/// the same invocation: the deliveries fan-out wrote, their subscriptions as publish read
/// them, and the body. A key-less event's first batches were written leased to the run (its
/// `lease_owner`), which sends them without a claim ([`RunLease`]); every other
/// delivery is still claimed by compare-and-swap against the store before it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The id the run must run under: the owner of the batches' lease, if publish
    /// wrote one.
    pub(crate) lease_owner: Option<String>,
    pub(crate) body: Rc<Vec<u8>>,
    pub(crate) items: Vec<(Written, Subscription)>,
}

/// The subscriptions listening to `event_type`: the active ones, and the ids of those that
/// record the event as skipped ([`records_skipped`]); and the due and retention directories,
/// read in the same batch as their records.
fn listeners<K: Kv>(
    env: &Env<'_, K>,
    event_type: &str,
) -> Result<(Vec<Subscription>, Vec<SubscriptionId>, SeenDirectories), KvError> {
    let ids = subscriptions::fanout_ids(env, event_type).map_err(KvError::from)?;
    let mut batch: Vec<Key> = ids.iter().map(keys::subscription).collect();
    batch.push(keys::DUE_DIRECTORY.clone());
    batch.push(keys::RETENTION_DIRECTORY.clone());
    let mut values = env.kv.get_many(&batch)?;
    let seen = SeenDirectories {
        retention: values.pop().flatten(),
        due: values.pop().flatten(),
    };
    let mut active = Vec::new();
    let mut skipped = Vec::new();
    for sub in values
        .into_iter()
        .flatten()
        .filter_map(|b| Subscription::decode(&b).ok())
        .filter(|s| s.event_types.iter().any(|t| t == event_type))
    {
        if sub.status == SubStatus::Active {
            active.push(sub);
        } else if records_skipped(env, &sub) {
            skipped.push(sub.id);
        }
    }
    Ok((active, skipped, seen))
}

/// Whether publish records a skipped delivery for `sub`, not active: it is disabled, not
/// deleted, and has been for less than the retention period. Past that, nothing it missed
/// at first could still be replayed, and a subscription nobody enables again must not cost
/// a record per event for ever: it stops recording (docs/design/delivery.md, "Skipped
/// deliveries").
fn records_skipped<K: Kv>(env: &Env<'_, K>, sub: &Subscription) -> bool {
    let retention_ms = u64::from(env.settings.retention_days) * retention::DAY_MS;
    sub.status == SubStatus::Disabled
        && sub.disabled_reason.as_deref() != Some(subscriptions::DELETED)
        && sub
            .disabled_at
            .is_some_and(|at| env.now_ms < at.saturating_add(retention_ms))
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

/// The ids of the FIFO subscriptions among `subs`.
fn fifo_ids<'a>(subs: impl Iterator<Item = &'a Subscription>) -> Vec<SubscriptionId> {
    subs.filter(|s| s.options.ordering == subscriptions::Ordering::Fifo)
        .map(|s| s.id.clone())
        .collect()
}

/// Creates the event's deliveries. Every step is idempotent, so a failed fan-out can run
/// again and resumes where it stopped: queue entries first, then per delivery its history
/// entry and the record that makes it real. A delivery to a subscription in `fifo` is held
/// (no due time, no queue entry, not run by the request) and its subscription listed for
/// the ticks, which release it in its turn (`fifo.rs`).
///
/// A fresh event's `body` is written in the batch of its records, ahead of them, and its
/// record (fanned out) after them in the same batch when no FIFO listing comes between: one
/// batch write for the whole event, where a fan-out 1 event made three writes.
fn fan_out<K: Kv>(
    env: &Env<'_, K>,
    event: &EventRecord,
    origin: Origin,
    seen: Option<&SeenDirectories>,
    fifo: &[SubscriptionId],
    lease: Option<&RunLease>,
    body: Option<&[u8]>,
) -> Result<Vec<Written>, KvError> {
    let todo = to_make(env, event, origin, fifo)?;
    // Queued in the current second (a new event's own). A resumed fan-out may run long
    // after its event's second was settled: an entry there, read by a tick before its
    // record below is written, would be taken for a failed publish's leftover and passed.
    // Its records are still due at the event's time, that is at once. (Never a second
    // before the event's: due later than its entry's second, an entry counts as stale.)
    let queue = [(
        second_of(env.now_ms.max(event.created_at)),
        todo.iter()
            .filter(|m| m.due())
            .map(|m| m.delivery.clone())
            .collect::<Vec<_>>(),
    )];
    enqueue(env.kv, &queue, seen.map(|s| s.due.as_deref()))?;
    // Then each delivery's history entry, then the record that makes it real. A keyed or
    // resumed event's records are created one at a time, only if absent, so a failure
    // part-way keeps every delivery finished before it. A fresh event's records race with
    // nobody: they are written together, in one batch after their history entries (one host
    // call and one append to the store where there were as many as the fan-out). A failure
    // part-way leaves history entries without records, which no reader lists, and the
    // records the store did write, whose deliveries are sent: as after any fan-out cut
    // short, and the publish fails.
    let mut written = Vec::with_capacity(todo.len());
    let mut fresh: Vec<(Key, Vec<u8>)> = Vec::new();
    if let Some(body) = body {
        fresh.push((keys::event_body(&event.id), body.to_vec()));
    }
    for m in todo {
        history_log(&m.subscription).append(env.kv, std::slice::from_ref(&m.delivery))?;
        let record = m.record(event, lease, written.len());
        let bytes = record.encode();
        let wrote = match origin {
            Origin::Fresh => {
                fresh.push((keys::delivery(&m.delivery), bytes.clone()));
                true
            }
            Origin::Keyed | Origin::Resumed => create_record(env.kv, &m.delivery, &bytes)?,
        };
        if wrote && m.due() {
            written.push(Written {
                delivery: record,
                bytes,
            });
        }
    }
    finish_fan_out(env, event, origin, fifo, fresh)?;
    Ok(written)
}

/// One delivery a fan-out makes.
struct ToMake {
    subscription: SubscriptionId,
    delivery: DeliveryId,
    /// Its subscription is disabled: recorded as skipped, never queued.
    skipped: bool,
    /// Its subscription is FIFO: held for its turn (`fifo.rs`).
    held: bool,
}

impl ToMake {
    /// Due at once: queued, and run by the publish's request.
    fn due(&self) -> bool {
        !self.skipped && !self.held
    }

    /// Its record; due now and in a leased batch of its run (the `n`th delivery it runs), it
    /// is written leased to the run.
    fn record(&self, event: &EventRecord, lease: Option<&RunLease>, n: usize) -> Delivery {
        // A skipped delivery is never queued: it waits, finished at its publish, for a
        // replay.
        let (status, next_attempt_at, finished_at) = match (self.skipped, self.held) {
            (true, _) => (Status::Skipped, None, Some(event.created_at)),
            (false, true) => (Status::Pending, None, None),
            (false, false) => (Status::Pending, Some(event.created_at), None),
        };
        let leased = lease
            .filter(|_| next_attempt_at.is_some())
            .and_then(|l| Some((l.until(n)?, l)));
        Delivery {
            id: self.delivery.clone(),
            event_id: event.id.clone(),
            event_type: event.event_type.clone(),
            subscription_id: self.subscription.clone(),
            created_at: event.created_at,
            status,
            attempts: Vec::new(),
            run: 0,
            next_attempt_at,
            lease_until: leased.map(|(until, _)| until),
            lease_owner: leased.map(|(_, l)| l.owner.clone()),
            finished_at,
        }
    }
}

/// The deliveries of `event` still to make: those it is delivered to, then the skipped. A
/// resumed fan-out skips the deliveries an earlier try already made (their history and
/// queue entries were written before their record), so retries make progress; a new event
/// has no deliveries yet, so only a resumed fan-out looks.
fn to_make<K: Kv>(
    env: &Env<'_, K>,
    event: &EventRecord,
    origin: Origin,
    fifo: &[SubscriptionId],
) -> Result<Vec<ToMake>, KvError> {
    let all = event.all_subscriptions().enumerate().map(|(n, s)| ToMake {
        subscription: s.clone(),
        delivery: delivery_id(&event.id, s),
        skipped: n >= event.subscriptions.len(),
        held: fifo.iter().any(|f| f == s),
    });
    if origin != Origin::Resumed {
        return Ok(all.collect());
    }
    let all: Vec<ToMake> = all.collect();
    let record_keys: Vec<Key> = all.iter().map(|m| keys::delivery(&m.delivery)).collect();
    let existing = env.kv.get_many(&record_keys)?;
    Ok(all
        .into_iter()
        .zip(existing)
        .filter(|(_, record)| record.is_none())
        .map(|(m, _)| m)
        .collect())
}

/// Creates delivery `id`'s record only if absent; whether it did.
fn create_record<K: Kv>(kv: &K, id: &DeliveryId, bytes: &[u8]) -> Result<bool, KvError> {
    update(kv, &keys::delivery(id), &mut |cur| {
        Ok::<_, KvError>(match cur {
            Some(_) => Update::Keep(false),
            None => Update::Write(bytes.to_vec(), true),
        })
    })
    .map_err(KvError::from)
}

/// Ends a fan-out: a fresh event's batch (`fresh`: its body and records, and its own record
/// when nothing comes between), the FIFO listings, and the event's record, fanned out.
fn finish_fan_out<K: Kv>(
    env: &Env<'_, K>,
    event: &EventRecord,
    origin: Origin,
    fifo: &[SubscriptionId],
    mut fresh: Vec<(Key, Vec<u8>)>,
) -> Result<(), KvError> {
    let mut done = event.clone();
    done.fanned_out = true;
    // Nothing comes between a fresh event's records and its own record but FIFO listings.
    let record_in_batch = origin == Origin::Fresh && fifo.is_empty();
    if record_in_batch {
        fresh.push((keys::event(&event.id), done.encode()));
    }
    if !fresh.is_empty() {
        env.kv.set_many(fresh)?;
    }
    // Listed after their history entries: a tick that finds nothing left unlists, then
    // looks at the history again (`fifo.rs`).
    for sub in fifo {
        crate::fifo::list(env.kv, sub)?;
    }
    // A new event was listed for retention before it was written; a resumed one is listed
    // again (its first publish may have failed before listing it).
    if origin == Origin::Resumed {
        retention::retain(env.kv, event.created_at, &event.id, None)?;
    }
    if !record_in_batch {
        env.kv.set(&keys::event(&event.id), &done.encode())?;
    }
    Ok(())
}
