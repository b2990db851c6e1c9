//! Claims: a tick takes a due delivery by compare-and-swap on its record (a lease), or finds why it must wait; the bounds of a run, which leases are sized by.

use edgehook_records::delivery::Delivery;

/// Most attempts one tick runs; more due work is reported as due now.
pub const MAX_ATTEMPTS_PER_TICK: usize = 2000;

/// A tick starts no batch once it has run this long (by its senders' clocks); what is left is
/// reported as due now, so the host ticks again with a fresh view (and can stop in between).
pub const TICK_TIME_BUDGET_MS: u64 = 20_000;

/// Extra lease time beyond the attempt timeout before another instance may take over.
pub(crate) const LEASE_MARGIN_MS: u64 = 5_000;

/// What a tick decided for one claimed delivery.
pub(crate) struct Claimed {
    pub(crate) delivery: Delivery,
    pub(crate) due_at: u64,
    /// The record as the claim wrote it: if the store still holds exactly these bytes when
    /// the outcome is recorded, they need not be parsed again.
    pub(crate) bytes: Vec<u8>,
}

/// Why a batch left a delivery it was given unsent for now, though its queue entry is not
/// done with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Another tick holds its lease until then.
    Leased(u64),
    /// It is pending but due only then: a publish (or replay) made it due after this tick
    /// read its clock, within the second the tick is scanning.
    Due(u64),
    /// Due now, but its subscription's pacing (`pace.rs`) has no room for it until then.
    Paced(u64),
}

/// What a claim found.
pub(crate) enum Claim {
    /// Ours now.
    Claimed(Box<Claimed>),
    /// Not to be sent now, and not done with either.
    Wait(Wait),
    /// Nothing to do (finished, gone).
    Skip,
}
