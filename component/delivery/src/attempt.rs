//! One attempt's request: to the target URL (parsed and checked against the policy by the
//! batch), with the body as published and the signed headers. The subscription's secrets
//! are opened here, for the signature only ([`Subscription::open_secrets`]); one that opens
//! under neither sealing key sends nothing ([`Unreadable`]), logged with the subscription's
//! id and counted in a metrics event.

use crate::sender::Outgoing;
use edgehook_model::env::Env;
use edgehook_model::signing;
use edgehook_model::trace;
use edgehook_model::validate::TargetUrl;
use edgehook_records::delivery::{Delivery, EventRecord};
use edgehook_storage::keys;
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::{Scheme, Subscription, Unreadable};
use std::rc::Rc;

/// The metrics event of an attempt not sent because its secret did not open.
pub const UNREADABLE_EVENT: &str = "{\"type\":\"secret_unreadable\"}";

/// `User-Agent` of every delivery.
pub const USER_AGENT: &str = concat!("edgehook/", env!("CARGO_PKG_VERSION"));

/// The signed request for one attempt of `d` to `url` (`sub`'s, parsed and allowed).
pub(crate) fn outgoing<K: Kv>(
    env: &Env<'_, K>,
    d: &Delivery,
    sub: &Subscription,
    url: TargetUrl,
    body: Rc<Vec<u8>>,
) -> Result<Outgoing, Unreadable> {
    let mut out = signed(env, &d.id, &d.event_type, sub, url, body)?;
    let (host, receiver) = (env.settings.trace_context, sub.options.traceparent);
    if !host && !receiver {
        return Ok(out);
    }
    let trace = publish_trace(env, d);
    if host {
        out.headers.push((
            trace::HOST_HEADER.into(),
            trace::host_header(
                &d.subscription_id,
                &d.event_id,
                d.attempts.len() + 1,
                trace.as_deref(),
            ),
        ));
    }
    // The receiver's: the publish's context (a host that makes a span of the attempt puts
    // that span in its place).
    if let (true, Some(trace)) = (receiver, trace) {
        out.headers.push(("traceparent".into(), trace));
    }
    Ok(out)
}

/// The `traceparent` `d`'s event was published with, if any: one more read, made only when
/// an attempt names it.
fn publish_trace<K: Kv>(env: &Env<'_, K>, d: &Delivery) -> Option<String> {
    let read = env.kv.get(&keys::event(&d.event_id));
    let bytes = env.best_effort("read event (trace context)", read)??;
    let event = env.best_effort("decode event (trace context)", EventRecord::decode(&bytes))?;
    event.trace
}

/// Says that subscription `id`'s secret did not open: a `secret.unreadable` log line with its
/// id, and the metrics event `secret_unreadable` (the host counts them).
pub fn report_unreadable<K: Kv>(env: &Env<'_, K>, id: &str) {
    env.log.line(&format!(
        "{{\"type\":\"secret.unreadable\",\"subscriptionId\":{},\"error\":{}}}",
        edgehook_model::error::quoted(id),
        edgehook_model::error::quoted(&Unreadable.to_string())
    ));
    env.log.event(UNREADABLE_EVENT);
}

/// The signed request of delivery `id` (an event of `event_type`) to `url` (`sub`'s, parsed
/// and allowed): a delivery's attempt, or a test delivery. [`Unreadable`] (reported) if a
/// secret it signs with opens under neither sealing key.
pub(crate) fn signed<K: Kv>(
    env: &Env<'_, K>,
    id: &str,
    event_type: &str,
    sub: &Subscription,
    url: TargetUrl,
    body: Rc<Vec<u8>>,
) -> Result<Outgoing, Unreadable> {
    let timestamp = env.now_ms / 1000;
    let options = &sub.options;
    // During a rotation's overlap the previous secret signs too.
    let (secret, previous) = sub
        .open_secrets(&env.settings.seal, env.now_ms)
        .inspect_err(|_| report_unreadable(env, &sub.id))?;
    let (secret, previous) = (secret.as_ref(), previous.as_deref());
    let authority = match url.port {
        Some(p) => format!("{}:{p}", url.host),
        None => url.host.clone(),
    };
    let mut headers: Vec<(String, String)> = vec![
        ("content-type".into(), "application/json".into()),
        ("content-length".into(), body.len().to_string()),
        ("user-agent".into(), USER_AGENT.into()),
    ];
    let mut header = |name: &str, value: String| headers.push((name.into(), value));
    match options.scheme {
        Scheme::Spec => {
            header("x-service-delivery-id", id.to_owned());
            header("x-service-event", event_type.to_owned());
            header("x-service-timestamp", timestamp.to_string());
            let current = signing::sign(secret, timestamp, &body);
            match previous {
                None => header("x-service-signature", current),
                // A receiver that checks X-Service-Signature (SPEC §5.2) with the previous
                // secret keeps verifying; one with the new secret finds it in the list.
                Some(old) => {
                    let old = signing::sign(old, timestamp, &body);
                    header("x-service-signatures", format!("{current},{old}"));
                    header("x-service-signature", old);
                }
            }
        }
        Scheme::Standard => {
            header("webhook-id", id.to_owned());
            header("webhook-timestamp", timestamp.to_string());
            header("x-service-event", event_type.to_owned());
            // The standard's list: space-separated `v1,<base64>`, the current one first.
            let mut signatures =
                signing::sign_standard(secret, id, timestamp, &body).unwrap_or_default();
            if let Some(old) =
                previous.and_then(|s| signing::sign_standard(s, id, timestamp, &body))
            {
                signatures.push(' ');
                signatures.push_str(&old);
            }
            header("webhook-signature", signatures);
        }
    }
    headers.extend(options.headers.iter().cloned());
    Ok(Outgoing {
        scheme: url.scheme,
        authority,
        path_and_query: url.path_and_query,
        headers,
        body,
    })
}
