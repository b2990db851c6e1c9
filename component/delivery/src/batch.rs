//! One batch of attempts: claimed, sent together, recorded; and the tick's clock, which moves on by how long each batch took.

use crate::alert;
use crate::attempt::{DESTINATION_REFUSED, outgoing};
use crate::claim::{Claim, Claimed, LEASE_MARGIN_MS, Wait};
use crate::fanout::Written;
use crate::outcome::record_outcomes;
use crate::pace;
use crate::report::TickReport;
use crate::sender::{Outgoing, SendResult, Sender};
use edgehook_model::env::Env;
use edgehook_model::validate;
use edgehook_records::delivery::{Delivery, Status};
use edgehook_storage::keys::{self};
use edgehook_storage::kv::{Kv, KvError, Update, update};
use edgehook_subscriptions::{self as subscriptions, Status as SubStatus, Subscription};
use std::rc::Rc;

pub use crate::claim::{MAX_ATTEMPTS_PER_TICK, TICK_TIME_BUDGET_MS};

/// A tick's view of the time. `Env::now_ms` is read once, when the call starts, but a tick
/// runs batch after batch, each up to the attempt timeout: leases, signature timestamps,
/// attempt times and retry schedules must use the time a batch really starts. The clock moves
/// on by how long each batch took, as its [`Sender`] measured it (the core reads no clock).
pub(crate) struct TickClock {
    pub(crate) start_ms: u64,
    pub(crate) elapsed_ms: std::cell::Cell<u64>,
}

impl TickClock {
    pub(crate) fn now(&self) -> u64 {
        self.start_ms + self.elapsed_ms.get()
    }

    pub(crate) fn out_of_time(&self) -> bool {
        self.elapsed_ms.get() >= TICK_TIME_BUDGET_MS
    }

    /// `env` as of now.
    pub(crate) fn env<'a, K: Kv>(&self, env: &Env<'a, K>) -> Env<'a, K> {
        env.at(self.now())
    }
}

/// What a batch of [`run_now`] already knows: the prepared deliveries matching its ids, one
/// for one, and their body.
type Known<'a> = Option<(&'a [(Written, Subscription)], &'a Rc<Vec<u8>>)>;

/// Claims, sends and records one batch of due deliveries, concurrently; `env.now_ms` is when
/// the batch starts. Moves `clock` on by the time the sending took. Returns the deliveries
/// that are not done with: left unsent (held by another tick, or not due yet), or sent
/// while another tick took them over.
pub(crate) fn run_batch<K: Kv>(
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
        // Written by publish already leased to this run, for long enough: ours without a
        // claim (`fanout::RunLease`).
        if let Some(w) = written.filter(|w| {
            w.delivery.lease_owner.as_deref() == Some(tick_id)
                && w.delivery.lease_until >= Some(now + env.settings.attempt_timeout_ms)
        }) {
            claimed.push(Claimed {
                delivery: w.delivery.clone(),
                due_at: w.delivery.next_attempt_at.unwrap_or(now),
                bytes: w.bytes.clone(),
            });
            claimed_at.push(i);
            continue;
        }
        let outcome = update(env.kv, &keys::delivery(id), &mut |cur| {
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
            // A lease of this run's own (publish wrote it) is claimed again, for longer.
            if let Some(until) = d
                .lease_until
                .filter(|u| *u > now && d.lease_owner.as_deref() != Some(tick_id))
            {
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
        .map_err(KvError::from)?;
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
    let subs: Vec<Option<Subscription>> = match known {
        Some((items, _)) => claimed_at
            .iter()
            .map(|i| Some(items[*i].1.clone()))
            .collect(),
        // Operator alerts go to a subscription made from the settings, never stored.
        None => subscriptions::load_many(env, &sub_ids)
            .map_err(KvError::from)?
            .into_iter()
            .zip(&sub_ids)
            .map(|(sub, id)| match id == alert::ALERTS {
                true => alert::target(env.settings),
                false => sub,
            })
            .collect(),
    };
    // Pacing (`pace.rs`): a paced subscription's deliveries get the slots it grants; the
    // rest are given back unsent, still due, and looked at again in a second.
    let (claimed, subs, paced) = pace_batch(env, tick_id, lease_until, claimed, subs, &mut held)?;
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
        // The URL is parsed once, under today's policy: one created while private targets or
        // http were allowed, and they no longer are, fails here, before anything is sent (the
        // SSRF check at send time). Under a policy that allows all, only a URL that no longer
        // parses fails, and its delivery is cancelled.
        let policy = env.settings.target_policy();
        let url = match validate::target_url(&sub.url, policy) {
            Ok(url) => url,
            Err(_) if policy.allows_all() => {
                cancelled[i] = true;
                continue;
            }
            Err(_) => {
                results[i] = Some(SendResult {
                    outcome: Err(DESTINATION_REFUSED.into()),
                    latency_ms: 0,
                    retry_after: None,
                });
                continue;
            }
        };
        to_send.push((i, outgoing(env, &c.delivery, sub, url, body)));
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
    for sub_id in &paced {
        // A slot not given back ends with its lease.
        let _ = pace::release(env, sub_id, tick_id);
    }
    Ok(held)
}

/// Asks each paced subscription among `subs` for the slots its claimed deliveries want
/// (once per subscription); keeps the granted deliveries, gives the others back (lease
/// cleared, still due; held a second). Returns the kept deliveries, their subscriptions, and
/// the subscriptions whose slots this batch now holds.
#[allow(clippy::type_complexity)]
fn pace_batch<K: Kv>(
    env: &Env<'_, K>,
    holder: &str,
    until: u64,
    claimed: Vec<Claimed>,
    subs: Vec<Option<Subscription>>,
    held: &mut Vec<(String, Wait)>,
) -> Result<(Vec<Claimed>, Vec<Option<Subscription>>, Vec<String>), KvError> {
    let now = env.now_ms;
    // (subscription, its limits, how many of its deliveries are claimed)
    let mut wanted: Vec<(String, (u32, u32), u32)> = Vec::new();
    for sub in subs
        .iter()
        .flatten()
        .filter(|s| s.status == SubStatus::Active)
    {
        let Some(limits) = pace::limits(sub, now) else {
            continue;
        };
        match wanted.iter_mut().find(|(id, _, _)| *id == sub.id) {
            Some(w) => w.2 += 1,
            None => wanted.push((sub.id.clone(), limits, 1)),
        }
    }
    if wanted.is_empty() {
        return Ok((claimed, subs, Vec::new()));
    }
    let mut granted: Vec<(String, u32)> = Vec::new();
    let mut paced = Vec::new();
    for (id, limits, n) in wanted {
        // A store failure grants nothing: the deliveries wait rather than go over the cap.
        let got = pace::acquire(env, &id, limits, n, holder, until).unwrap_or(0);
        if got > 0 {
            paced.push(id.clone());
        }
        granted.push((id, got));
    }
    let (mut kept, mut kept_subs) = (Vec::new(), Vec::new());
    for (c, sub) in claimed.into_iter().zip(subs) {
        let slot = sub
            .as_ref()
            .and_then(|s| granted.iter_mut().find(|(id, _)| *id == s.id));
        match slot {
            Some((_, 0)) => {
                unclaim(env, &c.delivery.id, holder)?;
                held.push((c.delivery.id.clone(), Wait::Paced(now + 1000)));
            }
            Some((_, left)) => {
                *left -= 1;
                kept.push(c);
                kept_subs.push(sub);
            }
            None => {
                kept.push(c);
                kept_subs.push(sub);
            }
        }
    }
    Ok((kept, kept_subs, paced))
}

/// Clears the lease this batch (`holder`) took on delivery `id`, which it will not send.
fn unclaim<K: Kv>(env: &Env<'_, K>, id: &str, holder: &str) -> Result<(), KvError> {
    update(env.kv, &keys::delivery(id), &mut |cur| {
        let Some(bytes) = cur else {
            return Ok::<_, KvError>(Update::Keep(()));
        };
        let mut d = Delivery::decode(bytes)?;
        if d.lease_owner.as_deref() != Some(holder) {
            return Ok(Update::Keep(()));
        }
        d.lease_until = None;
        d.lease_owner = None;
        Ok(Update::Write(d.encode(), ()))
    })
    .map_err(KvError::from)
}
