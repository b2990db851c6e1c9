//! Routes: every route the component serves (every `Route` variant) is in the document with
//! exactly its methods, every documented path and method is served ([`check_routes`]), and
//! any other method answers 405 with the documented `Allow`.

use super::{HTTP_METHODS, SAMPLE_DLV, SAMPLE_KEY, SAMPLE_RPL, SAMPLE_SUB, load_doc, resolve};
use crate::common::*;
use edgehook_component::api::router::Route;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// One concrete request path per `Route` variant, mirroring `Route::parse`.
pub(crate) fn served_paths() -> Vec<String> {
    vec![
        "/healthz".to_owned(),
        "/v1/webhooks".to_owned(),
        format!("/v1/webhooks/{SAMPLE_SUB}"),
        format!("/v1/webhooks/{SAMPLE_SUB}/enable"),
        format!("/v1/webhooks/{SAMPLE_SUB}/test"),
        format!("/v1/webhooks/{SAMPLE_SUB}/rotate-secret"),
        format!("/v1/webhooks/{SAMPLE_SUB}/replays"),
        format!("/v1/webhooks/{SAMPLE_SUB}/deliveries"),
        format!("/v1/webhooks/{SAMPLE_SUB}/deliveries/{SAMPLE_DLV}/replay"),
        format!("/v1/replays/{SAMPLE_RPL}"),
        format!("/v1/replays/{SAMPLE_RPL}/cancel"),
        "/v1/notification-endpoint".to_owned(),
        "/internal/v1/replays".to_owned(),
        format!("/internal/v1/replays/{SAMPLE_RPL}"),
        format!("/internal/v1/replays/{SAMPLE_RPL}/cancel"),
        "/internal/v1/settings".to_owned(),
        "/internal/v1/clients/acme/keys".to_owned(),
        format!("/internal/v1/clients/acme/keys/{SAMPLE_KEY}"),
        "/internal/v1/ingest-keys".to_owned(),
        format!("/internal/v1/ingest-keys/{SAMPLE_KEY}"),
        "/internal/v1/events".to_owned(),
        "/internal/v1/events/evt_000000000000000000000000".to_owned(),
        "/v1/events".to_owned(),
        "/v1/events/evt_000000000000000000000000".to_owned(),
        "/internal/v1/tick".to_owned(),
        "/internal/v1/subscriptions".to_owned(),
        format!("/internal/v1/subscriptions/{SAMPLE_SUB}"),
        format!("/internal/v1/subscriptions/{SAMPLE_SUB}/disable"),
        format!("/internal/v1/subscriptions/{SAMPLE_SUB}/enable"),
        format!("/internal/v1/subscriptions/{SAMPLE_SUB}/test"),
        format!("/internal/v1/subscriptions/{SAMPLE_SUB}/rotate-secret"),
        format!("/internal/v1/subscriptions/{SAMPLE_SUB}/deliveries"),
        "/internal/v1/deliveries".to_owned(),
        format!("/internal/v1/deliveries/{SAMPLE_DLV}"),
        format!("/internal/v1/deliveries/{SAMPLE_DLV}/replay"),
        "/v1/portal/sessions".to_owned(),
        "/v1/portal/sessions/current".to_owned(),
        "/internal/v1/clients/acme/portal-links".to_owned(),
        "/internal/v1/secrets/reseal".to_owned(),
    ]
}

/// How many `Route` variants there are.
pub(crate) const VARIANTS: usize = 39;

/// Numbers every `Route` variant. There is no wildcard arm: a new variant does not compile
/// until it is numbered here, and [`check_routes`] then fails until [`served_paths`] has a
/// path for it.
pub(crate) fn variant(route: &Route) -> usize {
    match route {
        Route::Health => 0,
        Route::Webhooks => 1,
        Route::Webhook(_) => 2,
        Route::OperatorSettings => 3,
        Route::ClientKeys(_) => 4,
        Route::ClientKey(..) => 5,
        Route::Events => 6,
        Route::Tick => 7,
        Route::OperatorSubscription(_) => 8,
        Route::DisableSubscription(_) => 9,
        Route::SubscriptionDeliveries(_) => 10,
        Route::Delivery(_) => 11,
        Route::Replay(_) => 12,
        Route::WebhookEnable(_) => 13,
        Route::EnableSubscription(_) => 14,
        Route::OperatorSubscriptions => 15,
        Route::WebhookTest(_) => 16,
        Route::TestSubscription(_) => 17,
        Route::IngestKeys => 18,
        Route::IngestKey(_) => 19,
        Route::WebhookReplays(_) => 20,
        Route::PartnerReplay(_) => 21,
        Route::PartnerReplayCancel(_) => 22,
        Route::Replays => 23,
        Route::OperatorReplay(_) => 24,
        Route::OperatorReplayCancel(_) => 25,
        Route::WebhookDeliveries(_) => 26,
        Route::Deliveries => 27,
        Route::WebhookRotate(_) => 28,
        Route::PortalSessions => 29,
        Route::PortalSession => 30,
        Route::PortalLinks(_) => 31,
        Route::WebhookDeliveryReplay(..) => 32,
        Route::Reseal => 33,
        Route::NotificationEndpoint => 34,
        Route::OperatorRotate(_) => 35,
        Route::PartnerEvents => 36,
        Route::PartnerEvent(_) => 37,
        Route::OperatorEvent(_) => 38,
    }
}

/// Whether a concrete path fits a path template (`{name}` matches one non-empty segment).
fn template_matches(template: &str, path: &str) -> bool {
    let t: Vec<&str> = template.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| (t.starts_with('{') && t.ends_with('}') && !p.is_empty()) || t == p)
}

/// A concrete path for a template (every parameter becomes `x`).
fn instantiate(template: &str) -> String {
    template
        .split('/')
        .map(|s| if s.starts_with('{') { "x" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

/// The documented methods (upper case) of every path template.
fn documented_methods(doc: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (template, item) in doc["paths"].as_object().into_iter().flatten() {
        let methods = out.entry(template.clone()).or_default();
        for key in item.as_object().into_iter().flatten().map(|(k, _)| k) {
            if HTTP_METHODS.contains(&key.as_str()) {
                methods.insert(key.to_ascii_uppercase());
            }
        }
    }
    out
}

/// Every way the document and the component's routes disagree (empty when they agree): a
/// served route missing from the document or with other methods, and a documented path or
/// method the component does not serve.
fn check_routes(doc: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let documented = documented_methods(doc);
    let mut covered = BTreeSet::new();
    for path in served_paths() {
        let Some(route) = Route::parse(&path) else {
            problems.push(format!(
                "{path}: the component does not serve this sample path"
            ));
            continue;
        };
        covered.insert(variant(&route));
        let served: BTreeSet<String> = route.methods().iter().map(|m| (*m).to_owned()).collect();
        let templates: Vec<(&String, &BTreeSet<String>)> = documented
            .iter()
            .filter(|(t, _)| template_matches(t, &path))
            .collect();
        match templates.as_slice() {
            [] => problems.push(format!(
                "{path} ({route:?}, {served:?}) is served but not in the document"
            )),
            [(template, methods)] => {
                if *methods != &served {
                    problems.push(format!(
                        "{template}: the document has {methods:?}, the component serves {served:?}"
                    ));
                }
            }
            many => problems.push(format!(
                "{path} matches several documented paths: {:?}",
                many.iter().map(|(t, _)| t).collect::<Vec<_>>()
            )),
        }
    }
    for i in 0..VARIANTS {
        if !covered.contains(&i) {
            problems.push(format!(
                "Route variant #{i} has no sample path in served_paths()"
            ));
        }
    }
    for (template, methods) in &documented {
        match Route::parse(&instantiate(template)) {
            None => problems.push(format!(
                "{template} is in the document but the component serves no such path"
            )),
            Some(route) => {
                for method in methods {
                    if !route.methods().contains(&method.as_str()) {
                        problems.push(format!(
                            "{method} {template} is in the document but the component answers it 405"
                        ));
                    }
                }
                if methods.is_empty() {
                    problems.push(format!("{template} documents no method"));
                }
            }
        }
    }
    problems
}

#[test]
fn every_route_is_documented_with_exactly_its_methods() {
    let problems = check_routes(&load_doc());
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_route_check_fails_when_the_document_misses_or_invents_a_route() {
    let mut doc = load_doc();
    let paths = doc["paths"].as_object_mut().expect("paths");
    paths.remove("/internal/v1/tick").expect("documented");
    paths["/v1/webhooks/{id}"]
        .as_object_mut()
        .expect("path item")
        .remove("delete")
        .expect("documented");
    paths["/healthz"]["put"] = json!({"responses": {}});
    paths.insert(
        "/v1/webhooks/{id}/pause".to_owned(),
        json!({"post": {"responses": {}}}),
    );
    let problems = check_routes(&doc);
    let mentions = |needle: &str| problems.iter().any(|p| p.contains(needle));
    assert!(mentions("/internal/v1/tick (Tick"), "{problems:#?}");
    assert!(
        mentions("/v1/webhooks/{id}: the document has"),
        "{problems:#?}"
    );
    assert!(mentions("PUT /healthz"), "{problems:#?}");
    assert!(
        mentions("/v1/webhooks/{id}/pause is in the document"),
        "{problems:#?}"
    );
    assert!(mentions("/healthz: the document has"), "{problems:#?}");
    assert_eq!(problems.len(), 5, "{problems:#?}");
}

#[test]
fn every_documented_path_answers_405_with_allow_for_other_methods() {
    let doc = load_doc();
    let allow = resolve(
        &doc,
        &doc["components"]["responses"]["MethodNotAllowed"]["headers"]["Allow"],
    );
    assert_eq!(allow["required"], true, "405 documents Allow");
    let mut sim = sim(50);
    for (template, methods) in documented_methods(&doc) {
        let other = ["PATCH", "PUT", "DELETE", "POST", "GET"]
            .into_iter()
            .find(|m| !methods.contains(*m))
            .expect("some method is not documented");
        let path = instantiate(&template);
        let resp = call(&mut sim, other, &path, ADMIN);
        assert_error(&resp, 405, "method_not_allowed");
        let allowed: BTreeSet<String> = resp
            .header("allow")
            .expect("Allow on 405")
            .split(", ")
            .map(str::to_owned)
            .collect();
        assert_eq!(allowed, methods, "{other} {path}");
    }
}
