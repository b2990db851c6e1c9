//! Retention by day: what must be purged once the retention period is past.
//!
//! Each day has an [`AppendLog`] of items (`retention:{day}`, see [`keys::retention`]) and
//! the retention directory ([`keys::RETENTION_DIRECTORY`]) lists the days that have one. An
//! item is a plain string whose meaning belongs to its writer (an event id, or the store key
//! of an idempotency record); [`purge_before`] hands every item of a past day back to a
//! purge function, then drops the day.
//!
//! May use: [`crate::applog`], [`crate::directory`], [`crate::keys`], [`crate::kv`].

use crate::applog::{AppendLog, Entry};
use crate::directory;
use crate::keys;
use crate::kv::{Kv, KvError, Update, update, update_seen, update_seldom};

/// One day in milliseconds: the unit of retention.
pub const DAY_MS: u64 = 24 * 60 * 60 * 1000;

fn retention_log(day: u64) -> AppendLog {
    AppendLog::new(keys::retention(day))
}

/// Puts `item` (an event id, or the store key of an idempotency record) in the retention log
/// of the day of `at_ms`, so the tick purges it once that day is past the retention period.
/// `seen`: the retention directory as read already, if it was.
pub fn retain<K: Kv>(
    kv: &K,
    at_ms: u64,
    item: &str,
    seen: Option<Option<&[u8]>>,
) -> Result<(), KvError> {
    let day = at_ms / DAY_MS;
    retention_log(day).append(kv, &[item])?;
    days_add(kv, day, seen)
}

/// Adds a day to the retention directory (its days, each with the value 0); `seen`: the
/// directory as read already, if it was.
fn days_add<K: Kv>(kv: &K, day: u64, seen: Option<Option<&[u8]>>) -> Result<(), KvError> {
    // Every event of the day after the first finds its day there.
    let add = |cur: Option<&[u8]>| {
        if let Some(cur) = cur
            && directory::contains(cur, day)?
        {
            return Ok(Update::Keep(()));
        }
        let mut days = cur.map(directory::decode).transpose()?.unwrap_or_default();
        days.insert(day, 0);
        Ok(Update::Write(directory::encode(&days), ()))
    };
    Ok(match seen {
        Some(seen) => update_seen(kv, &keys::RETENTION_DIRECTORY, seen, add),
        None => update_seldom(kv, &keys::RETENTION_DIRECTORY, add),
    }?)
}

/// Removes a day from the retention directory.
fn days_remove<K: Kv>(kv: &K, day: u64) -> Result<(), KvError> {
    Ok(update(kv, &keys::RETENTION_DIRECTORY, |cur| {
        let mut days = cur.map(directory::decode).transpose()?.unwrap_or_default();
        if days.remove(&day).is_none() {
            return Ok(Update::Keep(()));
        }
        Ok(Update::Write(directory::encode(&days), ()))
    })?)
}

/// For every day before `keep_from_day` in the directory: calls `purge` on each of its items,
/// then deletes the day's log and removes the day. A failure stops the purge where it is; the
/// day stays listed, so the next purge takes it up again (`purge` must be idempotent).
pub fn purge_before<K: Kv>(
    kv: &K,
    keep_from_day: u64,
    mut purge: impl FnMut(&str) -> Result<(), KvError>,
) -> Result<(), KvError> {
    let days = kv
        .get(&keys::RETENTION_DIRECTORY)?
        .map(|b| directory::decode(&b))
        .transpose()?
        .unwrap_or_default();
    for day in days.into_keys().filter(|d| *d < keep_from_day) {
        let log = retention_log(day);
        let items: Vec<Entry<String>> = log.read(kv, 0, usize::MAX)?;
        for item in &items {
            purge(&item.item)?;
        }
        log.delete_all(kv)?;
        days_remove(kv, day)?;
    }
    Ok(())
}
