//! What a soak run saw, as the ledger judges it: the subscriptions it created and the events
//! it published (with the wall-clock times around each call), the deliveries and attempts
//! as the operator API shows them, and the requests the receivers got.

use bytes::Bytes;
use serde::Deserialize;

/// How a subscription's receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Behavior {
    /// 200 at once.
    Ok,
    /// 500 at once.
    Status500,
    /// 503 at once.
    Status503,
    /// Nothing listens: the connection is refused.
    Refused,
    /// Answers only after the attempt timeout.
    Timeout,
}

impl Behavior {
    /// Every behavior, the healthy one first.
    pub const ALL: [Behavior; 5] = [
        Behavior::Ok,
        Behavior::Status500,
        Behavior::Status503,
        Behavior::Refused,
        Behavior::Timeout,
    ];
    /// The failing ones, in the order they are handed out.
    pub const FAILING: [Behavior; 4] = [
        Behavior::Status500,
        Behavior::Status503,
        Behavior::Refused,
        Behavior::Timeout,
    ];

    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Behavior::Ok => "200",
            Behavior::Status500 => "500",
            Behavior::Status503 => "503",
            Behavior::Refused => "refused",
            Behavior::Timeout => "timeout",
        }
    }

    /// Whether attempts to it fail.
    pub fn failing(self) -> bool {
        self != Behavior::Ok
    }

    /// Whether an attempt's request reaches the receiver.
    pub fn reaches(self) -> bool {
        self != Behavior::Refused
    }

    /// Whether an attempt's recorded outcome is what this receiver does.
    pub fn produced(self, a: &AttemptView) -> bool {
        match self {
            Behavior::Ok => a.status_code == Some(200) && a.succeeded,
            Behavior::Status500 => a.status_code == Some(500) && !a.succeeded,
            Behavior::Status503 => a.status_code == Some(503) && !a.succeeded,
            Behavior::Refused => {
                a.status_code.is_none() && a.error.as_deref() == Some("connection refused")
            }
            Behavior::Timeout => a.status_code.is_none() && a.error.as_deref() == Some("timeout"),
        }
    }
}

/// A subscription the soak created, with what it saw of its life (wall-clock ms).
#[derive(Debug, Clone)]
pub struct Sub {
    /// `sub_...`.
    pub id: String,
    /// How its receiver answers.
    pub behavior: Behavior,
    /// Its URL's path on the receiver (unique per subscription).
    pub path: String,
    /// Its signing secret, from the create response.
    pub secret: String,
    /// The event types it listens to.
    pub event_types: Vec<String>,
    /// When the create request was sent.
    pub created_sent_ms: u64,
    /// When its 201 arrived.
    pub created_resp_ms: u64,
    /// When the delete request was sent and when its 200 arrived, if the soak deleted it.
    pub deleted_ms: Option<(u64, u64)>,
    /// Its state at the end, read through the operator API.
    pub state: Option<SubState>,
}

/// A subscription's state as the operator API shows it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SubState {
    /// `active`, `disabled` (or `pending`).
    pub status: String,
    /// `deleted`, `repeated_failures`, `gone`, `operator`.
    pub disabled_reason: Option<String>,
    /// When it was disabled (the server's clock, ms; the start of the call that disabled it).
    pub disabled_at: Option<u64>,
}

/// An event the soak published.
#[derive(Debug, Clone)]
pub struct Event {
    /// `evt_...`.
    pub id: String,
    /// Its type.
    pub event_type: String,
    /// The load, as sent.
    pub body: Bytes,
    /// When the publish request was sent.
    pub sent_ms: u64,
    /// When its 202 arrived.
    pub resp_ms: u64,
    /// The number of deliveries the 202 announced.
    pub deliveries: u64,
}

/// One attempt, as the operator API shows it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AttemptView {
    /// 0 for the original run, 1.. for replays.
    pub run: u32,
    /// 1..=3 within the run.
    pub number: u32,
    /// When it was due (ms).
    pub due_at: u64,
    /// When it was sent (ms).
    pub started_at: u64,
    /// The receiver's status, if it answered.
    pub status_code: Option<u16>,
    /// The error, if it did not.
    pub error: Option<String>,
    /// Whether it counted as a success.
    pub succeeded: bool,
}

/// One delivery, as the operator API shows it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    /// `dlv_...`.
    pub id: String,
    /// Its event.
    pub event_id: String,
    /// Its event's type.
    pub event_type: String,
    /// Its subscription.
    pub subscription_id: String,
    /// `pending`, `succeeded`, `failed`, `cancelled`.
    pub status: String,
    /// When it was created (the event's publish time on the server).
    pub created_at: u64,
    /// When the next attempt is due, while pending.
    pub next_attempt_at: Option<u64>,
    /// Every attempt.
    pub attempts: Vec<AttemptView>,
    /// When the soak asked for this record (ms; 0 = unknown): the record shows the delivery
    /// as it was then, so it is judged as of then.
    #[serde(skip)]
    pub read_at_ms: u64,
}

/// One request a receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request path.
    pub path: String,
    /// `X-Service-Delivery-Id`.
    pub delivery_id: Option<String>,
    /// `X-Service-Event`.
    pub event_type: Option<String>,
    /// `X-Service-Timestamp`.
    pub timestamp: Option<String>,
    /// `X-Service-Signature`.
    pub signature: Option<String>,
    /// The raw body.
    pub body: Bytes,
    /// When it arrived (ms).
    pub at_ms: u64,
}
