//! Values against the document's schemas, by the `jsonschema` crate, and the tests that the
//! check fails when it should.

use super::{SAMPLE_SUB, load_doc};
use jsonschema::{Draft, PatternOptions, Registry};
use serde_json::{Value, json};

/// The URI the document is registered under: a local `$ref` (`#/components/schemas/Error`)
/// is this URI plus the reference.
const DOC_URI: &str = "urn:edgehook:openapi";

/// The document as a JSON Schema resource (draft 2020-12, the dialect of OpenAPI 3.1), so a
/// schema of it, or one written in place, is checked with its `$ref`s resolved in the whole
/// document.
pub(super) struct Schemas {
    registry: Registry<'static>,
}

impl Schemas {
    pub(super) fn new(doc: &Value) -> Schemas {
        let registry = Registry::new()
            .draft(Draft::Draft202012)
            .add(DOC_URI, doc.clone())
            .and_then(|builder| builder.prepare())
            .expect("the document registers as a schema resource");
        Schemas { registry }
    }

    /// Checks `value` against `schema`: every violation, each with where it is (`at`, then
    /// the JSON pointer into `value`). A missing schema (`null`) and one that does not compile
    /// (a dangling `$ref`, a `pattern` that is no regular expression) are failures too.
    /// Patterns are matched by the `regex` crate; `format` is an annotation, as draft 2020-12
    /// has it by default.
    pub(super) fn check(&self, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
        if schema.is_null() {
            return Err(format!("{at}: no schema"));
        }
        let validator = jsonschema::options()
            .with_draft(Draft::Draft202012)
            .with_registry(&self.registry)
            .with_pattern_options(PatternOptions::regex())
            .offline()
            .build(&anchored(schema))
            .map_err(|e| format!("{at}: the schema does not compile: {e}"))?;
        let errors: Vec<String> = validator
            .iter_errors(value)
            .map(|e| format!("{at}{}: {e}", e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("\n"))
        }
    }
}

/// `schema` with its local `$ref`s pointing into the registered document. (A schema of the
/// document holds the same references; those inside the document resolve there already.)
fn anchored(schema: &Value) -> Value {
    match schema {
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| match (k.as_str(), v.as_str()) {
                ("$ref", Some(r)) if r.starts_with('#') => {
                    (k.clone(), json!(format!("{DOC_URI}{r}")))
                }
                _ => (k.clone(), anchored(v)),
            })
            .collect(),
        Value::Array(a) => a.iter().map(anchored).collect(),
        other => other.clone(),
    }
}

/// A response of the document that names its schema by `$ref` and nests others (`data` is a
/// `Subscription`-like object with `additionalProperties: false`, a patterned id, an enum,
/// an integer time with a minimum): its example conforms, and each kind of violation is
/// reported, at its place.
#[test]
fn the_schema_check_reports_each_kind_of_violation() {
    let doc = load_doc();
    let schemas = Schemas::new(&doc);
    let media =
        &doc["paths"]["/v1/webhooks"]["post"]["responses"]["201"]["content"]["application/json"];
    let schema = &media["schema"];
    let example = &media["examples"]["created"]["value"];
    assert_eq!(schemas.check(schema, example, "$"), Ok(()));
    let violates = |change: &dyn Fn(&mut Value), needles: &[&str]| {
        let mut v = example.clone();
        change(&mut v);
        let err = schemas
            .check(schema, &v, "$")
            .expect_err("a violation is reported");
        for needle in needles {
            assert!(err.contains(needle), "{needle:?} not in {err:?}");
        }
        assert_eq!(err.lines().count(), 1, "one violation, one report: {err}");
    };
    // A wrong type.
    violates(
        &|v| v["data"]["createdAt"] = json!("yesterday"),
        &["$/data/createdAt", "integer"],
    );
    violates(
        &|v| v["data"]["eventTypes"] = json!("load.created"),
        &["$/data/eventTypes", "array"],
    );
    // A required property missing.
    violates(
        &|v| {
            v["data"].as_object_mut().expect("data").remove("id");
        },
        &["$/data:", "\"id\" is a required property"],
    );
    violates(
        &|v| {
            v.as_object_mut().expect("body").remove("requestId");
        },
        &["$:", "\"requestId\""],
    );
    // A property where `additionalProperties` is false.
    violates(
        &|v| v["data"]["paused"] = json!(true),
        &["$/data:", "paused"],
    );
    violates(&|v| v["extra"] = json!(1), &["$:", "extra"]);
    // A pattern mismatch (through a `$ref` to a shared schema).
    violates(
        &|v| v["data"]["id"] = json!("dlv_0123456789abcdef01234567"),
        &["$/data/id", "does not match"],
    );
    violates(
        &|v| v["requestId"] = json!("req_0123456789abcdef012345670"),
        &["$/requestId", "does not match"],
    );
    // Enums (the status, the event types), a minimum.
    violates(
        &|v| v["data"]["status"] = json!("paused"),
        &["$/data/status"],
    );
    violates(
        &|v| v["data"]["eventTypes"][1] = json!("load.deleted"),
        &["$/data/eventTypes/1"],
    );
    violates(
        &|v| v["data"]["createdAt"] = json!(-1),
        &["$/data/createdAt", "minimum"],
    );
}

#[test]
fn the_schema_check_fails_without_a_schema_or_with_one_that_does_not_compile() {
    let schemas = Schemas::new(&load_doc());
    let err = schemas
        .check(&Value::Null, &json!({}), "$")
        .expect_err("no schema");
    assert!(err.contains("no schema"), "{err}");
    let dangling = json!({"$ref": "#/components/schemas/Nothing"});
    let err = schemas
        .check(&dangling, &json!({}), "$")
        .expect_err("dangling");
    assert!(err.contains("does not compile"), "{err}");
    let broken = json!({"type": "string", "pattern": "^sub_[0-9a-f{24}$"});
    let err = schemas
        .check(&broken, &json!("sub_0"), "$")
        .expect_err("no regex");
    assert!(err.contains("does not compile"), "{err}");
}

/// A schema written in place (as a header's is) resolves its `$ref`s in the document too, and
/// patterns match as anchored regular expressions do.
#[test]
fn patterns_match_like_a_regex() {
    let schemas = Schemas::new(&load_doc());
    let m = |schema: Value, s: &str| schemas.check(&schema, &json!(s), "$").is_ok();
    let sub = || json!({"items": {"$ref": "#/components/schemas/SubscriptionId"}});
    let id = |s: &str| schemas.check(&sub(), &json!([s]), "$").is_ok();
    assert!(id(SAMPLE_SUB));
    assert!(!id(&format!("{SAMPLE_SUB}0")));
    assert!(!id("dlv_0123456789abcdef01234567"));
    let p = |pattern: &str| json!({"type": "string", "pattern": pattern});
    assert!(m(p("^[0-9]+$"), "1767225600"));
    assert!(!m(p("^[0-9]+$"), ""));
    assert!(m(p("^[A-Za-z0-9_.-]{1,64}$"), "acme.corp-1"));
    assert!(!m(p("^[A-Za-z0-9_.-]{1,64}$"), "acme corp"));
    assert!(!m(p("^[A-Za-z0-9_.-]{1,64}$"), &"a".repeat(65)));
    assert!(m(p("^cur_[0-9a-f]+$"), "cur_1f"));
    assert!(!m(p("^cur_[0-9a-f]+$"), "cur_"));
}
