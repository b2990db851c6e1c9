//! A signing secret as a record holds it: plain, in a store without a sealing key, or sealed
//! under the operator's key ([`edgehook_model::seal`]), bound to the record's store key.
//!
//! A sealed secret stays sealed in the decoded record, and a record written back keeps its
//! sealed bytes as they are: only the attempt that signs (and the few places that show a
//! secret once) opens it. Reading and writing subscriptions never pays for the cipher.

use edgehook_model::seal::{NONCE_LEN, SealKeys};
use edgehook_storage::codec::{Reader, Writer};
use std::borrow::Cow;

/// A signing secret. Its `Debug` never shows the value, plain or sealed.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    /// The secret's text (`whsec_...`); the empty string once erased ([`Secret::erased`]).
    Plain(String),
    /// Sealed under the key with id `key`: the nonce, the ciphertext, the tag.
    Sealed {
        /// The id of the key it is sealed under ([`edgehook_model::seal::SealKey::id`]).
        key: [u8; 4],
        /// What [`edgehook_model::seal::SealKey::seal`] wrote.
        bytes: Vec<u8>,
    },
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A sealed secret that opens under neither the current nor the previous key (sealed under
/// a key the settings no longer hold, copied from another record, or altered). Nothing may
/// be signed with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unreadable;

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the signing secret opens under neither seal_key nor seal_previous_key")
    }
}

impl Secret {
    /// A fresh secret: `whsec_` + 32 random bytes, base64url without padding.
    pub fn generate(random: [u8; 32]) -> Self {
        let mut secret = String::from("whsec_");
        edgehook_model::ids::push_base64url(&mut secret, &random);
        Secret::Plain(secret)
    }

    /// What a deleted subscription's record holds instead of its secret: the empty string
    /// (no secret is ever empty).
    pub fn erased() -> Self {
        Secret::Plain(String::new())
    }

    /// Whether this is [`Secret::erased`].
    pub fn is_erased(&self) -> bool {
        matches!(self, Secret::Plain(s) if s.is_empty())
    }

    /// The text of a plain secret (a fresh one, or one of a store without a key).
    pub fn plain(&self) -> Option<&str> {
        match self {
            Secret::Plain(s) => Some(s),
            Secret::Sealed { .. } => None,
        }
    }

    /// The secret sealed under `keys`' current key for the record at `context` (its store
    /// key), with `nonce`; as it is if there is no current key, or it is erased or sealed.
    pub fn sealed(self, keys: &SealKeys, nonce: [u8; NONCE_LEN], context: &str) -> Secret {
        match (&self, &keys.current) {
            (Secret::Plain(text), Some(key)) if !text.is_empty() => Secret::Sealed {
                key: key.id(),
                bytes: key.seal(nonce, context.as_bytes(), text.as_bytes()),
            },
            _ => self,
        }
    }

    /// The secret's text: a plain one as it is, a sealed one opened under whichever of
    /// `keys` sealed it, for the record at `context`.
    pub fn open(&self, keys: &SealKeys, context: &str) -> Result<Cow<'_, str>, Unreadable> {
        match self {
            Secret::Plain(s) => Ok(Cow::Borrowed(s)),
            Secret::Sealed { key, bytes } => {
                let plain = keys
                    .by_id(*key)
                    .and_then(|k| k.open(context.as_bytes(), bytes))
                    .ok_or(Unreadable)?;
                String::from_utf8(plain)
                    .map(Cow::Owned)
                    .map_err(|_| Unreadable)
            }
        }
    }

    /// Whether sealing under `keys` would change it: it is plain (not erased) or sealed
    /// under another key than the current one, and there is a current key.
    pub fn stale(&self, keys: &SealKeys) -> bool {
        let Some(current) = &keys.current else {
            return false;
        };
        // A key id is no secret: it names the key, it does not open anything.
        let sealed_under = match self {
            Secret::Plain(s) => return !s.is_empty(),
            Secret::Sealed { key, .. } => *key,
        };
        sealed_under != current.id()
    }

    /// The secret sealed under `keys`' current key, if it is [`Secret::stale`]: opened
    /// first if sealed under another key. `Ok(None)`: nothing to do.
    pub fn resealed(
        &self,
        keys: &SealKeys,
        nonce: [u8; NONCE_LEN],
        context: &str,
    ) -> Result<Option<Secret>, Unreadable> {
        if !self.stale(keys) {
            return Ok(None);
        }
        let text = self.open(keys, context)?.into_owned();
        Ok(Some(Secret::Plain(text).sealed(keys, nonce, context)))
    }

    /// Writes it to a record: `0` and the text, or `1`, the key id and the sealed bytes.
    pub fn write(&self, w: &mut Writer) {
        match self {
            Secret::Plain(s) => w.u8(0).str(s),
            Secret::Sealed { key, bytes } => w.u8(1).u32(u32::from_le_bytes(*key)).bytes(bytes),
        };
    }

    /// Reads what [`Secret::write`] wrote.
    pub fn read(r: &mut Reader<'_>) -> Option<Secret> {
        match r.u8()? {
            0 => Some(Secret::Plain(r.str()?)),
            1 => Some(Secret::Sealed {
                key: r.u32()?.to_le_bytes(),
                bytes: r.bytes()?.to_vec(),
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgehook_model::seal::SealKey;

    fn keys(current: u8, previous: Option<u8>) -> SealKeys {
        SealKeys {
            current: Some(SealKey::new([current; 32])),
            previous: previous.map(|p| SealKey::new([p; 32])),
        }
    }

    #[test]
    fn a_secret_is_sealed_under_the_current_key_and_opens_only_for_its_record() {
        let plain = Secret::generate([3; 32]);
        let text = plain.plain().expect("plain").to_owned();
        let none = SealKeys::default();
        assert_eq!(
            plain.clone().sealed(&none, [1; 24], "record a"),
            plain,
            "no key"
        );
        let sealed = plain.clone().sealed(&keys(1, None), [1; 24], "record a");
        let Secret::Sealed { bytes, .. } = &sealed else {
            panic!("sealed")
        };
        assert!(!bytes.windows(8).any(|w| w == &text.as_bytes()[6..14]));
        assert_eq!(
            sealed.open(&keys(1, None), "record a").as_deref(),
            Ok(text.as_str())
        );
        assert_eq!(sealed.open(&keys(1, None), "record b"), Err(Unreadable));
        assert_eq!(sealed.open(&keys(2, None), "record a"), Err(Unreadable));
        assert_eq!(sealed.open(&none, "record a"), Err(Unreadable));
        assert_eq!(
            sealed.open(&keys(2, Some(1)), "record a").as_deref(),
            Ok(text.as_str())
        );
        assert!(!format!("{sealed:?}{plain:?}").contains("whsec"));
        let erased = Secret::erased();
        assert_eq!(
            erased.clone().sealed(&keys(1, None), [1; 24], "record a"),
            erased
        );
    }

    #[test]
    fn a_rotation_of_the_key_reseals_what_is_plain_or_under_the_previous_key() {
        let plain = Secret::generate([3; 32]);
        let text = plain.plain().expect("plain").to_owned();
        let old = plain.clone().sealed(&keys(1, None), [1; 24], "record a");
        let rotated = keys(2, Some(1));
        assert!(old.stale(&rotated) && plain.stale(&rotated));
        assert!(!old.stale(&keys(1, None)) && !old.stale(&SealKeys::default()));
        assert!(!Secret::erased().stale(&rotated));
        for before in [&plain, &old] {
            let new = before
                .resealed(&rotated, [2; 24], "record a")
                .expect("opens")
                .expect("resealed");
            assert!(!new.stale(&rotated));
            assert_eq!(
                new.open(&keys(2, None), "record a").as_deref(),
                Ok(text.as_str())
            );
            assert_eq!(new.resealed(&rotated, [3; 24], "record a"), Ok(None));
        }
        assert_eq!(
            old.resealed(&keys(2, None), [2; 24], "record a"),
            Err(Unreadable)
        );
    }

    #[test]
    fn a_secret_reads_back_as_written() {
        let sealed = Secret::generate([3; 32]).sealed(&keys(1, None), [1; 24], "record a");
        for secret in [Secret::generate([3; 32]), Secret::erased(), sealed] {
            let mut w = Writer::new(0xAA, 64);
            secret.write(&mut w);
            let bytes = w.finish();
            let mut r = Reader::new(&bytes, 0xAA).expect("version");
            assert_eq!(Secret::read(&mut r), Some(secret));
            assert_eq!(r.end(), Some(()));
        }
    }
}
