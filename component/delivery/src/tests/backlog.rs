//! A due second whose queue grew past what one tick can attempt (a backlog).

use super::*;
use crate::batch::MAX_ATTEMPTS_PER_TICK;
use crate::scan::SCAN_ENTRIES;
use edgehook_model::config::Settings;
use edgehook_model::env::{Env, SeededEntropy};
use edgehook_storage::applog::PAGE;

/// A second with more entries than a tick reads: each tick reads at most [`SCAN_ENTRIES`]
/// of its queue, in whole pages (the watermark moves on as far as it read), asks for the
/// next tick at once, and the ticks after it attempt every delivery exactly once. Before,
/// every tick read the whole second again (and every record in it) to attempt 2,000.
#[test]
fn a_backlogged_second_is_read_a_bounded_part_at_a_time_and_every_delivery_is_sent_once() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(24);
    let now = 1_767_225_600_000;
    let sub = active_subscription(&kv);
    let total = 2 * SCAN_ENTRIES + 300;
    let events: Vec<String> = (0..total).map(|i| format!("evt_{i:024}")).collect();
    let names: Vec<&str> = events.iter().map(String::as_str).collect();
    queued(&kv, &sub, &names, now);
    let sent = Counting(Cell::new(0));
    let mut ticks = 0;
    loop {
        let reads = HookKv::new(&kv, "", || {});
        let report = tick(&Env::new(now, &reads, &settings, &entropy), &sent);
        let pages_read = reads
            .reads
            .borrow()
            .iter()
            .filter(|k| k.starts_with("due:") && k.contains(":p"))
            .count();
        assert!(
            pages_read <= SCAN_ENTRIES.div_ceil(PAGE as usize) + 1,
            "tick {ticks}: {pages_read} queue pages read"
        );
        assert!(report.attempted as usize <= MAX_ATTEMPTS_PER_TICK);
        ticks += 1;
        if report.attempted == 0 {
            break;
        }
        if sent.0.get() < total {
            assert_eq!(
                report.next_due_ms,
                Some(now),
                "tick {ticks}: the rest at once"
            );
        }
        assert!(ticks < 10, "the ticks make progress");
    }
    assert_eq!(sent.0.get(), total, "each delivery once, none twice");
    let pending = events
        .iter()
        .map(|e| delivery_id(e, &sub))
        .filter(|id| {
            let bytes = kv.get(&keys::delivery(id)).expect("get").expect("record");
            Delivery::decode(&bytes).expect("record").status == Status::Pending
        })
        .count();
    assert_eq!(pending, 0);
}

/// A settled second (past its grace period) with a number never written (an appender that
/// failed) and more entries than a tick reads, all it reads finished: the watermark passes
/// the lost number but not the entries still unread, so the pending ones are sent.
#[test]
fn a_settled_backlogged_second_passes_a_lost_number_but_no_unread_entry() {
    let kv = MemoryKv::new();
    let settings = Settings::default();
    let entropy = SeededEntropy::new(25);
    let due = 1_767_225_600_000;
    let now = due + 61_000;
    let sub = active_subscription(&kv);
    kv.increment(&due_log(due / 1000).counter_key(), 1)
        .expect("number 1, never written");
    let total = SCAN_ENTRIES + 10;
    let events: Vec<String> = (0..total).map(|i| format!("evt_{i:024}")).collect();
    let names: Vec<&str> = events.iter().map(String::as_str).collect();
    let ids = queued(&kv, &sub, &names, due);
    for id in &ids[..SCAN_ENTRIES] {
        let mut d = stored_delivery(&kv, &keys::delivery(id));
        d.status = Status::Succeeded;
        d.next_attempt_at = None;
        d.finished_at = Some(due);
        kv.set(&keys::delivery(id), &d.encode()).expect("set");
    }
    let sent = Counting(Cell::new(0));
    for _ in 0..10 {
        // Until a tick asks for none at once (a truncated second asks for the next now).
        let report = tick(&Env::new(now, &kv, &settings, &entropy), &sent);
        if report.next_due_ms.is_none_or(|t| t > now) {
            break;
        }
    }
    assert_eq!(
        sent.0.get(),
        10,
        "the pending ones past the first read, once"
    );
}
