//! Disabling a subscription (a delete, a `410 Gone`, a failure streak, an operator): the
//! client-index entry is marked `Leaving`, the record flips to `disabled` (the commit
//! point), then its index entries go and its slot is given back, best effort. A delete
//! ([`DELETED`]) also erases the signing secret in that same write; the other reasons keep
//! it, so a disabled subscription can be enabled again and sign as before.

use crate::cap::give_back_slot;
use crate::index::{Listing, client_index, fanout_index, set_listing};
use crate::{ApiError, Env, Kv, Secret, Status, Subscription};
use edgehook_model::ids::IdKind;
use edgehook_storage::keys;
use edgehook_storage::kv::CAS_ATTEMPTS;

/// The reason of a partner's delete: the only disable that erases the signing secret.
pub const DELETED: &str = "deleted";

/// Disables subscription `id` (the caller's own, if `client_id` is given) with `reason`.
/// Returns the record as disabled, or `None` if it was not active (or not the caller's).
pub fn disable<K: Kv>(
    env: &Env<'_, K>,
    id: &str,
    client_id: Option<&str>,
    reason: &str,
) -> Result<Option<Subscription>, ApiError> {
    if !IdKind::Subscription.matches(id) {
        return Ok(None);
    }
    let key = keys::subscription(id);
    for _ in 0..CAS_ATTEMPTS {
        let (cas, current) = env.kv.cas_begin(&key)?;
        let Some(bytes) = current else {
            return Ok(None);
        };
        let mut sub = Subscription::decode(&bytes)?;
        if sub.status != Status::Active || client_id.is_some_and(|c| c != sub.client_id) {
            return Ok(None);
        }
        // The client-index entry is marked before the record flips (see [`Listing`]).
        set_listing(env, &sub, |_| true, Listing::Leaving)?;
        sub.status = Status::Disabled;
        sub.disabled_reason = Some(reason.to_owned());
        sub.disabled_at = Some(env.now_ms);
        if reason == DELETED {
            // Nothing signs for a deleted subscription again (its attempts are cancelled and
            // a batch sends only for active ones): the secret is not kept past the delete.
            sub.signing_secret = Secret::erased();
        }
        if env.kv.cas_swap(cas, &sub.encode())? {
            // Committed; index clean-up is best effort (readers skip disabled records), and
            // so is giving back the slot (a counter left high is corrected by the next
            // recount).
            let _ = remove_from_indexes(env, &sub);
            give_back_slot(env, &sub.client_id);
            return Ok(Some(sub));
        }
    }
    Err(ApiError::store_unavailable(
        "the subscription kept changing",
    ))
}

/// Removes a disabled (or refused) subscription's index entries. Callers treat it as best
/// effort: an entry left behind is skipped by readers.
fn remove_from_indexes<K: Kv>(env: &Env<'_, K>, sub: &Subscription) -> Result<(), ApiError> {
    for (event_type, seq) in sub.event_types.iter().zip(&sub.fanout_seqs) {
        fanout_index(event_type).remove(env.kv, *seq)?;
    }
    client_index(&sub.client_id).remove(env.kv, sub.seq)?;
    Ok(())
}
