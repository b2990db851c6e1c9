//! Delivery signatures checked independently of the component: SPEC's lowercase hex
//! HMAC-SHA256 over `<timestamp>.<raw body>`, and Standard Webhooks' `v1,<base64>` over
//! `<id>.<timestamp>.<raw body>`, computed here with `hmac`, `sha2` and `base64` directly,
//! compared in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Whether `signature` (the `X-Service-Signature` header) signs `timestamp` (the
/// `X-Service-Timestamp` header) and `body` with `secret`. A missing header never verifies.
pub fn verifies(
    secret: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
) -> bool {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::decode(signature).is_ok_and(|sig| mac.verify_slice(&sig).is_ok())
}

/// Whether any `v1,` entry of `signatures` (the `webhook-signature` header) signs `id`,
/// `timestamp` (the `webhook-id` and `webhook-timestamp` headers) and `body` with the
/// Standard Webhooks secret `secret` (`whsec_` + base64 of the key). Missing parts never
/// verify.
pub fn verifies_standard(
    secret: &str,
    id: Option<&str>,
    timestamp: Option<&str>,
    signatures: Option<&str>,
    body: &[u8],
) -> bool {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let (Some(id), Some(timestamp), Some(signatures)) = (id, timestamp, signatures) else {
        return false;
    };
    let Some(key) = secret
        .strip_prefix("whsec_")
        .and_then(|k| b64.decode(k).ok())
    else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    signatures
        .split(' ')
        .filter_map(|s| s.strip_prefix("v1,"))
        .filter_map(|s| b64.decode(s).ok())
        .any(|sig| mac.clone().verify_slice(&sig).is_ok())
}
