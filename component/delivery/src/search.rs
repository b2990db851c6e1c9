//! The operator's delivery search across subscriptions and clients: by client, status,
//! event type and time range, cursor-paged, oldest first.
//!
//! The index that serves it is the retention log of each day (`ret:{day}`, the events of
//! that day in publish order, written by every publish) with the retention directory
//! (`retdir`) for the days that have one: a page walks the days of the range from the
//! cursor, reads at most `limit` × [`SCAN_PER_ITEM`] log entries, the events they name and
//! those events' delivery records (each event lists its subscriptions), and keeps the
//! deliveries the filters show. So a page costs O(page × fan-out), never O(history); a
//! rare filter may give a short (even empty) page with a cursor to read on. A client filter
//! reads the subscriptions of the page's deliveries once each. One subscription's deliveries
//! are better read from its own history (`crate::history`), which the API does when a
//! subscription is named.

use crate::history::{HistoryFilter, SCAN_PER_ITEM};
use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::ids::{ClientId, EventId, SubscriptionId};
use edgehook_records::delivery::{Delivery, EventRecord, delivery_id};
use edgehook_storage::applog::{AppendLog, Entry};
use edgehook_storage::directory;
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::Kv;
use edgehook_storage::retention::DAY_MS;
use edgehook_subscriptions as subscriptions;

/// Bits of a search cursor that hold the position in a day's log (the rest: the day).
const SEQ_BITS: u32 = 40;

/// A page of a search: as a history page ([`crate::history::HistoryPage`]), each delivery
/// with its event's position in its day's log.
pub type SearchPage = crate::history::HistoryPage;

/// Deliveries created in the filter's time range (default: the retention period up to now),
/// of `client_id`'s subscriptions if given, that `filter` shows; after `cursor` (0: from the
/// start). A page holds at most `limit` deliveries, and more only to finish the last
/// event's.
pub fn search<K: Kv>(
    env: &Env<'_, K>,
    client_id: Option<&ClientId>,
    filter: &HistoryFilter,
    cursor: u64,
    limit: usize,
) -> Result<SearchPage, ApiError> {
    let retention_ms = u64::from(env.settings.retention_days) * DAY_MS;
    let since = filter
        .since
        .unwrap_or(env.now_ms.saturating_sub(retention_ms));
    let until = filter.until.unwrap_or(env.now_ms + 1);
    let (mut day, mut seq) = match cursor {
        0 => (since / DAY_MS, 0),
        c => (c >> SEQ_BITS, c & ((1 << SEQ_BITS) - 1)),
    };
    let days: Vec<(u64, u64)> = match env.kv.get(&keys::RETENTION_DIRECTORY)? {
        Some(b) => directory::decode(&b)?.into_iter().collect(),
        None => Vec::new(),
    };
    let search = Search {
        client_id,
        filter,
        since,
        until,
    };
    let mut budget = limit * SCAN_PER_ITEM;
    let mut out: Vec<(u64, Delivery)> = Vec::new();
    for (d, purged) in days {
        if d < day || d * DAY_MS >= until {
            continue;
        }
        if d > day {
            (day, seq) = (d, 0);
        }
        let log = AppendLog::new(keys::retention(day));
        let entries: Vec<Entry<String>> = log.read(env.kv, seq.max(purged), budget + 1)?;
        let more = entries.len() > budget;
        for entry in entries {
            if budget == 0 {
                break;
            }
            budget -= 1;
            seq = entry.seq;
            if entry.item.starts_with("evt_") {
                let (id, _) = crate::loads::parse_retention_item(&entry.item);
                let event_id = EventId::trusted(id);
                event_deliveries(env, &event_id, &search, entry.seq, &mut out)?;
            }
            if out.len() >= limit {
                return Ok((out, Some(day << SEQ_BITS | seq)));
            }
        }
        if more || budget == 0 {
            return Ok((out, Some(day << SEQ_BITS | seq)));
        }
    }
    Ok((out, None))
}

/// Appends to `out` the deliveries of event `event_id` that the search shows (once each: a
/// resumed publish lists its event twice).
fn event_deliveries<K: Kv>(
    env: &Env<'_, K>,
    event_id: &EventId,
    search: &Search<'_>,
    seq: u64,
    out: &mut Vec<(u64, Delivery)>,
) -> Result<(), ApiError> {
    let Some(bytes) = env.kv.get(&keys::event(event_id))? else {
        return Ok(());
    };
    let event = EventRecord::decode(&bytes)?;
    if search
        .filter
        .event_type
        .as_ref()
        .is_some_and(|t| *t != event.event_type)
        || event.created_at < search.since
        || event.created_at >= search.until
    {
        return Ok(());
    }
    let mut subs: Vec<SubscriptionId> = Vec::new();
    subs.extend(event.all_subscriptions().cloned());
    if let Some(client) = search.client_id {
        let records = subscriptions::load_many(env, &subs)?;
        let mut mine = Vec::new();
        for (id, record) in subs.into_iter().zip(records) {
            if record.is_some_and(|r| r.client_id == client) {
                mine.push(id);
            }
        }
        subs = mine;
    }
    let mut record_keys: Vec<Key> = Vec::with_capacity(subs.len());
    for sub in &subs {
        record_keys.push(keys::delivery(&delivery_id(event_id, sub)));
    }
    for bytes in env.kv.get_many(&record_keys)?.into_iter().flatten() {
        let Ok(d) = Delivery::decode(&bytes) else {
            continue;
        };
        if search.filter.status.is_none_or(|s| s == d.status)
            && !out.iter().any(|(_, o)| o.id == d.id)
        {
            out.push((seq, d));
        }
    }
    Ok(())
}

/// What a search looks for, its range resolved.
struct Search<'a> {
    client_id: Option<&'a ClientId>,
    filter: &'a HistoryFilter,
    since: u64,
    until: u64,
}
