//! The ledger of a soak run: every published event against every subscription, every
//! delivery against what the receivers got. A pure function of a snapshot, so it is tested
//! with made-up data (see the tests below) and run on the real one by [`crate::run`].
//!
//! What it checks, per delivery (read through the operator API):
//! - it belongs to a known event and subscription, once per (event, subscription), and every
//!   event has exactly as many deliveries as its publish answer said;
//! - a subscription certainly active while an event was published has a delivery for it, and
//!   one certainly not active has none;
//! - it is in exactly one of: succeeded; failed after 3 attempts; pending with its next
//!   attempt scheduled; pending while its subscription is disabled (cancelled when due);
//!   cancelled because its subscription was disabled;
//! - at most 3 attempts, numbered 1, 2, 3, attempt 1 due at publish time, each retry due
//!   60 s (then 300 s) + up to 10 % after the failure before it;
//! - every attempt's outcome is what its receiver does (200, 500, 503, refused, timeout); a
//!   200 receiver's deliveries succeeded, a failing receiver's never did;
//! - the receiver got exactly one request per attempt that reaches it (none when refused),
//!   each with the right path, event header and body, and a signature that verifies under the
//!   subscription's secret (checked by [`edgehook::listen::verify`], hmac + sha2, not the
//!   component's code).
//!
//! Per subscription: one disabled for repeated failures has at least `disable_after` failed
//! deliveries, an active one fewer; a 200 receiver is never disabled but by its owner.

use bytes::Bytes;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet};

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
    fn reaches(self) -> bool {
        self != Behavior::Refused
    }

    /// Whether an attempt's recorded outcome is what this receiver does.
    fn produced(self, a: &AttemptView) -> bool {
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

/// The service's fixed rules the ledger holds deliveries to.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Attempts per run.
    pub max_attempts: usize,
    /// Delay before attempt 2 and attempt 3.
    pub retry_delays_ms: [u64; 2],
    /// Failed deliveries in a row that disable a subscription.
    pub disable_after: usize,
    /// How late a due attempt may be at collection time before it counts as overdue (an
    /// attempt may be in flight: the attempt timeout plus a margin).
    pub overdue_slack_ms: u64,
    /// How far a delivery's timestamp may be from its arrival for the signature check (what
    /// a receiver accepts).
    pub timestamp_tolerance_s: u64,
    /// How old a timestamp may be on arrival: an attempt is signed as it is sent.
    pub fresh_timestamp_s: u64,
    /// How long after `disabledAt` a publish may still reach an automatically disabled
    /// subscription: `disabledAt` is when the disabling call (a tick, which can run for many
    /// attempt timeouts) started, not when the disable committed.
    pub disable_commit_slack_ms: u64,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            max_attempts: 3,
            retry_delays_ms: [60_000, 300_000],
            disable_after: 5,
            overdue_slack_ms: 15_000,
            timestamp_tolerance_s: 300,
            fresh_timestamp_s: 5,
            disable_commit_slack_ms: 30_000,
        }
    }
}

/// Where a delivery ended up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    /// An attempt got a 2xx.
    Succeeded,
    /// Every attempt failed.
    Failed,
    /// Waiting for its next attempt.
    Pending,
    /// Waiting, but its subscription is disabled: cancelled when due.
    PendingDisabled,
    /// Cancelled because its subscription was disabled.
    Cancelled,
}

impl State {
    /// Every state, in report order.
    pub const ALL: [State; 5] = [
        State::Succeeded,
        State::Failed,
        State::Pending,
        State::PendingDisabled,
        State::Cancelled,
    ];

    /// How the report names it.
    pub fn name(self) -> &'static str {
        match self {
            State::Succeeded => "succeeded",
            State::Failed => "failed after 3 attempts",
            State::Pending => "pending, next attempt scheduled",
            State::PendingDisabled => "pending, subscription disabled (cancelled when due)",
            State::Cancelled => "cancelled, subscription disabled",
        }
    }
}

/// A problem the ledger found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Its kind (the report groups by it).
    pub kind: &'static str,
    /// What is wrong.
    pub detail: String,
    /// The delivery to read again if the problem may be a snapshot taken mid-attempt.
    pub recheck: Option<String>,
}

/// Kinds of problem a snapshot taken while an attempt was in flight can show; the runner
/// reads those deliveries again before it believes them.
pub const TRANSIENT: [&str; 3] = ["receiver count", "overdue", "disable rule"];

/// What the ledger found.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    /// Events published (each once, replays not counted).
    pub events: usize,
    /// Deliveries announced by the publish answers.
    pub announced: u64,
    /// Deliveries found.
    pub deliveries: usize,
    /// Deliveries per state.
    pub by_state: BTreeMap<State, usize>,
    /// Deliveries per receiver behavior and state.
    pub by_behavior: BTreeMap<(Behavior, State), usize>,
    /// Attempts recorded, by attempt number (index 0 = attempt 1).
    pub attempts: [usize; 3],
    /// Requests the receivers got.
    pub received: usize,
    /// How late attempts started after they were due (ms), by attempt number.
    pub lateness_ms: [Vec<u64>; 3],
    /// Time between consecutive requests of one delivery at its receiver (ms): attempt 1 to
    /// 2, attempt 2 to 3.
    pub retry_gap_ms: [Vec<u64>; 2],
    /// Subscriptions per final status (and disable reason).
    pub subscriptions: BTreeMap<String, usize>,
    /// Every problem.
    pub problems: Vec<Problem>,
}

impl Ledger {
    fn problem(&mut self, kind: &'static str, detail: String, recheck: Option<&str>) {
        self.problems.push(Problem {
            kind,
            detail,
            recheck: recheck.map(str::to_owned),
        });
    }

    /// Problems per kind.
    pub fn problem_counts(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for p in &self.problems {
            *out.entry(p.kind).or_default() += 1;
        }
        out
    }
}

/// Whether `sub` was certainly active while `event` was being published, certainly not, or
/// either (created, deleted or disabled while the publish was in flight).
fn exposure(sub: &Sub, event: &Event, rules: &Rules) -> Option<bool> {
    if !sub.event_types.contains(&event.event_type) {
        return Some(false);
    }
    let state = sub.state.as_ref();
    let auto_disabled_at = state
        .filter(|s| s.disabled_reason.as_deref() != Some("deleted"))
        .and_then(|s| s.disabled_at);
    // Certainly active: created before the publish was sent, not yet being deleted or
    // disabled when its answer came.
    let active_from = sub.created_resp_ms;
    let active_until = [sub.deleted_ms.map(|(sent, _)| sent), auto_disabled_at]
        .into_iter()
        .flatten()
        .min();
    if active_from <= event.sent_ms && active_until.is_none_or(|u| u > event.resp_ms) {
        return Some(true);
    }
    // Certainly inactive: created after the answer, or gone before the request was sent.
    let gone_by = [
        sub.deleted_ms.map(|(_, resp)| resp),
        auto_disabled_at.map(|d| d + rules.disable_commit_slack_ms),
    ]
    .into_iter()
    .flatten()
    .min();
    if sub.created_sent_ms >= event.resp_ms || gone_by.is_some_and(|g| g <= event.sent_ms) {
        return Some(false);
    }
    None
}

/// Classifies one delivery, or says why it fits no state.
fn classify(d: &DeliveryView, disabled: bool, now_ms: u64, rules: &Rules) -> Result<State, String> {
    let n = d.attempts.len();
    let all_failed = d.attempts.iter().all(|a| !a.succeeded);
    match d.status.as_str() {
        "succeeded" => {
            let ok = d.attempts.last().is_some_and(|a| a.succeeded)
                && d.attempts[..n - 1].iter().all(|a| !a.succeeded);
            ok.then_some(State::Succeeded)
                .ok_or_else(|| "succeeded, but its last attempt did not".to_owned())
        }
        "failed" if n == rules.max_attempts && all_failed => Ok(State::Failed),
        "failed" => Err(format!("failed after {n} attempts")),
        "pending" => {
            if !all_failed || n >= rules.max_attempts {
                return Err(format!("pending after {n} attempts"));
            }
            let Some(next) = d.next_attempt_at else {
                return Err("pending with no next attempt".into());
            };
            if next + rules.overdue_slack_ms < now_ms {
                return Err(format!(
                    "overdue: attempt {} was due {} s ago",
                    n + 1,
                    (now_ms - next) / 1000
                ));
            }
            Ok(if disabled {
                State::PendingDisabled
            } else {
                State::Pending
            })
        }
        "cancelled" if disabled && all_failed => Ok(State::Cancelled),
        "cancelled" => Err("cancelled while its subscription is active".into()),
        other => Err(format!("unknown status {other:?}")),
    }
}

/// Checks a snapshot. `deliveries` are every delivery of every subscription in `subs`;
/// `received` everything the receivers got; `now_ms` when the snapshot was taken.
pub fn check(
    subs: &[Sub],
    events: &[Event],
    deliveries: &BTreeMap<String, DeliveryView>,
    received: &[Received],
    now_ms: u64,
    rules: &Rules,
) -> Ledger {
    let mut ledger = Ledger {
        events: events.len(),
        announced: events.iter().map(|e| e.deliveries).sum(),
        deliveries: deliveries.len(),
        received: received.len(),
        ..Ledger::default()
    };
    let sub_by_id: HashMap<&str, &Sub> = subs.iter().map(|s| (s.id.as_str(), s)).collect();
    let event_by_id: HashMap<&str, &Event> = events.iter().map(|e| (e.id.as_str(), e)).collect();
    let mut by_delivery: HashMap<&str, Vec<&Received>> = HashMap::new();
    for r in received {
        match r.delivery_id.as_deref() {
            Some(id) if deliveries.contains_key(id) => by_delivery.entry(id).or_default().push(r),
            other => ledger.problem(
                "unknown delivery received",
                format!("{} got delivery id {other:?}", r.path),
                None,
            ),
        }
    }
    let mut pairs: HashSet<(&str, &str)> = HashSet::new();
    let mut per_event: HashMap<&str, u64> = HashMap::new();
    let mut failed_per_sub: HashMap<&str, usize> = HashMap::new();
    for d in deliveries.values() {
        let recheck = Some(d.id.as_str());
        let Some(sub) = sub_by_id.get(d.subscription_id.as_str()) else {
            ledger.problem(
                "unknown subscription",
                format!("{} is for {}", d.id, d.subscription_id),
                None,
            );
            continue;
        };
        let Some(event) = event_by_id.get(d.event_id.as_str()) else {
            ledger.problem(
                "unknown event",
                format!("{} is for {}", d.id, d.event_id),
                None,
            );
            continue;
        };
        if !pairs.insert((event.id.as_str(), sub.id.as_str())) {
            ledger.problem(
                "duplicate delivery",
                format!("{} to {} twice", event.id, sub.id),
                None,
            );
        }
        *per_event.entry(event.id.as_str()).or_default() += 1;
        if d.event_type != event.event_type {
            ledger.problem(
                "event type",
                format!("{} says {}, event {}", d.id, d.event_type, event.event_type),
                None,
            );
        }
        if exposure(sub, event, rules) == Some(false) {
            ledger.problem(
                "unexpected delivery",
                format!(
                    "{} to {} (not listening or not active at publish)",
                    event.id, sub.id
                ),
                None,
            );
        }
        if d.attempts.len() > rules.max_attempts {
            ledger.problem(
                "too many attempts",
                format!("{}: {}", d.id, d.attempts.len()),
                None,
            );
        }
        let disabled = sub.state.as_ref().is_some_and(|s| s.status == "disabled");
        let read_at = if d.read_at_ms > 0 {
            d.read_at_ms
        } else {
            now_ms
        };
        let state = match classify(d, disabled, read_at, rules) {
            Ok(state) => state,
            Err(why) => {
                let kind = if why.starts_with("overdue") {
                    "overdue"
                } else {
                    "state"
                };
                ledger.problem(
                    kind,
                    format!("{} ({}): {why}", d.id, sub.behavior.name()),
                    recheck,
                );
                continue;
            }
        };
        *ledger.by_state.entry(state).or_default() += 1;
        *ledger.by_behavior.entry((sub.behavior, state)).or_default() += 1;
        if state == State::Failed {
            *failed_per_sub.entry(sub.id.as_str()).or_default() += 1;
        }
        // Attempts: numbered, on schedule, with the receiver's outcome.
        for (i, a) in d.attempts.iter().enumerate() {
            if let Some(slot) = ledger.attempts.get_mut(i) {
                *slot += 1;
            }
            if let Some(late) = ledger.lateness_ms.get_mut(i) {
                late.push(a.started_at.saturating_sub(a.due_at));
            }
            if a.run != 0 || a.number as usize != i + 1 {
                ledger.problem(
                    "attempt numbering",
                    format!("{}: run {} number {} at {}", d.id, a.run, a.number, i + 1),
                    None,
                );
            }
            if !sub.behavior.produced(a) {
                ledger.problem(
                    "attempt outcome",
                    format!(
                        "{} attempt {} to a {} receiver: status {:?} error {:?}",
                        d.id,
                        i + 1,
                        sub.behavior.name(),
                        a.status_code,
                        a.error
                    ),
                    None,
                );
            }
        }
        let mut due_times: Vec<u64> = d.attempts.iter().map(|a| a.due_at).collect();
        due_times.extend(d.next_attempt_at.filter(|_| state == State::Pending));
        for (i, due) in due_times.iter().enumerate() {
            let ok = match i {
                0 => *due == d.created_at,
                _ => {
                    let delay = rules.retry_delays_ms.get(i - 1).copied().unwrap_or(0);
                    let failed_at = d.attempts[i - 1].started_at;
                    (failed_at + delay..=failed_at + delay + delay / 10 + 1000).contains(due)
                }
            };
            if !ok {
                ledger.problem(
                    "off schedule",
                    format!("{}: attempt {} due at {due}", d.id, i + 1),
                    None,
                );
            }
        }
        match (sub.behavior.failing(), state) {
            (false, State::Succeeded | State::Cancelled) | (true, _) => {}
            (false, other) => ledger.problem(
                "200 receiver not succeeded",
                format!("{} is {}", d.id, other.name()),
                recheck,
            ),
        }
        if sub.behavior.failing() && state == State::Succeeded {
            ledger.problem(
                "failing receiver succeeded",
                format!("{} ({})", d.id, sub.behavior.name()),
                None,
            );
        }
        // What the receiver got for it, up to when the record was read (a request that
        // arrived later belongs to an attempt the record cannot show yet).
        let got = by_delivery
            .get(d.id.as_str())
            .map_or(&[][..], Vec::as_slice);
        let got_by_read = got.iter().filter(|r| r.at_ms <= read_at).count();
        let expected = if sub.behavior.reaches() {
            d.attempts.len()
        } else {
            0
        };
        if got_by_read != expected {
            ledger.problem(
                "receiver count",
                format!(
                    "{} ({}): {} attempts recorded (sent at {:?}), {} requests received by \
                     {read_at} (at {:?})",
                    d.id,
                    sub.behavior.name(),
                    d.attempts.len(),
                    d.attempts.iter().map(|a| a.started_at).collect::<Vec<_>>(),
                    got_by_read,
                    got.iter().map(|r| r.at_ms).collect::<Vec<_>>()
                ),
                recheck,
            );
        }
        for r in got {
            if r.path != sub.path {
                ledger.problem(
                    "path",
                    format!("{} arrived at {}, not {}", d.id, r.path, sub.path),
                    None,
                );
            }
            if r.event_type.as_deref() != Some(event.event_type.as_str()) {
                ledger.problem(
                    "event header",
                    format!("{}: X-Service-Event {:?}", d.id, r.event_type),
                    None,
                );
            }
            if r.body != event.body {
                ledger.problem(
                    "body",
                    format!("{}: the body is not the published bytes", d.id),
                    None,
                );
            }
            if let Err(refusal) = edgehook::listen::verify(
                &sub.secret,
                r.timestamp.as_deref(),
                r.signature.as_deref(),
                &r.body,
                r.at_ms / 1000,
                rules.timestamp_tolerance_s,
            ) {
                ledger.problem("signature", format!("{}: {refusal:?}", d.id), None);
            }
            // Each attempt is signed when it is sent: its timestamp is the time it left.
            let fresh = r.timestamp.as_deref().and_then(|t| t.parse::<u64>().ok());
            if fresh.is_none_or(|ts| {
                ts > r.at_ms / 1000 + 1 || r.at_ms / 1000 > ts + rules.fresh_timestamp_s
            }) {
                ledger.problem(
                    "stale timestamp",
                    format!(
                        "{}: X-Service-Timestamp {:?} arrived at {} s",
                        d.id,
                        r.timestamp,
                        r.at_ms / 1000
                    ),
                    None,
                );
            }
        }
        // Retries as the receiver saw them: each at least its delay after the one before.
        let mut arrivals: Vec<u64> = got.iter().map(|r| r.at_ms).collect();
        arrivals.sort_unstable();
        for (i, pair) in arrivals.windows(2).enumerate() {
            let delay = rules.retry_delays_ms.get(i).copied().unwrap_or(0);
            let gap = pair[1] - pair[0];
            if gap + 1000 < delay {
                ledger.problem(
                    "retry too early",
                    format!(
                        "{}: attempt {} arrived {} ms after attempt {}",
                        d.id,
                        i + 2,
                        gap,
                        i + 1
                    ),
                    None,
                );
            }
            if let Some(late) = ledger.retry_gap_ms.get_mut(i) {
                late.push(gap);
            }
        }
    }
    // Every event: as many deliveries as announced, and one for every subscription that was
    // certainly listening.
    for e in events {
        let found = per_event.get(e.id.as_str()).copied().unwrap_or(0);
        if found != e.deliveries {
            ledger.problem(
                "event count",
                format!("{}: {} announced, {found} found", e.id, e.deliveries),
                None,
            );
        }
        for sub in subs {
            if exposure(sub, e, rules) == Some(true)
                && !pairs.contains(&(e.id.as_str(), sub.id.as_str()))
            {
                ledger.problem(
                    "missing delivery",
                    format!("{} to {} (active and listening)", e.id, sub.id),
                    None,
                );
            }
        }
    }
    // Subscriptions: disabled exactly when the rules say.
    for sub in subs {
        let Some(state) = &sub.state else {
            ledger.problem("subscription unread", sub.id.clone(), None);
            continue;
        };
        let label = match &state.disabled_reason {
            Some(reason) if state.status == "disabled" => format!("disabled ({reason})"),
            _ => state.status.clone(),
        };
        *ledger.subscriptions.entry(label).or_default() += 1;
        let failed = failed_per_sub.get(sub.id.as_str()).copied().unwrap_or(0);
        let reason = state.disabled_reason.as_deref();
        let problem = match (state.status.as_str(), reason) {
            ("disabled", Some("deleted")) if sub.deleted_ms.is_some() => None,
            ("disabled", Some("repeated_failures"))
                if sub.behavior.failing() && failed >= rules.disable_after =>
            {
                None
            }
            ("active", _) if sub.deleted_ms.is_none() && failed < rules.disable_after => None,
            (status, reason) => Some(format!(
                "{} ({}, {} failed deliveries, deleted by the soak: {}): {status} {reason:?}",
                sub.id,
                sub.behavior.name(),
                failed,
                sub.deleted_ms.is_some()
            )),
        };
        if let Some(p) = problem {
            ledger.problem("disable rule", p, None);
        }
    }
    ledger
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::{Hmac, Mac};
    use sha2::Sha256;

    const T0: u64 = 1_800_000_000_000;

    fn sub(id: &str, behavior: Behavior) -> Sub {
        Sub {
            id: id.into(),
            behavior,
            path: format!("/s/{id}"),
            secret: format!("whsec_{id}"),
            event_types: vec!["load.created".into()],
            created_sent_ms: T0 - 100,
            created_resp_ms: T0 - 90,
            deleted_ms: None,
            state: Some(SubState {
                status: "active".into(),
                disabled_reason: None,
                disabled_at: None,
            }),
        }
    }

    fn event(id: &str, at: u64, deliveries: u64) -> Event {
        Event {
            id: id.into(),
            event_type: "load.created".into(),
            body: Bytes::from(format!(r#"{{"id":"{id}"}}"#)),
            sent_ms: at,
            resp_ms: at + 5,
            deliveries,
        }
    }

    fn attempt(number: u32, due_at: u64, started_at: u64, behavior: Behavior) -> AttemptView {
        let (status_code, error) = match behavior {
            Behavior::Ok => (Some(200), None),
            Behavior::Status500 => (Some(500), None),
            Behavior::Status503 => (Some(503), None),
            Behavior::Refused => (None, Some("connection refused".into())),
            Behavior::Timeout => (None, Some("timeout".into())),
        };
        AttemptView {
            run: 0,
            number,
            due_at,
            started_at,
            status_code,
            error,
            succeeded: behavior == Behavior::Ok,
        }
    }

    /// A delivery of `e` to `s` whose attempts followed the schedule exactly.
    fn delivery(e: &Event, s: &Sub, attempts: usize, status: &str) -> DeliveryView {
        let created = e.sent_ms + 1;
        let mut list = Vec::new();
        let mut due = created;
        for i in 0..attempts {
            let started = due + 20;
            list.push(attempt(i as u32 + 1, due, started, s.behavior));
            due = started + [60_000, 300_000].get(i).copied().unwrap_or(0);
        }
        DeliveryView {
            id: format!("dlv_{}_{}", e.id, s.id),
            event_id: e.id.clone(),
            event_type: e.event_type.clone(),
            subscription_id: s.id.clone(),
            status: status.into(),
            created_at: created,
            next_attempt_at: (status == "pending").then_some(due),
            attempts: list,
            read_at_ms: 0,
        }
    }

    /// What a receiver got for every attempt of `d`, signed with an HMAC computed here.
    fn requests(d: &DeliveryView, s: &Sub, e: &Event) -> Vec<Received> {
        if s.behavior == Behavior::Refused {
            return Vec::new();
        }
        d.attempts
            .iter()
            .map(|a| {
                let ts = (a.started_at / 1000).to_string();
                let mut mac =
                    Hmac::<Sha256>::new_from_slice(s.secret.as_bytes()).expect("any key length");
                mac.update(format!("{ts}.").as_bytes());
                mac.update(&e.body);
                Received {
                    path: s.path.clone(),
                    delivery_id: Some(d.id.clone()),
                    event_type: Some(e.event_type.clone()),
                    timestamp: Some(ts),
                    signature: Some(hex::encode(mac.finalize().into_bytes())),
                    body: e.body.clone(),
                    at_ms: a.started_at + 1,
                }
            })
            .collect()
    }

    struct World {
        subs: Vec<Sub>,
        events: Vec<Event>,
        deliveries: BTreeMap<String, DeliveryView>,
        received: Vec<Received>,
        now: u64,
    }

    impl World {
        fn add(&mut self, e: usize, s: usize, attempts: usize, status: &str) -> String {
            let d = delivery(&self.events[e], &self.subs[s], attempts, status);
            self.received
                .extend(requests(&d, &self.subs[s], &self.events[e]));
            let id = d.id.clone();
            self.deliveries.insert(id.clone(), d);
            id
        }

        fn check(&self) -> Ledger {
            check(
                &self.subs,
                &self.events,
                &self.deliveries,
                &self.received,
                self.now,
                &Rules::default(),
            )
        }
    }

    /// Two subscriptions (200 and 500), one event 2 minutes ago: the 200 one succeeded, the
    /// 500 one failed twice and waits for attempt 3.
    fn balanced() -> World {
        let mut w = World {
            subs: vec![sub("ok", Behavior::Ok), sub("bad", Behavior::Status500)],
            events: vec![event("e1", T0, 2)],
            deliveries: BTreeMap::new(),
            received: Vec::new(),
            now: T0 + 120_000,
        };
        w.add(0, 0, 1, "succeeded");
        w.add(0, 1, 2, "pending");
        w
    }

    fn kinds(l: &Ledger) -> Vec<&'static str> {
        l.problem_counts().into_keys().collect()
    }

    #[test]
    fn a_balanced_ledger_has_no_problems() {
        let l = balanced().check();
        assert_eq!(l.problems, vec![]);
        assert_eq!(l.by_state.get(&State::Succeeded), Some(&1));
        assert_eq!(l.by_state.get(&State::Pending), Some(&1));
        assert_eq!(l.attempts, [2, 1, 0]);
        assert_eq!(l.received, 3);
    }

    #[test]
    fn a_missing_delivery_is_found_by_count_and_by_exposure() {
        let mut w = balanced();
        w.deliveries.retain(|_, d| d.subscription_id != "ok");
        assert_eq!(
            kinds(&w.check()),
            vec![
                "event count",
                "missing delivery",
                "unknown delivery received"
            ]
        );
    }

    #[test]
    fn a_delivery_to_a_subscription_created_after_the_publish_is_unexpected() {
        let mut w = balanced();
        let mut late = sub("late", Behavior::Ok);
        late.created_sent_ms = T0 + 1000;
        late.created_resp_ms = T0 + 1010;
        w.subs.push(late);
        w.events[0].deliveries = 3;
        w.add(0, 2, 1, "succeeded");
        assert_eq!(kinds(&w.check()), vec!["unexpected delivery"]);
    }

    #[test]
    fn a_subscription_created_during_the_publish_may_or_may_not_get_it() {
        let mut w = balanced();
        let mut racing = sub("racing", Behavior::Ok);
        racing.created_sent_ms = T0 - 1;
        racing.created_resp_ms = T0 + 2;
        w.subs.push(racing);
        assert_eq!(w.check().problems, vec![]);
        w.events[0].deliveries = 3;
        w.add(0, 2, 1, "succeeded");
        assert_eq!(w.check().problems, vec![]);
    }

    #[test]
    fn an_extra_request_at_the_receiver_is_a_count_mismatch() {
        let mut w = balanced();
        let again = w.received[0].clone();
        w.received.push(again);
        let l = w.check();
        // (a second send of the same attempt is also a retry with no delay)
        assert_eq!(kinds(&l), vec!["receiver count", "retry too early"]);
        assert!(
            l.problems[0].recheck.is_some(),
            "may be an attempt in flight"
        );
    }

    #[test]
    fn a_request_that_arrived_after_the_record_was_read_is_the_next_attempt() {
        // The record of "bad" was read before attempt 2 reached the receiver.
        let mut w = balanced();
        let d = w.deliveries.get_mut("dlv_e1_bad").expect("delivery");
        d.read_at_ms = d.attempts[1].started_at - 1000;
        d.attempts.pop();
        d.next_attempt_at = Some(d.attempts[0].started_at + 60_000);
        assert_eq!(w.check().problems, vec![]);
        // Read after it arrived, the record must show it.
        w.deliveries
            .get_mut("dlv_e1_bad")
            .expect("delivery")
            .read_at_ms = T0 + 61_000;
        assert_eq!(kinds(&w.check()), vec!["receiver count"]);
    }

    #[test]
    fn a_forged_signature_a_changed_body_and_a_wrong_path_are_caught() {
        let mut w = balanced();
        w.received[0].signature = Some("00".repeat(32));
        w.received[1].body = Bytes::from_static(b"{}");
        w.received[2].path = "/elsewhere".into();
        assert_eq!(kinds(&w.check()), vec!["body", "path", "signature"]);
    }

    #[test]
    fn an_old_timestamp_and_a_retry_that_came_too_soon_are_caught() {
        // Signed at the start of a long tick, sent 20 s later: the signature still verifies
        // (within 5 minutes), the timestamp is stale.
        let mut w = balanced();
        w.received[0].at_ms += 20_000;
        assert_eq!(kinds(&w.check()), vec!["stale timestamp"]);
        // The receiver got attempt 2 only 30 s after attempt 1, whatever the record says.
        let mut w = balanced();
        let second = w
            .received
            .iter_mut()
            .filter(|r| r.path == "/s/bad")
            .nth(1)
            .expect("attempt 2");
        second.at_ms -= 30_000;
        second.timestamp = Some((second.at_ms / 1000).to_string());
        let l = w.check();
        assert!(kinds(&l).contains(&"retry too early"), "{:?}", l.problems);
    }

    #[test]
    fn a_fourth_attempt_and_a_late_retry_are_caught() {
        let mut w = balanced();
        let d = w.deliveries.get_mut("dlv_e1_bad").expect("delivery");
        d.attempts[1].due_at += 10_000; // 70 s after the failure instead of 60-66
        assert_eq!(kinds(&w.check()), vec!["off schedule"]);

        let mut w = balanced();
        w.deliveries.remove("dlv_e1_bad");
        w.received.retain(|r| r.path != "/s/bad");
        let id = w.add(0, 1, 3, "failed");
        let d = w.deliveries.get_mut(&id).expect("delivery");
        let mut fourth = d.attempts[2].clone();
        fourth.number = 4;
        d.attempts.push(fourth);
        let l = w.check();
        assert_eq!(kinds(&l), vec!["state", "too many attempts"]);
    }

    #[test]
    fn an_overdue_attempt_and_a_stuck_200_delivery_are_caught() {
        let mut w = balanced();
        w.now += 10 * 60_000; // attempt 3 was due 5 minutes ago
        let l = w.check();
        assert_eq!(kinds(&l), vec!["overdue"]);

        let mut w = balanced();
        let id = w.add(0, 0, 0, "pending");
        w.received
            .retain(|r| r.delivery_id.as_deref() != Some(id.as_str()));
        let d = w.deliveries.get_mut(&id).expect("delivery");
        d.created_at = w.now - 1000; // attempt 1 due a second ago: not overdue yet
        d.next_attempt_at = Some(d.created_at);
        assert_eq!(kinds(&w.check()), vec!["200 receiver not succeeded"]);
    }

    #[test]
    fn disabling_follows_the_failure_streak() {
        let mut w = balanced();
        w.subs[1].state = Some(SubState {
            status: "disabled".into(),
            disabled_reason: Some("repeated_failures".into()),
            disabled_at: Some(T0 + 100_000),
        });
        // Disabled after one failure: too early.
        assert_eq!(kinds(&w.check()), vec!["disable rule"]);
        // Five deliveries that failed after 3 attempts: right, and the pending one is now
        // waiting to be cancelled.
        for i in 0..5 {
            w.events
                .push(event(&format!("f{i}"), T0 + 1000 + i as u64, 2));
            w.add(i + 1, 0, 1, "succeeded");
            w.add(i + 1, 1, 3, "failed");
        }
        w.now = T0 + 370_000;
        let l = w.check();
        assert_eq!(l.problems, vec![]);
        assert_eq!(l.by_state.get(&State::PendingDisabled), Some(&1));
        assert_eq!(l.by_state.get(&State::Failed), Some(&5));
    }

    #[test]
    fn a_200_receiver_disabled_or_a_cancelled_delivery_of_an_active_subscription_is_wrong() {
        let mut w = balanced();
        w.subs[0].state = Some(SubState {
            status: "disabled".into(),
            disabled_reason: Some("repeated_failures".into()),
            disabled_at: Some(T0 + 60_000),
        });
        assert_eq!(kinds(&w.check()), vec!["disable rule"]);

        let mut w = balanced();
        w.events.push(event("e2", T0 + 1000, 2));
        w.add(1, 0, 1, "succeeded");
        w.add(1, 1, 0, "cancelled");
        assert_eq!(kinds(&w.check()), vec!["state"]);
    }

    #[test]
    fn a_deleted_subscription_gets_nothing_published_after_the_delete() {
        let mut w = balanced();
        w.subs[0].deleted_ms = Some((T0 + 1000, T0 + 1010));
        w.subs[0].state = Some(SubState {
            status: "disabled".into(),
            disabled_reason: Some("deleted".into()),
            disabled_at: Some(T0 + 1005),
        });
        w.events.push(event("e2", T0 + 2000, 1));
        w.add(1, 1, 2, "pending");
        assert_eq!(w.check().problems, vec![]);
        w.events[1].deliveries = 2;
        w.add(1, 0, 0, "cancelled");
        assert_eq!(kinds(&w.check()), vec!["unexpected delivery"]);
    }
}
