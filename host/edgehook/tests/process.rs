//! The real `edgehook` binary as an operator runs it (README's quickstart is
//! `quickstart.rs`): a SIGKILL mid-way loses nothing; SIGTERM stops cleanly; settings and the
//! admin token. Everything talks over loopback only, and every wait is a
//! condition with a deadline.

use edgehook::cli::Remote;
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::*;

fn run_cli(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> (bool, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run edgehook");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input)
            .expect("write stdin");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("wait");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `edgehook keys issue acme` against the server at `base`: the `data` it prints.
fn issued(dir: &Path, base: &str) -> Value {
    let (ok, out) = run_cli(dir, &["keys", "issue", "acme", "--server", base], None);
    assert!(ok, "{out}");
    serde_json::from_str::<Value>(&out).expect("json")["data"].clone()
}

/// `edgehook keys issue acme` against the server at `base`: the API key it prints.
fn issue_key(dir: &Path, base: &str) -> String {
    issued(dir, base)["apiKey"]
        .as_str()
        .expect("apiKey")
        .to_owned()
}

/// Creates a subscription of `url` to `event` with `key`: the 201's `data`.
fn subscribe(rt: &tokio::runtime::Runtime, base: &str, key: &str, url: &str, event: &str) -> Value {
    let (status, text) = post_subscription(rt, base, key, url, event);
    assert_eq!(status, 201, "{text}");
    serde_json::from_str::<Value>(&text).expect("json")["data"].clone()
}

#[test]
fn a_sigkill_mid_way_loses_no_delivery() {
    let dir = temp_dir("sigkill");
    let rt = rt();
    let recv = receiver(&rt);
    let port = recv.port();
    let args = serve_to_loopback("attempt_timeout_ms=1000");
    let mut server = Proc::start(&args, &dir);
    let base = format!("http://{}", server.address());
    let token = std::fs::read_to_string(dir.join("edgehook-data/admin-token")).expect("token");
    let operator = Remote::new(&base, &token).expect("client");
    let key = issue_key(&dir, &base);
    let subs: Vec<String> = (0..5)
        .map(|i| {
            let url = format!("http://127.0.0.1:{port}/s{i}");
            subscribe(&rt, &base, &key, &url, "load.updated")["id"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    let ingest = [
        ("content-type".to_owned(), "application/json".to_owned()),
        ("x-service-event".to_owned(), "load.updated".to_owned()),
    ];
    let events = 30;
    for n in 0..events {
        if n == events - 1 {
            // The last event's attempts will be in flight when the process dies.
            recv.hold();
        }
        let body = format!(r#"{{"id":"L{n}"}}"#).into_bytes();
        let (status, _) = rt
            .block_on(operator.call("POST", "/internal/v1/events", Some(body), &ingest))
            .expect("publish");
        assert_eq!(status, 202);
    }
    wait_for("an attempt at the receiver", || recv.held() > 0);
    server.kill(); // SIGKILL, with attempts in flight
    recv.release();
    let accepted = events;

    let mut server = Proc::start(&args, &dir);
    let base = format!("http://{}", server.address());
    let operator = Remote::new(&base, &token).expect("client");
    let expected = accepted * subs.len();
    wait_for("every delivery to finish after the restart", || {
        let mut finished = 0;
        let mut attempts_ok = true;
        for sub in &subs {
            let path = format!("/internal/v1/subscriptions/{sub}/deliveries?limit=100");
            let (_, out) = rt
                .block_on(operator.call("GET", &path, None, &[]))
                .expect("history");
            let page: Value = serde_json::from_str(&out).expect("json");
            for d in page["data"].as_array().expect("array") {
                finished += usize::from(d["status"] == "succeeded");
                attempts_ok &= d["attempts"].as_array().is_some_and(|a| a.len() <= 3);
            }
        }
        assert!(attempts_ok, "never more than 3 attempts");
        if finished == expected {
            Ok(())
        } else {
            Err(format!("{finished} of {expected} finished"))
        }
    });
    let counts = per_delivery(&recv);
    assert_eq!(
        counts.len(),
        expected,
        "every delivery reached the receiver"
    );
    let duplicates: usize = counts.values().map(|n| n - 1).sum();
    println!("{expected} deliveries, {duplicates} sent twice (in flight at the kill)");
    drop(server);
}

#[test]
fn sigterm_stops_cleanly_and_the_data_stays() {
    let dir = temp_dir("sigterm");
    let mut server = Proc::start(&["serve", "--listen", "127.0.0.1:0"], &dir);
    let base = format!("http://{}", server.address());
    let key = issue_key(&dir, &base);
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    server.wait_for("a clean stop", |l| l.contains("\"msg\":\"stopped\""));
    let status = server.child.wait().expect("wait");
    assert!(status.success(), "{status:?}");

    let mut again = Proc::start(&["serve", "--listen", "127.0.0.1:0"], &dir);
    let base = format!("http://{}", again.address());
    let rt = rt();
    let (status, _) = rt
        .block_on(
            Remote::new(&base, &key)
                .expect("client")
                .call("GET", "/v1/webhooks", None, &[]),
        )
        .expect("list");
    assert_eq!(status, 200, "the key issued before the restart still works");
}

#[test]
fn settings_come_from_flags_and_the_environment() {
    let dir = temp_dir("settings");
    let env = [
        ("EDGEHOOK_SUBSCRIPTION_LIMIT", "7"),
        ("EDGEHOOK_ATTEMPT_TIMEOUT_MS", "3000"),
    ];
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--set",
        "attempt_timeout_ms=1500",
    ];
    let mut server = Proc::start_with_env(&args, &dir, &env);
    let base = format!("http://{}", server.address());
    let token = std::fs::read_to_string(dir.join("edgehook-data/admin-token")).expect("token");
    let rt = rt();
    let operator = Remote::new(&base, &token).expect("client");
    let (status, out) = rt
        .block_on(operator.call("GET", "/internal/v1/settings", None, &[]))
        .expect("settings");
    assert_eq!(status, 200, "{out}");
    let data = serde_json::from_str::<Value>(&out).expect("json")["data"].clone();
    assert_eq!(
        data["subscriptionLimit"], 7,
        "from EDGEHOOK_SUBSCRIPTION_LIMIT"
    );
    assert_eq!(
        data["attemptTimeoutMs"], 1500,
        "--set wins over the environment"
    );
}

/// `GET /internal/v1/settings` with `token`: the operator API's answer status.
fn operator_status(rt: &tokio::runtime::Runtime, base: &str, token: &str) -> u16 {
    let operator = Remote::new(base, token).expect("client");
    rt.block_on(operator.call("GET", "/internal/v1/settings", None, &[]))
        .expect("settings")
        .0
}

#[test]
fn the_admin_token_is_generated_private_and_kept_unless_one_is_given() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = temp_dir("admin-token");
    let rt = rt();
    let file = dir.join("edgehook-data/admin-token");
    // Started under a permissive umask, so the 0600 can only come from edgehook.
    let serve = |dir: &Path, extra: &[&str], env: &[(&str, &str)]| {
        let mut command = Command::new("sh");
        command
            .args(["-c", "umask 022 && exec \"$0\" \"$@\"", BIN])
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env_remove("EDGEHOOK_ADMIN_TOKEN")
            .envs(env.iter().copied())
            .current_dir(dir);
        Proc::spawn(command)
    };

    // First start: generated, `eha_` + 64 hex, in a file only its owner can read.
    let mut server = serve(&dir, &[], &[]);
    let base = format!("http://{}", server.address());
    let token = std::fs::read_to_string(&file).expect("the admin token file");
    let hex = token.strip_prefix("eha_").expect("eha_ prefix");
    assert!(
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "eha_ + 64 hex: {token:?}"
    );
    let mode = std::fs::metadata(&file)
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(
        format!("{:o}", mode & 0o777),
        "600",
        "the token file's mode"
    );
    assert_eq!(operator_status(&rt, &base, &token), 200);
    assert_eq!(operator_status(&rt, &base, &format!("{token}0")), 401);
    server.wait_for("the token file's log line", |l| {
        l.contains("admin token created")
    });
    server.kill();
    assert!(
        server.drain().iter().all(|l| !l.contains(hex)),
        "the token is never logged"
    );

    // A restart keeps it.
    let mut server = serve(&dir, &[], &[]);
    let base = format!("http://{}", server.address());
    assert_eq!(operator_status(&rt, &base, &token), 200, "the same token");
    assert_eq!(std::fs::read_to_string(&file).expect("file"), token);
    assert!(
        server
            .drain()
            .iter()
            .all(|l| !l.contains("admin token created")),
        "not generated again"
    );
    server.kill();

    // A given one (flag or environment) is the token; the file's is refused, and the file
    // stays as it is.
    let given = "eha_given-by-the-operator";
    let mut server = serve(&dir, &["--admin-token", given], &[]);
    let base = format!("http://{}", server.address());
    assert_eq!(operator_status(&rt, &base, given), 200, "--admin-token");
    assert_eq!(operator_status(&rt, &base, &token), 401, "the file's token");
    server.kill();
    let from_env = "eha_from-the-environment";
    let mut server = serve(&dir, &[], &[("EDGEHOOK_ADMIN_TOKEN", from_env)]);
    let base = format!("http://{}", server.address());
    assert_eq!(
        operator_status(&rt, &base, from_env),
        200,
        "EDGEHOOK_ADMIN_TOKEN"
    );
    assert_eq!(operator_status(&rt, &base, &token), 401, "the file's token");
    assert_eq!(operator_status(&rt, &base, given), 401, "the earlier one");
    server.kill();
    assert_eq!(std::fs::read_to_string(&file).expect("file"), token);

    // Given on first start, nothing is generated.
    let fresh = temp_dir("admin-token-given");
    let mut server = serve(&fresh, &["--admin-token", given], &[]);
    let base = format!("http://{}", server.address());
    assert_eq!(operator_status(&rt, &base, given), 200);
    assert!(
        !fresh.join("edgehook-data/admin-token").exists(),
        "no token file when one is given"
    );
    drop(server);
}

/// Sends SIGTERM to `server`.
fn sigterm(server: &Proc) {
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
}

/// Waits (up to the deadline) for `server` to exit; returns its status and how long it took.
fn wait_exit(server: &mut Proc) -> (std::process::ExitStatus, Duration) {
    let started = Instant::now();
    let status = wait_for("the server to exit", || {
        server.child.try_wait().expect("try_wait")
    });
    (status, started.elapsed())
}

/// `edgehook serve`'s shutdown grace period (`serve::SHUTDOWN_GRACE`).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(15);

#[test]
fn sigterm_lets_a_delivery_in_flight_finish() {
    let dir = temp_dir("sigterm-delivery");
    let rt = rt();
    let recv = receiver(&rt);
    recv.hold();
    // A long attempt timeout: the held attempt can only end by the receiver answering.
    let args = serve_to_loopback("attempt_timeout_ms=50000");
    let mut server = Proc::start(&args, &dir);
    let base = format!("http://{}", server.address());
    let key = issue_key(&dir, &base);
    let url = recv.url("/hook");
    let sub_id = subscribe(&rt, &base, &key, &url, "load.created")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let (ok, out) = run_cli(
        &dir,
        &["publish", "--type", "load.created", "--server", &base],
        Some(br#"{"id":"L-1"}"#),
    );
    assert!(ok, "{out}");
    wait_for("the attempt at the receiver", || recv.held() > 0);
    let dlv_id = {
        let counts = per_delivery(&recv);
        assert_eq!(counts.len(), 1, "{counts:?}");
        counts.keys().next().expect("one delivery").clone()
    };

    // SIGTERM while the attempt waits for its answer; the server stays up for it.
    sigterm(&server);
    server.wait_for("shutting down", |l| l.contains("\"msg\":\"shutting down\""));
    assert!(
        server.child.try_wait().expect("try_wait").is_none(),
        "the server waits for the attempt in flight"
    );
    recv.release();
    let (status, took) = wait_exit(&mut server);
    assert!(status.success(), "{status:?}");
    assert!(took < SHUTDOWN_GRACE, "stopped after {took:?}");
    let stopped = server.wait_for("a clean stop", |l| l.contains("\"msg\":\"stopped\""));
    let attempt = server.wait_for("the attempt's log line", |l| {
        l.contains("\"msg\":\"delivery attempt\"") && l.contains(&dlv_id)
    });
    let pos = |line: &str| server.seen.iter().position(|l| l == line).expect("seen");
    assert!(attempt.contains("\"status\":\"200\""), "{attempt}");
    assert!(
        pos(&attempt) < pos(&stopped),
        "the attempt ended before the server stopped"
    );

    // The attempt's outcome was stored: after a restart the delivery has succeeded, with
    // that one attempt, and it is not sent again.
    let mut again = Proc::start(&args, &dir);
    let base = format!("http://{}", again.address());
    let (ok, out) = run_cli(
        &dir,
        &["delivery", "show", &dlv_id, "--server", &base],
        None,
    );
    assert!(ok, "{out}");
    let shown: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(shown["data"]["status"], "succeeded", "{out}");
    assert_eq!(shown["data"]["subscriptionId"], sub_id.as_str(), "{out}");
    let attempts = shown["data"]["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1, "{out}");
    assert_eq!(attempts[0]["statusCode"], 200, "{out}");
    assert_eq!(per_delivery(&recv)[&dlv_id], 1);
    drop(again);
}

/// Reads one HTTP/1.1 response (head and a `Content-Length` body) from `stream`.
fn read_response(stream: &mut std::net::TcpStream) -> String {
    use std::io::Read as _;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(head_end) = text.find("\r\n\r\n") {
            let length = text[..head_end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= head_end + 4 + length {
                return text;
            }
        }
        let n = stream.read(&mut chunk).expect("read the response");
        assert!(n > 0, "connection closed mid-response: {text}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The head of an event publish over HTTP/1.1 (the body follows it).
fn publish_head(
    addr: &str,
    token: &str,
    idempotency_key: &str,
    body: &[u8],
    close: bool,
) -> String {
    format!(
        "POST /internal/v1/events HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {token}\r\n\
         content-type: application/json\r\nx-service-event: load.created\r\n\
         idempotency-key: {idempotency_key}\r\ncontent-length: {}\r\n{}\r\n",
        body.len(),
        if close { "connection: close\r\n" } else { "" }
    )
}

/// `edgehook serve` on a free loopback port in `dir`: the process, its address, and the admin
/// token it wrote.
fn serve_on_loopback(dir: &Path) -> (Proc, String, String) {
    let mut server = Proc::start(&["serve", "--listen", "127.0.0.1:0"], dir);
    let addr = server.address();
    let token = std::fs::read_to_string(dir.join("edgehook-data/admin-token")).expect("token");
    (server, addr, token)
}

/// A connection to `addr` whose reads give up after the deadline.
fn connect(addr: &str) -> std::net::TcpStream {
    let stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(DEADLINE)).expect("timeout");
    stream
}

#[test]
fn sigterm_lets_a_request_in_flight_get_its_answer() {
    use std::io::Write as _;
    let dir = temp_dir("sigterm-request");
    let (mut server, addr, token) = serve_on_loopback(&dir);
    let mut stream = connect(&addr);
    // The request's head, asking to continue: the server answers 100 once it reads the body,
    // so the request is surely in flight. Then SIGTERM, then the body.
    let body = br#"{"id":"L-2","status":"ASSIGNED"}"#;
    let head = publish_head(&addr, &token, "in-flight", body, false)
        .replace("\r\n\r\n", "\r\nexpect: 100-continue\r\n\r\n");
    stream.write_all(head.as_bytes()).expect("write");
    let interim = read_response(&mut stream);
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");
    sigterm(&server);
    server.wait_for("shutting down", |l| l.contains("\"msg\":\"shutting down\""));
    assert!(
        server.child.try_wait().expect("try_wait").is_none(),
        "the server waits for the request in flight"
    );
    stream.write_all(body).expect("write the body");
    let answer = read_response(&mut stream);
    assert!(
        answer.starts_with("HTTP/1.1 202"),
        "the client gets its answer: {answer}"
    );
    assert!(!answer.contains("idempotent-replayed"), "{answer}");
    drop(stream);
    let (status, took) = wait_exit(&mut server);
    assert!(status.success(), "{status:?}");
    assert!(took < SHUTDOWN_GRACE, "stopped after {took:?}");
    server.wait_for("a clean stop", |l| l.contains("\"msg\":\"stopped\""));

    // The event was stored: publishing it again after a restart is an idempotent replay.
    let mut again = Proc::start(&["serve", "--listen", "127.0.0.1:0"], &dir);
    let addr = again.address();
    let mut stream = connect(&addr);
    stream
        .write_all(publish_head(&addr, &token, "in-flight", body, true).as_bytes())
        .and_then(|()| stream.write_all(body))
        .expect("write");
    let answer = read_response(&mut stream);
    assert!(
        answer.starts_with("HTTP/1.1 202") && answer.contains("idempotent-replayed: true"),
        "the event accepted during shutdown was kept: {answer}"
    );
    drop(again);
}

#[test]
fn sigterm_does_not_wait_for_idle_connections() {
    use std::io::{Read as _, Write as _};
    let dir = temp_dir("sigterm-idle");
    let (mut server, addr, token) = serve_on_loopback(&dir);
    // A keep-alive connection that has had its answer and stays open, idle.
    let mut stream = connect(&addr);
    stream
        .write_all(
            format!(
                "GET /internal/v1/settings HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer \
                 {token}\r\n\r\n"
            )
            .as_bytes(),
        )
        .expect("write");
    let answer = read_response(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    sigterm(&server);
    let (status, took) = wait_exit(&mut server);
    assert!(status.success(), "{status:?}");
    assert!(
        took < SHUTDOWN_GRACE / 3,
        "an idle connection held the shutdown for {took:?}"
    );
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
}
