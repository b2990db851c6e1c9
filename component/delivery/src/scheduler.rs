//! The timer-driven work: what `scheduler.tick` reports, and the opportunistic tick that
//! stands in for a timer on hosts that have none.
//!
//! Spin has no timer: retries wait for someone to call the tick route (a CronJob). With
//! `opportunistic_tick_s` > 0, an instance that has answered a request runs the due work
//! itself when no instance began one in the last that many seconds. A lease in the store
//! ([`keys::TICK_LEASE`]: when the last one began) keeps it to one instance per period,
//! taken by compare-and-swap, so steady traffic (health probes included) retries on time
//! without a CronJob. Ticks on several instances at once are safe anyway (each attempt is
//! claimed by compare-and-swap); the lease only keeps them from piling up.

use crate::report::TickReport;
use crate::sender::Sender;
use crate::tick::tick;
use edgehook_model::config::Settings;
use edgehook_model::env::Env;
use edgehook_storage::keys;
use edgehook_storage::kv::{Kv, Update, update_seldom};

/// The route a host's cron calls to tick; no opportunistic tick follows it.
const TICK_PATH: &str = "/internal/v1/tick";

/// Whether a request to `path` may be followed by an opportunistic tick: the setting is on
/// and the request was not the tick route itself. A shell asks before it builds an
/// [`Env`] for [`after_request`], so a host with its own timer pays no clock read for it.
pub fn wanted(settings: &Settings, path: &str) -> bool {
    settings.opportunistic_tick_s > 0 && path.split('?').next() != Some(TICK_PATH)
}

/// After a request to `path` has been answered: runs [`tick`] if [`wanted`] and no
/// instance began one within `opportunistic_tick_s` (taking the lease), else nothing. A
/// lease that cannot be read or taken means no tick this time.
pub fn after_request<K: Kv>(
    env: &Env<'_, K>,
    path: &str,
    sender: &dyn Sender,
) -> Option<TickReport> {
    if !wanted(env.settings, path) {
        return None;
    }
    let period_ms = u64::from(env.settings.opportunistic_tick_s) * 1000;
    let nonce = edgehook_model::ids::hex(&env.random_bytes::<8>());
    let now = env.now_ms;
    // A plain read first: nearly every request finds the lease taken and writes nothing.
    let won = update_seldom(env.kv, &keys::TICK_LEASE, &mut |current| {
        let began = current
            .and_then(|b| std::str::from_utf8(b).ok())
            .and_then(|s| s.split(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0);
        Ok::<_, ()>(match now < began.saturating_add(period_ms) {
            true => Update::Keep(false),
            false => Update::Write(format!("{now} {nonce}").into_bytes(), true),
        })
    });
    matches!(won, Ok(true)).then(|| tick(env, sender))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The opportunistic tick follows any request but the tick route's, and none when the
    /// host turned it off (`opportunistic_tick_s` 0: a host with its own timer).
    #[test]
    fn an_opportunistic_tick_is_wanted_after_requests_but_the_tick_route_and_not_when_off() {
        let on = Settings::default();
        assert!(on.opportunistic_tick_s > 0, "on by default");
        assert!(wanted(&on, "/v1/webhooks"));
        assert!(wanted(&on, "/healthz?probe=1"));
        assert!(!wanted(&on, TICK_PATH));
        assert!(!wanted(&on, "/internal/v1/tick?limit=5"));
        let off = Settings {
            opportunistic_tick_s: 0,
            ..Settings::default()
        };
        assert!(!wanted(&off, "/v1/webhooks"));
    }
}
