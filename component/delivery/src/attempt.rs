//! One attempt's request: the target URL checked again, the body as published, the signed headers.

use crate::sender::Outgoing;
use edgehook_model::env::Env;
use edgehook_model::{signing, validate};
use edgehook_records::delivery::Delivery;
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::Subscription;
use std::rc::Rc;

/// `User-Agent` of every delivery.
pub const USER_AGENT: &str = concat!("edgehook/", env!("CARGO_PKG_VERSION"));

/// The error of an attempt refused before sending: the target is not public and private
/// targets are not allowed (the same words the shell uses for a host's refusal).
pub const DESTINATION_REFUSED: &str = "destination not allowed";

/// The signed request for one attempt, or `None` if the stored URL no longer parses.
pub(crate) fn outgoing<K: Kv>(
    env: &Env<'_, K>,
    d: &Delivery,
    sub: &Subscription,
    body: Rc<Vec<u8>>,
) -> Option<Outgoing> {
    let url = validate::target_url(&sub.url, validate::TargetPolicy::OPEN).ok()?;
    let timestamp = env.now_ms / 1000;
    let signature = signing::sign(&sub.signing_secret.0, timestamp, &body);
    let authority = match url.port {
        Some(p) => format!("{}:{p}", url.host),
        None => url.host.clone(),
    };
    Some(Outgoing {
        scheme: url.scheme,
        authority,
        path_and_query: url.path_and_query,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("content-length".into(), body.len().to_string()),
            ("user-agent".into(), USER_AGENT.into()),
            ("x-service-delivery-id".into(), d.id.clone()),
            ("x-service-event".into(), d.event_type.clone()),
            ("x-service-timestamp".into(), timestamp.to_string()),
            ("x-service-signature".into(), signature),
        ],
        body,
    })
}
