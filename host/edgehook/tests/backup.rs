//! `edgehook backup --to DIR` copies the embedded store while `serve` runs under publish load
//! (the running `serve` makes the copy, asked over its control socket), and `serve
//! --data-dir DIR` on the copy comes up with every subscription and every delivery of the
//! events accepted before the backup began. `edgehook store` reads the copy, and refuses the
//! store a running `serve` has open. A data directory of an earlier build's format stops
//! `serve` with one line.

use crate::common::*;
use edgehook::cli::Remote;
use edgehook_component::storage::keys;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

fn call(rt: &tokio::runtime::Runtime, remote: &Remote, path: &str) -> Value {
    let (status, text) = rt
        .block_on(remote.call("GET", path, None, &[]))
        .expect("call");
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_str(&text).expect("json")
}

#[test]
fn a_backup_taken_under_load_starts_a_server_with_everything_before_it() {
    let dir = temp_dir("backup");
    let rt = rt();
    let recv = receiver(&rt);
    let mut server = Proc::start(&serve_to_loopback("attempt_timeout_ms=1000"), &dir);
    let base = format!("http://{}", server.address());
    let token = std::fs::read_to_string(dir.join("edgehook-data/admin-token")).expect("token");
    let operator = Remote::new(&base, token.trim()).expect("operator");
    let (status, issued) = rt
        .block_on(operator.call("POST", "/internal/v1/clients/acme/keys", None, &[]))
        .expect("key");
    assert_eq!(status, 201, "{issued}");
    let issued: Value = serde_json::from_str(&issued).expect("json");
    let key = issued["data"]["apiKey"].as_str().expect("key").to_owned();
    let subs: Vec<String> = (0..3)
        .map(|i| {
            let url = format!("http://127.0.0.1:{}/s{i}", recv.port());
            let (status, text) = post_subscription(&rt, &base, &key, &url, "load.created");
            assert_eq!(status, 201, "{text}");
            let v: Value = serde_json::from_str(&text).expect("json");
            v["data"]["id"].as_str().expect("id").to_owned()
        })
        .collect();

    // Publish load from another thread while the backup runs.
    let stop = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(AtomicUsize::new(0));
    let load = {
        let (stop, accepted, base, token) =
            (stop.clone(), accepted.clone(), base.clone(), token.clone());
        std::thread::spawn(move || {
            let rt = edgehook_testkit::rt();
            let operator = Remote::new(&base, token.trim()).expect("operator");
            let headers = [
                ("content-type".to_owned(), "application/json".to_owned()),
                ("x-service-event".to_owned(), "load.created".to_owned()),
            ];
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let body = format!(r#"{{"id":"L{n}"}}"#).into_bytes();
                let (status, _) = rt
                    .block_on(operator.call("POST", "/internal/v1/events", Some(body), &headers))
                    .expect("publish");
                assert_eq!(status, 202);
                accepted.fetch_add(1, Ordering::SeqCst);
                n += 1;
            }
        })
    };
    wait_for("30 events accepted", || {
        accepted.load(Ordering::SeqCst) >= 30
    });
    let before = accepted.load(Ordering::SeqCst);
    let out = std::process::Command::new(BIN)
        .args(["backup", "--to", "copy"])
        .current_dir(&dir)
        .output()
        .expect("backup");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("backed up"), "{text}");
    stop.store(true, Ordering::SeqCst);
    load.join().expect("load thread");

    // A second server on the copy: the subscriptions, and every delivery of the events
    // accepted before the backup began (three subscriptions each).
    let mut restored = Proc::start(
        &["serve", "--listen", "127.0.0.1:0", "--data-dir", "copy"],
        &dir,
    );
    let restored_base = format!("http://{}", restored.address());
    let partner = Remote::new(&restored_base, &key).expect("partner");
    let listed = call(&rt, &partner, "/v1/webhooks");
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, subs.iter().map(String::as_str).collect::<Vec<_>>());
    let operator = Remote::new(&restored_base, token.trim()).expect("operator");
    for sub in &subs {
        let mut count = 0;
        let mut path = format!("/internal/v1/subscriptions/{sub}/deliveries?limit=100");
        loop {
            let page = call(&rt, &operator, &path);
            count += page["data"].as_array().expect("data").len();
            match page["nextCursor"].as_str() {
                Some(c) => {
                    path =
                        format!("/internal/v1/subscriptions/{sub}/deliveries?limit=100&cursor={c}")
                }
                None => break,
            }
        }
        assert!(
            count >= before,
            "{sub}: {count} deliveries, {before} events before the backup"
        );
    }
    drop(restored);

    // The copy read for inspection, and the live store refused.
    let store = |args: &[&str]| {
        let out = std::process::Command::new(BIN)
            .arg("store")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("edgehook store");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), text, err)
    };
    let (ok, stats, err) = store(&["stats", "--data-dir", "copy"]);
    assert!(ok, "{err}");
    assert!(
        stats.contains(" keys, ") && stats.contains(" bytes on disk"),
        "{stats}"
    );
    let (ok, listed, err) = store(&[
        "keys",
        "--data-dir",
        "copy",
        "--prefix",
        keys::SUBSCRIPTION_PREFIX,
        "--limit",
        "2",
    ]);
    assert!(ok, "{err}");
    let listed: Vec<&str> = listed.lines().collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let subscription_record = |k: &&str| k.starts_with(keys::SUBSCRIPTION_PREFIX);
    assert!(listed.iter().all(subscription_record), "{listed:?}");
    let (ok, value, err) = store(&["get", "--data-dir", "copy", listed[0]]);
    assert!(ok && !value.trim().is_empty(), "{err}");
    let (ok, _, err) = store(&["get", "--data-dir", "copy", "no:such:key"]);
    assert!(!ok && err.contains("no such key"), "{err}");
    let (ok, _, err) = store(&["stats"]);
    assert!(
        !ok && err.contains("in use by another edgehook process"),
        "{err}"
    );
    drop(server);
}

#[test]
fn serve_on_a_data_directory_of_an_earlier_format_stops_with_one_clear_line() {
    let dir = temp_dir("old-format");
    let store = dir.join("edgehook-data/store");
    std::fs::create_dir_all(&store).expect("dir");
    std::fs::write(store.join("kv.log"), b"\x01\x01\x00\x00\x00k").expect("old log");
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(&dir)
        .output()
        .expect("serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "serve started on an old store: {err}"
    );
    assert!(
        err.contains("kv.log") && err.contains("does not read") && err.contains("--data-dir"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&store)
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, ["kv.log"], "the old store is left as it was");
}
