//! Retention by day: what must be purged once the retention period is past.
//!
//! Each day has an [`AppendLog`] of items (`retention:{day}`, see [`keys::retention`]) and
//! the retention directory ([`keys::RETENTION_DIRECTORY`]) lists the days that have one. An
//! item is a plain string whose meaning belongs to its writer (an event id, or the store key
//! of an idempotency record or of a finished replay job); [`purge_before`] hands the items of past days back to a purge
//! function a bounded batch at a time, the directory keeping how far each day was purged,
//! and drops a day once its log is purged to its end.
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

/// Puts `item` (an event id, or the store key of an idempotency record or a finished replay
/// job) in the retention log
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

/// Adds a day to the retention directory (its days, each with how far it was purged: 0); `seen`: the
/// directory as read already, if it was.
fn days_add<K: Kv>(kv: &K, day: u64, seen: Option<Option<&[u8]>>) -> Result<(), KvError> {
    // Every event of the day after the first finds its day there.
    let mut add = |cur: Option<&[u8]>| {
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
        Some(seen) => update_seen(kv, &keys::RETENTION_DIRECTORY, seen, &mut add),
        None => update_seldom(kv, &keys::RETENTION_DIRECTORY, &mut add),
    }?)
}

/// Removes a day from the retention directory.
fn days_remove<K: Kv>(kv: &K, day: u64) -> Result<(), KvError> {
    Ok(update(kv, &keys::RETENTION_DIRECTORY, &mut |cur| {
        let mut days = cur.map(directory::decode).transpose()?.unwrap_or_default();
        if days.remove(&day).is_none() {
            return Ok(Update::Keep(()));
        }
        Ok(Update::Write(directory::encode(&days), ()))
    })?)
}

/// Takes up to `budget` items of the days before `keep_from_day`, oldest day first, and
/// hands each day's share to `purge` with the day (it must be idempotent: a batch may be
/// handed again).
/// Each day's value in the directory is how far its log was purged (the last entry number
/// handed over and purged): after `purge` returns, the mark moves past the batch, and a day
/// whose log was read to its end is dropped (its log, then its directory entry). A failure
/// stops where it is and moves no mark, so the next call hands the same batch again: a
/// failed purge is retried, never skipped. Work per call: `budget` items and their purge.
pub fn purge_before<K: Kv>(
    kv: &K,
    keep_from_day: u64,
    mut budget: usize,
    mut purge: impl FnMut(u64, &[String]) -> Result<(), KvError>,
) -> Result<(), KvError> {
    let days = kv
        .get(&keys::RETENTION_DIRECTORY)?
        .map(|b| directory::decode(&b))
        .transpose()?
        .unwrap_or_default();
    for (day, purged) in days.into_iter().filter(|(d, _)| *d < keep_from_day) {
        if budget == 0 {
            break;
        }
        let log = retention_log(day);
        let batch: Vec<Entry<String>> = log.read(kv, purged, budget)?;
        let items: Vec<String> = batch.iter().map(|e| e.item.clone()).collect();
        purge(day, &items)?;
        if batch.len() < budget {
            // Read to its end: the day is past retention, so nobody appends to it any more.
            log.delete_all(kv)?;
            days_remove(kv, day)?;
            budget -= batch.len();
        } else {
            if let Some(last) = batch.last() {
                days_mark(kv, day, last.seq)?;
            }
            budget = 0;
        }
    }
    Ok(())
}

/// Records that `day`'s log is purged through entry `through` (never moving back).
fn days_mark<K: Kv>(kv: &K, day: u64, through: u64) -> Result<(), KvError> {
    Ok(update(kv, &keys::RETENTION_DIRECTORY, &mut |cur| {
        let mut days = cur.map(directory::decode).transpose()?.unwrap_or_default();
        match days.get_mut(&day) {
            Some(mark) if *mark < through => *mark = through,
            _ => return Ok(Update::Keep(())),
        }
        Ok(Update::Write(directory::encode(&days), ()))
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemoryKv;

    #[test]
    fn a_past_day_is_purged_a_batch_at_a_time_and_a_failed_batch_is_handed_again() {
        let kv = MemoryKv::new();
        for item in ["a", "b", "c", "d", "e"] {
            retain(&kv, 0, item, None).expect("retain");
        }
        retain(&kv, DAY_MS, "kept", None).expect("retain");
        let mut handed = Vec::new();
        let pass = |kv: &MemoryKv, fail: bool, handed: &mut Vec<Vec<String>>| {
            purge_before(kv, 1, 2, |_, items| {
                handed.push(items.to_vec());
                if fail {
                    return Err(KvError::Unavailable("down".into()));
                }
                Ok(())
            })
        };
        pass(&kv, false, &mut handed).expect("purge");
        pass(&kv, true, &mut handed).expect_err("failed");
        pass(&kv, false, &mut handed).expect("purge");
        pass(&kv, false, &mut handed).expect("purge");
        let expected: Vec<Vec<&str>> = vec![
            vec!["a", "b"],
            vec!["c", "d"],
            vec!["c", "d"], // the failed batch again, not skipped
            vec!["e"],
        ];
        assert_eq!(handed, expected);
        let days = directory::decode(
            &kv.get(&keys::RETENTION_DIRECTORY)
                .expect("get")
                .expect("directory"),
        )
        .expect("decode");
        assert_eq!(
            days.into_keys().collect::<Vec<_>>(),
            vec![1],
            "day 0 is gone"
        );
        let day0 = keys::retention(0);
        assert!(kv.dump().keys().all(|k| !k.starts_with(day0.as_str())));
    }
}
