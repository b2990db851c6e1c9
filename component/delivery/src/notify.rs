//! Notices to a partner: when one of its subscriptions is disabled (not by its own delete)
//! or enabled again, or a rotation's previous secret has an hour left to sign, an event
//! (`subscription.disabled`, `subscription.enabled`, `secret.rotation_ending`) is delivered
//! to the client's notification endpoint, if it registered one, signed with that endpoint's
//! own secret and retried like any delivery.
//!
//! The endpoint is a subscription that is not stored as one: its notices' delivery records
//! name [`endpoint_id`] (derived from the client id), and [`fill_endpoints`] makes the
//! subscription from the client's `notify:` record when an attempt is sent (so a changed URL
//! applies to pending notices, and a removed endpoint cancels them). Its failures count
//! toward no streak and disable nothing (no subscription record answers to its id); it is
//! not replayable and not listed.

use crate::fanout::publish_internal;
use edgehook_model::env::Env;
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_records::notify::{NotificationEndpoint, endpoint_id};
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::{Secret, Status, Subscription};

/// A rotation's previous secret stops signing within the hour ([`rotation_ending_entry`]).
pub const ROTATION_ENDING: &str = "secret.rotation_ending";

/// How long before a rotation's previous secret stops signing its notice is sent.
pub const ROTATION_NOTICE_MS: u64 = 3_600_000;

/// Sends notice `kind` about `sub` (as it is now) for `reason` to its owner's notification
/// endpoint, if it has one. Best effort: the change it reports has committed; a store
/// failure here loses the notice, never the change.
pub fn send<K: Kv>(env: &Env<'_, K>, kind: &str, sub: &Subscription, reason: &str) {
    let id = endpoint_id(&sub.client_id);
    // One read: only a client with an endpoint gets an event and a delivery.
    match env.kv.get(&keys::notification_endpoint(&id)) {
        Ok(None) => {}
        Ok(Some(_)) => {
            let body = notice_body(kind, sub, reason, env.now_ms);
            let published = publish_internal(env, kind, &body, &id);
            env.best_effort("notice delivery (event and delivery records)", published);
        }
        Err(e) => {
            env.best_effort::<(), _>("notice (notification endpoint)", Err(e));
        }
    }
}

/// What a notice says: its type, the subscription, why (the disable's reason; `owner`,
/// `operator` or `recovered` for an enable; `rotation_overlap_ending`), the subscription's
/// status now, a rotation's `previousSecretExpiresAt`, and when (`at`, ms). Written out: the
/// ids and the type are ours, the reason a code of `a-z0-9_` (quoted all the same).
fn notice_body(kind: &str, sub: &Subscription, reason: &str, now_ms: u64) -> Vec<u8> {
    let status = match sub.status {
        Status::Active => "active",
        Status::Disabled => "disabled",
        Status::Pending => "pending",
    };
    let mut body = format!(
        "{{\"type\":\"{kind}\",\"subscriptionId\":\"{}\",\"reason\":{},\"status\":\"{status}\"",
        sub.id,
        edgehook_model::error::quoted(reason)
    );
    if let (ROTATION_ENDING, Some((_, until))) = (kind, &sub.options.previous_secret) {
        body.push_str(&format!(",\"previousSecretExpiresAt\":{until}"));
    }
    body.push_str(&format!(",\"at\":{now_ms}}}"));
    body.into_bytes()
}

/// Queues the rotation-ending notice of subscription `sub_id`, whose previous secret signs
/// until `until_ms`: due [`ROTATION_NOTICE_MS`] before, or at once for a shorter overlap.
pub(crate) fn rotation_ending_entry(
    now_ms: u64,
    sub_id: &SubscriptionId,
    until_ms: u64,
) -> (u64, String) {
    let due = until_ms.saturating_sub(ROTATION_NOTICE_MS).max(now_ms);
    (
        due,
        crate::timers::Timer::RotationEnding {
            sub: sub_id.clone(),
            until: until_ms,
        }
        .entry(),
    )
}

/// A rotation-ending entry come due: the notice, if the rotation it was queued for is still
/// the one in force (a later rotation queued its own) and the subscription not deleted.
pub(crate) fn rotation_ending<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &SubscriptionId,
    until: u64,
) -> Result<(), edgehook_model::error::ApiError> {
    let Some(sub) = edgehook_subscriptions::load(env, sub_id)? else {
        return Ok(());
    };
    let current = sub.options.previous_secret.as_ref().map(|(_, u)| *u);
    let deleted = sub.disabled_reason.as_deref() == Some(edgehook_subscriptions::DELETED);
    if current == Some(until) && !deleted {
        send(env, ROTATION_ENDING, &sub, "rotation_overlap_ending");
    }
    Ok(())
}

/// For each id of `ids` that no subscription record answered (`None` in `subs`) and that is
/// a client's notification endpoint, the endpoint as a subscription, its secret opened
/// (one that opens under neither key is reported and sends nothing). One batch read, only
/// when some record was missing.
pub(crate) fn fill_endpoints<K: Kv>(
    env: &Env<'_, K>,
    ids: &[SubscriptionId],
    subs: &mut [Option<Subscription>],
) {
    let missing: Vec<usize> = (0..ids.len()).filter(|i| subs[*i].is_none()).collect();
    if missing.is_empty() {
        return;
    }
    let keys: Vec<Key> = missing
        .iter()
        .map(|i| keys::notification_endpoint(&ids[*i]))
        .collect();
    let Ok(found) = env.kv.get_many(&keys) else {
        return; // their deliveries wait as for any unreadable subscription
    };
    for ((i, key), bytes) in missing.iter().zip(&keys).zip(found) {
        let endpoint = bytes.and_then(|b| NotificationEndpoint::decode(&b));
        let Some(endpoint) = endpoint.filter(|e| endpoint_id(&e.client_id) == ids[*i]) else {
            continue;
        };
        subs[*i] = as_subscription(env, &ids[*i], key, endpoint);
    }
}

/// The endpoint as the subscription its notices are sent to.
fn as_subscription<K: Kv>(
    env: &Env<'_, K>,
    id: &SubscriptionId,
    key: &Key,
    endpoint: NotificationEndpoint,
) -> Option<Subscription> {
    let secret = match endpoint.secret.open(&env.settings.seal, key) {
        Ok(s) => s.into_owned(),
        Err(unreadable) => {
            env.log.line(&format!(
                "{{\"type\":\"secret.unreadable\",\"subscriptionId\":\"{id}\",\"error\":\"{unreadable}\"}}"
            ));
            env.log.event(crate::attempt::UNREADABLE_EVENT);
            return None;
        }
    };
    Some(Subscription {
        id: id.clone(),
        client_id: endpoint.client_id,
        url: endpoint.url,
        event_types: Vec::new(),
        signing_secret: Secret::Plain(secret),
        status: Status::Active,
        disabled_reason: None,
        created_at: endpoint.created_at,
        disabled_at: None,
        seq: 0,
        consecutive_failures: 0,
        fanout_seqs: Vec::new(),
        disabled_entries: (None, None),
        options: Default::default(),
    })
}

/// The id `client_id`'s notices are delivered under.
pub fn endpoint_of(client_id: &ClientId) -> SubscriptionId {
    endpoint_id(client_id)
}
