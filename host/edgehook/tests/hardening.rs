//! `edgehook serve` as a process, hardened: its log (stdout JSON lines and the
//! component's lines on stderr) never carries a signing secret, an API key or the admin
//! token; and it answers an oversized body with 413 without waiting for (or buffering) the
//! rest of it. Loopback only; every wait is a condition with a deadline.

use edgehook::cli::Remote;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use crate::common;

use common::*;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

#[test]
fn serve_logs_carry_no_secret_key_or_admin_token() {
    let dir = temp_dir("hardening-logs");
    let mut server = Proc::start(&serve_to_loopback("attempt_timeout_ms=1000"), &dir);
    let base = format!("http://{}", server.address());
    let token = std::fs::read_to_string(dir.join("edgehook-data/admin-token")).expect("token");
    let (key, revoked, secrets) = busy_session(&mut server, &base, &token);
    // The clients are gone (their pooled connections closed): the stop is prompt.
    let pid = server.child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    server.wait_for("a clean stop", |l| l.contains("\"msg\":\"stopped\""));
    let lines = server.drain().to_vec();
    assert!(
        lines
            .iter()
            .filter(|l| l.contains("\"msg\":\"request\""))
            .count()
            >= 15,
        "every request is logged:\n{}",
        lines.join("\n")
    );
    let token = token.trim();
    for line in &lines {
        for s in &secrets {
            assert!(
                !line.contains(s.as_str()),
                "a signing secret or a URL's path token leaked: {line}"
            );
        }
        assert!(!line.contains(&key), "an API key leaked: {line}");
        assert!(!line.contains(&revoked), "a revoked API key leaked: {line}");
        assert!(!line.contains(token), "the admin token leaked: {line}");
    }
}

/// Partner and operator calls of every kind, good and bad, and two deliveries (one
/// delivered, one refused), to URLs whose paths carry a token as Slack's and Discord's do.
/// Returns the API key, a revoked key, and the signing secrets and path tokens.
fn busy_session(server: &mut Proc, base: &str, token: &str) -> (String, String, Vec<String>) {
    let rt = rt();
    let recv = receiver(&rt);
    let operator = Remote::new(base, token).expect("client");
    let op = |method: &str, path: &str, body: Option<&[u8]>, headers: &[(&str, &str)]| {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect();
        rt.block_on(operator.call(method, path, body.map(<[u8]>::to_vec), &headers))
            .expect("operator call")
    };
    let (_, out) = op("POST", "/internal/v1/clients/acme/keys", None, &[]);
    let key = json(&out)["data"]["apiKey"]
        .as_str()
        .expect("key")
        .to_owned();
    let (_, out) = op("POST", "/internal/v1/clients/acme/keys", None, &[]);
    let revoked = json(&out)["data"]["apiKey"]
        .as_str()
        .expect("key")
        .to_owned();
    let revoked_id = json(&out)["data"]["id"].as_str().expect("id").to_owned();
    op(
        "DELETE",
        &format!("/internal/v1/clients/acme/keys/{revoked_id}"),
        None,
        &[],
    );

    let partner = Remote::new(base, &key).expect("client");
    let calls = std::cell::Cell::new(0);
    let call = |client: &Remote, method: &str, path: &str, body: Option<String>| {
        calls.set(calls.get() + 1);
        let headers = [
            ("content-type".to_owned(), "application/json".to_owned()),
            (
                "idempotency-key".to_owned(),
                format!("call-{}", calls.get()),
            ),
        ];
        rt.block_on(client.call(method, path, body.map(String::into_bytes), &headers))
            .expect("partner call")
    };
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        l.local_addr().expect("addr").port()
    };
    let mut secrets = vec![
        "PathTokenOk7f3a".to_owned(),
        "PathTokenRefused9c1d".to_owned(),
    ];
    let mut subs = Vec::new();
    for target in [
        format!(
            "http://127.0.0.1:{}/services/T0/{}",
            recv.port(),
            secrets[0]
        ),
        format!("http://127.0.0.1:{closed}/services/T0/{}", secrets[1]),
    ] {
        let body = format!(r#"{{"url":"{target}","eventTypes":["load.created"]}}"#);
        let (status, out) = call(&partner, "POST", "/v1/webhooks", Some(body));
        assert_eq!(status, 201, "{out}");
        secrets.push(
            json(&out)["data"]["signingSecret"]
                .as_str()
                .expect("secret")
                .to_owned(),
        );
        subs.push(json(&out)["data"]["id"].as_str().expect("id").to_owned());
    }
    // Partner calls, good and bad; a key in a query string (never logged: paths only).
    call(&partner, "GET", "/v1/webhooks", None);
    call(&partner, "GET", &format!("/v1/webhooks/{}", subs[0]), None);
    call(
        &partner,
        "GET",
        &format!("/v1/webhooks?api_key={key}"),
        None,
    );
    call(&partner, "POST", "/v1/webhooks", Some("{not json".into()));
    call(
        &partner,
        "POST",
        "/v1/webhooks",
        Some("x".repeat(70 * 1024)),
    );
    call(&partner, "GET", "/internal/v1/settings", None);
    let wrong = Remote::new(base, &revoked).expect("client");
    assert_eq!(call(&wrong, "GET", "/v1/webhooks", None).0, 401);
    let admin_as_partner = Remote::new(base, token).expect("client");
    assert_eq!(call(&admin_as_partner, "GET", "/v1/webhooks", None).0, 401);

    let ingest = [
        ("content-type", "application/json"),
        ("x-service-event", "load.created"),
    ];
    let (status, _) = op(
        "POST",
        "/internal/v1/events",
        Some(br#"{"id":"L-1"}"#),
        &ingest,
    );
    assert_eq!(status, 202);
    server.wait_for("the delivered attempt", |l| {
        l.contains("delivery attempt") && l.contains("\"status\":\"200\"")
    });
    server.wait_for("the refused attempt", |l| {
        l.contains("delivery attempt") && l.contains("ConnectionRefused")
    });
    for path in [
        format!("/internal/v1/subscriptions/{}", subs[0]),
        format!("/internal/v1/subscriptions/{}/deliveries", subs[1]),
        "/internal/v1/settings".to_owned(),
        "/internal/v1/deliveries/dlv_unknown".to_owned(),
    ] {
        op("GET", &path, None, &[]);
    }
    op("POST", "/internal/v1/tick", None, &[]);
    op(
        "POST",
        &format!("/internal/v1/subscriptions/{}/disable", subs[1]),
        None,
        &[],
    );
    (key, revoked, secrets)
}

/// Runs `edgehook` to its end (the test fails if it is still running at the deadline);
/// returns its exit code and output.
fn run_to_end(args: &[&str], dir: &std::path::Path) -> (Option<i32>, String) {
    let child = std::process::Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start edgehook");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(out) = rx.recv_timeout(DEADLINE) else {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        panic!("edgehook did not stop: {args:?}");
    };
    let out = out.expect("output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
fn a_misconfigured_serve_refuses_to_start_naming_the_key_never_the_admin_token() {
    let dir = temp_dir("hardening-config");
    let token = "eha_misconfigured_token_0123456789";
    let serve = |extra: &[&str]| {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--admin-token", token];
        args.extend_from_slice(extra);
        run_to_end(&args, &dir)
    };
    let (code, bad_value) = serve(&["--set", "max_concurrency=lots"]);
    assert_eq!(code, Some(1), "{bad_value}");
    assert!(
        bad_value.contains("invalid setting: config key max_concurrency"),
        "{bad_value}"
    );
    assert!(!bad_value.contains("listening"), "{bad_value}");
    // A typo is not silently ignored.
    let (code, typo) = serve(&["--set", "attempt_timout_ms=5000"]);
    assert_eq!(code, Some(1), "{typo}");
    assert!(
        typo.contains("attempt_timout_ms: no such setting") && typo.contains("attempt_timeout_ms"),
        "{typo}"
    );
    for out in [&bad_value, &typo] {
        assert!(!out.contains(token), "the admin token leaked: {out}");
    }
}

#[test]
fn serve_takes_the_admin_token_from_set_before_the_file() {
    let dir = temp_dir("hardening-set-token");
    let mut server = Proc::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--set",
            "admin_token=eha_from_set_0123456789",
        ],
        &dir,
    );
    let base = format!("http://{}", server.address());
    let rt = rt();
    let call = |token: &str| {
        rt.block_on(Remote::new(&base, token).expect("client").call(
            "GET",
            "/internal/v1/settings",
            None,
            &[],
        ))
        .expect("call")
        .0
    };
    assert_eq!(call("eha_from_set_0123456789"), 200);
    assert!(
        !dir.join("edgehook-data/admin-token").exists(),
        "no token file is made when one is given"
    );
    server.kill();
}

/// Sends a request head and `body_bytes` of body (never the rest), then reads the response
/// head and body, up to the deadline. Returns the status line and the body.
fn partial_request(addr: &str, head: &str, body_bytes: usize, chunked: bool) -> (String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(DEADLINE))
        .expect("read timeout");
    let mut writer = stream.try_clone().expect("clone");
    let head = head.to_owned();
    // The writer stops early (the server closes) or after `body_bytes`; either way the
    // body is never completed, so a server that waited for all of it would never answer.
    let written = std::thread::spawn(move || {
        let mut sent = 0usize;
        if writer.write_all(head.as_bytes()).is_err() {
            return sent;
        }
        let chunk = vec![b'x'; 16 * 1024];
        while sent < body_bytes {
            let ok = if chunked {
                writer
                    .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                    .and_then(|()| writer.write_all(&chunk))
                    .and_then(|()| writer.write_all(b"\r\n"))
            } else {
                writer.write_all(&chunk)
            };
            if ok.is_err() {
                break;
            }
            sent += chunk.len();
        }
        sent
    });
    let started = Instant::now();
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    let (status, body) = loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break (String::new(), String::new()),
            Ok(n) => response.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&response).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .and_then(|v| v.trim().parse::<usize>().ok())
                })
                .unwrap_or(0);
            if body.len() >= length {
                break (
                    head.lines().next().unwrap_or("").to_owned(),
                    body.to_owned(),
                );
            }
        }
    };
    assert!(
        started.elapsed() < DEADLINE,
        "no answer before the deadline"
    );
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = written.join();
    (status, body)
}

#[test]
fn serve_answers_413_without_waiting_for_an_oversized_body() {
    let dir = temp_dir("hardening-body");
    let token = "eha_body_limit_test_token";
    let mut server = Proc::start(
        &["serve", "--listen", "127.0.0.1:0", "--admin-token", token],
        &dir,
    );
    let addr = server.address();
    let auth = format!("Authorization: Bearer {token}\r\n");
    for (path, extra, chunked) in [
        (
            "/internal/v1/events",
            "Content-Length: 1073741824\r\nX-Service-Event: load.created\r\n",
            false,
        ),
        (
            "/internal/v1/events",
            "Transfer-Encoding: chunked\r\nX-Service-Event: load.created\r\n",
            true,
        ),
        ("/v1/webhooks", "Content-Length: 1073741824\r\n", false),
        ("/v1/webhooks", "Transfer-Encoding: chunked\r\n", true),
    ] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\n{extra}\r\n"
        );
        // 1 MiB of a declared 1 GiB (or of an unterminated chunked body).
        let (status, body) = partial_request(&addr, &head, 1024 * 1024, chunked);
        assert!(
            status.starts_with("HTTP/1.1 413"),
            "{path}: {status} {body}"
        );
        let body = json(&body);
        assert_eq!(body["error"]["code"], "payload_too_large", "{path}: {body}");
        assert!(
            body["requestId"]
                .as_str()
                .is_some_and(|r| r.starts_with("req_")),
            "{body}"
        );
    }
    // The server is still there for the next client.
    let rt = rt();
    let (status, _) = rt
        .block_on(
            Remote::new(&format!("http://{addr}"), token)
                .expect("client")
                .call("GET", "/healthz", None, &[]),
        )
        .expect("healthz");
    assert_eq!(status, 200);
}

/// Failed authentication is limited per source address before any key lookup:
/// 30 failures a minute from an address, then 429 for every credentialed request from it,
/// whatever address header the client sends (`serve` sets it from the peer).
#[test]
fn failed_authentication_is_limited_per_peer_address() {
    let dir = temp_dir("auth-failures");
    let rt = rt();
    let mut server = Proc::start(&["serve", "--listen", "127.0.0.1:0"], &dir);
    let base = format!("http://{}", server.address());
    let guesser = edgehook::cli::Remote::new(&base, "ehk_not-a-key").expect("client");
    let spoofed = [("spin-client-addr".to_owned(), "198.51.100.9:1".to_owned())];
    for n in 0..30 {
        let headers: &[(String, String)] = if n % 2 == 0 { &spoofed } else { &[] };
        let (status, text) = rt
            .block_on(guesser.call("GET", "/v1/webhooks", None, headers))
            .expect("call");
        assert_eq!(status, 401, "attempt {n}: {text}");
    }
    for headers in [&spoofed[..], &[]] {
        let (status, text) = rt
            .block_on(guesser.call("GET", "/v1/webhooks", None, headers))
            .expect("call");
        assert_eq!(status, 429, "{text}");
        assert!(text.contains("too_many_auth_failures"), "{text}");
    }
    let (status, _) = rt
        .block_on(guesser.call("GET", "/healthz", None, &[]))
        .expect("call");
    assert_eq!(status, 200, "health needs no credentials");
    drop(server);
}
