//! Replay jobs: selection by range, status and type; bounded steps on the timer; progress;
//! cancelling.

use super::*;
use crate::replays::{self, JobState, NewReplay, REPLAY_PER_STEP};
use edgehook_model::config::Settings;
use edgehook_model::env::{Env, SeededEntropy};
use edgehook_storage::kv::MemoryKv;
use std::cell::Cell;

const T0: u64 = 1_767_225_600_000;

/// A subscription disabled at `T0` with `n` events published while disabled (each a skipped
/// delivery, one a millisecond), then enabled again. Returns the subscription and the
/// delivery ids in publish order.
fn skipped_deliveries(
    kv: &MemoryKv,
    settings: &Settings,
    n: u64,
) -> (SubscriptionId, Vec<DeliveryId>) {
    let entropy = SeededEntropy::new(21);
    let sub = active_subscription(kv);
    disable(&Env::new(T0, kv, settings, &entropy), &sub, "operator").expect("disable");
    let ids = (0..n)
        .map(|i| {
            let env = Env::new(T0 + 1 + i, kv, settings, &entropy);
            let receipt = publish(&env, "load.created", br#"{"id":"L"}"#, None).expect("publish");
            delivery_id(&receipt.event_id, &sub)
        })
        .collect();
    let env = Env::new(T0 + 60_000, kv, settings, &entropy);
    edgehook_subscriptions::enable(&env, &sub, None).expect("enable");
    (sub, ids)
}

fn job_of(sub: &SubscriptionId, since: u64, until: u64) -> NewReplay {
    NewReplay {
        client_id: Some("acme".into()),
        subscriptions: vec![sub.clone()],
        since,
        until,
        statuses: vec![Status::Skipped, Status::Failed],
        event_types: Vec::new(),
        search_client: None,
    }
}

#[test]
fn a_replay_job_selects_then_replays_in_bounded_steps_keeping_each_id() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(22);
    let n = 450;
    let (sub, ids) = skipped_deliveries(&kv, &settings, n);
    let at = |t: u64| Env::new(t, &kv, &settings, &entropy);
    let job = replays::start(&at(T0 + 120_000), job_of(&sub, T0, T0 + 120_000)).expect("job");
    let sent = Counting(Cell::new(0));
    // Tick 1 selects all 450 (one step reads up to 512 history entries) and replays none.
    let report = tick(&at(T0 + 121_000), &sent);
    assert_eq!(
        report.next_due_ms,
        Some(T0 + 122_000),
        "running: tick again in a second"
    );
    let state = replays::load(&at(T0 + 121_000), &job.id, None)
        .expect("load")
        .expect("job");
    assert_eq!(
        (state.state, state.total, state.done),
        (JobState::Replaying, n, 0)
    );
    // Then at most REPLAY_PER_STEP per tick, each sent under its own id.
    let mut t = T0 + 122_000;
    let mut per_tick = Vec::new();
    loop {
        let before = sent.0.get();
        tick(&at(t), &sent);
        per_tick.push(sent.0.get() - before);
        t += 1_000;
        let state = replays::load(&at(t), &job.id, None)
            .expect("load")
            .expect("job");
        if state.state == JobState::Done {
            assert_eq!((state.total, state.done, state.failed), (n, n, 0));
            break;
        }
        assert!(per_tick.len() < 10, "{per_tick:?}");
    }
    assert!(
        per_tick.iter().all(|c| *c <= REPLAY_PER_STEP),
        "{per_tick:?}"
    );
    tick(&at(t), &sent);
    assert_eq!(
        sent.0.get(),
        n as usize,
        "every selected delivery sent once"
    );
    for id in &ids {
        let d = stored_delivery(&kv, &keys::delivery(id).to_string());
        assert_eq!((d.status, d.run), (Status::Succeeded, 1), "{id}");
    }
    let done = tick(&at(t + 1_000), &sent);
    assert_eq!(
        done.next_due_ms, None,
        "a finished job leaves the ticks' list"
    );
    assert_eq!(
        selection_records(&kv, &job.id),
        0,
        "and its selections are deleted"
    );
    // Its record stays readable through the retention period after the day it finished,
    // then the purge takes it with that day's deliveries.
    let day = edgehook_storage::retention::DAY_MS;
    let retention = u64::from(settings.retention_days) * day;
    tick(&at(t + retention - day), &sent);
    assert!(
        replays::load(&at(t), &job.id, None)
            .expect("load")
            .is_some()
    );
    // The day's 450 events go first, a bounded batch a tick.
    for i in 0..20 {
        tick(&at(t + retention + day + i * 1_000), &sent);
    }
    assert_eq!(replays::load(&at(t), &job.id, None).expect("load"), None);
    let left = replay_keys(&kv);
    assert!(left.is_empty(), "{left:?}");
}

/// The replay jobs' keys the store holds (records and selections).
fn replay_keys(kv: &MemoryKv) -> Vec<String> {
    let prefix = keys::REPLAY_PREFIX;
    kv.dump()
        .into_keys()
        .filter(|k| k.starts_with(prefix))
        .collect()
}

/// How many selection records of job `id` the store holds.
fn selection_records(kv: &MemoryKv, id: &str) -> usize {
    let prefix = format!("{}:s", keys::replay(&ReplayJobId::from(id)));
    replay_keys(kv)
        .iter()
        .filter(|k| k.starts_with(&prefix))
        .count()
}

#[test]
fn a_replay_job_selects_by_time_range_status_and_type_and_can_be_cancelled() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(23);
    let (sub, ids) = skipped_deliveries(&kv, &settings, 10);
    let at = |t: u64| Env::new(t, &kv, &settings, &entropy);
    let now = T0 + 120_000;
    let sent = Counting(Cell::new(0));
    // Deliveries 3..7 by time (created at T0+4 .. T0+7, `until` excluded).
    let job = replays::start(&at(now), job_of(&sub, T0 + 4, T0 + 8)).expect("job");
    tick(&at(now), &sent);
    let state = replays::load(&at(now), &job.id, None)
        .expect("load")
        .expect("job");
    assert_eq!(state.total, 4);
    // Only delivered ones: none. Another event type: none.
    let delivered = NewReplay {
        statuses: vec![Status::Succeeded],
        ..job_of(&sub, T0, now)
    };
    let other_type = NewReplay {
        event_types: vec!["load.updated".into()],
        ..job_of(&sub, T0, now)
    };
    for new in [delivered, other_type] {
        let job = replays::start(&at(now), new).expect("job");
        tick(&at(now + 1), &sent);
        let state = replays::load(&at(now + 1), &job.id, None)
            .expect("load")
            .expect("job");
        assert_eq!((state.state, state.total), (JobState::Done, 0));
    }
    // A job cancelled after its selection replays nothing more.
    let job = replays::start(&at(now + 2), job_of(&sub, T0, now)).expect("job");
    tick(&at(now + 1_000), &sent);
    assert_eq!(
        selection_records(&kv, &job.id),
        1,
        "selected, not replayed yet"
    );
    let cancelled = replays::cancel(&at(now + 1_500), &job.id, Some(&ClientId::from("acme")))
        .expect("cancel")
        .expect("job");
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert_eq!(
        replays::cancel(&at(now + 1_500), &job.id, Some(&ClientId::from("globex")))
            .expect("cancel"),
        None
    );
    let before = sent.0.get();
    tick(&at(now + 2_000), &sent);
    tick(&at(now + 3_000), &sent);
    let state = replays::load(&at(now + 3_000), &job.id, None)
        .expect("load")
        .expect("job");
    assert_eq!((state.state, state.done), (JobState::Cancelled, 0));
    assert_eq!(
        selection_records(&kv, &job.id),
        0,
        "a cancelled job's selections go"
    );
    // What the first job replayed was sent; nothing of the cancelled one.
    assert_eq!(sent.0.get() - before, 0, "{ids:?}");
}

#[test]
fn a_replay_job_cut_short_at_any_store_operation_leaves_nothing_half_made_and_finishes() {
    let settings = Settings::default();
    let entropy = SeededEntropy::new(24);
    let now = T0 + 120_000;
    // Operations of a start, a selecting step, a replaying step and the job's retiring, and
    // then some.
    for fail_at in 1..=120 {
        let kv = MemoryKv::new();
        let (sub, ids) = skipped_deliveries(&kv, &settings, 5);
        let at = |t: u64| Env::new(t, &kv, &settings, &entropy);
        kv.fail_at(Some(fail_at));
        let started = replays::start(&at(now), job_of(&sub, T0, now));
        let sent = Counting(Cell::new(0));
        tick(&at(now + 1_000), &sent);
        tick(&at(now + 2_000), &sent);
        kv.fail_at(None);
        let Ok(job) = started else {
            // The start failed: no job record is left, and the ticks' list is clean again.
            tick(&at(now + 3_000), &sent);
            let left = replay_keys(&kv);
            assert!(left.is_empty(), "fault at {fail_at}: {left:?}");
            let dir = kv
                .get(&keys::REPLAY_DIRECTORY)
                .expect("get")
                .unwrap_or_default();
            assert!(dir.is_empty(), "fault at {fail_at}: {dir:?}");
            continue;
        };
        // Whatever step failed is run again once its lease is over: the job finishes, every
        // skipped delivery is replayed and delivered.
        let mut t = now + 3_000;
        for _ in 0..10 {
            tick(&at(t), &sent);
            t += 31_000;
        }
        let state = replays::load(&at(t), &job.id, None)
            .expect("load")
            .expect("job");
        assert_eq!(
            (state.state, state.total, state.done, state.failed),
            (JobState::Done, 5, 5, 0),
            "fault at {fail_at}"
        );
        // Retired whatever failed: its selections gone, off the ticks' list.
        assert_eq!(selection_records(&kv, &job.id), 0, "fault at {fail_at}");
        let dir = kv
            .get(&keys::REPLAY_DIRECTORY)
            .expect("get")
            .unwrap_or_default();
        assert!(dir.is_empty(), "fault at {fail_at}: {dir:?}");
        for id in &ids {
            let d = stored_delivery(&kv, &keys::delivery(id).to_string());
            assert_eq!(d.status, Status::Succeeded, "fault at {fail_at}: {id}");
        }
    }
}
