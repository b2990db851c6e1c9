//! The per-client cap on live subscriptions: a counter taken by each create and given back
//! by each disable, which only ever errs high and is recounted from the client index when
//! it says the cap is reached.

use crate::index::{client_index, decode_index_item};
use crate::load::load_many;
use crate::{ApiError, Env, Kv, Status};
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::keys;
use edgehook_storage::kv::{KvError, Update, update};

/// A `pending` record older than this is a failed create, not one in progress.
const STALE_PENDING_MS: u64 = 60 * 1000;

fn limit_reached(cap: u32) -> ApiError {
    ApiError::new(
        422,
        "subscription_limit_reached",
        format!("This API client already has {cap} active subscriptions; delete one first."),
    )
}

/// Counts subscription `id` (already in the client index, pending) against the client's cap.
///
/// The live counter is incremented; if that passes the cap, the increment is undone and the
/// client's live subscriptions are recounted from the index (the counter may be high after a
/// failed create or an interrupted delete). The recount is written by compare-and-swap, so a
/// concurrent change of the counter makes it start over rather than overwrite.
pub(crate) fn take_slot<K: Kv>(
    env: &Env<'_, K>,
    client_id: &ClientId,
    id: &SubscriptionId,
) -> Result<(), ApiError> {
    let cap = env.settings.subscription_limit;
    let key = keys::client_live(client_id);
    let nonce = edgehook_model::ids::hex(&env.random_bytes::<8>());
    let taken = update(env.kv, &key, &mut |current| {
        Ok::<_, ApiError>(match parse_live(current) {
            Some(n) if n < u64::from(cap) => Update::Write(encode_live(n + 1, &nonce), true),
            _ => Update::Keep(false), // at the cap (or unreadable): recount below
        })
    })?;
    if taken {
        return Ok(());
    }
    for _ in 0..4 {
        let (cas, _) = env.kv.cas_begin(&key)?;
        let entries = client_index(client_id).read_bytes(env.kv, 0, usize::MAX)?;
        // Each id once: an enable cut short may leave a second entry (see `crate::enable`).
        let mut ids: Vec<SubscriptionId> = entries
            .iter()
            .filter_map(|e| decode_index_item(&e.item))
            .filter(|(_, i, _)| *i != id.as_str())
            .map(|(_, i, _)| SubscriptionId::trusted(i))
            .collect();
        edgehook_storage::sort::sort(&mut ids);
        ids.dedup();
        let now = env.now_ms;
        let live = load_many(env, &ids)?
            .into_iter()
            .flatten()
            .filter(|s| match s.status {
                Status::Active => true,
                Status::Pending => now < s.created_at + STALE_PENDING_MS,
                Status::Disabled => false,
            })
            .count();
        if live >= cap as usize {
            return Err(limit_reached(cap));
        }
        if env
            .kv
            .cas_swap(cas, &encode_live(live as u64 + 1, &nonce))?
        {
            return Ok(());
        }
    }
    Err(ApiError::store_unavailable(
        "the subscription count kept changing",
    ))
}

/// The client's live-subscription count as stored: decimal text, then a space and the
/// writer's random nonce. It is changed only by compare-and-swap (never `increment`: a
/// counter's bytes are the host's own, and the recount must replace it atomically), and the
/// nonce makes every write's bytes unique, so a host whose swap can report failure after
/// applying (Spin 4.0.2's Redis store) is told apart by reading the key back.
pub(crate) fn encode_live(n: u64, nonce: &str) -> Vec<u8> {
    format!("{n} {nonce}").into_bytes()
}

/// Reads [`encode_live`]: `Some(0)` when missing, `None` when unreadable (a value of
/// another format, e.g. an `increment`ed counter of an earlier version: recounted).
pub(crate) fn parse_live(value: Option<&[u8]>) -> Option<u64> {
    let Some(value) = value else {
        return Some(0);
    };
    let text = std::str::from_utf8(value).ok()?;
    text.split(' ').next()?.parse().ok()
}

/// Gives back a slot of `client_id`'s count (a disable), best effort: a count left high is
/// corrected by the next recount.
pub(crate) fn give_back_slot<K: Kv>(env: &Env<'_, K>, client_id: &ClientId) {
    let nonce = edgehook_model::ids::hex(&env.random_bytes::<8>());
    let given = update(env.kv, &keys::client_live(client_id), &mut |current| {
        Ok::<_, KvError>(match parse_live(current) {
            Some(n) if n > 0 => Update::Write(encode_live(n - 1, &nonce), ()),
            _ => Update::Keep(()),
        })
    });
    env.best_effort(
        "give back a slot (client count)",
        given.map_err(KvError::from),
    );
}
