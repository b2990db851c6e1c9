//! The partner API rate limit: `rate_limit_per_minute` requests per API client per clock
//! minute, answered 429 `rate_limited` with `Retry-After` beyond it.
//!
//! A fixed window counted in the store (`rate:{client}:{minute}`, one `increment` per
//! request), so every instance of the component counts against the same number; no state is
//! kept between calls. The first request of a minute deletes the counter of the minute
//! before, so a client leaves one counter behind, not one a minute (a request that straddles
//! the turn of a minute, or a store failure at that delete, can leave a second one). A store
//! failure here fails the request (503), as any other would. Requests refused still count:
//! a client that keeps hammering stays refused until the minute turns.
//!
//! Only the partner API (`/v1/...`, after authentication) is limited: the operator API and
//! event ingest are the operator's own traffic.

use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_storage::keys;
use edgehook_storage::kv::Kv;

/// Length of a window, in milliseconds.
const WINDOW_MS: u64 = 60_000;

/// Counts one partner API request of `client_id`; 429 if it is over the limit.
pub fn count_request<K: Kv>(env: &Env<'_, K>, client_id: &str) -> Result<(), ApiError> {
    let limit = env.settings.rate_limit_per_minute;
    if limit == 0 {
        return Ok(());
    }
    let window = env.now_ms / WINDOW_MS;
    let count = env.kv.increment(&keys::rate(client_id, window), 1)?;
    if count == 1 && window > 0 {
        // The minute before is over: its counter is of no more use.
        env.kv.delete(&keys::rate(client_id, window - 1))?;
    }
    if count > i64::from(limit) {
        let retry_after_s = ((window + 1) * WINDOW_MS - env.now_ms).div_ceil(1000);
        return Err(ApiError::rate_limited(limit, retry_after_s));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgehook_model::config::Settings;
    use edgehook_model::env::SeededEntropy;
    use edgehook_storage::kv::MemoryKv;

    #[test]
    fn the_limit_holds_per_client_per_minute_and_leaves_one_counter() {
        let kv = MemoryKv::new();
        let settings = Settings::from_pairs([("rate_limit_per_minute", "3")]).expect("valid");
        let entropy = SeededEntropy::new(1);
        let at = |now_ms: u64| Env::new(now_ms, &kv, &settings, &entropy);
        let minute = 29_000_000 * WINDOW_MS;
        for i in 0..3 {
            count_request(&at(minute + i * 1000), "acme").expect("within the limit");
        }
        let refused = count_request(&at(minute + 45_500), "acme").expect_err("the 4th");
        assert_eq!((refused.status, refused.code), (429, "rate_limited"));
        assert_eq!(
            refused.headers,
            [("retry-after".to_owned(), "15".to_owned())],
            "until the minute turns, rounded up"
        );
        count_request(&at(minute + 45_500), "globex").expect("another client has its own");
        count_request(&at(minute + WINDOW_MS), "acme").expect("a new minute");
        let counters: Vec<String> = kv
            .dump()
            .into_keys()
            .filter(|k| k.starts_with("rate:acme:"))
            .collect();
        assert_eq!(counters, [keys::rate("acme", minute / WINDOW_MS + 1)]);
        let off = Settings::from_pairs([("rate_limit_per_minute", "0")]).expect("valid");
        let env = Env {
            settings: &off,
            ..at(minute)
        };
        for _ in 0..10 {
            count_request(&env, "acme").expect("0 is no limit");
        }
    }

    /// The first minute since the epoch has no minute before it whose counter to delete
    /// (a store or a simulated clock at 0 must not make the count underflow); the limit
    /// holds there as anywhere.
    #[test]
    fn the_first_minute_since_the_epoch_counts_without_a_minute_before() {
        let kv = MemoryKv::new();
        let settings = Settings::from_pairs([("rate_limit_per_minute", "2")]).expect("valid");
        let entropy = SeededEntropy::new(2);
        let at = |now_ms: u64| Env::new(now_ms, &kv, &settings, &entropy);
        count_request(&at(0), "acme").expect("the first");
        count_request(&at(59_000), "acme").expect("the second");
        let refused = count_request(&at(59_999), "acme").expect_err("the third");
        assert_eq!(
            refused.headers,
            [("retry-after".to_owned(), "1".to_owned())],
            "1 ms to the turn of the minute, rounded up to a second"
        );
        count_request(&at(WINDOW_MS), "acme").expect("the next minute");
    }
}
