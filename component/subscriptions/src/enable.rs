//! Enabling a disabled subscription again (the partner's `POST /v1/webhooks/{id}/enable`,
//! the operator's), in the order of a create: a slot under the cap, new fan-out entries, a
//! new client-index entry (`Joining`), then the record flips `disabled` → `active` by
//! compare-and-swap against the bytes read at the start (the commit point; the failure
//! streak starts again from 0), after which the entry becomes `Live`.
//!
//! A disable removed the old entries, so the record takes new entry numbers: an enabled
//! subscription lists after those created before its enable. An enable cut short before
//! its commit point leaves entries whose number the record does not hold: list and the
//! cap's recount skip them (the record's `seq` names its one entry), publish reads each id
//! once. An enable that loses the race to another (the record changed under it) removes
//! its entries and gives its slot back, and answers with the record as the winner left it.

use crate::cap::{give_back_slot, take_slot};
use crate::create::make_live;
use crate::disable::{remove_from_fanout, remove_from_indexes};
use crate::index::{
    Listing, PartnerView, append_one, client_index, disabled_log, encode_index_item, fanout_index,
};
use crate::{ApiError, DELETED, Env, Kv, Status, Subscription};
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::keys;
use edgehook_storage::kv::CAS_ATTEMPTS;

/// What [`enable`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enabled {
    /// It was disabled and is active now (this call's commit).
    Now(Subscription),
    /// It was already active: nothing changed.
    Already(Subscription),
    /// Its owner deleted it: it stays disabled.
    Deleted(Subscription),
}

/// Enables subscription `id` (the caller's own, if `client_id` is given). `None` if there is
/// no such subscription (or it is another client's, or still pending).
pub fn enable<K: Kv>(
    env: &Env<'_, K>,
    id: &SubscriptionId,
    client_id: Option<&ClientId>,
) -> Result<Option<Enabled>, ApiError> {
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
        match sub.status {
            Status::Pending => return Ok(None),
            Status::Active => return Ok(Some(Enabled::Already(sub))),
            Status::Disabled if sub.disabled_reason.as_deref() == Some(DELETED) => {
                return Ok(Some(Enabled::Deleted(sub)));
            }
            Status::Disabled => {}
        }
        take_slot(env, &sub.client_id, id)?;
        let enabled = match add_entries(env, &sub) {
            Ok(enabled) => enabled,
            Err(e) => {
                give_back_slot(env, &sub.client_id);
                return Err(e);
            }
        };
        // The commit point: only if the record is still the one read above.
        let swapped = env.kv.cas_swap(cas, &enabled.encode());
        if let Ok(true) = swapped {
            // Committed; best effort, as after a create (list checks a `Joining` entry), and
            // the entries in the lists of disabled subscriptions (readers skip entries the
            // record does not name).
            settle_enabled(env, &enabled, &sub);
            return Ok(Some(Enabled::Now(enabled)));
        }
        // Not committed (or not known to be: a swap that reported an error may have
        // applied). The entries are taken away again only if the record does not hold
        // them; the slot is given back the same way.
        match crate::load::load(env, id) {
            Ok(Some(now)) if now.seq == enabled.seq && now.status == Status::Active => {
                settle_enabled(env, &now, &sub);
                return Ok(Some(Enabled::Now(now)));
            }
            _ => {
                let removed = remove_from_indexes(env, &enabled);
                env.best_effort("enable undone: leave the indexes (client index)", removed);
                give_back_slot(env, &sub.client_id);
            }
        }
        swapped?;
    }
    Err(ApiError::store_unavailable(
        "the subscription kept changing",
    ))
}

/// After an enable's commit, best effort: list may trust its client-index entry, and it
/// leaves the lists of disabled subscriptions (readers skip entries the record does not
/// name).
fn settle_enabled<K: Kv>(env: &Env<'_, K>, enabled: &Subscription, was: &Subscription) {
    env.best_effort("enable: make live (client index)", make_live(env, enabled));
    let left = leave_disabled_lists(env, was);
    env.best_effort("enable: leave the disabled lists (disabled logs)", left);
}

/// Removes the entries of `sub` (as it was disabled) from the lists of disabled
/// subscriptions, and the fan-out entries it kept while disabled (the enabled record names
/// new ones; until these go, readers see the id twice and take it once).
fn leave_disabled_lists<K: Kv>(env: &Env<'_, K>, sub: &Subscription) -> Result<(), ApiError> {
    remove_from_fanout(env, sub)?;
    if let Some(seq) = sub.disabled_entries.0 {
        disabled_log(Some(&sub.client_id)).remove(env.kv, seq)?;
    }
    if let Some(seq) = sub.disabled_entries.1 {
        disabled_log(None).remove(env.kv, seq)?;
    }
    Ok(())
}

/// Appends the entries of `sub` (disabled) to the fan-out and client indexes; returns the
/// record as it is once enabled: active, holding the new entries' numbers, its failure
/// streak reset.
fn add_entries<K: Kv>(env: &Env<'_, K>, sub: &Subscription) -> Result<Subscription, ApiError> {
    let mut fanout_seqs = Vec::with_capacity(sub.event_types.len());
    for event_type in &sub.event_types {
        fanout_seqs.push(append_one(
            env,
            &fanout_index(event_type),
            sub.id.as_bytes(),
        )?);
    }
    let view = serde_json::to_vec(&PartnerView {
        id: &sub.id,
        url: &sub.url,
        event_types: &sub.event_types,
        status: "active",
        created_at: sub.created_at,
    })
    .map_err(ApiError::internal)?;
    let item = encode_index_item(Listing::Joining, &sub.id, &view);
    let seq = append_one(env, &client_index(&sub.client_id), &item)?;
    Ok(Subscription {
        status: Status::Active,
        disabled_reason: None,
        disabled_at: None,
        consecutive_failures: 0,
        seq,
        fanout_seqs,
        disabled_entries: (None, None),
        ..sub.clone()
    })
}

#[cfg(test)]
mod tests;
