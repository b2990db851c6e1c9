//! # edgehook subscriptions — where subscriptions are kept
//!
//! Owns the storage of subscriptions: the record `sub:{id}` is the truth; the client index
//! and the fan-out indexes point at it ([`index`]). Both indexes are paged append logs, so a
//! create or delete rewrites one small page of each, never a whole index: its cost does not
//! grow with the client's or the event type's subscriptions.
//!
//! A create ([`mod@create`]) writes, in order: a slot under the client's cap ([`cap`]), the
//! fan-out entries, the client index entry (its number is the subscription's `seq`), the
//! record as `pending` (holding every entry's number), and last flips the record to
//! `active` — the commit point. Readers skip entries whose record is missing or not active,
//! so a create that fails half-way leaves nothing visible. A disable ([`disable()`]) flips the
//! record to `disabled` (its commit point), then removes its client-index entry (a delete:
//! its fan-out entries too; otherwise they stay, so publish records skipped deliveries for
//! it) and gives back its slot, best effort: entries it fails to remove are skipped by
//! readers. The live count
//! only ever errs high (a failed create or an interrupted delete leaves it one too many);
//! when it says the cap is reached, the create recounts the client's live subscriptions and
//! corrects it by compare-and-swap. An enable ([`enable()`]) is a create's order again for a
//! disabled record: a slot, new index entries, and the flip back to `active` by
//! compare-and-swap (its commit point). A change of URL or event types ([`retarget`])
//! appends the fan-out entries of the types it adds, writes the record (its commit point:
//! publish keeps only records that name the type), then removes the entries of the types it
//! dropped, best effort.
//!
//! May use: `edgehook-records` (the record), `edgehook-model`, `edgehook-storage`. Knows no
//! HTTP request and no delivery: the API (above) turns requests into these calls, and
//! delivery (above) reads the fan-out lists and disables.

pub mod cap;
pub mod create;
pub mod disable;
pub mod disabled;
pub mod enable;
pub mod index;
pub mod list;
pub mod load;
pub mod notify;
pub mod options;
pub mod reseal;
pub mod retarget;

pub use create::{NewSubscription, activate, create_pending};
pub use disable::disable;
pub use disabled::disabled_page;
pub use edgehook_records::subscription::{
    DeliveryOptions, Ordering, Scheme, Secret, Status, Subscription, Unreadable,
};
pub use enable::{Enabled, enable};
pub use index::{LastAttempt, PartnerDetail, PartnerView, partner_detail, partner_view};
pub use list::{Listed, list_page};
pub use load::{fanout_ids, load, load_many, owned, owned_active};
pub use options::{OptionsChange, erase_expired_secret, rotate, update_options};
pub use reseal::{ResealBatch, ResealCursor, reseal_batch};
pub use retarget::Target;

use edgehook_model::env::Env;

/// The disable reason of a subscription its owner deleted (`DELETE /v1/webhooks/{id}`): it
/// is never enabled again, its owner no longer reads it, and its signing secret is erased
/// (the only disable that erases it).
pub const DELETED: &str = "deleted";
use edgehook_model::error::ApiError;
use edgehook_storage::kv::Kv;

#[cfg(test)]
mod tests;
