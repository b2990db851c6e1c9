//! One attempt's request: to the target URL (parsed and checked against the policy by the
//! batch), with the body as published and the signed headers.

use crate::sender::Outgoing;
use edgehook_model::env::Env;
use edgehook_model::signing;
use edgehook_model::validate::TargetUrl;
use edgehook_records::delivery::Delivery;
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::Subscription;
use std::rc::Rc;

/// `User-Agent` of every delivery.
pub const USER_AGENT: &str = concat!("edgehook/", env!("CARGO_PKG_VERSION"));

/// The error of an attempt refused before sending: the target is not public and private
/// targets are not allowed (the same words the shell uses for a host's refusal).
pub const DESTINATION_REFUSED: &str = "destination not allowed";

/// The signed request for one attempt of `d` to `url` (`sub`'s, parsed and allowed).
pub(crate) fn outgoing<K: Kv>(
    env: &Env<'_, K>,
    d: &Delivery,
    sub: &Subscription,
    url: TargetUrl,
    body: Rc<Vec<u8>>,
) -> Outgoing {
    signed(env, &d.id, &d.event_type, sub, url, body)
}

/// The signed request of delivery `id` (an event of `event_type`) to `url` (`sub`'s, parsed
/// and allowed): a delivery's attempt, or a test delivery.
pub(crate) fn signed<K: Kv>(
    env: &Env<'_, K>,
    id: &str,
    event_type: &str,
    sub: &Subscription,
    url: TargetUrl,
    body: Rc<Vec<u8>>,
) -> Outgoing {
    let timestamp = env.now_ms / 1000;
    let signature = signing::sign(&sub.signing_secret.0, timestamp, &body);
    let authority = match url.port {
        Some(p) => format!("{}:{p}", url.host),
        None => url.host.clone(),
    };
    Outgoing {
        scheme: url.scheme,
        authority,
        path_and_query: url.path_and_query,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("content-length".into(), body.len().to_string()),
            ("user-agent".into(), USER_AGENT.into()),
            ("x-service-delivery-id".into(), id.to_owned()),
            ("x-service-event".into(), event_type.to_owned()),
            ("x-service-timestamp".into(), timestamp.to_string()),
            ("x-service-signature".into(), signature),
        ],
        body,
    }
}
