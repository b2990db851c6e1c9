//! Whether an actual body has the shape of an example ([`same_shape`]).

use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The kind of a value that differs by nature between runs (an id, a secret, a key), if it is
/// one: its prefix.
fn opaque_kind(s: &str) -> Option<&'static str> {
    let hex24 = |r: &str| {
        r.len() == 24
            && r.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let b64_43 = |r: &str| {
        r.len() == 43
            && r.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    for prefix in ["sub_", "dlv_", "evt_", "req_", "key_", "rpl_"] {
        if s.strip_prefix(prefix).is_some_and(hex24) {
            return Some(prefix);
        }
    }
    ["whsec_", "ehk_"]
        .into_iter()
        .find(|prefix| s.strip_prefix(prefix).is_some_and(b64_43))
}

/// Fields that hold a time (ms since the epoch) or a duration: compared by type only.
fn is_time_field(key: &str) -> bool {
    key.ends_with("At") || key.ends_with("Ms") || matches!(key, "since" | "until")
}

/// Whether `actual` has the shape of `expected`: the same keys at every object level, arrays
/// of the same length compared element by element, and equal values, except that ids,
/// secrets and API keys (`sub_`, `dlv_`, `evt_`, `req_`, `key_`, `rpl_` + 24 hex; `whsec_`, `ehk_` +
/// 43 base64url) need only the same kind, and times (`...At`, `...Ms`, `since`, `until`) only be integers too.
pub(super) fn same_shape(expected: &Value, actual: &Value) -> Result<(), String> {
    shape_at("$", None, expected, actual)
}

fn shape_at(at: &str, key: Option<&str>, expected: &Value, actual: &Value) -> Result<(), String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            let ek: BTreeSet<&String> = e.keys().collect();
            let ak: BTreeSet<&String> = a.keys().collect();
            if ek != ak {
                return Err(format!(
                    "{at}: keys differ: missing {:?}, unexpected {:?}",
                    ek.difference(&ak).collect::<Vec<_>>(),
                    ak.difference(&ek).collect::<Vec<_>>()
                ));
            }
            for (k, ev) in e {
                shape_at(&format!("{at}.{k}"), Some(k), ev, &a[k])?;
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Err(format!(
                    "{at}: {} items in the example, {} in the response",
                    e.len(),
                    a.len()
                ));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                shape_at(&format!("{at}[{i}]"), key, ev, av)?;
            }
            Ok(())
        }
        (Value::String(e), Value::String(a)) if opaque_kind(e).is_some() => {
            if opaque_kind(e) == opaque_kind(a) {
                Ok(())
            } else {
                Err(format!("{at}: {a:?} is not of the kind of {e:?}"))
            }
        }
        (Value::Number(e), Value::Number(a)) if key.is_some_and(is_time_field) => {
            if e.is_u64() && a.is_u64() {
                Ok(())
            } else {
                Err(format!("{at}: {a} is not a time like {e}"))
            }
        }
        _ if expected == actual => Ok(()),
        _ => Err(format!(
            "{at}: the example has {expected}, the response {actual}"
        )),
    }
}

#[test]
fn same_shape_ignores_what_differs_by_nature() {
    let example = json!({
        "data": {"id": "sub_aaaaaaaaaaaaaaaaaaaaaaaa", "eventTypes": ["load.created"],
                 "signingSecret": format!("whsec_{}", "A".repeat(43)), "createdAt": 1,
                 "nextDueMs": null, "status": "active"},
        "requestId": "req_000000000000000000000000",
    });
    let actual = json!({
        "data": {"id": "sub_0123456789abcdef01234567", "eventTypes": ["load.created"],
                 "signingSecret": format!("whsec_{}", "b-_9".repeat(10) + "xyz"), "createdAt": 1_767_225_600_000u64,
                 "nextDueMs": null, "status": "active"},
        "requestId": "req_ffffffffffffffffffffffff",
    });
    assert_eq!(same_shape(&example, &actual), Ok(()));
}

#[test]
fn same_shape_rejects_other_differences() {
    let example = json!({
        "data": [{"id": "sub_aaaaaaaaaaaaaaaaaaaaaaaa", "eventTypes": ["load.created"],
                  "status": "active", "createdAt": 1, "nextDueMs": 5}],
        "hasMore": false,
        "error": {"code": "not_found", "details": []},
        "requestId": "req_000000000000000000000000",
    });
    let differs = |change: &dyn Fn(&mut Value), needle: &str| {
        let mut actual = example.clone();
        change(&mut actual);
        let err = same_shape(&example, &actual).expect_err("a difference is reported");
        assert!(err.contains(needle), "{needle:?} not in {err:?}");
    };
    differs(
        &|v| v["data"][0]["signingSecret"] = json!("whsec_x"),
        "unexpected [\"signingSecret\"]",
    );
    differs(
        &|v| {
            v["data"][0]
                .as_object_mut()
                .expect("object")
                .remove("createdAt");
        },
        "missing [\"createdAt\"]",
    );
    differs(&|v| v["error"]["code"] = json!("conflict"), "$.error.code");
    differs(&|v| v["hasMore"] = json!(true), "$.hasMore");
    differs(
        &|v| v["data"][0]["eventTypes"] = json!(["load.updated"]),
        "$.data[0].eventTypes[0]",
    );
    differs(
        &|v| v["data"][0]["eventTypes"] = json!(["load.created", "load.updated"]),
        "1 items in the example, 2",
    );
    differs(
        &|v| v["data"][0]["id"] = json!("dlv_aaaaaaaaaaaaaaaaaaaaaaaa"),
        "$.data[0].id",
    );
    differs(
        &|v| v["data"][0]["id"] = json!("sub_AAAAAAAAAAAAAAAAAAAAAAAA"),
        "$.data[0].id",
    );
    differs(
        &|v| v["data"][0]["nextDueMs"] = json!(null),
        "$.data[0].nextDueMs",
    );
    differs(&|v| v["data"] = json!([]), "$.data");
    differs(&|v| v["error"]["details"] = json!([{}]), "$.error.details");
    differs(&|v| v["requestId"] = json!(7), "$.requestId");
}
