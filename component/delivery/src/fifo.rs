//! FIFO subscriptions (`ordering: "fifo"`): deliveries attempted one at a time, in publish
//! order.
//!
//! A FIFO subscription's history (its append log of deliveries, in publish order) is its
//! queue. Publish writes its deliveries pending but *held*: no due time, no due-queue entry,
//! not sent by the request (`fanout.rs`), and lists the subscription in `fifodir`. Every
//! tick, before it scans the due queue, [`advance`] walks each listed subscription's
//! history from where it stopped (`fifo:{id}`): finished deliveries (succeeded, failed for
//! good, cancelled, skipped) are passed; the first unfinished one is the head. A held head
//! is released (due now, queued in this second, so this same tick attempts it); a head
//! already released waits for its outcome, retries included, and holds everything behind
//! it. So a failing head holds later deliveries until it is delivered or exhausts its
//! attempts. Every step is idempotent and written record first, queue entry after: a head
//! due and unleased that a crash left unqueued is queued again.
//!
//! A subscription switched back to `unordered` has every held delivery released at once. A
//! history entry without its record (a publish that failed before writing it) is passed
//! once it has been missing for [`MISSING_GRACE_MS`].

use crate::history::history_log;
use crate::queue::{enqueue, second_of};
use edgehook_model::env::Env;
use edgehook_model::ids::SubscriptionId;
use edgehook_records::delivery::{Delivery, Status};
use edgehook_storage::codec::{Reader, Writer};
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, KvError, Update, update, update_seldom};
use edgehook_subscriptions::{Ordering, Subscription};

/// FIFO subscriptions a tick advances at most (the rest on the next ones).
pub const FIFO_SUBSCRIPTIONS_PER_TICK: usize = 64;
/// History entries one subscription's step reads at most.
const ENTRIES_PER_STEP: usize = 32;
/// How long a history entry may lack its record before it is taken for a failed publish's
/// leftover and passed.
pub const MISSING_GRACE_MS: u64 = 60_000;
/// The format of `fifo:{id}`.
const FIFO_V1: u8 = 0xF1;

/// Lists FIFO subscription `sub_id` for the ticks (after publish wrote its deliveries).
pub(crate) fn list<K: Kv>(kv: &K, sub_id: &SubscriptionId) -> Result<(), KvError> {
    update_seldom(kv, &keys::FIFO_DIRECTORY, &mut |cur| {
        let text = cur.and_then(|b| std::str::from_utf8(b).ok()).unwrap_or("");
        if text.lines().any(|l| l == sub_id) {
            return Ok::<_, KvError>(Update::Keep(()));
        }
        Ok(Update::Write(format!("{text}{sub_id}\n").into_bytes(), ()))
    })
    .map_err(KvError::from)
}

fn unlist<K: Kv>(kv: &K, sub_id: &SubscriptionId) -> Result<(), KvError> {
    update(kv, &keys::FIFO_DIRECTORY, &mut |cur| {
        let text = cur.and_then(|b| std::str::from_utf8(b).ok()).unwrap_or("");
        let kept: String = text
            .lines()
            .filter(|l| *l != sub_id && !l.is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        match kept.len() == text.len() {
            true => Ok::<_, KvError>(Update::Keep(())),
            false => Ok(Update::Write(kept.into_bytes(), ())),
        }
    })
    .map_err(KvError::from)
}

/// Where a subscription's FIFO walk stands: history entries done with (by number), and
/// since when the head's record has been missing, if it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Place {
    passed: u64,
    missing_since: Option<u64>,
}

impl Place {
    fn decode(bytes: &[u8]) -> Option<Place> {
        let mut r = Reader::new(bytes, FIFO_V1)?;
        let place = Place {
            passed: r.u64()?,
            missing_since: r.opt(Reader::u64)?,
        };
        r.end()?;
        Some(place)
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(FIFO_V1, 19);
        w.u64(self.passed).opt(self.missing_since, Writer::u64);
        w.finish()
    }
}

/// Advances listed FIFO subscriptions by one step each: all of them, or
/// [`FIFO_SUBSCRIPTIONS_PER_TICK`] from a place that moves with the clock when more are
/// listed. Returns whether a head was released (its outcome, recorded by this tick, lets the
/// next one go, so a tick should follow at once); `None` when none is listed (or the list
/// cannot be read), so the tick spends no second read on it after its attempts. Store
/// failures leave the step to a later tick.
pub(crate) fn advance<K: Kv>(env: &Env<'_, K>) -> Option<bool> {
    let dir = env.kv.get(&keys::FIFO_DIRECTORY).ok()?;
    let text = dir
        .as_deref()
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or("");
    let ids: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    if ids.is_empty() {
        return None;
    }
    let start = (env.now_ms / 1000) as usize % ids.len();
    let mut released = false;
    for id in ids
        .iter()
        .cycle()
        .skip(start)
        .take(ids.len().min(FIFO_SUBSCRIPTIONS_PER_TICK))
    {
        released |= step(env, &SubscriptionId::trusted(*id)).unwrap_or(false);
    }
    Some(released)
}

/// One subscription's step: passes finished deliveries, releases the head (or, no longer
/// FIFO, everything held). Returns whether it released something.
fn step<K: Kv>(env: &Env<'_, K>, sub_id: &SubscriptionId) -> Result<bool, KvError> {
    let now = env.now_ms;
    let place_key = keys::fifo(sub_id);
    let mut batch: Vec<Key> = vec![place_key.clone(), keys::subscription(sub_id)];
    let read = env.kv.get_many(&batch)?;
    let place = read[0]
        .as_deref()
        .and_then(Place::decode)
        .unwrap_or_default();
    let fifo = read[1]
        .as_deref()
        .and_then(|b| Subscription::decode(b).ok())
        .is_none_or(|s| s.options.ordering == Ordering::Fifo);
    let log = history_log(sub_id);
    let entries = log.read_ids(env.kv, place.passed, ENTRIES_PER_STEP)?;
    batch = entries.iter().map(|e| keys::delivery(&e.item)).collect();
    let records = env.kv.get_many(&batch)?;
    let mut next = place;
    let mut released = false;
    let mut waiting = false;
    for (entry, record) in entries.iter().zip(records) {
        let at_head = !waiting;
        match record.as_deref().map(Delivery::decode).transpose()? {
            // Not written yet (a publish in progress), or a failed publish's leftover.
            None => {
                let since = *next.missing_since.get_or_insert(now);
                if at_head && now.saturating_sub(since) >= MISSING_GRACE_MS {
                    next = Place {
                        passed: entry.seq,
                        missing_since: None,
                    };
                    continue;
                }
                waiting = true;
            }
            Some(d) if d.status != Status::Pending => {
                if at_head {
                    next = Place {
                        passed: entry.seq,
                        missing_since: None,
                    };
                }
            }
            Some(d) => {
                released |= release(env, &d)?;
                waiting = true;
            }
        }
        if waiting && fifo {
            break;
        }
    }
    if next != place {
        update(env.kv, &place_key, &mut |cur| {
            let stored = cur.and_then(Place::decode).unwrap_or_default();
            match stored.passed > next.passed {
                true => Ok::<_, KvError>(Update::Keep(())), // another tick went further
                false => Ok(Update::Write(next.encode(), ())),
            }
        })
        .map_err(KvError::from)?;
    }
    // Done with every entry: off the list, unless a publish appended meanwhile (it lists
    // the subscription after appending, so one of the two sees the other).
    if !waiting && entries.len() < ENTRIES_PER_STEP {
        unlist(env.kv, sub_id)?;
        if log.len(env.kv)? > next.passed {
            list(env.kv, sub_id)?;
        }
    }
    Ok(released)
}

/// Releases pending delivery `d` if it is held (due now, then queued in this second), or
/// queues again one that is due, unleased and so perhaps never queued (a crash between the
/// two writes). Returns whether it released a held one.
fn release<K: Kv>(env: &Env<'_, K>, d: &Delivery) -> Result<bool, KvError> {
    let now = env.now_ms;
    let unleased = d.lease_until.is_none_or(|u| u <= now);
    let held = d.next_attempt_at.is_none();
    if !unleased || d.next_attempt_at.is_some_and(|due| due > now) {
        return Ok(false); // in flight, or waiting for its retry (queued by its outcome)
    }
    if held {
        let made_due = update(env.kv, &keys::delivery(&d.id), &mut |cur| {
            let Some(bytes) = cur else {
                return Ok::<_, KvError>(Update::Keep(false));
            };
            let mut rec = Delivery::decode(bytes)?;
            if rec.status != Status::Pending || rec.next_attempt_at.is_some() {
                return Ok(Update::Keep(false));
            }
            rec.next_attempt_at = Some(now);
            Ok(Update::Write(rec.encode(), true))
        })
        .map_err(KvError::from)?;
        if !made_due {
            return Ok(false);
        }
    }
    enqueue(env.kv, &[(second_of(now), vec![d.id.clone()])], None)?;
    Ok(held)
}
