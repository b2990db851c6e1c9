//! The partner API rate limit: `rate_limit_per_minute` requests per API client per clock
//! minute, answered 429 `rate_limited` with `Retry-After` beyond it.
//!
//! A fixed window counted in the store (`rate:{client}:{minute}`, one `increment` per
//! request), so every instance of the component counts against the same number; no state is
//! kept between calls. The counts live in the environment's counters bucket
//! ([`Env::counters`]), which a host may keep in memory: a count lost with a restart only
//! restarts its minute, and a write to a durable log per partner request cost the list
//! a tenth of its time. The first request of a minute deletes the counter of
//! the minute before, so a client leaves one counter behind, not one a minute (a request that
//! straddles the turn of a minute, or a store failure at that delete, can leave a second
//! one). A store failure here fails the request (503), as any other would. Requests refused
//! still count: a client that keeps hammering stays refused until the minute turns.
//!
//! Only the partner API (`/v1/...`, after authentication) is limited: the operator API and
//! event ingest are the operator's own traffic.
//!
//! Failed authentication is limited too, per source address and before any key lookup
//! ([`check_auth_failures`]): [`AUTH_FAILURES_PER_MINUTE`] failures (401) a minute, then 429
//! `too_many_auth_failures` for every request from that address that needs credentials, on
//! both APIs, until the minute turns. It keeps a guesser from trying keys or the admin
//! token at the store's pace.

use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::http::Request;
use edgehook_model::ids::ClientId;
use edgehook_storage::keys;
use edgehook_storage::kv::{Kv, Update, update};

/// Length of a window, in milliseconds.
const WINDOW_MS: u64 = 60_000;

/// Counts one partner API request of `client_id`; 429 if it is over the limit.
pub fn count_request<K: Kv>(env: &Env<'_, K>, client_id: &ClientId) -> Result<(), ApiError> {
    let limit = env.settings.rate_limit_per_minute;
    if limit == 0 {
        return Ok(());
    }
    let window = env.now_ms / WINDOW_MS;
    let count = env.counters.increment(&keys::rate(client_id, window), 1)?;
    if count == 1 && window > 0 {
        // The minute before is over: its counter is of no more use.
        env.counters.delete(&keys::rate(client_id, window - 1))?;
    }
    if count > i64::from(limit) {
        let retry_after_s = ((window + 1) * WINDOW_MS - env.now_ms).div_ceil(1000);
        return Err(ApiError::rate_limited(limit, retry_after_s));
    }
    Ok(())
}

/// Failed authentications one source address may make per clock minute; beyond it every
/// request from it that needs credentials is answered 429 before any key is looked up, until
/// the minute turns.
pub const AUTH_FAILURES_PER_MINUTE: i64 = 30;

/// The source address of a request: the `spin-client-addr` header, without its port (Spin
/// sets it; `edgehook serve` sets it from the peer, replacing any the client sent). A host
/// that names no address gets no limit.
fn source_address(req: &Request) -> Option<&str> {
    let addr = req.header_str("spin-client-addr")?.trim();
    let host = match addr.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None if addr.matches(':').count() == 1 => addr.split(':').next()?,
        None => addr,
    };
    (!host.is_empty()).then_some(host)
}

/// 429 if the request's source address has failed to authenticate too often this minute.
/// One store operation (a read) for every request that needs credentials.
pub fn check_auth_failures<K: Kv>(env: &Env<'_, K>, req: &Request) -> Result<(), ApiError> {
    let Some(addr) = source_address(req) else {
        return Ok(());
    };
    let window = env.now_ms / WINDOW_MS;
    // A plain read: counting with `increment` would create a key for every address that
    // ever sent a request, failed or not.
    let failures = failures(
        env.counters
            .get(&keys::auth_failures(addr, window))?
            .as_deref(),
    );
    if failures >= AUTH_FAILURES_PER_MINUTE {
        let retry_after_s = ((window + 1) * WINDOW_MS - env.now_ms).div_ceil(1000);
        return Err(ApiError::new(
            429,
            "too_many_auth_failures",
            format!(
                "Too many failed authentications from this address; retry after {retry_after_s} s."
            ),
        )
        .with_header("retry-after", retry_after_s.to_string()));
    }
    Ok(())
}

/// Counts one failed authentication of the request's source address (best effort: the
/// request has failed already).
pub fn count_auth_failure<K: Kv>(env: &Env<'_, K>, req: &Request) {
    let Some(addr) = source_address(req) else {
        return;
    };
    let window = env.now_ms / WINDOW_MS;
    let counted = update(
        env.counters,
        &keys::auth_failures(addr, window),
        &mut |cur| {
            let n = failures(cur) + 1;
            Ok::<_, ()>(Update::Write(n.to_string().into_bytes(), n))
        },
    );
    if let Ok(1) = counted
        && window > 0
    {
        let deleted = env.counters.delete(&keys::auth_failures(addr, window - 1));
        env.best_effort("drop last minute's count (auth failure counter)", deleted);
    }
}

/// A failure count as stored (decimal text; anything else counts as none).
fn failures(stored: Option<&[u8]>) -> i64 {
    stored
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgehook_model::config::Settings;
    use edgehook_model::env::SeededEntropy;
    use edgehook_storage::kv::MemoryKv;

    #[test]
    fn the_limit_holds_per_client_per_minute_and_leaves_one_counter() {
        // The counts go to the counters bucket, none to the store's.
        let (store, kv) = (MemoryKv::new(), MemoryKv::new());
        let settings = Settings::from_pairs([("rate_limit_per_minute", "3")]).expect("valid");
        let entropy = SeededEntropy::new(1);
        let at = |now_ms: u64| Env::new(now_ms, &store, &settings, &entropy).with_counters(&kv);
        let minute = 29_000_000 * WINDOW_MS;
        for i in 0..3 {
            count_request(&at(minute + i * 1000), &ClientId::from("acme"))
                .expect("within the limit");
        }
        let refused =
            count_request(&at(minute + 45_500), &ClientId::from("acme")).expect_err("the 4th");
        assert_eq!((refused.status, refused.code), (429, "rate_limited"));
        assert_eq!(
            refused.headers,
            [("retry-after".to_owned(), "15".to_owned())],
            "until the minute turns, rounded up"
        );
        count_request(&at(minute + 45_500), &ClientId::from("globex"))
            .expect("another client has its own");
        count_request(&at(minute + WINDOW_MS), &ClientId::from("acme")).expect("a new minute");
        let counters: Vec<String> = kv
            .dump()
            .into_keys()
            .filter(|k| k.starts_with(keys::RATE_PREFIX) && k.contains("acme"))
            .collect();
        assert_eq!(
            counters,
            [keys::rate(&ClientId::from("acme"), minute / WINDOW_MS + 1)]
        );
        assert!(store.dump().is_empty(), "{:?}", store.dump());
        let off = Settings::from_pairs([("rate_limit_per_minute", "0")]).expect("valid");
        let env = Env {
            settings: &off,
            ..at(minute)
        };
        for _ in 0..10 {
            count_request(&env, &ClientId::from("acme")).expect("0 is no limit");
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
        count_request(&at(0), &ClientId::from("acme")).expect("the first");
        count_request(&at(59_000), &ClientId::from("acme")).expect("the second");
        let refused = count_request(&at(59_999), &ClientId::from("acme")).expect_err("the third");
        assert_eq!(
            refused.headers,
            [("retry-after".to_owned(), "1".to_owned())],
            "1 ms to the turn of the minute, rounded up to a second"
        );
        count_request(&at(WINDOW_MS), &ClientId::from("acme")).expect("the next minute");
    }

    #[test]
    fn failed_authentication_is_limited_per_address_before_any_key_lookup() {
        let kv = MemoryKv::new();
        let settings = Settings::default();
        let entropy = SeededEntropy::new(2);
        let minute = 29_000_000 * WINDOW_MS;
        let env = Env::new(minute + 1_000, &kv, &settings, &entropy);
        let from = |addr: &str| {
            let mut req = Request::new("GET", "/v1/webhooks");
            req.headers
                .push(("spin-client-addr".into(), addr.as_bytes().to_vec()));
            req
        };
        let guesser = from("203.0.113.7:51234");
        for _ in 0..AUTH_FAILURES_PER_MINUTE {
            check_auth_failures(&env, &guesser).expect("under the limit");
            count_auth_failure(&env, &guesser);
        }
        let refused = check_auth_failures(&env, &guesser).expect_err("over");
        assert_eq!(
            (refused.status, refused.code),
            (429, "too_many_auth_failures")
        );
        // The same address on another port; other addresses, v6 with its port; no address.
        assert!(check_auth_failures(&env, &from("203.0.113.7:40000")).is_err());
        check_auth_failures(&env, &from("203.0.113.8:51234")).expect("another address");
        check_auth_failures(&env, &from("[2001:db8::1]:443")).expect("v6");
        check_auth_failures(&env, &Request::new("GET", "/v1/webhooks")).expect("no address");
        // The next minute starts again, and the minute before's counter is gone.
        let later = Env::new(minute + WINDOW_MS + 1_000, &kv, &settings, &entropy);
        check_auth_failures(&later, &guesser).expect("a new minute");
        count_auth_failure(&later, &guesser);
        let counters = kv
            .dump()
            .into_keys()
            .filter(|k| k.starts_with(keys::AUTH_FAILURES_PREFIX) && k.contains("203.0.113.7"))
            .count();
        assert_eq!(counters, 1);
    }
}
