//! Ticks: every attempt due now (`scheduler.tick`), and the attempts a request has just made due (`run_now`).

use crate::batch::{MAX_ATTEMPTS_PER_TICK, TickClock, run_batch};
use crate::fanout::Prepared;
use crate::purge::purge_expired;
use crate::queue::{QUEUE_GRACE_S, due_log, read_directory};
use crate::report::TickReport;
use crate::scan::{SecondScan, run_candidates, scan_second};
use crate::sender::Sender;
use edgehook_model::env::Env;
use edgehook_model::ids::{DeliveryId, EventId, request_id};
use edgehook_records::delivery::{EventRecord, delivery_id};
use edgehook_storage::directory::{self, Directory};
use edgehook_storage::keys::{self};
use edgehook_storage::kv::{Kv, KvError, Update, update};

/// Runs the attempts a request has just made due — attempt 1 of every delivery of an
/// accepted event, or the first attempt of a replay — right after its response is out, in
/// batches of `max_concurrency`. Only those deliveries: their records are read directly,
/// not found by scanning the due queue, so this costs the same whatever else is queued
/// (retries and anything this misses are the next tick's, through their queue entries).
pub fn run_now<K: Kv>(env: &Env<'_, K>, sender: &dyn Sender, work: &RunNow) -> TickReport {
    let mut report = TickReport::default();
    let ids: Vec<DeliveryId> = match work {
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
    // The run holds the lease publish wrote into its first batches, if it wrote one.
    let tick_id = match prepared.and_then(|p| p.lease_owner.clone()) {
        Some(owner) => owner,
        None => request_id(env.entropy),
    };
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
        let ran = run_batch(
            &clock.env(env),
            sender,
            &tick_id,
            batch,
            known,
            &clock,
            &mut report,
        );
        env.best_effort("attempts run at once (delivery records)", ran);
    }
    report.emit(env.log, false);
    report
}

/// The deliveries a request made due at once (see [`run_now`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunNow {
    /// Attempt 1 of every delivery of this accepted event.
    Event(EventId),
    /// Attempt 1 of every delivery of a new event, with what publish already read.
    Prepared(Box<Prepared>),
    /// The replayed delivery.
    Delivery(DeliveryId),
}

/// Runs every attempt that is due now (up to [`MAX_ATTEMPTS_PER_TICK`]), purges records past
/// retention, and reports when the next attempt is due. Store failures are not fatal: what
/// could not be done stays queued for a later tick.
pub fn tick<K: Kv>(env: &Env<'_, K>, sender: &dyn Sender) -> TickReport {
    let mut report = TickReport::default();
    let tick_id = request_id(env.entropy);
    let now = env.now_ms;
    // Replay jobs first: the deliveries a step replays are queued in this second, which
    // this tick then reads.
    let (replaying, jobs) = crate::replays::advance(env);
    // FIFO heads next, released into this second, which this tick then reads too.
    let fifo = crate::fifo::advance(env);
    report.replays = u32::try_from(jobs).unwrap_or(u32::MAX);
    let Ok(due) = DueSeconds::read(env) else {
        report.next_due_ms = Some(now + 1000);
        report.emit(env.log, true);
        return report;
    };
    let mut next = NextDue(None);
    if replaying {
        next.note(now + 1000);
    }
    if fifo == Some(true) {
        next.note(now);
    }
    let clock = TickClock {
        start_ms: now,
        elapsed_ms: std::cell::Cell::new(0),
    };
    let (mut scans, expired) = due.scan(env, &mut next);
    run_candidates(env, sender, &tick_id, &mut scans, &clock, &mut report);
    crate::recover::run(env, sender, &mut scans, &clock);
    // A FIFO head this tick delivered (or failed for good) lets the next one go now; the
    // tick that follows at once sends it.
    // (Only when FIFO subscriptions are listed: otherwise no read is spent on it.)
    if fifo.is_some() && crate::fifo::advance(&clock.env(env)) == Some(true) {
        next.note(now);
    }
    let mut seen_now: Vec<(u64, u64)> = Vec::new();
    for scan in &scans {
        let outcome = scan.outcome(now);
        seen_now.push((scan.second, outcome.seen));
        if let Some(t) = outcome.unfinished_until {
            next.note(t);
        }
    }
    due.settle(env, &seen_now, &expired);
    env.best_effort("retention purge (retention logs)", purge_expired(env));
    // Read the directory again: this tick queued retries into later seconds.
    match read_directory(env.kv) {
        Ok(dir) => {
            if let Some(s) = dir.keys().find(|s| **s * 1000 > now) {
                next.note(*s * 1000);
            }
        }
        Err(_) => next.note(now + 1000),
    }
    report.next_due_ms = next.0;
    due.count_backlog(&seen_now, &mut report);
    report.emit(env.log, true);
    report
}

/// When the next attempt is due, as a tick learns it: the earliest time noted.
struct NextDue(Option<u64>);

impl NextDue {
    fn note(&mut self, t: u64) {
        self.0 = Some(self.0.map_or(t, |n| n.min(t)));
    }
}

/// The due queue's seconds up to now, as a tick reads them at its start: the directory, and
/// each due second with its watermark (entries read) and its length.
struct DueSeconds {
    now: u64,
    directory: Directory,
    /// (second, watermark, length)
    seconds: Vec<(u64, u64, u64)>,
}

impl DueSeconds {
    fn read<K: Kv>(env: &Env<'_, K>) -> Result<DueSeconds, KvError> {
        let now = env.now_ms;
        let directory = read_directory(env.kv)?;
        // Each due second's length, read through its counter (`increment(key, 0)`: a
        // counter's bytes are the host's own, so never `get`).
        let seconds = directory
            .iter()
            .filter(|(s, _)| *s * 1000 <= now)
            .map(|(s, seen)| Ok((*s, *seen, due_log(*s).len(env.kv)?)))
            .collect::<Result<_, KvError>>()?;
        Ok(DueSeconds {
            now,
            directory,
            seconds,
        })
    }

    /// Reads every due second first (their candidates are then sent together: batches span
    /// seconds, so one slow attempt in each second does not cost a whole batch per second).
    /// Returns the scans and the seconds read to their end and past the grace period.
    fn scan<K: Kv>(&self, env: &Env<'_, K>, next: &mut NextDue) -> (Vec<SecondScan>, Vec<u64>) {
        let now = self.now;
        let mut expired: Vec<u64> = Vec::new();
        let mut scans: Vec<SecondScan> = Vec::new();
        let mut candidates = 0;
        for &(second, seen, len) in &self.seconds {
            if len <= seen {
                if (second + QUEUE_GRACE_S) * 1000 < now {
                    expired.push(second);
                }
                continue;
            }
            if candidates >= MAX_ATTEMPTS_PER_TICK {
                next.note(now); // enough for this tick; the next one reads on
                continue;
            }
            match scan_second(env, second, seen, len) {
                Ok(scan) => {
                    candidates += scan.candidates.len();
                    scans.push(scan);
                }
                Err(_) => next.note(now + 1000),
            }
        }
        (scans, expired)
    }

    /// Records the new watermarks and drops the expired seconds (their entries first); a
    /// concurrent enqueue only ever adds.
    fn settle<K: Kv>(&self, env: &Env<'_, K>, seen_now: &[(u64, u64)], expired: &[u64]) {
        for second in expired {
            env.best_effort(
                "expired second (due log)",
                due_log(*second).delete_all(env.kv),
            );
        }
        if seen_now.is_empty() && expired.is_empty() {
            return;
        }
        let written = update(env.kv, &keys::DUE_DIRECTORY, &mut |cur| {
            let mut dir = cur.map(directory::decode).transpose()?.unwrap_or_default();
            for (second, seen) in seen_now {
                if let Some(entry) = dir.get_mut(second) {
                    *entry = (*entry).max(*seen);
                }
            }
            for second in expired {
                if dir.get(second) == self.directory.get(second) {
                    dir.remove(second);
                }
            }
            Ok::<_, KvError>(Update::Write(directory::encode(&dir), ()))
        });
        env.best_effort("watermarks (due directory)", written.map_err(KvError::from));
    }

    /// The backlog: what is left unread of every due second, as the tick leaves it.
    fn count_backlog(&self, seen_now: &[(u64, u64)], report: &mut TickReport) {
        for &(second, seen, len) in &self.seconds {
            let read = seen_now
                .iter()
                .find(|(s, _)| *s == second)
                .map_or(seen, |(_, n)| *n);
            if len > read {
                report.backlog += len - read;
                report.oldest_due_ms.get_or_insert(second * 1000);
            }
        }
    }
}
