//! Portal links on the real server: `edgehook portal-link CLIENT` prints a whole URL with a
//! one-time token; its exchange over HTTP sets the session cookie, which then reads the
//! partner API and writes only with its CSRF token; a second exchange is refused.

use crate::common::*;
use serde_json::Value;
use std::process::Command;

#[test]
fn portal_link_prints_a_link_whose_session_works_over_http() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = temp_dir("portal-link");
    let mut server = Proc::start(&["serve", "--listen", "127.0.0.1:0"], &dir);
    let base = format!("http://{}", server.address());
    let out = Command::new(env!("CARGO_BIN_EXE_edgehook"))
        .args(["portal-link", "acme", "--server", &base])
        .args(["--public-url", "https://hooks.example.com/"])
        .current_dir(&dir)
        .output()
        .expect("edgehook portal-link");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = String::from_utf8(out.stdout).expect("utf-8");
    let token = url
        .trim()
        .strip_prefix("https://hooks.example.com/portal/#token=")
        .unwrap_or_else(|| panic!("a link on the public origin: {url}"))
        .to_owned();
    let body = format!(r#"{{"token":"{token}"}}"#);
    let exchange = |body: &str| {
        browser(
            &rt,
            &base,
            None,
            "POST",
            "/v1/portal/sessions",
            Some(body),
            None,
        )
    };
    let (status, text) = exchange(&body);
    assert_eq!(status, 201, "{text}");
    let session: Value = serde_json::from_str(&text).expect("json");
    let csrf = session["data"]["csrfToken"]
        .as_str()
        .expect("csrf")
        .to_owned();
    let (status, text) = exchange(&body);
    assert_eq!(status, 401, "used once: {text}");
    // The cookie itself, as hyper passed it through: read it from a fresh exchange's header.
    let cookie = set_cookie(&rt, &base, &server_token(&dir));
    let call = |method: &str, path: &str, body: Option<&str>, csrf: Option<&str>| {
        browser(&rt, &base, Some(&cookie), method, path, body, csrf)
    };
    assert_eq!(call("GET", "/v1/webhooks", None, None).0, 200);
    let create = r#"{"url":"https://hooks.example.com/in","eventTypes":["load.created"]}"#;
    let (status, text) = call("POST", "/v1/webhooks", Some(create), None);
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("csrf_failed"), "{text}");
    let (status, text) = call("GET", "/v1/portal/sessions/current", None, None);
    assert_eq!(status, 200, "{text}");
    let csrf_now: Value = serde_json::from_str(&text).expect("json");
    let csrf_now = csrf_now["data"]["csrfToken"]
        .as_str()
        .expect("csrf")
        .to_owned();
    let (status, text) = call("POST", "/v1/webhooks", Some(create), Some(&csrf_now));
    assert_eq!(status, 201, "{text}");
    assert_ne!(csrf, csrf_now, "each session has its own CSRF token");
    server.kill();
}

/// A call as the portal's page makes it: no `Authorization` (`Bearer ` with nothing after it
/// is none), the session cookie if any, the CSRF token if any.
fn browser(
    rt: &tokio::runtime::Runtime,
    base: &str,
    cookie: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&str>,
    csrf: Option<&str>,
) -> (u16, String) {
    let client = edgehook::cli::Remote::new(base, "").expect("client");
    let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
    if let Some(c) = cookie {
        headers.push(("cookie".to_owned(), c.to_owned()));
    }
    if let Some(t) = csrf {
        headers.push(("x-csrf-token".to_owned(), t.to_owned()));
    }
    let body = body.map(|b| b.as_bytes().to_vec());
    rt.block_on(client.call(method, path, body, &headers))
        .expect("call")
}

/// The admin token of the `serve` started in `dir`.
fn server_token(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("edgehook-data/admin-token"))
        .expect("token")
        .trim()
        .to_owned()
}

/// Mints a link and exchanges it with a raw HTTP/1.1 request, returning the `Cookie` header
/// value the browser would send back (`edgehook_session=...`), as `serve` set it.
fn set_cookie(rt: &tokio::runtime::Runtime, base: &str, admin: &str) -> String {
    let operator = edgehook::cli::Remote::new(base, admin).expect("operator");
    let (status, text) = rt
        .block_on(operator.call("POST", "/internal/v1/clients/acme/portal-links", None, &[]))
        .expect("mint");
    assert_eq!(status, 201, "{text}");
    let minted: Value = serde_json::from_str(&text).expect("json");
    let token = minted["data"]["token"].as_str().expect("token");
    let body = format!(r#"{{"token":"{token}"}}"#);
    let addr = base.strip_prefix("http://").expect("http");
    let request = format!(
        "POST /v1/portal/sessions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let response = raw_exchange(addr, &request);
    let line = response
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no Set-Cookie: {response}"));
    let value = line.split_once(':').expect("header").1.trim();
    assert!(
        value.ends_with("; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200"),
        "{value}"
    );
    value.split(';').next().expect("name=value").to_owned()
}

fn raw_exchange(addr: &str, request: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.write_all(request.as_bytes()).expect("write");
    let mut out = String::new();
    stream.read_to_string(&mut out).expect("read");
    out
}
