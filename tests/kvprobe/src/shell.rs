//! The HTTP side: routes, query parameters, the JSON answers, and the two operations many
//! requests run at once (increments, compare-and-swap appends).

use crate::bindings::exports::wasi::http::incoming_handler::Guest;
use crate::bindings::wasi::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};
use crate::json;
use crate::rules::{Keys, Probe, RULES, Swap};

struct KvProbe;

crate::bindings::export!(KvProbe with_types_in crate::bindings);

impl Guest for KvProbe {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let (status, body) = route(&request);
        respond(out, status, body.as_bytes());
    }
}

fn respond(out: ResponseOutparam, status: u16, body: &[u8]) {
    let headers = Fields::new();
    let _ = headers.append("content-type", b"application/json");
    let response = OutgoingResponse::new(headers);
    let _ = response.set_status_code(status);
    let Ok(outgoing) = response.body() else {
        return;
    };
    ResponseOutparam::set(out, Ok(response));
    if let Ok(stream) = outgoing.write() {
        for chunk in body.chunks(4096) {
            if stream.blocking_write_and_flush(chunk).is_err() {
                break;
            }
        }
    }
    let _ = OutgoingBody::finish(outgoing, None);
}

/// A query parameter: present, non-empty, and only of characters that need no escaping.
fn param(query: &str, name: &str) -> Result<String, String> {
    let value = query
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .ok_or_else(|| format!("missing query parameter {name}"))?;
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"-_.:".contains(&b);
    if value.is_empty() || !value.bytes().all(plain) {
        return Err(format!("{name} must be non-empty [A-Za-z0-9._:-]"));
    }
    Ok(value.to_owned())
}

fn route(request: &IncomingRequest) -> (u16, String) {
    let target = request.path_with_query().unwrap_or_default();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let post = matches!(request.method(), Method::Post);
    let result = match (post, path) {
        (false, "/conformance") => param(query, "run").and_then(|run| {
            let only = param(query, "rule").ok();
            conformance(&run, only.as_deref())
        }),
        (false, "/rules") => Ok(rule_names()),
        (true, "/increment") => param(query, "key").and_then(|key| {
            let times = param(query, "times")?
                .parse::<u32>()
                .map_err(|e| format!("times: {e}"))?;
            increment(&key, times)
        }),
        (false, "/counter") => param(query, "key").and_then(|key| {
            let value = Probe::open()?.increment(&key, 0)?;
            Ok(format!("{{\"value\":{value}}}"))
        }),
        (true, "/cas-add") => {
            param(query, "key").and_then(|key| cas_add(&key, &param(query, "item")?))
        }
        (false, "/items") => param(query, "key").and_then(|key| items(&key)),
        _ => return (404, json::error(&format!("no route {path}"))),
    };
    match result {
        Ok(body) => (200, body),
        Err(e) => (500, json::error(&e)),
    }
}

/// `{"rules":[<name>,..]}`: every rule of [`RULES`], in order.
fn rule_names() -> String {
    let mut out = String::from("{\"rules\":[");
    for (i, (name, _)) in RULES.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json::string(&mut out, name);
    }
    out.push_str("]}");
    out
}

/// Runs every rule of [`RULES`], or only the one named `only`.
fn conformance(run: &str, only: Option<&str>) -> Result<String, String> {
    let probe = Probe::open()?;
    let chosen: Vec<_> = RULES
        .iter()
        .filter(|(name, _)| only.is_none_or(|o| o == *name))
        .collect();
    if chosen.is_empty() {
        return Err(format!("no rule named {}", only.unwrap_or_default()));
    }
    let mut out = String::from("{\"rules\":[");
    for (i, (name, check)) in chosen.into_iter().enumerate() {
        let (ok, detail) = match check(&probe, &Keys::new(run, name)) {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        json::string(&mut out, name);
        out.push_str(&format!(",\"ok\":{ok},\"detail\":"));
        json::string(&mut out, &detail);
        out.push('}');
    }
    out.push_str("]}");
    Ok(out)
}

/// `times` increments of 1; answers the last value returned.
fn increment(key: &str, times: u32) -> Result<String, String> {
    let probe = Probe::open()?;
    let mut last = 0;
    for _ in 0..times {
        last = probe.increment(key, 1)?;
    }
    Ok(format!("{{\"last\":{last}}}"))
}

/// How many times [`cas_add`] begins again before it gives up.
const CAS_ATTEMPTS: u32 = 1000;

/// Adds the line `item` to `key` by compare-and-swap, begun again while other writers win.
///
/// After a `cas-failed` the key is read back: if it holds exactly the bytes this swap wrote,
/// the swap did apply (Spin 4.0.2's Redis store reports `cas-failed` for every swap, applied
/// or not; its EXEC is atomic, so the bytes tell which). Items are unique, so finding our
/// line in a later value also means our swap applied.
fn cas_add(key: &str, item: &str) -> Result<String, String> {
    let probe = Probe::open()?;
    let line = format!("{item}\n");
    for attempt in 1..=CAS_ATTEMPTS {
        let (cas, seen) = probe.begin(key)?;
        let seen = seen.unwrap_or_default();
        if has_line(&seen, item) {
            return Ok(format!("{{\"attempts\":{attempt},\"applied\":\"found\"}}"));
        }
        let mut value = seen;
        value.extend_from_slice(line.as_bytes());
        match probe.swap(cas, &value) {
            Swap::Ok => return Ok(format!("{{\"attempts\":{attempt},\"applied\":\"ok\"}}")),
            Swap::StoreError(e) => return Err(format!("swap: {e}")),
            Swap::CasFailed => {
                if probe.get(key)?.as_deref() == Some(value.as_slice()) {
                    return Ok(format!(
                        "{{\"attempts\":{attempt},\"applied\":\"read back\"}}"
                    ));
                }
            }
        }
    }
    Err(format!("{CAS_ATTEMPTS} compare-and-swaps lost in a row"))
}

fn has_line(value: &[u8], item: &str) -> bool {
    value.split(|&b| b == b'\n').any(|l| l == item.as_bytes())
}

/// The lines `key` holds.
fn items(key: &str) -> Result<String, String> {
    let value = Probe::open()?.get(key)?.unwrap_or_default();
    let text = String::from_utf8(value).map_err(|e| format!("not UTF-8: {e}"))?;
    let mut out = String::from("{\"items\":[");
    for (i, line) in text.lines().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json::string(&mut out, line);
    }
    out.push_str("]}");
    Ok(out)
}
