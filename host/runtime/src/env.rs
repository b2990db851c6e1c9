//! What a call's component instance is connected to: [`HostEnv`] (store, config, clocks,
//! randomness, outbound HTTP, where its log goes), and the pieces it is made of that are not
//! stores or senders: [`Clocks`] and [`GuestLog`].

use crate::metrics::Metrics;
use crate::outbound::Outbound;
use crate::store::KvStore;
use rand::{SeedableRng, rngs::StdRng};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

/// What one call's component instance is connected to.
#[derive(Clone)]
pub struct HostEnv {
    /// The key-value store behind `wasi:keyvalue`.
    pub kv: KvStore,
    /// Values behind `wasi:config/store` (snake_case keys).
    pub config: Arc<BTreeMap<String, String>>,
    /// Clocks in place of the real ones (the simulator's virtual time), or `None` for the
    /// real ones.
    pub clock: Option<Clocks>,
    /// Where outgoing requests go.
    pub outbound: Arc<dyn Outbound>,
    /// Seeded randomness (simulation), or `None` for the operating system's.
    pub seed: Option<Arc<Mutex<StdRng>>>,
    /// Captures what the component writes to stderr (its log lines), or `None` to pass it
    /// straight to the process's stderr.
    pub guest_log: Option<GuestLog>,
    /// Where the component's metrics events go ([`Metrics`]: taken off its stderr before
    /// the log), or `None` to leave them in the log like any line.
    pub metrics: Option<Arc<Metrics>>,
}

/// The component's stderr (its log lines), kept in memory so tests can read them, and also
/// passed on as the process's log does (to its stderr).
#[derive(Clone, Default)]
pub struct GuestLog(Arc<Mutex<Vec<u8>>>);

impl GuestLog {
    /// Keeps `buf` and passes it on as the process's log does ([`crate::log::guest_lines`]).
    pub(crate) fn append(&self, buf: &[u8]) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        crate::log::guest_lines(buf);
    }

    /// Everything the component has logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

impl tokio::io::AsyncWrite for GuestLog {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.append(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// A guest's stderr as [`Metrics`] reads it: whole lines, metrics events taken off, every
/// other line passed on (to a captured log, or the process's stderr).
pub(crate) struct EventTap {
    metrics: Arc<Metrics>,
    partial: Vec<u8>,
    log: Option<GuestLog>,
}

impl EventTap {
    pub(crate) fn new(metrics: Arc<Metrics>, log: Option<GuestLog>) -> Self {
        EventTap {
            metrics,
            partial: Vec::new(),
            log,
        }
    }

    fn pass(&self, bytes: &[u8]) {
        match &self.log {
            Some(log) => log.append(bytes),
            None => crate::log::guest_lines(bytes),
        }
    }
}

impl tokio::io::AsyncWrite for EventTap {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = &mut *self;
        this.partial.extend_from_slice(buf);
        let mut passed: Vec<u8> = Vec::new();
        while let Some(end) = this.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = this.partial.drain(..=end).collect();
            let text = std::str::from_utf8(&line[..end]).unwrap_or("");
            if !this.metrics.observe_event(text) {
                passed.extend_from_slice(&line);
            }
        }
        // Lines are short; a guest that never ends one is not held back forever.
        if this.partial.len() > 64 * 1024 {
            passed.append(&mut this.partial);
        }
        if !passed.is_empty() {
            this.pass(&passed);
        }
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        // A last line with no line break is the log's.
        if !self.partial.is_empty() {
            self.pass(&self.partial);
        }
        std::task::Poll::Ready(Ok(()))
    }
}

impl HostEnv {
    /// A fresh in-memory store, no settings, the real clocks and randomness, no network, the
    /// guest's log on stderr: the smallest host (tests, a first embedding).
    pub fn in_memory() -> Self {
        HostEnv {
            kv: crate::store::KvStore::Local(Arc::new(crate::store::MemoryStore::new())),
            config: Arc::default(),
            clock: None,
            outbound: Arc::new(crate::outbound::NoNetwork),
            seed: None,
            guest_log: None,
            metrics: None,
        }
    }

    /// Seeded randomness from `seed`: every call draws its own generator from it in turn, so
    /// the same sequence of calls sees the same bytes.
    pub fn seeded(seed: u64) -> Arc<Mutex<StdRng>> {
        Arc::new(Mutex::new(StdRng::seed_from_u64(seed)))
    }
}

/// Clocks a call sees instead of the real ones, shared by every call of a host: the
/// simulator's virtual time moves them, and each call's instance reads them through
/// `wasi:clocks`.
#[derive(Clone)]
pub struct Clocks {
    /// Wall time (`wasi:clocks/wall-clock`).
    pub wall: Arc<dyn HostWallClock + Sync>,
    /// Monotonic time (`wasi:clocks/monotonic-clock`).
    pub monotonic: Arc<dyn HostMonotonicClock + Sync>,
}

/// One call's handle on the shared wall clock.
pub(crate) struct SharedWall(pub(crate) Arc<dyn HostWallClock + Sync>);

impl HostWallClock for SharedWall {
    fn resolution(&self) -> Duration {
        self.0.resolution()
    }

    fn now(&self) -> Duration {
        self.0.now()
    }
}

/// One call's handle on the shared monotonic clock.
pub(crate) struct SharedMonotonic(pub(crate) Arc<dyn HostMonotonicClock + Sync>);

impl HostMonotonicClock for SharedMonotonic {
    fn resolution(&self) -> u64 {
        self.0.resolution()
    }

    fn now(&self) -> u64 {
        self.0.now()
    }
}
