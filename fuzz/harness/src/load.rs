//! Target `load`: event ingest and load validation, end to end.
//!
//! Input: the first line is the `X-Service-Event` header value (any bytes), the rest is the
//! load (the request body), exactly as an operator would `POST /internal/v1/events`.
//!
//! Checked:
//! - the answer agrees with `events::validate` (202 exactly when it accepts; 422 naming
//!   `X-Service-Event` for an unknown type, `body` for a bad load) and with an independent
//!   reading of the load (a JSON object whose `id` is a non-empty string);
//! - a refused event leaves the store exactly as it was;
//! - an accepted event is stored byte for byte, makes one delivery per active subscription of
//!   its type, and the tick that follows sends each of them the **published bytes** (never
//!   re-serialized), with the SPEC headers and a signature that verifies with that
//!   subscription's secret (the [`crate::model`] checks every sent request);
//! - every delivery record then reads back through the operator API as succeeded.

use crate::world::delivery_id_of as delivery_id;
use crate::world::{ADMIN_TOKEN, World, bearer};
use edgehook_component::api::router::INGEST_BODY_LIMIT;
use edgehook_component::model::events::{self, PublishError};
use edgehook_component::model::http::Request;
use edgehook_component::storage::keys;
use edgehook_component::storage::kv::Kv;
use serde_json::Value;

/// Runs one input.
pub fn run(data: &[u8]) {
    let (event_type, load) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let mut world = World::new(&[]);
    let before = world.kv.dump();
    let mut req = Request::new("POST", "/internal/v1/events")
        .header("authorization", &bearer(ADMIN_TOKEN))
        .header("content-type", "application/json")
        .body(load.to_vec());
    req.headers
        .push(("x-service-event".to_owned(), event_type.to_vec()));
    let reply = world.request(&req, false);
    let ctx = || {
        format!(
            "{:?} {:?} -> {}",
            String::from_utf8_lossy(event_type),
            String::from_utf8_lossy(load),
            reply.text
        )
    };

    let independent_ok = serde_json::from_slice::<Value>(load)
        .ok()
        .is_some_and(|v| v["id"].as_str().is_some_and(|id| !id.is_empty()) && v.is_object());
    let verdict = std::str::from_utf8(event_type)
        .ok()
        .map(|t| (t, events::validate(t, load)));
    if load.len() > INGEST_BODY_LIMIT {
        assert_eq!(reply.status, 413, "{}", ctx());
    } else {
        match &verdict {
            None => {
                assert_eq!(reply.status, 422, "non-UTF-8 event type: {}", ctx());
                assert_eq!(reply.detail_fields(), ["X-Service-Event"], "{}", ctx());
            }
            Some((_, Ok(()))) => {
                assert_eq!(
                    reply.status,
                    202,
                    "validation accepted, ingest refused: {}",
                    ctx()
                );
                assert!(
                    independent_ok,
                    "accepted a load that is not an object with an id: {}",
                    ctx()
                );
            }
            Some((_, Err(PublishError::UnknownEventType(_)))) => {
                assert_eq!(reply.status, 422, "{}", ctx());
                assert_eq!(reply.detail_fields(), ["X-Service-Event"], "{}", ctx());
            }
            Some((_, Err(PublishError::InvalidLoad(_)))) => {
                assert_eq!(reply.status, 422, "{}", ctx());
                assert_eq!(reply.detail_fields(), ["body"], "{}", ctx());
                assert!(
                    !independent_ok,
                    "refused a load that is an object with an id: {}",
                    ctx()
                );
            }
            Some((_, Err(e))) => panic!("validation cannot fail with {e:?}: {}", ctx()),
        }
    }
    if reply.status != 202 {
        assert!(
            world.kv.dump() == before,
            "a refused event changed the store: {}",
            ctx()
        );
        return;
    }
    let Some((event_type, _)) = verdict else {
        return;
    };
    let event_id = reply.body["data"]["eventId"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let stored_id = edgehook_component::model::ids::EventId::trusted(event_id.as_str());
    let stored = world.kv.get(&keys::event_body(&stored_id)).ok().flatten();
    assert_eq!(
        stored.as_deref(),
        Some(load),
        "the stored load differs: {}",
        ctx()
    );

    let listeners: Vec<String> = world
        .model
        .subs
        .iter()
        .filter(|(_, s)| !s.disabled && s.event_types.iter().any(|t| t == event_type))
        .map(|(id, _)| id.clone())
        .collect();
    // Attempt 1 of each ran as the publish was answered; the seeded delivery to globex is
    // not due yet, so nothing else was sent.
    assert_eq!(world.last_sent.len(), listeners.len(), "{}", ctx());
    for (out, _) in &world.last_sent {
        assert!(
            out.body.as_slice() == load,
            "a delivery body is not the published bytes: {}",
            ctx()
        );
    }
    for sub in &listeners {
        let id = delivery_id(&event_id, sub);
        let d = world.operator("GET", &format!("/internal/v1/deliveries/{id}"), b"");
        assert_eq!(d.status, 200, "{}", d.text);
        assert_eq!(d.body["data"]["status"], "succeeded", "{}", d.text);
        assert_eq!(
            d.body["data"]["eventType"].as_str(),
            Some(event_type),
            "{}",
            d.text
        );
    }
}
