//! Deliveries and events as stored: [`Delivery`] (`dlv:{id}`, one event to one
//! subscription, with every attempt), [`EventRecord`] (`evt:{id}`; the raw load is stored
//! beside it, never re-serialized) and the delivery id derived from (event, subscription).

use edgehook_storage::codec::{Reader, Writer};
use edgehook_storage::ids::{DeliveryId, EventId, SubscriptionId};
use edgehook_storage::kv::KvError;
use serde::Serialize;
#[cfg(test)]
use serde_json::json;
use sha2::{Digest, Sha256};

/// Where a delivery is in its life.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    /// An attempt is due now or later.
    Pending,
    /// An attempt got a 2xx.
    Succeeded,
    /// Every attempt of the run failed (or the endpoint answered 410 Gone).
    Failed,
    /// The subscription was disabled before the delivery finished.
    Cancelled,
    /// The subscription was disabled when the event was published: recorded, never
    /// attempted, so that it can be replayed once the subscription is enabled again.
    Skipped,
}

/// One attempt to deliver. Serialized (camelCase) with its [`error_class`] beside its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Run number: 0 for the original delivery, 1.. for replays.
    pub run: u32,
    /// Attempt number within the run (1..=3).
    pub number: u32,
    /// When it was due (ms since the epoch).
    pub due_at: u64,
    /// When it was sent.
    pub started_at: u64,
    /// The endpoint's status code, if it answered.
    pub status_code: Option<u16>,
    /// The network error or timeout, if it did not.
    pub error: Option<String>,
    /// Time to the response head, in ms.
    pub latency_ms: u64,
    /// Whether it counted as a success.
    pub succeeded: bool,
    /// The wait a 429 or 503 asked for with `Retry-After` (ms, at most an hour), which the
    /// next attempt honoured (since format 0xD2).
    pub retry_after_ms: Option<u64>,
}

/// A delivery: one event to one subscription. Stored binary ([`Delivery::encode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// `dlv_...`, fixed per (event, subscription).
    pub id: DeliveryId,
    /// The event.
    pub event_id: EventId,
    /// Its type (the `X-Service-Event` header).
    pub event_type: String,
    /// The subscription.
    pub subscription_id: SubscriptionId,
    /// When it was created.
    pub created_at: u64,
    /// Where it is in its life.
    pub status: Status,
    /// Every attempt, of every run.
    pub attempts: Vec<Attempt>,
    /// Current run (0 = original, 1.. = replays).
    pub run: u32,
    /// When the next attempt is due, while pending.
    pub next_attempt_at: Option<u64>,
    /// Until when an instance holds the attempt in flight.
    pub lease_until: Option<u64>,
    /// Which tick holds it.
    pub lease_owner: Option<String>,
    /// When it reached its final state.
    pub finished_at: Option<u64>,
}

/// First byte of a delivery record ([`Delivery::encode`]): its format's version.
pub const DELIVERY_V1: u8 = 0xD1;
/// The delivery record's format since attempts keep an honoured `Retry-After` (0xD1 is
/// still read, as attempts without one).
pub const DELIVERY_V2: u8 = 0xD2;

impl Status {
    fn code(self) -> u8 {
        match self {
            Status::Pending => 0,
            Status::Succeeded => 1,
            Status::Failed => 2,
            Status::Cancelled => 3,
            Status::Skipped => 4,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        [
            Status::Pending,
            Status::Succeeded,
            Status::Failed,
            Status::Cancelled,
            Status::Skipped,
        ]
        .get(usize::from(code))
        .copied()
    }
}

impl Delivery {
    /// The stored record: `DELIVERY_V1` (0xD1), then every field in declaration order (see
    /// [`edgehook_storage::codec`]), each attempt's fields in theirs. A delivery is written three times
    /// in its life at least (fan-out, claim, outcome), so it is copied rather than escaped.
    #[inline]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(DELIVERY_V2, 160 + 48 * self.attempts.len());
        w.str(&self.id)
            .str(&self.event_id)
            .str(&self.event_type)
            .str(&self.subscription_id)
            .u64(self.created_at)
            .u8(self.status.code())
            .list(&self.attempts, |w, a| {
                w.u32(a.run)
                    .u32(a.number)
                    .u64(a.due_at)
                    .u64(a.started_at)
                    .opt(a.status_code, Writer::u16)
                    .opt(a.error.as_deref(), Writer::str)
                    .u64(a.latency_ms)
                    .bool(a.succeeded)
                    .opt(a.retry_after_ms, Writer::u64)
            })
            .u32(self.run)
            .opt(self.next_attempt_at, Writer::u64)
            .opt(self.lease_until, Writer::u64)
            .opt(self.lease_owner.as_deref(), Writer::str)
            .opt(self.finished_at, Writer::u64);
        w.finish()
    }

    /// Reads a stored record ([`Delivery::encode`]). A damaged record is an error.
    pub fn decode(bytes: &[u8]) -> Result<Delivery, KvError> {
        Self::decode_binary(bytes).ok_or_else(|| KvError::Corrupt("delivery record".into()))
    }

    fn decode_binary(bytes: &[u8]) -> Option<Delivery> {
        let (mut r, v2) = match Reader::new(bytes, DELIVERY_V2) {
            Some(r) => (r, true),
            None => (Reader::new(bytes, DELIVERY_V1)?, false),
        };
        let (id, event_id, event_type, subscription_id) = (r.id()?, r.id()?, r.str()?, r.id()?);
        let created_at = r.u64()?;
        let status = Status::from_code(r.u8()?)?;
        let attempts = r.list(32, |r| {
            Some(Attempt {
                run: r.u32()?,
                number: r.u32()?,
                due_at: r.u64()?,
                started_at: r.u64()?,
                status_code: r.opt(Reader::u16)?,
                error: r.opt(Reader::str)?,
                latency_ms: r.u64()?,
                succeeded: r.bool()?,
                retry_after_ms: match v2 {
                    true => r.opt(Reader::u64)?,
                    false => None,
                },
            })
        })?;
        let d = Delivery {
            id,
            event_id,
            event_type,
            subscription_id,
            created_at,
            status,
            attempts,
            run: r.u32()?,
            next_attempt_at: r.opt(Reader::u64)?,
            lease_until: r.opt(Reader::u64)?,
            lease_owner: r.opt(Reader::str)?,
            finished_at: r.opt(Reader::u64)?,
        };
        r.end()?;
        Some(d)
    }

    /// How many attempts the current run has made.
    pub fn attempts_in_run(&self) -> usize {
        self.attempts.iter().filter(|a| a.run == self.run).count()
    }

    /// The operator view (`Delivery` in the OpenAPI document).
    pub fn view(&self) -> DeliveryView<'_> {
        DeliveryView {
            attempts: &self.attempts,
            created_at: self.created_at,
            event_id: &self.event_id,
            event_type: &self.event_type,
            finished_at: self.finished_at,
            id: &self.id,
            next_attempt_at: self.next_attempt_at,
            replays: self.run,
            status: self.status,
            subscription_id: &self.subscription_id,
        }
    }
}

/// A delivery as the operator API shows it ([`Delivery::view`]). Written from the record
/// directly, never through a `serde_json::Value` (the component is size-budgeted); the
/// fields are in the order the view always had (alphabetical).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView<'a> {
    attempts: &'a [Attempt],
    created_at: u64,
    event_id: &'a str,
    event_type: &'a str,
    finished_at: Option<u64>,
    id: &'a str,
    next_attempt_at: Option<u64>,
    replays: u32,
    status: Status,
    subscription_id: &'a str,
}

impl Serialize for Attempt {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let mut st = s.serialize_struct("Attempt", 9)?;
        st.serialize_field("run", &self.run)?;
        st.serialize_field("number", &self.number)?;
        st.serialize_field("dueAt", &self.due_at)?;
        st.serialize_field("startedAt", &self.started_at)?;
        st.serialize_field("statusCode", &self.status_code)?;
        st.serialize_field("error", &self.error)?;
        st.serialize_field(
            "errorClass",
            &error_class(self.status_code, self.error.as_deref()),
        )?;
        st.serialize_field("latencyMs", &self.latency_ms)?;
        match self.retry_after_ms {
            Some(ms) => st.serialize_field("retryAfterMs", &ms)?,
            None => st.skip_field("retryAfterMs")?,
        }
        st.serialize_field("succeeded", &self.succeeded)?;
        st.end()
    }
}

/// Why an attempt got no answer. Stored in an [`Attempt`] as its [`SendError::as_str`] text,
/// which the API shows (`error`) beside the error's class (`errorClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// No response head within the attempt timeout.
    Timeout,
    /// The receiver refused the connection.
    ConnectionRefused,
    /// The connection was closed or reset before an answer.
    ConnectionReset,
    /// The receiver's name does not resolve.
    HostNotFound,
    /// Name resolution failed or timed out.
    Dns,
    /// The TLS handshake or the receiver's certificate failed.
    Tls,
    /// The URL policy or the host refused the target (SSRF rules): never sent.
    DestinationRefused,
    /// The subscription's signing secret opens under neither sealing key (the settings'
    /// `seal_key`, `seal_previous_key`): never sent, rather than sent unsigned or mis-signed.
    SecretUnreadable,
    /// Anything else: the request could not be made, or its answer not read (the text says
    /// which).
    Other(&'static str),
}

impl SendError {
    /// The errors with a class of their own, for reading stored texts back.
    const CLASSED: [SendError; 8] = [
        SendError::Timeout,
        SendError::ConnectionRefused,
        SendError::ConnectionReset,
        SendError::HostNotFound,
        SendError::Dns,
        SendError::Tls,
        SendError::DestinationRefused,
        SendError::SecretUnreadable,
    ];

    /// The text stored in an attempt and shown by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            SendError::Timeout => "timeout",
            SendError::ConnectionRefused => "connection refused",
            SendError::ConnectionReset => "connection reset",
            SendError::HostNotFound => "host not found",
            SendError::Dns => "dns error",
            SendError::Tls => "tls error",
            SendError::DestinationRefused => "destination not allowed",
            SendError::SecretUnreadable => "signing secret unreadable",
            SendError::Other(text) => text,
        }
    }

    /// Its class, for people and alerts to group by: `timeout`, `connection` (refused,
    /// reset, not found, DNS), `tls`, `destination_refused`, `secret_unreadable` or `other`.
    pub fn class(self) -> &'static str {
        match self {
            SendError::Timeout => "timeout",
            SendError::ConnectionRefused
            | SendError::ConnectionReset
            | SendError::HostNotFound
            | SendError::Dns => "connection",
            SendError::Tls => "tls",
            SendError::DestinationRefused => "destination_refused",
            SendError::SecretUnreadable => "secret_unreadable",
            SendError::Other(_) => "other",
        }
    }

    /// The error a stored text names, [`SendError::Other`] for any other text.
    pub fn from_stored(text: &str) -> SendError {
        Self::CLASSED
            .into_iter()
            .find(|e| e.as_str() == text)
            .unwrap_or(SendError::Other("other"))
    }
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The class of an attempt's failure: `http_status` (the receiver answered, not 2xx), or
/// its [`SendError::class`]. `None` for a 2xx answer.
pub fn error_class(status_code: Option<u16>, error: Option<&str>) -> Option<&'static str> {
    match (status_code, error) {
        (Some(code), _) if (200..300).contains(&code) => None,
        (Some(_), _) => Some("http_status"),
        (None, error) => Some(SendError::from_stored(error.unwrap_or_default()).class()),
    }
}

/// A published event, as stored (`evt:{id}`; its body is stored beside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// `evt_...`.
    pub id: EventId,
    /// One of [`edgehook_model::events::EVENT_TYPES`].
    pub event_type: String,
    /// When it was accepted (ms since the epoch).
    pub created_at: u64,
    /// Hex SHA-256 of the load: a retry under the same idempotency key must carry the same.
    pub body_sha256: String,
    /// The subscriptions it is delivered to (one delivery each).
    pub subscriptions: Vec<SubscriptionId>,
    /// Whether every delivery has been created.
    pub fanned_out: bool,
    /// The disabled subscriptions listening to its type when it was published: each has a
    /// delivery too, in status [`Status::Skipped`], never attempted but replayable.
    pub skipped: Vec<SubscriptionId>,
    /// The W3C `traceparent` its publish came with (`edgehook_model::trace`): its attempts
    /// name it.
    pub trace: Option<String>,
}

/// First byte of an event record ([`EventRecord::encode`]): its format's version.
pub const EVENT_V1: u8 = 0xE5;

/// First byte of an event record that names skipped subscriptions: [`EVENT_V1`] and then the
/// list. An event without any is still written as [`EVENT_V1`], byte for byte as before.
pub const EVENT_V2: u8 = 0xE6;

/// First byte of an event record with a trace context: [`EVENT_V2`]'s fields (the skipped
/// list, maybe empty) and then the `traceparent`. An event without one is written as before.
pub const EVENT_V3: u8 = 0xE7;

impl EventRecord {
    /// The stored record: `EVENT_V1`, then every field in declaration order (see
    /// [`edgehook_storage::codec`]); `EVENT_V2` when `skipped` is not empty (then with it at
    /// the end). Every publish writes one.
    #[inline]
    pub fn encode(&self) -> Vec<u8> {
        let version = match (self.skipped.is_empty(), &self.trace) {
            (_, Some(_)) => EVENT_V3,
            (true, None) => EVENT_V1,
            (false, None) => EVENT_V2,
        };
        let capacity = 128 + 32 * (self.subscriptions.len() + self.skipped.len());
        let mut w = Writer::new(version, capacity);
        w.str(&self.id)
            .str(&self.event_type)
            .u64(self.created_at)
            .str(&self.body_sha256)
            .list(&self.subscriptions, |w, s| w.str(s))
            .bool(self.fanned_out);
        if version != EVENT_V1 {
            w.list(&self.skipped, |w, s| w.str(s));
        }
        if let Some(trace) = &self.trace {
            w.str(trace);
        }
        w.finish()
    }

    /// Every subscription the event has a delivery for: those it is delivered to, then the
    /// skipped ones.
    pub fn all_subscriptions(&self) -> impl Iterator<Item = &SubscriptionId> {
        self.subscriptions.iter().chain(&self.skipped)
    }

    /// Reads a stored record ([`EventRecord::encode`]). Damage is an error.
    pub fn decode(bytes: &[u8]) -> Result<EventRecord, KvError> {
        Self::decode_binary(bytes).ok_or_else(|| KvError::Corrupt("event record".into()))
    }

    fn decode_binary(bytes: &[u8]) -> Option<EventRecord> {
        let (mut r, version) = [EVENT_V3, EVENT_V2, EVENT_V1]
            .into_iter()
            .find_map(|v| Reader::new(bytes, v).map(|r| (r, v)))?;
        let v2 = version != EVENT_V1;
        let (id, event_type, created_at, body_sha256) = (r.id()?, r.str()?, r.u64()?, r.str()?);
        let subscriptions = r.list(4, Reader::id)?;
        let fanned_out = r.bool()?;
        let skipped = match v2 {
            true => r.list(4, Reader::id)?,
            false => Vec::new(),
        };
        let trace = match version == EVENT_V3 {
            true => Some(r.str()?),
            false => None,
        };
        let event = EventRecord {
            id,
            event_type,
            created_at,
            body_sha256,
            subscriptions,
            fanned_out,
            skipped,
            trace,
        };
        r.end()?;
        Some(event)
    }
}

/// The delivery id of (event, subscription).
#[inline]
pub fn delivery_id(event_id: &EventId, subscription_id: &SubscriptionId) -> DeliveryId {
    let digest = Sha256::new()
        .chain_update(event_id.as_str())
        .chain_update("/")
        .chain_update(subscription_id.as_str())
        .finalize();
    let mut id = String::from("dlv_");
    edgehook_model::ids::push_hex(&mut id, &digest[..12]);
    DeliveryId::trusted(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A delivery with every kind of field set: answered and unanswered attempts of two
    /// runs, a lease, no finish.
    fn full_delivery() -> Delivery {
        let attempt = |run, number, status_code, error: Option<&str>| Attempt {
            run,
            number,
            due_at: 1_767_225_600_000 + u64::from(number),
            started_at: 1_767_225_600_500,
            status_code,
            error: error.map(str::to_owned),
            latency_ms: 12,
            succeeded: status_code == Some(204),
            retry_after_ms: None,
        };
        Delivery {
            id: delivery_id(&"evt_a".into(), &"sub_b".into()),
            event_id: "evt_a".into(),
            event_type: "load.status_changed".into(),
            subscription_id: "sub_b".into(),
            created_at: 1_767_225_600_000,
            status: Status::Pending,
            attempts: vec![
                attempt(0, 1, None, Some("connection refused")),
                attempt(0, 2, Some(503), None),
                attempt(0, 3, Some(204), None),
                attempt(1, 1, None, Some("timeout \"é\"")),
            ],
            run: 1,
            next_attempt_at: Some(1_767_225_660_000),
            lease_until: Some(1_767_225_675_000),
            lease_owner: Some("tick_1".into()),
            finished_at: None,
        }
    }

    #[test]
    fn a_delivery_record_is_binary_and_reads_back_whole() {
        for status in [
            Status::Pending,
            Status::Succeeded,
            Status::Failed,
            Status::Cancelled,
            Status::Skipped,
        ] {
            let mut d = full_delivery();
            d.status = status;
            let bytes = d.encode();
            assert_eq!(bytes[0], DELIVERY_V2);
            assert_eq!(Delivery::decode(&bytes), Ok(d));
        }
        let bare = Delivery {
            attempts: Vec::new(),
            next_attempt_at: None,
            lease_until: None,
            lease_owner: None,
            finished_at: Some(5),
            ..full_delivery()
        };
        assert_eq!(Delivery::decode(&bare.encode()), Ok(bare));
    }

    /// A record of the format before `retryAfterMs` (0xD1) still reads: the same fields,
    /// each attempt without the wait; a wait in the current format reads back.
    #[test]
    fn a_delivery_record_of_the_format_before_reads_back() {
        let mut d = full_delivery();
        let v2 = d.encode();
        // 0xD1 is 0xD2 without each attempt's last field (`None`: one tag byte).
        let mut v1 = Vec::new();
        let mut w = edgehook_storage::codec::Writer::new(DELIVERY_V1, 0);
        w.str(&d.id)
            .str(&d.event_id)
            .str(&d.event_type)
            .str(&d.subscription_id)
            .u64(d.created_at)
            .u8(d.status.code())
            .list(&d.attempts, |w, a| {
                w.u32(a.run)
                    .u32(a.number)
                    .u64(a.due_at)
                    .u64(a.started_at)
                    .opt(a.status_code, edgehook_storage::codec::Writer::u16)
                    .opt(a.error.as_deref(), edgehook_storage::codec::Writer::str)
                    .u64(a.latency_ms)
                    .bool(a.succeeded)
            })
            .u32(d.run)
            .opt(d.next_attempt_at, edgehook_storage::codec::Writer::u64)
            .opt(d.lease_until, edgehook_storage::codec::Writer::u64)
            .opt(
                d.lease_owner.as_deref(),
                edgehook_storage::codec::Writer::str,
            )
            .opt(d.finished_at, edgehook_storage::codec::Writer::u64);
        v1.extend(w.finish());
        assert_eq!(v1.len() + d.attempts.len(), v2.len());
        assert_eq!(Delivery::decode(&v1), Ok(d.clone()));
        d.attempts[0].retry_after_ms = Some(120_000);
        assert_eq!(Delivery::decode(&d.encode()), Ok(d));
    }

    #[test]
    fn a_damaged_delivery_record_is_an_error_not_a_panic_or_a_guess() {
        let bytes = full_delivery().encode();
        edgehook_storage::codec::assert_only_whole_records_read(&bytes, |b| {
            Delivery::decode(b).is_ok()
        });
        // An unknown status, and an attempt count far beyond what the record holds: the
        // status byte follows the version, four strings (length + bytes) and `created_at`.
        let d = full_delivery();
        let strings = [
            d.id.as_str(),
            &d.event_id,
            &d.event_type,
            &d.subscription_id,
        ];
        let status_at = 1 + strings.iter().map(|s| 4 + s.len()).sum::<usize>() + 8;
        assert_eq!(bytes[status_at], Status::Pending.code());
        assert_eq!(bytes[status_at + 1], 4, "four attempts");
        let mut bad = bytes.clone();
        bad[status_at] = 9;
        assert!(Delivery::decode(&bad).is_err(), "status 9");
        let mut many = bytes.clone();
        many[status_at + 1..status_at + 5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Delivery::decode(&many).is_err(), "u32::MAX attempts");
        assert!(Delivery::decode(b"{\"id\":").is_err(), "broken JSON");
    }

    fn sample_event() -> EventRecord {
        EventRecord {
            id: "evt_0123456789abcdef01234567".into(),
            event_type: "load.status_changed".into(),
            created_at: 1_767_225_600_123,
            body_sha256: "ab".repeat(32),
            subscriptions: vec!["sub_a".into(), "sub_é".into(), "".into()],
            fanned_out: true,
            skipped: Vec::new(),
            trace: None,
        }
    }

    /// An event with skipped subscriptions is `EVENT_V2`, reads back whole, and lists every
    /// subscription it has a delivery for; one without is the `EVENT_V1` bytes of before.
    #[test]
    fn an_event_record_with_skipped_subscriptions_reads_back_whole() {
        let event = EventRecord {
            skipped: vec!["sub_d".into(), "sub_e".into()],
            ..sample_event()
        };
        let bytes = event.encode();
        assert_eq!(bytes[0], EVENT_V2);
        assert_eq!(EventRecord::decode(&bytes), Ok(event.clone()));
        edgehook_storage::codec::assert_only_whole_records_read(&bytes, |b| {
            EventRecord::decode(b).is_ok()
        });
        let all: Vec<&str> = event.all_subscriptions().map(|s| s.as_str()).collect();
        assert_eq!(all, ["sub_a", "sub_é", "", "sub_d", "sub_e"]);
        // Without skipped ones: version 1, and the version 2 bytes cut at the flag are not
        // taken for a version 1 record.
        let plain = sample_event().encode();
        assert_eq!(plain[0], EVENT_V1);
        assert_eq!(&plain[1..], &bytes[1..plain.len()]);
        let mut cut = bytes[..plain.len()].to_vec();
        assert!(EventRecord::decode(&cut).is_err(), "v2 without its list");
        cut[0] = EVENT_V1;
        assert_eq!(EventRecord::decode(&cut), Ok(sample_event()));
    }

    /// An event with a trace context is `EVENT_V3` (with or without skipped ones) and reads
    /// back whole; a version 3 record cut before its context is damage.
    #[test]
    fn an_event_record_with_a_trace_context_reads_back_whole() {
        let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        for skipped in [vec![], vec!["sub_d".into()]] {
            let event = EventRecord {
                skipped,
                trace: Some(trace.into()),
                ..sample_event()
            };
            let bytes = event.encode();
            assert_eq!(bytes[0], EVENT_V3);
            assert_eq!(EventRecord::decode(&bytes), Ok(event));
            edgehook_storage::codec::assert_only_whole_records_read(&bytes, |b| {
                EventRecord::decode(b).is_ok()
            });
        }
    }

    #[test]
    fn an_event_record_reads_back_and_damage_is_an_error() {
        let event = sample_event();
        let bytes = event.encode();
        assert_eq!(bytes[0], EVENT_V1);
        assert_eq!(EventRecord::decode(&bytes), Ok(event.clone()));
        edgehook_storage::codec::assert_only_whole_records_read(&bytes, |b| {
            EventRecord::decode(b).is_ok()
        });
        // The flag is the last byte; a count of subscriptions beyond what the record holds.
        let mut bad = bytes.clone();
        *bad.last_mut().expect("flag") = 2;
        assert!(EventRecord::decode(&bad).is_err(), "flag 2");
        let count_at = 1 + (4 + event.id.len()) + (4 + event.event_type.len()) + 8 + (4 + 64);
        assert_eq!(bytes[count_at], 3);
        let mut many = bytes.clone();
        many[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            EventRecord::decode(&many).is_err(),
            "u32::MAX subscriptions"
        );
    }

    /// Every error text the shell gives an attempt has its class; a 2xx has none.
    #[test]
    fn error_classes() {
        let class = |code, error| error_class(code, error);
        assert_eq!(class(Some(204), None), None);
        assert_eq!(class(Some(301), None), Some("http_status"));
        assert_eq!(class(Some(503), None), Some("http_status"));
        for (error, expected) in [
            ("timeout", "timeout"),
            ("connection refused", "connection"),
            ("connection reset", "connection"),
            ("host not found", "connection"),
            ("dns error", "connection"),
            ("tls error", "tls"),
            ("destination not allowed", "destination_refused"),
            ("signing secret unreadable", "secret_unreadable"),
            ("http error", "other"),
            ("invalid header", "other"),
        ] {
            assert_eq!(class(None, Some(error)), Some(expected), "{error}");
        }
        let attempt = json!(full_delivery().attempts[0]);
        assert!(attempt.get("errorClass").is_some(), "{attempt}");
    }

    /// Record codecs round-trip any record, however many subscriptions an event fans out
    /// to (its size hint must not underflow for a large fan-out).
    #[test]
    fn an_event_record_with_a_large_fan_out_reads_back_whole() {
        let event = EventRecord {
            subscriptions: (0..1_000).map(|n| format!("sub_{n:024x}").into()).collect(),
            ..sample_event()
        };
        let bytes = event.encode();
        assert_eq!(EventRecord::decode(&bytes), Ok(event));
    }

    /// Only the binary formats are read: event and delivery records in the JSON no release
    /// wrote are damage (an error, never a guess).
    #[test]
    fn records_in_another_format_are_not_read() {
        let event = format!(
            r#"{{"id":"evt_0123456789abcdef01234567","eventType":"load.created","createdAt":1,"bodySha256":"{}","subscriptions":[],"fannedOut":true}}"#,
            "ab".repeat(32)
        );
        assert!(EventRecord::decode(event.as_bytes()).is_err());
        let delivery = r#"{"id":"dlv_1","eventId":"evt_1","eventType":"load.created","subscriptionId":"sub_1","createdAt":1,"status":"pending","attempts":[],"run":0,"nextAttemptAt":1,"leaseUntil":null,"leaseOwner":null,"finishedAt":null}"#;
        assert!(Delivery::decode(delivery.as_bytes()).is_err());
    }
}
