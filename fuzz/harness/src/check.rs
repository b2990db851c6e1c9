//! The invariants of every single response (DESIGN.md §3, docs/design/http.md
//! "Conventions"): a status from the documented set, a JSON object body carrying the request
//! id (also in `X-Request-Id`), the error envelope with a code that belongs to the status,
//! and the headers that go with some errors. Never a 500: with a healthy in-memory store
//! nothing can be "internal".

use crate::world::Reply;
use edgehook_component::api::router::Handled;
use edgehook_component::model::http::Request;
use serde_json::Value;

/// Every status the API may answer (DESIGN.md §3), 500 excluded: the harness's store is
/// healthy, so an `internal` error is always a bug.
pub const STATUSES: &[u16] = &[
    200, 201, 202, 400, 401, 403, 404, 405, 409, 413, 415, 422, 429, 503,
];

/// The error codes each error status may carry.
pub fn codes_for(status: u16) -> &'static [&'static str] {
    match status {
        400 => &["invalid_json", "bad_request"],
        401 => &["unauthorized"],
        403 => &["forbidden"],
        404 => &["not_found"],
        405 => &["method_not_allowed"],
        409 => &["idempotency_conflict", "conflict", "subscription_deleted"],
        413 => &["payload_too_large"],
        415 => &["unsupported_media_type"],
        422 => &["validation_failed", "subscription_limit_reached"],
        429 => &["rate_limited"],
        503 => &["store_unavailable"],
        _ => &[],
    }
}

/// Whether `s` is `prefix` followed by 24 lowercase hex digits (the shape of every id).
pub fn is_id(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|rest| {
        rest.len() == 24 && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Checks one response and returns it parsed. `faulted`: a store fault was armed for the
/// request, so 503 `store_unavailable` is allowed; without one it is a bug.
pub fn envelope(req: &Request, handled: &Handled, faulted: bool) -> Reply {
    let resp = &handled.response;
    let status = resp.status;
    let text = match String::from_utf8(resp.body.clone()) {
        Ok(t) => t,
        Err(_) => panic!("{status} response body is not UTF-8"),
    };
    let what = || format!("{} {} -> {status} {text}", req.method, req.path);
    if status == 500 {
        panic!("500 internal error (log: {:?}) for {}", handled.log, what());
    }
    assert!(
        STATUSES.contains(&status),
        "undocumented status: {}",
        what()
    );
    assert!(
        status != 503 || faulted,
        "503 without a store fault (log: {:?}): {}",
        handled.log,
        what()
    );
    let body: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => panic!("body is not JSON ({e}): {}", what()),
    };
    assert!(body.is_object(), "body is not a JSON object: {}", what());
    let headers: Vec<(String, String)> = resp.headers.clone();
    let reply = Reply {
        status,
        headers,
        body,
        text: text.clone(),
    };
    assert_eq!(
        reply.header("content-type"),
        Some("application/json"),
        "content type: {}",
        what()
    );
    assert!(
        is_id(&handled.request_id, "req_"),
        "request id {:?}",
        handled.request_id
    );
    assert_eq!(
        reply.body["requestId"].as_str(),
        Some(handled.request_id.as_str()),
        "requestId in the body: {}",
        what()
    );
    assert_eq!(
        reply.header("x-request-id"),
        Some(handled.request_id.as_str()),
        "X-Request-Id: {}",
        what()
    );
    assert_eq!(
        handled.run_after.is_some(),
        status == 202,
        "run_after is set exactly for 202: {}",
        what()
    );
    if status >= 400 {
        let error = &reply.body["error"];
        let code = error["code"].as_str();
        assert!(
            code.is_some_and(|c| codes_for(status).contains(&c)),
            "error.code {code:?} does not belong to {status}: {}",
            what()
        );
        assert!(error["message"].is_string(), "error.message: {}", what());
        let details = error["details"].as_array();
        assert!(details.is_some(), "error.details is an array: {}", what());
        for d in details.into_iter().flatten() {
            assert!(
                d["field"].is_string() && d["code"].is_string() && d["message"].is_string(),
                "a detail has field, code and message: {}",
                what()
            );
        }
        if code == Some("validation_failed") {
            assert!(
                details.is_some_and(|d| !d.is_empty()),
                "validation_failed names at least one field: {}",
                what()
            );
        }
        assert!(
            reply.body.get("data").is_none(),
            "error with data: {}",
            what()
        );
        match status {
            401 => assert_eq!(
                reply.header("www-authenticate"),
                Some("Bearer"),
                "{}",
                what()
            ),
            405 => {
                let allow = reply.header("allow").unwrap_or("");
                assert!(
                    !allow.is_empty() && !allow.split(", ").any(|m| m == req.method),
                    "405 with Allow {allow:?} for {}",
                    what()
                );
            }
            429 | 503 => assert!(reply.header("retry-after").is_some(), "{}", what()),
            _ => {}
        }
    } else {
        assert!(
            reply.body.get("error").is_none(),
            "success with error: {}",
            what()
        );
        assert!(
            reply.body.get("data").is_some() || req.path == "/healthz",
            "{}",
            what()
        );
        if status == 201 || status == 202 {
            assert_eq!(req.method, "POST", "{status} for a non-POST: {}", what());
        }
    }
    reply
}
