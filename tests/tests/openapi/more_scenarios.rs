//! Scenarios for the examples of the operator's maintenance routes (re-sealing stored
//! secrets), kept apart from [`super::scenarios`] to keep each file short; that module's
//! `scenario` falls through to [`scenario`] here.

use super::{Doc, World};
use crate::common::*;
use edgehook_runtime::HttpResponse;
use serde_json::json;

/// A key to seal secrets under.
pub(super) const SEAL_KEY: &str =
    "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";

/// The response for the example `key` (`"<METHOD> <template> <status> <name>"`), or `None`
/// when no scenario here makes it.
pub(super) fn scenario(doc: &Doc, key: &str) -> Option<HttpResponse> {
    const RESEAL: &str = "/internal/v1/secrets/reseal";
    let resp = match key {
        "POST /internal/v1/secrets/reseal 200 resealed" => {
            // Three plain secrets, then a key: the first call seals them and the pass is not
            // known to be done until the next.
            let mut w = World::new(80);
            for _ in 0..3 {
                w.subscribe(&["load.created"]);
            }
            let mut keyed = builder(81)
                .config("seal_key", SEAL_KEY)
                .sharing(&w.sim)
                .build()
                .expect("simulation");
            let first = doc.request_example("POST", RESEAL, "nextBatch");
            assert_eq!(first["limit"], 100);
            operator_post_json(&mut keyed, RESEAL, &json!({"limit": 3}))
        }
        "POST /internal/v1/secrets/reseal 409 sealKeyMissing" => {
            World::new(82).operator_json(RESEAL, &doc.request_example("POST", RESEAL, "nextBatch"))
        }
        "POST /internal/v1/secrets/reseal 415 unsupportedMediaType" => {
            let auth = bearer(ADMIN);
            World::new(83)
                .sim
                .request(
                    "POST",
                    RESEAL,
                    &[("authorization", &auth), ("content-type", "text/plain")],
                    b"{}",
                )
                .expect("request runs")
        }
        "POST /internal/v1/secrets/reseal 422 invalidCursor" => {
            World::new(84).operator_json(RESEAL, &json!({"cursor": "next"}))
        }
        _ => return None,
    };
    Some(resp)
}
