//! `serve`'s Prometheus endpoint, scraped while events are published, parsed
//! with a Prometheus text parser (`prometheus-parse`, not ours), and checked against what
//! the receivers saw: attempts by status class, deliveries by final outcome, first-attempt
//! latencies, API requests by route, store operations, and the disabled-subscription gauge.

use crate::common::*;
use edgehook::cli::Remote;
use prometheus_parse::{Sample, Scrape, Value};
use serde_json::Value as Json;

/// Events published in the test.
const EVENTS: usize = 40;

/// A loopback receiver: `/ok` answers 200, anything else 500.
fn receiver_ok_and_failing(rt: &tokio::runtime::Runtime) -> Receiver {
    let receiver = Receiver::builder().answer_by(|request, _| match request.path.as_str() {
        "/ok" => Answer::status(200).body("-"),
        _ => Answer::status(500).body("-"),
    });
    rt.block_on(receiver.start())
}

fn scrape(rt: &tokio::runtime::Runtime, url: &str) -> Scrape {
    let client = edgehook_testkit::http::HttpClient::new();
    let (status, text) = rt.block_on(client.call("GET", url)).expect("scrape");
    assert_eq!(status, 200, "{text}");
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("a valid exposition")
}

/// The value of the sample `name` whose labels include `labels` (a histogram: its count).
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<&Sample> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "{name} {labels:?}: {} samples",
        matching.len()
    );
    match &matching[0].value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        Value::Histogram(buckets) => buckets
            .iter()
            .find(|b| b.less_than.is_infinite())
            .map(|b| b.count)
            .expect("+Inf bucket"),
        Value::Summary(_) => panic!("{name} is a summary"),
    }
}

#[test]
fn metrics_scraped_under_load_add_up_to_what_the_receivers_saw() {
    let dir = temp_dir("metrics");
    let rt = rt();
    let recv = receiver_ok_and_failing(&rt);
    let port = recv.port();
    let metrics_port = edgehook_testkit::free_port();
    let metrics_listen = format!("127.0.0.1:{metrics_port}");
    let mut server = Proc::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--allow-http",
            "--allow-private-targets",
            "--metrics-listen",
            &metrics_listen,
            // Fast retries, and no disabling: every failing delivery makes all three attempts.
            "--set",
            "retry_delays_ms=1000,1000",
            "--set",
            "disable_after_failures=1000",
        ],
        &dir,
    );
    let base = format!("http://{}", server.address());
    let metrics_url = format!("http://{metrics_listen}/metrics");
    let token = std::fs::read_to_string(dir.join("edgehook-data/admin-token")).expect("token");
    let operator = Remote::new(&base, token.trim()).expect("operator");
    let (status, issued) = rt
        .block_on(operator.call("POST", "/internal/v1/clients/acme/keys", None, &[]))
        .expect("key");
    assert_eq!(status, 201, "{issued}");
    let issued: Json = serde_json::from_str(&issued).expect("json");
    let key = issued["data"]["apiKey"].as_str().expect("key").to_owned();
    let create = |path: &str, event: &str| -> String {
        let url = format!("http://127.0.0.1:{port}{path}");
        let (status, text) = post_subscription(&rt, &base, &key, &url, event);
        assert_eq!(status, 201, "{text}");
        let v: Json = serde_json::from_str(&text).expect("json");
        v["data"]["id"].as_str().expect("id").to_owned()
    };
    create("/ok", "load.created");
    create("/fail", "load.created");
    // One disabled by the operator, one deleted by its owner (in the operator's list as
    // deleted, and not counted): the gauge says 1.
    let disabled = create("/never", "load.updated");
    let deleted = create("/gone", "load.updated");
    let path = format!("/internal/v1/subscriptions/{disabled}/disable");
    let (status, text) = rt
        .block_on(operator.call("POST", &path, None, &[]))
        .expect("disable");
    assert_eq!(status, 200, "{text}");
    let partner = Remote::new(&base, &key).expect("partner");
    let path = format!("/v1/webhooks/{deleted}");
    let (status, text) = rt
        .block_on(partner.call("DELETE", &path, None, &[]))
        .expect("delete");
    assert_eq!(status, 200, "{text}");

    // Publish from another thread; scrape (and parse) while it runs.
    let publisher = {
        let (base, token) = (base.clone(), token.clone());
        std::thread::spawn(move || {
            let rt = edgehook_testkit::rt();
            let operator = Remote::new(&base, token.trim()).expect("operator");
            let headers = [
                ("content-type".to_owned(), "application/json".to_owned()),
                ("x-service-event".to_owned(), "load.created".to_owned()),
            ];
            for n in 0..EVENTS {
                let body = format!(r#"{{"id":"L{n}"}}"#).into_bytes();
                let (status, text) = rt
                    .block_on(operator.call("POST", "/internal/v1/events", Some(body), &headers))
                    .expect("publish");
                assert_eq!(status, 202, "{text}");
            }
        })
    };
    let mut scrapes = 0;
    while !publisher.is_finished() {
        scrape(&rt, &metrics_url);
        scrapes += 1;
    }
    publisher.join().expect("publisher");
    assert!(scrapes > 0);

    // Every failing delivery ends after its third attempt, about 2 s after its event.
    let last = wait_for("every failed delivery", || {
        let now = scrape(&rt, &metrics_url);
        let failed = value(&now, "edgehook_deliveries_total", &[("outcome", "failed")]);
        if failed as usize == EVENTS {
            Ok(now)
        } else {
            Err(format!("{failed} of {EVENTS} failed deliveries"))
        }
    });
    let (ok, fail) = (
        recv.received_on("/ok").len(),
        recv.received_on("/fail").len(),
    );
    assert_eq!(
        (ok, fail, recv.hits()),
        (EVENTS, 3 * EVENTS, 4 * EVENTS),
        "the receivers"
    );
    let attempts = |class| {
        value(
            &last,
            "edgehook_delivery_attempts_total",
            &[("class", class)],
        )
    };
    assert_eq!(attempts("2xx") as usize, ok);
    assert_eq!(attempts("5xx") as usize, fail);
    for class in ["3xx", "4xx", "timeout", "error", "refused"] {
        assert_eq!(attempts(class), 0.0, "{class}");
    }
    let outcome = |o| value(&last, "edgehook_deliveries_total", &[("outcome", o)]);
    assert_eq!(outcome("succeeded") as usize, EVENTS);
    assert_eq!(outcome("cancelled"), 0.0);
    assert_eq!(
        value(&last, "edgehook_delivery_attempt_duration_seconds", &[]) as usize,
        ok + fail
    );
    // One first attempt per delivery: two deliveries per event.
    assert_eq!(
        value(&last, "edgehook_event_to_first_attempt_seconds", &[]) as usize,
        2 * EVENTS
    );
    let events = [
        ("route", "/internal/v1/events"),
        ("method", "POST"),
        ("status", "202"),
    ];
    assert_eq!(
        value(&last, "edgehook_http_requests_total", &events) as usize,
        EVENTS
    );
    let creates = [
        ("route", "/v1/webhooks"),
        ("method", "POST"),
        ("status", "201"),
    ];
    assert_eq!(value(&last, "edgehook_http_requests_total", &creates), 4.0);
    let deletes = [("route", "/v1/webhooks/:id"), ("method", "DELETE")];
    assert_eq!(value(&last, "edgehook_http_requests_total", &deletes), 1.0);
    assert!(
        value(
            &last,
            "edgehook_store_operation_duration_seconds",
            &[("op", "compare_and_swap")]
        ) > 0.0
    );
    assert_eq!(
        value(&last, "edgehook_store_errors_total", &[("op", "get")]),
        0.0
    );
    assert_eq!(value(&last, "edgehook_disabled_subscriptions", &[]), 1.0);
    assert!(value(&last, "edgehook_ticks_total", &[]) > 0.0);
    assert_eq!(value(&last, "edgehook_replay_jobs_running", &[]), 0.0);
    assert_eq!(
        value(&last, "edgehook_metrics_events_unreadable_total", &[]),
        0.0
    );
    // Prometheus's own linter takes the exposition as it is.
    if std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok()
    {
        lint(&rt, &metrics_url);
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "promtool is not installed (.ci/run installs it)"
        );
        eprintln!("SKIPPED: promtool check metrics (promtool is not installed)");
    }
    // The component's metrics events were taken off its log, not printed in it.
    assert!(
        !server
            .drain()
            .iter()
            .any(|l| l.contains("\"type\":\"attempts\"")),
        "metrics events in serve's output"
    );
    drop(server);
}

/// `promtool check metrics` on a scrape: no complaint.
fn lint(rt: &tokio::runtime::Runtime, url: &str) {
    use std::io::Write as _;
    let client = edgehook_testkit::http::HttpClient::new();
    let (_, text) = rt.block_on(client.call("GET", url)).expect("scrape");
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_metrics_endpoint_is_off_when_told_and_refuses_a_taken_address() {
    let dir = temp_dir("metrics-off");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let out = std::process::Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            &addr,
        ])
        .current_dir(&dir)
        .output()
        .expect("serve");
    assert!(
        !out.status.success(),
        "serve started on a taken metrics address"
    );
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("--metrics-listen"), "{text}");
    let mut server = Proc::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "off",
        ],
        &dir,
    );
    let line = server.wait_for("the listening line", |l| l.contains("\"msg\":\"listening"));
    assert!(line.contains("\"metrics\":\"off\""), "{line}");
}
