//! Changing where a subscription delivers and what it listens to, in place (`url` and
//! `eventTypes` in `PATCH /v1/webhooks/{id}`): same id, same secret, same history.
//!
//! The record is the truth of which event types a subscription takes: publish reads the
//! listeners of a type from its fan-out list and keeps only records that name the type. So
//! a change is made in the order that is safe to cut at any point:
//! 1. a fan-out entry is appended for each type added (an entry whose record does not name
//!    its type is skipped by publish);
//! 2. an active subscription's client-index entry is marked `Joining` (list then reads the
//!    record instead of trusting the stored item);
//! 3. the record is written by compare-and-swap against the bytes read first, with the new
//!    URL, types and fan-out entry numbers: the commit point. Before it the subscription
//!    takes exactly the old types at the old URL, after it exactly the new ones;
//! 4. best effort: the fan-out entries of the types dropped are removed (publish skips them
//!    already), and the client-index item is rewritten from the record and trusted again.
//!
//! A change that loses the race to another write of the record removes the entries it
//! appended and starts again from the record as it now is. Queued deliveries keep their
//! subscription id, and every attempt reads the record when it is made, so it goes to the
//! URL in force then.

use crate::disable::remove_from_fanout;
use crate::index::{
    Listing, append_one, client_index, decode_index_item, encode_index_item, fanout_index,
    partner_view, set_listing,
};
use crate::{ApiError, DELETED, Env, Kv, Status, Subscription};
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::keys;
use edgehook_storage::kv::CAS_ATTEMPTS;

/// A new target: each `None` is left as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// The new URL (checked by the caller as at create).
    pub url: Option<String>,
    /// The new event types (known and deduplicated, as at create).
    pub event_types: Option<Vec<String>>,
}

impl Target {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.url.is_none() && self.event_types.is_none()
    }
}

/// Applies `target` (and `also`, the delivery options' change and the secrets' re-seal, in
/// the same write) to the
/// record of `client_id`'s subscription `id`, active or disabled; a missing, another
/// client's, pending or deleted one is 404. Returns the record as written and what `also`
/// returned.
pub(crate) fn retarget<K: Kv>(
    env: &Env<'_, K>,
    client_id: &ClientId,
    id: &SubscriptionId,
    target: &Target,
    also: &mut dyn FnMut(&mut Subscription) -> Option<String>,
) -> Result<(Subscription, Option<String>), ApiError> {
    let key = keys::subscription(id);
    for _ in 0..CAS_ATTEMPTS {
        let (cas, current) = env.kv.cas_begin(&key)?;
        let Some(sub) = current
            .map(|b| Subscription::decode(&b))
            .transpose()?
            .filter(|s| changeable(s, client_id))
        else {
            return Err(ApiError::not_found("Subscription"));
        };
        let (mut new, appended) = with_target(env, &sub, target)?;
        let out = also(&mut new);
        let listed = sub.status == Status::Active && view_changes(&sub, &new);
        if listed
            && let Err(e) = set_listing(env, &sub, |l| l != Listing::Leaving, Listing::Joining)
        {
            remove_appended(env, &appended);
            return Err(e);
        }
        let bytes = new.encode();
        let swapped = env.kv.cas_swap(cas, &bytes);
        let committed = match swapped {
            Ok(swapped) => swapped,
            // Not known to have applied: it did if the record holds these very bytes.
            Err(_) => env.kv.get(&key).ok().flatten().as_deref() == Some(&bytes[..]),
        };
        if committed {
            settle(env, &sub, &new, listed);
            return Ok((new, out));
        }
        remove_appended(env, &appended);
        swapped?;
    }
    Err(ApiError::store_unavailable(
        "the subscription kept changing",
    ))
}

/// Whether `sub` is one its owner `client_id` may change: active or disabled, not pending
/// and not deleted.
fn changeable(sub: &Subscription, client_id: &ClientId) -> bool {
    sub.client_id == client_id
        && sub.status != Status::Pending
        && sub.disabled_reason.as_deref() != Some(DELETED)
}

/// Whether the list item (URL, types) of `old` differs from that of `new`.
fn view_changes(old: &Subscription, new: &Subscription) -> bool {
    old.url != new.url || old.event_types != new.event_types
}

/// `sub` with `target` applied, fan-out entries appended for the types it adds (a kept type
/// keeps its entry); and the types appended to, with their entry numbers.
fn with_target<K: Kv>(
    env: &Env<'_, K>,
    sub: &Subscription,
    target: &Target,
) -> Result<(Subscription, Vec<(String, u64)>), ApiError> {
    let mut new = sub.clone();
    if let Some(url) = &target.url {
        new.url = url.clone();
    }
    let Some(types) = &target.event_types else {
        return Ok((new, Vec::new()));
    };
    let mut appended: Vec<(String, u64)> = Vec::new();
    let mut seqs = Vec::with_capacity(types.len());
    for t in types {
        let kept = sub.event_types.iter().position(|old| old == t);
        match kept.and_then(|at| sub.fanout_seqs.get(at)) {
            Some(seq) => seqs.push(*seq),
            None => match append_one(env, &fanout_index(t), sub.id.as_bytes()) {
                Ok(seq) => {
                    appended.push((t.clone(), seq));
                    seqs.push(seq);
                }
                Err(e) => {
                    remove_appended(env, &appended);
                    return Err(e);
                }
            },
        }
    }
    new.event_types = types.clone();
    new.fanout_seqs = seqs;
    Ok((new, appended))
}

/// Takes back the fan-out entries a change appended and did not commit, best effort (an
/// entry left behind is skipped by publish: the record does not name it).
fn remove_appended<K: Kv>(env: &Env<'_, K>, appended: &[(String, u64)]) {
    for (t, seq) in appended {
        let removed = fanout_index(t).remove(env.kv, *seq).map_err(ApiError::from);
        env.best_effort(
            "change undone: leave the fan-out list (fan-out index)",
            removed,
        );
    }
}

/// After the commit, best effort: the fan-out entries of the types `old` had and `new` has
/// not go, and the client-index item is rewritten from the record.
fn settle<K: Kv>(env: &Env<'_, K>, old: &Subscription, new: &Subscription, listed: bool) {
    let mut dropped = old.clone();
    let (types, seqs): (Vec<String>, Vec<u64>) = old
        .event_types
        .iter()
        .zip(&old.fanout_seqs)
        .filter(|(t, _)| !new.event_types.contains(t))
        .map(|(t, seq)| (t.clone(), *seq))
        .unzip();
    dropped.event_types = types;
    dropped.fanout_seqs = seqs;
    let removed = remove_from_fanout(env, &dropped);
    env.best_effort("change: leave the fan-out lists (fan-out index)", removed);
    if listed {
        let refreshed = refresh_listing(env, &new.id);
        env.best_effort("change: list item (client index)", refreshed);
    }
}

/// Rewrites the client-index item of subscription `id` from its record and lets list trust
/// it, unless a disable has begun (`Leaving`). The record is read again after the write: if
/// another change committed meanwhile, the item is written again from it, so the last
/// writer's item matches the last record; a change that cannot settle leaves the entry
/// `Joining` (list reads the record).
fn refresh_listing<K: Kv>(env: &Env<'_, K>, id: &SubscriptionId) -> Result<(), ApiError> {
    let mut seen = env.kv.get(&keys::subscription(id))?;
    for _ in 0..CAS_ATTEMPTS {
        let Some(sub) = seen.as_deref().map(Subscription::decode).transpose()? else {
            return Ok(());
        };
        if sub.status != Status::Active {
            return Ok(());
        }
        let view = serde_json::to_vec(&partner_view(&sub)).map_err(ApiError::internal)?;
        let item = encode_index_item(Listing::Live, &sub.id, &view);
        client_index(&sub.client_id).modify(env.kv, sub.seq, |cur| {
            let (Some(listing), at, _) = decode_index_item(cur)? else {
                return None;
            };
            (at == sub.id.as_str() && listing != Listing::Leaving && cur != item.as_slice())
                .then(|| item.clone())
        })?;
        let now = env.kv.get(&keys::subscription(id))?;
        if now == seen {
            return Ok(());
        }
        seen = now;
    }
    let unsure = crate::load::load(env, id)?;
    if let Some(sub) = unsure {
        set_listing(env, &sub, |l| l == Listing::Live, Listing::Joining)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NewSubscription, OptionsChange, activate, create_pending, fanout_ids, list_page};
    use edgehook_model::config::Settings;
    use edgehook_model::env::SeededEntropy;
    use edgehook_storage::kv::MemoryKv;

    const OLD: &str = "https://old.example.com/x";
    const NEW: &str = "https://new.example.com/x";

    fn acme() -> ClientId {
        ClientId::from("acme")
    }

    /// What publish would deliver to: for each type, the listeners whose active record
    /// names it, with the URL the record holds.
    fn delivered(env: &Env<'_, MemoryKv>) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for t in ["load.created", "load.updated"] {
            for id in fanout_ids(env, t).expect("fan-out") {
                let sub = crate::load(env, &id).expect("load").expect("record");
                if sub.status == Status::Active && sub.event_types.iter().any(|x| x == t) {
                    out.push((t, sub.url));
                }
            }
        }
        out
    }

    fn change() -> OptionsChange {
        OptionsChange {
            scheme: None,
            headers: None,
            ordering: None,
            max_in_flight: None,
            rate_limit: None,
            traceparent: None,
            target: Target {
                url: Some(NEW.to_owned()),
                event_types: Some(vec!["load.updated".to_owned()]),
            },
        }
    }

    /// The list's item for the one subscription: its URL.
    fn listed_url(env: &Env<'_, MemoryKv>) -> String {
        let (page, _) = list_page(env, &acme(), 10, 0).expect("list");
        let v: serde_json::Value = serde_json::from_slice(page[0].view()).expect("json");
        v["url"].as_str().expect("url").to_owned()
    }

    #[test]
    fn a_fault_at_any_store_operation_leaves_the_old_or_the_new_subscription_whole() {
        let settings = Settings::default();
        let old = vec![("load.created", OLD.to_owned())];
        let new = vec![("load.updated", NEW.to_owned())];
        let mut n = 1;
        let mut seen = (0, 0);
        loop {
            let kv = MemoryKv::new();
            let entropy = SeededEntropy::new(n);
            let env = Env::new(1_000, &kv, &settings, &entropy);
            let input = NewSubscription {
                url: OLD.to_owned(),
                event_types: vec!["load.created".to_owned()],
                options: Default::default(),
            };
            let (sub, bytes) = create_pending(&env, input, &acme()).expect("create");
            activate(&env, &sub.id, Some((&sub, &bytes))).expect("activate");
            kv.fail_at(Some(n));
            let result = crate::update_options(&env, &acme(), &sub.id, change());
            let failed = kv.ops() >= n;
            kv.fail_at(None);
            if !failed {
                assert!(result.is_ok(), "no fault, no error");
                break;
            }
            let now = delivered(&env);
            match &result {
                Err(_) => {
                    seen.0 += 1;
                    assert_eq!(now, old, "fault at op {n}: refused, so wholly old");
                }
                Ok(_) => {
                    seen.1 += 1;
                    assert_eq!(now, new, "fault at op {n}: committed, so wholly new");
                }
            }
            let record = crate::load(&env, &sub.id).expect("load").expect("record");
            assert_eq!(
                listed_url(&env),
                record.url,
                "fault at op {n}: list and record agree"
            );
            crate::update_options(&env, &acme(), &sub.id, change()).expect("the retry");
            assert_eq!(
                delivered(&env),
                new,
                "fault at op {n}: the retry completes it"
            );
            assert_eq!(listed_url(&env), NEW, "fault at op {n}");
            n += 1;
        }
        assert!(
            seen.0 >= 3 && seen.1 >= 1,
            "faults on both sides of the commit: {seen:?}"
        );
    }

    #[test]
    fn a_kept_type_keeps_its_entry_and_a_dropped_one_leaves_its_list() {
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(9));
        let env = Env::new(1_000, &kv, &settings, &entropy);
        let input = NewSubscription {
            url: OLD.to_owned(),
            event_types: vec!["load.created".to_owned(), "load.updated".to_owned()],
            options: Default::default(),
        };
        let (sub, bytes) = create_pending(&env, input, &acme()).expect("create");
        let sub = activate(&env, &sub.id, Some((&sub, &bytes))).expect("activate");
        let target = Target {
            url: None,
            event_types: Some(vec![
                "load.updated".to_owned(),
                "load.status_changed".to_owned(),
            ]),
        };
        let (changed, _) =
            retarget(&env, &acme(), &sub.id, &target, &mut |_| None).expect("change");
        assert_eq!(
            changed.fanout_seqs[0], sub.fanout_seqs[1],
            "load.updated kept its entry"
        );
        assert!(fanout_ids(&env, "load.created").expect("ids").is_empty());
        assert_eq!(
            fanout_ids(&env, "load.status_changed").expect("ids"),
            vec![sub.id.clone()]
        );
        assert_eq!(changed.url, OLD);
        // Another client's, or a deleted one: 404, nothing changed.
        let other = retarget(
            &env,
            &ClientId::from("globex"),
            &sub.id,
            &target,
            &mut |_| None,
        );
        assert_eq!(other.map(|_| ()).map_err(|e| e.status), Err(404));
    }
}
