//! A subscription's delivery history (an append log of its delivery ids), and reading deliveries.

use edgehook_model::env::Env;
use edgehook_model::error::ApiError;
use edgehook_model::ids::{DeliveryId, EventId, SubscriptionId};
use edgehook_records::delivery::{Attempt, Delivery, EventRecord, Status};
use edgehook_storage::applog::{AppendLog, Entry};
use edgehook_storage::keys::{self, Key};
use edgehook_storage::kv::{Kv, KvError};
use edgehook_subscriptions::{DELETED, Status as SubStatus, Subscription};

pub(crate) fn history_log(subscription_id: &SubscriptionId) -> AppendLog {
    AppendLog::new(keys::subscription_deliveries(subscription_id))
}

/// Reads a delivery record.
pub fn load<K: Kv>(env: &Env<'_, K>, id: &DeliveryId) -> Result<Option<Delivery>, ApiError> {
    match env.kv.get(&keys::delivery(id))? {
        None => Ok(None),
        Some(b) => Delivery::decode(&b).map(Some).map_err(ApiError::internal),
    }
}

/// Which deliveries a history page shows (each `None`: any).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryFilter {
    /// Only deliveries in this status.
    pub status: Option<Status>,
    /// Only deliveries of this event type.
    pub event_type: Option<String>,
    /// Only deliveries created at or after this (ms since the epoch)...
    pub since: Option<u64>,
    /// ... and before this.
    pub until: Option<u64>,
}

impl HistoryFilter {
    fn is_any(&self) -> bool {
        *self == HistoryFilter::default()
    }

    fn matches(&self, d: &Delivery) -> bool {
        self.status.is_none_or(|s| s == d.status)
            && self.event_type.as_ref().is_none_or(|t| *t == d.event_type)
            && self.since.is_none_or(|t| d.created_at >= t)
            && self.until.is_none_or(|t| d.created_at < t)
    }
}

/// A page of a history: the deliveries shown, each with its position, and the cursor to
/// read on from (`None`: the history was read to its end).
pub type HistoryPage = (Vec<(u64, Delivery)>, Option<u64>);

/// History entries a filtered page reads at most, per item it may show: a page costs
/// O(`limit`) however rare the matches are (it may then show fewer than `limit`, with a
/// cursor to read on).
pub const SCAN_PER_ITEM: usize = 4;

/// A page of a subscription's deliveries, oldest first, after history position `after`,
/// those `filter` shows: at most `limit`, read from at most `limit` history entries
/// (× [`SCAN_PER_ITEM`] with a filter). Returns them with their positions, and the cursor
/// to read on from (`None`: the history was read to its end).
pub fn history<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &SubscriptionId,
    after: u64,
    limit: usize,
    filter: &HistoryFilter,
) -> Result<HistoryPage, ApiError> {
    let log = history_log(sub_id);
    // Pages the retention purge dropped are not read (a read from the start would walk
    // every one of them).
    let after = after.max(log.dropped_pages(env.kv)? * log.page_size());
    let scan = match filter.is_any() {
        true => limit,
        false => limit * SCAN_PER_ITEM,
    };
    let entries: Vec<Entry<DeliveryId>> = log.read_ids(env.kv, after, scan + 1)?;
    let more = entries.len() > scan;
    let entries = &entries[..entries.len().min(scan)];
    let keys: Vec<Key> = entries.iter().map(|e| keys::delivery(&e.item)).collect();
    let mut out: Vec<(u64, Delivery)> = Vec::new();
    let mut last = after;
    for (e, v) in entries.iter().zip(env.kv.get_many(&keys)?) {
        if out.len() == limit {
            return Ok((out, Some(last)));
        }
        last = e.seq;
        if let Some(d) = v.and_then(|b| Delivery::decode(&b).ok())
            && filter.matches(&d)
            // A fan-out retried after a failure may have listed a delivery twice.
            && !out.iter().any(|(_, seen)| seen.id == d.id)
        {
            out.push((e.seq, d));
        }
    }
    Ok((out, more.then_some(last)))
}

/// The most recent attempt to a subscription, with its delivery's id: the latest among the
/// attempts of its last [`LAST_ATTEMPT_LOOKBACK`] deliveries (a retry of an older one made
/// later is missed; its own record shows it). Two store operations and one batch read.
pub fn last_attempt<K: Kv>(
    env: &Env<'_, K>,
    sub_id: &SubscriptionId,
) -> Result<Option<(DeliveryId, Attempt)>, ApiError> {
    let log = history_log(sub_id);
    let len = log.len(env.kv)?;
    let entries: Vec<Entry<DeliveryId>> = log.read_ids(
        env.kv,
        len.saturating_sub(LAST_ATTEMPT_LOOKBACK),
        LAST_ATTEMPT_LOOKBACK as usize,
    )?;
    let keys: Vec<Key> = entries.iter().map(|e| keys::delivery(&e.item)).collect();
    Ok(env
        .kv
        .get_many(&keys)?
        .into_iter()
        .flatten()
        .filter_map(|b| Delivery::decode(&b).ok())
        .flat_map(|d| {
            let id = d.id;
            d.attempts.into_iter().map(move |a| (id.clone(), a))
        })
        .max_by_key(|(_, a)| a.started_at))
}

/// Deliveries [`last_attempt`] looks at.
pub const LAST_ATTEMPT_LOOKBACK: u64 = 16;

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
    sub_id: &SubscriptionId,
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
            .map(|e| keys::delivery(&DeliveryId::trusted(String::from_utf8_lossy(&e.item))))
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
fn forget_unlisted_event<K: Kv>(kv: &K, event_id: &EventId) -> Result<(), KvError> {
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
