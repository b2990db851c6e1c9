//! The operator API (`/internal/v1/...`): authenticated with the admin token from
//! `wasi:config` (`admin_token`), never with a partner API key.

use crate::auth;
use crate::env::Env;
use crate::error::{ApiError, FieldError};
use crate::http::{Request, Response};
use crate::kv::Kv;
use serde_json::json;
use subtle::ConstantTimeEq;

/// The bearer token of a request, if it sent a well-formed `Authorization: Bearer ...`.
pub fn bearer(req: &Request) -> Option<&str> {
    let value = req.header_str("authorization")?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Accepts the request only if it carries the configured admin token (compared in constant
/// time). With no admin token configured, every operator call is refused.
pub fn authorize<K: Kv>(env: &Env<'_, K>, req: &Request) -> Result<(), ApiError> {
    let expected = env
        .settings
        .admin_token
        .as_deref()
        .ok_or_else(ApiError::unauthorized)?;
    let given = bearer(req).ok_or_else(ApiError::unauthorized)?;
    if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::unauthorized())
    }
}

/// `GET /internal/v1/settings`: the settings this instance runs with (the admin token is
/// never shown, only whether it is set).
pub fn settings<K: Kv>(env: &Env<'_, K>, request_id: &str) -> Response {
    let s = env.settings;
    Response::json(
        200,
        &json!({
            "data": {
                "attemptTimeoutMs": s.attempt_timeout_ms,
                "maxConcurrency": s.max_concurrency,
                "disableAfterFailures": s.disable_after_failures,
                "retentionDays": s.retention_days,
                "subscriptionLimit": s.subscription_limit,
                "allowPrivateTargets": s.allow_private_targets,
            },
            "requestId": request_id,
        }),
    )
}

/// `POST /internal/v1/clients/{clientId}/keys`: issues an API key, shown only in this
/// response.
pub fn issue_key<K: Kv>(
    env: &Env<'_, K>,
    client_id: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    if !auth::valid_client_id(client_id) {
        return Err(ApiError::validation(vec![FieldError::new(
            "clientId",
            "invalid_client_id",
            "clientId must be 1 to 64 characters of A-Z, a-z, 0-9, '_', '.', '-'",
        )]));
    }
    let (record, key) = auth::issue(env, client_id)?;
    Ok(Response::json(
        201,
        &json!({
            "data": {"id": record.id, "clientId": record.client_id, "apiKey": key, "createdAt": record.created_at},
            "requestId": request_id,
        }),
    ))
}

/// `DELETE /internal/v1/clients/{clientId}/keys/{keyId}`: revokes an API key at once.
pub fn revoke_key<K: Kv>(
    env: &Env<'_, K>,
    client_id: &str,
    key_id: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    let record = auth::revoke(env, client_id, key_id)?;
    Ok(Response::json(
        200,
        &json!({
            "data": {"id": record.id, "clientId": record.client_id, "status": "revoked", "revokedAt": record.revoked_at},
            "requestId": request_id,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parsing() {
        let r = |v: &str| Request::new("GET", "/").header("Authorization", v);
        assert_eq!(bearer(&r("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&r("bearer abc")), Some("abc"));
        assert_eq!(bearer(&r("Basic abc")), None);
        assert_eq!(bearer(&r("Bearer ")), None);
        assert_eq!(bearer(&r("Bearer")), None);
        assert_eq!(bearer(&Request::new("GET", "/")), None);
    }
}
