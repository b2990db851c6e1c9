//! Timers: work queued in the due queue beside deliveries, for the tick that reads its
//! second — a probe of a subscription disabled for failures (`recover.rs`), a rotation's
//! ending notice (`notify.rs`). An entry is its text (`probe:{sub}:{disabled at}:{n}`,
//! `ending:{sub}:{until}`), so it needs no record of its own; what it acts on is checked
//! against the subscription record when it comes due, and a stale one does nothing. A tick
//! runs at most [`TIMERS_PER_TICK`] of them (`recover::run`); the rest wait for the next.

use edgehook_model::env::Env;
use edgehook_model::ids::SubscriptionId;
use edgehook_storage::kv::{Kv, KvError};
use edgehook_subscriptions::Subscription;

/// Timers one tick runs at most (a probe is an attempt: it waits for its receiver).
pub const TIMERS_PER_TICK: usize = 8;

/// A timer entry of the due queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Probe `n` (1-based) of `sub`, disabled for failures at `disabled_at`.
    Probe {
        sub: SubscriptionId,
        disabled_at: u64,
        n: u32,
    },
    /// The notice that `sub`'s previous secret stops signing at `until`.
    RotationEnding { sub: SubscriptionId, until: u64 },
}

impl Timer {
    /// Its queue entry.
    pub(crate) fn entry(&self) -> String {
        match self {
            Timer::Probe {
                sub,
                disabled_at,
                n,
            } => format!("probe:{sub}:{disabled_at}:{n}"),
            Timer::RotationEnding { sub, until } => format!("ending:{sub}:{until}"),
        }
    }

    /// The timer of a queue entry; `None` for a delivery's or an erasure's (or damage).
    pub(crate) fn parse(entry: &str) -> Option<Timer> {
        let mut parts = entry.split(':');
        let kind = parts.next()?;
        let sub = SubscriptionId::trusted(parts.next()?);
        let first: u64 = parts.next()?.parse().ok()?;
        let timer = match kind {
            "probe" => Timer::Probe {
                sub,
                disabled_at: first,
                n: parts.next()?.parse().ok()?,
            },
            "ending" => Timer::RotationEnding { sub, until: first },
            _ => return None,
        };
        parts.next().is_none().then_some(timer)
    }
}

/// Whether a queue entry is a timer's (a delivery id or an erasure's subscription id holds
/// no `:`).
pub(crate) fn is_timer(entry: &str) -> bool {
    entry.contains(':')
}

/// Queues `timer` for the second `at_ms` falls in (rounded up: never run early).
pub(crate) fn schedule<K: Kv>(env: &Env<'_, K>, at_ms: u64, timer: &Timer) -> Result<(), KvError> {
    let by_second = [(at_ms.div_ceil(1000), vec![timer.entry()])];
    crate::queue::enqueue(env.kv, &by_second, None)
}

/// The disable reason of a failure streak (the one disable a probe may undo).
pub const REPEATED_FAILURES: &str = "repeated_failures";

/// Queues the first probe of `sub`, just disabled for `reason`, if the operator allows
/// recovery (`auto_recover`) and the reason is a failure streak. Best effort, as the
/// disable's alert.
pub(crate) fn schedule_first_probe<K: Kv>(env: &Env<'_, K>, sub: &Subscription, reason: &str) {
    let Some(disabled_at) = sub.disabled_at else {
        return;
    };
    let first = env.settings.recover_delays_ms.before_probe(1);
    if let Some(delay) = first.filter(|_| env.settings.auto_recover && reason == REPEATED_FAILURES)
    {
        let timer = Timer::Probe {
            sub: sub.id.clone(),
            disabled_at,
            n: 1,
        };
        let queued = schedule(env, env.now_ms + delay, &timer);
        env.best_effort("first probe (due queue)", queued);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_as_its_timer_and_nothing_else_is_one() {
        let sub = SubscriptionId::from("sub_0123456789abcdef01234567");
        for timer in [
            Timer::Probe {
                sub: sub.clone(),
                disabled_at: 1_767_225_600_123,
                n: 3,
            },
            Timer::RotationEnding {
                sub: sub.clone(),
                until: 9,
            },
        ] {
            assert!(is_timer(&timer.entry()));
            assert_eq!(Timer::parse(&timer.entry()), Some(timer));
        }
        assert!(!is_timer("dlv_0123456789abcdef01234567") && !is_timer(&sub));
        for other in [
            "probe:sub_1:x:1",
            "ending:sub_1",
            "probe:sub_1:1:1:1",
            "x:sub_1:1",
        ] {
            assert_eq!(Timer::parse(other), None, "{other}");
        }
    }
}
