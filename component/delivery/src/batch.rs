//! One batch of attempts: claimed, sent together, recorded; and the tick's clock, which moves on by how long each batch took.

use crate::alert;
use crate::attempt::outgoing;
use crate::claim::{Claim, Claimed, Item, LEASE_MARGIN_MS, Lease, Wait, claim, unclaim};
use crate::fanout::Written;
use crate::outcome::record_outcomes;
use crate::pace;
use crate::report::TickReport;
use crate::sender::{Outgoing, SendError, SendResult, Sender};
use edgehook_model::env::Env;
use edgehook_model::ids::{DeliveryId, EventId, SubscriptionId};
use edgehook_model::validate;
use edgehook_storage::keys;
use edgehook_storage::kv::{Kv, KvError};
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
    ids: &[DeliveryId],
    known: Known<'_>,
    clock: &TickClock,
    report: &mut TickReport,
) -> Result<Vec<(DeliveryId, Wait)>, KvError> {
    let lease = Lease {
        holder: tick_id,
        until: env.now_ms + env.settings.attempt_timeout_ms + LEASE_MARGIN_MS,
    };
    let mut held: Vec<(DeliveryId, Wait)> = Vec::new();
    // Each claimed delivery with where it is in `ids`.
    let mut claimed: Vec<(usize, Claimed)> = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let written = known.map(|(items, _)| (&items[i].0.delivery, items[i].0.bytes.as_slice()));
        match claim(env, id, lease, written)? {
            Claim::Claimed(c) => claimed.push((i, *c)),
            Claim::Wait(wait) => held.push((id.clone(), wait)),
            Claim::Skip => {}
        }
    }
    if claimed.is_empty() {
        return Ok(held);
    }
    let items = with_subscriptions(env, known, claimed)?;
    // Pacing (`pace.rs`): a paced subscription's deliveries get the slots it grants; the
    // rest are given back unsent, still due, and looked at again in a second.
    let (mut items, paced) = pace_batch(env, lease, items, &mut held)?;
    send(env, sender, known, &mut items, clock)?;
    held.extend(record_outcomes(env, tick_id, items, report)?);
    for sub_id in &paced {
        // A slot not given back ends with its lease.
        env.best_effort(
            "pace.release (pace key)",
            pace::release(env, sub_id, tick_id),
        );
    }
    Ok(held)
}

/// The batch's items: each claimed delivery with its subscription. Publish read the
/// subscriptions of a prepared batch moments ago, in this invocation; others are read now.
fn with_subscriptions<K: Kv>(
    env: &Env<'_, K>,
    known: Known<'_>,
    claimed: Vec<(usize, Claimed)>,
) -> Result<Vec<Item>, KvError> {
    let subs: Vec<Option<Subscription>> = match known {
        Some((items, _)) => claimed
            .iter()
            .map(|(i, _)| Some(items[*i].1.clone()))
            .collect(),
        None => {
            let ids: Vec<SubscriptionId> = claimed
                .iter()
                .map(|(_, c)| c.delivery.subscription_id.clone())
                .collect();
            // Operator alerts go to a subscription made from the settings, never stored;
            // a partner's notices to its notification endpoint.
            let mut subs: Vec<Option<Subscription>> = subscriptions::load_many(env, &ids)
                .map_err(KvError::from)?
                .into_iter()
                .zip(&ids)
                .map(|(sub, id)| match id == alert::ALERTS {
                    true => alert::target(env.settings),
                    false => sub,
                })
                .collect();
            crate::notify::fill_endpoints(env, &ids, &mut subs);
            subs
        }
    };
    Ok(claimed
        .into_iter()
        .zip(subs)
        .map(|((_, claimed), sub)| Item {
            claimed,
            sub,
            result: None,
            cancelled: false,
        })
        .collect())
}

/// Sends the items of a batch all at once, each with its signed request; marks the ones not
/// to be sent as cancelled, and the ones whose URL today's policy refuses as refused. Moves
/// `clock` on by the longest attempt.
fn send<K: Kv>(
    env: &Env<'_, K>,
    sender: &dyn Sender,
    known: Known<'_>,
    items: &mut [Item],
    clock: &TickClock,
) -> Result<(), KvError> {
    let mut bodies: Vec<(EventId, Rc<Vec<u8>>)> = Vec::new();
    if let Some(((w, _), body)) = known.and_then(|(items, body)| Some((items.first()?, body))) {
        bodies.push((w.delivery.event_id.clone(), body.clone()));
    }
    let (mut positions, mut requests) = (Vec::new(), Vec::new());
    for (i, item) in items.iter_mut().enumerate() {
        if let Some(request) = request_for(env, item, &mut bodies)? {
            positions.push(i);
            requests.push(request);
        }
    }
    let sent = sender.send_all(&requests, env.settings.attempt_timeout_ms);
    let took = sent.iter().map(|r| r.latency_ms).max().unwrap_or(0);
    clock.elapsed_ms.set(clock.elapsed_ms.get() + took);
    for (i, result) in positions.into_iter().zip(sent) {
        items[i].result = Some(result);
    }
    Ok(())
}

/// The signed request for `item`, its event's body read once a batch (`bodies`); `None`,
/// with the item marked, for one not to be sent.
fn request_for<K: Kv>(
    env: &Env<'_, K>,
    item: &mut Item,
    bodies: &mut Vec<(EventId, Rc<Vec<u8>>)>,
) -> Result<Option<Outgoing>, KvError> {
    let d = &item.claimed.delivery;
    let Some(sub) = item.sub.as_ref().filter(|s| s.status == SubStatus::Active) else {
        item.cancelled = true;
        return Ok(None);
    };
    let body = match bodies.iter().find(|(e, _)| *e == d.event_id) {
        Some((_, b)) => b.clone(),
        None => {
            let Some(b) = env.kv.get(&keys::event_body(&d.event_id))? else {
                item.cancelled = true;
                return Ok(None);
            };
            let b = Rc::new(b);
            bodies.push((d.event_id.clone(), b.clone()));
            b
        }
    };
    // The URL is parsed once, under today's policy: one created while private targets or
    // http were allowed, and they no longer are, fails here, before anything is sent (the
    // SSRF check at send time). Under a policy that allows all, only a URL that no longer
    // parses fails, and its delivery is cancelled.
    let policy = env.settings.target_policy();
    match validate::target_url(&sub.url, policy) {
        Ok(url) => match outgoing(env, d, sub, url, body) {
            Ok(request) => Ok(Some(request)),
            // Never sent unsigned or mis-signed: the attempt fails, its class named.
            Err(_) => {
                item.result = Some(SendResult::unsent(SendError::SecretUnreadable));
                Ok(None)
            }
        },
        Err(_) if policy.allows_all() => {
            item.cancelled = true;
            Ok(None)
        }
        Err(_) => {
            item.result = Some(SendResult::unsent(SendError::DestinationRefused));
            Ok(None)
        }
    }
}

/// Asks each paced subscription among the items' for the slots its claimed deliveries want
/// (once per subscription); keeps the granted deliveries, gives the others back (lease
/// cleared, still due; held a second). Returns the kept items and the subscriptions whose
/// slots this batch now holds.
fn pace_batch<K: Kv>(
    env: &Env<'_, K>,
    lease: Lease<'_>,
    items: Vec<Item>,
    held: &mut Vec<(DeliveryId, Wait)>,
) -> Result<(Vec<Item>, Vec<SubscriptionId>), KvError> {
    let now = env.now_ms;
    // (subscription, its limits, how many of its deliveries are claimed)
    let mut wanted: Vec<(SubscriptionId, (u32, u32), u32)> = Vec::new();
    for sub in items
        .iter()
        .filter_map(|item| item.sub.as_ref())
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
        return Ok((items, Vec::new()));
    }
    let mut granted: Vec<(SubscriptionId, u32)> = Vec::new();
    let mut paced = Vec::new();
    for (id, limits, n) in wanted {
        // A store failure grants nothing: the deliveries wait rather than go over the cap.
        let got = pace::acquire(env, &id, limits, n, lease.holder, lease.until).unwrap_or(0);
        if got > 0 {
            paced.push(id.clone());
        }
        granted.push((id, got));
    }
    let mut kept = Vec::with_capacity(items.len());
    for item in items {
        let slot = item
            .sub
            .as_ref()
            .and_then(|s| granted.iter_mut().find(|(id, _)| *id == s.id));
        match slot {
            Some((_, 0)) => {
                let id = &item.claimed.delivery.id;
                unclaim(env, id, lease.holder)?;
                held.push((id.clone(), Wait::Paced(now + 1000)));
            }
            Some((_, left)) => {
                *left -= 1;
                kept.push(item);
            }
            None => kept.push(item),
        }
    }
    Ok((kept, paced))
}
