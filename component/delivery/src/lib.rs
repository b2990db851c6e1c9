//! # edgehook delivery — getting events to receivers
//!
//! Owns everything between an accepted event and a receiver's answer, one module per job:
//! publish and fan-out ([`fanout`]), the due queue ([`queue`]), ticks ([`mod@tick`], which scan
//! due seconds with [`scan`] and run [`batch`]es: [`claim`], [`attempt`], [`outcome`]), the
//! retry schedule ([`retry`]), subscription health and disabling ([`health`]), operator
//! alerts ([`alert`]), partners' notices ([`notify`]), recovery by probes ([`recover`]) and
//! the due queue's other timers ([`timers`]), retention ([`purge`]), replay ([`mod@replay`]) and replays by range
//! ([`replays`]), history ([`mod@history`]), the operator's search ([`mod@search`]), an
//! event's and a load id's deliveries ([`loads`]), sending
//! ([`sender`]), test deliveries ([`mod@ping`]), and the opportunistic tick ([`scheduler`]).
//!
//! **Records.** `evt:{id}` (type, body hash, matched subscriptions) and `evt:{id}:body` (the
//! raw load). `dlv:{id}` is one delivery: one event to one subscription, with every attempt.
//! Its id is derived from (event, subscription), so it is the same on every retry and replay,
//! and a resumed fan-out finds the deliveries it already made.
//!
//! **Due queue.** Attempts are due on whole seconds (retries) or at publish time (attempt 1).
//! Second `s` has an append log `due:{s}` of delivery ids, and `duedir` lists the seconds
//! that have one. A tick reads the seconds that are due, claims each delivery by
//! compare-and-swap on its record (a lease), sends, and records the outcome. The record is
//! the truth; queue entries are hints, and stale ones are skipped. A retry's queue entry is
//! written before the record says it is due, so a crash never loses one; a crash mid-attempt
//! leaves a lease that expires and the attempt runs again (receivers dedupe by delivery id).
//!
//! May use: `edgehook-subscriptions` (listeners, disabling), `edgehook-records`,
//! `edgehook-model`, `edgehook-storage`. Knows no route: the API (above) calls in.

pub mod alert;
pub mod attempt;
pub mod batch;
pub mod claim;
pub mod fanout;
pub mod fifo;
pub mod health;
pub mod history;
pub mod loads;
pub mod notify;
pub mod outcome;
pub mod pace;
pub mod ping;
pub mod purge;
pub mod queue;
pub mod recover;
pub mod replay;
pub mod replays;
pub mod report;
pub mod retry;
pub mod scan;
pub mod scheduler;
pub mod search;
pub mod sender;
pub mod tick;
pub mod timers;

pub use attempt::USER_AGENT;
pub use batch::{MAX_ATTEMPTS_PER_TICK, TICK_TIME_BUDGET_MS};
pub use edgehook_records::delivery::{Attempt, Delivery, EventRecord, Status, delivery_id};
pub use fanout::{Prepared, Written, publish, publish_prepared};
pub use health::{cancel_pending, disable, enable};
pub use history::{HistoryFilter, history, last_attempt, load};
pub use ping::{PING_EVENT, Ping, ping};
pub use replay::replay;
pub use replays::after_enable;
pub use report::TickReport;
pub use retry::{MAX_ATTEMPTS, RETRY_DELAYS_MS, Verdict, retry_due, retry_due_after, verdict};
pub use scan::schedule_secret_erasure;
pub use sender::{NoNetwork, Outgoing, SendError, SendResult, Sender};
pub use tick::{RunNow, run_now, tick};

#[cfg(test)]
mod tests;
