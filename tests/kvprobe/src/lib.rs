//! The key-value conformance probe: a `wasi:http/incoming-handler` component (world
//! `edgehook:webhooks/kvprobe`) that checks the `wasi:keyvalue` draft2 store of whatever host
//! runs it against the rules the edgehook component relies on (docs/embedding.md,
//! "Key-value contract"). Built for `wasm32-wasip2` by `host/runtime/build.rs`; the host's tests run
//! it on every store (`host/runtime/tests/kv_conformance.rs`).
//!
//! Routes (every answer is JSON):
//! - `GET /conformance?run=<nonce>`: runs every rule against bucket `default`, under keys
//!   `kvprobe:<nonce>:...` (a new nonce per run, so runs on a persistent store never meet),
//!   and answers `{"rules":[{"name":..,"ok":..,"detail":..},..]}`; with `&rule=<name>` only
//!   that rule (a host that fails the whole call on one rule still answers for the others).
//! - `GET /rules`: `{"rules":[<name>,..]}`, every rule in order.
//! - `POST /increment?key=<k>&times=<m>`: `m` increments of 1 on `k`.
//! - `GET /counter?key=<k>`: the counter read as the component reads it, `increment(k, 0)`.
//! - `POST /cas-add?key=<k>&item=<i>`: adds the line `i` to `k` by a compare-and-swap loop.
//! - `GET /items?key=<k>`: the lines `k` holds.
//!
//! Many concurrent requests on the last four are the contention rules.

#[cfg(target_arch = "wasm32")]
#[allow(
    unsafe_code,
    missing_docs,
    reason = "wit-bindgen's generated glue and `export!` expand to unsafe code"
)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "edgehook:webhooks/kvprobe",
        generate_all,
    });
}

#[cfg(target_arch = "wasm32")]
mod json;
#[cfg(target_arch = "wasm32")]
mod rules;
#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code, reason = "`export!` expands to unsafe code")]
mod shell;
