//! Every key-value key the service uses is built here, and nowhere else.
//!
//! Layout (all values JSON unless noted):
//! - `health` — never written; read by `/healthz` to probe the store.

/// Read by `/healthz` to check that the store answers. Never written.
pub const HEALTH_PROBE: &str = "health";

/// The raw bytes of a published load, exactly as received (`evt:{id}:body`).
pub fn event_body(event_id: &str) -> String {
    format!("evt:{event_id}:body")
}
