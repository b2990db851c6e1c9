//! Verify edgehook webhook deliveries in Rust. The verifier needs the crates `hmac` (0.12),
//! `sha2` (0.10) and `hex` (0.4); the command-line harness below it also uses `serde_json`.
//!
//! Usage (from the edgehook repository, where this file is the `verify` example of the
//! `edgehook-tests` crate):
//!
//! ```text
//! cargo run -q -p edgehook-tests --example verify -- vectors docs/signature-vectors.json
//!     Checks every test vector (with "now" = the vector's timestamp), and checks that a
//!     tampered body, a stale timestamp, a timestamp from the future and a repeated delivery
//!     id are rejected. Exits 0 when everything holds, 1 otherwise.
//! cargo run -q -p edgehook-tests --example verify -- capture delivery.json
//!     Verifies one captured delivery: {"secret", "headers": {name: value}, "bodyBase64",
//!     "now"} ("now" in Unix seconds). Prints the delivery id and event and exits 0 when it
//!     verifies; prints the reason and exits 1 when it does not.
//! ```
//!
//! The part between the BEGIN and END marker comments is what docs/verifying.md shows.

use std::process::ExitCode;

// BEGIN verifier
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashSet;

/// Timestamps more than 5 minutes old (or ahead) are rejected.
pub const TOLERANCE_SECONDS: u64 = 5 * 60;

/// Why a delivery was refused: answer 400 (or 401) and do not process it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// One of the X-Service-* headers is absent or empty.
    MissingHeader,
    /// X-Service-Timestamp is not Unix seconds.
    BadTimestamp,
    /// The timestamp is more than 5 minutes old.
    TooOld,
    /// The timestamp is more than 5 minutes ahead.
    FromTheFuture,
    /// The signature does not match the raw body, timestamp and secret.
    BadSignature,
}

/// What a verified delivery is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// X-Service-Delivery-Id: the same on every retry and replay.
    pub delivery_id: String,
    /// X-Service-Event, e.g. `load.status_changed`.
    pub event: String,
}

/// Checks one delivery. `header` looks a header up by name, case-insensitively (for
/// example `|n| req.headers().get(n).and_then(|v| v.to_str().ok())` with the `http`
/// crate); `raw_body` is the body exactly as received (never re-serialized JSON); `now` is
/// the current Unix time in seconds.
pub fn verify<'h>(
    secret: &str,
    header: impl Fn(&str) -> Option<&'h str>,
    raw_body: &[u8],
    now: u64,
) -> Result<Verified, Rejected> {
    let get = |name: &str| header(name).filter(|v| !v.is_empty());
    let (Some(timestamp), Some(signature), Some(delivery_id), Some(event)) = (
        get("x-service-timestamp"),
        get("x-service-signature"),
        get("x-service-delivery-id"),
        get("x-service-event"),
    ) else {
        return Err(Rejected::MissingHeader);
    };
    if timestamp.len() > 12 || !timestamp.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Rejected::BadTimestamp);
    }
    let sent: u64 = timestamp.parse().map_err(|_| Rejected::BadTimestamp)?;
    if now.saturating_sub(sent) > TOLERANCE_SECONDS {
        return Err(Rejected::TooOld);
    }
    if sent.saturating_sub(now) > TOLERANCE_SECONDS {
        return Err(Rejected::FromTheFuture);
    }
    let lowercase_hex = |s: &str| s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    // HMAC-SHA256 over "<timestamp>.<raw body>", keyed with the secret's UTF-8 bytes
    // (the whole "whsec_..." string, not base64-decoded).
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).map_err(|_| Rejected::BadSignature)?;
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(raw_body);
    // During a secret rotation X-Service-Signatures lists the new secret's signature and
    // the old one's: either secret verifies (X-Service-Signature stays the old one's).
    let rotating = header("x-service-signatures").unwrap_or("");
    let verified = std::iter::once(signature)
        .chain(rotating.split(','))
        .map(str::trim)
        .filter(|s| s.len() == 64 && lowercase_hex(s))
        .filter_map(|s| hex::decode(s).ok())
        // verify_slice compares in constant time.
        .any(|claimed| mac.clone().verify_slice(&claimed).is_ok());
    if !verified {
        return Err(Rejected::BadSignature);
    }
    Ok(Verified {
        delivery_id: delivery_id.to_owned(),
        event: event.to_owned(),
    })
}

/// Verifies, then deduplicates by X-Service-Delivery-Id: retries and replays reuse it.
/// This in-memory set is for illustration; in production keep the ids in a durable store
/// shared by every instance (a table with a unique key, or Redis SET NX with an expiry of
/// a few days).
pub struct Receiver {
    secret: String,
    seen: HashSet<String>,
}

impl Receiver {
    /// A receiver for one subscription's signing secret.
    pub fn new(secret: &str) -> Self {
        Receiver {
            secret: secret.to_owned(),
            seen: HashSet::new(),
        }
    }

    /// Verifies and, unless it is a repeat, hands the delivery to `process` (keep it quick,
    /// e.g. enqueue; answer 2xx, do the expensive work later). Returns the delivery and
    /// whether it was a duplicate; answer 2xx to duplicates too.
    pub fn handle<'h>(
        &mut self,
        header: impl Fn(&str) -> Option<&'h str>,
        raw_body: &[u8],
        now: u64,
        process: impl FnOnce(&Verified, &[u8]),
    ) -> Result<(Verified, bool), Rejected> {
        let delivery = verify(&self.secret, header, raw_body, now)?;
        if self.seen.contains(&delivery.delivery_id) {
            return Ok((delivery, true));
        }
        process(&delivery, raw_body); // if this panics, the id stays unseen
        self.seen.insert(delivery.delivery_id.clone());
        Ok((delivery, false))
    }
}
// END verifier

/// Header lookup over a list of (name, value) pairs, case-insensitive.
fn lookup<'h>(headers: &'h [(String, String)]) -> impl Fn(&str) -> Option<&'h str> + 'h {
    move |name| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The headers edgehook would send with the vector's timestamp and signature.
fn delivery_headers(timestamp: u64, signature: &str, delivery_id: &str) -> Vec<(String, String)> {
    [
        ("Content-Type", "application/json"),
        ("X-Service-Delivery-Id", delivery_id),
        ("X-Service-Event", "load.updated"),
        ("X-Service-Timestamp", &timestamp.to_string()),
        ("X-Service-Signature", signature),
    ]
    .iter()
    .map(|(n, v)| (n.to_string(), v.to_string()))
    .collect()
}

/// Every vector verifies; tampering, staleness and repeats are caught.
fn check_vectors(text: &str) -> Result<bool, String> {
    let vectors: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let vectors = vectors
        .as_array()
        .filter(|v| !v.is_empty())
        .ok_or("no vectors")?;
    let mut ok = true;
    let mut report = |passed: bool, name: &str, label: &str, outcome: String| {
        ok &= passed;
        let mark = if passed { "ok  " } else { "FAIL" };
        println!("{mark} {name}: {label} ({outcome})");
    };
    for (index, vector) in vectors.iter().enumerate() {
        let field = |key: &str| vector[key].as_str().ok_or(format!("vector {index}: {key}"));
        let (name, secret, signature) = (field("name")?, field("secret")?, field("signature")?);
        let body = field("body")?.as_bytes();
        let ts = vector["timestamp"]
            .as_u64()
            .ok_or(format!("vector {index}: timestamp"))?;
        let delivery_id = format!("dlv_vector_{index}");
        let mut headers = delivery_headers(ts, signature, &delivery_id);
        // During a rotation's overlap: X-Service-Signature the previous secret's, both listed.
        let previous = (
            vector["previousSecret"].as_str(),
            vector["previousSignature"].as_str(),
        );
        if let (_, Some(old)) = previous {
            headers.retain(|(n, _)| n != "X-Service-Signature");
            headers.push(("X-Service-Signature".into(), old.into()));
            headers.push(("X-Service-Signatures".into(), format!("{signature},{old}")));
        }
        let tampered = [body, b" "].concat();
        let cases: [(&str, &[u8], u64, Option<Rejected>); 4] = [
            ("verifies", body, ts, None),
            (
                "rejects a tampered body",
                &tampered,
                ts,
                Some(Rejected::BadSignature),
            ),
            (
                "rejects a stale timestamp",
                body,
                ts.saturating_add(TOLERANCE_SECONDS + 1),
                Some(Rejected::TooOld),
            ),
            (
                "rejects a future timestamp",
                body,
                ts.saturating_sub(TOLERANCE_SECONDS + 1),
                Some(Rejected::FromTheFuture),
            ),
        ];
        for (label, raw, now, want) in cases {
            match Receiver::new(secret).handle(lookup(&headers), raw, now, |_, _| {}) {
                Ok((got, _)) => report(
                    want.is_none() && got.delivery_id == delivery_id,
                    name,
                    label,
                    "accepted".into(),
                ),
                Err(e) => report(Some(e) == want, name, label, format!("rejected: {e:?}")),
            }
        }
        if let (Some(old_secret), _) = previous {
            let label = "verifies with the previous secret";
            match Receiver::new(old_secret).handle(lookup(&headers), body, ts, |_, _| {}) {
                Ok((got, _)) => report(
                    got.delivery_id == delivery_id,
                    name,
                    label,
                    "accepted".into(),
                ),
                Err(e) => report(false, name, label, format!("rejected: {e:?}")),
            }
        }
        let label = "a repeated delivery id is processed once";
        let mut receiver = Receiver::new(secret);
        let mut processed: Vec<Vec<u8>> = Vec::new();
        let first = receiver.handle(lookup(&headers), body, ts, |_, b| {
            processed.push(b.to_vec())
        });
        let second = receiver.handle(lookup(&headers), body, ts.saturating_add(60), |_, b| {
            processed.push(b.to_vec())
        });
        match (first, second) {
            (Ok((_, false)), Ok((_, true))) if processed == [body] => {
                report(true, name, label, "1 processed".into())
            }
            (first, second) => report(false, name, label, format!("{first:?}, {second:?}")),
        }
    }
    Ok(ok)
}

/// Standard base64 (padding optional), enough for `bodyBase64`.
fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0u32);
    for c in text.trim_end_matches('=').bytes() {
        let v = ALPHABET
            .iter()
            .position(|&a| a == c)
            .ok_or("bodyBase64 is not base64")?;
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

/// Verifies one captured delivery.
fn check_capture(text: &str) -> Result<bool, String> {
    let capture: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let secret = capture["secret"].as_str().ok_or("secret")?;
    let body = decode_base64(capture["bodyBase64"].as_str().ok_or("bodyBase64")?)?;
    let now = capture["now"].as_u64().ok_or("now (Unix seconds)")?;
    let headers: Vec<(String, String)> = capture["headers"]
        .as_object()
        .ok_or("headers")?
        .iter()
        .map(|(n, v)| (n.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    match Receiver::new(secret).handle(lookup(&headers), &body, now, |_, _| {}) {
        Ok((d, _)) => {
            println!("ok {} {}", d.delivery_id, d.event);
            Ok(true)
        }
        Err(e) => {
            println!("rejected: {e:?}");
            Ok(false)
        }
    }
}

/// The command line: `vectors FILE` or `capture FILE` (after the program name). Returns the
/// exit status: 0 verified, 1 a check failed, 2 usage or input errors.
pub fn run(args: &[String]) -> u8 {
    let (Some(mode), Some(path), 3) = (args.get(1), args.get(2), args.len()) else {
        eprintln!("usage: verify vectors|capture FILE");
        return 2;
    };
    let outcome = std::fs::read_to_string(path)
        .map_err(|e| format!("{path}: {e}"))
        .and_then(|text| match mode.as_str() {
            "vectors" => check_vectors(&text),
            "capture" => check_capture(&text),
            _ => Err("usage: verify vectors|capture FILE".into()),
        });
    match outcome {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("{e}");
            2
        }
    }
}

fn main() -> ExitCode {
    ExitCode::from(run(&std::env::args().collect::<Vec<_>>()))
}
