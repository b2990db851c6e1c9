//! Where did a load go: an event by its id, and the events of a load id within the
//! retention period, each with every delivery it made (status and attempts). The operator
//! sees every delivery (`GET /internal/v1/events/{eventId}`,
//! `GET /internal/v1/events?loadId=`); a partner those to its own subscriptions, and no
//! event that made none (`GET /v1/events/{eventId}`, `GET /v1/events?loadId=`). The index
//! and its cost are `edgehook_delivery::loads`'s.

use crate::body::invalid;
use crate::ctx::Ctx;
use edgehook_delivery::loads;
use edgehook_model::error::ApiError;
use edgehook_model::http::Response;
use edgehook_model::ids::{ClientId, EventId};
use edgehook_storage::kv::Kv;

/// Longest `loadId` a lookup takes.
pub const MAX_LOAD_ID: usize = 1024;

/// `GET .../events/{eventId}`: the event and its deliveries (`client_id`'s only, if given).
pub fn get<K: Kv>(
    cx: &Ctx<'_, K>,
    id: &str,
    client_id: Option<&ClientId>,
) -> Result<Response, ApiError> {
    let not_found = || ApiError::not_found("Event");
    let id = EventId::parse(id).ok_or_else(not_found)?;
    let found = loads::event(cx.env, &id, client_id)?.ok_or_else(not_found)?;
    Ok(cx.data(200, found.view()))
}

/// `GET .../events?loadId=`: the events of a load id within the retention period, newest
/// first (at most [`loads::MAX_FOUND`]), with their deliveries (`client_id`'s only, if
/// given).
pub fn find<K: Kv>(cx: &Ctx<'_, K>, client_id: Option<&ClientId>) -> Result<Response, ApiError> {
    let load_id = cx
        .req
        .query_param("loadId")
        .map_err(|_| invalid("loadId", "invalid", "not valid percent-encoding"))?
        .filter(|l| !l.is_empty())
        .ok_or_else(|| invalid("loadId", "required", "loadId is required: the load's id"))?;
    if load_id.len() > MAX_LOAD_ID {
        return Err(invalid(
            "loadId",
            "too_long",
            "loadId is at most 1024 bytes",
        ));
    }
    let found = loads::by_load(cx.env, &load_id, client_id)?;
    let views: Vec<_> = found.iter().map(loads::Found::view).collect();
    Ok(cx.data(200, views))
}
