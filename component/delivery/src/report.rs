//! What a tick did, and when the next one is needed; and the metrics event that says so to
//! the host.

use edgehook_model::env::Log;
use std::fmt::Write as _;

/// What one tick (or one run of attempts a request made due) did, and when the next one is
/// needed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Attempts run by this tick.
    pub attempted: u32,
    /// Attempts that got a 2xx (each ends its delivery as succeeded).
    pub succeeded: u32,
    /// Attempts that failed.
    pub failed: u32,
    /// Deliveries that ended failed: attempts exhausted, or the endpoint answered 410.
    pub exhausted: u32,
    /// Deliveries that ended cancelled (their subscription disabled or deleted).
    pub cancelled: u32,
    /// For each first attempt of a delivery: how late it ran, in ms after it was due (it is
    /// due when its event is accepted). What the host's event-to-first-attempt latency is.
    pub first_lag_ms: Vec<u64>,
    /// Queue entries due by the tick's end that it has not read (its backlog).
    pub backlog: u64,
    /// When the oldest of those was due (ms since the epoch).
    pub oldest_due_ms: Option<u64>,
    /// Replay jobs in progress.
    pub replays: u32,
    /// When the next attempt is due (ms since the epoch), if anything is pending.
    pub next_due_ms: Option<u64>,
}

impl TickReport {
    /// Writes the metrics event of this report to `log` (see [`Log::event`]) when there is
    /// something to count; `tick`: the report is a tick's, whose gauges are always sent.
    pub fn emit(&self, log: &dyn Log, tick: bool) {
        if !tick && self.attempted == 0 && self.cancelled == 0 {
            return;
        }
        // One event type per source: only a tick's gauges (backlog, replays) are current.
        let mut line = String::with_capacity(128);
        let _ = write!(
            line,
            "{{\"type\":\"{}\",\"succeeded\":{},\"failed\":{},\"exhausted\":{},\"cancelled\":{},\"backlog\":{},\"oldestDueMs\":{},\"replays\":{},\"firstLagMs\":[",
            if tick { "tick" } else { "attempts" },
            self.succeeded,
            self.failed,
            self.exhausted,
            self.cancelled,
            self.backlog,
            self.oldest_due_ms.unwrap_or(0),
            self.replays
        );
        for lag in &self.first_lag_ms {
            let _ = write!(line, "{lag},");
        }
        if line.ends_with(',') {
            line.pop();
        }
        line.push_str("]}");
        log.event(&line);
    }
}
