//! A client's notification endpoint as stored (`notify:{endpoint id}`): where the client's
//! notices go (`subscription.disabled`, `subscription.enabled`, `secret.rotation_ending`)
//! and the secret they are signed with, plain or sealed ([`Secret`]) for that key.

use crate::secret::Secret;
use edgehook_storage::codec::{Reader, Writer};
use edgehook_storage::ids::{ClientId, SubscriptionId};
use sha2::{Digest, Sha256};

/// First byte of a notification endpoint record ([`NotificationEndpoint::encode`]).
pub const NOTIFY_V1: u8 = 0xF1;

/// A client's notification endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationEndpoint {
    /// Whose it is.
    pub client_id: ClientId,
    /// Where notices are sent (checked as a subscription's URL is).
    pub url: String,
    /// The secret notices are signed with (its own, no subscription's).
    pub secret: Secret,
    /// When it was registered (ms since the epoch).
    pub created_at: u64,
    /// When its URL was last set.
    pub updated_at: u64,
}

/// The id a client's notices are delivered under (their delivery records name it as their
/// subscription): `sub_` and 24 hex digits of a digest of the client id, so the client's
/// endpoint is found from either. No subscription has it: those ids are random.
pub fn endpoint_id(client_id: &ClientId) -> SubscriptionId {
    let digest = Sha256::new()
        .chain_update("notify/")
        .chain_update(client_id.as_bytes())
        .finalize();
    let mut id = String::from("sub_");
    edgehook_model::ids::push_hex(&mut id, &digest[..12]);
    SubscriptionId::trusted(id)
}

impl NotificationEndpoint {
    /// The stored record: [`NOTIFY_V1`], then every field in declaration order.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(NOTIFY_V1, 64 + self.url.len());
        w.str(&self.client_id).str(&self.url);
        self.secret.write(&mut w);
        w.u64(self.created_at).u64(self.updated_at);
        w.finish()
    }

    /// Reads what [`NotificationEndpoint::encode`] wrote; `None` for anything else.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut r = Reader::new(bytes, NOTIFY_V1)?;
        let endpoint = NotificationEndpoint {
            client_id: r.id()?,
            url: r.str()?,
            secret: Secret::read(&mut r)?,
            created_at: r.u64()?,
            updated_at: r.u64()?,
        };
        r.end()?;
        Some(endpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_reads_back_as_written_and_nothing_else_does() {
        let endpoint = NotificationEndpoint {
            client_id: ClientId::from("acme"),
            url: "https://ops.acme.example/notices".to_owned(),
            secret: Secret::generate([7; 32]),
            created_at: 1,
            updated_at: 2,
        };
        let bytes = endpoint.encode();
        assert_eq!(NotificationEndpoint::decode(&bytes), Some(endpoint));
        assert_eq!(
            NotificationEndpoint::decode(&bytes[..bytes.len() - 1]),
            None
        );
        let mut other = bytes.clone();
        other[0] = 0xB5;
        assert_eq!(NotificationEndpoint::decode(&other), None);
    }

    #[test]
    fn each_client_has_its_own_well_formed_endpoint_id() {
        let acme = endpoint_id(&ClientId::from("acme"));
        assert!(edgehook_storage::ids::IdKind::Subscription.matches(&acme));
        assert_eq!(acme, endpoint_id(&ClientId::from("acme")));
        assert_ne!(acme, endpoint_id(&ClientId::from("acme2")));
    }
}
