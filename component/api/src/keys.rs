//! The operator's API key routes: issue (with a scope), list and revoke the keys of a client
//! (`/internal/v1/clients/{clientId}/keys`) and the ingest keys, which belong to no client
//! (`/internal/v1/ingest-keys`). The keys themselves are [`auth`]'s.

use crate::auth::{self, ApiKeyRecord, Scope};
use crate::body::invalid;
use crate::ctx::{Ctx, api_key_id};
use crate::partner;
use edgehook_model::error::{ApiError, FieldError};
use edgehook_model::http::{Request, Response};
use edgehook_model::ids::ClientId;
use edgehook_storage::kv::Kv;
use serde::Serialize;
use serde_json::Value;

/// A key as listed: never the key, never its hash. Keys sorted, as the envelopes'.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct KeyView<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    client_id: &'a str,
    created_at: u64,
    id: &'a str,
    last_used_at: Option<u64>,
    revoked_at: Option<u64>,
    scope: &'static str,
    status: &'static str,
}

impl<'a> KeyView<'a> {
    fn of(r: &'a ApiKeyRecord) -> Self {
        KeyView {
            client_id: &r.client_id,
            created_at: r.created_at,
            id: &r.id,
            last_used_at: r.last_used_at,
            revoked_at: r.revoked_at,
            scope: r.scope.as_str(),
            status: if r.revoked_at.is_some() {
                "revoked"
            } else {
                "active"
            },
        }
    }
}

pub(crate) fn invalid_client_id() -> ApiError {
    ApiError::validation(vec![FieldError::new(
        "clientId",
        "invalid_client_id",
        "clientId must be 1 to 64 characters of A-Z, a-z, 0-9, '_', '.', '-'",
    )])
}

/// The scope an issue asks for: an empty body is `default`; otherwise a JSON object with at
/// most `scope`, one of `allowed`. Anything else is refused before anything is written.
fn requested_scope(req: &Request, default: Scope, allowed: &[Scope]) -> Result<Scope, ApiError> {
    let Some(obj) = crate::body::optional_object(req, &["scope"])? else {
        return Ok(default);
    };
    let names = edgehook_model::error::comma_list(allowed.iter().map(|s| s.as_str()));
    match obj.get("scope") {
        None => Ok(default),
        Some(Value::String(s)) => match Scope::parse(s) {
            Some(scope) if allowed.contains(&scope) => Ok(scope),
            Some(Scope::Ingest) => Err(invalid(
                "scope",
                "invalid_scope",
                &format!(
                    "scope must be one of {names}; ingest keys belong to no client: POST /internal/v1/ingest-keys"
                ),
            )),
            _ => Err(invalid(
                "scope",
                "invalid_scope",
                &format!("scope must be one of {names}"),
            )),
        },
        Some(_) => Err(invalid(
            "scope",
            "invalid_scope",
            &format!("scope must be a string, one of {names}"),
        )),
    }
}

/// Issues a key and answers 201 with it (shown in this response only).
fn issued<K: Kv>(
    cx: &Ctx<'_, K>,
    client_id: &ClientId,
    scope: Scope,
) -> Result<Response, ApiError> {
    let (record, key) = auth::issue(cx.env, client_id, scope)?;
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Issued<'a> {
        api_key: &'a str,
        #[serde(skip_serializing_if = "str::is_empty")]
        client_id: &'a str,
        created_at: u64,
        id: &'a str,
        scope: &'static str,
    }
    let data = Issued {
        api_key: &key,
        client_id: &record.client_id,
        created_at: record.created_at,
        id: &record.id,
        scope: record.scope.as_str(),
    };
    Ok(cx.data(201, data))
}

/// `POST /internal/v1/clients/{clientId}/keys`: issues an API key for the client, with the
/// body's `scope` (`partner`, the default, or `partner_read`); the key is shown only in
/// this response.
pub fn issue<K: Kv>(cx: &Ctx<'_, K>, client_id: &str) -> Result<Response, ApiError> {
    let client_id = ClientId::parse(client_id).ok_or_else(invalid_client_id)?;
    let scope = requested_scope(
        cx.req,
        Scope::Partner,
        &[Scope::Partner, Scope::PartnerRead],
    )?;
    issued(cx, &client_id, scope)
}

/// `POST /internal/v1/ingest-keys`: issues an ingest key (it may only publish events).
pub fn issue_ingest<K: Kv>(cx: &Ctx<'_, K>) -> Result<Response, ApiError> {
    let scope = requested_scope(cx.req, Scope::Ingest, &[Scope::Ingest])?;
    issued(cx, &ClientId::NONE, scope)
}

/// A page of keys (`limit`, `cursor` as every list).
fn page<K: Kv>(cx: &Ctx<'_, K>, client_id: &ClientId) -> Result<Response, ApiError> {
    let (limit, after) = partner::list_params(cx.req)?;
    let (records, has_more, last) = auth::list(cx.env, client_id, after, limit)?;
    let data: Vec<KeyView<'_>> = records.iter().map(KeyView::of).collect();
    Ok(partner::page_json(&data, has_more, last, cx.request_id))
}

/// `GET /internal/v1/clients/{clientId}/keys`: the client's keys in the order they were
/// issued, revoked ones included: id, scope, created, last used, revoked; never the key.
pub fn list<K: Kv>(cx: &Ctx<'_, K>, client_id: &str) -> Result<Response, ApiError> {
    let client_id = ClientId::parse(client_id).ok_or_else(invalid_client_id)?;
    page(cx, &client_id)
}

/// `GET /internal/v1/ingest-keys`: the ingest keys, as [`list`].
pub fn list_ingest<K: Kv>(cx: &Ctx<'_, K>) -> Result<Response, ApiError> {
    page(cx, &ClientId::NONE)
}

/// Answers a revoke.
fn revoked(record: &ApiKeyRecord, request_id: &str) -> Response {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Revoked<'a> {
        #[serde(skip_serializing_if = "str::is_empty")]
        client_id: &'a str,
        id: &'a str,
        revoked_at: Option<u64>,
        status: &'static str,
    }
    let data = Revoked {
        client_id: &record.client_id,
        id: &record.id,
        revoked_at: record.revoked_at,
        status: "revoked",
    };
    Response::data(200, data, request_id)
}

/// `DELETE /internal/v1/clients/{clientId}/keys/{keyId}`: revokes one of the client's keys
/// (any scope) at once. 404 unless it is a live key of that client.
pub fn revoke<K: Kv>(cx: &Ctx<'_, K>, client_id: &str, key_id: &str) -> Result<Response, ApiError> {
    let client_id = ClientId::parse(client_id).ok_or_else(|| ApiError::not_found("API key"))?;
    let record = auth::revoke(cx.env, &client_id, &api_key_id(key_id)?)?;
    Ok(revoked(&record, cx.request_id))
}

/// `DELETE /internal/v1/ingest-keys/{keyId}`: revokes an ingest key at once. 404 unless it
/// is a live ingest key.
pub fn revoke_ingest<K: Kv>(cx: &Ctx<'_, K>, key_id: &str) -> Result<Response, ApiError> {
    let record = auth::revoke(cx.env, &ClientId::NONE, &api_key_id(key_id)?)?;
    Ok(revoked(&record, cx.request_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(content_type: Option<&str>, body: &str) -> Result<Scope, (u16, &'static str)> {
        let mut req = Request::new("POST", "/internal/v1/clients/acme/keys").body(body);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        requested_scope(&req, Scope::Partner, &[Scope::Partner, Scope::PartnerRead]).map_err(|e| {
            let code = e.details.first().map_or(e.code, |d| d.code);
            (e.status, code)
        })
    }

    /// A key's issue takes an optional scope; no body is `partner`, as before
    /// scopes; a bad one is refused with a code naming the field.
    #[test]
    fn an_issue_takes_an_optional_partner_scope() {
        let json = Some("application/json");
        assert_eq!(scope(None, ""), Ok(Scope::Partner));
        assert_eq!(scope(json, "{}"), Ok(Scope::Partner));
        assert_eq!(scope(json, r#"{"scope":"partner"}"#), Ok(Scope::Partner));
        assert_eq!(
            scope(json, r#"{"scope":"partner_read"}"#),
            Ok(Scope::PartnerRead)
        );
        for bad in [
            r#"{"scope":"ingest"}"#,
            r#"{"scope":"admin"}"#,
            r#"{"scope":"PARTNER"}"#,
            r#"{"scope":""}"#,
            r#"{"scope":null}"#,
            r#"{"scope":["partner"]}"#,
        ] {
            assert_eq!(scope(json, bad), Err((422, "invalid_scope")), "{bad}");
        }
        assert_eq!(
            scope(json, r#"{"scopes":"x"}"#),
            Err((422, "unknown_field"))
        );
        assert_eq!(scope(json, "[]"), Err((422, "invalid_type")));
        assert_eq!(scope(json, "{"), Err((400, "invalid_json")));
        assert_eq!(
            scope(Some("text/plain"), "scope=partner"),
            Err((415, "unsupported_media_type"))
        );
    }
}
