//! API keys: issued by the operator for a client id (or, ingest keys, for no client), each
//! with a [`Scope`], shown once, stored only as SHA-256 hashes, listed per client, revocable.
//! Requests authenticate with `Authorization: Bearer <key>`; a key's last use is kept to the
//! hour ([`LAST_USED_GRANULARITY_MS`]).

use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::http::Request;
use edgehook_model::ids::{ApiKeyId, ClientId, Generate};
pub use edgehook_records::api_key::{ApiKeyRecord, Scope};
use edgehook_storage::applog::AppendLog;
use edgehook_storage::keys;
use edgehook_storage::kv::{Kv, Update, update};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Prefix of every API key, so leaked keys are easy to recognise and scan for.
pub const KEY_PREFIX: &str = "ehk_";

/// A key's `lastUsedAt` is written at most once per this interval (an hour): it is the time
/// of a request in the hour after it, at most an hour old while the key is in use. A busy
/// key costs one compare-and-swap an hour, not a store write per request.
pub const LAST_USED_GRANULARITY_MS: u64 = 3_600_000;

/// The bearer token of a request, if it sent a well-formed `Authorization: Bearer ...`.
pub fn bearer(req: &Request) -> Option<&str> {
    let value = req.header_str("authorization")?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Hex SHA-256 of a string.
pub fn sha256_hex(s: &str) -> String {
    edgehook_model::ids::hex(&Sha256::digest(s.as_bytes()))
}

/// Whether a presented secret equals the expected one, in constant time. Both are hashed
/// with SHA-256 first and the digests compared with `subtle`, so the time taken depends on
/// neither the contents nor the lengths (a plain `ct_eq` of slices returns at once when the
/// lengths differ). Every comparison of a token, key or key hash goes through here.
pub fn secret_eq(given: &str, expected: &str) -> bool {
    let given = Sha256::digest(given.as_bytes());
    let expected = Sha256::digest(expected.as_bytes());
    bool::from(given.as_slice().ct_eq(expected.as_slice()))
}

/// The index of the keys of `client_id` (an empty client id: the ingest keys').
fn index(client_id: &ClientId) -> AppendLog {
    if client_id.is_empty() {
        AppendLog::new(keys::INGEST_KEYS)
    } else {
        AppendLog::new(keys::client_keys(client_id))
    }
}

/// Issues a new key of `scope` for `client_id` (empty for an ingest key, which acts for no
/// client). Returns the record and the key, which is shown once.
pub fn issue<K: Kv>(
    env: &Env<'_, K>,
    client_id: &ClientId,
    scope: Scope,
) -> Result<(ApiKeyRecord, String), ApiError> {
    if client_id.is_empty() != (scope == Scope::Ingest) {
        return Err(ApiError::internal(
            "an ingest key has no client, others one",
        ));
    }
    let mut key = String::from(KEY_PREFIX);
    edgehook_model::ids::push_base64url(&mut key, &env.random_bytes::<32>());
    let record = ApiKeyRecord {
        id: ApiKeyId::generate(env.entropy),
        client_id: client_id.to_owned(),
        hash: sha256_hex(&key),
        created_at: env.now_ms,
        revoked_at: None,
        scope,
        last_used_at: None,
    };
    // The index entry first, so every usable key is listed (an entry whose record was never
    // written is skipped); then the id pointer: a key whose record write fails is never
    // usable, and a dangling pointer to a missing record revokes nothing. Until this returns
    // nobody holds the key.
    index(client_id).append(env.kv, &[record.hash.as_bytes()])?;
    env.kv
        .set(&keys::api_key_id(&record.id), record.hash.as_bytes())?;
    env.kv.set(&keys::api_key(&record.hash), &record.encode())?;
    Ok((record, key))
}

/// One page of the keys of `client_id` (empty: the ingest keys), in the order they were
/// issued, revoked ones included: at most `limit` after entry `after`, whether there are
/// more, and the number of the page's last entry (the cursor).
pub fn list<K: Kv>(
    env: &Env<'_, K>,
    client_id: &ClientId,
    after: u64,
    limit: usize,
) -> Result<(Vec<ApiKeyRecord>, bool, Option<u64>), ApiError> {
    let mut entries = index(client_id).read_bytes(env.kv, after, limit + 1)?;
    let has_more = entries.len() > limit;
    entries.truncate(limit);
    let hashes = entries
        .iter()
        .map(|e| std::str::from_utf8(&e.item).map(keys::api_key))
        .collect::<Result<Vec<_>, _>>()
        .map_err(ApiError::internal)?;
    let mut records = Vec::with_capacity(hashes.len());
    for bytes in env.kv.get_many(&hashes)?.into_iter().flatten() {
        let record = ApiKeyRecord::decode(&bytes)
            .ok_or_else(|| ApiError::internal("corrupt API key record"))?;
        if record.client_id == client_id {
            records.push(record);
        }
    }
    Ok((records, has_more, entries.last().map(|e| e.seq)))
}

/// Revokes key `key_id` of `client_id`. 404 when there is no such live key for that client.
pub fn revoke<K: Kv>(
    env: &Env<'_, K>,
    client_id: &ClientId,
    key_id: &ApiKeyId,
) -> Result<ApiKeyRecord, ApiError> {
    let not_found = || ApiError::not_found("API key");
    let hash = env
        .kv
        .get(&keys::api_key_id(key_id))?
        .ok_or_else(not_found)?;
    let hash = String::from_utf8(hash).map_err(ApiError::internal)?;
    let now = env.now_ms;
    let record = update(env.kv, &keys::api_key(&hash), &mut |current| {
        let mut record = current
            .and_then(ApiKeyRecord::decode)
            .ok_or_else(not_found)?;
        if record.client_id != client_id || record.revoked_at.is_some() {
            return Err(not_found());
        }
        record.revoked_at = Some(now);
        Ok(Update::Write(record.encode(), record))
    })?;
    Ok(record)
}

/// Authenticates a request made with an API key (`Authorization: Bearer`), or, without
/// one, with a portal session (the `edgehook_session` cookie; every method but `GET` and
/// `HEAD` with its CSRF token, [`check_csrf`]); returns the key's record (its
/// client and scope: what it may do is the router's to decide). Missing, malformed,
/// unknown, revoked and expired keys are all the same 401, and so is a session presented as
/// a bearer key or a key as a cookie. Records the key's use (see
/// [`LAST_USED_GRANULARITY_MS`]).
pub fn authenticate<K: Kv>(env: &Env<'_, K>, req: &Request) -> Result<ApiKeyRecord, ApiError> {
    let (token, cookie) = match bearer(req) {
        Some(token) => (token, false),
        None => (
            session_cookie(req).ok_or_else(ApiError::unauthorized)?,
            true,
        ),
    };
    let record = find(env, token)?;
    let session = record.scope == Scope::PortalSession;
    if session != cookie
        || record.scope == Scope::PortalLink
        || (session && expired(&record, env.now_ms))
    {
        return Err(ApiError::unauthorized());
    }
    if cookie {
        check_csrf(req, token)?;
    }
    touch(env, &record);
    Ok(record)
}

/// The live (unrevoked) record of key `token`, whatever its scope; 401 for any other.
pub fn find<K: Kv>(env: &Env<'_, K>, token: &str) -> Result<ApiKeyRecord, ApiError> {
    if !token.starts_with(KEY_PREFIX) || token.len() > 128 {
        return Err(ApiError::unauthorized());
    }
    let hash = sha256_hex(token);
    let Some(bytes) = env.kv.get(&keys::api_key(&hash))? else {
        return Err(ApiError::unauthorized());
    };
    let record =
        ApiKeyRecord::decode(&bytes).ok_or_else(|| ApiError::internal("corrupt API key record"))?;
    if !secret_eq(&hash, &record.hash) || record.revoked_at.is_some() {
        return Err(ApiError::unauthorized());
    }
    Ok(record)
}

/// Whether a key last used at `last` is due for a new `lastUsedAt` at `now`.
fn stale(last: Option<u64>, now: u64) -> bool {
    last.is_none_or(|t| now >= t.saturating_add(LAST_USED_GRANULARITY_MS))
}

/// Records a key's use at `env.now_ms`, if its `lastUsedAt` is an interval old: a
/// compare-and-swap that never writes a revoked key and never moves the time back. A key
/// issued before scopes (format 0xA1, in no index) is added to its client's index by the
/// request whose write converts its record, so it is listed from its first use on. Best
/// effort: a failure (the store, a lost race) never fails the request.
fn touch<K: Kv>(env: &Env<'_, K>, record: &ApiKeyRecord) {
    let now = env.now_ms;
    if !stale(record.last_used_at, now) {
        return;
    }
    let converted = update(env.kv, &keys::api_key(&record.hash), &mut |current| {
        let old = current.is_some_and(ApiKeyRecord::predates_scopes);
        match current.and_then(ApiKeyRecord::decode) {
            Some(mut r) if r.revoked_at.is_none() && stale(r.last_used_at, now) => {
                r.last_used_at = Some(now);
                Ok::<_, ()>(Update::Write(r.encode(), old))
            }
            _ => Ok(Update::Keep(false)),
        }
    });
    if matches!(converted, Ok(true)) && !record.client_id.is_empty() {
        let listed = index(&record.client_id).append(env.kv, &[record.hash.as_bytes()]);
        env.best_effort("list a converted key (client key index)", listed);
    }
}

// Portal links and sessions (`crate::portal`): their lifetimes, the cookie, the CSRF token.

/// How long a link's token can be exchanged: 15 minutes from its issue.
pub const LINK_TTL_MS: u64 = 15 * 60 * 1000;
/// How long a session lasts: 12 hours from its issue (not extended by use).
pub const SESSION_TTL_MS: u64 = 12 * 3600 * 1000;
/// The session cookie's name.
pub const COOKIE: &str = "edgehook_session";
/// The session cookie's `Max-Age`: [`SESSION_TTL_MS`] in seconds.
pub(crate) const SESSION_MAX_AGE: &str = "43200";

/// When a link or session issued at `created_at` stops working.
pub(crate) fn expiry(record: &ApiKeyRecord) -> u64 {
    let ttl = match record.scope {
        Scope::PortalLink => LINK_TTL_MS,
        _ => SESSION_TTL_MS,
    };
    record.created_at.saturating_add(ttl)
}

/// Whether a link or session is past its lifetime at `now`.
pub(crate) fn expired(record: &ApiKeyRecord, now: u64) -> bool {
    now >= expiry(record)
}

/// The session token the request's `Cookie` headers carry, if any.
pub(crate) fn session_cookie(req: &Request) -> Option<&str> {
    for (name, value) in &req.headers {
        let (true, Ok(value)) = (name == "cookie", std::str::from_utf8(value)) else {
            continue;
        };
        for pair in value.split(';') {
            if let Some(token) = pair.trim().strip_prefix("edgehook_session=")
                && !token.is_empty()
            {
                return Some(token);
            }
        }
    }
    None
}

/// The CSRF token of session `token`: a hash of it under its own label, so only who
/// holds the session (the server, and the page it gave the token to) knows it.
pub(crate) fn csrf_token(token: &str) -> String {
    sha256_hex(&format!("edgehook-csrf:{token}"))
}

/// A call made with the session cookie: `GET` and `HEAD` pass; anything else needs the
/// session's CSRF token in `X-CSRF-Token`, else 403 `csrf_failed`.
pub(crate) fn check_csrf(req: &Request, token: &str) -> Result<(), ApiError> {
    if matches!(req.method.as_str(), "GET" | "HEAD") {
        return Ok(());
    }
    match req.header_str("x-csrf-token") {
        Some(given) if secret_eq(given, &csrf_token(token)) => Ok(()),
        _ => Err(ApiError::new(
            403,
            "csrf_failed",
            "A call with the portal's session cookie needs its CSRF token in X-CSRF-Token.",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parsing() {
        let r = |v: &str| Request::new("GET", "/").header("Authorization", v);
        assert_eq!(bearer(&r("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&r("bearer abc")), Some("abc"));
        assert_eq!(bearer(&r("Basic abc")), None);
        assert_eq!(bearer(&r("Bearer ")), None);
        assert_eq!(bearer(&r("Bearer")), None);
        assert_eq!(bearer(&Request::new("GET", "/")), None);
    }

    #[test]
    fn secret_eq_compares_whole_values_of_any_length() {
        assert!(secret_eq("eha_token", "eha_token"));
        assert!(!secret_eq("eha_token", "eha_tokeN"));
        assert!(!secret_eq("eha_toke", "eha_token"), "a prefix is not equal");
        assert!(!secret_eq("eha_token!", "eha_token"));
        assert!(!secret_eq("", "eha_token"));
        assert!(secret_eq("", ""));
    }

    fn test_env<'a>(
        kv: &'a edgehook_storage::kv::MemoryKv,
        settings: &'a edgehook_model::config::Settings,
        entropy: &'a edgehook_model::env::SeededEntropy,
    ) -> Env<'a, edgehook_storage::kv::MemoryKv> {
        Env::new(1_767_225_600_000, kv, settings, entropy)
    }

    /// The client a request authenticates as.
    fn client(
        env: &Env<'_, edgehook_storage::kv::MemoryKv>,
        req: &Request,
    ) -> Result<String, ApiError> {
        authenticate(env, req).map(|r| r.client_id.into_string())
    }

    fn with_key(token: &str) -> Request {
        Request::new("GET", "/v1/webhooks").header("authorization", &format!("Bearer {token}"))
    }

    /// Stores a live key record for `token`, as `issue` would, whatever the token looks like.
    fn store_key(kv: &edgehook_storage::kv::MemoryKv, token: &str, client_id: &str) {
        let record = ApiKeyRecord {
            id: "key_0123456789abcdef01234567".into(),
            client_id: client_id.into(),
            hash: sha256_hex(token),
            created_at: 1,
            revoked_at: None,
            scope: Scope::Partner,
            last_used_at: None,
        };
        kv.set(&keys::api_key(&record.hash), &record.encode())
            .expect("set");
    }

    /// DESIGN §3: keys are shown once and stored only as SHA-256 hashes: the store holds the
    /// hash (under the key's hash and its id), never the key; the key is `ehk_` and 32 random
    /// bytes in base64url, and it authenticates as its client.
    #[test]
    fn an_issued_key_is_stored_only_as_its_sha256_hash_and_authenticates_its_client() {
        use edgehook_model::config::Settings;
        use edgehook_model::env::SeededEntropy;
        use edgehook_storage::kv::MemoryKv;
        let (kv, settings, entropy) = (MemoryKv::new(), Settings::default(), SeededEntropy::new(4));
        let env = test_env(&kv, &settings, &entropy);
        let (record, key) = issue(&env, &ClientId::from("acme"), Scope::Partner).expect("issued");
        assert!(key.starts_with(KEY_PREFIX));
        assert_eq!(
            key.len(),
            KEY_PREFIX.len() + 43,
            "32 bytes of base64url: {key}"
        );
        assert_eq!(record.hash, sha256_hex(&key));
        assert_eq!(record.hash.len(), 64);
        assert_eq!(
            (record.client_id.as_str(), record.revoked_at),
            ("acme", None)
        );
        assert_eq!(record.created_at, env.now_ms);
        let dump = kv.dump();
        assert!(
            dump.values()
                .all(|v| !String::from_utf8_lossy(v).contains(&key)),
            "the key itself is never stored"
        );
        assert_eq!(
            dump.get(keys::api_key_id(&record.id).as_str())
                .map(Vec::as_slice),
            Some(record.hash.as_bytes())
        );
        assert_eq!(
            dump.get(keys::api_key(&record.hash).as_str())
                .and_then(|b| ApiKeyRecord::decode(b)),
            Some(record.clone())
        );
        assert_eq!(client(&env, &with_key(&key)), Ok("acme".to_owned()));
        let (_, second) = issue(&env, &ClientId::from("acme"), Scope::Partner).expect("issued");
        assert_ne!(second, key, "every key is new");
    }

    /// DESIGN §3 and SPEC §5.1: missing, malformed, unknown, over-long and revoked keys are
    /// all the same 401; a key must carry the `ehk_` prefix even if a record for it existed.
    #[test]
    fn missing_malformed_unknown_overlong_and_revoked_keys_are_the_same_401() {
        use edgehook_model::config::Settings;
        use edgehook_model::env::SeededEntropy;
        use edgehook_storage::kv::MemoryKv;
        let (kv, settings, entropy) = (MemoryKv::new(), Settings::default(), SeededEntropy::new(5));
        let env = test_env(&kv, &settings, &entropy);
        // Records for tokens `authenticate` must refuse before looking them up.
        let unprefixed = "abc_0123456789";
        store_key(&kv, unprefixed, "acme");
        let longest = format!("{KEY_PREFIX}{}", "a".repeat(128 - KEY_PREFIX.len()));
        store_key(&kv, &longest, "acme");
        let too_long = format!("{longest}a");
        store_key(&kv, &too_long, "acme");
        assert_eq!(client(&env, &with_key(&longest)), Ok("acme".to_owned()));
        let unauthorized = |req: &Request| {
            let e = authenticate(&env, req).expect_err("refused");
            assert_eq!((e.status, e.code), (401, "unauthorized"));
        };
        unauthorized(&Request::new("GET", "/v1/webhooks"));
        unauthorized(&Request::new("GET", "/v1/webhooks").header("authorization", "Basic ehk_x"));
        unauthorized(&with_key(unprefixed));
        unauthorized(&with_key(&too_long));
        unauthorized(&with_key("ehk_unknown"));
        // A record under the key's hash that names another hash is not that key's.
        let mismatched = "ehk_mismatched";
        let record = ApiKeyRecord {
            id: "key_0123456789abcdef01234568".into(),
            client_id: "acme".into(),
            hash: sha256_hex("ehk_other"),
            created_at: 1,
            revoked_at: None,
            scope: Scope::Partner,
            last_used_at: None,
        };
        kv.set(&keys::api_key(&sha256_hex(mismatched)), &record.encode())
            .expect("set");
        unauthorized(&with_key(mismatched));
        let (key_record, key) =
            issue(&env, &ClientId::from("acme"), Scope::Partner).expect("issued");
        revoke(&env, &ClientId::from("acme"), &key_record.id).expect("revoked");
        unauthorized(&with_key(&key));
    }

    /// DESIGN §3 (revocable keys): only the key's own client revokes it, once; a key id that
    /// is malformed, unknown or another client's is a 404, and the key keeps working.
    #[test]
    fn a_key_is_revoked_once_and_only_by_its_own_client() {
        use edgehook_model::config::Settings;
        use edgehook_model::env::SeededEntropy;
        use edgehook_storage::kv::MemoryKv;
        let (kv, settings, entropy) = (MemoryKv::new(), Settings::default(), SeededEntropy::new(6));
        let env = test_env(&kv, &settings, &entropy);
        let (record, key) = issue(&env, &ClientId::from("acme"), Scope::Partner).expect("issued");
        let status = |r: Result<ApiKeyRecord, ApiError>| r.map_err(|e| e.status).map(|_| ());
        assert_eq!(
            status(revoke(&env, &ClientId::from("globex"), &record.id)),
            Err(404)
        );
        let acme = ClientId::from("acme");
        let unknown = ApiKeyId::from("key_0123456789abcdef01234567");
        assert_eq!(status(revoke(&env, &acme, &unknown)), Err(404));
        // An id that is not a key id never gets near a store key: the edge parses it
        // (`crate::ctx::api_key_id`, a 404).
        for not_a_key_id in ["key_nope", "sub_0123456789abcdef01234567"] {
            assert_eq!(ApiKeyId::parse(not_a_key_id), None, "{not_a_key_id}");
        }
        assert_eq!(client(&env, &with_key(&key)), Ok("acme".to_owned()));
        let revoked = revoke(&env, &ClientId::from("acme"), &record.id).expect("its own client");
        assert_eq!(revoked.revoked_at, Some(env.now_ms));
        assert_eq!(
            status(revoke(&env, &ClientId::from("acme"), &record.id)),
            Err(404),
            "once"
        );
        assert!(authenticate(&env, &with_key(&key)).is_err());
    }

    /// A key's use is recorded by compare-and-swap at most once an interval (a
    /// request within the hour costs the one read it always did), never on a revoked key,
    /// and a store failing that write fails nothing.
    #[test]
    fn last_use_is_written_at_most_once_an_hour_and_never_fails_a_request() {
        use edgehook_model::config::Settings;
        use edgehook_model::env::SeededEntropy;
        use edgehook_storage::kv::MemoryKv;
        let (kv, settings, entropy) = (MemoryKv::new(), Settings::default(), SeededEntropy::new(7));
        let t = 1_767_225_600_000;
        let at = |ms: u64| Env::new(ms, &kv, &settings, &entropy);
        let (record, key) =
            issue(&at(t), &ClientId::from("acme"), Scope::PartnerRead).expect("issued");
        let stored = || {
            ApiKeyRecord::decode(&kv.dump()[keys::api_key(&record.hash).as_str()]).expect("record")
        };
        assert_eq!(stored().last_used_at, None);
        let used = authenticate(&at(t + 5), &with_key(&key)).expect("authenticates");
        assert_eq!(
            (used.scope, used.client_id.as_str()),
            (Scope::PartnerRead, "acme")
        );
        assert_eq!(stored().last_used_at, Some(t + 5));
        let (ops, cas) = (kv.ops(), kv.cas_begun());
        authenticate(&at(t + 5 + LAST_USED_GRANULARITY_MS - 1), &with_key(&key)).expect("ok");
        assert_eq!(
            (kv.ops(), kv.cas_begun()),
            (ops + 1, cas),
            "one read, no write"
        );
        assert_eq!(stored().last_used_at, Some(t + 5));
        let next = t + 5 + LAST_USED_GRANULARITY_MS;
        authenticate(&at(next), &with_key(&key)).expect("ok");
        assert_eq!(stored().last_used_at, Some(next));
        // The write fails (the operation after the read): the request does not.
        let later = next + 3 * LAST_USED_GRANULARITY_MS;
        kv.fail_at(Some(2));
        assert!(authenticate(&at(later), &with_key(&key)).is_ok());
        kv.fail_at(None);
        assert_eq!(stored().last_used_at, Some(next));
        // A clock that went back never moves the time back.
        authenticate(&at(t), &with_key(&key)).expect("ok");
        assert_eq!(stored().last_used_at, Some(next));
        revoke(&at(later), &ClientId::from("acme"), &record.id).expect("revoked");
        assert!(authenticate(&at(later + LAST_USED_GRANULARITY_MS), &with_key(&key)).is_err());
        assert_eq!(stored().last_used_at, Some(next));
        assert_eq!(stored().revoked_at, Some(later));
    }

    /// A client's keys are listed in the order issued, revoked ones included,
    /// and only its own; ingest keys (no client) are a list of their own; pages follow the
    /// index numbers.
    #[test]
    fn keys_are_listed_per_client_and_ingest_keys_apart() {
        use edgehook_model::config::Settings;
        use edgehook_model::env::SeededEntropy;
        use edgehook_storage::kv::MemoryKv;
        let (kv, settings, entropy) = (MemoryKv::new(), Settings::default(), SeededEntropy::new(8));
        let env = test_env(&kv, &settings, &entropy);
        let (a, _) = issue(&env, &ClientId::from("acme"), Scope::Partner).expect("issued");
        let (g, _) = issue(&env, &ClientId::from("globex"), Scope::Partner).expect("issued");
        let (b, _) = issue(&env, &ClientId::from("acme"), Scope::PartnerRead).expect("issued");
        let (i, _) = issue(&env, &ClientId::from(""), Scope::Ingest).expect("issued");
        assert!(
            issue(&env, &ClientId::from(""), Scope::Partner).is_err(),
            "a partner key has a client"
        );
        assert!(
            issue(&env, &ClientId::from("acme"), Scope::Ingest).is_err(),
            "an ingest key has none"
        );
        revoke(&env, &ClientId::from("acme"), &a.id).expect("revoked");
        let ids = |client: &str, after: u64, limit: usize| {
            let (records, more, last) =
                list(&env, &ClientId::from(client), after, limit).expect("listed");
            let ids: Vec<ApiKeyId> = records.into_iter().map(|r| r.id).collect();
            (ids, more, last)
        };
        assert_eq!(
            ids("acme", 0, 10),
            (vec![a.id.clone(), b.id.clone()], false, Some(2))
        );
        assert_eq!(ids("acme", 0, 1), (vec![a.id.clone()], true, Some(1)));
        assert_eq!(ids("acme", 1, 1), (vec![b.id.clone()], false, Some(2)));
        assert_eq!(ids("globex", 0, 10), (vec![g.id], false, Some(1)));
        assert_eq!(ids("", 0, 10), (vec![i.id.clone()], false, Some(1)));
        assert_eq!(ids("initech", 0, 10), (vec![], false, None));
        let (records, _, _) = list(&env, &ClientId::from("acme"), 0, 10).expect("listed");
        assert_eq!(records[0].revoked_at, Some(env.now_ms));
        assert_eq!(records[1].scope, Scope::PartnerRead);
        // An ingest key is revoked as no client's.
        assert!(revoke(&env, &ClientId::from("acme"), &i.id).is_err());
        revoke(&env, &ClientId::from(""), &i.id).expect("revoked");
    }
}
