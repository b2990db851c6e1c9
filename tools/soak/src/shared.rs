//! What the soak's tasks and threads share besides their data: a lock that outlives a panic.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`. Every lock of the soak guards a record or a count that a panic mid-update
/// cannot leave half-written (a push, an increment), so a poisoned one is still used.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
