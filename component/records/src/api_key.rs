//! API keys as stored (`apikey:{hash}`): never the key itself, only its hash, its id, its
//! client and when it was issued and revoked.

use edgehook_storage::codec::{Reader, Writer};

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
    /// [`edgehook_storage::codec`]). Every partner request reads one.
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
        edgehook_storage::codec::assert_only_whole_records_read(&bytes, |b| {
            ApiKeyRecord::decode(b).is_some()
        });
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
}
