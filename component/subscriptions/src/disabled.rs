//! Listing disabled subscriptions, a page at a time, in the order they were disabled: a
//! client's (its owner's `GET /v1/webhooks?status=disabled`; deleted ones are not in it) or
//! every client's (the operator's). Reads the list's entries and their records in one
//! batch; an entry counts only if its record is disabled and names that entry (an entry of
//! a disable that did not commit, or of one since undone by an enable, is skipped), so a
//! page costs O(page), as list's.

use crate::index::disabled_log;
use crate::{ApiError, Env, Kv, Status, Subscription};
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::keys::{self, Key};

/// Up to `limit` disabled subscriptions after entry number `after` (of `client_id`'s list,
/// or of every client's if `None`), each with its entry number (a cursor resumes after it),
/// and whether more follow.
pub fn disabled_page<K: Kv>(
    env: &Env<'_, K>,
    client_id: Option<&ClientId>,
    limit: usize,
    mut after: u64,
) -> Result<(Vec<(u64, Subscription)>, bool), ApiError> {
    let log = disabled_log(client_id);
    let mut found: Vec<(u64, Subscription)> = Vec::with_capacity(limit + 1);
    while found.len() <= limit {
        let asked = limit + 1 - found.len();
        let entries = log.read_bytes(env.kv, after, asked)?;
        let exhausted = entries.len() < asked;
        let Some(last) = entries.last() else {
            break;
        };
        after = last.seq;
        let ids: Vec<Key> = entries
            .iter()
            .map(|e| {
                let id = std::str::from_utf8(&e.item).unwrap_or_default();
                keys::subscription(&SubscriptionId::trusted(id))
            })
            .collect();
        for (entry, record) in entries.iter().zip(env.kv.get_many(&ids)?) {
            let Some(sub) = record.and_then(|b| Subscription::decode(&b).ok()) else {
                continue;
            };
            let named = match client_id {
                Some(c) => sub.client_id == c && sub.disabled_entries.0 == Some(entry.seq),
                None => sub.disabled_entries.1 == Some(entry.seq),
            };
            if named && sub.status == Status::Disabled {
                found.push((entry.seq, sub));
            }
        }
        if exhausted {
            break;
        }
    }
    let has_more = found.len() > limit;
    found.truncate(limit);
    Ok((found, has_more))
}
