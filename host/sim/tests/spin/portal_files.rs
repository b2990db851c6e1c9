//! The web portal's files under `spin up`: `spin.toml`'s second component, on `/portal/...`.

use super::harness::*;

/// The web portal: spin.toml's `/portal/...` route reaches the portal's component (its
/// files, their types, its CSP; a file larger than a stream's buffer whole), `/portal`
/// included, while the API's routes stay the service's.
pub fn files(w: &mut Walk) {
    let files = [
        ("/portal/", "text/html; charset=utf-8", "<!doctype html>"),
        (
            "/portal/operator.js",
            "text/javascript; charset=utf-8",
            "startOperator",
        ),
    ];
    for (path, content_type, contains) in files {
        let step = format!("portal {path}");
        // A file, not a JSON answer: its request id is in `X-Request-Id` only.
        let r = w.send(&get(path, Who::Nobody));
        let rid = r.header("x-request-id").unwrap_or_default();
        if !w.check(
            &step,
            r.status == 200 && rid.starts_with("req_"),
            format!("{} with X-Request-Id {rid:?}", r.status),
        ) {
            continue;
        }
        w.check(
            &step,
            r.header("content-type") == Some(content_type),
            format!("content-type {:?}", r.header("content-type")),
        );
        let csp = r.header("content-security-policy").unwrap_or_default();
        w.check(
            &step,
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            format!("content-security-policy {csp:?}"),
        );
        w.check(&step, r.text.contains(contains), "not the portal's file");
    }
    let r = w.send(&get("/portal", Who::Nobody));
    let to = r.header("location");
    w.check(
        "portal redirect",
        r.status == 308 && to == Some("/portal/"),
        format!("{} to {to:?}", r.status),
    );
    w.refused(
        "portal 404",
        (404, "not_found"),
        get("/portal/missing.js", Who::Nobody),
    );
}
