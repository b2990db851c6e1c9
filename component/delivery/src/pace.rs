//! Pacing per subscription: a cap on attempts in flight, and an optional rate.
//!
//! A subscription is paced when its owner set `maxInFlight` or `rateLimit`, or while its
//! receiver is slow (`slow_until`: an attempt took [`SLOW_MS`] or more, or timed out), when
//! the default cap [`DEFAULT_MAX_IN_FLIGHT`] applies: one slow receiver then holds at most
//! that many of the senders (a tick's batch slots, `serve`'s instances) however many of its
//! deliveries are due. Others pay nothing: no store operation is added for them.
//!
//! A batch asks for the slots it wants under compare-and-swap on `pace:{id}` (the holders'
//! slots, each until its lease runs out, and the rate's next start time), sends what it was
//! granted, and gives its slots back after recording the outcomes. A slot a crashed batch
//! never gave back ends with its lease. Deliveries over the cap or the rate stay due and are
//! looked at again a second later.

use edgehook_model::env::Env;
use edgehook_model::ids::SubscriptionId;
use edgehook_storage::codec::{Reader, Writer};
use edgehook_storage::keys;
use edgehook_storage::kv::{Kv, KvError, Update, update};
use edgehook_subscriptions::Subscription;

/// The in-flight cap of a slow receiver whose owner set none.
pub const DEFAULT_MAX_IN_FLIGHT: u16 = 8;
/// An attempt this slow (or a timeout) makes its receiver slow. Long enough that a `serve`
/// overloaded by its own senders (attempts queued for a connection or the CPU, some taking
/// a second or two) does not take its receivers for slow ones: at 1 s, the latency
/// benchmark's overload flagged every receiver and the pacing's own store operations
/// deepened the overload (BENCHMARKS.md).
pub const SLOW_MS: u64 = 5000;
/// How long a receiver counts as slow after a slow attempt.
pub const SLOW_FOR_MS: u64 = 10 * 60_000;
const PACE_V1: u8 = 0x9A;

/// The cap and the rate that apply to `sub` at `now`, if it is paced.
pub(crate) fn limits(sub: &Subscription, now: u64) -> Option<(u32, u32)> {
    let o = &sub.options;
    let slow = o.slow_until.is_some_and(|u| u > now);
    let cap = match (o.max_in_flight, slow) {
        (0, true) => u32::from(DEFAULT_MAX_IN_FLIGHT),
        (0, false) => u32::MAX,
        (n, _) => u32::from(n),
    };
    (cap != u32::MAX || o.rate_limit > 0).then_some((cap, o.rate_limit))
}

/// A paced subscription's state: slots held (holder, until, how many), and the time the
/// rate lets the next attempt start.
#[derive(Default)]
struct Pace {
    slots: Vec<(String, u64, u32)>,
    next_start: u64,
}

impl Pace {
    fn decode(bytes: &[u8]) -> Option<Pace> {
        let mut r = Reader::new(bytes, PACE_V1)?;
        let pace = Pace {
            slots: r.list(13, |r| Some((r.str()?, r.u64()?, r.u32()?)))?,
            next_start: r.u64()?,
        };
        r.end()?;
        Some(pace)
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new(PACE_V1, 16 + 40 * self.slots.len());
        w.list(&self.slots, |w, (h, u, n)| w.str(h).u64(*u).u32(*n))
            .u64(self.next_start);
        w.finish()
    }
}

/// Takes up to `wanted` slots of `sub_id` for `holder` until `until`, under `cap` and `rate`
/// (attempts per second, 0: none). Returns how many it got.
pub(crate) fn acquire<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &SubscriptionId,
    (cap, rate): (u32, u32),
    wanted: u32,
    holder: &str,
    until: u64,
) -> Result<u32, KvError> {
    let now = env.now_ms;
    update(env.kv, &keys::pace(sub_id), &mut |cur| {
        let mut pace = cur.and_then(Pace::decode).unwrap_or_default();
        pace.slots.retain(|(_, u, _)| *u > now);
        let held: u32 = pace.slots.iter().map(|(_, _, n)| n).sum();
        let mut granted = wanted.min(cap.saturating_sub(held));
        if rate > 0 {
            // Evenly spaced starts, with a second's worth of burst.
            let interval = (1000 / u64::from(rate)).max(1);
            let start = pace.next_start.max(now.saturating_sub(1000));
            let room = (now + interval).saturating_sub(start) / interval;
            granted = granted.min(u32::try_from(room).unwrap_or(u32::MAX));
            pace.next_start = start + u64::from(granted) * interval;
        }
        if granted == 0 {
            return Ok::<_, KvError>(Update::Keep(0));
        }
        pace.slots.push((holder.to_owned(), until, granted));
        Ok(Update::Write(pace.encode(), granted))
    })
    .map_err(KvError::from)
}

/// Gives back every slot `holder` took of `sub_id`.
pub(crate) fn release<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &SubscriptionId,
    holder: &str,
) -> Result<(), KvError> {
    update(env.kv, &keys::pace(sub_id), &mut |cur| {
        let Some(mut pace) = cur.and_then(Pace::decode) else {
            return Ok::<_, KvError>(Update::Keep(()));
        };
        let before = pace.slots.len();
        pace.slots.retain(|(h, _, _)| h != holder);
        match pace.slots.len() == before {
            true => Ok(Update::Keep(())),
            false => Ok(Update::Write(pace.encode(), ())),
        }
    })
    .map_err(KvError::from)
}

/// Marks `sub_id`'s receiver slow until [`SLOW_FOR_MS`] from now, unless it already is for
/// at least half that (so a slow receiver's record is written once in five minutes, not per
/// attempt).
pub(crate) fn mark_slow<K: Kv>(env: &Env<'_, K>, sub_id: &SubscriptionId) -> Result<(), KvError> {
    let now = env.now_ms;
    update(env.kv, &keys::subscription(sub_id), &mut |cur| {
        let Some(bytes) = cur else {
            return Ok::<_, KvError>(Update::Keep(()));
        };
        let mut sub = Subscription::decode(bytes)
            .map_err(|e| KvError::Corrupt(format!("subscription record: {}", e.message)))?;
        if sub
            .options
            .slow_until
            .is_some_and(|u| u >= now + SLOW_FOR_MS / 2)
        {
            return Ok(Update::Keep(()));
        }
        sub.options.slow_until = Some(now + SLOW_FOR_MS);
        Ok(Update::Write(sub.encode(), ()))
    })
    .map_err(KvError::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgehook_model::config::Settings;
    use edgehook_model::env::SeededEntropy;
    use edgehook_storage::kv::MemoryKv;

    #[test]
    fn slots_are_capped_given_back_and_end_with_their_lease() {
        let (kv, settings, entropy) = (MemoryKv::new(), Settings::default(), SeededEntropy::new(1));
        let env = Env::new(1_000_000, &kv, &settings, &entropy);
        assert_eq!(
            acquire(
                &env,
                &SubscriptionId::from("sub_1"),
                (3, 0),
                2,
                "a",
                1_010_000
            ),
            Ok(2)
        );
        assert_eq!(
            acquire(
                &env,
                &SubscriptionId::from("sub_1"),
                (3, 0),
                5,
                "b",
                1_010_000
            ),
            Ok(1)
        );
        assert_eq!(
            acquire(
                &env,
                &SubscriptionId::from("sub_1"),
                (3, 0),
                1,
                "c",
                1_010_000
            ),
            Ok(0)
        );
        release(&env, &SubscriptionId::from("sub_1"), "a").expect("release");
        assert_eq!(
            acquire(
                &env,
                &SubscriptionId::from("sub_1"),
                (3, 0),
                5,
                "c",
                1_010_000
            ),
            Ok(2)
        );
        // A holder that never gives its slots back loses them when its lease runs out.
        let later = Env::new(1_010_001, &kv, &settings, &entropy);
        assert_eq!(
            acquire(
                &later,
                &SubscriptionId::from("sub_1"),
                (3, 0),
                5,
                "d",
                1_020_000
            ),
            Ok(3)
        );
        assert_eq!(
            acquire(
                &env,
                &SubscriptionId::from("sub_2"),
                (u32::MAX, 0),
                100,
                "a",
                1_010_000
            ),
            Ok(100)
        );
    }

    #[test]
    fn a_rate_spaces_starts_with_a_seconds_burst() {
        let (kv, settings, entropy) = (MemoryKv::new(), Settings::default(), SeededEntropy::new(1));
        let at = |ms| Env::new(ms, &kv, &settings, &entropy);
        let take = |ms, n| {
            acquire(
                &at(ms),
                &SubscriptionId::from("sub_1"),
                (u32::MAX, 4),
                n,
                "h",
                ms + 1,
            )
            .expect("ok")
        };
        // 4/s: one every 250 ms, a second's worth (and one) at once.
        assert_eq!(take(10_000, 10), 5);
        assert_eq!(take(10_000, 10), 0);
        assert_eq!(take(10_250, 10), 1);
        assert_eq!(take(10_400, 10), 0);
        assert_eq!(take(11_250, 10), 4);
    }

    #[test]
    fn a_subscription_is_paced_when_its_owner_says_or_its_receiver_is_slow() {
        let kv = MemoryKv::new();
        let id = crate::tests::active_subscription(&kv);
        let bytes = kv
            .get(&keys::subscription(&id))
            .expect("get")
            .expect("stored");
        let mut sub = Subscription::decode(&bytes).expect("a record");
        assert_eq!(limits(&sub, 5), None, "neither: no store operation");
        sub.options.slow_until = Some(10);
        assert_eq!(limits(&sub, 5), Some((u32::from(DEFAULT_MAX_IN_FLIGHT), 0)));
        assert_eq!(limits(&sub, 10), None, "slow no longer");
        sub.options.max_in_flight = 3;
        sub.options.rate_limit = 7;
        assert_eq!(limits(&sub, 10), Some((3, 7)));
    }
}
