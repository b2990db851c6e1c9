//! Disabling a subscription (a delete, a `410 Gone`, a failure streak, an operator): the
//! client-index entry is marked `Leaving`, the lists of disabled subscriptions get an entry
//! (the client's, unless it is a delete, and the operator's), the record flips to
//! `disabled` naming those entries (the commit point), then its client-index entry goes
//! (and at a delete its fan-out entries too) and its slot is given back, best effort. A
//! subscription disabled otherwise keeps its fan-out entries: publish records the events
//! it misses as skipped deliveries, which can be replayed once it is enabled again. A delete ([`DELETED`]) also erases the signing secret
//! in that same write; the other reasons keep it, so a disabled subscription can be enabled
//! again and sign as before.

use crate::cap::give_back_slot;
use crate::index::{Listing, append_one, client_index, disabled_log, fanout_index, set_listing};
use crate::{ApiError, DELETED, Env, Kv, Secret, Status, Subscription};
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::keys;
use edgehook_storage::kv::CAS_ATTEMPTS;

/// Disables subscription `id` (the caller's own, if `client_id` is given) with `reason`.
/// Returns the record as disabled, or `None` if it was not active (or not the caller's). A
/// delete (reason `deleted`) also applies to a subscription disabled for another reason,
/// which keeps its `disabledAt` and becomes deleted.
pub fn disable<K: Kv>(
    env: &Env<'_, K>,
    id: &SubscriptionId,
    client_id: Option<&ClientId>,
    reason: &str,
) -> Result<Option<Subscription>, ApiError> {
    let key = keys::subscription(id);
    for _ in 0..CAS_ATTEMPTS {
        let (cas, current) = env.kv.cas_begin(&key)?;
        let Some(bytes) = current else {
            return Ok(None);
        };
        let sub = Subscription::decode(&bytes)?;
        if client_id.is_some_and(|c| c != sub.client_id) {
            return Ok(None);
        }
        let swapped = if sub.status == Status::Disabled
            && reason == DELETED
            && sub.disabled_reason.as_deref() != Some(DELETED)
        {
            delete_disabled(env, cas, sub)?
        } else if sub.status == Status::Active {
            disable_active(env, cas, sub, reason)?
        } else {
            return Ok(None);
        };
        if swapped.is_some() {
            return Ok(swapped);
        }
    }
    Err(ApiError::store_unavailable(
        "the subscription kept changing",
    ))
}

/// The owner deletes a subscription disabled otherwise (it reads it, so it may delete it):
/// the reason becomes `deleted` and it leaves the owner's list of disabled ones (readers
/// skip an entry the record no longer names). `None` if the record changed since `cas`.
fn delete_disabled<K: Kv>(
    env: &Env<'_, K>,
    cas: K::Cas,
    mut sub: Subscription,
) -> Result<Option<Subscription>, ApiError> {
    let entry = sub.disabled_entries.0.take();
    sub.disabled_reason = Some(DELETED.to_owned());
    erase_secrets(&mut sub);
    if !env.kv.cas_swap(cas, &sub.encode())? {
        return Ok(None);
    }
    if let Some(seq) = entry {
        let removed = disabled_log(Some(&sub.client_id)).remove(env.kv, seq);
        env.best_effort("delete: leave the disabled list (disabled log)", removed);
    }
    // It no longer records skipped deliveries (readers skip a deleted record).
    let removed = remove_from_fanout(env, &sub);
    env.best_effort("delete: leave the fan-out lists (fan-out index)", removed);
    Ok(Some(sub))
}

/// Disables active `sub` with `reason`. `None` if the record changed since `cas`.
fn disable_active<K: Kv>(
    env: &Env<'_, K>,
    cas: K::Cas,
    mut sub: Subscription,
    reason: &str,
) -> Result<Option<Subscription>, ApiError> {
    // The client-index entry is marked before the record flips (see [`Listing`]).
    set_listing(env, &sub, |_| true, Listing::Leaving)?;
    // The lists of disabled subscriptions get their entries before the record names them:
    // an entry the record does not name (this swap failed) is skipped by readers.
    let client_entry = match reason == DELETED {
        true => None,
        false => Some(append_one(
            env,
            &disabled_log(Some(&sub.client_id)),
            sub.id.as_bytes(),
        )?),
    };
    let log_entry = append_one(env, &disabled_log(None), sub.id.as_bytes())?;
    sub.disabled_entries = (client_entry, Some(log_entry));
    sub.status = Status::Disabled;
    sub.disabled_reason = Some(reason.to_owned());
    sub.disabled_at = Some(env.now_ms);
    if reason == DELETED {
        // Nothing signs for a deleted subscription again (its attempts are cancelled and a
        // batch sends only for active ones): the secret is not kept past the delete.
        erase_secrets(&mut sub);
    }
    if !env.kv.cas_swap(cas, &sub.encode())? {
        return Ok(None);
    }
    // Committed; index clean-up is best effort (readers skip disabled records), and so is
    // giving back the slot (a counter left high is corrected by the next recount). A
    // subscription disabled but not deleted stays in its fan-out lists: the events it
    // misses are recorded as skipped deliveries, to replay after an enable.
    let cleaned = match reason == DELETED {
        true => remove_from_indexes(env, &sub),
        false => client_index(&sub.client_id)
            .remove(env.kv, sub.seq)
            .map_err(Into::into),
    };
    env.best_effort("disable: leave the client index (client index)", cleaned);
    give_back_slot(env, &sub.client_id);
    Ok(Some(sub))
}

/// Removes a disabled (or refused) subscription's index entries. Callers treat it as best
/// effort: an entry left behind is skipped by readers.
pub(crate) fn remove_from_indexes<K: Kv>(
    env: &Env<'_, K>,
    sub: &Subscription,
) -> Result<(), ApiError> {
    remove_from_fanout(env, sub)?;
    client_index(&sub.client_id).remove(env.kv, sub.seq)?;
    Ok(())
}

/// Removes a subscription's fan-out entries (those its record names), each even if one
/// before it failed; the first failure is returned. Callers treat it as best effort: an
/// entry left behind is skipped by readers once the record is deleted or names other
/// entries.
pub(crate) fn remove_from_fanout<K: Kv>(
    env: &Env<'_, K>,
    sub: &Subscription,
) -> Result<(), ApiError> {
    let mut first_error = Ok(());
    for (event_type, seq) in sub.event_types.iter().zip(&sub.fanout_seqs) {
        if let Err(e) = fanout_index(event_type).remove(env.kv, *seq) {
            first_error = first_error.and(Err(e.into()));
        }
    }
    first_error
}

/// What a delete erases: every secret (the current one, a rotation's previous one) and the
/// values of the subscription's own headers (a receiver's credentials, write-only like the
/// secret); their names stay, as the rest of the tombstone.
fn erase_secrets(sub: &mut Subscription) {
    sub.signing_secret = Secret::erased();
    sub.options.previous_secret = None;
    for (_, value) in &mut sub.options.headers {
        value.clear();
    }
}
