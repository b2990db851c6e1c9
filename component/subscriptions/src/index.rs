//! The two indexes that point at subscription records: a client's subscriptions in creation
//! order (each entry carrying its list item ready-made, and how far list may trust it), and
//! each event type's listeners (the fan-out lists). Both are paged append logs.

use crate::{ApiError, Env, Kv, Subscription};
use edgehook_model::ids::{ClientId, SubscriptionId};
use edgehook_storage::applog::AppendLog;
use edgehook_storage::keys;
use serde::Serialize;

/// Entries per page of the subscription indexes: a create or delete parses and rewrites one
/// page of each, and a full read (fan-out) takes one key per page.
pub(crate) const INDEX_PAGE: u64 = 32;

/// A client's subscription ids in creation order; an entry's number is the `seq`.
pub(crate) fn client_index(client_id: &ClientId) -> AppendLog {
    AppendLog::with_directory(keys::client_subscriptions(client_id), INDEX_PAGE)
}

/// How far list may trust a client-index entry's list item.
///
/// List shows a `Live` entry's item without reading the record; for any other entry (and for
/// entries written before items were stored, which are bare ids) it reads the record. So:
/// - create appends its entry `Joining`, and makes it `Live` only after the record is
///   active, and only if it is still `Joining`;
/// - every disable first marks the entry `Leaving`, then flips the record.
///
/// A `Live` entry therefore always has an active record; a create or delete cut short
/// leaves an entry that list checks against the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Listing {
    /// Appended by a create not yet committed.
    Joining,
    /// The record is active: list shows the stored item as it is.
    Live,
    /// A disable has begun (or ended): list checks the record.
    Leaving,
}

impl Listing {
    /// The first byte of an encoded entry (never the `s` a bare id starts with).
    pub(crate) fn tag(self) -> u8 {
        match self {
            Listing::Joining => b'J',
            Listing::Live => b'L',
            Listing::Leaving => b'X',
        }
    }
}

/// A client-index item: `<listing tag><id> <list item as JSON>`.
pub(crate) fn encode_index_item(listing: Listing, id: &SubscriptionId, view: &[u8]) -> Vec<u8> {
    let mut item = Vec::with_capacity(2 + id.len() + view.len());
    item.push(listing.tag());
    item.extend_from_slice(id.as_bytes());
    item.push(b' ');
    item.extend_from_slice(view);
    item
}

/// Decodes a client-index item: its listing (`None` for a bare id written before items were
/// stored), the id, and the list item. `None` if it is neither.
pub(crate) fn decode_index_item(item: &[u8]) -> Option<(Option<Listing>, &str, &[u8])> {
    let listing = match item.first()? {
        b'J' => Listing::Joining,
        b'L' => Listing::Live,
        b'X' => Listing::Leaving,
        _ => return Some((None, std::str::from_utf8(item).ok()?, &[])),
    };
    let rest = &item[1..];
    let space = rest.iter().position(|b| *b == b' ')?;
    Some((
        Some(listing),
        std::str::from_utf8(&rest[..space]).ok()?,
        &rest[space + 1..],
    ))
}

/// Sets the listing of `sub`'s client-index entry to `to`, if `allowed` accepts its current
/// listing.
pub(crate) fn set_listing<K: Kv>(
    env: &Env<'_, K>,
    sub: &Subscription,
    allowed: fn(Listing) -> bool,
    to: Listing,
) -> Result<(), ApiError> {
    client_index(&sub.client_id).modify(env.kv, sub.seq, |item| {
        let (Some(listing), id, _) = decode_index_item(item)? else {
            return None;
        };
        if id != sub.id || !allowed(listing) || listing == to {
            return None;
        }
        let mut new = item.to_vec();
        new[0] = to.tag();
        Some(new)
    })?;
    Ok(())
}

/// A client's disabled subscriptions (ids, in the order they were disabled; not the
/// deleted ones), and every client's (`client_id` `None`, for the operator).
pub(crate) fn disabled_log(client_id: Option<&ClientId>) -> AppendLog {
    let prefix = match client_id {
        Some(c) => keys::client_disabled(c),
        None => keys::DISABLED_LOG,
    };
    AppendLog::with_directory(prefix, INDEX_PAGE)
}

/// The ids of subscriptions listening to one event type.
pub fn fanout_index(event_type: &str) -> AppendLog {
    AppendLog::with_directory(keys::fanout(event_type), INDEX_PAGE)
}

/// Appends one item to an index; returns its entry number.
pub(crate) fn append_one<K: Kv>(
    env: &Env<'_, K>,
    index: &AppendLog,
    item: &[u8],
) -> Result<u64, ApiError> {
    let seqs = index.append(env.kv, &[item])?;
    seqs.first()
        .copied()
        .ok_or_else(|| ApiError::internal("append returned no number"))
}

/// The partner view of `sub` (an active subscription's): its item in a list response.
pub fn partner_view(sub: &Subscription) -> PartnerView<'_> {
    PartnerView {
        id: &sub.id,
        url: &sub.url,
        event_types: &sub.event_types,
        status: "active",
        created_at: sub.created_at,
    }
}

/// One item of a list response, and the body of a read: the partner view of a subscription
/// (never the secret).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartnerView<'a> {
    pub(crate) id: &'a str,
    pub(crate) url: &'a str,
    pub(crate) event_types: &'a [String],
    pub(crate) status: &'static str,
    pub(crate) created_at: u64,
}

/// The body of a partner's read (and of its enable): the list item's fields, and the state
/// an owner needs after an outage (never the secret). Keys in sorted order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartnerDetail<'a> {
    pub(crate) consecutive_failures: u32,
    pub(crate) created_at: u64,
    pub(crate) disabled_at: Option<u64>,
    pub(crate) disabled_reason: Option<&'a str>,
    pub(crate) event_types: &'a [String],
    /// The names of its own headers (their values are never shown).
    pub(crate) header_names: Vec<&'a str>,
    pub(crate) id: &'a str,
    /// Shown by a read once the subscription has had an attempt ([`PartnerDetail::with_last_attempt`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) last_attempt: Option<LastAttempt<'a>>,
    pub(crate) max_in_flight: Option<u16>,
    pub(crate) ordering: &'static str,
    /// During a rotation's overlap: when the previous secret stops signing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) previous_secret_expires_at: Option<u64>,
    pub(crate) rate_limit: Option<u32>,
    pub(crate) signature_scheme: &'static str,
    pub(crate) status: &'static str,
    /// Whether deliveries carry a `traceparent` (shown only when they do).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) traceparent: bool,
    pub(crate) url: &'a str,
}

/// The latest attempt to a subscription, as its read shows it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastAttempt<'a> {
    /// When it was sent (ms since the epoch).
    pub at: u64,
    /// Its delivery.
    pub delivery_id: &'a str,
    /// Time to the response head (or the error), in ms.
    pub duration_ms: u64,
    /// Its error class (`http_status`, `timeout`, ...), `None` for a 2xx.
    pub error_class: Option<&'static str>,
    /// The receiver's status, if it answered.
    pub status_code: Option<u16>,
    /// Whether it got a 2xx.
    pub succeeded: bool,
}

impl<'a> PartnerDetail<'a> {
    /// The read with its latest attempt.
    pub fn with_last_attempt(self, last: LastAttempt<'a>) -> Self {
        PartnerDetail {
            last_attempt: Some(last),
            ..self
        }
    }
}

/// The partner's read of `sub` (active or disabled, see [`crate::owned`]).
pub fn partner_detail(sub: &Subscription) -> PartnerDetail<'_> {
    let active = sub.status == crate::Status::Active;
    PartnerDetail {
        consecutive_failures: sub.consecutive_failures,
        created_at: sub.created_at,
        disabled_at: sub.disabled_at.filter(|_| !active),
        disabled_reason: sub.disabled_reason.as_deref().filter(|_| !active),
        event_types: &sub.event_types,
        header_names: sub
            .options
            .headers
            .iter()
            .map(|(n, _)| n.as_str())
            .collect(),
        id: &sub.id,
        last_attempt: None,
        max_in_flight: (sub.options.max_in_flight > 0).then_some(sub.options.max_in_flight),
        ordering: sub.options.ordering.name(),
        previous_secret_expires_at: sub
            .options
            .previous_secret
            .as_ref()
            .map(|(_, until)| *until),
        rate_limit: (sub.options.rate_limit > 0).then_some(sub.options.rate_limit),
        signature_scheme: sub.options.scheme.name(),
        status: if active { "active" } else { "disabled" },
        traceparent: sub.options.traceparent,
        url: &sub.url,
    }
}
