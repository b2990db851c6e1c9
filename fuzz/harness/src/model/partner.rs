//! The model of the partner API: creates (and their idempotent replays), lists, reads and
//! deletes.

use super::*;
use crate::check::is_id;
use crate::world::Reply;
use edgehook_component::model::events::EVENT_TYPES;
use edgehook_component::model::http::Request;
use serde_json::Value;

impl Model {
    pub(super) fn on_create(
        &mut self,
        req: &Request,
        reply: &Reply,
        client: &str,
        now: u64,
        faulted: bool,
        what: &dyn Fn() -> String,
    ) {
        let key = first_header(req, "idempotency-key")
            .filter(|k| valid_idempotency_key(k))
            .map(|k| (client.to_owned(), k.to_vec()));
        self.creates_seen += 1;
        let rank = self.creates_seen;
        // A faulted create under this key with another body may have stored its response,
        // still answered: this request is then a conflict.
        let unfinished_other_body = key
            .as_ref()
            .and_then(|k| self.unfinished.get(k))
            .is_some_and(|u| {
                u.iter()
                    .any(|u| now < u.at + IDEMPOTENCY_TTL_MS && u.body != req.body)
            });
        let earlier = key
            .as_ref()
            .and_then(|k| self.creates.get(k))
            .filter(|c| now < c.at + IDEMPOTENCY_TTL_MS)
            .cloned();
        let replayed = reply.header("idempotent-replayed") == Some("true");
        // A request that reached the claim while the key's record had expired replaced it
        // (and, failing, released it): the old response is gone even if the clock later
        // steps back below 24 h. Under a store fault it may or may not have been replaced.
        if let Some(k) = &key {
            let expired = self
                .creates
                .get(k)
                .is_some_and(|c| now >= c.at + IDEMPOTENCY_TTL_MS);
            let reached_claim = reply.status == 201
                || matches!(
                    reply.code(),
                    Some("idempotency_conflict" | "subscription_limit_reached")
                );
            if expired
                && (reached_claim || faulted)
                && let Some(old) = self.creates.remove(k)
                && !reached_claim
            {
                self.maybe_created.insert(k.clone(), old);
            }
        }
        if reply.status != 201 {
            never_replayed(replayed, reply, what);
            let Some(key) = key else { return };
            if let Some(c) = &earlier
                && c.body == req.body
            {
                // 413: the shell cut the body (`@truncated`); 415: not declared JSON.
                assert!(
                    matches!(reply.status, 413 | 415)
                        || (reply.status == 503 && faulted)
                        || (reply.code() == Some("subscription_deleted") && self.deleted(&c.data)),
                    "a retry of a completed create was not replayed: {}",
                    what()
                );
            }
            if reply.code() == Some("subscription_deleted") {
                // Only a create whose subscription was deleted (or a faulted one the model
                // cannot follow) answers this.
                assert!(
                    earlier.as_ref().is_some_and(|c| self.deleted(&c.data))
                        || self.unfinished.contains_key(&key)
                        || self.maybe_created.contains_key(&key),
                    "409 subscription_deleted for a key whose subscription is not deleted: {}",
                    what()
                );
            }
            if reply.code() == Some("idempotency_conflict") {
                let other_body =
                    earlier.as_ref().is_some_and(|c| c.body != req.body) || unfinished_other_body;
                let claim_may_linger = self
                    .create_faults
                    .get(&key)
                    .is_some_and(|at| now < at + STALE_CLAIM_MS);
                assert!(
                    other_body || claim_may_linger,
                    "409 idempotency_conflict without an earlier use of the key: {}",
                    what()
                );
            }
            if faulted {
                self.create_faults.insert(key.clone(), now);
                self.unfinished.entry(key).or_default().push(Unfinished {
                    at: now,
                    body: req.body.clone(),
                    rank,
                });
            }
            return;
        }
        let data = &reply.body["data"];
        let id = data["id"].as_str().unwrap_or("");
        assert!(is_id(id, "sub_"), "created id: {}", what());
        let secret = data["signingSecret"].as_str().unwrap_or("");
        // A replay answers its subscription's secret, or none once a delete erased it.
        let erased = replayed && secret.is_empty();
        assert!(
            (secret.starts_with("whsec_") && secret.len() == 6 + 43) || erased,
            "signing secret shape: {}",
            what()
        );
        assert_eq!(
            reply.header("location"),
            Some(format!("/v1/webhooks/{id}").as_str()),
            "{}",
            what()
        );
        let sent: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let url = data["url"].as_str().unwrap_or("");
        assert_eq!(sent["url"].as_str(), Some(url), "url echoed: {}", what());
        crate::url::check_accepted(
            url,
            edgehook_component::model::validate::TargetPolicy::STRICT,
        );
        let types: Vec<String> = data["eventTypes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        assert!(!types.is_empty(), "no event types: {}", what());
        for (i, t) in types.iter().enumerate() {
            assert!(
                EVENT_TYPES.contains(&t.as_str()),
                "event type {t}: {}",
                what()
            );
            assert!(!types[..i].contains(t), "duplicate event type: {}", what());
        }
        match (&key, earlier) {
            (Some(_), Some(c)) => {
                assert!(replayed, "two creates with one Idempotency-Key: {}", what());
                assert!(
                    c.body == req.body,
                    "a 201 for another body under a used Idempotency-Key: {}",
                    what()
                );
                // The stored response, with the subscription's status as it is now.
                assert_eq!(
                    without_status(&c.data),
                    without_status(data),
                    "a replay answered other data: {}",
                    what()
                );
                let disabled = self.subs.get(id).is_some_and(|s| s.disabled);
                if disabled || !self.maybe_auto_disabled {
                    let expected = if disabled { "disabled" } else { "active" };
                    assert_eq!(data["status"], expected, "{}", what());
                }
            }
            (Some(k), None) if replayed && !self.subs.contains_key(id) => {
                // The response a faulted create stored before its fault (its subscription's
                // `createdAt` is when it ran): the replay finishes that create.
                let at = data["createdAt"].as_u64();
                let made = self.unfinished.remove(k).and_then(|u| {
                    u.into_iter().rev().find(|u| {
                        Some(u.at) == at && u.body == req.body && now < u.at + IDEMPOTENCY_TTL_MS
                    })
                });
                let Some(made) = made else {
                    panic!("a replay of nothing: {}", what());
                };
                self.creates.insert(
                    k.clone(),
                    Created {
                        at: made.at,
                        body: req.body.clone(),
                        data: data.clone(),
                    },
                );
                self.learn(id, client, secret, url, types, made.rank);
                return;
            }
            (Some(k), None) if replayed => {
                // Only a record a faulted request may have left in place can be replayed.
                let old = self.maybe_created.remove(k);
                assert!(
                    old.as_ref().is_some_and(|c| {
                        now < c.at + IDEMPOTENCY_TTL_MS
                            && without_status(&c.data) == without_status(data)
                    }),
                    "a replay of nothing: {}",
                    what()
                );
                if let Some(old) = old {
                    self.creates.insert(k.clone(), old);
                }
            }
            (Some(k), None) => {
                self.maybe_created.remove(k);
                // This request's claim replaced whatever a faulted one left.
                self.unfinished.remove(k);
                self.creates.insert(
                    k.clone(),
                    Created {
                        at: now,
                        body: req.body.clone(),
                        data: data.clone(),
                    },
                );
                self.create_faults.remove(k);
            }
            (None, _) => assert!(!replayed, "a replay without a key: {}", what()),
        }
        if replayed {
            let known = self.subs.get(id);
            assert!(
                known.is_some_and(|s| s.client == client && (s.secret == secret || erased)),
                "a replay answered someone else's subscription: {}",
                what()
            );
            return;
        }
        assert!(
            !self.subs.contains_key(id),
            "a subscription id was reused: {}",
            what()
        );
        self.learn(id, client, secret, url, types, rank);
    }

    /// Learns a subscription made by the create numbered `rank`, in its place in creation
    /// order (a create finished by a later replay made its subscription when it ran).
    pub(super) fn learn(
        &mut self,
        id: &str,
        client: &str,
        secret: &str,
        url: &str,
        event_types: Vec<String>,
        rank: u64,
    ) {
        self.subs.insert(
            id.to_owned(),
            SubInfo {
                client: client.to_owned(),
                secret: secret.to_owned(),
                url: url.to_owned(),
                event_types,
                disabled: false,
                deleted: false,
            },
        );
        let at = self
            .order
            .iter()
            .position(|o| self.ranks.get(o).is_some_and(|r| *r > rank))
            .unwrap_or(self.order.len());
        self.order.insert(at, id.to_owned());
        self.ranks.insert(id.to_owned(), rank);
        self.last_sub = Some(id.to_owned());
    }

    pub(super) fn on_list(&mut self, reply: &Reply, client: &str, what: &dyn Fn() -> String) {
        if reply.status != 200 {
            return;
        }
        let items = reply.body["data"].as_array().cloned().unwrap_or_default();
        assert!(items.len() <= 100, "a page of more than 100: {}", what());
        let mut last_position = None;
        for item in &items {
            let id = item["id"].as_str().unwrap_or("");
            let known = self.subs.get(id);
            assert!(
                known.is_some_and(|s| s.client == client),
                "listed a subscription that is not the caller's: {}",
                what()
            );
            assert!(
                known.is_some_and(|s| !s.disabled),
                "listed a disabled subscription: {}",
                what()
            );
            assert!(
                item.get("signingSecret").is_none(),
                "listed a secret: {}",
                what()
            );
            assert_eq!(item["status"], "active", "{}", what());
            if self.unordered.contains(id) {
                continue;
            }
            let position = self.order.iter().position(|o| o == id);
            assert!(
                position > last_position,
                "list out of creation order: {}",
                what()
            );
            last_position = position;
        }
        let has_more = reply.body["hasMore"].as_bool();
        let cursor = &reply.body["nextCursor"];
        match has_more {
            Some(true) => assert!(
                cursor.as_str().is_some_and(|c| {
                    c.strip_prefix("cur_").is_some_and(|h| {
                        !h.is_empty() && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                    })
                }),
                "hasMore without a cursor: {}",
                what()
            ),
            Some(false) => assert!(cursor.is_null(), "a cursor without more: {}", what()),
            None => panic!("hasMore missing: {}", what()),
        }
    }

    /// `GET /v1/webhooks?status=disabled`: only the caller's, never a deleted one, each
    /// `disabled` (the model may not know of an automatic disable, so an item it believes
    /// active is allowed only if a tick may have disabled it), never a secret.
    pub(super) fn on_list_disabled(&self, reply: &Reply, client: &str, what: &dyn Fn() -> String) {
        if reply.status != 200 {
            return;
        }
        for item in reply.body["data"].as_array().into_iter().flatten() {
            let known = item["id"].as_str().and_then(|id| self.subs.get(id));
            assert!(
                known.is_some_and(|s| s.client == client && !s.deleted),
                "listed as disabled a subscription not its own or deleted: {}",
                what()
            );
            assert!(
                known.is_some_and(|s| s.disabled) || self.maybe_auto_disabled,
                "listed as disabled an active subscription: {}",
                what()
            );
            assert_eq!(item["status"], "disabled", "{}", what());
            assert!(item.get("signingSecret").is_none(), "{}", what());
        }
    }

    /// Whether the subscription a create's `data` names is known to be deleted.
    fn deleted(&self, data: &Value) -> bool {
        data["id"]
            .as_str()
            .and_then(|id| self.subs.get(id))
            .is_some_and(|s| s.deleted)
    }

    /// `GET /v1/webhooks/{id}`: the owner reads its subscription, active or disabled, but
    /// not once deleted.
    pub(super) fn on_read(
        &self,
        reply: &Reply,
        client: &str,
        id: &str,
        faulted: bool,
        what: &dyn Fn() -> String,
    ) {
        let known = self.subs.get(id);
        let readable = known.is_some_and(|s| s.client == client && !s.deleted);
        if reply.status == 200 {
            assert!(
                readable,
                "read a subscription not its own or deleted: {}",
                what()
            );
            assert_eq!(reply.body["data"]["id"].as_str(), Some(id), "{}", what());
            assert!(
                reply.body["data"].get("signingSecret").is_none(),
                "{}",
                what()
            );
            if known.is_some_and(|s| s.disabled) {
                assert_eq!(reply.body["data"]["status"], "disabled", "{}", what());
            }
        } else if readable && !faulted {
            panic!("an own subscription could not be read: {}", what());
        }
    }

    /// `DELETE /v1/webhooks/{id}`: the owner deletes its subscription, active or disabled,
    /// once.
    pub(super) fn on_delete(
        &self,
        reply: &Reply,
        client: &str,
        id: &str,
        faulted: bool,
        what: &dyn Fn() -> String,
    ) {
        let known = self.subs.get(id);
        let own_active = known.is_some_and(|s| s.client == client && !s.disabled);
        if reply.status == 200 {
            assert!(
                known.is_some_and(|s| s.client == client && !s.deleted),
                "deleted a subscription not its own or deleted: {}",
                what()
            );
            assert_eq!(reply.body["data"]["id"].as_str(), Some(id), "{}", what());
            assert!(
                reply.body["data"].get("signingSecret").is_none(),
                "{}",
                what()
            );
        } else if own_active && !self.maybe_auto_disabled && !faulted {
            panic!(
                "an own active subscription could not be reached: {}",
                what()
            );
        }
    }
}

/// A create's `data` without its `status` (a replay shows the status as it is now).
fn without_status(data: &Value) -> Value {
    let mut data = data.clone();
    if let Some(o) = data.as_object_mut() {
        o.remove("status");
    }
    data
}
