//! Changing a subscription's delivery options after its create: the scheme and headers
//! (`PATCH /v1/webhooks/{id}`, with the URL and event types through [`crate::retarget`]),
//! the signing secret with an overlap (`rotate-secret`), and the erasure of a rotation's
//! previous secret once its overlap has ended. A new secret is
//! sealed as it is made (under the settings' `seal_key`, if set), and a record these write
//! has its secrets sealed again if they are plain or under the previous key.

use crate::{ApiError, Env, Kv, Scheme, Secret, Status, Subscription};
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::keys;
use edgehook_storage::kv::{Update, update};

/// What an update asks for: each `None` is left as it is.
pub struct OptionsChange {
    /// A new signature scheme. A change of scheme comes with a new secret of its form (the
    /// two schemes read secrets differently), with no overlap.
    pub scheme: Option<Scheme>,
    /// The headers, replacing the whole set (empty: none).
    pub headers: Option<Vec<(String, String)>>,
    /// The order of attempts (from `fifo` to `unordered`, the deliveries held back are
    /// released by the next tick; from `unordered` to `fifo`, deliveries published from then
    /// on wait their turn).
    pub ordering: Option<crate::Ordering>,
    /// The in-flight cap (0: back to the default).
    pub max_in_flight: Option<u16>,
    /// The rate limit (0: none).
    pub rate_limit: Option<u32>,
    /// Whether deliveries carry the W3C `traceparent` of their event's trace.
    pub traceparent: Option<bool>,
    /// A new URL or event types, changed in the same write ([`crate::retarget`]).
    pub target: crate::retarget::Target,
}

/// `secret` (fresh, plain) as record `id` stores it: sealed under the settings' current key
/// if there is one (its nonce drawn only then), else as it is.
pub(crate) fn stored_secret<K: Kv>(
    env: &Env<'_, K>,
    id: &SubscriptionId,
    secret: Secret,
) -> Secret {
    let keys = &env.settings.seal;
    match keys.current {
        None => secret,
        Some(_) => secret.sealed(keys, env.random_bytes(), &keys::subscription(id)),
    }
}

/// Seals `sub`'s secrets under the current key if they are plain or under another key, as
/// a write of the record that has the key at hand does. One that opens under neither key is
/// left as it is: its attempts fail as `secret_unreadable`, and a rotation replaces it.
pub(crate) fn reseal_stale<K: Kv>(env: &Env<'_, K>, sub: &mut Subscription) -> bool {
    sub.stale_secrets(&env.settings.seal)
        && sub
            .reseal(&env.settings.seal, &mut || env.random_bytes())
            .unwrap_or(false)
}

/// The owner's subscription `id` (`client_id`'s, not deleted) with `change` applied; the
/// record as written, and the new secret's text if the scheme changed (shown once).
pub fn update_options<K: Kv>(
    env: &Env<'_, K>,
    client_id: &ClientId,
    id: &SubscriptionId,
    change: OptionsChange,
) -> Result<(Subscription, Option<String>), ApiError> {
    let random = env.random_bytes::<32>();
    let mut apply = |sub: &mut Subscription| {
        let mut secret = None;
        if let Some(scheme) = change.scheme.filter(|s| *s != sub.options.scheme) {
            let fresh = Secret::generate_for(scheme, random);
            sub.signing_secret = stored_secret(env, id, fresh.clone());
            sub.options.scheme = scheme;
            sub.options.previous_secret = None;
            secret = fresh.plain().map(str::to_owned);
        }
        if let Some(headers) = &change.headers {
            sub.options.headers = headers.clone();
        }
        if let Some(ordering) = change.ordering {
            sub.options.ordering = ordering;
        }
        if let Some(n) = change.max_in_flight {
            sub.options.max_in_flight = n;
        }
        if let Some(n) = change.rate_limit {
            sub.options.rate_limit = n;
        }
        if let Some(on) = change.traceparent {
            sub.options.traceparent = on;
        }
        secret
    };
    match change.target.is_empty() {
        true => change_owned(env, client_id, id, &mut apply),
        false => crate::retarget::retarget(env, client_id, id, &change.target, &mut |sub| {
            let secret = apply(sub);
            reseal_stale(env, sub);
            secret
        }),
    }
}

/// Gives the owner's subscription `id` a new secret of its scheme (shown once). With an
/// overlap, the secret it replaces keeps signing beside it until `now + overlap_ms`; a
/// rotation during an overlap keeps the secret from before the first one (the one receivers
/// may still hold) for the new window, and drops the one in between. With none, the old
/// secret stops at once. Returns the record as written and the new secret's text.
pub fn rotate<K: Kv>(
    env: &Env<'_, K>,
    client_id: &ClientId,
    id: &SubscriptionId,
    overlap_ms: u64,
) -> Result<(Subscription, String), ApiError> {
    let random = env.random_bytes::<32>();
    let now = env.now_ms;
    let (sub, secret) = change_owned(env, client_id, id, &mut |sub| {
        let fresh = Secret::generate_for(sub.options.scheme, random);
        let stored = stored_secret(env, id, fresh.clone());
        let replaced = std::mem::replace(&mut sub.signing_secret, stored);
        let kept = match sub.options.previous_at(now) {
            Some(older) => older.clone(),
            None => replaced,
        };
        sub.options.previous_secret = (overlap_ms > 0).then(|| (kept, now + overlap_ms));
        fresh.plain().map(str::to_owned)
    })?;
    Ok((sub, secret.unwrap_or_default()))
}

/// Erases subscription `id`'s previous secret if its overlap has ended at `env.now_ms`
/// (the tick calls this when the queue entry a rotation left comes due).
pub fn erase_expired_secret<K: Kv>(env: &Env<'_, K>, id: &SubscriptionId) -> Result<(), ApiError> {
    let now = env.now_ms;
    update(env.kv, &keys::subscription(id), &mut |cur| {
        let Some(bytes) = cur else {
            return Ok(Update::Keep(()));
        };
        let mut sub = Subscription::decode(bytes)?;
        match &sub.options.previous_secret {
            Some((_, until)) if *until <= now => {
                sub.options.previous_secret = None;
                reseal_stale(env, &mut sub);
                Ok(Update::Write(sub.encode(), ()))
            }
            _ => Ok(Update::Keep(())),
        }
    })?;
    Ok(())
}

/// Applies `f` to the record of `client_id`'s subscription `id` under compare-and-swap; a
/// missing, another client's, pending or deleted one is 404 (as a read). Returns the record
/// as written and what `f` returned (a new secret, if any).
fn change_owned<K: Kv>(
    env: &Env<'_, K>,
    client_id: &ClientId,
    id: &SubscriptionId,
    f: &mut dyn FnMut(&mut Subscription) -> Option<String>,
) -> Result<(Subscription, Option<String>), ApiError> {
    if !edgehook_model::ids::IdKind::Subscription.matches(id) {
        return Err(ApiError::not_found("Subscription"));
    }
    update(env.kv, &keys::subscription(id), &mut |cur| {
        let sub = cur.map(Subscription::decode).transpose()?;
        let Some(mut sub) = sub.filter(|s| {
            s.client_id == client_id
                && s.status != Status::Pending
                && s.disabled_reason.as_deref() != Some(crate::DELETED)
        }) else {
            return Err(ApiError::not_found("Subscription"));
        };
        let out = f(&mut sub);
        reseal_stale(env, &mut sub);
        Ok(Update::Write(sub.encode(), (sub, out)))
    })
    .map_err(ApiError::from)
}
