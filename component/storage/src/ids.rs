//! Typed identifiers: each kind of id a type of its own, from the edge where it is parsed (a
//! path segment, a request body, a stored record) to the store key built from it, so a
//! delivery id is never passed where a subscription id is wanted.
//!
//! Prefixed ids ([`SubscriptionId`] `sub_`, [`DeliveryId`] `dlv_`, [`EventId`] `evt_`,
//! [`ApiKeyId`] `key_`, [`ReplayJobId`] `rpl_`, and a request's `req_`) are the prefix and 24
//! lower-case hex digits ([`IdKind`]); a [`ClientId`] is the operator's name for a partner.
//! An id from outside is made only by `parse`, which checks its exact shape; an id the
//! component made (or read from its own record) by `trusted`.

use std::fmt;

/// The kinds of prefixed identifier the service hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// A subscription (`sub_`).
    Subscription,
    /// A delivery: one event to one subscription (`dlv_`).
    Delivery,
    /// A published event (`evt_`).
    Event,
    /// An API request (`req_`).
    Request,
    /// An API key (`key_`).
    ApiKey,
    /// A replay job (`rpl_`).
    Replay,
}

/// Random (or digest) bytes in a prefixed id: 96 bits, written as 24 hex digits.
pub const ID_BYTES: usize = 12;

impl IdKind {
    /// The id prefix, underscore included.
    pub const fn prefix(self) -> &'static str {
        match self {
            IdKind::Subscription => "sub_",
            IdKind::Delivery => "dlv_",
            IdKind::Event => "evt_",
            IdKind::Request => "req_",
            IdKind::ApiKey => "key_",
            IdKind::Replay => "rpl_",
        }
    }

    /// Whether `s` has the exact shape of an id of this kind. Anything else (a path segment
    /// from a request, say) is rejected before it gets near a store key.
    pub fn matches(self, s: &str) -> bool {
        s.strip_prefix(self.prefix()).is_some_and(|rest| {
            rest.len() == ID_BYTES * 2
                && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
    }
}

/// What every typed id is: text its maker trusts, wrapped (records read back by the codec).
pub trait TypedId: Sized {
    /// The id of `s`, trusted as the component wrote it.
    fn from_trusted(s: String) -> Self;
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $check:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(String);

        impl $name {
            /// An id from outside: `None` unless it has this kind's exact shape.
            pub fn parse(s: &str) -> Option<Self> {
                let check: fn(&str) -> bool = $check;
                check(s).then(|| Self(s.to_owned()))
            }

            /// An id the component made, or read back from a record it wrote.
            pub fn trusted(s: impl Into<String>) -> Self {
                Self(s.into())
            }

            /// The id's text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id's text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl TypedId for $name {
            fn from_trusted(s: String) -> Self {
                Self(s)
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<[u8]> for $name {
            fn as_ref(&self) -> &[u8] {
                self.0.as_bytes()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<&$name> for $name {
            fn eq(&self, other: &&$name) -> bool {
                self.0 == other.0
            }
        }

        impl PartialEq<$name> for &$name {
            fn eq(&self, other: &$name) -> bool {
                self.0 == other.0
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        /// For tests: an id from any text (`"sub_...".into()`). Never in a shipped build,
        /// where ids from outside are parsed.
        #[cfg(any(test, feature = "testing"))]
        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }

        #[cfg(any(test, feature = "testing"))]
        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
    };
}

id_type!(
    /// A subscription's id (`sub_...`).
    SubscriptionId,
    |s| IdKind::Subscription.matches(s)
);
id_type!(
    /// A delivery's id (`dlv_...`), derived from its event and subscription.
    DeliveryId,
    |s| IdKind::Delivery.matches(s)
);
id_type!(
    /// A published event's id (`evt_...`).
    EventId,
    |s| IdKind::Event.matches(s)
);
id_type!(
    /// An API key's id (`key_...`), what lists and revocation name it by.
    ApiKeyId,
    |s| IdKind::ApiKey.matches(s)
);
id_type!(
    /// A replay job's id (`rpl_...`).
    ReplayJobId,
    |s| IdKind::Replay.matches(s)
);
id_type!(
    /// A client (a partner): the operator's name for it, 1 to 64 of `A-Z a-z 0-9 _ . -`.
    /// The ingest keys' client is the empty id, which `parse` never gives.
    ClientId,
    |s| {
        (1..=64).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    }
);

impl ClientId {
    /// No client: the ingest keys' (which act for none), and the operator's.
    pub const NONE: ClientId = ClientId(String::new());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind parses its own shape only: the prefix, then exactly 24 lower-case hex
    /// digits; a client id its own characters and length.
    #[test]
    fn ids_parse_only_their_own_shape() {
        let hex = "0123456789abcdef01234567";
        assert!(SubscriptionId::parse(&format!("sub_{hex}")).is_some());
        assert!(DeliveryId::parse(&format!("dlv_{hex}")).is_some());
        assert!(EventId::parse(&format!("evt_{hex}")).is_some());
        assert!(ApiKeyId::parse(&format!("key_{hex}")).is_some());
        assert!(ReplayJobId::parse(&format!("rpl_{hex}")).is_some());
        for bad in [
            format!("dlv_{hex}"),
            format!("sub_{}", &hex[1..]),
            format!("sub_{hex}0"),
            format!("sub_{}", hex.to_uppercase()),
            format!("SUB_{hex}"),
            format!("sub_{}/", &hex[1..]),
            String::new(),
        ] {
            assert!(SubscriptionId::parse(&bad).is_none(), "{bad}");
        }
        for ok in ["a", "acme", "Acme_EU-1.prod", "acme-co.eu_1"] {
            assert!(ClientId::parse(ok).is_some(), "{ok}");
        }
        for bad in ["", "acme co", "acme/x", "acme:1", &"a".repeat(65), "café"] {
            assert!(ClientId::parse(bad).is_none(), "{bad:?}");
        }
        assert!(ClientId::parse(&"a".repeat(64)).is_some());
    }
}
