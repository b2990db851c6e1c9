//! Virtual clocks for simulation: wall and monotonic time that move only when the caller
//! advances them.

use edgehook_runtime::Clocks;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

/// A shared virtual clock. Clones see the same time.
#[derive(Clone, Debug)]
pub struct VirtualClock {
    /// Wall time, nanoseconds since the Unix epoch.
    wall_ns: Arc<AtomicU64>,
    /// Monotonic time, nanoseconds since the clock was made.
    mono_ns: Arc<AtomicU64>,
}

impl VirtualClock {
    /// A clock whose wall time starts at `start_ms` (ms since the epoch).
    pub fn new(start_ms: u64) -> Self {
        VirtualClock {
            wall_ns: Arc::new(AtomicU64::new(start_ms * 1_000_000)),
            mono_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Wall time in ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.wall_ns.load(Ordering::SeqCst) / 1_000_000
    }

    /// Moves both clocks forward.
    pub fn advance(&self, by: Duration) {
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.wall_ns.fetch_add(ns, Ordering::SeqCst);
        self.mono_ns.fetch_add(ns, Ordering::SeqCst);
    }

    /// Moves both clocks forward to wall time `ms`; never backwards.
    pub fn advance_to_ms(&self, ms: u64) {
        let now = self.now_ms();
        if ms > now {
            self.advance(Duration::from_millis(ms - now));
        }
    }

    /// Both clocks as a runtime's [`edgehook_runtime::HostEnv`] takes them: every call sees
    /// this clock's time.
    pub fn clocks(&self) -> Clocks {
        Clocks {
            wall: Arc::new(Wall(self.clone())),
            monotonic: Arc::new(Monotonic(self.clone())),
        }
    }
}

struct Wall(VirtualClock);

impl HostWallClock for Wall {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.wall_ns.load(Ordering::SeqCst))
    }
}

struct Monotonic(VirtualClock);

impl HostMonotonicClock for Monotonic {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        self.0.mono_ns.load(Ordering::SeqCst)
    }
}
