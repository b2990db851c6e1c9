//! Secrets sealed at rest: XChaCha20-Poly1305 under the operator's 32-byte key (the settings
//! `seal_key` and, during a key rotation, `seal_previous_key`).
//!
//! A sealed value is the 24-byte nonce, then the ciphertext and its 16-byte tag. The nonce is
//! random per seal (the caller draws it from `Env`'s entropy: the core reads no randomness
//! itself), and the associated data is the store key of the record that holds the value, so
//! a sealed value copied into another record does not open. Each key has a 4-byte id (the
//! first bytes of a SHA-256 over a label and the key) that a sealed value is stored with:
//! which key to open it with, and whether it is sealed under the current one, are known
//! without trying.

use chacha20poly1305::aead::AeadInOut;
use chacha20poly1305::{KeyInit, XChaCha20Poly1305};
use sha2::{Digest, Sha256};

/// Bytes of a nonce, at the front of every sealed value.
pub const NONCE_LEN: usize = 24;
/// Bytes of the authentication tag, at the end of every sealed value.
pub const TAG_LEN: usize = 16;

/// A sealing key and its id. Its `Debug` shows the id only. The id (a SHA-256) is worked
/// out on first use, not when the settings are read: on a host that makes an instance per
/// request, every request reads them.
#[derive(Clone)]
pub struct SealKey {
    id: std::cell::OnceCell<[u8; 4]>,
    key: [u8; 32],
}

impl PartialEq for SealKey {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for SealKey {}

impl std::fmt::Debug for SealKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a, b, c, d] = self.id();
        write!(f, "SealKey({a:02x}{b:02x}{c:02x}{d:02x})")
    }
}

impl SealKey {
    /// The key of 32 bytes `key`.
    pub fn new(key: [u8; 32]) -> Self {
        SealKey {
            id: std::cell::OnceCell::new(),
            key,
        }
    }

    /// A key written as 64 hex digits (what `openssl rand -hex 32` prints); `None` for
    /// anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim().as_bytes();
        if text.len() != 64 {
            return None;
        }
        let mut key = [0u8; 32];
        for (byte, pair) in key.iter_mut().zip(text.chunks_exact(2)) {
            let digit = |c: u8| (c as char).to_digit(16);
            *byte = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
        }
        Some(Self::new(key))
    }

    /// Its id, stored beside every value sealed under it.
    pub fn id(&self) -> [u8; 4] {
        *self.id.get_or_init(|| {
            let digest = Sha256::new()
                .chain_update(b"edgehook seal key id\0")
                .chain_update(self.key)
                .finalize();
            let mut id = [0u8; 4];
            id.copy_from_slice(&digest[..4]);
            id
        })
    }

    /// `plain` sealed under this key with `nonce`, bound to `context` (the store key of the
    /// record that holds it): the nonce, the ciphertext, the tag.
    pub fn seal(&self, nonce: [u8; NONCE_LEN], context: &[u8], plain: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(NONCE_LEN + plain.len() + TAG_LEN);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let cipher = XChaCha20Poly1305::new(&self.key.into());
        // Fails only for a message longer than the cipher's 256 GiB limit.
        if let Ok(tag) =
            cipher.encrypt_inout_detached(&nonce.into(), context, (&mut out[NONCE_LEN..]).into())
        {
            out.extend_from_slice(&tag);
        }
        out
    }

    /// The plain bytes of `sealed` ([`SealKey::seal`]'s output under this key and
    /// `context`); `None` if it was sealed under another key or for another record, or was
    /// altered.
    pub fn open(&self, context: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_LEN + TAG_LEN {
            return None;
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let (body, tag) = rest.split_at(rest.len() - TAG_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
        let tag: [u8; TAG_LEN] = tag.try_into().ok()?;
        let mut plain = body.to_vec();
        let cipher = XChaCha20Poly1305::new(&self.key.into());
        cipher
            .decrypt_inout_detached(
                &nonce.into(),
                context,
                plain.as_mut_slice().into(),
                &tag.into(),
            )
            .ok()?;
        Some(plain)
    }
}

/// The keys a deployment seals with: the current one (new values are sealed under it) and,
/// while a key rotation runs, the previous one (values sealed under it still open).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealKeys {
    /// The key new secrets are sealed under; `None`: secrets are stored as they are.
    pub current: Option<SealKey>,
    /// The key the current one replaced, still opening what was sealed under it.
    pub previous: Option<SealKey>,
}

impl SealKeys {
    /// The key whose id is `id`, if either is.
    pub fn by_id(&self, id: [u8; 4]) -> Option<&SealKey> {
        [&self.current, &self.previous]
            .into_iter()
            .flatten()
            .find(|k| k.id() == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn a_key_is_64_hex_digits_and_its_debug_shows_only_its_id() {
        let key = SealKey::parse(HEX).expect("hex");
        assert_eq!(SealKey::parse(&HEX.to_uppercase()), Some(key.clone()));
        assert_eq!(SealKey::parse(&format!(" {HEX}\n")), Some(key.clone()));
        for bad in ["", &HEX[2..], &format!("{HEX}00"), &HEX.replace('a', "g")] {
            assert_eq!(SealKey::parse(bad), None, "{bad:?}");
        }
        assert!(!format!("{key:?}").contains("0102"));
        assert_ne!(key.id(), SealKey::new([9; 32]).id());
    }

    #[test]
    fn a_sealed_value_opens_only_under_its_key_and_its_record() {
        let key = SealKey::parse(HEX).expect("hex");
        let other = SealKey::new([7; 32]);
        let sealed = key.seal([5; NONCE_LEN], b"record 1", b"whsec_abc");
        assert_eq!(sealed.len(), NONCE_LEN + 9 + TAG_LEN);
        assert!(!sealed.windows(9).any(|w| w == b"whsec_abc"));
        assert_eq!(
            key.open(b"record 1", &sealed).as_deref(),
            Some(&b"whsec_abc"[..])
        );
        assert_eq!(key.open(b"record 2", &sealed), None, "another record");
        assert_eq!(other.open(b"record 1", &sealed), None, "another key");
        for at in [0, NONCE_LEN, sealed.len() - 1] {
            let mut altered = sealed.clone();
            altered[at] ^= 1;
            assert_eq!(key.open(b"record 1", &altered), None, "byte {at} altered");
        }
        assert_eq!(
            key.open(b"record 1", &sealed[..NONCE_LEN + TAG_LEN - 1]),
            None
        );
        // Another nonce, other bytes.
        assert_ne!(sealed, key.seal([6; NONCE_LEN], b"record 1", b"whsec_abc"));
    }

    /// The construction is XChaCha20-Poly1305 as published: the test vector of
    /// draft-irtf-cfrg-xchacha-03, appendix A.3.1.
    #[test]
    fn the_xchacha20_poly1305_test_vector() {
        let unhex = |s: &str| -> Vec<u8> {
            let s: String = s.split_whitespace().collect();
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
                .collect()
        };
        let key: [u8; 32] =
            unhex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f")
                .try_into()
                .expect("32");
        let nonce: [u8; 24] = unhex("404142434445464748494a4b4c4d4e4f5051525354555657")
            .try_into()
            .expect("24");
        let aad = unhex("50515253c0c1c2c3c4c5c6c7");
        let plain = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.";
        let sealed = SealKey::new(key).seal(nonce, &aad, plain);
        let expected = unhex(
            "bd6d179d3e83d43b9576579493c0e939572a1700252bfaccbed2902c21396cbb
             731c7f1b0b4aa6440bf3a82f4eda7e39ae64c6708c54c216cb96b72e1213b452
             2f8c9ba40db5d945b11b69b982c1bb9e3f3fac2bc369488f76b2383565d3fff9
             21f9664c97637da9768812f615c68b13b52e
             c0875924c1c7987947deafd8780acf49",
        );
        assert_eq!(&sealed[..NONCE_LEN], &nonce);
        assert_eq!(&sealed[NONCE_LEN..], &expected[..]);
    }

    #[test]
    fn keys_are_found_by_id() {
        let (a, b) = (SealKey::new([1; 32]), SealKey::new([2; 32]));
        let keys = SealKeys {
            current: Some(a.clone()),
            previous: Some(b.clone()),
        };
        assert_eq!(keys.by_id(a.id()), Some(&a));
        assert_eq!(keys.by_id(b.id()), Some(&b));
        assert_eq!(keys.by_id(SealKey::new([3; 32]).id()), None);
        assert_eq!(SealKeys::default().by_id(a.id()), None);
    }
}
