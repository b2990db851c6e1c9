//! Replay jobs: replays by range. A job selects the deliveries of some subscriptions that
//! were created in a time range, in some statuses (`failed`, `skipped`, `delivered`,
//! `cancelled`), optionally of some event types, and replays each under its own id, as a
//! single replay does. It runs on the timer in bounded steps, never in a request: each tick
//! advances every running job (up to [`JOBS_PER_TICK`]) by one step, held by a lease so two
//! instances never run the same step at once.
//!
//! A job first *selects*: it reads each subscription's history ([`SCAN_PER_STEP`] entries a
//! step, from the first page the retention purge left) and writes the matching delivery ids
//! of each step in a record of their own (`rpl:{id}:s{n}`: a step run again rewrites it, so
//! a failure never lists a delivery twice or loses one), which makes its `total` exact
//! before anything is sent. It then
//! *replays* them, [`REPLAY_PER_STEP`] a step: the pace that keeps a replay of 100,000
//! deliveries from delaying fresh events (those run attempt 1 at once, outside the queue;
//! retries share the queue with at most one step's replays per tick). Progress: `total`,
//! `done`, `failed` (could not be replayed: the subscription disabled or deleted since).
//! Cancelling stops it between steps; what it replayed stays replayed. A job that no longer
//! runs has its selection records deleted; its record, with the counts, is purged with the
//! deliveries of the day it finished, once the retention period is past. A step cut short by a
//! crash is run again once its lease expires: a delivery may be replayed twice then, which
//! receivers deduplicate by its id like any retry.

use crate::history::{HistoryFilter, SCAN_PER_ITEM, history_log};
use crate::replay::{Replayed, replay_batch};
use crate::search::search;
use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::ids::{ClientId, DeliveryId, Generate, ReplayJobId, SubscriptionId};
use edgehook_records::delivery::{Delivery, Status};
pub use edgehook_records::replay::{JobState, ReplayJob, STATUS_NAMES};
use edgehook_storage::applog::Entry;
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, KvError, Update, update};
use edgehook_storage::retention;

/// History entries a selecting job reads per step.
pub const SCAN_PER_STEP: usize = 512;

/// Deliveries a replaying job replays per step (per tick).
pub const REPLAY_PER_STEP: usize = 200;

/// Running jobs one tick advances; the others wait for the next tick.
pub const JOBS_PER_TICK: usize = 4;

/// How long a tick holds a job while it runs a step.
const LEASE_MS: u64 = 30_000;

/// "Not begun" as a selection cursor: the subscription's history is looked at first.
const NOT_BEGUN: u64 = u64::MAX;

/// What a new replay job selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReplay {
    /// The client that asks (a partner), or `None` for the operator.
    pub client_id: Option<ClientId>,
    /// The subscriptions whose deliveries it replays; none: every subscription's (of
    /// `search_client`'s only, if given), read by day as the operator's search does.
    pub subscriptions: Vec<SubscriptionId>,
    /// With no `subscriptions`, only this client's.
    pub search_client: Option<ClientId>,
    /// Deliveries created at or after this (ms since the epoch)...
    pub since: u64,
    /// ... and before this.
    pub until: u64,
    /// The statuses it selects.
    pub statuses: Vec<Status>,
    /// The event types it selects (empty: all).
    pub event_types: Vec<String>,
}

/// Creates a replay job; the next ticks run it.
pub fn start<K: Kv>(env: &Env<'_, K>, new: NewReplay) -> Result<ReplayJob, ApiError> {
    let job = ReplayJob {
        id: ReplayJobId::generate(env.entropy),
        client_id: new.client_id,
        subscriptions: new.subscriptions,
        since: new.since,
        until: new.until,
        statuses: new.statuses,
        event_types: new.event_types,
        state: JobState::Selecting,
        created_at: env.now_ms,
        finished_at: None,
        cursor_sub: 0,
        cursor_seq: NOT_BEGUN,
        cursor_end: 0,
        total: 0,
        done: 0,
        failed: 0,
        lease_until: 0,
        selections: 0,
        replay_record: 0,
        replay_offset: 0,
        search_client: new.search_client,
    };
    // Listed for the ticks first, then the record under its random id: a start cut short
    // leaves at most a listed id without a record, which the next tick takes off the list
    // (never a record nobody lists, which no tick would run and nothing would purge).
    relist(env, &job.id, true)?;
    env.kv.set(&keys::replay(&job.id), &job.encode())?;
    Ok(job)
}

/// Starts the replay of everything `failed` or `skipped` of subscription `sub_id` since
/// `since`, up to and including now: what an enable with `replaySince` starts (the owner's,
/// with `client_id`), and a recovery by probes.
pub fn after_enable<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &SubscriptionId,
    client_id: Option<&ClientId>,
    since: u64,
) -> Result<ReplayJob, ApiError> {
    let new = NewReplay {
        client_id: client_id.cloned(),
        subscriptions: vec![sub_id.clone()],
        since,
        // Up to and including the enable's millisecond.
        until: (env.now_ms + 1).max(since + 1),
        statuses: vec![Status::Failed, Status::Skipped],
        event_types: Vec::new(),
        search_client: None,
    };
    start(env, new)
}

/// A replay job, if it exists (and, with `client_id`, is that client's).
pub fn load<K: Kv>(
    env: &Env<'_, K>,
    id: &ReplayJobId,
    client_id: Option<&ClientId>,
) -> Result<Option<ReplayJob>, ApiError> {
    let Some(bytes) = env.kv.get(&keys::replay(id))? else {
        return Ok(None);
    };
    let job = ReplayJob::decode(&bytes).ok_or_else(|| ApiError::internal("damaged replay job"))?;
    Ok(owned_by(job, client_id))
}

/// Cancels a running job (the caller's, with `client_id`). Returns the job as it is now
/// (a finished one unchanged), or `None` if there is no such job.
pub fn cancel<K: Kv>(
    env: &Env<'_, K>,
    id: &ReplayJobId,
    client_id: Option<&ClientId>,
) -> Result<Option<ReplayJob>, ApiError> {
    if load(env, id, client_id)?.is_none() {
        return Ok(None);
    }
    let now = env.now_ms;
    let job = update(env.kv, &keys::replay(id), &mut |cur| {
        let mut job = cur
            .and_then(ReplayJob::decode)
            .ok_or_else(|| ApiError::internal("damaged replay job"))?;
        if !job.state.running() {
            return Ok(Update::Keep(job));
        }
        job.state = JobState::Cancelled;
        job.finished_at = Some(now);
        Ok::<_, ApiError>(Update::Write(job.encode(), job))
    })?;
    // Best effort: a step running now retires it again when it commits.
    env.best_effort(
        "retire a cancelled replay job (replay lists)",
        retire(env, &job),
    );
    Ok(Some(job))
}

/// Advances every running job by one step (up to [`JOBS_PER_TICK`]). Returns whether a job
/// is still running, so the tick asks to run again in a second, and how many jobs were
/// listed as running. Store failures leave the step to a later tick.
pub(crate) fn advance<K: Kv>(env: &Env<'_, K>) -> (bool, usize) {
    let Ok(dir) = env.kv.get(&keys::REPLAY_DIRECTORY) else {
        return (true, 0);
    };
    let ids = directory_ids(dir.as_deref());
    let mut running = ids.len() > JOBS_PER_TICK;
    for id in ids.iter().take(JOBS_PER_TICK) {
        running |= step(env, &ReplayJobId::trusted(id.as_str())).unwrap_or(true);
    }
    (running, ids.len())
}

/// The job ids a directory record lists.
fn directory_ids(record: Option<&[u8]>) -> Vec<String> {
    record
        .and_then(|b| std::str::from_utf8(b).ok())
        .map(|s| {
            s.lines()
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Adds job `id` to the ticks' list, or takes it off (finished or cancelled).
fn relist<K: Kv>(env: &Env<'_, K>, id: &ReplayJobId, running: bool) -> Result<(), KvError> {
    update(env.kv, &keys::REPLAY_DIRECTORY, &mut |cur| {
        let ids = directory_ids(cur);
        if ids.iter().any(|i| i == id) == running {
            return Ok::<_, KvError>(Update::Keep(()));
        }
        let mut record = Vec::new();
        for other in ids.iter().filter(|i| *i != id) {
            record.extend_from_slice(other.as_bytes());
            record.push(b'\n');
        }
        if running {
            record.extend_from_slice(id.as_bytes());
        }
        Ok(Update::Write(record, ()))
    })
    .map_err(KvError::from)
}

fn owned_by(job: ReplayJob, client_id: Option<&ClientId>) -> Option<ReplayJob> {
    match client_id {
        Some(c) if job.client_id.as_deref() != Some(c) => None,
        _ => Some(job),
    }
}

/// One step of job `id`: claimed by its lease, run, committed. Whether it still runs.
fn step<K: Kv>(env: &Env<'_, K>, id: &ReplayJobId) -> Result<bool, KvError> {
    let key = keys::replay(id);
    let now = env.now_ms;
    let claimed = update(env.kv, &key, &mut |cur| {
        let Some(mut job) = cur.and_then(ReplayJob::decode) else {
            return Ok::<_, KvError>(Update::Keep(None));
        };
        if !job.state.running() || job.lease_until > now {
            return Ok(Update::Keep(Some((job, false))));
        }
        job.lease_until = now + LEASE_MS;
        Ok(Update::Write(job.encode(), Some((job, true))))
    })
    .map_err(KvError::from)?;
    let mut job = match claimed {
        None => {
            relist(env, id, false)?;
            return Ok(false);
        }
        Some((job, false)) if !job.state.running() => {
            retire(env, &job)?;
            return Ok(false);
        }
        Some((_, false)) => return Ok(true), // another tick holds it
        Some((job, true)) => job,
    };
    let lease = job.lease_until;
    match job.state {
        JobState::Selecting => select(env, &mut job)?,
        JobState::Replaying => replay_some(env, &mut job)?,
        JobState::Done | JobState::Cancelled => {}
    }
    job.lease_until = 0;
    let committed = update(env.kv, &key, &mut |cur| {
        let Some(current) = cur.and_then(ReplayJob::decode) else {
            return Ok::<_, KvError>(Update::Keep(None));
        };
        if current.lease_until != lease {
            return Ok(Update::Keep(None)); // lost the lease: the step is done again
        }
        let mut next = job.clone();
        if current.state == JobState::Cancelled {
            // Cancelled meanwhile: the progress of this step is kept, the cancel too.
            next.state = JobState::Cancelled;
            next.finished_at = current.finished_at;
        }
        Ok(Update::Write(next.encode(), Some(next)))
    })
    .map_err(KvError::from)?;
    match committed {
        Some(job) if !job.state.running() => {
            retire(env, &job)?;
            Ok(false)
        }
        _ => Ok(true),
    }
}

/// Retires a job that no longer runs (done or cancelled): deletes its selection records
/// (only its steps read them), lists its record for the retention purge of the day it
/// finished (its counts stay readable until then), and takes it off the running list, last,
/// so a failure on the way is retried by the next tick (twice listed, it is purged twice:
/// a delete of nothing). A step that was running when the job was cancelled retires it
/// again when it commits, its own new selection record included.
fn retire<K: Kv>(env: &Env<'_, K>, job: &ReplayJob) -> Result<(), KvError> {
    for n in 0..job.selections {
        env.kv.delete(&keys::replay_selection(&job.id, n))?;
    }
    let finished = job.finished_at.unwrap_or(env.now_ms);
    retention::retain(env.kv, finished, keys::replay(&job.id).as_str(), None)?;
    relist(env, &job.id, false)
}

/// Whether delivery `d` is one the job selects.
fn selects(job: &ReplayJob, d: &Delivery) -> bool {
    (job.since..job.until).contains(&d.created_at)
        && job.statuses.contains(&d.status)
        && (job.event_types.is_empty() || job.event_types.contains(&d.event_type))
}

/// A selection step: up to [`SCAN_PER_STEP`] history entries read, the matches listed.
fn select<K: Kv>(env: &Env<'_, K>, job: &mut ReplayJob) -> Result<(), KvError> {
    // The step's selection record: delivery ids, one per line.
    let mut selected = Selection::default();
    match job.subscriptions.is_empty() {
        true => select_by_day(env, job, &mut selected)?,
        false => select_by_subscription(env, job, &mut selected)?,
    }
    let Selection { ids, count } = selected;
    if count > 0 {
        // The step's own record (the next number): a step whose commit failed is run again
        // from the same cursor and rewrites it, so nothing is listed twice or lost.
        env.kv
            .set(&keys::replay_selection(&job.id, job.selections), &ids)?;
        job.selections += 1;
        job.total += count;
    }
    if job.state == JobState::Replaying && job.total == 0 {
        finish(env, job);
    }
    Ok(())
}

/// The deliveries a selection step found: their ids, one per line.
#[derive(Default)]
struct Selection {
    ids: Vec<u8>,
    count: u64,
}

impl Selection {
    /// Lists `d` if `job` selects it.
    fn consider(&mut self, job: &ReplayJob, d: &Delivery) {
        if selects(job, d) {
            self.ids.extend_from_slice(d.id.as_bytes());
            self.ids.push(b'\n');
            self.count += 1;
        }
    }
}

/// A step over every subscription's deliveries in the range, read by day (the operator's
/// search).
fn select_by_day<K: Kv>(
    env: &Env<'_, K>,
    job: &mut ReplayJob,
    selected: &mut Selection,
) -> Result<(), KvError> {
    let filter = HistoryFilter {
        since: Some(job.since),
        until: Some(job.until),
        ..HistoryFilter::default()
    };
    let cursor = match job.cursor_seq {
        NOT_BEGUN => 0,
        c => c,
    };
    let client = job.search_client.as_ref();
    let (found, next) = search(env, client, &filter, cursor, SCAN_PER_STEP / SCAN_PER_ITEM)?;
    for (_, d) in found {
        selected.consider(job, &d);
    }
    match next {
        Some(c) => job.cursor_seq = c,
        None => job.state = JobState::Replaying,
    }
    Ok(())
}

/// A step through the job's subscriptions' histories, one after the other, from its cursor.
fn select_by_subscription<K: Kv>(
    env: &Env<'_, K>,
    job: &mut ReplayJob,
    selected: &mut Selection,
) -> Result<(), KvError> {
    let mut budget = SCAN_PER_STEP;
    while budget > 0 {
        let Some(sub) = job.subscriptions.get(job.cursor_sub as usize) else {
            job.state = JobState::Replaying;
            break;
        };
        let log = history_log(sub);
        if job.cursor_seq == NOT_BEGUN {
            // Pages the purge dropped are not read; entries added from now are newer than
            // the job's range.
            job.cursor_seq = log.dropped_pages(env.kv)? * log.page_size();
            job.cursor_end = log.len(env.kv)?;
        }
        if job.cursor_seq >= job.cursor_end {
            job.cursor_sub += 1;
            job.cursor_seq = NOT_BEGUN;
            continue;
        }
        let want = budget.min(usize::try_from(job.cursor_end - job.cursor_seq).unwrap_or(budget));
        let entries: Vec<Entry<DeliveryId>> = log
            .read_ids(env.kv, job.cursor_seq, want)?
            .into_iter()
            .filter(|e| e.seq <= job.cursor_end)
            .collect();
        let Some(last) = entries.last().map(|e| e.seq) else {
            job.cursor_seq = job.cursor_end;
            continue;
        };
        let record_keys: Vec<Key> = entries.iter().map(|e| keys::delivery(&e.item)).collect();
        for record in env.kv.get_many(&record_keys)?.into_iter().flatten() {
            if let Ok(d) = Delivery::decode(&record) {
                selected.consider(job, &d);
            }
        }
        budget = budget.saturating_sub(entries.len());
        job.cursor_seq = last;
    }
    Ok(())
}

/// A replay step: the next [`REPLAY_PER_STEP`] selected deliveries replayed, read from the
/// selection records from the job's position in them.
fn replay_some<K: Kv>(env: &Env<'_, K>, job: &mut ReplayJob) -> Result<(), KvError> {
    let mut items: Vec<DeliveryId> = Vec::new();
    let (mut record, mut offset) = (job.replay_record, job.replay_offset);
    while items.len() < REPLAY_PER_STEP && record < job.selections {
        let bytes = env
            .kv
            .get(&keys::replay_selection(&job.id, record))?
            .unwrap_or_default();
        let ids = std::str::from_utf8(&bytes).unwrap_or_default();
        let mut seen = 0;
        let mut rest = false;
        for id in ids.split('\n') {
            if seen >= offset as usize && !id.is_empty() {
                if items.len() == REPLAY_PER_STEP {
                    rest = true;
                    break;
                }
                items.push(DeliveryId::trusted(id));
            }
            seen += 1;
        }
        match rest {
            true => offset = seen as u32,
            false => (record, offset) = (record + 1, 0),
        }
    }
    let outcomes = replay_batch(env, &items).map_err(KvError::from)?;
    for outcome in outcomes {
        match outcome {
            Replayed::Queued => job.done += 1,
            Replayed::Refused => job.failed += 1,
        }
    }
    (job.replay_record, job.replay_offset) = (record, offset);
    if record >= job.selections {
        finish(env, job);
    }
    Ok(())
}

fn finish<K: Kv>(env: &Env<'_, K>, job: &mut ReplayJob) {
    job.state = JobState::Done;
    job.finished_at = Some(env.now_ms);
}
