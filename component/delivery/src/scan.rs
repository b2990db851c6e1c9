//! Scanning due seconds: which deliveries are due now, which entries must wait (records not written yet, leases held), and the watermark each second may reach.

use crate::batch::{MAX_ATTEMPTS_PER_TICK, TickClock, run_batch};
use crate::claim::Wait;
use crate::queue::{QUEUE_GRACE_S, due_log, second_of};
use crate::report::TickReport;
use crate::sender::{SendError, Sender};
use edgehook_model::env::Env;
use edgehook_model::ids::{DeliveryId, SubscriptionId};
use edgehook_records::delivery::{Delivery, Status};
use edgehook_storage::applog::Entry;
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, KvError};

pub(crate) struct SecondOutcome {
    /// When something in this second can next be worked on, if anything is left.
    pub(crate) unfinished_until: Option<u64>,
    /// Entries up to this number need no further look.
    pub(crate) seen: u64,
}

/// One due second as a tick read it: its candidates, and what keeps its watermark back.
pub(crate) struct SecondScan {
    pub(crate) second: u64,
    /// The highest entry number the watermark may reach (no gap below it).
    pub(crate) ceiling: u64,
    /// Whether an entry below the last one is still being written.
    pub(crate) gap: bool,
    /// Deliveries to attempt: (entry number, id, whether its last attempt timed out).
    pub(crate) candidates: Vec<(u64, DeliveryId, bool)>,
    pub(crate) unfinished_until: Option<u64>,
    pub(crate) first_unfinished: Option<u64>,
    /// Timer entries to run (`timers.rs`): (entry number, entry).
    pub(crate) timers: Vec<(u64, String)>,
}

impl SecondScan {
    /// Entry `seq` is not done with until `until`.
    pub(crate) fn hold(&mut self, seq: u64, until: u64) {
        self.unfinished_until = Some(self.unfinished_until.map_or(until, |u| u.min(until)));
        self.first_unfinished = Some(self.first_unfinished.map_or(seq, |f| f.min(seq)));
    }

    pub(crate) fn outcome(&self, now: u64) -> SecondOutcome {
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
pub(crate) fn scan_second<K: Kv>(
    env: &Env<'_, K>,
    second: u64,
    seen: u64,
    len: u64,
) -> Result<SecondScan, KvError> {
    let now = env.now_ms;
    let entries: Vec<Entry<String>> = due_log(second).read(env.kv, seen, usize::MAX)?;
    // Past the grace period nothing more arrives in this second: what is missing by then was
    // lost by an appender that failed, not still on its way.
    let settled = (second + QUEUE_GRACE_S) * 1000 < now;
    let mut scan = SecondScan::new(second, seen, len, &entries, settled);
    // One look per delivery, at its first entry in this second. A subscription's id is not
    // a delivery: a rotation queued it for when its previous secret stops signing.
    let (erasures, entries): (Vec<_>, Vec<_>) = entries
        .into_iter()
        .partition(|e| e.item.starts_with(SUBSCRIPTION_PREFIX));
    let (timers, entries): (Vec<_>, Vec<_>) = entries
        .into_iter()
        .partition(|e| crate::timers::is_timer(&e.item));
    scan.timers = timers.into_iter().map(|e| (e.seq, e.item)).collect();
    for e in &erasures {
        let sub_id = SubscriptionId::trusted(e.item.as_str());
        if edgehook_subscriptions::erase_expired_secret(env, &sub_id).is_err() {
            scan.hold(e.seq, now + 1000);
        }
    }
    let mut first_seq: Vec<(DeliveryId, u64)> = entries
        .into_iter()
        .map(|e| (DeliveryId::trusted(e.item), e.seq))
        .collect();
    edgehook_storage::sort::sort(&mut first_seq);
    first_seq.dedup_by(|later, first| later.0 == first.0);
    let keys: Vec<Key> = first_seq.iter().map(|(id, _)| keys::delivery(id)).collect();
    let records = env.kv.get_many(&keys)?;
    for ((_, seq), record) in first_seq.iter().zip(records) {
        let record = record.and_then(|r| Delivery::decode(&r).ok());
        scan.look_at(*seq, record, settled, now);
    }
    edgehook_storage::sort::sort_by(&mut scan.candidates, |a, b| a.0 < b.0);
    Ok(scan)
}

impl SecondScan {
    /// The scan of `second` from watermark `seen`, with counter `len` and the new
    /// `entries`, before any record is read: how far its watermark may go.
    fn new(second: u64, seen: u64, len: u64, entries: &[Entry<String>], settled: bool) -> Self {
        let last_seq = entries.iter().map(|e| e.seq).max().unwrap_or(seen);
        // Concurrent appenders reserve numbers first and write pages after, so entry 52 can
        // be readable before entry 51. The watermark never passes a gap while one may still
        // fill.
        let mut contiguous = seen;
        for e in entries {
            if e.seq == contiguous + 1 {
                contiguous = e.seq;
            } else if e.seq > contiguous + 1 {
                break;
            }
        }
        // Settled, every number handed out is either read or lost, the last ones too (an
        // appender that reserved them and failed to write its page): the watermark reaches
        // the counter, or the second would never be found finished and expire.
        SecondScan {
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
            timers: Vec::new(),
        }
    }

    /// What entry `seq` of this second makes of its delivery's record: a candidate to
    /// attempt, an entry to hold, or nothing to do.
    fn look_at(&mut self, seq: u64, record: Option<Delivery>, settled: bool, now: u64) {
        // A queue entry is written before its delivery record: an entry without a record is
        // a fan-out still in progress (look again shortly) unless the second is settled,
        // when it can only be left over from a publish that failed.
        let Some(d) = record else {
            if !settled {
                self.hold(seq, now + 1000);
            }
            return;
        };
        if d.status != Status::Pending {
            // A replay queues its entry (in its own second) before it makes the record
            // pending again, so a record that finished before this entry's second began
            // may be a replay in progress: like a missing record, the entry waits until
            // the second is settled. A record that finished within the entry's second is
            // taken as the end of the run the entry was queued for (the common case, which
            // must not hold every second for its grace period): a replay in the very second
            // its delivery finished is not told apart by this. Every finished status is
            // replayable (a cancelled or skipped one after an enable), so each is held; a
            // skipped record counts as finished at its publish.
            if !settled && d.finished_at.is_some_and(|f| f < self.second * 1000) {
                self.hold(seq, now + 1000);
            }
            return;
        }
        let Some(due) = d.next_attempt_at else {
            return;
        };
        if second_of(due) > self.second {
            return; // rescheduled into a later second
        }
        match d.lease_until {
            Some(until) if until > now => self.hold(seq, until),
            _ => {
                let timeout = SendError::Timeout.as_str();
                let slow = d
                    .attempts
                    .last()
                    .is_some_and(|a| a.run == d.run && a.error.as_deref() == Some(timeout));
                self.candidates.push((seq, d.id, slow));
            }
        }
    }
}

/// The prefix of a subscription id (`sub_`), which a due-queue entry holds when it is a
/// rotation's erasure rather than a delivery.
const SUBSCRIPTION_PREFIX: &str = "sub_";

/// Queues the erasure of subscription `sub_id`'s previous secret for when its overlap ends
/// (`until_ms`): the tick that reads that second erases it ([`scan_second`]). The second is
/// rounded up, so the tick never comes before the end. Queues its rotation-ending notice
/// too, an hour before (`notify.rs`).
pub fn schedule_secret_erasure<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &SubscriptionId,
    until_ms: u64,
) -> Result<(), KvError> {
    let (notice_ms, notice) = crate::notify::rotation_ending_entry(env.now_ms, sub_id, until_ms);
    let mut by_second: Vec<(u64, Vec<String>)> =
        vec![(until_ms.div_ceil(1000), vec![sub_id.to_string()])];
    let notice_second = notice_ms.div_ceil(1000);
    match by_second[0].0 == notice_second {
        true => by_second[0].1.insert(0, notice),
        false => by_second.insert(0, (notice_second, vec![notice])),
    }
    crate::queue::enqueue(env.kv, &by_second, None)
}

/// Sends the candidates of every scanned second, `max_concurrency` at a time. A batch lasts
/// as long as its slowest attempt, so deliveries whose last attempt timed out go last, in
/// batches of their own: one endpoint that hangs does not hold up everyone's retries. What is
/// not sent (budget, time, store failures, leases held by others, not due yet) holds its
/// second back.
pub(crate) fn run_candidates<K: Kv>(
    env: &Env<'_, K>,
    sender: &dyn Sender,
    tick_id: &str,
    scans: &mut [SecondScan],
    clock: &TickClock,
    report: &mut TickReport,
) {
    let now = env.now_ms;
    // (scan, entry number, id, slow), fast ones first, oldest second first; one per id.
    let mut work: Vec<(usize, u64, DeliveryId, bool)> = Vec::new();
    let mut ids: Vec<&str> = Vec::new();
    for scan in scans.iter() {
        for (_, id, _) in &scan.candidates {
            ids.push(id);
        }
    }
    let mut firsts = edgehook_storage::sort::firsts(&ids).into_iter();
    for (i, scan) in scans.iter().enumerate() {
        for (seq, id, slow) in &scan.candidates {
            if firsts.next() == Some(true) {
                work.push((i, *seq, id.clone(), *slow));
            }
        }
    }
    // Fast ones first, each group in its order (a stable partition).
    let (mut work, slow): (Vec<_>, Vec<_>) = work.into_iter().partition(|w| !w.3);
    work.extend(slow);
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
        let ids: Vec<DeliveryId> = batch.iter().map(|(_, _, id, _)| id.clone()).collect();
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
                Wait::Leased(until) | Wait::Paced(until) => scan.hold(seq, until),
                // Due later in this second: sent by a tick that reads a later clock.
                Wait::Due(due) if second_of(due) <= scan.second => scan.hold(seq, due),
                // Due in a later second, whose own entry stands for it: this one is stale.
                Wait::Due(_) => {}
            }
        }
    }
}
