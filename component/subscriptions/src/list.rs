//! Listing a client's active subscriptions in creation order, a page at a time.
//!
//! Reads the client's index only: a `Live` entry carries its list item ready-made, and a page
//! is those items as stored. Records are read just for the entries list cannot trust (see
//! `index::Listing`).

use crate::index::{Listing, client_index, decode_index_item, partner_view};
use crate::{ApiError, Env, Kv, Status, Subscription};
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::keys::{self, Key};

/// One subscription of a page: its place in the client's creation order and its partner
/// view as JSON bytes.
pub struct Listed {
    /// Its number in the client index (a cursor resumes after it).
    pub seq: u64,
    bytes: Vec<u8>,
    at: usize,
}

impl Listed {
    /// The partner view, JSON (a `Live` entry's item is kept whole, not copied: its list item
    /// is its tail).
    pub fn view(&self) -> &[u8] {
        &self.bytes[self.at..]
    }

    /// Its subscription id: the view's first field (`{"id":"sub_...",...}`, as
    /// [`crate::PartnerView`] writes it).
    pub fn id(&self) -> Option<&str> {
        let rest = self.view().strip_prefix(b"{\"id\":\"")?;
        let end = rest.iter().position(|b| *b == b'"')?;
        std::str::from_utf8(&rest[..end]).ok()
    }
}

/// Up to `limit` of `client_id`'s active subscriptions after index number `after`, and
/// whether more follow.
pub fn list_page<K: Kv>(
    env: &Env<'_, K>,
    client_id: &ClientId,
    limit: usize,
    mut after: u64,
) -> Result<(Vec<Listed>, bool), ApiError> {
    let index = client_index(client_id);
    let mut found: Vec<Listed> = Vec::with_capacity(limit + 1);
    // Deleted subscriptions leave the index, so one round is the rule; more only when
    // entries point at records that are not active (a create or delete cut short).
    while found.len() <= limit {
        let asked = limit + 1 - found.len();
        let entries = index.read_bytes(env.kv, after, asked)?;
        // Fewer than asked: the index was read to its end, and this is the last round.
        let exhausted = entries.len() < asked;
        let Some(last) = entries.last() else {
            break;
        };
        after = last.seq;
        // Each entry decoded once; the ones list cannot trust are checked against their record.
        enum Seen {
            Live(usize),
            Unsure,
            Unreadable,
        }
        let mut unsure: Vec<Key> = Vec::new();
        let seen: Vec<Seen> = entries
            .iter()
            .map(|e| match decode_index_item(&e.item) {
                None => Seen::Unreadable,
                Some((Some(Listing::Live), _, view)) => Seen::Live(e.item.len() - view.len()),
                Some((_, id, _)) => {
                    unsure.push(keys::subscription(&SubscriptionId::trusted(id)));
                    Seen::Unsure
                }
            })
            .collect();
        let mut records = match unsure.is_empty() {
            true => Vec::new(),
            false => env.kv.get_many(&unsure)?,
        }
        .into_iter();
        for (entry, seen) in entries.into_iter().zip(seen) {
            let view = match seen {
                Seen::Unreadable => None,
                Seen::Live(at) => Some((entry.item, at)),
                Seen::Unsure => records
                    .next()
                    .flatten()
                    .and_then(|b| Subscription::decode(&b).ok())
                    .filter(|s| {
                        // The record's `seq` names its one entry: an enable cut short
                        // leaves others (see `crate::enable`).
                        s.status == Status::Active && s.client_id == client_id && s.seq == entry.seq
                    })
                    .and_then(|s| serde_json::to_vec(&partner_view(&s)).ok())
                    .map(|view| (view, 0)),
            };
            if let Some((bytes, at)) = view {
                found.push(Listed {
                    seq: entry.seq,
                    bytes,
                    at,
                });
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
