//! `/v1/notification-endpoint`: where a partner hears about its own subscriptions — the
//! notices `subscription.disabled`, `subscription.enabled` and `secret.rotation_ending`
//! (`delivery::notify`), signed with the endpoint's own secret, shown once when it is made.
//! One endpoint per client: `PUT` registers it or changes its URL, `GET` reads it, `DELETE`
//! removes it.

use crate::body;
use crate::ctx::Ctx;
use edgehook_delivery::alert::{SUBSCRIPTION_DISABLED, SUBSCRIPTION_ENABLED};
use edgehook_delivery::notify::ROTATION_ENDING;
use edgehook_model::error::ApiError;
use edgehook_model::http::Response;
use edgehook_model::ids::ClientId;
use edgehook_model::validate;
use edgehook_records::notify::NotificationEndpoint;
use edgehook_storage::kv::Kv;
use edgehook_subscriptions::notify::{self, Put};
use serde_json::Value;

/// The notices an endpoint receives.
const NOTICES: [&str; 3] = [SUBSCRIPTION_DISABLED, SUBSCRIPTION_ENABLED, ROTATION_ENDING];

/// The endpoint as the API shows it (`NotificationEndpoint` in the OpenAPI document), its
/// signing secret only in the answer that made it; written out (the JSON of one small
/// answer costs less code than a derived serializer).
fn view(endpoint: &NotificationEndpoint, secret: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"{\"url\":");
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, endpoint.url.as_str());
    out.extend_from_slice(b",\"eventTypes\":[");
    for (n, notice) in NOTICES.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(notice.as_bytes());
        out.push(b'"');
    }
    let times = format!(
        "],\"createdAt\":{},\"updatedAt\":{}",
        endpoint.created_at, endpoint.updated_at
    );
    out.extend_from_slice(times.as_bytes());
    if let Some(secret) = secret {
        out.extend_from_slice(b",\"signingSecret\":");
        let _ = serde_json::to_writer(&mut out, secret);
    }
    out.push(b'}');
    out
}

/// `GET`, `PUT` and `DELETE /v1/notification-endpoint`.
pub fn endpoint<K: Kv>(cx: &Ctx<'_, K>, client_id: &ClientId) -> Result<Response, ApiError> {
    match cx.req.method.as_str() {
        "PUT" => put(cx, client_id),
        "DELETE" => match notify::remove(cx.env, client_id)? {
            true => Ok(Response {
                status: 204,
                headers: Vec::new(),
                body: Vec::new(),
            }),
            false => Err(ApiError::not_found("Notification endpoint")),
        },
        _ => match notify::load(cx.env, client_id)? {
            Some(endpoint) => Ok(data(cx, 200, &view(&endpoint, None))),
            None => Err(ApiError::not_found("Notification endpoint")),
        },
    }
}

/// `PUT {"url": ...}`: the URL is checked as a subscription's is at create. A new endpoint
/// is a 201 with its signing secret (this once); a changed one a 200, its secret kept.
fn put<K: Kv>(cx: &Ctx<'_, K>, client_id: &ClientId) -> Result<Response, ApiError> {
    let obj = body::object(cx.req, &["url"])?;
    let url = match obj.get("url") {
        Some(Value::String(url)) => url,
        Some(_) => return Err(body::invalid("url", "invalid_type", "url must be a string")),
        None => return Err(body::invalid("url", "required", "url is required")),
    };
    if let Err(p) = validate::target_url(url, cx.env.settings.target_policy()) {
        return Err(body::invalid("url", p.code, &p.message));
    }
    match notify::put(cx.env, client_id, url)? {
        Put::Created(endpoint, secret) => Ok(data(cx, 201, &view(&endpoint, Some(&secret)))),
        Put::Changed(endpoint) => Ok(data(cx, 200, &view(&endpoint, None))),
    }
}

/// `{"data": data, "requestId": ...}` around JSON already written.
fn data<K: Kv>(cx: &Ctx<'_, K>, status: u16, data: &[u8]) -> Response {
    Response::data_json(status, data, cx.request_id)
}
