//! One error type for the HTTP API and its single mapping to a status and a JSON envelope:
//! `{"error": {"code", "message", "details": [...]}, "requestId"}`.
//!
//! Internal causes (store failures, bad configuration) are kept in [`ApiError::log`] for the
//! shell to log; the response only ever says the public code and message.

use crate::http::Response;
use edgehook_storage::kv::{KvError, UpdateError};
use serde::Serialize;

/// One problem with one field of a request, reported in `error.details`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field, as named in the request body (`url`, `eventTypes[2]`, ...).
    pub field: String,
    /// A stable, machine-readable code (`required`, `invalid_url`, ...).
    pub code: &'static str,
    /// A sentence for people.
    pub message: String,
}

impl FieldError {
    /// A field error.
    pub fn new(field: impl Into<String>, code: &'static str, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            code,
            message: message.into(),
        }
    }
}

/// The most details a 422 lists.
pub const MAX_DETAILS: usize = 20;

/// For the log: the code, and the internal cause if there is one, else the message.
impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cause = self.log.as_deref().unwrap_or(&self.message);
        write!(f, "{} ({})", self.code, cause)
    }
}

/// An API error: what the client sees, plus an internal note for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// Machine-readable code (`not_found`, `validation_failed`, ...).
    pub code: &'static str,
    /// Human-readable message. Never contains secrets or internals.
    pub message: String,
    /// Per-field problems (422), empty otherwise.
    pub details: Vec<FieldError>,
    /// Extra response headers (`Allow`, `Retry-After`).
    pub headers: Vec<(String, String)>,
    /// Internal cause, for the log only.
    pub log: Option<String>,
}

impl ApiError {
    /// An error with a status, code and message.
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            details: Vec::new(),
            headers: Vec::new(),
            log: None,
        }
    }

    /// 400: the body is not valid JSON.
    pub fn invalid_json(why: impl std::fmt::Display) -> Self {
        Self::new(
            400,
            "invalid_json",
            format!("The request body is not valid JSON: {why}."),
        )
    }

    /// 400: a malformed request that is not about JSON (a bad query parameter, say).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "bad_request", message)
    }

    /// 401: missing, malformed, unknown or revoked credentials.
    pub fn unauthorized() -> Self {
        Self::new(
            401,
            "unauthorized",
            "Missing or invalid credentials: send 'Authorization: Bearer <API key>'.",
        )
        .with_header("www-authenticate", "Bearer")
    }

    /// 401 on the operator API: it takes the admin token, not an API key.
    pub fn unauthorized_operator() -> Self {
        Self::new(
            401,
            "unauthorized",
            "Missing or invalid credentials: the operator API takes 'Authorization: Bearer <admin token>'.",
        )
        .with_header("www-authenticate", "Bearer")
    }

    /// 403: a valid API key whose scope does not allow this request (a read-only key's
    /// write, an ingest key anywhere but event ingest, a partner key on the operator API).
    pub fn forbidden() -> Self {
        Self::new(
            403,
            "forbidden",
            "This API key's scope does not allow this request.",
        )
    }

    /// 404: no such route or resource (for this caller).
    pub fn not_found(what: &str) -> Self {
        Self::new(404, "not_found", format!("{what} not found."))
    }

    /// 405: the path exists but not with this method.
    pub fn method_not_allowed(allow: &[&str]) -> Self {
        let allowed = comma_list(allow.iter().copied());
        Self::new(
            405,
            "method_not_allowed",
            format!("Method not allowed here; allowed: {allowed}."),
        )
        .with_header("allow", allowed)
    }

    /// 409: the idempotency key was used with a different request, or is in use right now.
    pub fn idempotency_conflict(message: impl Into<String>) -> Self {
        Self::new(409, "idempotency_conflict", message)
    }

    /// 409: the operation does not apply to the resource in its current state.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(409, "conflict", message)
    }

    /// 413: the body is over `limit` bytes.
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            413,
            "payload_too_large",
            format!("The request body is larger than {} KiB.", limit / 1024),
        )
    }

    /// 415: the body is not declared as JSON.
    pub fn unsupported_media_type() -> Self {
        Self::new(
            415,
            "unsupported_media_type",
            "Send the body as 'Content-Type: application/json'.",
        )
    }

    /// 422: one or more fields are invalid; one detail per bad field, the first
    /// [`MAX_DETAILS`] of them (the message says how many there were), so that an answer
    /// stays about the size of its request however many bad entries a body lists.
    pub fn validation(mut details: Vec<FieldError>) -> Self {
        let message = if details.len() > MAX_DETAILS {
            format!(
                "The request has invalid fields; see details (the first {MAX_DETAILS} of {}).",
                details.len()
            )
        } else {
            "The request has invalid fields; see details.".to_owned()
        };
        details.truncate(MAX_DETAILS);
        let mut e = Self::new(422, "validation_failed", message);
        e.details = details;
        e
    }

    /// 429: the API client made more than `limit` requests this minute; it may retry after
    /// `retry_after_s` seconds.
    pub fn rate_limited(limit: u32, retry_after_s: u64) -> Self {
        Self::new(
            429,
            "rate_limited",
            format!(
                "Too many requests: this API client may make {limit} a minute. Retry after {retry_after_s} s."
            ),
        )
        .with_header("retry-after", retry_after_s.to_string())
    }

    /// 503: the key-value store failed; nothing was changed, the request may be retried.
    pub fn store_unavailable(cause: impl std::fmt::Display) -> Self {
        let mut e = Self::new(
            503,
            "store_unavailable",
            "The service's storage is unavailable; nothing was changed. Retry later.",
        )
        .with_header("retry-after", "1");
        e.log = Some(cause.to_string());
        e
    }

    /// 500: something that should not happen; details go to the log only.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        let mut e = Self::new(
            500,
            "internal",
            "Internal error. Quote the requestId to support.",
        );
        e.log = Some(cause.to_string());
        e
    }

    /// Adds a response header (builder style).
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// The JSON envelope response for this error.
    pub fn into_response(self, request_id: &str) -> Response {
        // Keys sorted, as `serde_json::json!` writes them.
        #[derive(Serialize)]
        struct Detail<'a> {
            code: &'a str,
            field: &'a str,
            message: &'a str,
        }
        #[derive(Serialize)]
        struct Error<'a> {
            code: &'a str,
            details: Vec<Detail<'a>>,
            message: &'a str,
        }
        #[derive(Serialize)]
        struct Body<'a> {
            error: Error<'a>,
            #[serde(rename = "requestId")]
            request_id: &'a str,
        }
        let body = Body {
            error: Error {
                code: self.code,
                details: self
                    .details
                    .iter()
                    .map(|d| Detail {
                        code: d.code,
                        field: &d.field,
                        message: &d.message,
                    })
                    .collect(),
                message: &self.message,
            },
            request_id,
        };
        let mut resp = Response::json(self.status, &body);
        resp.headers.extend(self.headers);
        resp
    }
}

/// An API error met where only a store error can be returned (e.g. inside a store update):
/// its log text, or its message.
impl From<ApiError> for KvError {
    fn from(e: ApiError) -> Self {
        KvError::Refused(e.log.unwrap_or(e.message))
    }
}

impl From<KvError> for ApiError {
    fn from(e: KvError) -> Self {
        ApiError::store_unavailable(e)
    }
}

impl From<UpdateError<ApiError>> for ApiError {
    fn from(e: UpdateError<ApiError>) -> Self {
        match e {
            UpdateError::Kv(e) => ApiError::store_unavailable(e),
            UpdateError::Rejected(e) => e,
            UpdateError::Contended => {
                ApiError::store_unavailable("compare-and-swap kept losing; too much contention")
            }
        }
    }
}

/// `text` in double quotes, with `"`, `\\` and control characters escaped (`\u{..}`): how
/// an error message or a log line names a value a client sent. (`{:?}` does the same, but
/// its Unicode tables cost the size-budgeted component about 4 KiB.)
pub fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `items` joined with `", "` (the one copy of it in the component: `[&str]::join` costs
/// more code per use, and the component is size-budgeted).
pub fn comma_list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for item in items {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(item);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_escapes_quotes_backslashes_and_controls() {
        assert_eq!(quoted("load.deleted"), "\"load.deleted\"");
        assert_eq!(quoted("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(quoted("x\ny\u{7f}"), "\"x\\u{a}y\\u{7f}\"");
        assert_eq!(quoted("é"), "\"é\"");
    }

    #[test]
    fn envelope_has_code_message_details_and_request_id() {
        let resp =
            ApiError::validation(vec![FieldError::new("url", "required", "url is required")])
                .into_response("req_1");
        assert_eq!(resp.status, 422);
        let body = resp.json_body();
        assert_eq!(body["error"]["code"], "validation_failed");
        assert_eq!(body["error"]["details"][0]["field"], "url");
        assert_eq!(body["requestId"], "req_1");
    }

    #[test]
    fn the_envelope_is_written_in_sorted_key_order_byte_for_byte() {
        // Written from structs, not built as a `Value`: the bytes are the ones `json!` (a
        // sorted map) would give, so no client sees the order change.
        let err = ApiError::validation(vec![
            FieldError::new("url", "required", "url is required"),
            FieldError::new("eventTypes[0]", "unknown", "say \"what\""),
        ]);
        let want = serde_json::json!({
            "error": {
                "code": "validation_failed",
                "message": err.message.clone(),
                "details": [
                    {"field": "url", "code": "required", "message": "url is required"},
                    {"field": "eventTypes[0]", "code": "unknown", "message": "say \"what\""},
                ],
            },
            "requestId": "req_1",
        });
        let resp = err.into_response("req_1");
        assert_eq!(resp.body, serde_json::to_vec(&want).expect("json"));
    }

    #[test]
    fn store_errors_keep_the_cause_out_of_the_response() {
        let err = ApiError::from(KvError::Unavailable("disk on fire at /var/secret".into()));
        assert_eq!(err.status, 503);
        assert!(err.log.as_deref().unwrap_or("").contains("disk on fire"));
        let resp = err.into_response("req_1");
        assert!(!String::from_utf8_lossy(&resp.body).contains("disk on fire"));
        assert_eq!(resp.header("retry-after"), Some("1"));
    }
}
