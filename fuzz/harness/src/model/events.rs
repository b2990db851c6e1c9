//! The model of events and deliveries: ingest (and its idempotent replays) and every request
//! the core sends.

use super::*;
use crate::check::is_id;
use crate::world::Reply;
use edgehook_component::delivery::{Outgoing, SendResult};
use edgehook_component::model::events::EVENT_TYPES;
use edgehook_component::model::http::Request;

impl Model {
    pub(super) fn on_ingest(
        &mut self,
        req: &Request,
        reply: &Reply,
        now: u64,
        faulted: bool,
        what: &dyn Fn() -> String,
    ) {
        let event_type = first_header(req, "x-service-event").unwrap_or(b"").to_vec();
        let key = first_header(req, "idempotency-key").map(<[u8]>::to_vec);
        let replayed = reply.header("idempotent-replayed") == Some("true");
        if !reply.ok() {
            never_replayed(replayed, reply, what);
            let Some(key) = key else { return };
            if reply.code() == Some("idempotency_conflict") {
                let other = self
                    .ingests
                    .get(&key)
                    .is_some_and(|i| i.event_type != event_type || i.body != req.body);
                assert!(
                    other || self.ingest_faults.contains(&key),
                    "409 on ingest without an earlier use of the key: {}",
                    what()
                );
            }
            if faulted {
                // The event may have been stored before the fault: a retry is a replay.
                self.ingest_faults.insert(key);
            }
            return;
        }
        let data = &reply.body["data"];
        let event_id = data["eventId"].as_str().unwrap_or("").to_owned();
        assert!(is_id(&event_id, "evt_"), "event id: {}", what());
        assert_eq!(
            data["eventType"].as_str().map(str::as_bytes),
            Some(event_type.as_slice()),
            "{}",
            what()
        );
        match &key {
            None => assert!(!replayed, "a replay without a key: {}", what()),
            Some(key) => {
                let earlier = self
                    .ingests
                    .get(key)
                    .filter(|i| now < i.at + IDEMPOTENCY_TTL_MS)
                    .cloned();
                // Without an earlier 202 within 24 h a replay is still possible: the key
                // may name an older event (kept until retention), or one whose ingest
                // failed half-way under a fault.
                assert!(
                    !replayed || self.ingests.contains_key(key) || self.ingest_faults.contains(key),
                    "a replay of an event never ingested: {}",
                    what()
                );
                if let Some(i) = &earlier {
                    assert!(
                        i.event_type == event_type && i.body == req.body,
                        "202 for another event under a used Idempotency-Key: {}",
                        what()
                    );
                    assert_eq!(
                        i.event_id,
                        event_id,
                        "a replay answered another event: {}",
                        what()
                    );
                    assert!(replayed, "a repeated ingest was not a replay: {}", what());
                }
                self.ingests.insert(
                    key.clone(),
                    Ingested {
                        at: earlier.map_or(now, |i| i.at),
                        event_type: event_type.clone(),
                        body: req.body.clone(),
                        event_id: event_id.clone(),
                    },
                );
            }
        }
        let deliveries = data["deliveries"].as_u64().unwrap_or(u64::MAX);
        if !replayed && !self.maybe_auto_disabled {
            let listening = self
                .subs
                .values()
                .filter(|s| !s.disabled && s.event_types.iter().any(|t| t.as_bytes() == event_type))
                .count() as u64;
            assert_eq!(
                deliveries,
                listening,
                "deliveries of a new event: {}",
                what()
            );
        }
        self.bodies.insert(req.body.clone());
        self.last_event = Some(event_id);
    }

    pub(super) fn check_delivery(
        &mut self,
        out: &Outgoing,
        result: &SendResult,
        now: u64,
        what: &dyn Fn() -> String,
    ) {
        let header = |name: &str| {
            out.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(out.scheme, "https", "a delivery not over https: {}", what());
        assert!(
            self.bodies.contains(out.body.as_slice()),
            "a delivery body that was never published (or was re-serialized): {}",
            what()
        );
        assert_eq!(
            header("content-type"),
            Some("application/json"),
            "{}",
            what()
        );
        let event = header("x-service-event").unwrap_or("");
        assert!(
            EVENT_TYPES.contains(&event),
            "X-Service-Event {event:?}: {}",
            what()
        );
        assert!(
            header("x-service-delivery-id").is_some_and(|d| is_id(d, "dlv_")),
            "X-Service-Delivery-Id: {}",
            what()
        );
        let timestamp = header("x-service-timestamp").unwrap_or("");
        assert_eq!(
            timestamp,
            (now / 1000).to_string(),
            "X-Service-Timestamp: {}",
            what()
        );
        let signature = header("x-service-signature").unwrap_or("");
        let signer = self
            .subs
            .iter()
            .find(|(_, s)| hmac_hex(&s.secret, timestamp, &out.body) == signature);
        let Some((id, sub)) = signer else {
            panic!(
                "a delivery whose signature no subscription's secret verifies: {}",
                what()
            );
        };
        assert!(
            !sub.disabled,
            "a delivery to disabled subscription {id}: {}",
            what()
        );
        assert!(
            sub.event_types.iter().any(|t| t == event),
            "{id} got an event type it did not subscribe to: {}",
            what()
        );
        if !matches!(result.outcome, Ok(200..=299)) {
            self.maybe_auto_disabled = true;
        }
    }
}
