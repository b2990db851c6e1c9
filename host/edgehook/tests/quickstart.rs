//! README's quickstart, run as README shows it: the server command and the lines to paste are
//! read out of README.md's "Quickstart on one machine" section at test time, so README and
//! the CLI cannot drift apart. The server runs on a free port (the pasted lines reach it
//! through `EDGEHOOK_SERVER`, as a user's reach the default address), and the receiver's
//! address is moved to a free port; everything else is run by `sh` as written.

use serde_json::Value;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::*;

/// README.md, as it is when the test runs.
fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
        .expect("README.md")
}

/// The ```sh blocks of README's quickstart section, in order.
fn quickstart_blocks(readme: &str) -> Vec<Vec<String>> {
    let section = readme
        .split("\n### Quickstart on one machine\n")
        .nth(1)
        .expect("README has a \"### Quickstart on one machine\" section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut blocks = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```sh" {
            let block = lines
                .by_ref()
                .take_while(|l| l.trim() != "```")
                .map(str::to_owned)
                .collect();
            blocks.push(block);
        }
    }
    blocks
}

/// How README runs the binary: `cargo run -p edgehook`, whose default binary is the one
/// under test.
const CARGO_RUN: &str = "cargo run -p edgehook --";

/// The receiver address README's lines use.
const RECEIVER: &str = "127.0.0.1:9000";

/// Runs `edgehook` as `sh` runs it, in a process group of its own, so the background
/// receiver README starts goes with it.
struct Shell(Proc);

impl Drop for Shell {
    fn drop(&mut self) {
        // The whole group: `sh`, and the receiver it left running in the background.
        let group = format!("-{}", self.0.child.id());
        let _ = Command::new("kill")
            .args(["-TERM", "--", &group])
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn the_readme_quickstart_works_as_written() {
    let readme = readme();
    let blocks = quickstart_blocks(&readme);
    assert_eq!(blocks.len(), 2, "the server's block and the block to paste");

    // The first terminal: the server, with README's flags, on a free port.
    let [server_line] = blocks[0].as_slice() else {
        panic!("one server command: {:?}", blocks[0]);
    };
    let flags = server_line
        .strip_prefix(CARGO_RUN)
        .unwrap_or_else(|| panic!("the server runs with `{CARGO_RUN} ...`: {server_line}"));
    assert!(
        include_str!("../Cargo.toml").contains("default-run = \"edgehook\""),
        "`cargo run -p edgehook` runs the binary under test"
    );
    let mut args: Vec<&str> = flags.split_whitespace().collect();
    assert_eq!(args.first(), Some(&"serve"), "{server_line}");
    args.extend(["--listen", "127.0.0.1:0"]);
    let dir = temp_dir("quickstart");
    let mut server = Proc::start(&args, &dir);
    let base = format!("http://{}", server.address());
    assert!(
        dir.join("edgehook-data/admin-token").exists(),
        "the admin token file is created where the operator commands look for it"
    );

    // The second terminal: README's lines in one shell, with `E` the binary under test and
    // the receiver on a free port.
    let block = &blocks[1];
    let e_line = block.first().expect("lines to paste");
    assert_eq!(
        e_line,
        &format!(
            "E=\"{}\"",
            CARGO_RUN.replacen("cargo run", "cargo run -q", 1)
        ),
        "the block sets E first"
    );
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        l.local_addr().expect("addr").port()
    };
    let receiver = format!("127.0.0.1:{port}");
    let text = block[1..].join("\n");
    assert_eq!(
        text.matches(RECEIVER).count(),
        2,
        "the receiver's address, in the subscription and in `listen`: {text}"
    );
    let script = format!(
        "set -eu\ntrap 'echo \"quickstart-exit $?\"' EXIT\nE='{BIN}'\n{}\n\
         printf 'quickstart-vars %s %s\\n' \"$KEY\" \"$SECRET\"\n",
        text.replace(RECEIVER, &receiver)
    );
    let mut sh = Command::new("sh");
    sh.args(["-c", &script])
        .current_dir(&dir)
        .env("EDGEHOOK_SERVER", &base)
        .process_group(0);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        if name.starts_with("EDGEHOOK_") && name != "EDGEHOOK_SERVER" {
            sh.env_remove(name);
        }
    }
    let mut shell = Shell(Proc::spawn(sh));
    let out = &mut shell.0;
    // Every line ran (a line that fails stops the script at once, and the test with it).
    let exit = out.wait_for("the script's end", |l| l.starts_with("quickstart-exit "));
    assert_eq!(exit, "quickstart-exit 0", "a line failed: {:#?}", out.seen);
    let line = out.wait_for("a verified delivery", |l| {
        l.starts_with("--> load.created dlv_") && l.ends_with(" verified")
    });
    let dlv_id = line
        .split_whitespace()
        .find(|w| w.starts_with("dlv_"))
        .expect("the delivery id")
        .to_owned();
    let load = block
        .iter()
        .find_map(|l| l.strip_prefix("echo '")?.split_once("' | ").map(|(b, _)| b))
        .expect("the published load");
    out.wait_for("the body, byte for byte", |l| l == load);
    let vars = out.wait_for("KEY and SECRET", |l| l.starts_with("quickstart-vars "));
    let (key, secret) = vars["quickstart-vars ".len()..]
        .split_once(' ')
        .map(|(k, s)| (k.to_owned(), s.to_owned()))
        .expect("KEY and SECRET");
    assert!(key.starts_with("ehk_"), "KEY holds just the key: {key}");
    assert!(
        secret.starts_with("whsec_"),
        "SECRET holds just the secret: {secret}"
    );
    assert!(out.child.wait().expect("sh").success());
    assert!(
        out.seen
            .iter()
            .any(|l| l.contains("in the background, pid")),
        "the receiver says how to stop it: {:?}",
        out.seen
    );

    // The server logged the attempt, never the key or the signing secret.
    server.wait_for("the delivery attempt log line", |l| {
        l.contains("delivery attempt") && l.contains("\"status\":\"200\"")
    });
    assert!(
        server
            .seen
            .iter()
            .all(|l| !l.contains(&key) && !l.contains(&secret))
    );

    // README's other commands: `delivery show`, `subscription`, `delivery replay`.
    let (ok, text) = run_cli(&dir, &base, &["delivery", "show", &dlv_id]);
    assert!(ok, "{text}");
    let shown: Value = serde_json::from_str(&text).expect("json");
    let shown = &shown["data"];
    assert_eq!(shown["id"], dlv_id.as_str(), "{text}");
    assert_eq!(shown["eventType"], "load.created", "{text}");
    assert_eq!(shown["status"], "succeeded", "{text}");
    assert_eq!(shown["replays"], 0, "{text}");
    let attempts = shown["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1, "{text}");
    assert_eq!(attempts[0]["statusCode"], 200, "{text}");
    let sub_id = shown["subscriptionId"].as_str().expect("sub id").to_owned();
    let (ok, text) = run_cli(&dir, &base, &["subscription", &sub_id]);
    assert!(ok && text.contains("\"succeeded\""), "{text}");
    assert!(
        text.contains(&dlv_id),
        "the history lists the delivery: {text}"
    );

    // The replay reaches the same receiver: same id and body, freshly signed (it verifies,
    // and the receiver says it has processed that id already).
    let from = out.drain().len();
    let (ok, text) = run_cli(&dir, &base, &["delivery", "replay", &dlv_id]);
    assert!(ok, "{text}");
    let replayed: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(replayed["data"]["replays"], 1, "{text}");
    let (at, again) = out.wait_for_after(from, "the replayed delivery", |l| {
        l.starts_with("--> load.created dlv_")
    });
    assert_eq!(
        again,
        format!("--> load.created {dlv_id} duplicate (already processed)")
    );
    out.wait_for_after(at + 1, "the replayed body", |_| true);
    assert_eq!(out.seen[at + 1], load, "the same body");
    let shown = wait_for("the replay's attempt", || {
        let (ok, text) = run_cli(&dir, &base, &["delivery", "show", &dlv_id]);
        assert!(ok, "{text}");
        let shown: Value = serde_json::from_str(&text).expect("json");
        match shown["data"]["attempts"].as_array().map(Vec::len) {
            Some(2) => Ok(shown),
            _ => Err(text),
        }
    });
    let replayed = &shown["data"]["attempts"][1];
    assert_eq!(replayed["run"], 1, "{shown}");
    assert_eq!(replayed["statusCode"], 200, "{shown}");
}

/// The operator commands beyond the quickstart: `keys revoke`, and errors that say what
/// went wrong.
#[test]
fn keys_are_revoked_at_once_and_errors_say_why() {
    let dir = temp_dir("quickstart-keys");
    let mut server = Proc::start(&["serve", "--listen", "127.0.0.1:0"], &dir);
    let base = format!("http://{}", server.address());
    let (ok, text) = run_cli(&dir, &base, &["keys", "issue", "acme"]);
    assert!(ok, "{text}");
    let issued: Value = serde_json::from_str(&text).expect("json");
    let key = issued["data"]["apiKey"].as_str().expect("apiKey");
    let key_id = issued["data"]["id"].as_str().expect("key id");
    // `subscribe` without --quiet prints the whole answer, secret included.
    let url = "https://hooks.example.com/in";
    let args = [
        "subscribe",
        "--key",
        key,
        "--event",
        "load.created",
        "--url",
        url,
    ];
    let (ok, text) = run_cli(&dir, &base, &args);
    assert!(ok, "{text}");
    let created: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(created["data"]["url"], url, "{text}");
    assert!(
        created["data"]["signingSecret"]
            .as_str()
            .is_some_and(|s| s.starts_with("whsec_")),
        "{text}"
    );

    let (ok, text) = run_cli(&dir, &base, &["keys", "revoke", "acme", key_id]);
    assert!(ok && text.contains("\"revoked\""), "{text}");
    let (ok, text) = run_cli(&dir, &base, &args);
    assert!(
        !ok && text.contains("401"),
        "a revoked key is refused: {text}"
    );
    let (ok, text) = run_cli(&dir, &base, &["keys", "revoke", "acme", key_id]);
    assert!(!ok && text.contains("404"), "it is revoked already: {text}");

    // Scopes, the list, ingest keys.
    let (ok, text) = run_cli(
        &dir,
        &base,
        &["keys", "issue", "acme", "--scope", "partner_read"],
    );
    assert!(ok && text.contains("\"partner_read\""), "{text}");
    let (ok, text) = run_cli(&dir, &base, &["keys", "list", "acme"]);
    assert!(ok, "{text}");
    let listed: Value = serde_json::from_str(&text).expect("json");
    let scopes: Vec<&str> = listed["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|k| k["scope"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(scopes, ["partner", "partner_read"], "{text}");
    assert_eq!(listed["data"][0]["status"], "revoked", "{text}");
    assert!(!text.contains("ehk_"), "never the keys: {text}");
    let (ok, ingest) = run_cli(&dir, &base, &["keys", "issue", "--ingest", "--quiet"]);
    assert!(ok && ingest.trim().starts_with("ehk_"), "{ingest}");
    let (ok, text) = run_cli(&dir, &base, &["keys", "list", "--ingest"]);
    assert!(ok, "{text}");
    let listed: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(listed["data"][0]["scope"], "ingest", "{text}");
    let ingest_id = listed["data"][0]["id"].as_str().expect("id").to_owned();
    let (ok, text) = run_cli(&dir, &base, &["keys", "revoke", "--ingest", &ingest_id]);
    assert!(ok && text.contains("\"revoked\""), "{text}");
    let (ok, text) = run_cli(&dir, &base, &["keys", "issue", "acme", "--scope", "admin"]);
    assert!(!ok, "clap refuses a scope it does not know: {text}");
    let (ok, text) = run_cli(&dir, &base, &["keys", "issue", "bad client!"]);
    assert!(
        !ok && text.contains("422"),
        "errors say what went wrong: {text}"
    );
    // With --quiet, a refusal goes to stderr: `KEY=$(...)` never captures it.
    let out = Command::new(BIN)
        .args(["keys", "issue", "bad client!", "--quiet", "--server", &base])
        .current_dir(&dir)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("422"));
    let (ok, text) = run_cli(&dir, "http://127.0.0.1:1", &["keys", "issue", "acme"]);
    assert!(
        !ok && text.contains("is `edgehook serve` running?"),
        "{text}"
    );
    drop(server);
}

/// Disable and enable from the command line: `subscription disable ID --reason R` (its owner sees
/// the reason), `subscription enable ID`, and a bad reason refused with the server's 422.
#[test]
fn a_subscription_is_disabled_with_a_reason_and_enabled_again_from_the_cli() {
    let dir = temp_dir("quickstart-enable");
    let mut server = Proc::start(&["serve", "--listen", "127.0.0.1:0"], &dir);
    let base = format!("http://{}", server.address());
    let (ok, key) = run_cli(&dir, &base, &["keys", "issue", "acme", "--quiet"]);
    assert!(ok, "{key}");
    let key = key.trim().to_owned();
    let args = [
        "subscribe",
        "--key",
        &key,
        "--event",
        "load.created",
        "--url",
        "https://hooks.example.com/in",
    ];
    let (ok, text) = run_cli(&dir, &base, &args);
    assert!(ok, "{text}");
    let created: Value = serde_json::from_str(&text).expect("json");
    let id = created["data"]["id"].as_str().expect("id").to_owned();

    let disable = ["subscription", "disable", &id, "--reason", "maintenance"];
    let (ok, text) = run_cli(&dir, &base, &disable);
    assert!(ok, "{text}");
    let shown: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(shown["data"]["status"], "disabled", "{text}");
    assert_eq!(shown["data"]["disabledReason"], "maintenance", "{text}");
    let (ok, text) = run_cli(&dir, &base, &["subscription", &id]);
    assert!(ok && text.contains("\"maintenance\""), "{text}");

    let (ok, text) = run_cli(&dir, &base, &["subscription", "enable", &id]);
    assert!(ok, "{text}");
    let shown: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(shown["data"]["status"], "active", "{text}");
    assert_eq!(shown["data"]["consecutiveFailures"], 0, "{text}");

    let bad = ["subscription", "disable", &id, "--reason", "Not a code"];
    let (ok, text) = run_cli(&dir, &base, &bad);
    assert!(
        !ok && text.contains("422") && text.contains("invalid_reason"),
        "{text}"
    );
    let (ok, text) = run_cli(&dir, &base, &["subscription", "disable", &id]);
    assert!(ok && text.contains("\"operator\""), "{text}");
    drop(server);
}

/// Replays from the command line: events published while a subscription is disabled
/// are skipped; after an enable, `edgehook replay --subscription ID --since 1h` starts a
/// replay job, follows it with a progress bar on stderr to its end and prints the job; the
/// receiver gets each skipped delivery once.
#[test]
fn a_replay_by_range_runs_from_the_cli_with_its_progress() {
    let dir = temp_dir("quickstart-replay");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let recv = receiver(&rt);
    let mut server = Proc::start(&serve_to_loopback("attempt_timeout_ms=1000"), &dir);
    let base = format!("http://{}", server.address());
    let (ok, key) = run_cli(&dir, &base, &["keys", "issue", "acme", "--quiet"]);
    assert!(ok, "{key}");
    let url = format!("http://127.0.0.1:{}/in", recv.port());
    let (status, text) = post_subscription(&rt, &base, key.trim(), &url, "load.created");
    assert_eq!(status, 201, "{text}");
    let created: Value = serde_json::from_str(&text).expect("json");
    let id = created["data"]["id"].as_str().expect("id").to_owned();
    let (ok, text) = run_cli(&dir, &base, &["subscription", "disable", &id]);
    assert!(ok, "{text}");
    for n in 0..3 {
        let load = format!(r#"{{"id":"L-{n}"}}"#);
        let out = Command::new(BIN)
            .args(["publish", "--type", "load.created", "--server", &base])
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write as _;
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(load.as_bytes())?;
                child.wait_with_output()
            })
            .expect("publish");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let (ok, text) = run_cli(&dir, &base, &["subscription", "enable", &id]);
    assert!(ok, "{text}");
    let args = ["replay", "--subscription", &id, "--since", "1h"];
    let (ok, text) = run_cli(&dir, &base, &args);
    assert!(ok, "{text}");
    assert!(
        text.contains("3/3 replayed, 0 failed"),
        "the progress bar: {text}"
    );
    let json = &text[text.find('{').expect("the job")..];
    // stdout (the job) comes first, then stderr (the progress bar).
    let job: Value = serde_json::Deserializer::from_str(json)
        .into_iter()
        .next()
        .expect("the job")
        .expect("json");
    assert_eq!(
        (&job["data"]["state"], &job["data"]["total"]),
        (&serde_json::json!("done"), &serde_json::json!(3))
    );
    wait_for("the replayed deliveries", || per_delivery(&recv).len() >= 3);
    assert!(per_delivery(&recv).values().all(|n| *n == 1));
    let (ok, text) = run_cli(
        &dir,
        &base,
        &["replay", "--subscription", &id, "--since", "soon"],
    );
    assert!(!ok && text.contains("is not a time"), "{text}");
    drop(server);
}
