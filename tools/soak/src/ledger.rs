//! The ledger of a soak run: every published event against every subscription, every
//! delivery against what the receivers got. A pure function of a snapshot, so it is tested
//! with made-up data (`ledger/tests.rs`) and run on the real one by [`crate::run`].
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

use crate::records::{Behavior, DeliveryView, Event, Received, Sub};
use std::collections::{BTreeMap, HashMap, HashSet};

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
mod tests;
