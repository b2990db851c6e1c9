//! The retry schedule: attempts per run, the delays between them and their jitter; and the
//! verdict on an attempt's answer, which the schedule and a `Retry-After` decide.

use crate::sender::SendResult;

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

/// The longest a `Retry-After` may hold a retry back: an hour.
pub const MAX_RETRY_AFTER_MS: u64 = 3_600_000;

/// What one attempt did to its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A 2xx: delivered.
    Succeeded,
    /// Not delivered; the next attempt is due then (ms since the epoch).
    Retry(u64),
    /// Not delivered, and no attempt follows: the run's last failed, or the receiver
    /// answered 410 Gone (`gone`), which disables its subscription.
    Failed {
        /// The answer was 410 Gone.
        gone: bool,
    },
    /// Not attempted: its subscription is gone or disabled, or its event body is gone.
    Cancelled,
}

/// The verdict on `answer` to attempt number `attempt` of a run (1-based), made at `now`
/// with `delays` between attempts; `jitter` gives the random number that picks a retry's
/// jitter ([`retry_due_after`]), asked only for a retry. A 429 or 503 with `Retry-After` waits at least what it
/// asked ([`asked_wait`]: at most an hour, never less than the normal delay), on a whole
/// second.
pub fn verdict(
    answer: &SendResult,
    attempt: usize,
    now: u64,
    jitter: impl FnOnce() -> u64,
    delays: &[u64; 2],
) -> Verdict {
    match answer.outcome {
        Ok(code) if (200..300).contains(&code) => return Verdict::Succeeded,
        Ok(410) => return Verdict::Failed { gone: true },
        _ => {}
    }
    let Some(due) = retry_due_after(delays, now, attempt, jitter()) else {
        return Verdict::Failed { gone: false };
    };
    match asked_wait(answer, now) {
        Some(wait) => Verdict::Retry(due.max((now + wait).div_ceil(1000) * 1000)),
        None => Verdict::Retry(due),
    }
}

/// The wait a 429 or 503 asked for with `Retry-After`, at most [`MAX_RETRY_AFTER_MS`];
/// `None` for other answers and for a value that is not a delay or an HTTP-date.
pub fn asked_wait(answer: &SendResult, now: u64) -> Option<u64> {
    match answer.outcome {
        Ok(429 | 503) => answer
            .retry_after
            .as_deref()
            .and_then(|v| edgehook_model::http::retry_after_ms(v, now))
            .map(|ms| ms.min(MAX_RETRY_AFTER_MS)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sender::SendError;

    const DELAYS: [u64; 2] = [60_000, 300_000];
    const NOW: u64 = 1_700_000_000_000;

    fn answer(outcome: Result<u16, SendError>, retry_after: Option<&str>) -> SendResult {
        SendResult {
            outcome,
            latency_ms: 12,
            retry_after: retry_after.map(str::to_owned),
        }
    }

    /// The verdict table: every kind of answer at each attempt of a run.
    #[test]
    fn the_verdict_on_each_answer() {
        let retry_1 = Verdict::Retry(NOW + 60_000);
        let retry_2 = Verdict::Retry(NOW + 300_000);
        let last = Verdict::Failed { gone: false };
        // (answer, its Retry-After, attempt number, verdict)
        type Case = (Result<u16, SendError>, Option<&'static str>, usize, Verdict);
        let cases: [Case; 16] = [
            (Ok(200), None, 1, Verdict::Succeeded),
            (Ok(204), None, 3, Verdict::Succeeded),
            (Ok(299), None, 2, Verdict::Succeeded),
            (Ok(410), None, 1, Verdict::Failed { gone: true }),
            (Ok(410), None, 3, Verdict::Failed { gone: true }),
            (Ok(500), None, 1, retry_1),
            (Ok(500), None, 2, retry_2),
            (Ok(500), None, 3, last),
            (Ok(301), None, 1, retry_1),
            (Ok(404), None, 2, retry_2),
            (Err(SendError::Timeout), None, 1, retry_1),
            (Err(SendError::DestinationRefused), None, 3, last),
            // Retry-After only on a 429 or 503, never shorter than the schedule.
            (Ok(429), Some("600"), 1, Verdict::Retry(NOW + 600_000)),
            (Ok(503), Some("10"), 1, retry_1),
            (Ok(500), Some("600"), 1, retry_1),
            // An hour at most, and never after the run's last attempt.
            (Ok(429), Some("86400"), 3, last),
        ];
        for (outcome, retry_after, attempt, expected) in cases {
            let a = answer(outcome, retry_after);
            // Jitter 0: the schedule's own delays.
            assert_eq!(
                verdict(&a, attempt, NOW, || 0, &DELAYS),
                expected,
                "{a:?} attempt {attempt}"
            );
        }
        let a = answer(Ok(429), Some("86400"));
        assert_eq!(
            verdict(&a, 1, NOW, || 0, &DELAYS),
            Verdict::Retry(NOW + MAX_RETRY_AFTER_MS)
        );
    }

    /// Jitter adds at most a tenth of the delay, and a retry falls on a whole second.
    #[test]
    fn jitter_stays_within_a_tenth_on_whole_seconds() {
        let a = answer(Ok(500), None);
        for jitter in [0, 1, 999, 5_999, 6_000, u64::MAX] {
            let Verdict::Retry(due) = verdict(&a, 1, NOW + 1, || jitter, &DELAYS) else {
                panic!("a 500 at attempt 1 is retried");
            };
            assert_eq!(due % 1000, 0, "{due}");
            assert!((NOW + 61_000..=NOW + 66_000).contains(&due), "{due}");
        }
    }

    /// A Retry-After that is no delay or HTTP-date is ignored; an HTTP-date is a wait.
    #[test]
    fn asked_waits() {
        assert_eq!(asked_wait(&answer(Ok(429), Some("soon")), NOW), None);
        assert_eq!(asked_wait(&answer(Ok(200), Some("5")), NOW), None);
        assert_eq!(asked_wait(&answer(Ok(503), Some("5")), NOW), Some(5_000));
        let date = "Tue, 14 Nov 2023 22:13:20 GMT"; // NOW + 0 s
        assert_eq!(
            asked_wait(&answer(Ok(503), Some(date)), NOW - 30_000),
            Some(30_000)
        );
    }
}
