//! The web portal: a small component that serves the operator and partner single-page app
//! (`portal/static/`, embedded at build time) under `/portal/`. It keeps no state, reads no
//! settings and makes no call: the app in the browser calls the public REST API itself
//! (`/v1/...` with a partner session, `/internal/v1/...` with the admin token).
//!
//! [`respond`] is the whole behaviour, plain Rust (tested natively); `shell` (wasm32 only)
//! turns a `wasi:http` request into a call of it. Every answer carries [`SECURITY_HEADERS`]:
//! a strict Content-Security-Policy (no inline script or style, nothing from another
//! origin), `nosniff`, no referrer, no framing.

mod files;

pub use files::{FILES, File};

#[cfg(target_arch = "wasm32")]
mod shell;

/// Where the portal lives; `/portal` itself redirects here.
pub const PREFIX: &str = "/portal/";

/// The Content-Security-Policy of every answer: scripts, styles and API calls from this
/// origin only, no inline script or style, no plugins, no framing, no `<base>`.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

/// Headers every answer carries, files and errors alike (and `X-Request-Id`, which the
/// shell adds).
pub const SECURITY_HEADERS: &[(&str, &str)] = &[
    ("content-security-policy", CSP),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
];

/// An answer: status, headers (lower-case names) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers besides [`SECURITY_HEADERS`] (which the shell adds to every answer).
    pub headers: Vec<(&'static str, String)>,
    /// Body (empty for `HEAD` and 304).
    pub body: Vec<u8>,
}

/// The answer to `method path` (`path` with its query, as the request line has it), given
/// the request's `If-None-Match` and a fresh request id for error answers.
pub fn respond(
    method: &str,
    path: &str,
    if_none_match: Option<&str>,
    request_id: &str,
) -> Response {
    let path = path.split(['?', '#']).next().unwrap_or("");
    let head = method == "HEAD";
    if method != "GET" && !head {
        let mut r = error(
            405,
            "method_not_allowed",
            "The portal answers GET and HEAD only.",
            request_id,
        );
        r.headers.push(("allow", "GET, HEAD".into()));
        return r;
    }
    if path == "/portal" {
        return Response {
            status: 308,
            headers: vec![
                ("location", PREFIX.into()),
                ("cache-control", "no-cache".into()),
            ],
            body: Vec::new(),
        };
    }
    let Some(name) = path.strip_prefix(PREFIX) else {
        return not_found(request_id);
    };
    let name = if name.is_empty() { "index.html" } else { name };
    let Some(file) = FILES.iter().find(|f| f.name == name) else {
        return not_found(request_id);
    };
    let etag = format!("\"{:016x}\"", file.hash);
    let mut headers = vec![
        ("content-type", file.content_type.to_owned()),
        // Revalidated on every use (the names carry no version): a 304 costs one round trip.
        ("cache-control", "no-cache".to_owned()),
        ("etag", etag.clone()),
    ];
    if if_none_match.is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*")) {
        return Response {
            status: 304,
            headers,
            body: Vec::new(),
        };
    }
    if head {
        // No `Content-Length` without the body: a host checks the one against the other.
        return Response {
            status: 200,
            headers,
            body: Vec::new(),
        };
    }
    headers.push(("content-length", file.body.len().to_string()));
    Response {
        status: 200,
        headers,
        body: file.body.to_vec(),
    }
}

/// 404 `not_found` in the service's error envelope.
fn not_found(request_id: &str) -> Response {
    error(404, "not_found", "No such page in the portal.", request_id)
}

/// An error in the service's envelope: `{"error":{"code","message"},"requestId"}` (the
/// codes and messages here are fixed ASCII without quotes; the id is `req_` + hex).
fn error(status: u16, code: &str, message: &str, request_id: &str) -> Response {
    let body = format!(
        "{{\"error\":{{\"code\":\"{code}\",\"message\":\"{message}\"}},\"requestId\":\"{request_id}\"}}"
    );
    Response {
        status,
        headers: vec![
            ("content-type", "application/json".into()),
            ("cache-control", "no-store".into()),
        ],
        body: body.into_bytes(),
    }
}

/// A request id from 12 random bytes: `req_` and 24 lower-case hex digits.
pub fn request_id(random: &[u8]) -> String {
    let mut id = String::from("req_");
    for b in random.iter().take(12) {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header<'r>(r: &'r Response, name: &str) -> Option<&'r str> {
        r.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn the_index_is_served_at_the_prefix_and_assets_with_their_types() {
        let r = respond("GET", "/portal/", None, "req_1");
        assert_eq!(r.status, 200);
        assert_eq!(header(&r, "content-type"), Some("text/html; charset=utf-8"));
        assert!(String::from_utf8_lossy(&r.body).contains("<!doctype html>"));
        let r = respond("GET", "/portal/app.js?v=1", None, "req_1");
        assert_eq!(r.status, 200);
        assert_eq!(
            header(&r, "content-type"),
            Some("text/javascript; charset=utf-8")
        );
        let r = respond("GET", "/portal/app.css", None, "req_1");
        assert_eq!(header(&r, "content-type"), Some("text/css; charset=utf-8"));
        let r = respond("HEAD", "/portal/", None, "req_1");
        assert_eq!((r.status, r.body.len()), (200, 0));
    }

    #[test]
    fn the_bare_prefix_redirects_and_unknown_paths_are_404_envelopes() {
        let r = respond("GET", "/portal", None, "req_1");
        assert_eq!((r.status, header(&r, "location")), (308, Some("/portal/")));
        for path in [
            "/portal/nope.js",
            "/portal/../Cargo.toml",
            "/",
            "/portalx",
            "/portal//app.js",
        ] {
            let r = respond("GET", path, None, "req_abc");
            assert_eq!(r.status, 404, "{path}");
            assert_eq!(
                String::from_utf8_lossy(&r.body),
                r#"{"error":{"code":"not_found","message":"No such page in the portal."},"requestId":"req_abc"}"#
            );
        }
        let r = respond("POST", "/portal/", None, "req_1");
        assert_eq!((r.status, header(&r, "allow")), (405, Some("GET, HEAD")));
    }

    #[test]
    fn a_matching_etag_is_a_304() {
        let r = respond("GET", "/portal/", None, "req_1");
        let etag = header(&r, "etag").expect("etag").to_owned();
        let again = respond("GET", "/portal/", Some(&format!("\"x\", {etag}")), "req_1");
        assert_eq!((again.status, again.body.len()), (304, 0));
        let other = respond("GET", "/portal/app.js", Some(&etag), "req_1");
        assert_eq!(other.status, 200);
    }

    #[test]
    fn no_file_has_inline_script_or_style_or_a_foreign_origin() {
        for f in FILES {
            let text = String::from_utf8_lossy(f.body);
            if f.name.ends_with(".html") {
                let lower = text.to_ascii_lowercase();
                for script in lower.match_indices("<script").map(|(i, _)| &lower[i..]) {
                    let tag = &script[..script.find('>').expect("closed tag")];
                    assert!(tag.contains(" src="), "{}: inline script: {tag}", f.name);
                }
                assert!(!lower.contains("<style"), "{}: inline style", f.name);
                assert!(!lower.contains(" style="), "{}: style attribute", f.name);
                for (i, _) in lower.match_indices(" on") {
                    let name: String = lower[i + 3..]
                        .chars()
                        .take_while(char::is_ascii_alphabetic)
                        .collect();
                    let after = lower[i + 3 + name.len()..].trim_start();
                    assert!(
                        name.is_empty() || !after.starts_with('='),
                        "{}: an event-handler attribute on{name}",
                        f.name
                    );
                }
            }
            if f.name.ends_with(".svg") {
                continue;
            }
            // Nothing is loaded from another origin (the CSP would block it anyway), and no
            // HTML-string API exists to inject through.
            for forbidden in [
                "src=\"http",
                "href=\"http",
                "from \"http",
                "import(\"http",
                "url(http",
                "fetch(\"http",
                "new Function",
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "eval(",
                "document.write",
            ] {
                assert!(!text.contains(forbidden), "{} contains {forbidden}", f.name);
            }
        }
    }

    #[test]
    fn request_ids_look_like_the_service_s() {
        assert_eq!(request_id(&[0xab; 12]), format!("req_{}", "ab".repeat(12)));
    }
}
