//! API keys: issued by the operator for a client id, shown once, stored only as SHA-256
//! hashes, revocable. Partner requests authenticate with `Authorization: Bearer <key>`.

use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::http::Request;
use edgehook_model::ids::IdKind;
pub use edgehook_records::api_key::ApiKeyRecord;
use edgehook_storage::keys;
use edgehook_storage::kv::{Kv, Update, update};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Prefix of every API key, so leaked keys are easy to recognise and scan for.
pub const KEY_PREFIX: &str = "ehk_";

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

/// Whether a client id is acceptable: 1 to 64 of `A-Z a-z 0-9 _ . -`.
pub fn valid_client_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Issues a new key for `client_id`. Returns the record and the key, which is shown once.
pub fn issue<K: Kv>(env: &Env<'_, K>, client_id: &str) -> Result<(ApiKeyRecord, String), ApiError> {
    let mut key = String::from(KEY_PREFIX);
    edgehook_model::ids::push_base64url(&mut key, &env.random_bytes::<32>());
    let record = ApiKeyRecord {
        id: IdKind::ApiKey.generate(env.entropy),
        client_id: client_id.to_owned(),
        hash: sha256_hex(&key),
        created_at: env.now_ms,
        revoked_at: None,
    };
    // The id pointer first: a key whose record write fails is never usable, and a dangling
    // pointer to a missing record revokes nothing.
    env.kv
        .set(&keys::api_key_id(&record.id), record.hash.as_bytes())?;
    env.kv.set(&keys::api_key(&record.hash), &record.encode())?;
    Ok((record, key))
}

/// Revokes key `key_id` of `client_id`. 404 when there is no such live key for that client.
pub fn revoke<K: Kv>(
    env: &Env<'_, K>,
    client_id: &str,
    key_id: &str,
) -> Result<ApiKeyRecord, ApiError> {
    let not_found = || ApiError::not_found("API key");
    if !IdKind::ApiKey.matches(key_id) {
        return Err(not_found());
    }
    let hash = env
        .kv
        .get(&keys::api_key_id(key_id))?
        .ok_or_else(not_found)?;
    let hash = String::from_utf8(hash).map_err(ApiError::internal)?;
    let now = env.now_ms;
    let record = update(env.kv, &keys::api_key(&hash), |current| {
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

/// Authenticates a partner request; returns the client id. Missing, malformed, unknown and
/// revoked keys are all the same 401.
pub fn authenticate<K: Kv>(env: &Env<'_, K>, req: &Request) -> Result<String, ApiError> {
    let token = bearer(req).ok_or_else(ApiError::unauthorized)?;
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
    Ok(record.client_id)
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
        let (record, key) = issue(&env, "acme").expect("issued");
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
        assert_eq!(authenticate(&env, &with_key(&key)), Ok("acme".to_owned()));
        let (_, second) = issue(&env, "acme").expect("issued");
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
        assert_eq!(
            authenticate(&env, &with_key(&longest)),
            Ok("acme".to_owned())
        );
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
        };
        kv.set(&keys::api_key(&sha256_hex(mismatched)), &record.encode())
            .expect("set");
        unauthorized(&with_key(mismatched));
        let (key_record, key) = issue(&env, "acme").expect("issued");
        revoke(&env, "acme", &key_record.id).expect("revoked");
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
        let (record, key) = issue(&env, "acme").expect("issued");
        let status = |r: Result<ApiKeyRecord, ApiError>| r.map_err(|e| e.status).map(|_| ());
        assert_eq!(status(revoke(&env, "globex", &record.id)), Err(404));
        assert_eq!(status(revoke(&env, "acme", "key_nope")), Err(404));
        assert_eq!(
            status(revoke(&env, "acme", "key_0123456789abcdef01234567")),
            Err(404)
        );
        // A pointer whose id is not a key id is not followed.
        kv.set(
            &keys::api_key_id("sub_0123456789abcdef01234567"),
            record.hash.as_bytes(),
        )
        .expect("set");
        assert_eq!(
            status(revoke(&env, "acme", "sub_0123456789abcdef01234567")),
            Err(404)
        );
        assert_eq!(authenticate(&env, &with_key(&key)), Ok("acme".to_owned()));
        let revoked = revoke(&env, "acme", &record.id).expect("its own client");
        assert_eq!(revoked.revoked_at, Some(env.now_ms));
        assert_eq!(status(revoke(&env, "acme", &record.id)), Err(404), "once");
        assert!(authenticate(&env, &with_key(&key)).is_err());
    }

    /// Client ids: 1 to 64 of `A-Z a-z 0-9 _ . -`.
    #[test]
    fn client_ids_are_1_to_64_letters_digits_underscores_dots_or_dashes() {
        for ok in ["a", "acme", "Acme_EU-1.prod", &"x".repeat(64)] {
            assert!(valid_client_id(ok), "{ok}");
        }
        for bad in ["", &"x".repeat(65), "acme corp", "acme/1", "acme:1", "café"] {
            assert!(!valid_client_id(bad), "{bad}");
        }
    }
}
