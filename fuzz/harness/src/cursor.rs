//! Target `cursor`: list paging and cursor decoding, for the partner list
//! (`GET /v1/webhooks`) and the operator's delivery history
//! (`GET /internal/v1/subscriptions/{id}/deliveries`), which share `limit`/`cursor`.
//!
//! Input, three lines:
//! 1. four numbers `subs mask walk events`: how many more subscriptions client A creates
//!    (0-12, every fourth one interleaved with one of client B), which of A's subscriptions
//!    are then deleted (bit i = the i-th in creation order), the page size of a full walk
//!    (1-100; 0 = no `limit`), and how many `load.created` events are published (0-5);
//! 2. a query string for A's list (`$CUR` = the first cursor of the walk);
//! 3. a query string for the history of A's first subscription.
//!
//! Checked:
//! - walking every page from the start, following `nextCursor`, yields each active
//!   subscription (delivery) exactly once, in creation order; full pages say `hasMore`, the
//!   last one does not and has no cursor;
//! - for the fuzzed queries: 422 exactly when `limit` or `cursor` is malformed (read by an
//!   independent query parser), naming exactly those; otherwise a **contiguous window** of
//!   the full list: no skipped or repeated item, at most `limit` items (50 by default),
//!   starting at the beginning without a cursor and right after the cursor's page with a
//!   cursor from the walk, reaching the end unless `hasMore`, and a `nextCursor` that
//!   continues exactly where the window stops.

use crate::text::substitute;
use crate::world::delivery_id_of as delivery_id;
use crate::world::{CLIENT_A, World};
use serde_json::Value;
use std::collections::BTreeMap;

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut lines = data.splitn(3, |b| *b == b'\n');
    let numbers = String::from_utf8_lossy(lines.next().unwrap_or(b""));
    let q1 = lines.next().unwrap_or(b"");
    let q2 = lines.next().unwrap_or(b"");
    let numbers: Vec<u64> = numbers
        .split_whitespace()
        .map(|w| w.parse().unwrap_or(0))
        .collect();
    let number = |i: usize| numbers.get(i).copied().unwrap_or(0);
    let extra = number(0) % 13;
    let mask = number(1);
    let walk_limit = number(2) % 101;
    let events = number(3) % 6;

    let mut w = World::new(&[]);
    let (key_a, key_b) = (w.seed.key_a.clone(), w.seed.key_b.clone());
    for i in 0..extra {
        let body =
            format!(r#"{{"url":"https://h{i}.acme.example/in","eventTypes":["load.created"]}}"#);
        let r = w.partner(&key_a, "POST", "/v1/webhooks", body.as_bytes());
        assert_eq!(r.status, 201, "{}", r.text);
        if i % 4 == 3 {
            let body = format!(
                r#"{{"url":"https://h{i}.globex.example/in","eventTypes":["load.updated"]}}"#
            );
            let r = w.partner(&key_b, "POST", "/v1/webhooks", body.as_bytes());
            assert_eq!(r.status, 201, "{}", r.text);
        }
    }
    for (i, id) in w.model.active_of(CLIENT_A).iter().enumerate() {
        if i < 64 && mask >> i & 1 == 1 {
            let r = w.partner(&key_a, "DELETE", &format!("/v1/webhooks/{id}"), b"");
            assert_eq!(r.status, 200, "{}", r.text);
        }
    }
    let sub = w.seed.sub.clone();
    let mut history = vec![delivery_id(&w.seed.event, &sub)];
    let sub_active = w.model.subs.get(&sub).is_some_and(|s| !s.disabled);
    for e in 0..events {
        let load = format!(r#"{{"id":"L-c{e}","status":"ASSIGNED"}}"#);
        let Some(event) = w.publish("load.created", load.as_bytes()) else {
            panic!("a valid load was refused");
        };
        if sub_active {
            history.push(delivery_id(&event, &sub));
        }
    }
    let subs = w.model.active_of(CLIENT_A);

    let partner = |w: &mut World, query: &str| {
        w.partner(&key_a, "GET", &format!("/v1/webhooks?{query}"), b"")
    };
    let operator = |w: &mut World, query: &str| {
        w.operator(
            "GET",
            &format!("/internal/v1/subscriptions/{sub}/deliveries?{query}"),
            b"",
        )
    };
    let cursors = walk(&mut w, &partner, &subs, walk_limit);
    let first = cursors
        .keys()
        .next()
        .cloned()
        .unwrap_or_else(|| "cur_1".to_owned());
    let q1 = String::from_utf8_lossy(&substitute(q1, &[("$CUR", first)])).into_owned();
    window(&mut w, &partner, &subs, &q1, &cursors);

    let cursors = walk(&mut w, &operator, &history, walk_limit);
    let first = cursors
        .keys()
        .next()
        .cloned()
        .unwrap_or_else(|| "cur_1".to_owned());
    let q2 = String::from_utf8_lossy(&substitute(q2, &[("$CUR", first)])).into_owned();
    window(&mut w, &operator, &history, &q2, &cursors);
}

type Get<'a> = dyn Fn(&mut World, &str) -> crate::world::Reply + 'a;

fn ids(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Pages through the whole list; returns each cursor with the index its page starts at.
fn walk(w: &mut World, get: &Get<'_>, full: &[String], limit: u64) -> BTreeMap<String, usize> {
    let page_size = if limit == 0 { 50 } else { limit as usize };
    let mut seen: Vec<String> = Vec::new();
    let mut cursors = BTreeMap::new();
    let mut cursor: Option<String> = None;
    for _ in 0..=full.len() + 1 {
        let mut query = String::new();
        if limit > 0 {
            query.push_str(&format!("limit={limit}"));
        }
        if let Some(c) = &cursor {
            query.push_str(&format!("&cursor={c}"));
        }
        let page = get(w, &query);
        assert_eq!(page.status, 200, "walk: {}", page.text);
        let items = ids(&page.body);
        seen.extend(items.iter().cloned());
        let more = page.body["hasMore"].as_bool() == Some(true);
        if more {
            assert_eq!(
                items.len(),
                page_size,
                "a full page is short: {}",
                page.text
            );
            let Some(next) = page.body["nextCursor"].as_str() else {
                panic!("hasMore without nextCursor: {}", page.text);
            };
            cursors.insert(next.to_owned(), seen.len());
            cursor = Some(next.to_owned());
        } else {
            assert!(items.len() <= page_size, "{}", page.text);
            assert!(page.body["nextCursor"].is_null(), "{}", page.text);
            assert_eq!(
                seen, full,
                "paging did not yield every item exactly once, in order"
            );
            return cursors;
        }
    }
    panic!("paging did not end after {} pages", full.len() + 2);
}

/// Percent-decoding of a query component, written independently of the core.
fn decode(s: &str) -> Result<String, ()> {
    let mut out = Vec::new();
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'%' => {
                let hi = bytes.next().and_then(|c| (c as char).to_digit(16));
                let lo = bytes.next().and_then(|c| (c as char).to_digit(16));
                match (hi, lo) {
                    (Some(hi), Some(lo)) => out.push((hi * 16 + lo) as u8),
                    _ => return Err(()),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
    }
    String::from_utf8(out).map_err(|_| ())
}

/// The first value of `name` in `query`; `Err` when a component up to it does not decode.
fn param(query: &str, name: &str) -> Result<Option<String>, ()> {
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if decode(k)? == name {
            return decode(v).map(Some);
        }
    }
    Ok(None)
}

/// One request with a fuzzed query: a 422 naming exactly the bad parameters, or a contiguous
/// window of `full`.
fn window(
    w: &mut World,
    get: &Get<'_>,
    full: &[String],
    query: &str,
    cursors: &BTreeMap<String, usize>,
) {
    let reply = get(w, query);
    let ctx = || format!("?{query} over {} items -> {}", full.len(), reply.text);
    let limit = match param(query, "limit") {
        Ok(None) => Some(50),
        Ok(Some(l)) if l.bytes().all(|b| b.is_ascii_digit()) => {
            l.parse::<usize>().ok().filter(|n| (1..=100).contains(n))
        }
        Ok(Some(_)) => None,
        Err(()) => None,
    };
    let cursor = match param(query, "cursor") {
        Ok(None) => Some(None),
        Ok(Some(c)) => c
            .strip_prefix("cur_")
            .filter(|h| {
                // Hex digits that fit in 64 bits.
                !h.is_empty()
                    && h.bytes().all(|b| b.is_ascii_hexdigit())
                    && h.trim_start_matches('0').len() <= 16
            })
            .map(|_| Some(c.clone())),
        Err(()) => None,
    };
    let (Some(limit), Some(cursor)) = (limit, cursor.clone()) else {
        assert_eq!(
            reply.status,
            422,
            "a malformed limit or cursor was accepted: {}",
            ctx()
        );
        let mut bad = Vec::new();
        if limit.is_none() {
            bad.push("limit");
        }
        if cursor.is_none() {
            bad.push("cursor");
        }
        assert_eq!(reply.detail_fields(), bad, "{}", ctx());
        return;
    };
    assert_eq!(
        reply.status,
        200,
        "a good limit and cursor were refused: {}",
        ctx()
    );
    let items = ids(&reply.body);
    let more = reply.body["hasMore"].as_bool() == Some(true);
    assert!(items.len() <= limit, "more than limit: {}", ctx());
    let start = match items.first() {
        None => {
            assert!(!more, "an empty page with more: {}", ctx());
            full.len()
        }
        Some(first) => {
            let Some(start) = full.iter().position(|x| x == first) else {
                panic!("an item that is not in the list: {}", ctx());
            };
            assert!(
                full[start..].starts_with(&items),
                "not a contiguous window of the list: {}",
                ctx()
            );
            start
        }
    };
    let end = start + items.len();
    match &cursor {
        None => assert_eq!(start, 0, "no cursor, not from the start: {}", ctx()),
        Some(c) => {
            if let Some(expected) = cursors.get(c) {
                assert_eq!(
                    start,
                    *expected,
                    "a walk cursor resumed elsewhere: {}",
                    ctx()
                );
            }
        }
    }
    if more {
        assert_eq!(items.len(), limit, "hasMore on a short page: {}", ctx());
        assert!(end < full.len(), "hasMore at the end: {}", ctx());
        let Some(next) = reply.body["nextCursor"].as_str() else {
            panic!("hasMore without nextCursor: {}", ctx());
        };
        let follow = get(w, &format!("limit={limit}&cursor={next}"));
        let next_items = ids(&follow.body);
        assert_eq!(
            next_items.first(),
            full.get(end),
            "nextCursor does not continue the window: {}",
            ctx()
        );
    } else {
        assert!(
            items.is_empty() || end == full.len(),
            "stopped early without hasMore: {}",
            ctx()
        );
        assert!(reply.body["nextCursor"].is_null(), "{}", ctx());
    }
}
