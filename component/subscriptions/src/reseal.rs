//! Sealing every stored secret under the current key, a bounded batch at a time: after a key
//! rotation (`seal_previous_key` set to the old key, `seal_key` to the new), or once a key
//! is first set on a store whose secrets are plain. When a whole pass finds nothing left to
//! seal, the previous key can be dropped.
//!
//! Every subscription that holds a secret is in the fan-out list of each of its event types
//! (a delete, which erases the secret, removes it; a disable keeps it), and every
//! notification endpoint is in the notification directory, so a pass walks those lists, one
//! event type after another and the directory last, and seals each record by
//! compare-and-swap: a write racing it is never lost, and a record already sealed under the
//! current key is left as it is (a subscription in several lists is sealed once).

use crate::index::fanout_index;
use crate::notify;
use crate::{ApiError, Env, Kv, Subscription};
use edgehook_model::events::EVENT_TYPES;
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_records::notify::{NotificationEndpoint, endpoint_id};
use edgehook_storage::keys;
use edgehook_storage::kv::{Update, update};

/// Where a pass is: the list (an event type's, by its position in [`EVENT_TYPES`], then the
/// notification directory, at [`LISTS`]` - 1`) and the last entry number done in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResealCursor {
    /// The list being walked.
    pub list: usize,
    /// The last entry number done in it (0: none yet).
    pub after: u64,
}

impl ResealCursor {
    /// The cursor as the API shows it: `<list>.<after>`.
    pub fn text(self) -> String {
        format!("{}.{}", self.list, self.after)
    }

    /// A cursor [`ResealCursor::text`] wrote; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let (list, after) = text.split_once('.')?;
        let list: usize = list.parse().ok()?;
        (list < LISTS).then_some(())?;
        Some(ResealCursor {
            list,
            after: after.parse().ok()?,
        })
    }
}

/// The lists a pass walks: the fan-out lists, then the notification directory.
const LISTS: usize = EVENT_TYPES.len() + 1;

/// What one batch did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ResealBatch {
    /// List entries read.
    pub scanned: u32,
    /// Records whose secrets were sealed again under the current key.
    pub resealed: u32,
    /// Subscriptions whose secret opens under neither key (left as they are).
    pub unreadable: Vec<SubscriptionId>,
    /// Clients whose notification endpoint's secret opens under neither key (left as is).
    pub unreadable_endpoints: Vec<ClientId>,
    /// Where the next batch starts; `None`: the pass is done.
    pub next: Option<ResealCursor>,
}

/// Seals the secrets of up to `limit` list entries from `from` under the settings' current
/// key (the caller checks there is one).
pub fn reseal_batch<K: Kv>(
    env: &Env<'_, K>,
    from: ResealCursor,
    limit: usize,
) -> Result<ResealBatch, ApiError> {
    let mut batch = ResealBatch::default();
    let mut at = from;
    let mut left = limit.max(1);
    while at.list < LISTS && left > 0 {
        let endpoints = at.list == EVENT_TYPES.len();
        let entries = match endpoints {
            false => fanout_index(EVENT_TYPES[at.list]).read(env.kv, at.after, left)?,
            true => notify::directory().read(env.kv, at.after, left)?,
        };
        let exhausted = entries.len() < left;
        for entry in entries {
            match endpoints {
                false => reseal_one(env, &SubscriptionId::trusted(entry.item), &mut batch)?,
                true => reseal_endpoint(env, &ClientId::trusted(entry.item), &mut batch)?,
            }
            batch.scanned += 1;
            left -= 1;
            at.after = entry.seq;
        }
        if exhausted {
            at = ResealCursor {
                list: at.list + 1,
                after: 0,
            };
        }
    }
    batch.next = (at.list < LISTS).then_some(at);
    Ok(batch)
}

/// What a record needed.
enum Done {
    Nothing,
    Resealed,
    Unreadable,
}

/// Seals subscription `id`'s secrets under the current key if they are not yet.
fn reseal_one<K: Kv>(
    env: &Env<'_, K>,
    id: &SubscriptionId,
    batch: &mut ResealBatch,
) -> Result<(), ApiError> {
    let seal = &env.settings.seal;
    let done = update(env.kv, &keys::subscription(id), &mut |cur| {
        let Some(bytes) = cur else {
            return Ok(Update::Keep(Done::Nothing));
        };
        let mut sub = Subscription::decode(bytes)?;
        if !sub.stale_secrets(seal) {
            return Ok(Update::Keep(Done::Nothing));
        }
        match sub.reseal(seal, &mut || env.random_bytes()) {
            Ok(_) => Ok(Update::Write(sub.encode(), Done::Resealed)),
            Err(_) => Ok(Update::Keep(Done::Unreadable)),
        }
    })
    .map_err(ApiError::from)?;
    match done {
        Done::Nothing => {}
        Done::Resealed => batch.resealed += 1,
        Done::Unreadable => batch.unreadable.push(id.clone()),
    }
    Ok(())
}

/// Seals the secret of `client_id`'s notification endpoint under the current key if it is
/// not yet (nothing when the client has none now).
fn reseal_endpoint<K: Kv>(
    env: &Env<'_, K>,
    client_id: &ClientId,
    batch: &mut ResealBatch,
) -> Result<(), ApiError> {
    let seal = &env.settings.seal;
    let key = keys::notification_endpoint(&endpoint_id(client_id));
    let done = update(env.kv, &key, &mut |cur| {
        let Some(mut endpoint) = cur.and_then(NotificationEndpoint::decode) else {
            return Ok(Update::Keep(Done::Nothing));
        };
        match endpoint.secret.resealed(seal, env.random_bytes(), &key) {
            Ok(None) => Ok(Update::Keep(Done::Nothing)),
            Ok(Some(secret)) => {
                endpoint.secret = secret;
                Ok(Update::Write(endpoint.encode(), Done::Resealed))
            }
            Err(_) => Ok(Update::Keep(Done::Unreadable)),
        }
    })
    .map_err(ApiError::from)?;
    match done {
        Done::Nothing => {}
        Done::Resealed => batch.resealed += 1,
        Done::Unreadable => batch.unreadable_endpoints.push(client_id.clone()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NewSubscription, activate, create_pending};
    use edgehook_model::config::Settings;
    use edgehook_model::env::SeededEntropy;
    use edgehook_model::seal::{SealKey, SealKeys};
    use edgehook_storage::kv::MemoryKv;

    fn settings(current: Option<u8>, previous: Option<u8>) -> Settings {
        Settings {
            seal: SealKeys {
                current: current.map(|k| SealKey::new([k; 32])),
                previous: previous.map(|k| SealKey::new([k; 32])),
            },
            ..Settings::default()
        }
    }

    /// A pass in batches of `limit`: the batches' counts, summed, and how many batches.
    fn pass(env: &Env<'_, MemoryKv>, limit: usize) -> (u32, u32, Vec<SubscriptionId>, usize) {
        let (mut scanned, mut resealed, mut unreadable, mut batches) = (0, 0, Vec::new(), 0);
        let mut cursor = Some(ResealCursor::default());
        while let Some(from) = cursor {
            let cursor_text = from.text();
            assert_eq!(ResealCursor::parse(&cursor_text), Some(from));
            let batch = reseal_batch(env, from, limit).expect("batch");
            assert!(batch.scanned as usize <= limit, "bounded");
            scanned += batch.scanned;
            resealed += batch.resealed;
            unreadable.extend(batch.unreadable);
            cursor = batch.next;
            batches += 1;
        }
        (scanned, resealed, unreadable, batches)
    }

    #[test]
    fn a_pass_seals_every_secret_under_the_current_key_in_bounded_batches() {
        let kv = MemoryKv::new();
        let entropy = SeededEntropy::new(8);
        let plain = settings(None, None);
        let env = Env::new(1_767_225_600_000, &kv, &plain, &entropy);
        let mut ids = Vec::new();
        for n in 0..5 {
            let types = match n % 2 {
                0 => vec!["load.created".into(), "load.updated".into()],
                _ => vec!["load.status_changed".into()],
            };
            let new = NewSubscription {
                url: format!("https://h{n}.example.com/x"),
                event_types: types,
                options: Default::default(),
            };
            let (sub, pending) =
                create_pending(&env, new, &ClientId::from("acme")).expect("create");
            activate(&env, &sub.id, Some((&sub, &pending))).expect("activate");
            ids.push(sub.id);
        }
        let crate::notify::Put::Created(_, notify_secret) =
            notify::put(&env, &ClientId::from("acme"), "https://n.example.com/x").expect("put")
        else {
            panic!("registered")
        };
        let endpoint = || {
            notify::load(&env, &ClientId::from("acme"))
                .expect("load")
                .expect("registered")
                .secret
        };
        assert_eq!(endpoint().plain(), Some(notify_secret.as_str()));
        let stored = |id: &str| {
            Subscription::decode(
                &kv.get(&keys::subscription(&SubscriptionId::from(id)))
                    .expect("get")
                    .expect("record"),
            )
            .expect("decode")
        };
        let texts: Vec<String> = ids
            .iter()
            .map(|id| stored(id).signing_secret.plain().expect("plain").to_owned())
            .collect();
        // A key set on a store whose secrets are plain: one pass seals them all; 8 entries
        // (3 subscriptions in two lists) in batches of 3.
        let first = settings(Some(1), None);
        let env = Env::new(1_767_225_600_000, &kv, &first, &entropy);
        assert_eq!(pass(&env, 3), (9, 6, Vec::new(), 4));
        assert!(ids.iter().all(|id| !stored(id).stale_secrets(&first.seal)));
        assert!(!endpoint().stale(&first.seal));
        assert_eq!(pass(&env, 100).1, 0, "nothing left");
        // A key rotation: everything sealed under the new key, each secret the same.
        let rotated = settings(Some(2), Some(1));
        let env = Env::new(1_767_225_600_000, &kv, &rotated, &entropy);
        assert_eq!(pass(&env, 2).1, 6);
        let second = settings(Some(2), None);
        for (id, text) in ids.iter().zip(&texts) {
            let sub = stored(id);
            assert!(!sub.stale_secrets(&second.seal));
            let (opened, _) = sub.open_secrets(&second.seal, 0).expect("opens");
            assert_eq!(&*opened, text);
        }
        let key = keys::notification_endpoint(&endpoint_id(&ClientId::from("acme")));
        assert_eq!(
            endpoint().open(&second.seal, &key).as_deref(),
            Ok(notify_secret.as_str())
        );
        // Under a key that opens nothing, each is reported and left as it is.
        let wrong = settings(Some(3), None);
        let env = Env::new(1_767_225_600_000, &kv, &wrong, &entropy);
        let (_, resealed, mut unreadable, _) = pass(&env, 100);
        unreadable.sort();
        unreadable.dedup();
        let mut all = ids.clone();
        all.sort();
        assert_eq!((resealed, unreadable), (0, all));
        let directory = ResealCursor {
            list: EVENT_TYPES.len(),
            after: 0,
        };
        let endpoints = reseal_batch(&env, directory, 10).expect("batch");
        assert_eq!(endpoints.unreadable_endpoints, [ClientId::from("acme")]);
        assert_eq!(endpoints.next, None);
        assert!(ResealCursor::parse("9.0").is_none() && ResealCursor::parse("x").is_none());
    }
}
