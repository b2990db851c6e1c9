//! Traces on `serve` (`--otlp-endpoint`): an OTLP/HTTP receiver inside the test decodes what
//! `serve` exports with the OpenTelemetry project's own protobuf types and checks the spans
//! of a publish with a `traceparent`, delivered to two subscriptions, one of which fails its
//! first attempt and is retried (retry delays set to 1 s); the other asked for `traceparent`
//! on its deliveries.

use crate::common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message as _;
use serde_json::json;

/// The publisher's trace: trace id and its span's id.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

#[test]
fn a_publish_and_its_attempts_are_one_trace_with_the_attempts_under_the_publish() {
    let dir = temp_dir("traces");
    let rt = rt();
    let collector = rt.block_on(Receiver::builder().start());
    let ok = rt.block_on(Receiver::builder().start());
    // Fails the first request, answers 200 to the others.
    let flaky = Receiver::builder().answer_by(|_, earlier| match earlier {
        [] => Answer::status(500),
        _ => Answer::status(200),
    });
    let flaky = rt.block_on(flaky.start());
    let endpoint = collector.url("");
    let mut args = serve_to_loopback("retry_delays_ms=1000,1000").to_vec();
    args.extend(["--otlp-endpoint", endpoint.trim_end_matches('/')]);
    let mut server = Proc::start(&args, &dir);
    let (base, operator, key) = operator_and_key(&rt, &dir, &mut server);
    let mut subs = Vec::new();
    for (recv, traceparent) in [(&ok, true), (&flaky, false)] {
        let body = json!({
            "url": recv.url("/in"),
            "eventTypes": ["load.created"],
            "traceparent": traceparent,
        });
        let created = create_subscription(&rt, &base, &key, &body);
        assert_eq!(
            created["traceparent"].as_bool(),
            traceparent.then_some(true)
        );
        subs.push(created["id"].as_str().map(str::to_owned));
    }
    let headers = [
        ("content-type".to_owned(), "application/json".to_owned()),
        ("x-service-event".to_owned(), "load.created".to_owned()),
        ("traceparent".to_owned(), format!("00-{TRACE}-{PARENT}-01")),
    ];
    let (status, text) = rt
        .block_on(operator.call(
            "POST",
            "/internal/v1/events",
            Some(br#"{"id":"L-123"}"#.to_vec()),
            &headers,
        ))
        .expect("publish");
    assert_eq!(status, 202, "{text}");
    let event_id =
        serde_json::from_str::<serde_json::Value>(&text).expect("json")["data"]["eventId"]
            .as_str()
            .expect("eventId")
            .to_owned();
    wait_for("the retry", || flaky.hits() >= 2 && ok.hits() >= 1);
    // The receivers never see the host's header; only the one that asked gets a traceparent.
    for r in ok.received().iter().chain(&flaky.received()) {
        assert_eq!(r.header("x-edgehook-trace"), None);
    }
    assert!(
        flaky
            .received()
            .iter()
            .all(|r| r.header("traceparent").is_none())
    );
    let sent = ok.received()[0]
        .header("traceparent")
        .expect("a traceparent for the subscription that asked")
        .to_owned();
    let spans = wait_for("the spans", || {
        let spans = exported(&collector);
        let attempts = spans.iter().filter(|s| s.name == "POST delivery").count();
        if attempts >= 3 {
            Ok(spans)
        } else {
            Err(format!("{spans:#?}"))
        }
    });
    let publish = spans
        .iter()
        .find(|s| s.name == "POST /internal/v1/events")
        .expect("the publish's span");
    assert_eq!(hex(&publish.trace_id), TRACE, "the publisher's trace");
    assert_eq!(
        hex(&publish.parent_span_id),
        PARENT,
        "under the publisher's span"
    );
    assert_eq!(publish.kind, SpanKind::Server as i32);
    assert_eq!(
        text_of(publish, "edgehook.event_id"),
        Some(event_id.clone())
    );
    assert_eq!(int_of(publish, "http.response.status_code"), Some(202));
    let mut attempts: Vec<(String, i64, i64)> = Vec::new();
    for s in spans.iter().filter(|s| s.name == "POST delivery") {
        assert_eq!(hex(&s.trace_id), TRACE, "an attempt in the publish's trace");
        assert_eq!(
            s.parent_span_id, publish.span_id,
            "an attempt under the publish"
        );
        assert_eq!(s.kind, SpanKind::Client as i32);
        assert_eq!(text_of(s, "edgehook.event_id"), Some(event_id.clone()));
        assert!(text_of(s, "edgehook.delivery_id").is_some_and(|d| d.starts_with("dlv_")));
        assert!(int_of(s, "edgehook.duration_ms").is_some());
        assert!(s.end_time_unix_nano >= s.start_time_unix_nano);
        attempts.push((
            text_of(s, "edgehook.subscription_id").expect("subscription"),
            int_of(s, "edgehook.attempt").expect("attempt"),
            int_of(s, "http.response.status_code").expect("status"),
        ));
    }
    // Its traceparent names its attempt's span, in the publish's trace.
    let ok_attempt = spans
        .iter()
        .find(|s| text_of(s, "edgehook.subscription_id").as_deref() == subs[0].as_deref())
        .expect("the attempt that asked");
    assert_eq!(sent, format!("00-{TRACE}-{}-01", hex(&ok_attempt.span_id)));
    attempts.sort();
    let (ok_sub, flaky_sub) = (subs[0].clone().expect("id"), subs[1].clone().expect("id"));
    let mut expected = vec![
        (ok_sub, 1, 200),
        (flaky_sub.clone(), 1, 500),
        (flaky_sub, 2, 200),
    ];
    expected.sort();
    assert_eq!(attempts, expected);
    drop(server);
}

/// Every span in every export request the collector received, decoded.
fn exported(collector: &Receiver) -> Vec<Span> {
    let mut spans = Vec::new();
    for r in collector.received() {
        assert_eq!(r.path, "/v1/traces");
        assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
        let request = ExportTraceServiceRequest::decode(r.body.as_ref()).expect("OTLP protobuf");
        for rs in request.resource_spans {
            let resource = rs.resource.expect("a resource");
            assert!(
                resource.attributes.iter().any(|a| a.key == "service.name"),
                "{resource:?}"
            );
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
    spans
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn value<'a>(span: &'a Span, key: &str) -> Option<&'a any_value::Value> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|AnyValue { value }| value.as_ref())
}

fn text_of(span: &Span, key: &str) -> Option<String> {
    match value(span, key)? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn int_of(span: &Span, key: &str) -> Option<i64> {
    match value(span, key)? {
        any_value::Value::IntValue(i) => Some(*i),
        _ => None,
    }
}
