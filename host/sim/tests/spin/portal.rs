//! The walk's last steps on Spin (the page directories, the portal): the page directories of the
//! subscription indexes, on Spin's own store (a client creates 40 subscriptions and deletes
//! 39: whole index pages are emptied, sealed and left out of the directory, and list and
//! publish still find exactly the one left), and a portal session (a link minted, exchanged
//! for the cookie, which reads the partner API and writes only with its CSRF token).

use super::harness::*;
use super::publish;
use serde_json::json;

/// Creates and deletes through whole index pages, then lists and publishes.
pub fn index_pages(w: &mut Walk, receiver: &Receiver) {
    let step = "issue key for initech";
    let Some(r) = w.call(
        step,
        201,
        post("/internal/v1/clients/initech/keys", Who::Operator),
    ) else {
        return w.skip("the index pages", step);
    };
    let key = r.data()["apiKey"].as_str().unwrap_or_default().to_owned();
    let who = Who::Bearer(&key);
    let mut ids = Vec::new();
    for i in 0..40 {
        let body =
            json!({"url": receiver.url(&format!("/ok/churn{i}")), "eventTypes": ["load.updated"]});
        let Some(r) = w.call(
            "create 40 for initech",
            201,
            post("/v1/webhooks", who).json(&body),
        ) else {
            return w.skip("the index pages", "create 40 for initech");
        };
        ids.push(r.data()["id"].as_str().unwrap_or_default().to_owned());
    }
    for id in &ids[..39] {
        let path = format!("/v1/webhooks/{id}");
        if w.call("delete 39 of them", 200, delete(path, who))
            .is_none()
        {
            return w.skip("the index pages", "delete 39 of them");
        }
    }
    let last = &ids[39];
    let step = "list after the pages emptied: the one left";
    if let Some(r) = w.call(step, 200, get("/v1/webhooks?limit=50", who)) {
        let listed: Vec<&str> = r.json["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["id"].as_str())
            .collect();
        w.check(step, listed == [last.as_str()], &r.text);
    }
    let before = receiver.on("/ok/churn39").len();
    if w.call("publish load.updated (pages)", 202, publish("load.updated"))
        .is_some()
    {
        let step = "the one left gets the event, the deleted ones not";
        let got = receiver.wait_for("/ok/churn39", before + 1);
        let others: usize = (0..39)
            .map(|i| receiver.on(&format!("/ok/churn{i}")).len())
            .sum();
        w.check(
            step,
            got.len() == before + 1 && others == 0,
            format!("{others} to deleted ones"),
        );
    }
}

/// A portal link for acme, its exchange, and the session's cookie on the partner API.
pub fn session(w: &mut Walk) {
    let step = "mint a portal link";
    let Some(r) = w.call(
        step,
        201,
        post("/internal/v1/clients/acme/portal-links", Who::Operator),
    ) else {
        return w.skip("the portal session", step);
    };
    let token = r.data()["token"].as_str().unwrap_or_default().to_owned();
    let step = "exchange it for a session";
    let exchange = || post("/v1/portal/sessions", Who::Nobody).json(&json!({"token": token}));
    let Some(r) = w.call(step, 201, exchange()) else {
        return w.skip("the portal session", step);
    };
    let csrf = r.data()["csrfToken"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let set = r.header("set-cookie").unwrap_or_default().to_owned();
    let secure_attrs = set.ends_with("; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200");
    w.check(step, secure_attrs, &set);
    let cookie = set.split(';').next().unwrap_or_default().to_owned();
    w.refused("the link again", (401, "unauthorized"), exchange());
    let list = get("/v1/webhooks", Who::Nobody).header("cookie", &cookie);
    w.call("list with the session cookie", 200, list);
    let body = json!({"url": "https://hooks.example.com/portal", "eventTypes": ["load.created"]});
    let create = || {
        post("/v1/webhooks", Who::Nobody)
            .header("cookie", &cookie)
            .json(&body)
    };
    w.refused(
        "create without the CSRF token",
        (403, "csrf_failed"),
        create(),
    );
    w.call(
        "create with it",
        201,
        create().header("x-csrf-token", &csrf),
    );
}
