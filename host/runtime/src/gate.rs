//! A limit on the requests in flight to one target (scheme, host and port): the outbound
//! pool's connections to a receiver never exceed it, and the pool keeps that many idle.
//!
//! Without it, a fan-out to many subscriptions of one receiver opened a connection per
//! attempt in flight and closed all but the pool's idle ones after every burst: at fan-out
//! 100 on loopback, connecting and closing took a quarter of the CPU (a
//! profile of `serve`). With it, the attempts of a burst beyond the limit wait for a connection of
//! the pool (the wait counts toward the attempt's timeout, as with any client that limits
//! its connections), and a receiver is never hit by more connections at once than this.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Requests in flight to one target, and idle connections kept per target, unless
/// `serve --max-connections-per-target` says otherwise.
pub const DEFAULT_PER_TARGET: usize = 64;

/// The gates of every target with a request in flight or waiting.
pub(crate) struct Gates {
    per_target: usize,
    open: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// One request's place among its target's `per_target`; given back when dropped.
pub(crate) struct Pass {
    permit: Option<OwnedSemaphorePermit>,
    target: String,
    gates: Arc<Gates>,
}

impl Gates {
    /// At most `per_target` (at least 1) requests in flight to each target.
    pub(crate) fn new(per_target: usize) -> Arc<Self> {
        Arc::new(Gates {
            per_target: per_target.max(1),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Waits for a place among `target`'s requests in flight.
    pub(crate) async fn enter(self: &Arc<Self>, target: &str) -> Pass {
        let gate = self
            .lock()
            .entry(target.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_target)))
            .clone();
        // Never closed: the semaphore lives as long as someone holds it.
        let permit = gate.acquire_owned().await.ok();
        Pass {
            permit,
            target: target.to_owned(),
            gates: self.clone(),
        }
    }

    /// Targets with a gate: those with a request in flight or waiting (tests).
    #[cfg(test)]
    fn targets(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Semaphore>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        drop(self.permit.take());
        // The last one out removes the gate, so the map holds only the targets in use. (A
        // waiter cancelled while waiting leaves its target's gate for the next to remove.)
        let mut open = self.gates.lock();
        if open
            .get(&self.target)
            .is_some_and(|gate| Arc::strong_count(gate) == 1)
        {
            open.remove(&self.target);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    #[tokio::test]
    async fn a_target_never_has_more_than_its_limit_in_flight_and_others_do_not_wait() {
        let gates = Gates::new(2);
        let a1 = gates.enter("http://a").await;
        let a2 = gates.enter("http://a").await;
        // Another target is not held up by a full one.
        let b = gates.enter("http://b").await;
        let third = gates.enter("http://a");
        tokio::pin!(third);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            third.as_mut().poll(&mut cx).is_pending(),
            "a third request to a full target waits"
        );
        drop(a1);
        let Poll::Ready(a3) = third.as_mut().poll(&mut cx) else {
            panic!("a place given back lets the waiter in");
        };
        drop((a2, a3));
        assert_eq!(
            gates.targets(),
            1,
            "a target with nothing in flight has no gate"
        );
        drop(b);
        assert_eq!(gates.targets(), 0);
    }
}
