//! A leaked secret replaced from the command line: `edgehook subscription rotate-secret ID
//! --overlap-seconds 0` (the operator's, with the admin token of the data directory) against
//! a running `serve`; the next delivery is signed with the new secret only.

use crate::common::*;
use serde_json::{Value, json};
use std::process::{Command, Stdio};

#[test]
fn the_operator_rotates_a_leaked_secret_from_the_cli() {
    let rt = rt();
    let receiver = receiver(&rt);
    let dir = temp_dir("rotate-cli");
    let mut server = Proc::start(&serve_to_loopback("attempt_timeout_ms=2000"), &dir);
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let url = receiver.url("/hook");
    let sub = create_subscription(
        &rt,
        &base,
        &key,
        &json!({"url": url, "eventTypes": ["load.created"]}),
    );
    let (id, leaked) = (
        sub["id"].as_str().expect("id"),
        sub["signingSecret"].as_str().expect("secret"),
    );
    let cli = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(["subscription", "rotate-secret"])
            .args(args)
            .args(["--server", &base])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .expect("run edgehook");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status.code(),
            text,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, _, err) = cli(&[id, "--overlap-seconds", "604801"]);
    assert_eq!(code, Some(2), "a usage error: {err}");
    let (code, text, err) = cli(&[id, "--overlap-seconds", "0"]);
    assert_eq!(code, Some(0), "{text}{err}");
    let answer: Value = serde_json::from_str(&text).expect("json");
    let new = answer["data"]["signingSecret"]
        .as_str()
        .expect("the new secret");
    assert_ne!(new, leaked);
    assert_eq!(answer["data"]["previousSecretExpiresAt"], Value::Null);

    let (status, text) = rt
        .block_on(operator.call(
            "POST",
            "/internal/v1/events",
            Some(br#"{"id":"L-1"}"#.to_vec()),
            &[
                ("content-type".into(), "application/json".into()),
                ("x-service-event".into(), "load.created".into()),
            ],
        ))
        .expect("publish");
    assert_eq!(status, 202, "{text}");
    let got = wait_for("the delivery", || receiver.received().into_iter().next());
    let header = |name: &str| got.header(name).map(str::to_owned);
    let (ts, sig) = (header("x-service-timestamp"), header("x-service-signature"));
    let verifies = |secret: &str| {
        edgehook_testkit::signature::verifies(secret, ts.as_deref(), sig.as_deref(), &got.body)
    };
    assert!(verifies(new), "the new secret signs");
    assert!(!verifies(leaked), "the leaked one signs no more");
    server.kill();
}
