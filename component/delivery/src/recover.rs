//! Recovery by itself (opt-in: `auto_recover`): a subscription disabled for a failure streak
//! (not by a person, not by a `410 Gone`) is probed with a signed `webhook.ping`
//! after its disable, then after each probe that failed, by the delays of the
//! `recover_delays_ms` setting (10 minutes, then 1, 6 and 24 hours on by default), until the
//! last (then it stays disabled). A probe answered 2xx enables it as its owner's enable does,
//! replays what failed or was skipped since the disable as an enable with `replaySince`
//! does, records the probe in its delivery history (a delivered `webhook.ping`), and raises
//! `subscription.enabled` (reason `recovered`) to the operator and the partner.
//!
//! Each probe is a timer entry in the due queue (`timers.rs`), queued by the disable or by
//! the probe before it, and run here with the tick's other timers ([`run`]). One that comes
//! due and finds its subscription enabled, disabled again since, or the setting off does
//! nothing.

use crate::batch::TickClock;
use crate::history::history_log;
use crate::ping::{PING_EVENT, Ping, ping_body, send_ping};
use crate::scan::SecondScan;
use crate::sender::Sender;
use crate::timers::{REPEATED_FAILURES, TIMERS_PER_TICK, Timer, schedule};
use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::ids::{EventId, Generate, SubscriptionId};
use edgehook_records::delivery::{Attempt, Delivery, EventRecord, Status, delivery_id};
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, KvError, Update, update};
use edgehook_storage::retention;
use edgehook_subscriptions::{Enabled, Status as SubStatus, Subscription};
use sha2::{Digest, Sha256};
use std::rc::Rc;

/// Runs the timers the scanned seconds hold, up to [`TIMERS_PER_TICK`] and while the tick
/// has time; the others, and those that failed on the store, hold their second back.
pub(crate) fn run<K: Kv>(
    env: &Env<'_, K>,
    sender: &dyn Sender,
    scans: &mut [SecondScan],
    clock: &TickClock,
) -> usize {
    let mut ran = 0;
    for scan in scans.iter_mut() {
        for (seq, entry) in std::mem::take(&mut scan.timers) {
            let now = clock.now();
            if ran >= TIMERS_PER_TICK || clock.out_of_time() {
                scan.hold(seq, now);
                continue;
            }
            let Some(timer) = Timer::parse(&entry) else {
                continue; // not ours to read: passed
            };
            ran += 1;
            let env = clock.env(env);
            let done = match &timer {
                Timer::Probe {
                    sub,
                    disabled_at,
                    n,
                } => probe(&env, sender, clock, sub, *disabled_at, *n),
                Timer::RotationEnding { sub, until } => {
                    crate::notify::rotation_ending(&env, sub, *until)
                }
            };
            if done.is_err() {
                scan.hold(seq, now + 1000);
            }
        }
    }
    ran
}

/// Probe `n` of `sub_id`, disabled at `disabled_at`, come due: sends it if the subscription
/// is still that disable's, and enables or queues the next probe by its answer.
pub(crate) fn probe<K: Kv>(
    env: &Env<'_, K>,
    sender: &dyn Sender,
    clock: &TickClock,
    sub_id: &SubscriptionId,
    disabled_at: u64,
    n: u32,
) -> Result<(), ApiError> {
    if !env.settings.auto_recover {
        return Ok(());
    }
    let Some(sub) = edgehook_subscriptions::load(env, sub_id)? else {
        return Ok(());
    };
    let still = sub.status == SubStatus::Disabled
        && sub.disabled_reason.as_deref() == Some(REPEATED_FAILURES)
        && sub.disabled_at == Some(disabled_at);
    if !still {
        return Ok(());
    }
    let event_id = EventId::generate(env.entropy);
    let body = Rc::new(ping_body(&sub.id, env.now_ms));
    let ping = send_ping(
        env,
        sender,
        &sub,
        delivery_id(&event_id, &sub.id),
        body.clone(),
    );
    clock
        .elapsed_ms
        .set(clock.elapsed_ms.get() + ping.latency_ms);
    log_probe(env, &sub, &ping, n);
    let env = &clock.env(env);
    if ping.succeeded() {
        return recovered(env, &sub, &ping, &event_id, &body);
    }
    match env.settings.recover_delays_ms.before_probe(n as usize + 1) {
        Some(delay) => {
            let next = Timer::Probe {
                sub: sub.id.clone(),
                disabled_at,
                n: n + 1,
            };
            schedule(env, env.now_ms + delay, &next)?;
        }
        None => env.log.line(&format!(
            "{{\"type\":\"subscription.recovery_ended\",\"subscriptionId\":\"{}\",\"probes\":{n}}}",
            sub.id
        )),
    }
    Ok(())
}

/// A probe answered 2xx: the enable, the replay since the disable, the probe in the history.
fn recovered<K: Kv>(
    env: &Env<'_, K>,
    sub: &Subscription,
    ping: &Ping,
    event_id: &EventId,
    body: &[u8],
) -> Result<(), ApiError> {
    let Some(Enabled::Now(enabled)) =
        crate::health::enable_because(env, &sub.id, None, "recovered")?
    else {
        return Ok(()); // enabled by someone else meanwhile: theirs to replay
    };
    let since = sub.disabled_at.unwrap_or(env.now_ms);
    let replay = crate::replays::after_enable(env, &enabled.id, Some(&enabled.client_id), since);
    env.best_effort("recovery replay (replay job)", replay);
    let recorded = record_probe(env, sub, ping, event_id, body);
    env.best_effort("recovery probe (history)", recorded);
    Ok(())
}

/// The probe's line in the log: which one, and how the receiver answered.
fn log_probe<K: Kv>(env: &Env<'_, K>, sub: &Subscription, ping: &Ping, n: u32) {
    let (code, error) = match &ping.outcome {
        Ok(code) => (code.to_string(), "null".to_owned()),
        Err(e) => ("null".to_owned(), edgehook_model::error::quoted(e.as_str())),
    };
    env.log.line(&format!(
        "{{\"type\":\"subscription.probe\",\"subscriptionId\":\"{}\",\"probe\":{n},\
         \"statusCode\":{code},\"error\":{error},\"succeeded\":{}}}",
        sub.id,
        ping.succeeded()
    ));
}

/// Records the probe that enabled `sub` in its delivery history: an event of type
/// `webhook.ping` and its delivery, delivered in one attempt (kept and purged like any).
fn record_probe<K: Kv>(
    env: &Env<'_, K>,
    sub: &Subscription,
    ping: &Ping,
    event_id: &EventId,
    body: &[u8],
) -> Result<(), KvError> {
    let at = ping.sent_at;
    let event = EventRecord {
        id: event_id.clone(),
        event_type: PING_EVENT.to_owned(),
        created_at: at,
        body_sha256: edgehook_model::ids::hex(&Sha256::digest(body)),
        subscriptions: vec![sub.id.clone()],
        fanned_out: true,
        skipped: Vec::new(),
        trace: None,
    };
    retention::retain(env.kv, at, &event.id, None)?;
    create(env.kv, &keys::event_body(&event.id), body)?;
    create(env.kv, &keys::event(&event.id), &event.encode())?;
    let attempt = Attempt {
        run: 0,
        number: 1,
        due_at: at,
        started_at: at,
        status_code: ping.outcome.ok(),
        error: None,
        latency_ms: ping.latency_ms,
        succeeded: true,
        retry_after_ms: None,
    };
    let delivery = Delivery {
        id: ping.id.clone(),
        event_id: event.id.clone(),
        event_type: PING_EVENT.to_owned(),
        subscription_id: sub.id.clone(),
        created_at: at,
        status: Status::Succeeded,
        attempts: vec![attempt],
        run: 0,
        next_attempt_at: None,
        lease_until: None,
        lease_owner: None,
        finished_at: Some(at + ping.latency_ms),
    };
    history_log(&sub.id).append(env.kv, std::slice::from_ref(&delivery.id))?;
    create(env.kv, &keys::delivery(&delivery.id), &delivery.encode())
}

/// Writes `value` under `key` if nothing is there (a new record: nothing points at it yet).
fn create<K: Kv>(kv: &K, key: &Key, value: &[u8]) -> Result<(), KvError> {
    update(kv, key, &mut |cur| {
        Ok::<_, KvError>(match cur {
            None => Update::Write(value.to_vec(), ()),
            Some(_) => Update::Keep(()),
        })
    })
    .map_err(KvError::from)
}
