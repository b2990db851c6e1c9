//! Claims: a tick takes a due delivery by compare-and-swap on its record (a lease), or finds why it must wait; a batch's items, from their claim to their outcome; the bounds of a run, which leases are sized by.

use crate::sender::SendResult;
use edgehook_model::env::Env;
use edgehook_model::ids::DeliveryId;
use edgehook_records::delivery::{Delivery, Status};
use edgehook_storage::keys;
use edgehook_storage::kv::{Kv, KvError, Update, update};
use edgehook_subscriptions::Subscription;

/// Most attempts one tick runs; more due work is reported as due now.
pub const MAX_ATTEMPTS_PER_TICK: usize = 2000;

/// A tick starts no batch once it has run this long (by its senders' clocks); what is left is
/// reported as due now, so the host ticks again with a fresh view (and can stop in between).
pub const TICK_TIME_BUDGET_MS: u64 = 20_000;

/// Extra lease time beyond the attempt timeout before another instance may take over.
pub(crate) const LEASE_MARGIN_MS: u64 = 5_000;

/// What a tick decided for one claimed delivery.
pub(crate) struct Claimed {
    pub(crate) delivery: Delivery,
    pub(crate) due_at: u64,
    /// The record as the claim wrote it: if the store still holds exactly these bytes when
    /// the outcome is recorded, they need not be parsed again.
    pub(crate) bytes: Vec<u8>,
}

/// Why a batch left a delivery it was given unsent for now, though its queue entry is not
/// done with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Another tick holds its lease until then.
    Leased(u64),
    /// It is pending but due only then: a publish (or replay) made it due after this tick
    /// read its clock, within the second the tick is scanning.
    Due(u64),
    /// Due now, but its subscription's pacing (`pace.rs`) has no room for it until then.
    Paced(u64),
}

/// What a claim found.
pub(crate) enum Claim {
    /// Ours now.
    Claimed(Box<Claimed>),
    /// Not to be sent now, and not done with either.
    Wait(Wait),
    /// Nothing to do (finished, gone).
    Skip,
}

/// One delivery of a batch, from its claim to its outcome.
pub(crate) struct Item {
    /// The delivery as claimed.
    pub(crate) claimed: Claimed,
    /// Its subscription, as the batch read it (`None`: gone).
    pub(crate) sub: Option<Subscription>,
    /// What sending it got: `None` until sent, and for one not sent.
    pub(crate) result: Option<SendResult>,
    /// Not to be sent, and finished as cancelled: its subscription is gone or not active, or
    /// its event's body is gone.
    pub(crate) cancelled: bool,
}

/// A lease on delivery records: who holds it (a tick's id) and until when.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease<'a> {
    pub(crate) holder: &'a str,
    pub(crate) until: u64,
}

/// Claims delivery `id` under `lease` at `env.now_ms`, by compare-and-swap on its record.
/// `written` is the record as this invocation's publish wrote it (the delivery and its
/// bytes), if it did: while the store holds exactly those bytes they need no parsing, and
/// one already leased to this holder for long enough is ours without a write.
pub(crate) fn claim<K: Kv>(
    env: &Env<'_, K>,
    id: &DeliveryId,
    lease: Lease<'_>,
    written: Option<(&Delivery, &[u8])>,
) -> Result<Claim, KvError> {
    let now = env.now_ms;
    if let Some((d, bytes)) = written.filter(|(d, _)| {
        d.lease_owner.as_deref() == Some(lease.holder)
            && d.lease_until >= Some(now + env.settings.attempt_timeout_ms)
    }) {
        return Ok(Claim::Claimed(Box::new(Claimed {
            delivery: d.clone(),
            due_at: d.next_attempt_at.unwrap_or(now),
            bytes: bytes.to_vec(),
        })));
    }
    update(env.kv, &keys::delivery(id), &mut |cur| {
        let Some(bytes) = cur else {
            return Ok(Update::Keep(Claim::Skip));
        };
        let d = match written.filter(|(_, w)| *w == bytes) {
            Some((d, _)) => d.clone(),
            None => Delivery::decode(bytes)?,
        };
        Ok(match decide(d, lease, now) {
            Claim::Claimed(c) => Update::Write(c.bytes.clone(), Claim::Claimed(c)),
            other => Update::Keep(other),
        })
    })
    .map_err(KvError::from)
}

/// What a claim at `now` under `lease` makes of record `d`: the record as the claim writes
/// it, or why it waits, or nothing to do.
fn decide(mut d: Delivery, lease: Lease<'_>, now: u64) -> Claim {
    let due = match d.next_attempt_at {
        Some(due) if d.status == Status::Pending => due,
        _ => return Claim::Skip,
    };
    // A lease of this holder's own (publish wrote it) is claimed again, for longer.
    if let Some(until) = d
        .lease_until
        .filter(|u| *u > now && d.lease_owner.as_deref() != Some(lease.holder))
    {
        return Claim::Wait(Wait::Leased(until));
    }
    if due > now {
        // Made due after this tick read its clock: a publish later in the same second
        // enqueued it before the tick scanned that second. Not sent now, and its entry must
        // wait for it (else the watermark passes the only pointer).
        return Claim::Wait(Wait::Due(due));
    }
    d.lease_until = Some(lease.until);
    d.lease_owner = Some(lease.holder.to_owned());
    let bytes = d.encode();
    Claim::Claimed(Box::new(Claimed {
        delivery: d,
        due_at: due,
        bytes,
    }))
}

/// Clears the lease `holder` took on delivery `id`, which it will not send.
pub(crate) fn unclaim<K: Kv>(
    env: &Env<'_, K>,
    id: &DeliveryId,
    holder: &str,
) -> Result<(), KvError> {
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
