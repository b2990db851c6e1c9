//! Outcomes: what each attempt's answer does to its delivery (success, retry, failure, cancel), retries queued first, streaks after.

use crate::alert;
use crate::claim::{Claimed, LEASE_MARGIN_MS, Wait};
use crate::health::{disable, record_streak};
use crate::queue::{BySecond, due_in, enqueue, second_of};
use crate::report::TickReport;
use crate::retry::retry_due_after;
use crate::sender::SendResult;
use edgehook_model::env::Env;
use edgehook_records::delivery::{Attempt, Delivery, Status};
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, KvError, Update, update};
use edgehook_storage::retention::DAY_MS;
use edgehook_subscriptions::Subscription;

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

/// The longest a `Retry-After` may hold a retry back: an hour.
pub const MAX_RETRY_AFTER_MS: u64 = 3_600_000;

/// The wait a 429 or 503 asked for with `Retry-After`, at most [`MAX_RETRY_AFTER_MS`];
/// `None` for other answers and for a value that is not a delay or an HTTP-date.
fn asked_wait(r: &SendResult, now: u64) -> Option<u64> {
    match r.outcome {
        Ok(429 | 503) => r
            .retry_after
            .as_deref()
            .and_then(|v| edgehook_model::http::retry_after_ms(v, now))
            .map(|ms| ms.min(MAX_RETRY_AFTER_MS)),
        _ => None,
    }
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

/// Writes each claimed delivery's outcome (and what follows from it: retries queued,
/// streaks, disabling). Returns the deliveries another tick took over meanwhile, whose queue
/// entries are not done with.
pub(crate) fn record_outcomes<K: Kv>(
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
    let mut retries = BySecond::new();
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
                        // A 429 or 503 with Retry-After waits at least that long (at most an
                        // hour, never less than the normal delay), on a whole second.
                        let due = match asked_wait(r, now) {
                            Some(wait) => due.max((now + wait).div_ceil(1000) * 1000),
                            None => due,
                        };
                        due_in(&mut retries, second_of(due), c.delivery.id.clone());
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
    // Which attempts were slow (5 s or more, or a timeout), for `pace.rs`.
    let slow_results: Vec<bool> = results
        .iter()
        .map(|r| {
            r.as_ref().is_some_and(|r| {
                r.latency_ms >= crate::pace::SLOW_MS
                    || r.outcome.as_ref().err().is_some_and(|e| e == "timeout")
            })
        })
        .collect();
    // When the outcomes are written, by the senders' clocks: the batch's start, and the
    // longest its attempts took.
    let after = now
        + results
            .iter()
            .flatten()
            .map(|r| r.latency_ms)
            .max()
            .unwrap_or(0);
    // Each outcome as written: `None` for a retry that could not be queued (not recorded),
    // and for one written blind, until its batch below is written.
    let mut written: Vec<Option<Result<Recorded, KvError>>> = Vec::with_capacity(claimed.len());
    let mut attempted: Vec<bool> = Vec::with_capacity(claimed.len());
    // The outcomes written without reading their records back, in one batch: (where in
    // `claimed`, delivery id, record).
    let mut blind: Vec<(usize, &str, Vec<u8>)> = Vec::new();
    for (i, ((c, result), verdict)) in claimed.iter().zip(results).zip(&verdicts).enumerate() {
        attempted.push(result.is_some());
        if !queued && matches!(verdict, Verdict::Retry(_)) {
            written.push(None);
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
            retry_after_ms: asked_wait(&r, now),
        });
        if held_for_long_enough(c, tick_id, after, env.settings.retention_days) {
            // Ours for a while yet: the record is what the claim (or the publish) wrote,
            // and the outcome is written over it without reading it back.
            let d = finished(c.delivery.clone(), attempt, verdict, now);
            blind.push((i, &c.delivery.id, d.encode()));
            written.push(None);
            continue;
        }
        written.push(Some(
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
                let d = finished(d, attempt.clone(), verdict, now);
                Ok(Update::Write(d.encode(), Recorded::Written))
            })
            .map_err(KvError::from),
        ));
    }
    write_blind(env.kv, blind, &mut written);
    for (((c, verdict), written), attempted) in
        claimed.iter().zip(&verdicts).zip(written).zip(attempted)
    {
        let Some(written) = written else {
            continue; // a retry not queued: not recorded
        };
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
        // An operator alert's endpoint has no streak and is never disabled.
        let counts = c.delivery.subscription_id != alert::ALERTS;
        if c.delivery.run == 0 && c.delivery.attempts.is_empty() && attempted {
            report.first_lag_ms.push(now.saturating_sub(c.due_at));
        }
        match verdict {
            Verdict::Succeeded => {
                report.attempted += 1;
                report.succeeded += 1;
                if counts {
                    note_streak(&c.delivery.subscription_id, true);
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
                if !counts {
                    // Nothing to disable or count.
                } else if *gone {
                    let _ = disable(env, &c.delivery.subscription_id, "gone");
                } else {
                    note_streak(&c.delivery.subscription_id, false);
                }
            }
            Verdict::Cancelled => report.cancelled += 1,
        }
    }
    // A receiver that took 5 s or more, or timed out, counts as slow for a while: the
    // default in-flight cap applies to it (`pace.rs`).
    let mut slow: Vec<&str> = Vec::new();
    for ((c, r), s) in claimed.iter().zip(&slow_results).zip(&subs) {
        let sub = c.delivery.subscription_id.as_str();
        // Already marked for long enough (as this batch read it): nothing to write.
        let marked = s
            .as_ref()
            .and_then(|s| s.options.slow_until)
            .is_some_and(|u| u >= now + crate::pace::SLOW_FOR_MS / 2);
        if *r && !marked && sub != alert::ALERTS && !slow.contains(&sub) {
            slow.push(sub);
        }
    }
    for sub_id in slow {
        let _ = crate::pace::mark_slow(env, sub_id);
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

/// Writes the outcomes of `blind` (where in the batch, delivery id, record), recorded
/// without reading their records back, in one batch write, and puts each one's result in
/// `written`. If the batch fails, each is written again on its own (a plain write: writing
/// again what the batch may have written is harmless), so one record that cannot be
/// written does not cost the others theirs.
fn write_blind<K: Kv>(
    kv: &K,
    blind: Vec<(usize, &str, Vec<u8>)>,
    written: &mut [Option<Result<Recorded, KvError>>],
) {
    if blind.is_empty() {
        return;
    }
    let batch: Vec<(Key, Vec<u8>)> = blind
        .iter()
        .map(|(_, id, record)| (keys::delivery(id), record.clone()))
        .collect();
    let all = kv.set_many(batch).is_ok();
    for (i, id, record) in blind {
        let one = match all {
            true => Ok(()),
            false => kv.set(&keys::delivery(id), &record),
        };
        written[i] = Some(one.map(|()| Recorded::Written));
    }
}
