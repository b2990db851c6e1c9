//! Portal sessions: the operator mints a one-time link for a client
//! (`POST /internal/v1/clients/{clientId}/portal-links`), the partner's browser exchanges its
//! token once for a session (`POST /v1/portal/sessions`), and the session then calls the
//! partner API with its client's rights as the `edgehook_session` cookie
//! (`HttpOnly; SameSite=Strict`, and `Secure` under TLS). Every call the cookie makes other
//! than a `GET` carries the session's CSRF token in `X-CSRF-Token`; a page of another
//! origin can neither read the cookie nor the token, so it cannot forge one.
//!
//! Links and sessions are API keys of their own scopes ([`Scope::PortalLink`],
//! [`Scope::PortalSession`]): stored only as hashes, listed with the client's keys (so the
//! operator sees and can revoke a session like any key), authenticated by the same lookup.
//! A link lives 15 minutes and is consumed by revoking it (a compare-and-swap, so two
//! exchanges of one link cannot both succeed); a session lives 12 hours from its issue.
//! The lifetimes, the cookie's reading and the CSRF check are [`auth`]'s (authenticating a
//! request asks them); this module has the three routes.

use crate::auth::{
    self, ApiKeyRecord, COOKIE, SESSION_MAX_AGE, Scope, csrf_token, expired, expiry, session_cookie,
};
use crate::ctx::{Caller, Ctx};
use edgehook_model::error::ApiError;
use edgehook_model::http::Response;
use edgehook_model::ids::ClientId;
use edgehook_storage::kv::Kv;

/// `POST /internal/v1/clients/{clientId}/portal-links`: a one-time link to the client's
/// portal: its path, with the token in the fragment (which browsers never send to a
/// server); the caller puts the origin the partner reaches in front (`edgehook
/// portal-link` its `--public-url`, the operator's portal its own).
pub fn mint<K: Kv>(cx: &Ctx<'_, K>, client_id: &str) -> Result<Response, ApiError> {
    let client_id = ClientId::parse(client_id).ok_or_else(crate::keys::invalid_client_id)?;
    let (record, token) = auth::issue(cx.env, &client_id, Scope::PortalLink)?;
    // Written out by hand (the component is size-budgeted): a valid client id, the token
    // (base64url) and numbers need no escaping. Keys sorted, as every body's.
    let link = format!(
        r#"{{"clientId":"{client_id}","expiresAt":{},"token":"{token}","url":"/portal/#token={token}"}}"#,
        expiry(&record)
    );
    Ok(Response::data_json(201, link.as_bytes(), cx.request_id))
}

/// The body of an exchange and of the session's read, `{clientId, csrfToken, expiresAt}`
/// (by hand, as the link's).
fn session_view(status: u16, record: &ApiKeyRecord, token: &str, request_id: &str) -> Response {
    let data = format!(
        r#"{{"clientId":"{}","csrfToken":"{}","expiresAt":{}}}"#,
        record.client_id,
        csrf_token(token),
        expiry(record)
    );
    Response::data_json(status, data.as_bytes(), request_id)
}

/// `POST /v1/portal/sessions` with `{"token": ...}`: consumes a link's token (unknown,
/// used, expired: 401) and answers 201 with the session, its cookie set.
pub fn exchange<K: Kv>(cx: &Ctx<'_, K>) -> Result<Response, ApiError> {
    let body = crate::body::object(cx.req, &["token"])?;
    let Some(token) = body.get("token").and_then(|t| t.as_str()) else {
        return Err(crate::body::invalid(
            "token",
            "invalid_token",
            "token must be the string after #token= in the portal link.",
        ));
    };
    let link = auth::find(cx.env, token)?;
    if link.scope != Scope::PortalLink || expired(&link, cx.env.now_ms) {
        return Err(ApiError::unauthorized());
    }
    // Used once: of two exchanges, the second finds it revoked.
    auth::revoke(cx.env, &link.client_id, &link.id).map_err(|_| ApiError::unauthorized())?;
    let (record, session) = auth::issue(cx.env, &link.client_id, Scope::PortalSession)?;
    let mut cookie = format!("{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict; Max-Age=");
    cookie.push_str(SESSION_MAX_AGE);
    if cx.req.tls {
        cookie.push_str("; Secure");
    }
    Ok(session_view(201, &record, &session, cx.request_id).with_header("set-cookie", cookie))
}

/// `GET /v1/portal/sessions/current`: the session (with its CSRF token again, for a page
/// reloaded); `DELETE`: ends it (revoked) and clears the cookie.
pub fn current<K: Kv>(cx: &Ctx<'_, K>) -> Result<Response, ApiError> {
    let Caller::Key(record) = &cx.caller else {
        return Err(ApiError::unauthorized());
    };
    if cx.req.method == "GET" {
        let token = session_cookie(cx.req).unwrap_or_default();
        return Ok(session_view(200, record, token, cx.request_id));
    }
    auth::revoke(cx.env, &record.client_id, &record.id)?;
    Ok(Response {
        status: 204,
        headers: Vec::new(),
        body: Vec::new(),
    }
    .with_header(
        "set-cookie",
        "edgehook_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
    ))
}

#[cfg(test)]
mod tests;
