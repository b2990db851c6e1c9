//! API keys: issued by the operator for a client id, shown once, stored only as SHA-256
//! hashes, revocable. Partner requests authenticate with `Authorization: Bearer <key>`.

use crate::codec::{Reader, Writer};
use crate::env::Env;
use crate::error::ApiError;
use crate::http::Request;
use crate::ids::IdKind;
use crate::keys;
use crate::kv::{Kv, Update, update};
use crate::operator::bearer;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Prefix of every API key, so leaked keys are easy to recognise and scan for.
pub const KEY_PREFIX: &str = "ehk_";

/// The stored record of an API key (the key itself is never stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// The key's id (`key_...`), safe to show and log.
    pub id: String,
    /// The client the key acts for.
    pub client_id: String,
    /// Hex SHA-256 of the key.
    pub hash: String,
    /// When it was issued (ms since the epoch).
    pub created_at: u64,
    /// When it was revoked, if it was.
    pub revoked_at: Option<u64>,
}

/// First byte of an API key record ([`ApiKeyRecord::encode`]): its format's version.
const API_KEY_V1: u8 = 0xA1;

impl ApiKeyRecord {
    /// The stored record: `API_KEY_V1`, then every field in declaration order (see
    /// [`crate::codec`]). Every partner request reads one.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(API_KEY_V1, 128);
        w.str(&self.id)
            .str(&self.client_id)
            .str(&self.hash)
            .u64(self.created_at)
            .opt(self.revoked_at, Writer::u64);
        w.finish()
    }

    /// Reads a stored record ([`ApiKeyRecord::encode`]); `None` if damaged.
    pub fn decode(bytes: &[u8]) -> Option<ApiKeyRecord> {
        let mut r = Reader::new(bytes, API_KEY_V1)?;
        let record = ApiKeyRecord {
            id: r.str()?,
            client_id: r.str()?,
            hash: r.str()?,
            created_at: r.u64()?,
            revoked_at: r.opt(Reader::u64)?,
        };
        r.end()?;
        Some(record)
    }
}

/// Hex SHA-256 of a string.
pub fn sha256_hex(s: &str) -> String {
    crate::ids::hex(&Sha256::digest(s.as_bytes()))
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
    let key = format!(
        "{KEY_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(env.random_bytes::<32>())
    );
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

    fn sample() -> ApiKeyRecord {
        ApiKeyRecord {
            id: "key_0123456789abcdef01234567".into(),
            client_id: "acme.eu-1".into(),
            hash: "cd".repeat(32),
            created_at: 1_767_225_600_000,
            revoked_at: Some(1_767_225_700_000),
        }
    }

    #[test]
    fn a_key_record_reads_back_and_damage_is_refused() {
        let record = sample();
        let bytes = record.encode();
        assert_eq!(bytes[0], API_KEY_V1);
        assert_eq!(ApiKeyRecord::decode(&bytes), Some(record.clone()));
        crate::codec::assert_only_whole_records_read(&bytes, |b| ApiKeyRecord::decode(b).is_some());
        let live = ApiKeyRecord {
            revoked_at: None,
            ..record
        };
        assert_eq!(ApiKeyRecord::decode(&live.encode()), Some(live));
    }

    /// Only the binary format is read: a record in another format (the JSON no release
    /// wrote) is damage, and its key authenticates nothing.
    #[test]
    fn a_key_record_in_another_format_is_not_read() {
        let json = format!(
            r#"{{"id":"key_0123456789abcdef01234567","clientId":"acme.eu-1","hash":"{}","createdAt":1767225600000,"revokedAt":null}}"#,
            "cd".repeat(32)
        );
        assert_eq!(ApiKeyRecord::decode(json.as_bytes()), None);
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
}
