//! The web portal on the real server: `serve` sends `/portal` and `/portal/...` to the
//! portal's component, with its security headers and content types, and everything else to
//! the service's; then the browser tests (`tests/browser/portal.py`: headless Chromium driven
//! by Selenium) walk the operator's and the partner's stories against it, screenshots in
//! `$CARGO_TARGET_TMPDIR/portal-screens/`.
//!
//! The browser test needs Debian's `chromium` and `chromium-driver` on `PATH` and the pinned
//! Selenium in `tests/browser/.venv` (`.ci/run` installs all three; `$EDGEHOOK_BROWSER_PYTHON`
//! names another Python). Without them it prints `SKIPPED` and passes, unless `CI` is set:
//! then it fails.

use crate::common::*;
use edgehook_testkit::http::HttpClient;
use edgehook_testkit::skipped;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `method url`: status, headers (lower-case names) and body.
fn fetch(rt: &tokio::runtime::Runtime, method: &str, url: &str) -> (u16, http::HeaderMap, Vec<u8>) {
    let request = http::Request::builder()
        .method(method)
        .uri(url)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    let (head, body) = rt
        .block_on(HttpClient::new().send(request))
        .unwrap_or_else(|e| panic!("{method} {url}: {e:#}"));
    (head.status.as_u16(), head.headers, body.to_vec())
}

fn header<'h>(headers: &'h http::HeaderMap, name: &str) -> &'h str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no {name} header: {headers:?}"))
}

#[test]
fn serve_sends_the_portal_paths_to_the_portal_with_its_headers() {
    let rt = rt();
    let dir = temp_dir("portal-serve");
    let mut server = Proc::start(&["serve", "--listen", "127.0.0.1:0"], &dir);
    let base = format!("http://{}", server.address());
    let static_dir = repo().join("portal/static");
    for (path, file, content_type) in [
        ("/portal/", "index.html", "text/html; charset=utf-8"),
        (
            "/portal/index.html",
            "index.html",
            "text/html; charset=utf-8",
        ),
        // Larger than a stream's buffer (4 KiB): the body is read while the guest writes it.
        (
            "/portal/operator.js",
            "operator.js",
            "text/javascript; charset=utf-8",
        ),
        ("/portal/app.css", "app.css", "text/css; charset=utf-8"),
    ] {
        let (status, headers, body) = fetch(&rt, "GET", &format!("{base}{path}"));
        assert_eq!(status, 200, "{path}");
        assert_eq!(header(&headers, "content-type"), content_type, "{path}");
        let on_disk = std::fs::read(static_dir.join(file)).expect("the static file");
        assert!(
            !on_disk.is_empty() && body == on_disk,
            "{path}: not the file's bytes"
        );
        let csp = header(&headers, "content-security-policy");
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
        ] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"));
        assert_eq!(header(&headers, "x-content-type-options"), "nosniff");
        assert_eq!(header(&headers, "referrer-policy"), "no-referrer");
        assert_eq!(header(&headers, "cache-control"), "no-cache");
        assert!(header(&headers, "etag").starts_with('"'));
        assert!(header(&headers, "x-request-id").starts_with("req_"));
    }
    let (status, headers, body) = fetch(&rt, "HEAD", &format!("{base}/portal/operator.js"));
    assert_eq!((status, body.len()), (200, 0));
    assert_eq!(
        header(&headers, "content-type"),
        "text/javascript; charset=utf-8"
    );
    let (status, headers, _) = fetch(&rt, "GET", &format!("{base}/portal"));
    assert_eq!((status, header(&headers, "location")), (308, "/portal/"));
    let (status, headers, body) = fetch(&rt, "GET", &format!("{base}/portal/missing.js"));
    assert_eq!(status, 404);
    let error: serde_json::Value = serde_json::from_slice(&body).expect("an error envelope");
    assert_eq!(error["error"]["code"], "not_found");
    assert_eq!(
        error["requestId"].as_str(),
        Some(header(&headers, "x-request-id"))
    );
    assert!(header(&headers, "content-security-policy").contains("default-src 'none'"));
    let (status, headers, _) = fetch(&rt, "POST", &format!("{base}/portal/"));
    assert_eq!((status, header(&headers, "allow")), (405, "GET, HEAD"));
    // Everything else is the service's, as before.
    let (status, _, body) = fetch(&rt, "GET", &format!("{base}/healthz"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    // The service's own 404 (no CSP: not the portal's answer).
    let (status, headers, _) = fetch(&rt, "GET", &format!("{base}/portals"));
    assert_eq!(status, 404);
    assert!(headers.get("content-security-policy").is_none());
    server.kill();
}

/// The Python with the pinned Selenium, and Chromium with its driver; `None` (after a
/// `SKIPPED` line, or a failure under CI) when one is missing.
fn browser_tools() -> Option<String> {
    let venv = repo().join("tests/browser/.venv/bin/python");
    let python = std::env::var("EDGEHOOK_BROWSER_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .or_else(|| venv.exists().then(|| venv.display().to_string()))
        .unwrap_or_else(|| "python3".to_owned());
    let has_selenium = Command::new(&python)
        .args(["-c", "import selenium"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_selenium {
        skipped(&format!(
            "{python} cannot import selenium (python3 -m venv tests/browser/.venv && \
             tests/browser/.venv/bin/pip install -r tests/browser/requirements.txt)"
        ));
        return None;
    }
    for tool in ["chromium", "chromedriver"] {
        let found = Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            skipped(&format!(
                "no {tool} on PATH (apt-get install chromium chromium-driver)"
            ));
            return None;
        }
    }
    Some(python)
}

#[test]
fn the_portal_walks_the_operator_and_partner_stories_in_chromium() {
    let Some(python) = browser_tools() else {
        return;
    };
    let dir = temp_dir("portal-browser");
    // Deliveries go to the script's receiver on loopback: a development setting.
    let mut server = Proc::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--allow-private-targets",
            "--allow-http",
        ],
        &dir,
    );
    let base = format!("http://{}", server.address());
    let token = std::fs::read_to_string(dir.join("edgehook-data/admin-token"))
        .expect("the admin token file");
    let screens = Path::new(env!("CARGO_TARGET_TMPDIR")).join("portal-screens");
    let _ = std::fs::remove_dir_all(&screens);
    let out = Command::new(&python)
        .arg(repo().join("tests/browser/portal.py"))
        .args(["--base", &base, "--admin-token", token.trim(), "--partner"])
        .arg("--out")
        .arg(&screens)
        .output()
        .expect("run tests/browser/portal.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(
        out.status.success(),
        "the browser walk failed:\n{text}\nserver output:\n{}",
        server.drain().join("\n")
    );
    for screen in [
        "landing",
        "operator-subscriptions",
        "operator-replay",
        "operator-delivery",
        "operator-clients",
        "operator-xss",
        "operator-phone",
        "partner-subscriptions",
        "partner-created",
        "partner-delivery-log",
        "partner-find-load",
        "partner-notices",
    ] {
        let png = std::fs::read(screens.join(format!("{screen}.png")))
            .unwrap_or_else(|e| panic!("screenshot {screen}: {e}"));
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{screen} is a PNG");
    }
    server.kill();
}
