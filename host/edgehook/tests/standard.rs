//! Real deliveries of `serve` in Standard Webhooks mode, verified by the
//! official `standardwebhooks` libraries, from npm and from PyPI (pinned in
//! docs/verify/standard/; `.ci/run` installs both). Also during a rotation's overlap, when
//! `webhook-signature` lists two signatures: a receiver with either secret verifies. Without
//! the packages the test is skipped, and fails under CI.

use crate::common::*;
use edgehook::cli::Remote;
use edgehook_testkit::receiver::Received;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn standard_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/verify/standard")
}

/// The two verifiers' commands, if their packages are installed.
fn verifiers() -> Option<[(String, Vec<String>); 2]> {
    let dir = standard_dir();
    let python = dir.join(".venv/bin/python");
    let installed = dir.join("node_modules/standardwebhooks").is_dir() && python.is_file();
    if !installed {
        assert!(
            std::env::var_os("CI").is_none(),
            "docs/verify/standard's packages are not installed (.ci/run installs them)"
        );
        eprintln!("SKIPPED: the official Standard Webhooks libraries are not installed");
        return None;
    }
    let s = |p: PathBuf| p.to_string_lossy().into_owned();
    Some([
        ("node".to_owned(), vec![s(dir.join("verify.mjs"))]),
        (s(python), vec![s(dir.join("verify.py"))]),
    ])
}

#[test]
fn the_official_standard_webhooks_libraries_verify_real_deliveries() {
    let Some(verifiers) = verifiers() else {
        return;
    };
    let dir = temp_dir("standard");
    let rt = rt();
    let recv = receiver(&rt);
    let mut server = Proc::start(&serve_to_loopback("attempt_timeout_ms=2000"), &dir);
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let partner = Remote::new(&base, &key).expect("partner");
    let json_headers = [("content-type".to_owned(), "application/json".to_owned())];
    let body = json!({
        "url": recv.url("/hooks"),
        "eventTypes": ["load.created"],
        "signatureScheme": "standard",
    });
    let created = create_subscription(&rt, &base, &key, &body);
    let id = created["id"].as_str().expect("id").to_owned();
    let old = created["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    let publish = |n: usize| {
        // Raw bytes with spacing and an escape: verified as sent, never re-serialized.
        let load = format!("{{ \"id\" : \"L{n}\", \"note\": \"caf\\u00e9\" }}");
        publish_event(&rt, &operator, "load.created", load.as_bytes());
    };
    // Each delivery as the verifiers read it: its headers and its body.
    let captured = |n: usize| -> Vec<Value> {
        wait_for("the deliveries", || recv.hits() >= n);
        let as_json = |r: &Received| {
            let headers: serde_json::Map<String, Value> = r
                .headers
                .iter()
                .map(|(n, v)| (n.as_str().to_owned(), json!(v.to_str().unwrap_or(""))))
                .collect();
            json!({"headers": headers, "body": r.text()})
        };
        recv.received().iter().map(as_json).collect()
    };
    for n in 0..3 {
        publish(n);
    }
    let run = |secret: &str, deliveries: &[Value]| -> (bool, String) {
        let file = dir.join(format!("captured-{}.json", deliveries.len()));
        std::fs::write(&file, serde_json::to_vec(deliveries).expect("json")).expect("write");
        let mut out = String::new();
        let mut all = true;
        for (program, args) in &verifiers {
            let o = std::process::Command::new(program)
                .args(args)
                .arg(secret)
                .arg(&file)
                .current_dir(standard_dir())
                .output()
                .expect("run a verifier");
            all &= o.status.success();
            out.push_str(&String::from_utf8_lossy(&o.stdout));
            out.push_str(&String::from_utf8_lossy(&o.stderr));
        }
        (all, out)
    };
    let before = captured(3);
    let (ok, out) = run(&old, &before);
    assert!(ok, "{out}");
    assert_eq!(out.matches("verified dlv_").count(), 6, "{out}");

    // Rotated with an overlap: webhook-signature lists both; either secret verifies.
    let path = format!("/v1/webhooks/{id}/rotate-secret");
    let (status, text) = rt
        .block_on(partner.call(
            "POST",
            &path,
            Some(b"{\"overlapSeconds\":600}".to_vec()),
            &json_headers,
        ))
        .expect("rotate");
    assert_eq!(status, 200, "{text}");
    let new = serde_json::from_str::<Value>(&text).expect("json")["data"]["signingSecret"]
        .as_str()
        .expect("secret")
        .to_owned();
    publish(3);
    let during = captured(4).split_off(3);
    assert_eq!(
        during[0]["headers"]["webhook-signature"]
            .as_str()
            .map(|s| s.split(' ').count()),
        Some(2)
    );
    for secret in [&old, &new] {
        let (ok, out) = run(secret, &during);
        assert!(ok, "{out}");
    }
    // A wrong secret fails in both libraries (the check can fail).
    let (ok, out) = run(
        "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        &during,
    );
    assert!(!ok && out.matches("REJECTED").count() == 2, "{out}");
    drop(server);
}
