//! Operator alerts: when a subscription is disabled (a `410 Gone`, a failure streak, an
//! operator) or enabled again, a structured log line, and, with `alert_url` set, an event
//! (`subscription.disabled`, `subscription.enabled`) delivered to the operator's URL signed
//! with `alert_secret`, retried like any delivery. A partner's delete raises none: it is the
//! owner's own act.
//!
//! The operator's endpoint is a subscription that is not stored: [`ALERTS`] is its id in
//! the delivery records, and [`target`] makes it from the settings when an attempt is sent
//! (so a changed URL or secret applies to pending alerts). Its failures never disable
//! anything and count toward no streak (`outcome.rs`); it is not replayable and no client
//! owns it.

use crate::fanout::publish_internal;
use edgehook_model::config::Settings;
use edgehook_model::env::Env;
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::{Secret, Status, Subscription};
use serde::Serialize;

/// The id operator alerts are delivered under (a subscription id no create can draw: ids
/// are random, and this one is all but zero).
pub const ALERTS: &str = "sub_000000000000000000a1e275";

/// A subscription was disabled (any reason but its owner's delete).
pub const SUBSCRIPTION_DISABLED: &str = "subscription.disabled";

/// A disabled subscription was enabled again.
pub const SUBSCRIPTION_ENABLED: &str = "subscription.enabled";

/// What an alert says: the log line's fields, and the alert event's body.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Alert<'a> {
    /// [`SUBSCRIPTION_DISABLED`] or [`SUBSCRIPTION_ENABLED`].
    #[serde(rename = "type")]
    kind: &'a str,
    subscription_id: &'a str,
    client_id: &'a str,
    /// The URL's scheme and authority only: a path or query may hold the receiver's own
    /// token (Slack-style webhook URLs), which no log and no alert may carry.
    url_origin: String,
    status: &'a str,
    disabled_reason: Option<&'a str>,
    disabled_at: Option<u64>,
    consecutive_failures: u32,
    /// When it happened (ms since the epoch).
    at: u64,
}

/// Raises the alert `kind` about `sub` (as it is now): a log line, and an alert event for
/// the operator's URL if one is set. Best effort: the change it reports has committed, and
/// a store failure here loses the event, never the change (the log line is written first).
pub fn raise<K: Kv>(env: &Env<'_, K>, kind: &str, sub: &Subscription) {
    let alert = Alert {
        kind,
        subscription_id: &sub.id,
        client_id: &sub.client_id,
        url_origin: origin(&sub.url),
        status: match sub.status {
            Status::Active => "active",
            Status::Disabled => "disabled",
            Status::Pending => "pending",
        },
        disabled_reason: sub.disabled_reason.as_deref(),
        disabled_at: sub.disabled_at,
        consecutive_failures: sub.consecutive_failures,
        at: env.now_ms,
    };
    let Ok(body) = serde_json::to_vec(&alert) else {
        return;
    };
    // The log line is the event's body: one JSON object, its `type` first.
    env.log.line(&String::from_utf8_lossy(&body));
    if env.settings.alert_url.is_some() {
        let published = publish_internal(env, kind, &body, &SubscriptionId::trusted(ALERTS));
        env.best_effort("alert delivery (event and delivery records)", published);
    }
}

/// `scheme://host[:port]` of a URL (no user, path, query or fragment).
fn origin(url: &str) -> String {
    let Some((scheme, rest)) = edgehook_model::validate::split_scheme(url) else {
        return String::new();
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    format!("{scheme}://{host}")
}

/// The operator's alert endpoint as a subscription, from the settings; `None` when no
/// `alert_url` is set (pending alerts are then cancelled when they come due).
pub(crate) fn target(settings: &Settings) -> Option<Subscription> {
    let (url, secret) = (
        settings.alert_url.as_ref()?,
        settings.alert_secret.as_ref()?,
    );
    Some(Subscription {
        id: SubscriptionId::trusted(ALERTS),
        client_id: ClientId::default(),
        url: url.clone(),
        event_types: vec![
            SUBSCRIPTION_DISABLED.to_owned(),
            SUBSCRIPTION_ENABLED.to_owned(),
        ],
        signing_secret: Secret::Plain(secret.clone()),
        status: Status::Active,
        disabled_reason: None,
        created_at: 0,
        disabled_at: None,
        seq: 0,
        consecutive_failures: 0,
        fanout_seqs: Vec::new(),
        disabled_entries: (None, None),
        options: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::origin;

    #[test]
    fn the_origin_keeps_no_path_query_or_user() {
        assert_eq!(
            origin("https://hooks.example.com/services/T0/secret?x=1"),
            "https://hooks.example.com"
        );
        assert_eq!(origin("http://127.0.0.1:9000?t=1"), "http://127.0.0.1:9000");
        assert_eq!(
            origin("https://user:pw@h.example.com:8443/p"),
            "https://h.example.com:8443"
        );
        assert_eq!(origin("not a url"), "");
    }
}
