//! Subscriptions as stored: [`Subscription`] (`sub:{id}`), its [`Status`] and its signing
//! [`Secret`].

use edgehook_model::error::ApiError;
use edgehook_model::seal::{NONCE_LEN, SealKeys};
use edgehook_storage::codec::{Reader, Writer};
use edgehook_storage::ids::{ClientId, SubscriptionId};
use serde::Serialize;
use std::borrow::Cow;

pub use crate::secret::{Secret, Unreadable};

impl Secret {
    /// A fresh secret for `scheme`: [`Secret::generate`]'s, or for Standard Webhooks `whsec_`
    /// + base64 (with padding) of the 32 random bytes, which are then the HMAC key.
    pub fn generate_for(scheme: Scheme, random: [u8; 32]) -> Self {
        match scheme {
            Scheme::Spec => Self::generate(random),
            Scheme::Standard => {
                let mut secret = String::from("whsec_");
                edgehook_model::ids::push_base64(&mut secret, &random);
                Secret::Plain(secret)
            }
        }
    }
}

/// How a subscription's deliveries are signed.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Scheme {
    /// SPEC §5.2: `X-Service-Signature`, hex HMAC-SHA256 over `<timestamp>.<body>`, keyed
    /// with the secret string. The default.
    #[default]
    Spec,
    /// Standard Webhooks (standardwebhooks.com): `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature: v1,<base64 HMAC-SHA256 over "<id>.<timestamp>.<body>">`, keyed
    /// with the secret's decoded bytes.
    Standard,
}

impl Scheme {
    /// Its name in the API (`spec`, `standard`).
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Spec => "spec",
            Scheme::Standard => "standard",
        }
    }
}

/// In what order a subscription's deliveries are attempted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ordering {
    /// Best effort (SPEC §6.3): every delivery is attempted as soon as it is due, in
    /// parallel with the others. The default.
    #[default]
    Unordered,
    /// One at a time, in publish order: a delivery is released only when the one before it
    /// has succeeded, failed for good, or been cancelled.
    Fifo,
}

impl Ordering {
    /// Its name in the API (`unordered`, `fifo`).
    pub fn name(self) -> &'static str {
        match self {
            Ordering::Unordered => "unordered",
            Ordering::Fifo => "fifo",
        }
    }
}

/// What a subscription's deliveries carry besides the body (since format 0xB3): the
/// signature scheme, the partner's own headers, and during a secret rotation the previous
/// secret, which signs beside the current one until `previous_until`; and their ordering.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryOptions {
    /// The signature scheme.
    pub scheme: Scheme,
    /// The order of attempts.
    pub ordering: Ordering,
    /// Headers sent with every delivery (names as given; values write-only, never shown).
    pub headers: Vec<(String, String)>,
    /// The secret a rotation replaced, and until when (ms since the epoch) it still signs.
    pub previous_secret: Option<(Secret, u64)>,
    /// Most attempts in flight at once (since 0xB4); 0: the default, which applies only
    /// while the receiver is slow (`slow_until`).
    pub max_in_flight: u16,
    /// Most attempts started per second (since 0xB4); 0: no limit.
    pub rate_limit: u32,
    /// Not an option but the receiver's state: until when it counts as slow (an attempt took
    /// a second or more, or timed out), which puts it under the default in-flight cap.
    pub slow_until: Option<u64>,
    /// Whether its deliveries carry a W3C `traceparent` naming the trace their event was
    /// published in (bit 2 of the flags byte: no new format).
    pub traceparent: bool,
}

impl DeliveryOptions {
    /// The previous secret if it still signs at `now_ms`.
    pub fn previous_at(&self, now_ms: u64) -> Option<&Secret> {
        self.previous_secret
            .as_ref()
            .filter(|(_, until)| now_ms < *until)
            .map(|(s, _)| s)
    }
}

/// Lifecycle of a subscription record.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    /// Being created; invisible until it becomes active.
    Pending,
    /// Receives deliveries and shows in list.
    Active,
    /// Deleted or disabled; receives nothing, kept for support.
    Disabled,
}

/// A stored subscription. Stored binary ([`Subscription::encode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// `sub_...`.
    pub id: SubscriptionId,
    /// The owning API client.
    pub client_id: ClientId,
    /// Target URL, as given.
    pub url: String,
    /// Event types it listens to (deduplicated, in the order given).
    pub event_types: Vec<String>,
    /// The signing secret (only ever returned by create); erased (empty) once deleted.
    pub signing_secret: Secret,
    /// Lifecycle state.
    pub status: Status,
    /// Why it was disabled (`deleted`, `gone`, `repeated_failures`, `operator`).
    pub disabled_reason: Option<String>,
    /// Creation time (ms since the epoch).
    pub created_at: u64,
    /// When it was disabled.
    pub disabled_at: Option<u64>,
    /// Position in the client's creation order.
    pub seq: u64,
    /// Deliveries in a row that ended failed (reset by any success).
    pub consecutive_failures: u32,
    /// The number of its entry in each event type's fan-out index, in the order of
    /// `event_types` (so a delete removes exactly those entries).
    pub fanout_seqs: Vec<u64>,
    /// While disabled (since format 0xB2): the number of its entry in the client's list of
    /// disabled subscriptions (`None` for a deleted one, which its owner no longer sees),
    /// and in the operator's list of every disabled subscription. Readers of those lists
    /// show an entry only if the record names it, so entries left by an earlier disable
    /// (the subscription was enabled since) are skipped.
    pub disabled_entries: (Option<u64>, Option<u64>),
    /// Signature scheme, headers, a rotation's previous secret (default before 0xB3).
    pub options: DeliveryOptions,
}

/// A subscription as the operator API shows it ([`Subscription::operator_view`]): never the
/// secret. Written from the record directly, never through a `serde_json::Value` (the
/// component is size-budgeted); the fields are in the order the view always had.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorView<'a> {
    client_id: &'a str,
    consecutive_failures: u32,
    created_at: u64,
    disabled_at: Option<u64>,
    disabled_reason: Option<&'a str>,
    event_types: &'a [String],
    id: &'a str,
    status: Status,
    url: &'a str,
}

impl Subscription {
    /// The operator view: state and disable reason included, never the secret.
    pub fn operator_view(&self) -> OperatorView<'_> {
        OperatorView {
            client_id: &self.client_id,
            consecutive_failures: self.consecutive_failures,
            created_at: self.created_at,
            disabled_at: self.disabled_at,
            disabled_reason: self.disabled_reason.as_deref(),
            event_types: &self.event_types,
            id: &self.id,
            status: self.status,
            url: &self.url,
        }
    }

    /// The stored record: `SUBSCRIPTION_V5` (0xB5), then every field in declaration order
    /// (see [`edgehook_storage::codec`]; a list is its length, then its items; a secret as
    /// [`Secret::write`] writes it, plain or sealed; the options: the scheme's code, the
    /// headers as name-value pairs, the previous secret and its end, the in-flight cap, the
    /// rate limit, the time the receiver counts as slow until). A record is written twice by
    /// a create and read by every fan-out, so it is copied rather than escaped. Still read:
    /// 0xB4, its secrets plain strings; 0xB3, without the last three options too;
    /// `SUBSCRIPTION_V2` (0xB2), without the options; and `SUBSCRIPTION_V1` (0xB1), without
    /// `disabled_entries` too.
    pub fn encode(&self) -> Vec<u8> {
        let o = &self.options;
        let mut w = Writer::new(
            SUBSCRIPTION_V5,
            200 + self.url.len() + 24 * self.event_types.len(),
        );
        w.str(&self.id)
            .str(&self.client_id)
            .str(&self.url)
            .list(&self.event_types, |w, t| w.str(t));
        self.signing_secret.write(&mut w);
        w.u8(self.status.code())
            .opt(self.disabled_reason.as_deref(), Writer::str)
            .u64(self.created_at)
            .opt(self.disabled_at, Writer::u64)
            .u64(self.seq)
            .u32(self.consecutive_failures)
            .list(&self.fanout_seqs, |w, n| w.u64(*n))
            .opt(self.disabled_entries.0, Writer::u64)
            .opt(self.disabled_entries.1, Writer::u64)
            // The scheme in bit 0, FIFO ordering in bit 1, `traceparent` in bit 2.
            .u8(o.scheme as u8 | (o.ordering as u8) << 1 | u8::from(o.traceparent) << 2)
            .list(&o.headers, |w, (n, v)| w.str(n).str(v))
            .opt(o.previous_secret.as_ref(), |w, (s, until)| {
                s.write(w);
                w.u64(*until)
            })
            .u16(o.max_in_flight)
            .u32(o.rate_limit)
            .opt(o.slow_until, Writer::u64);
        w.finish()
    }

    /// The store key its secrets are sealed for (`sub:{id}`): a sealed secret copied into
    /// another record does not open there.
    pub fn seal_context(&self) -> edgehook_storage::keys::Key {
        edgehook_storage::keys::subscription(&self.id)
    }

    /// Its signing secret and, if still signing at `now_ms`, the previous one (a
    /// rotation's overlap), opened under `keys` to sign with. [`Unreadable`] if either
    /// opens under neither key: nothing may be sent signed with less.
    pub fn open_secrets(
        &self,
        keys: &SealKeys,
        now_ms: u64,
    ) -> Result<(Cow<'_, str>, Option<Cow<'_, str>>), Unreadable> {
        let context = self.seal_context();
        let current = self.signing_secret.open(keys, &context)?;
        let previous = match self.options.previous_at(now_ms) {
            Some(old) => Some(old.open(keys, &context)?),
            None => None,
        };
        Ok((current, previous))
    }

    /// Seals its secrets under `keys`' current key where they are plain or sealed under
    /// another key (a new key, or a key rotation), each with a nonce from `nonce`. Whether
    /// anything changed; [`Unreadable`] (nothing changed) if a secret opens under neither key.
    pub fn reseal(
        &mut self,
        keys: &SealKeys,
        nonce: &mut dyn FnMut() -> [u8; NONCE_LEN],
    ) -> Result<bool, Unreadable> {
        let context = self.seal_context();
        let current = self.signing_secret.resealed(keys, nonce(), &context)?;
        let previous = match &self.options.previous_secret {
            Some((old, _)) => old.resealed(keys, nonce(), &context)?,
            None => None,
        };
        let changed = current.is_some() || previous.is_some();
        if let Some(secret) = current {
            self.signing_secret = secret;
        }
        if let (Some(secret), Some((old, _))) = (previous, &mut self.options.previous_secret) {
            *old = secret;
        }
        Ok(changed)
    }

    /// Whether [`Subscription::reseal`] would change a secret of it.
    pub fn stale_secrets(&self, keys: &SealKeys) -> bool {
        self.signing_secret.stale(keys)
            || self
                .options
                .previous_secret
                .as_ref()
                .is_some_and(|(old, _)| old.stale(keys))
    }

    /// Reads a stored record ([`Subscription::encode`]). A damaged record is an error.
    pub fn decode(bytes: &[u8]) -> Result<Subscription, ApiError> {
        Self::decode_binary(bytes).ok_or_else(|| ApiError::internal("corrupt subscription record"))
    }

    fn decode_binary(bytes: &[u8]) -> Option<Subscription> {
        let (mut r, version) = [
            SUBSCRIPTION_V5,
            SUBSCRIPTION_V4,
            SUBSCRIPTION_V3,
            SUBSCRIPTION_V2,
        ]
        .iter()
        .zip([5, 4, 3, 2])
        .find_map(|(v, n)| Some((Reader::new(bytes, *v)?, n)))
        .or_else(|| Some((Reader::new(bytes, SUBSCRIPTION_V1)?, 1)))?;
        let (id, client_id, url) = (r.id()?, r.id()?, r.str()?);
        let event_types = r.list(4, Reader::str)?;
        // Since 0xB5 a secret is tagged plain or sealed; before, it is a plain string.
        let secret = |r: &mut Reader<'_>| match version >= 5 {
            true => Secret::read(r),
            false => r.str().map(Secret::Plain),
        };
        let signing_secret = secret(&mut r)?;
        let status = Status::from_code(r.u8()?)?;
        let disabled_reason = r.opt(Reader::str)?;
        let created_at = r.u64()?;
        let disabled_at = r.opt(Reader::u64)?;
        let seq = r.u64()?;
        let consecutive_failures = r.u32()?;
        let fanout_seqs = r.list(8, Reader::u64)?;
        let disabled_entries = match version >= 2 {
            true => (r.opt(Reader::u64)?, r.opt(Reader::u64)?),
            false => (None, None),
        };
        let options = match version >= 3 {
            true => {
                // The scheme in bit 0, FIFO ordering in bit 1, `traceparent` in bit 2; any
                // other bit is damage.
                let flags = r.u8()?;
                if flags > 7 {
                    return None;
                }
                DeliveryOptions {
                    scheme: [Scheme::Spec, Scheme::Standard][usize::from(flags & 1)],
                    ordering: [Ordering::Unordered, Ordering::Fifo][usize::from(flags >> 1 & 1)],
                    traceparent: flags & 4 != 0,
                    headers: r.list(8, |r| Some((r.str()?, r.str()?)))?,
                    previous_secret: r.opt(|r| Some((secret(r)?, r.u64()?)))?,
                    ..DeliveryOptions::default()
                }
            }
            false => DeliveryOptions::default(),
        };
        let options = match version >= 4 {
            true => DeliveryOptions {
                max_in_flight: r.u16()?,
                rate_limit: r.u32()?,
                slow_until: r.opt(Reader::u64)?,
                ..options
            },
            false => options,
        };
        r.end()?;
        Some(Subscription {
            id,
            client_id,
            url,
            event_types,
            signing_secret,
            status,
            disabled_reason,
            created_at,
            disabled_at,
            seq,
            consecutive_failures,
            fanout_seqs,
            disabled_entries,
            options,
        })
    }
}

/// The first byte of a subscription record ([`Subscription::encode`]): its format's version.
const SUBSCRIPTION_V5: u8 = 0xB5;
/// The format before sealed secrets (read, no longer written).
const SUBSCRIPTION_V4: u8 = 0xB4;
/// The format before pacing (read, no longer written).
const SUBSCRIPTION_V3: u8 = 0xB3;
/// The format before the delivery options (read, no longer written).
const SUBSCRIPTION_V2: u8 = 0xB2;
/// The format before `disabled_entries` (read, no longer written).
const SUBSCRIPTION_V1: u8 = 0xB1;

impl Status {
    fn code(self) -> u8 {
        match self {
            Status::Pending => 0,
            Status::Active => 1,
            Status::Disabled => 2,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        [Status::Pending, Status::Active, Status::Disabled]
            .get(usize::from(code))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Subscription {
        Subscription {
            id: "sub_000000000000000000000007".into(),
            client_id: "acme".into(),
            url: "https://hooks.example.com/in?x=\"é\"".into(),
            event_types: vec!["load.created".into(), "load.status_changed".into()],
            signing_secret: Secret::Plain("whsec_abc".into()),
            status: Status::Disabled,
            disabled_reason: Some("repeated_failures".into()),
            created_at: 1_767_225_600_000,
            disabled_at: Some(1_767_225_700_000),
            seq: 42,
            consecutive_failures: 5,
            fanout_seqs: vec![3, 9],
            disabled_entries: (Some(4), Some(11)),
            options: DeliveryOptions {
                scheme: Scheme::Standard,
                ordering: Ordering::Fifo,
                headers: vec![
                    ("X-Token".into(), "t=1".into()),
                    ("Authorization".into(), "Bearer x".into()),
                ],
                previous_secret: Some((Secret::Plain("whsec_old".into()), 1_767_229_200_000)),
                max_in_flight: 4,
                rate_limit: 20,
                slow_until: Some(1_767_226_000_000),
                traceparent: true,
            },
        }
    }

    /// Where the signing secret starts in `sub`'s record.
    fn secret_at(sub: &Subscription) -> usize {
        let str_len = |v: &str| 4 + v.len();
        1 + str_len(&sub.id)
            + str_len(&sub.client_id)
            + str_len(&sub.url)
            + 4
            + sub.event_types.iter().map(|t| str_len(t)).sum::<usize>()
    }

    /// `sub` (plain secrets, no previous one) in the format before sealed secrets (0xB4):
    /// the secret a string, without the tag byte.
    fn as_v4(sub: &Subscription) -> Vec<u8> {
        assert!(sub.options.previous_secret.is_none());
        let mut bytes = sub.encode();
        assert_eq!(bytes.remove(secret_at(sub)), 0, "a plain secret");
        bytes[0] = SUBSCRIPTION_V4;
        bytes
    }

    /// A record of the format before the options (0xB2) reads with the defaults: SPEC
    /// signatures, no headers, no rotation.
    #[test]
    fn a_record_from_before_the_options_reads_with_their_defaults() {
        let sub = sample();
        let mut v2 = as_v4(&Subscription {
            options: DeliveryOptions::default(),
            ..sub.clone()
        });
        // 0xB4 is 0xB3 followed by the pacing: cap (2), rate (4), slow until (1); 0xB3 is
        // 0xB2 followed by the options: scheme (1), headers (4), previous (1).
        let mut v3 = v2.clone();
        v3.truncate(v3.len() - 7);
        v3[0] = SUBSCRIPTION_V3;
        let read = Subscription::decode(&v3).expect("a 0xB3 record");
        assert_eq!(read.options, DeliveryOptions::default());
        v2.truncate(v2.len() - 13);
        v2[0] = SUBSCRIPTION_V2;
        let read = Subscription::decode(&v2).expect("a 0xB2 record");
        assert_eq!(read.options, DeliveryOptions::default());
        assert_eq!(read.id, sub.id);
        let bytes = sub.encode();
        assert_eq!(bytes[0], SUBSCRIPTION_V5);
        assert_eq!(Subscription::decode(&bytes).expect("decode"), sub);
        // A flag no version defines is a damaged record.
        let mut bad = Subscription {
            options: DeliveryOptions::default(),
            ..sub
        }
        .encode();
        let at = bad.len() - 13;
        bad[at] = 8;
        assert!(Subscription::decode(&bad).is_err());
    }

    #[test]
    fn a_subscription_record_is_binary_and_reads_back_whole() {
        let full = sample();
        let empty = Subscription {
            status: Status::Pending,
            disabled_reason: None,
            disabled_at: None,
            event_types: Vec::new(),
            fanout_seqs: Vec::new(),
            consecutive_failures: 0,
            ..sample()
        };
        let active = Subscription {
            status: Status::Active,
            ..empty.clone()
        };
        for sub in [full, empty, active] {
            let bytes = sub.encode();
            assert_eq!(bytes[0], SUBSCRIPTION_V5);
            assert_eq!(Subscription::decode(&bytes).expect("decode"), sub);
        }
    }

    /// Record codecs round-trip any record: a URL of the longest length allowed (2048), or
    /// many event types (the size hint must not underflow for either).
    #[test]
    fn a_subscription_record_with_a_long_url_or_many_event_types_reads_back_whole() {
        let long_url = Subscription {
            url: format!("https://hooks.example.com/{}", "a".repeat(2048 - 26)),
            ..sample()
        };
        assert_eq!(long_url.url.len(), 2048);
        let many_types = Subscription {
            url: "https://a.example/".into(),
            event_types: (0..20).map(|n| format!("load.type_{n}")).collect(),
            fanout_seqs: (0..20).collect(),
            ..sample()
        };
        for sub in [long_url, many_types] {
            let bytes = sub.encode();
            assert_eq!(Subscription::decode(&bytes).expect("decode"), sub);
        }
    }

    #[test]
    fn a_damaged_subscription_record_is_an_error_not_a_panic_or_a_guess() {
        let bytes = sample().encode();
        edgehook_storage::codec::assert_only_whole_records_read(&bytes, |b| {
            Subscription::decode(b).is_ok()
        });
        // Offsets: the version byte, then each string is 4 bytes of length and its bytes; a
        // secret is a tag byte and a string.
        let sub = sample();
        let str_len = |v: &str| 4 + v.len();
        let types_at = 1 + str_len(&sub.id) + str_len(&sub.client_id) + str_len(&sub.url);
        let secret = sub.signing_secret.plain().expect("plain");
        let status_at = secret_at(&sub) + 1 + str_len(secret);
        let mut bad = bytes.clone();
        bad[secret_at(&sub)] = 2;
        assert!(Subscription::decode(&bad).is_err(), "an unknown secret tag");
        assert_eq!(bytes[status_at], Status::Disabled.code());
        let mut bad = bytes.clone();
        bad[status_at] = 9;
        assert!(Subscription::decode(&bad).is_err(), "an unknown status");
        let mut huge = bytes.clone();
        huge[types_at..types_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            Subscription::decode(&huge).is_err(),
            "an absurd list length"
        );
        assert!(Subscription::decode(b"not json").is_err());
    }

    /// A record of format 0xB1 (before `disabled_entries`) still reads, as not listed in
    /// the lists of disabled subscriptions.
    #[test]
    fn a_subscription_record_of_the_format_before_reads_back() {
        let sub = Subscription {
            disabled_entries: (None, None),
            options: DeliveryOptions::default(),
            ..sample()
        };
        // 0xB2 is 0xB4 without the options (6 bytes) and the pacing (7).
        let v3 = as_v4(&sub);
        let v2 = v3[..v3.len() - 13].to_vec();
        // 0xB1 is 0xB2 without its last two fields (two `None`s: one tag byte each).
        let mut v1 = v2[..v2.len() - 2].to_vec();
        v1[0] = SUBSCRIPTION_V1;
        assert_eq!(Subscription::decode(&v1).expect("decode"), sub);
        let mut damaged = v2.clone();
        damaged[0] = SUBSCRIPTION_V1;
        assert!(
            Subscription::decode(&damaged).is_err(),
            "0xB1 has no trailing fields"
        );
    }

    /// Only the binary format is read: a record in the JSON no release wrote is damage.
    #[test]
    fn a_subscription_record_in_another_format_is_not_read() {
        let json = br#"{"id":"sub_1","clientId":"acme","url":"https://x.example","eventTypes":[],"signingSecret":"whsec_abc","status":"active","disabledReason":null,"createdAt":1,"disabledAt":null,"seq":1}"#;
        assert!(Subscription::decode(json).is_err());
    }

    /// A sealed secret stays sealed through a decode and an encode; it opens for its own
    /// record only, and a rotation's previous secret is sealed too.
    #[test]
    fn sealed_secrets_read_back_sealed_and_open_only_in_their_record() {
        use edgehook_model::seal::SealKey;
        let keys = SealKeys {
            current: Some(SealKey::new([1; 32])),
            previous: None,
        };
        let mut sub = sample();
        let mut n = 0u8;
        let mut nonce = || {
            n += 1;
            [n; NONCE_LEN]
        };
        assert_eq!(sub.reseal(&keys, &mut nonce), Ok(true));
        assert!(!sub.stale_secrets(&keys));
        let bytes = sub.encode();
        for plain in [&b"whsec_abc"[..], b"whsec_old"] {
            assert!(!bytes.windows(plain.len()).any(|w| w == plain));
        }
        let read = Subscription::decode(&bytes).expect("decode");
        assert_eq!(read, sub);
        assert_eq!(read.encode(), bytes, "written back byte for byte");
        let before_end = sub.options.previous_secret.as_ref().expect("previous").1 - 1;
        let (current, previous) = read.open_secrets(&keys, before_end).expect("opens");
        assert_eq!(
            (&*current, previous.as_deref()),
            ("whsec_abc", Some("whsec_old"))
        );
        let (_, previous) = read.open_secrets(&keys, before_end + 1).expect("opens");
        assert_eq!(previous, None, "the overlap has ended");
        // The sealed secret copied into another subscription's record does not open.
        let other = Subscription {
            id: "sub_000000000000000000000008".into(),
            signing_secret: read.signing_secret.clone(),
            ..sample()
        };
        let other = Subscription::decode(&other.encode()).expect("decode");
        assert_eq!(other.open_secrets(&keys, 0), Err(Unreadable));
        // Without the key, or under another one, nothing opens.
        assert_eq!(read.open_secrets(&SealKeys::default(), 0), Err(Unreadable));
        let wrong = SealKeys {
            current: Some(SealKey::new([2; 32])),
            previous: None,
        };
        assert_eq!(read.open_secrets(&wrong, 0), Err(Unreadable));
        let mut again = read.clone();
        assert_eq!(again.reseal(&wrong, &mut nonce), Err(Unreadable));
        assert_eq!(again, read, "unchanged");
    }
}
