//! API keys as stored (`apikey:{hash}`): never the key itself, only its hash, its id, its
//! client, its scope and when it was issued, last used and revoked.

use edgehook_storage::codec::{Reader, Writer};
use edgehook_storage::ids::{ApiKeyId, ClientId};

/// What a key may do. Stored as one byte (see [`Scope::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything on its client's partner API (`/v1/...`): every key before scopes.
    Partner,
    /// Only `GET` on its client's partner API.
    PartnerRead,
    /// Only event ingest (`POST /internal/v1/events`); belongs to no client.
    Ingest,
    /// A portal link's one-time token: exchanged once, within 15 minutes of its issue, for a
    /// [`Scope::PortalSession`]; authenticates no request itself.
    PortalLink,
    /// A partner's portal session (at most 12 hours from its issue): the partner API with
    /// its client's rights, presented only as the `edgehook_session` cookie, every call
    /// but a `GET` with its CSRF token.
    PortalSession,
}

/// Every scope, in the order of their stored bytes.
const SCOPES: [Scope; 5] = [
    Scope::Partner,
    Scope::PartnerRead,
    Scope::Ingest,
    Scope::PortalLink,
    Scope::PortalSession,
];

impl Scope {
    /// The scope's name in the API (`partner`, `partner_read`, `ingest`).
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Partner => "partner",
            Scope::PartnerRead => "partner_read",
            Scope::Ingest => "ingest",
            Scope::PortalLink => "portal_link",
            Scope::PortalSession => "portal_session",
        }
    }

    /// The scope named `name` in the API, if there is one.
    pub fn parse(name: &str) -> Option<Scope> {
        SCOPES.into_iter().find(|s| s.as_str() == name)
    }

    /// Its stored byte: its place in [`SCOPES`].
    fn code(self) -> u8 {
        self as u8
    }

    /// The scope of a stored byte; `None` for one no release wrote.
    fn from_code(code: u8) -> Option<Scope> {
        SCOPES.get(usize::from(code)).copied()
    }
}

/// The stored record of an API key (the key itself is never stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// The key's id (`key_...`), safe to show and log.
    pub id: ApiKeyId,
    /// The client the key acts for; empty for an ingest key, which acts for none.
    pub client_id: ClientId,
    /// Hex SHA-256 of the key.
    pub hash: String,
    /// When it was issued (ms since the epoch).
    pub created_at: u64,
    /// When it was revoked, if it was.
    pub revoked_at: Option<u64>,
    /// What it may do (format 0xA1, before scopes, reads as [`Scope::Partner`]).
    pub scope: Scope,
    /// When it last authenticated a request, to the granularity the API layer keeps it
    /// (written at most once per interval); `None` if never (or not since format 0xA2).
    pub last_used_at: Option<u64>,
}

/// First byte of an API key record ([`ApiKeyRecord::encode`]): its format's version.
const API_KEY_V2: u8 = 0xA2;
/// The format before scopes and last use, still read (as scope `partner`, never used).
const API_KEY_V1: u8 = 0xA1;

impl ApiKeyRecord {
    /// The stored record: `API_KEY_V2` (0xA2), then every field in declaration order, the
    /// scope as one byte (see [`edgehook_storage::codec`]). Every partner request reads one.
    /// 0xA1, still read, is the same without the last two fields.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(API_KEY_V2, 128);
        w.str(&self.id)
            .str(&self.client_id)
            .str(&self.hash)
            .u64(self.created_at)
            .opt(self.revoked_at, Writer::u64)
            .u8(self.scope.code())
            .opt(self.last_used_at, Writer::u64);
        w.finish()
    }

    /// Whether a stored record is of format 0xA1, written before scopes (and before the
    /// per-client key index: such a key is listed once a use rewrites its record).
    pub fn predates_scopes(bytes: &[u8]) -> bool {
        matches!(bytes.first(), Some(&API_KEY_V1))
    }

    /// Reads a stored record ([`ApiKeyRecord::encode`], or format 0xA1); `None` if damaged.
    pub fn decode(bytes: &[u8]) -> Option<ApiKeyRecord> {
        let (mut r, v2) = match Reader::new(bytes, API_KEY_V2) {
            Some(r) => (r, true),
            None => (Reader::new(bytes, API_KEY_V1)?, false),
        };
        let mut record = ApiKeyRecord {
            id: r.id()?,
            client_id: r.id()?,
            hash: r.str()?,
            created_at: r.u64()?,
            revoked_at: r.opt(Reader::u64)?,
            scope: Scope::Partner,
            last_used_at: None,
        };
        if v2 {
            record.scope = Scope::from_code(r.u8()?)?;
            record.last_used_at = r.opt(Reader::u64)?;
        }
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
            scope: Scope::PartnerRead,
            last_used_at: Some(1_767_225_650_000),
        }
    }

    #[test]
    fn a_key_record_reads_back_and_damage_is_refused() {
        let record = sample();
        let bytes = record.encode();
        assert_eq!(bytes[0], API_KEY_V2);
        assert_eq!(ApiKeyRecord::decode(&bytes), Some(record.clone()));
        edgehook_storage::codec::assert_only_whole_records_read(&bytes, |b| {
            ApiKeyRecord::decode(b).is_some()
        });
        for scope in [Scope::Partner, Scope::PartnerRead, Scope::Ingest] {
            let live = ApiKeyRecord {
                revoked_at: None,
                last_used_at: None,
                scope,
                client_id: ClientId::default(),
                ..record.clone()
            };
            assert_eq!(ApiKeyRecord::decode(&live.encode()), Some(live));
        }
        // A scope byte no release wrote is damage.
        let mut unknown = bytes.clone();
        let at = unknown.len() - 10; // the scope byte, before `Some` + 8 bytes of last use
        assert_eq!(unknown[at], 1);
        unknown[at] = SCOPES.len() as u8;
        assert_eq!(ApiKeyRecord::decode(&unknown), None);
    }

    /// Keys issued before scopes (format 0xA1) keep working: they read as scope `partner`,
    /// never used, everything else as it was.
    #[test]
    fn a_key_record_of_format_a1_reads_as_a_partner_key() {
        let record = sample();
        let mut w = Writer::new(API_KEY_V1, 128);
        w.str(&record.id)
            .str(&record.client_id)
            .str(&record.hash)
            .u64(record.created_at)
            .opt(record.revoked_at, Writer::u64);
        let old = w.finish();
        assert!(ApiKeyRecord::predates_scopes(&old));
        assert!(!ApiKeyRecord::predates_scopes(&record.encode()));
        let read = ApiKeyRecord::decode(&old).expect("0xA1 still reads");
        assert_eq!(
            read,
            ApiKeyRecord {
                scope: Scope::Partner,
                last_used_at: None,
                ..record
            }
        );
        edgehook_storage::codec::assert_only_whole_records_read(&old, |b| {
            ApiKeyRecord::decode(b).is_some()
        });
        // 0xA1 with 0xA2's trailing fields is damage, not a longer 0xA1.
        let mut longer = old.clone();
        longer.extend_from_slice(&[0, 0]);
        assert_eq!(ApiKeyRecord::decode(&longer), None);
    }

    #[test]
    fn scopes_have_one_name_each() {
        for (code, scope) in SCOPES.into_iter().enumerate() {
            assert_eq!(Scope::parse(scope.as_str()), Some(scope));
            assert_eq!(Scope::from_code(scope.code()), Some(scope));
            assert_eq!(usize::from(scope.code()), code, "stored bytes never change");
        }
        assert_eq!(Scope::Ingest.code(), 2);
        assert_eq!(Scope::PortalSession.code(), 4);
        assert_eq!(Scope::parse("admin"), None);
        assert_eq!(Scope::parse("Partner"), None);
        assert_eq!(Scope::from_code(5), None);
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
