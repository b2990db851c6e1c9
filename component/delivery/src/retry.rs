//! The retry schedule: attempts per run, the delays between them and their jitter.

/// Attempts per run (the original delivery, and each replay).
pub const MAX_ATTEMPTS: usize = 3;

/// Delay before attempt 2 and before attempt 3, after the previous attempt failed.
pub const RETRY_DELAYS_MS: [u64; 2] = [60_000, 300_000];

/// When the attempt after `failed_attempts` failed ones is due, or `None` after the last.
/// `random` picks the jitter: up to +10 % of the delay. Retries fall on whole seconds.
pub fn retry_due(failed_at_ms: u64, failed_attempts: usize, random: u64) -> Option<u64> {
    retry_due_after(&RETRY_DELAYS_MS, failed_at_ms, failed_attempts, random)
}

/// [`retry_due`] with the delays of the `retry_delays_ms` setting (SPEC's 60 s and 300 s
/// unless an operator changes them, e.g. a test that must not wait a minute).
pub fn retry_due_after(
    delays: &[u64; 2],
    failed_at_ms: u64,
    failed_attempts: usize,
    random: u64,
) -> Option<u64> {
    let delay = *delays.get(failed_attempts.checked_sub(1)?)?;
    // Up to +10 % (short delays: within their second, which the due time is rounded up to).
    let jitter_span = (delay / 10).saturating_sub(999).max(1);
    let due = failed_at_ms + delay + random % jitter_span;
    Some(due.div_ceil(1000) * 1000)
}
