//! A subscription's delivery history (an append log of its delivery ids), and reading deliveries.

use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::ids::IdKind;
use edgehook_records::delivery::{Delivery, EventRecord};
use edgehook_storage::applog::{AppendLog, Entry};
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, KvError};
use edgehook_subscriptions::{DELETED, Status as SubStatus, Subscription};

pub(crate) fn history_log(subscription_id: &str) -> AppendLog {
    AppendLog::new(keys::subscription_deliveries(subscription_id))
}

/// Reads a delivery record.
pub fn load<K: Kv>(env: &Env<'_, K>, id: &str) -> Result<Option<Delivery>, ApiError> {
    if !IdKind::Delivery.matches(id) {
        return Ok(None);
    }
    match env.kv.get(&keys::delivery(id))? {
        None => Ok(None),
        Some(b) => Delivery::decode(&b).map(Some).map_err(ApiError::internal),
    }
}

/// A page of a subscription's deliveries, oldest first, after history position `after`.
pub fn history<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &str,
    after: u64,
    limit: usize,
) -> Result<(Vec<(u64, Delivery)>, bool), ApiError> {
    let log = history_log(sub_id);
    // Pages the retention purge dropped are not read (a read from the start would walk
    // every one of them).
    let after = after.max(log.dropped_pages(env.kv)? * log.page_size());
    let entries: Vec<Entry<String>> = log.read(env.kv, after, limit + 1)?;
    let has_more = entries.len() > limit;
    let entries = &entries[..entries.len().min(limit)];
    let keys: Vec<Key> = entries.iter().map(|e| keys::delivery(&e.item)).collect();
    let mut out: Vec<(u64, Delivery)> = Vec::new();
    for (e, v) in entries.iter().zip(env.kv.get_many(&keys)?) {
        if let Some(d) = v.and_then(|b| Delivery::decode(&b).ok()) {
            // A fan-out retried after a failure may have listed a delivery twice.
            if !out.iter().any(|(_, seen)| seen.id == d.id) {
                out.push((e.seq, d));
            }
        }
    }
    Ok((out, has_more))
}

/// History pages a trim drops per subscription at most: more than one purge batch can empty
/// ([`crate::purge::PURGE_ITEMS_PER_TICK`] events make less than one page of a
/// subscription's history), so a trim keeps up, and catches up on a backlog a few pages per
/// batch.
pub const TRIM_PAGES_PER_CALL: u64 = 4;

/// Drops the leading pages of a subscription's history that list only deliveries gone or
/// past retention (created before `keep_from_ms`; such a record, left by a publish that
/// failed before listing its event for retention, is deleted here, and so are that event's
/// body and record: [`forget_unlisted_event`]), oldest first, at most
/// [`TRIM_PAGES_PER_CALL`]. The last page stays while more may be appended to it, unless
/// the subscription was deleted: then, once every page is dropped, so are the counter and
/// the dropped mark, and nothing of the history is left. A damaged page is kept (and stops
/// the trim) rather than failing the purge. `expired`: how many records past retention the
/// trim may still delete in this purge; a page needing more stays for a later trim.
pub(crate) fn trim_history<K: Kv>(
    kv: &K,
    sub_id: &str,
    keep_from_ms: u64,
    expired_budget: &mut usize,
) -> Result<(), KvError> {
    let log = history_log(sub_id);
    let first = log.dropped_pages(kv)?;
    let pages = log.len(kv)?.div_ceil(log.page_size());
    let deleted = match kv.get(&keys::subscription(sub_id))? {
        Some(b) => Subscription::decode(&b).is_ok_and(|s| {
            s.status == SubStatus::Disabled && s.disabled_reason.as_deref() == Some(DELETED)
        }),
        None => false,
    };
    let mut page = first;
    while page < pages && page < first + TRIM_PAGES_PER_CALL {
        if page + 1 == pages && !deleted {
            break;
        }
        let Ok(entries) = log.read_page(kv, page) else {
            return Ok(());
        };
        let keys: Vec<Key> = entries
            .iter()
            .map(|e| keys::delivery(&String::from_utf8_lossy(&e.item)))
            .collect();
        let records = kv.get_many(&keys)?;
        let mut expired = Vec::new();
        for (key, record) in keys.iter().zip(records) {
            let Some(bytes) = record else { continue };
            match Delivery::decode(&bytes) {
                Ok(d) if d.created_at < keep_from_ms => expired.push((key, d.event_id)),
                // A delivery still kept: so is its page and every page after it.
                _ => return Ok(()),
            }
        }
        if expired.len() > *expired_budget {
            return Ok(());
        }
        *expired_budget -= expired.len();
        for (key, event_id) in expired {
            forget_unlisted_event(kv, &event_id)?;
            kv.delete(key)?;
        }
        if !log.drop_page(kv, page)? {
            return Ok(()); // another purge is at it
        }
        page += 1;
    }
    if deleted && page >= pages {
        log.forget_dropped(kv)?;
    }
    Ok(())
}

/// Deletes the body and record of an event past retention that may never have been listed
/// for the retention purge: a publish that failed before listing it leaves no record
/// (key-less) or one not fanned out (keyed, never retried). A listed event may be one of
/// those too: its purge then finds nothing, and its other deliveries, past retention, go
/// with their histories' trims.
fn forget_unlisted_event<K: Kv>(kv: &K, event_id: &str) -> Result<(), KvError> {
    let listed = match kv.get(&keys::event(event_id))? {
        Some(b) => EventRecord::decode(&b).is_ok_and(|e| e.fanned_out),
        None => false,
    };
    if !listed {
        kv.delete(&keys::event_body(event_id))?;
        kv.delete(&keys::event(event_id))?;
    }
    Ok(())
}
