//! `Idempotency-Key` on create: a retry with the same key and the same body gets the stored
//! response again (same id, same secret); the same key with another body is a 409; two
//! concurrent requests with one key never both create.
//!
//! Records are per client, keyed by the SHA-256 of the key, and answered for 24 hours. A
//! claim (`pending`) is taken by compare-and-swap before anything is created; a claim left
//! behind by a failed request can be taken over after [`STALE_CLAIM_MS`]. A request that
//! fails before its response is stored gives its claim up ([`release`]: `released`, by
//! compare-and-swap against the claim it wrote, so never a response stored or another
//! request's claim); once the response is stored the key answers with it, whatever fails
//! after.
//!
//! A record never holds the signing secret: it keeps the response's status, `Location` and
//! subscription id, and a replay writes the body from the subscription record, the one
//! place the secret is stored. Every claimed
//! record is listed in the retention log of its day, and the tick deletes it with that day's
//! events once it has expired ([`edgehook_records::idempotency::purge`]), so records do not pile up.

use crate::auth::sha256_hex;
use edgehook_model::env::Env;
use edgehook_model::error::{ApiError, FieldError};
use edgehook_model::ids::ClientId;
pub use edgehook_records::idempotency::{Record, State, StoredResponse, TTL_MS};
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, KvError, Update, update};
use edgehook_storage::retention;

/// How long an unfinished claim blocks other requests with the same key.
pub const STALE_CLAIM_MS: u64 = 60 * 1000;
/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

/// How a request with an idempotency key proceeds.
#[derive(Debug)]
pub enum Start {
    /// First use: the claim is ours; run the request, then [`finish`].
    Fresh(Claim),
    /// A finished request with the same key and body: answer with its response.
    Replay(StoredResponse),
}

/// A claim on a key, held while the request runs.
#[derive(Debug, Clone)]
pub struct Claim {
    key: Key,
    record: Record,
}

/// The 422 for a malformed `Idempotency-Key` header.
pub fn invalid_key() -> ApiError {
    ApiError::validation(vec![FieldError::new(
        "Idempotency-Key",
        "invalid_idempotency_key",
        format!("Idempotency-Key must be 1 to {MAX_KEY_LEN} printable ASCII characters"),
    )])
}

/// Checks the header value: 1 to 255 printable ASCII characters.
pub fn check_key(key: &str) -> Result<(), ApiError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || !key.bytes().all(|b| (0x20..0x7f).contains(&b))
    {
        return Err(invalid_key());
    }
    Ok(())
}

/// Claims `key` for this request, or finds the earlier request's outcome.
pub fn begin<K: Kv>(
    env: &Env<'_, K>,
    client_id: &ClientId,
    key: &str,
    fingerprint: &str,
) -> Result<Start, ApiError> {
    check_key(key)?;
    let store_key = keys::idempotency(client_id, &sha256_hex(key));
    let now = env.now_ms;
    let fresh = Record {
        state: State::Pending,
        fingerprint: fingerprint.to_owned(),
        created_at: now,
        response: None,
        claim: Some(edgehook_model::ids::hex(&env.random_bytes::<8>())),
    };
    let start = update(env.kv, &store_key, &mut |current| {
        let existing: Option<Record> = current.and_then(Record::decode);
        let reusable = match &existing {
            None => true,
            Some(r) if now >= r.created_at + TTL_MS => true,
            Some(r) if r.state == State::Released => true,
            Some(r) => r.state == State::Pending && now >= r.created_at + STALE_CLAIM_MS,
        };
        if reusable {
            let json = serde_json::to_vec(&fresh).map_err(ApiError::internal)?;
            return Ok(Update::Write(
                json,
                Start::Fresh(Claim {
                    key: store_key.clone(),
                    record: fresh.clone(),
                }),
            ));
        }
        let existing = existing.ok_or_else(|| ApiError::internal("unreachable"))?;
        if existing.fingerprint != fingerprint {
            return Err(ApiError::idempotency_conflict(
                "This Idempotency-Key was already used with a different request. Use a new key \
                 for a new request.",
            ));
        }
        match (existing.state, existing.response) {
            (State::Done, Some(resp)) => Ok(Update::Keep(Start::Replay(resp))),
            _ => Err(ApiError::idempotency_conflict(
                "A request with this Idempotency-Key is still in progress. Retry shortly.",
            )),
        }
    })
    .map_err(ApiError::from)?;
    if let Start::Fresh(claim) = &start {
        // Listed for the purge before anything is created; a claim that cannot be listed is
        // given up, so the retry is not blocked by it.
        if let Err(e) = retention::retain(env.kv, now, store_key.as_str(), None) {
            release(env, claim);
            return Err(e.into());
        }
    }
    Ok(start)
}

/// Stores the response of a claimed request so retries replay it.
pub fn finish<K: Kv>(
    env: &Env<'_, K>,
    claim: &Claim,
    response: StoredResponse,
) -> Result<(), ApiError> {
    let mut record = claim.record.clone();
    record.state = State::Done;
    record.response = Some(response);
    let json = serde_json::to_vec(&record).map_err(ApiError::internal)?;
    let ours = claim.record.clone();
    update(env.kv, &claim.key, &mut |current| {
        let current: Option<Record> = current.and_then(Record::decode);
        if current.as_ref() != Some(&ours) {
            return Err(ApiError::idempotency_conflict(
                "The Idempotency-Key claim was lost while the request ran. Retry.",
            ));
        }
        Ok(Update::Write(json.clone(), ()))
    })
    .map_err(ApiError::from)
}

/// Gives the claim up after a failure, so a retry need not wait for it to go stale: marks
/// it `released` by compare-and-swap, only while the record is still the very claim this
/// request wrote. Anything else is left alone: a stored response ([`finish`] may have
/// applied though the store reported an error, and deleting it would let a retry create a
/// second subscription), or the claim of another request that took the key over once ours
/// went stale. Best effort: if this fails too, the claim goes stale after
/// [`STALE_CLAIM_MS`].
pub fn release<K: Kv>(env: &Env<'_, K>, claim: &Claim) {
    let mut released = claim.record.clone();
    released.state = State::Released;
    let Ok(json) = serde_json::to_vec(&released) else {
        return;
    };
    let ours = &claim.record;
    let released = update(env.kv, &claim.key, &mut |current| {
        let current: Option<Record> = current.and_then(Record::decode);
        if current.as_ref() != Some(ours) {
            return Ok::<_, KvError>(Update::Keep(()));
        }
        Ok(Update::Write(json.clone(), ()))
    });
    env.best_effort(
        "release a claim (idempotency record)",
        released.map_err(KvError::from),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgehook_model::config::Settings;
    use edgehook_model::env::SeededEntropy;
    use edgehook_records::idempotency::purge;
    use edgehook_storage::kv::MemoryKv;

    #[test]
    fn a_request_slower_than_the_stale_claim_takeover_never_releases_the_new_claim() {
        // A claims the key and runs longer than STALE_CLAIM_MS; B takes the stale claim
        // over. A then fails: its release must leave B's claim alone, or B's response
        // cannot be stored and a third request with the key creates again.
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(1));
        let env = |now_ms| Env::new(now_ms, &kv, &settings, &entropy);
        let t0 = 1_767_225_600_000;
        let fresh = |start| match start {
            Ok(Start::Fresh(claim)) => claim,
            other => panic!("not a fresh claim: {other:?}"),
        };
        let a = fresh(begin(&env(t0), &ClientId::from("acme"), "k", "f"));
        let b = fresh(begin(
            &env(t0 + STALE_CLAIM_MS + 1_000),
            &ClientId::from("acme"),
            "k",
            "f",
        ));
        release(&env(t0 + STALE_CLAIM_MS + 2_000), &a);
        let response = StoredResponse {
            status: 201,
            location: Some("/v1/webhooks/sub_b".into()),
            subscription_id: "sub_b".into(),
            created: None,
        };
        finish(&env(t0 + STALE_CLAIM_MS + 3_000), &b, response.clone())
            .expect("B's claim is still B's");
        match begin(
            &env(t0 + STALE_CLAIM_MS + 4_000),
            &ClientId::from("acme"),
            "k",
            "f",
        ) {
            Ok(Start::Replay(stored)) => assert_eq!(stored, response),
            other => panic!("not B's response: {other:?}"),
        }
        // Released while still its own claim, the key is free at once.
        let c = fresh(begin(&env(t0), &ClientId::from("acme"), "k2", "f"));
        release(&env(t0 + 1), &c);
        fresh(begin(
            &env(t0 + 2),
            &ClientId::from("acme"),
            "k2",
            "other body",
        ));
    }

    #[test]
    fn a_record_of_an_earlier_version_with_a_copy_of_the_body_still_reads() {
        // Earlier versions kept the 201's `data` (the signing secret included); it is
        // ignored now, and the replay writes its body from the subscription record.
        let old = br#"{"state":"done","fingerprint":"f","createdAt":1,"response":{"status":201,
            "data":{"id":"sub_1","signingSecret":"whsec_x"},"location":"/v1/webhooks/sub_1",
            "subscriptionId":"sub_1"}}"#;
        let record = Record::decode(old).expect("reads");
        assert_eq!(record.state, State::Done);
        let response = record.response.expect("response");
        assert_eq!(
            (response.status, response.subscription_id.as_str()),
            (201, "sub_1")
        );
    }

    fn response(id: &str) -> StoredResponse {
        StoredResponse {
            status: 201,
            location: Some(format!("/v1/webhooks/{id}")),
            subscription_id: id.into(),
            created: None,
        }
    }

    /// What `begin` answers, in short: "fresh", "replay <id>", or the error's status and code.
    fn outcome(start: Result<Start, ApiError>) -> String {
        match start {
            Ok(Start::Fresh(_)) => "fresh".into(),
            Ok(Start::Replay(r)) => format!("replay {}", r.subscription_id),
            Err(e) => format!("{} {}", e.status, e.code),
        }
    }

    /// DESIGN §3: `Idempotency-Key` is 1 to 255 printable ASCII characters; anything else is
    /// a 422 naming the header.
    #[test]
    fn an_idempotency_key_is_1_to_255_printable_ascii_characters() {
        for ok in ["a", " ", "~", "order-17 retry#2", &"k".repeat(255)] {
            assert_eq!(check_key(ok), Ok(()), "{ok:?}");
        }
        for bad in [
            "",
            &"k".repeat(256),
            "tab\there",
            "del\u{7f}",
            "caf\u{e9}",
            "nl\n",
        ] {
            let e = check_key(bad).expect_err(bad);
            assert_eq!((e.status, e.code), (422, "validation_failed"), "{bad:?}");
            assert_eq!(e.details[0].field, "Idempotency-Key");
        }
    }

    /// DESIGN §3: same key and same body within 24 hours: the stored response (a replay);
    /// another body: 409; from 24 hours on, the key is free again. A key is per client.
    #[test]
    fn a_key_replays_its_response_for_24_hours_and_conflicts_on_another_body() {
        const DAY_MS: u64 = 86_400_000;
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(2));
        let env = |now_ms| Env::new(now_ms, &kv, &settings, &entropy);
        let t0 = 1_767_225_600_000;
        let Ok(Start::Fresh(claim)) = begin(&env(t0), &ClientId::from("acme"), "k", "f") else {
            panic!("a fresh claim");
        };
        finish(&env(t0 + 10), &claim, response("sub_1")).expect("stored");
        assert_eq!(
            outcome(begin(&env(t0 + 20), &ClientId::from("acme"), "k", "f")),
            "replay sub_1"
        );
        assert_eq!(
            outcome(begin(
                &env(t0 + DAY_MS - 1),
                &ClientId::from("acme"),
                "k",
                "f"
            )),
            "replay sub_1",
            "kept 24 hours"
        );
        assert_eq!(
            outcome(begin(
                &env(t0 + 20),
                &ClientId::from("acme"),
                "k",
                "other body"
            )),
            "409 idempotency_conflict"
        );
        assert_eq!(
            outcome(begin(
                &env(t0 + 20),
                &ClientId::from("globex"),
                "k",
                "other body"
            )),
            "fresh",
            "keys are per client"
        );
        assert_eq!(
            outcome(begin(
                &env(t0 + DAY_MS),
                &ClientId::from("acme"),
                "k",
                "other body"
            )),
            "fresh",
            "after 24 hours the key is free"
        );
    }

    /// DESIGN §3: two concurrent requests with one key never both create: while the first
    /// runs, the second is a 409 (whatever its body); a claim left by a request that died is
    /// taken over once it is a minute old ([`STALE_CLAIM_MS`]).
    #[test]
    fn a_claim_in_progress_blocks_the_key_until_it_goes_stale() {
        const MINUTE_MS: u64 = 60_000;
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(3));
        let env = |now_ms| Env::new(now_ms, &kv, &settings, &entropy);
        let t0 = 1_767_225_600_000;
        assert_eq!(
            outcome(begin(&env(t0), &ClientId::from("acme"), "k", "f")),
            "fresh"
        );
        for (at, body) in [(t0 + 1, "f"), (t0 + MINUTE_MS - 1, "f"), (t0 + 1, "g")] {
            assert_eq!(
                outcome(begin(&env(at), &ClientId::from("acme"), "k", body)),
                "409 idempotency_conflict",
                "{at} {body}"
            );
        }
        let Ok(Start::Fresh(second)) =
            begin(&env(t0 + MINUTE_MS), &ClientId::from("acme"), "k", "f")
        else {
            panic!("a stale claim is taken over");
        };
        finish(&env(t0 + MINUTE_MS + 1), &second, response("sub_2")).expect("stored");
        assert_eq!(
            outcome(begin(
                &env(t0 + MINUTE_MS + 2),
                &ClientId::from("acme"),
                "k",
                "f"
            )),
            "replay sub_2"
        );
    }

    /// A request whose claim was taken over cannot store its response (409), and does not
    /// overwrite the response stored by the request that took it over.
    #[test]
    fn a_claim_lost_while_its_request_ran_cannot_store_a_response() {
        const MINUTE_MS: u64 = 60_000;
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(4));
        let env = |now_ms| Env::new(now_ms, &kv, &settings, &entropy);
        let t0 = 1_767_225_600_000;
        let fresh = |start| match start {
            Ok(Start::Fresh(claim)) => claim,
            other => panic!("not a fresh claim: {other:?}"),
        };
        let a = fresh(begin(&env(t0), &ClientId::from("acme"), "k", "f"));
        let b = fresh(begin(
            &env(t0 + MINUTE_MS),
            &ClientId::from("acme"),
            "k",
            "f",
        ));
        finish(&env(t0 + MINUTE_MS + 1), &b, response("sub_b")).expect("B's claim");
        let e = finish(&env(t0 + MINUTE_MS + 2), &a, response("sub_a")).expect_err("lost");
        assert_eq!((e.status, e.code), (409, "idempotency_conflict"));
        assert_eq!(
            outcome(begin(
                &env(t0 + MINUTE_MS + 3),
                &ClientId::from("acme"),
                "k",
                "f"
            )),
            "replay sub_b"
        );
    }

    /// DESIGN §3 (kept 24 h): the purge deletes a record from 24 hours after its first use,
    /// and an unreadable one at once; a record still in its 24 hours, or none, is left alone.
    #[test]
    fn the_purge_deletes_records_from_24_hours_on_and_damaged_ones_at_once() {
        let kv = MemoryKv::new();
        let (settings, entropy) = (Settings::default(), SeededEntropy::new(5));
        let env = |now_ms| Env::new(now_ms, &kv, &settings, &entropy);
        let t0 = 1_767_225_600_000;
        assert!(matches!(
            begin(&env(t0), &ClientId::from("acme"), "k", "f"),
            Ok(Start::Fresh(_))
        ));
        let store_key = keys::idempotency(&ClientId::from("acme"), &sha256_hex("k"));
        assert!(kv.get(&store_key).expect("get").is_some());
        purge(&kv, t0 + 86_400_000 - 1, &store_key).expect("purge");
        assert!(
            kv.get(&store_key).expect("get").is_some(),
            "still in its 24 hours"
        );
        purge(&kv, t0 + 86_400_000, &store_key).expect("purge");
        assert!(kv.get(&store_key).expect("get").is_none(), "expired");
        purge(&kv, t0, &store_key).expect("nothing to purge is fine");
        kv.set(&store_key, b"not json").expect("set");
        purge(&kv, t0, &store_key).expect("purge");
        assert!(kv.get(&store_key).expect("get").is_none(), "damaged");
    }
}
