//! `edgehook serve` on start: where things are (URL, data directory, admin token, outbound
//! policy), one warning when the policy is relaxed, each switch allowing only what it says;
//! and the binary on its own, as `cargo install` leaves it, serving from anywhere.

use edgehook::cli::Remote;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

use crate::common::*;

/// The `listening` line of `server`, parsed.
fn listening(server: &mut Proc) -> Value {
    let line = server.wait_for("the listening line", |l| {
        l.contains("\"msg\":\"listening\"")
    });
    serde_json::from_str(&line).expect("json log line")
}

/// The warnings about the outbound policy among `lines`.
fn relaxed(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["level"] == "warn" && v["msg"] == edgehook_runtime::net::RELAXED)
        .collect()
}

/// Creates a subscription to `url` on the server at `base` (admin token `token`): the
/// status and the error code, if any.
fn create(rt: &tokio::runtime::Runtime, base: &str, token: &str, url: &str) -> (u16, String) {
    let operator = Remote::new(base, token).expect("client");
    let (status, text) = rt
        .block_on(operator.call("POST", "/internal/v1/clients/acme/keys", None, &[]))
        .expect("issue");
    assert_eq!(status, 201, "{text}");
    let issued: Value = serde_json::from_str(&text).expect("json");
    let key = issued["data"]["apiKey"].as_str().expect("apiKey");
    let (status, text) = post_subscription(rt, base, key, url, "load.created");
    let answer: Value = serde_json::from_str(&text).expect("json");
    let code = answer["error"]["details"][0]["code"].as_str().unwrap_or("");
    (status, code.to_owned())
}

#[test]
fn serve_says_where_things_are_and_is_strict_by_default() {
    let dir = temp_dir("startup-default");
    let mut server = Proc::start(&["serve", "--listen", "127.0.0.1:0"], &dir);
    let line = listening(&mut server);
    let addr = line["addr"].as_str().expect("addr");
    assert_eq!(line["url"], format!("http://{addr}"), "{line}");
    let data = dir.join("edgehook-data");
    let shown = Path::new(line["dataDir"].as_str().expect("dataDir"));
    assert!(shown.is_absolute(), "{line}");
    assert_eq!(
        shown.canonicalize().expect("exists"),
        data.canonicalize().expect("exists")
    );
    let token_file = data.canonicalize().expect("dir").join("admin-token");
    assert_eq!(
        line["adminToken"],
        format!("file {}", token_file.display()),
        "{line}"
    );
    assert_eq!(line["outbound"], "https to public addresses only", "{line}");
    // A request answered: the start is over, and there was no warning.
    let rt = rt();
    let token = std::fs::read_to_string(&token_file).expect("token");
    let base = format!("http://{addr}");
    let (status, code) = create(&rt, &base, &token, "http://hooks.example.com/in");
    assert_eq!((status, code.as_str()), (422, "https_required"));
    assert!(relaxed(server.drain()).is_empty(), "{:?}", server.seen);
}

/// A start of `serve`: flags, environment, what its `outbound` field mentions, and the
/// switches on (`allow_http`, `allow_private_targets`).
type Case = (
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
    &'static str,
    (bool, bool),
);

#[test]
fn each_outbound_switch_is_announced_warned_and_allows_only_its_own() {
    let rt = rt();
    let token = "eha_startup-switches";
    // (flags, environment, what `outbound` mentions, (allowHttp, allowPrivateTargets))
    let cases: [Case; 3] = [
        (&["--allow-http"], &[], "--allow-http", (true, false)),
        (
            &[],
            &[("EDGEHOOK_ALLOW_PRIVATE_TARGETS", "true")],
            "--allow-private-targets",
            (false, true),
        ),
        (
            &["--allow-private-targets", "--set", "allow_http=true"],
            &[],
            "--allow-http --allow-private-targets",
            (true, true),
        ),
    ];
    for (i, (flags, env, mentions, (http, private))) in cases.into_iter().enumerate() {
        let dir = temp_dir(&format!("startup-switch-{i}"));
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--admin-token", token];
        args.extend(flags);
        let mut server = Proc::start_with_env(&args, &dir, env);
        let line = listening(&mut server);
        let outbound = line["outbound"].as_str().expect("outbound");
        assert!(outbound.contains(mentions), "{args:?}: {line}");
        assert_eq!(
            line["adminToken"], "from --admin-token / EDGEHOOK_ADMIN_TOKEN",
            "{line}"
        );
        let base = format!("http://{}", line["addr"].as_str().expect("addr"));
        let answer = |url: &str| {
            let (status, code) = create(&rt, &base, token, url);
            if status == 201 { "ok".to_owned() } else { code }
        };
        // http to a public host: allowed by --allow-http alone.
        let public_http = answer("http://hooks.example.com/in");
        // https to loopback: allowed by --allow-private-targets alone.
        let private_https = answer("https://127.0.0.1:9/in");
        // http to loopback (a local receiver): only with both.
        let local_http = answer("http://127.0.0.1:9/in");
        let expect = |allowed: bool, refused: &str| if allowed { "ok" } else { refused }.to_owned();
        assert_eq!(
            (public_http, private_https, local_http),
            (
                expect(http, "https_required"),
                expect(private, "private_target"),
                expect(
                    http && private,
                    if http {
                        "private_target"
                    } else {
                        "https_required"
                    }
                ),
            ),
            "{args:?} {env:?}"
        );
        let warnings = relaxed(server.drain());
        assert_eq!(warnings.len(), 1, "warned once: {:?}", server.seen);
        assert_eq!(warnings[0]["allowHttp"], http.to_string());
        assert_eq!(warnings[0]["allowPrivateTargets"], private.to_string());
    }
}

/// `cargo install --locked --path host/edgehook` copies the built `edgehook` into
/// `~/.cargo/bin`; this copies it into a directory of its own the same way, and runs it
/// elsewhere with nothing from cargo in its environment: the component is inside the binary.
#[test]
fn an_installed_copy_serves_from_any_directory() {
    use std::io::{Read as _, Write as _};
    let bin_dir = temp_dir("install-bin");
    let installed = bin_dir.join("edgehook");
    std::fs::copy(BIN, &installed).expect("copy the binary");
    let cwd = temp_dir("install-cwd");
    let data = temp_dir("install-data");
    let mut command = Command::new(&installed);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .current_dir(&cwd)
        .env_clear()
        .env("PATH", "/usr/bin:/bin");
    let mut server = Proc::spawn(command);
    let addr = server.address();
    let mut stream = std::net::TcpStream::connect(&addr).expect("connect");
    stream.set_read_timeout(Some(DEADLINE)).expect("timeout");
    stream
        .write_all(
            format!("GET /healthz HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        data.join("admin-token").exists(),
        "the data directory given"
    );
    let pid = server.child.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(sent.expect("kill").success());
    server.wait_for("a clean stop", |l| l.contains("\"msg\":\"stopped\""));
    let status = server.child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "{status:?}");
    let left: Vec<_> = std::fs::read_dir(&cwd).expect("cwd").collect();
    assert!(
        left.is_empty(),
        "nothing written to the working directory: {left:?}"
    );
}
