//! `serve --egress-proxy`: every delivery goes through an HTTP `CONNECT` proxy (the test's
//! own, `edgehook_testkit::proxy`, on loopback), signed as usual; a proxy refusing the
//! tunnel is a failed attempt (class `connection`, the proxy's status in the log line) and
//! nothing goes around it; the proxy's credentials are never printed; a bad value stops the
//! start naming the flag.

use crate::common::*;
use edgehook::cli::Remote;
use edgehook_testkit::proxy::{Connect, ConnectProxy};
use serde_json::Value;
use std::process::Command;

/// Creates a subscription of `url` to `event` with `key`: its id and signing secret.
fn subscribe(
    rt: &tokio::runtime::Runtime,
    base: &str,
    key: &str,
    url: &str,
    event: &str,
) -> (String, String) {
    let (status, text) = post_subscription(rt, base, key, url, event);
    assert_eq!(status, 201, "{text}");
    let data = &serde_json::from_str::<Value>(&text).expect("json")["data"];
    let field = |name: &str| data[name].as_str().expect(name).to_owned();
    (field("id"), field("signingSecret"))
}

#[test]
fn serve_sends_every_delivery_through_the_egress_proxy_and_never_around_it() {
    let dir = temp_dir("egress");
    let rt = rt();
    let proxy = rt.block_on(ConnectProxy::start());
    let (first, second) = (receiver(&rt), receiver(&rt));
    let (first_port, second_port) = (first.port(), second.port());
    let proxy_url = format!("http://edgehook:hunter2@127.0.0.1:{}", proxy.port);
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--allow-http",
        "--allow-private-targets",
        "--metrics-listen",
        "off",
        "--egress-proxy",
        &proxy_url,
    ];
    let mut server = Proc::start(&args, &dir);
    let base = format!("http://{}", server.address());
    let listening = server.wait_for("listening", |l| l.contains("\"msg\":\"listening\""));
    assert!(
        listening.contains(&format!("\"egressProxy\":\"{}\"", proxy.url())),
        "{listening}"
    );
    let token = std::fs::read_to_string(dir.join("edgehook-data/admin-token")).expect("token");
    let operator = Remote::new(&base, &token).expect("client");
    let (status, text) = rt
        .block_on(operator.call("POST", "/internal/v1/clients/acme/keys", None, &[]))
        .expect("issue a key");
    assert_eq!(status, 201, "{text}");
    let key = serde_json::from_str::<Value>(&text).expect("json")["data"]["apiKey"]
        .as_str()
        .expect("apiKey")
        .to_owned();

    // Through the proxy: the delivery arrives signed as usual, and the proxy was asked for
    // the receiver's address, with the credentials from the URL.
    let url = format!("http://127.0.0.1:{first_port}/hook");
    let (_, secret) = subscribe(&rt, &base, &key, &url, "load.created");
    let load = br#"{"id":"L1","status":"ASSIGNED"}"#;
    publish_event(&rt, &operator, "load.created", load);
    let delivery = wait_for("the delivery", || first.received().into_iter().next());
    assert_eq!(delivery.header("x-service-event"), Some("load.created"));
    assert_eq!(&delivery.body[..], load, "the load's bytes as published");
    assert!(
        edgehook_testkit::signature::verifies(
            &secret,
            delivery.header("x-service-timestamp"),
            delivery.header("x-service-signature"),
            &delivery.body
        ),
        "signed as usual"
    );
    assert_eq!(
        proxy.connects(),
        [Connect {
            authority: format!("127.0.0.1:{first_port}"),
            authorization: Some("Basic ZWRnZWhvb2s6aHVudGVyMg==".to_owned()),
        }]
    );

    // The proxy refuses the next tunnel: a failed attempt, the proxy's status in the log
    // line, and the receiver (reachable directly all along) gets nothing.
    proxy.answer_with(403);
    let url = format!("http://127.0.0.1:{second_port}/hook");
    subscribe(&rt, &base, &key, &url, "load.updated");
    publish_event(&rt, &operator, "load.updated", br#"{"id":"L2"}"#);
    let line = server.wait_for("the refused attempt", |l| {
        l.contains("\"msg\":\"delivery attempt\"") && l.contains(&format!(":{second_port}\""))
    });
    assert!(line.contains("\"error\":\"ConnectionRefused\""), "{line}");
    assert!(
        line.contains("refused CONNECT") && line.contains(": 403 "),
        "{line}"
    );
    let delivery = serde_json::from_str::<Value>(&line).expect("json")["deliveryId"]
        .as_str()
        .expect("deliveryId")
        .to_owned();
    let attempt = wait_for("the attempt's record", || {
        let path = format!("/internal/v1/deliveries/{delivery}");
        let (_, text) = rt
            .block_on(operator.call("GET", &path, None, &[]))
            .expect("delivery");
        let record: Value = serde_json::from_str(&text).expect("json");
        record["data"]["attempts"].get(0).cloned().ok_or(text)
    });
    assert_eq!(attempt["errorClass"], "connection", "{attempt}");
    assert_eq!(attempt["error"], "connection refused", "{attempt}");
    assert_eq!(second.hits(), 0, "nothing went around the proxy");
    assert_eq!(proxy.connects().len(), 2, "{:?}", proxy.connects());
    let out = server.drain().join("\n");
    assert!(!out.contains("hunter2"), "the password was printed:\n{out}");
}

#[test]
fn a_bad_egress_proxy_stops_the_start_naming_the_flag_and_not_the_value() {
    let dir = temp_dir("egress-bad");
    for (flag, env) in [
        (Some("https://edgehook:hunter2@proxy.internal:3128"), None),
        (Some("http://proxy.internal"), None),
        (None, Some("socks5://edgehook:hunter2@proxy.internal:1080")),
    ] {
        let mut command = Command::new(BIN);
        command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .current_dir(&dir);
        if let Some(value) = flag {
            command.args(["--egress-proxy", value]);
        }
        if let Some(value) = env {
            command.env("EDGEHOOK_EGRESS_PROXY", value);
        }
        let out = command.output().expect("run edgehook");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag:?} {env:?}: {err}");
        assert!(
            err.contains("--egress-proxy (or EDGEHOOK_EGRESS_PROXY)")
                && err.contains("expected http://HOST:PORT"),
            "{err}"
        );
        assert!(!err.contains("hunter2"), "{err}");
    }
    let left: Vec<_> = std::fs::read_dir(&dir).expect("dir").collect();
    assert!(left.is_empty(), "nothing was started: {left:?}");
}
