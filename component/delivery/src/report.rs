//! What a tick did, and when the next one is needed.

/// What one tick did, and when the next one is needed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Attempts run by this tick.
    pub attempted: u32,
    /// Attempts that got a 2xx.
    pub succeeded: u32,
    /// Attempts that failed.
    pub failed: u32,
    /// When the next attempt is due (ms since the epoch), if anything is pending.
    pub next_due_ms: Option<u64>,
}
