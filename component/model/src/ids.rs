//! Prefixed identifiers (`sub_`, `dlv_`, `evt_`, `req_`, `key_`, `rpl_`): the prefix says
//! what an id names, the rest is random hex, so ids are unguessable and never collide in
//! practice. The typed ids themselves are the storage layer's (`edgehook_storage::ids`),
//! since store keys are built from them; here they are made fresh ([`Generate`]). And the
//! hex and base64 every id, digest, secret and signature is written in.

use crate::env::Entropy;
pub use edgehook_storage::ids::{
    ApiKeyId, ClientId, DeliveryId, EventId, ID_BYTES, IdKind, ReplayJobId, SubscriptionId,
};

/// A fresh id of `kind`: its prefix and [`ID_BYTES`] random bytes in hex.
pub fn fresh(kind: IdKind, entropy: &dyn Entropy) -> String {
    let mut bytes = [0u8; ID_BYTES];
    entropy.fill(&mut bytes);
    let mut id = String::with_capacity(kind.prefix().len() + 2 * ID_BYTES);
    id.push_str(kind.prefix());
    push_hex(&mut id, &bytes);
    id
}

/// A fresh request id (`req_...`): every API request's, and a tick's lease holder's.
pub fn request_id(entropy: &dyn Entropy) -> String {
    fresh(IdKind::Request, entropy)
}

/// Ids the component makes fresh from the environment's randomness.
pub trait Generate: Sized {
    /// A fresh id.
    fn generate(entropy: &dyn Entropy) -> Self;
}

macro_rules! generate {
    ($($name:ident => $kind:ident),*) => {$(
        impl Generate for $name {
            fn generate(entropy: &dyn Entropy) -> Self {
                $name::trusted(fresh(IdKind::$kind, entropy))
            }
        }
    )*};
}

generate!(
    SubscriptionId => Subscription,
    DeliveryId => Delivery,
    EventId => Event,
    ApiKeyId => ApiKey,
    ReplayJobId => Replay
);

/// Appends `bytes` to `out` as lower-case hex. Every id, digest and signature is written
/// with this: `hex::encode` goes through a char iterator, several times slower in the guest,
/// and ids are made on every request.
#[inline]
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(2 * bytes.len());
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
}

/// `bytes` as lower-case hex.
#[inline]
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::new();
    push_hex(&mut out, bytes);
    out
}

/// The base64 alphabet (RFC 4648 §4); base64url's differs in its last two characters.
const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Appends `bytes` to `out` in base64url without padding (RFC 4648 §5): the text of signing
/// secrets and API keys. Written here rather than taken from a crate: it is a dozen lines,
/// and the crate's engine cost the size-budgeted component about 4 KiB.
pub fn push_base64url(out: &mut String, bytes: &[u8]) {
    push_base64_with(out, bytes, false);
}

/// Appends `bytes` to `out` in base64 with padding (RFC 4648 §4): Standard Webhooks'
/// secrets and signatures.
pub fn push_base64(out: &mut String, bytes: &[u8]) {
    push_base64_with(out, bytes, true);
}

fn push_base64_with(out: &mut String, bytes: &[u8], standard: bool) {
    out.reserve((bytes.len() * 4).div_ceil(3) + 2);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        // 3 bytes make 4 characters; 2 make 3; 1 makes 2 (then padding, in base64).
        for i in 0..4 {
            let c = match (i <= chunk.len(), BASE64[(n >> (18 - 6 * i) & 63) as usize]) {
                (false, _) if standard => b'=',
                (false, _) => break,
                (true, b'+') if !standard => b'-',
                (true, b'/') if !standard => b'_',
                (true, c) => c,
            };
            out.push(char::from(c));
        }
    }
}

/// Decodes base64 (RFC 4648 §4, padding optional); `None` for any other character.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = BASE64.iter().position(|a| *a == c)? as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_follows_rfc_4648_both_ways() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            let mut s = String::new();
            push_base64(&mut s, plain.as_bytes());
            assert_eq!(s, encoded);
            assert_eq!(base64_decode(encoded).as_deref(), Some(plain.as_bytes()));
        }
        let mut s = String::new();
        push_base64(&mut s, &[0xfb, 0xff, 0xfe]);
        assert_eq!(s, "+//+");
        assert_eq!(base64_decode("+//+"), Some(vec![0xfb, 0xff, 0xfe]));
        assert_eq!(
            base64_decode("-_"),
            None,
            "base64url's characters are not base64's"
        );
    }

    #[test]
    fn base64url_follows_rfc_4648() {
        let enc = |b: &[u8]| {
            let mut s = String::new();
            push_base64url(&mut s, b);
            s
        };
        // RFC 4648 §10's vectors, without their padding.
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(enc(plain.as_bytes()), encoded, "{plain:?}");
        }
        // The URL-safe alphabet's last two characters, where standard base64 has + and /.
        assert_eq!(enc(&[0xfb, 0xff, 0xbf]), "-_-_");
        assert_eq!(enc(&[0u8; 32]).len(), 43);
    }
    use crate::env::SeededEntropy;

    #[test]
    fn generated_ids_match_their_kind_only() {
        let e = SeededEntropy::new(1);
        let id = SubscriptionId::generate(&e).into_string();
        assert!(id.starts_with("sub_"));
        assert!(IdKind::Subscription.matches(&id));
        assert!(!IdKind::Delivery.matches(&id));
        assert!(!IdKind::Subscription.matches("sub_../../etc"));
        assert!(!IdKind::Subscription.matches(&format!("{id}0")));
        assert!(!IdKind::Subscription.matches(&id.to_uppercase()));
    }

    #[test]
    fn hex_is_the_hex_crates_lower_case_encoding() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(hex(&all), ::hex::encode(&all));
        let mut out = String::from("x_");
        push_hex(&mut out, &[0x00, 0xab, 0xff]);
        assert_eq!(out, "x_00abff");
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn same_seed_same_ids() {
        let a = request_id(&SeededEntropy::new(42));
        let b = request_id(&SeededEntropy::new(42));
        let c = request_id(&SeededEntropy::new(43));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
