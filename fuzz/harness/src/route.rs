//! Target `route`: whole requests through `router::handle`, the core's HTTP entry point.
//!
//! Input: up to 8 requests in the text format of [`crate::text`] (method, path with query,
//! headers, body; placeholders for the seeded API keys, admin token and ids; directives to
//! move the clock, script the network and inject a store fault). They run in order against
//! one seeded [`World`] (subscription limit 5, so the cap and its pruning are reachable).
//!
//! Checked for every response: the envelope ([`crate::check::envelope`]: documented status,
//! JSON body with `requestId` = `X-Request-Id`, `error.code` that belongs to the status, no
//! 500, no 503 without a fault); across responses, the [`crate::model`] (authentication,
//! ownership, secrets, idempotent replays, disabled stays disabled, what ticks deliver).

use crate::text;
use crate::world::World;

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut world = World::new(&[("subscription_limit", "5")]);
    for block in text::blocks(data) {
        let step = text::parse_block(block, &world.vars());
        world.advance(step.advance_ms);
        world.set_script(step.send);
        world.kv.fail_at(step.fault_at);
        world.request(&step.request, step.fault_at.is_some());
        world.kv.fail_at(None);
    }
}
