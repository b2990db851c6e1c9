//! Test deliveries: one signed `webhook.ping` to a subscription's URL, sent at once, so a
//! partner can check a receiver without waiting for a load event. Not stored, not retried,
//! not replayable, and not counted in the subscription's failure streak: it tells the caller
//! how the receiver answered, and changes nothing.

use crate::attempt::signed;
use crate::sender::{SendError, SendResult, Sender};
use edgehook_model::env::Env;
use edgehook_model::ids::{DeliveryId, Generate};
use edgehook_model::validate;
use edgehook_records::delivery::error_class;
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::Subscription;
use serde::Serialize;
use std::rc::Rc;

/// The event type of a test delivery (`X-Service-Event`). Receivers may see it besides the
/// load events; it carries no load.
pub const PING_EVENT: &str = "webhook.ping";

/// How a test delivery went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ping {
    /// Its delivery id (`X-Service-Delivery-Id`): random, a new one for every test.
    pub id: DeliveryId,
    /// When it was sent (ms since the epoch).
    pub sent_at: u64,
    /// The status code, or why there was none.
    pub outcome: Result<u16, SendError>,
    /// Time to the response head (or the error), in ms.
    pub latency_ms: u64,
}

impl Ping {
    /// Whether the receiver answered 2xx.
    pub fn succeeded(&self) -> bool {
        matches!(self.outcome, Ok(code) if (200..300).contains(&code))
    }

    /// The test's outcome as the API shows it (`TestDelivery` in the OpenAPI document).
    pub fn view<'a>(&'a self, sub: &'a Subscription) -> PingView<'a> {
        let (status_code, error) = match &self.outcome {
            Ok(code) => (Some(*code), None),
            Err(e) => (None, Some(e.as_str())),
        };
        PingView {
            id: &self.id,
            event_type: PING_EVENT,
            subscription_id: &sub.id,
            url: &sub.url,
            sent_at: self.sent_at,
            succeeded: self.succeeded(),
            status_code,
            duration_ms: self.latency_ms,
            error,
            error_class: error_class(status_code, error),
        }
    }
}

/// A test delivery's outcome as the API shows it ([`Ping::view`]).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PingView<'a> {
    id: &'a str,
    event_type: &'static str,
    subscription_id: &'a str,
    url: &'a str,
    sent_at: u64,
    succeeded: bool,
    status_code: Option<u16>,
    duration_ms: u64,
    error: Option<&'a str>,
    error_class: Option<&'static str>,
}

/// Sends a test delivery to `sub` now, signed with its secret like any delivery, under the
/// URL policy of the day (a URL it no longer allows is refused, nothing sent).
pub fn ping<K: Kv>(env: &Env<'_, K>, sender: &dyn Sender, sub: &Subscription) -> Ping {
    let id = DeliveryId::generate(env.entropy);
    let body = Rc::new(ping_body(&sub.id, env.now_ms));
    send_ping(env, sender, sub, id, body)
}

/// A ping's body: its type, the subscription, when it was made.
pub(crate) fn ping_body(sub_id: &str, now_ms: u64) -> Vec<u8> {
    // Written out: the ids are ours (no character to escape), the rest numbers.
    format!(r#"{{"type":"{PING_EVENT}","subscriptionId":"{sub_id}","createdAt":{now_ms}}}"#)
        .into_bytes()
}

/// Sends `body` as ping `id` to `sub` now ([`ping`]; a recovery's probe gives its own id).
pub(crate) fn send_ping<K: Kv>(
    env: &Env<'_, K>,
    sender: &dyn Sender,
    sub: &Subscription,
    id: DeliveryId,
    body: Rc<Vec<u8>>,
) -> Ping {
    let result = match validate::target_url(&sub.url, env.settings.target_policy()) {
        Ok(url) => match signed(env, &id, PING_EVENT, sub, url, body) {
            Ok(request) => {
                let mut sent = sender.send_all(&[request], env.settings.attempt_timeout_ms);
                sent.pop()
                    .unwrap_or(SendResult::unsent(SendError::Other("no answer")))
            }
            Err(_) => SendResult::unsent(SendError::SecretUnreadable),
        },
        Err(_) => SendResult::unsent(SendError::DestinationRefused),
    };
    Ping {
        id,
        sent_at: env.now_ms,
        outcome: result.outcome,
        latency_ms: result.latency_ms,
    }
}
