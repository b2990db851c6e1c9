//! SPEC's delivery signature checked independently of the component: lowercase hex
//! HMAC-SHA256 over `<timestamp>.<raw body>`, computed here with `hmac` and `sha2` directly,
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
