//! Creating a subscription, in the order that keeps a create cut short invisible: a slot
//! under the cap, the fan-out entries, the client-index entry (`Joining`), the record as
//! `pending`, and last the flip to `active` (the commit point), after which the client-index
//! entry becomes `Live`. The API stores the idempotency response between the pending record
//! and the flip.

use crate::cap::take_slot;
use crate::index::{
    Listing, PartnerView, append_one, client_index, encode_index_item, fanout_index, set_listing,
};
use crate::{ApiError, DeliveryOptions, Env, Kv, Secret, Status, Subscription};
use edgehook_model::ids::Generate;
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::keys;
use edgehook_storage::kv::{Update, update};

/// A create's input, validated (the URL against the settings' target policy, the event
/// types known and deduplicated).
pub struct NewSubscription {
    /// Target URL, as given.
    pub url: String,
    /// Event types it listens to.
    pub event_types: Vec<String>,
    /// Signature scheme and headers (no previous secret: a new subscription has one).
    pub options: DeliveryOptions,
}

/// The first steps of a create, up to a pending record that holds a slot under the cap:
/// returns the record and its stored bytes. [`activate`] commits it.
pub fn create_pending<K: Kv>(
    env: &Env<'_, K>,
    input: NewSubscription,
    client_id: &ClientId,
) -> Result<(Subscription, Vec<u8>), ApiError> {
    let id = SubscriptionId::generate(env.entropy);
    // The cap first: a refused create writes nothing, so refusals cannot grow the shared
    // fan-out lists every publish reads. A slot taken by a create that then fails is given
    // back by the recount when the cap next seems reached.
    take_slot(env, client_id, &id)?;
    let secret = Secret::generate_for(input.options.scheme, env.random_bytes::<32>());
    let secret = crate::options::stored_secret(env, &id, secret);
    let mut fanout_seqs = Vec::with_capacity(input.event_types.len());
    for event_type in &input.event_types {
        fanout_seqs.push(append_one(env, &fanout_index(event_type), id.as_bytes())?);
    }
    let view = serde_json::to_vec(&PartnerView {
        id: &id,
        url: &input.url,
        event_types: &input.event_types,
        status: "active",
        created_at: env.now_ms,
    })
    .map_err(ApiError::internal)?;
    let item = encode_index_item(Listing::Joining, &id, &view);
    let seq = append_one(env, &client_index(client_id), &item)?;
    let sub = Subscription {
        id: id.clone(),
        client_id: client_id.clone(),
        url: input.url,
        event_types: input.event_types,
        signing_secret: secret,
        status: Status::Pending,
        disabled_reason: None,
        created_at: env.now_ms,
        disabled_at: None,
        seq,
        consecutive_failures: 0,
        fanout_seqs,
        disabled_entries: (None, None),
        options: input.options,
    };
    let pending = sub.encode();
    env.kv.set(&keys::subscription(&id), &pending)?;
    Ok((sub, pending))
}

/// Flips a pending record to active (the commit point of a create), then lets list trust
/// its client-index entry. Idempotent. `written` is the record this call wrote and its
/// exact bytes: a record still holding those bytes needs not be parsed. Returns the record
/// as it now is (active, or disabled if a delete came first).
pub fn activate<K: Kv>(
    env: &Env<'_, K>,
    id: &SubscriptionId,
    written: Option<(&Subscription, &[u8])>,
) -> Result<Subscription, ApiError> {
    let (active, now) = update(env.kv, &keys::subscription(id), &mut |current| {
        let mut sub: Subscription = match current {
            None => {
                return Err(ApiError::internal(format!(
                    "subscription {id} vanished during create"
                )));
            }
            Some(b) => match written.filter(|(_, w)| *w == b) {
                Some((sub, _)) => sub.clone(),
                None => Subscription::decode(b)?,
            },
        };
        match sub.status {
            Status::Pending => {
                sub.status = Status::Active;
                Ok(Update::Write(sub.encode(), (true, sub)))
            }
            Status::Active => Ok(Update::Keep((true, sub))),
            Status::Disabled => Ok(Update::Keep((false, sub))),
        }
    })?;
    if active {
        // Committed: this is best effort. An entry left `Joining` is checked against its
        // record by list, and the create has succeeded whatever happens here.
        env.best_effort("create: make live (client index)", make_live(env, &now));
    }
    Ok(now)
}

/// Lets list trust the client-index entry of `sub` (whose record is active). Only a
/// `Joining` entry becomes `Live`: a `Leaving` one belongs to a disable that has begun, and
/// must stay checked against its record.
pub(crate) fn make_live<K: Kv>(env: &Env<'_, K>, sub: &Subscription) -> Result<(), ApiError> {
    set_listing(env, sub, |l| l == Listing::Joining, Listing::Live)
}
