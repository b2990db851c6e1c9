//! Outcomes: what each attempt's answer does to its delivery (success, retry, failure, cancel), retries queued first, streaks after.

use crate::alert;
use crate::claim::{Claimed, Item, LEASE_MARGIN_MS, Wait};
use crate::health::{disable, record_streak};
use crate::pace;
use crate::queue::{BySecond, due_in, enqueue, second_of};
use crate::report::TickReport;
use crate::retry::{Verdict, asked_wait, verdict};
use crate::sender::{SendError, SendResult};
use edgehook_model::env::Env;
use edgehook_model::ids::{DeliveryId, SubscriptionId};
use edgehook_records::delivery::{Attempt, Delivery, Status};
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, KvError, Update, update};
use edgehook_storage::retention::DAY_MS;

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

/// One item of a batch with the verdict on its attempt and what writing its outcome found.
struct Judged {
    item: Item,
    verdict: Verdict,
    /// `None` until written, and for a retry that could not be queued (not recorded).
    written: Option<Result<Recorded, KvError>>,
}

/// Whether the outcome of `c` can be written without reading its record back: this run
/// (`tick_id`) still holds its lease at `after` with at least half the lease margin to spare
/// (so that no clock that may judge the lease, another instance's a little ahead of ours,
/// has it ended), and the retention purge cannot have deleted it by then (a replay of an old
/// delivery runs near the end of its retention; a record written back after the purge would
/// outlive it). Under a live lease no other writer changes a pending record: claims wait for
/// it, cancelling passes it by, a replay refuses a pending delivery.
fn held_for_long_enough(c: &Claimed, tick_id: &str, after: u64, retention_days: u32) -> bool {
    let d = &c.delivery;
    let safe_until = after.saturating_add(LEASE_MARGIN_MS / 2);
    let purged_from = (d.created_at / DAY_MS + u64::from(retention_days)).saturating_mul(DAY_MS);
    d.lease_owner.as_deref() == Some(tick_id)
        && d.lease_until.is_some_and(|until| until >= safe_until)
        && safe_until < purged_from
}

/// `d` with the attempt made and the verdict on it: the lease given up, and the delivery
/// finished unless a retry is due.
fn finished(mut d: Delivery, attempt: Option<Attempt>, verdict: &Verdict, now: u64) -> Delivery {
    d.attempts.extend(attempt);
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
    d
}

/// Writes each item's outcome (and what follows from it: retries queued, streaks,
/// disabling). Returns the deliveries another tick took over meanwhile, whose queue entries
/// are not done with.
pub(crate) fn record_outcomes<K: Kv>(
    env: &Env<'_, K>,
    tick_id: &str,
    items: Vec<Item>,
    report: &mut TickReport,
) -> Result<Vec<(DeliveryId, Wait)>, KvError> {
    let mut judged: Vec<Judged> = items.into_iter().map(|item| judge(env, item)).collect();
    // Queue entries for retries first: a crash after this leaves a hint, never a lost retry.
    // If the queue cannot be written, the retries are not recorded (their attempts run again
    // when the lease expires) but every other outcome is.
    let queued = queue_retries(env, &judged);
    let mut failure: Option<KvError> =
        (!queued).then(|| KvError::Unavailable("could not queue retries".into()));
    write_outcomes(env, tick_id, &mut judged, queued);
    let mut lost: Vec<(DeliveryId, Wait)> = Vec::new();
    let mut streaks = Streaks::default();
    for j in &mut judged {
        // One record that cannot be written must not cost the others theirs: that attempt
        // is sent again when its lease expires; the rest are recorded now.
        match j.written.take() {
            Some(Ok(Recorded::Written)) => count(env, j, report, &mut streaks),
            Some(Ok(Recorded::Lost(wait))) => {
                lost.extend(wait.map(|w| (j.item.claimed.delivery.id.clone(), w)));
            }
            Some(Err(e)) => failure = Some(e),
            // A retry not queued (not recorded), or nothing to write.
            None | Some(Ok(Recorded::Nothing)) => {}
        }
    }
    mark_slow_receivers(env, &judged);
    streaks.record(env, &judged);
    failure.map_or(Ok(lost), Err)
}

/// The verdict on an item's attempt: cancelled if it was not sent.
fn judge<K: Kv>(env: &Env<'_, K>, item: Item) -> Judged {
    let verdict = match (&item.result, item.cancelled) {
        (Some(answer), false) => verdict(
            answer,
            item.claimed.delivery.attempts_in_run() + 1,
            env.now_ms,
            || env.random_below(u64::MAX),
            &env.settings.retry_delays_ms,
        ),
        _ => Verdict::Cancelled,
    };
    Judged {
        item,
        verdict,
        written: None,
    }
}

/// Queues the batch's retries (a store hiccup gets two more tries); whether they are queued.
fn queue_retries<K: Kv>(env: &Env<'_, K>, judged: &[Judged]) -> bool {
    let mut retries = BySecond::new();
    for j in judged {
        if let Verdict::Retry(due) = j.verdict {
            due_in(
                &mut retries,
                second_of(due),
                j.item.claimed.delivery.id.clone(),
            );
        }
    }
    (0..3).any(|_| enqueue(env.kv, &retries, None).is_ok())
}

/// Writes each outcome (a retry only if `queued`): blind, in one batch, where this run's
/// lease makes that safe; by compare-and-swap otherwise.
fn write_outcomes<K: Kv>(env: &Env<'_, K>, tick_id: &str, judged: &mut [Judged], queued: bool) {
    let now = env.now_ms;
    // When the outcomes are written, by the senders' clocks: the batch's start, and the
    // longest its attempts took.
    let took = judged
        .iter()
        .filter_map(|j| j.item.result.as_ref())
        .map(|r| r.latency_ms);
    let after = now + took.max().unwrap_or(0);
    // The outcomes written without reading their records back: (where in `judged`, record).
    let mut blind: Vec<(usize, Vec<u8>)> = Vec::new();
    for (i, j) in judged.iter_mut().enumerate() {
        if !queued && matches!(j.verdict, Verdict::Retry(_)) {
            continue;
        }
        let c = &j.item.claimed;
        let attempt = j
            .item
            .result
            .as_ref()
            .map(|r| attempt_of(c, r, j.verdict, now));
        if held_for_long_enough(c, tick_id, after, env.settings.retention_days) {
            // Ours for a while yet: the record is what the claim (or the publish) wrote,
            // and the outcome is written over it without reading it back.
            let d = finished(c.delivery.clone(), attempt, &j.verdict, now);
            blind.push((i, d.encode()));
            continue;
        }
        j.written = Some(write_one(env, tick_id, c, j.verdict, attempt));
    }
    write_blind(env.kv, blind, judged);
}

/// The attempt `c` made, with its answer `r` and the verdict on it.
fn attempt_of(c: &Claimed, r: &SendResult, verdict: Verdict, now: u64) -> Attempt {
    Attempt {
        run: c.delivery.run,
        number: u32::try_from(c.delivery.attempts_in_run() + 1).unwrap_or(u32::MAX),
        due_at: c.due_at,
        started_at: now,
        status_code: r.outcome.ok(),
        error: r.outcome.err().map(|e| e.as_str().to_owned()),
        latency_ms: r.latency_ms,
        succeeded: matches!(verdict, Verdict::Succeeded),
        retry_after_ms: asked_wait(r, now),
    }
}

/// Writes the outcome of `c` by compare-and-swap on its record, unless it is finished, gone,
/// or another tick holds it now.
fn write_one<K: Kv>(
    env: &Env<'_, K>,
    tick_id: &str,
    c: &Claimed,
    verdict: Verdict,
    attempt: Option<Attempt>,
) -> Result<Recorded, KvError> {
    update(env.kv, &keys::delivery(&c.delivery.id), &mut |cur| {
        let Some(bytes) = cur else {
            return Ok(Update::Keep(Recorded::Nothing));
        };
        // Unchanged since the claim wrote it (the rule): no need to parse it.
        let d: Delivery = match bytes == c.bytes.as_slice() {
            true => c.delivery.clone(),
            false => Delivery::decode(bytes)?,
        };
        if d.status != Status::Pending {
            return Ok(Update::Keep(Recorded::Nothing));
        }
        if d.lease_owner.as_deref() != Some(tick_id) {
            // Lost the lease: the newer holder records. Until it has, the entry is not done
            // with (the holder may die mid-attempt): it waits for that lease, or for the due
            // time the holder wrote when it recorded a retry.
            let wait = match (d.lease_until, d.next_attempt_at) {
                (Some(until), _) => Some(Wait::Leased(until)),
                (None, Some(due)) => Some(Wait::Due(due)),
                (None, None) => None,
            };
            return Ok(Update::Keep(Recorded::Lost(wait)));
        }
        let d = finished(d, attempt.clone(), &verdict, env.now_ms);
        Ok(Update::Write(d.encode(), Recorded::Written))
    })
    .map_err(KvError::from)
}

/// Counts a recorded outcome in the tick's report and the streaks; a 410 disables its
/// subscription. An operator alert's endpoint has no streak and is never disabled.
fn count<K: Kv>(env: &Env<'_, K>, j: &Judged, report: &mut TickReport, streaks: &mut Streaks) {
    let d = &j.item.claimed.delivery;
    let counts = d.subscription_id != alert::ALERTS;
    if d.run == 0 && d.attempts.is_empty() && j.item.result.is_some() {
        report
            .first_lag_ms
            .push(env.now_ms.saturating_sub(j.item.claimed.due_at));
    }
    match j.verdict {
        Verdict::Succeeded => {
            report.attempted += 1;
            report.succeeded += 1;
            if counts {
                streaks.note(&d.subscription_id, true);
            }
        }
        Verdict::Retry(_) => {
            report.attempted += 1;
            report.failed += 1;
        }
        Verdict::Failed { gone } => {
            report.attempted += 1;
            report.failed += 1;
            report.exhausted += 1;
            if counts && gone {
                let disabled = disable(env, &d.subscription_id, "gone");
                env.best_effort("disable on 410 (subscription record)", disabled);
            } else if counts {
                streaks.note(&d.subscription_id, false);
            }
        }
        Verdict::Cancelled => report.cancelled += 1,
    }
}

/// Marks the receivers that took 5 s or more, or timed out, as slow for a while: the
/// default in-flight cap applies to them (`pace.rs`).
fn mark_slow_receivers<K: Kv>(env: &Env<'_, K>, judged: &[Judged]) {
    let now = env.now_ms;
    let mut slow: Vec<&SubscriptionId> = Vec::new();
    for j in judged {
        let sub = &j.item.claimed.delivery.subscription_id;
        let was_slow =
            j.item.result.as_ref().is_some_and(|r| {
                r.latency_ms >= pace::SLOW_MS || r.outcome == Err(SendError::Timeout)
            });
        // Already marked for long enough (as this batch read it): nothing to write.
        let marked = j
            .item
            .sub
            .as_ref()
            .and_then(|s| s.options.slow_until)
            .is_some_and(|u| u >= now + pace::SLOW_FOR_MS / 2);
        if was_slow && !marked && sub != alert::ALERTS && !slow.contains(&sub) {
            slow.push(sub);
        }
    }
    for sub_id in slow {
        env.best_effort(
            "mark slow (subscription record)",
            pace::mark_slow(env, sub_id),
        );
    }
}

/// Per subscription touched by a batch: whether any of its attempts succeeded.
#[derive(Default)]
struct Streaks(Vec<(SubscriptionId, bool)>);

impl Streaks {
    fn note(&mut self, sub: &SubscriptionId, success: bool) {
        match self.0.iter_mut().find(|(s, _)| s == sub) {
            Some((_, any)) => *any |= success,
            None => self.0.push((sub.clone(), success)),
        }
    }

    /// Writes each subscription's streak: reset by a success (unless the batch read it at 0
    /// already), lengthened by failures only.
    fn record<K: Kv>(self, env: &Env<'_, K>, judged: &[Judged]) {
        for (sub_id, success) in self.0 {
            let known = judged
                .iter()
                .filter_map(|j| j.item.sub.as_ref())
                .find(|s| s.id == sub_id)
                .map(|s| s.consecutive_failures);
            if success && known == Some(0) {
                continue; // nothing to reset
            }
            let recorded = record_streak(env, &sub_id, success);
            env.best_effort("failure streak (subscription record)", recorded);
        }
    }
}

/// Writes the outcomes of `blind` (where in `judged`, record), recorded
/// without reading their records back, in one batch write, and puts each one's result in
/// `judged`. If the batch fails, each is written again on its own (a plain write: writing
/// again what the batch may have written is harmless), so one record that cannot be
/// written does not cost the others theirs.
fn write_blind<K: Kv>(kv: &K, blind: Vec<(usize, Vec<u8>)>, judged: &mut [Judged]) {
    if blind.is_empty() {
        return;
    }
    let key = |j: &Judged| keys::delivery(&j.item.claimed.delivery.id);
    let batch: Vec<(Key, Vec<u8>)> = blind
        .iter()
        .map(|(i, record)| (key(&judged[*i]), record.clone()))
        .collect();
    let all = kv.set_many(batch).is_ok();
    for (i, record) in blind {
        let id = &judged[i].item.claimed.delivery.id;
        let one = match all {
            true => Ok(()),
            false => kv.set(&keys::delivery(id), &record),
        };
        judged[i].written = Some(one.map(|()| Recorded::Written));
    }
}
