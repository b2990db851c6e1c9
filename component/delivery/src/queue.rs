//! The due queue: an append log of delivery ids per second an attempt is due in, and the directory of those seconds with a watermark each.

use edgehook_model::ids::DeliveryId;
use edgehook_storage::applog::AppendLog;
use edgehook_storage::directory::{self, Directory};
use edgehook_storage::keys::{self};
use edgehook_storage::kv::{Kv, KvError, Update, update_seen, update_seldom};

/// Seconds a processed queue second is kept before it is deleted (tolerates clock skew
/// between instances appending to it).
pub(crate) const QUEUE_GRACE_S: u64 = 60;

pub(crate) fn second_of(ms: u64) -> u64 {
    ms / 1000
}

pub(crate) fn due_log(second: u64) -> AppendLog {
    AppendLog::new(keys::due(second))
}

/// The due and retention directories as publish read them, in one batch with its listeners'
/// records: fan-out writes either only when its second or day is missing. (A directory
/// drops a second or a day only long after anyone could still add to it, so a keep decided
/// on this read is as good as one decided on a fresh one.)
pub(crate) struct SeenDirectories {
    pub(crate) due: Option<Vec<u8>>,
    pub(crate) retention: Option<Vec<u8>>,
}

/// Delivery ids by the second they are due in: ascending by second, each second once (as
/// [`due_in`] builds it). A sorted `Vec` rather than a `BTreeMap`, whose code the
/// size-budgeted component would carry for this one type.
pub(crate) type BySecond = Vec<(u64, Vec<DeliveryId>)>;

/// Adds `id` to the ids due in `second`, keeping `by_second` in order.
pub(crate) fn due_in(by_second: &mut BySecond, second: u64, id: DeliveryId) {
    match by_second.binary_search_by(|(s, _)| s.cmp(&second)) {
        Ok(i) => by_second[i].1.push(id),
        Err(i) => by_second.insert(i, (second, vec![id])),
    }
}

/// Queues delivery ids in the seconds they are due (ascending by second, each once, as
/// [`BySecond`]): the entries first, then the directory (`seen`: as read already, if it
/// was). A second with no ids is neither queued nor listed.
pub(crate) fn enqueue<K: Kv, T: AsRef<[u8]>>(
    kv: &K,
    by_second: &[(u64, Vec<T>)],
    seen: Option<Option<&[u8]>>,
) -> Result<(), KvError> {
    let seconds: Vec<u64> = by_second
        .iter()
        .filter(|(_, ids)| !ids.is_empty())
        .map(|(second, _)| *second)
        .collect();
    if seconds.is_empty() {
        return Ok(());
    }
    for (second, ids) in by_second {
        due_log(*second).append(kv, ids)?;
    }
    // Every event of the second after the first finds its second there, by a search of
    // the record (nothing decoded: the directory lists every second of the last minute).
    let mut add = |cur: Option<&[u8]>| {
        if let Some(cur) = cur {
            let mut listed = true;
            for second in &seconds {
                listed &= directory::contains(cur, *second)?;
            }
            if listed {
                return Ok(Update::Keep(()));
            }
        }
        let mut dir = cur.map(directory::decode).transpose()?.unwrap_or_default();
        for second in &seconds {
            dir.insert_if_absent(*second, 0);
        }
        Ok(Update::Write(directory::encode(&dir), ()))
    };
    match seen {
        Some(seen) => update_seen(kv, &keys::DUE_DIRECTORY, seen, &mut add),
        None => update_seldom(kv, &keys::DUE_DIRECTORY, &mut add),
    }
    .map_err(KvError::from)
}

/// The due-queue directory: each second with a queue, and how many of its entries a tick has
/// already seen through (a watermark on entry numbers), so finished seconds cost one read.
pub(crate) fn read_directory<K: Kv>(kv: &K) -> Result<Directory, KvError> {
    kv.get(&keys::DUE_DIRECTORY)?
        .map(|b| directory::decode(&b))
        .transpose()
        .map(Option::unwrap_or_default)
}
