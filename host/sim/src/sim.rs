//! The simulation host: the real component on virtual time, an in-memory store with fault
//! injection, seeded randomness and a simulated network. No sockets, no sleeps: a test moves
//! time with [`Simulation::advance`], which calls `tick` exactly when the component said the
//! next attempt is due.

use crate::clock::VirtualClock;
use crate::simnet::SimNet;
use anyhow::Result;
use bytes::Bytes;
use edgehook_runtime::outbound::Outbound;
use edgehook_runtime::store::{KvStore, MemoryStore};
use edgehook_runtime::{
    GuestLog, HostEnv, HttpResponse, PublishError, PublishReceipt, Runtime, TickReport,
};
use http_body_util::Full;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// 2026-01-01T00:00:00Z: where virtual time starts unless told otherwise.
pub const DEFAULT_START_MS: u64 = 1_767_225_600_000;

/// Ticks [`Simulation::advance`] runs at one virtual instant before it calls it a livelock.
const MAX_TICKS_AT_ONE_INSTANT: u32 = 1000;

/// How to build a [`Simulation`].
#[derive(Clone)]
pub struct SimBuilder {
    seed: u64,
    start_ms: u64,
    config: BTreeMap<String, String>,
    store: Option<Arc<MemoryStore>>,
    clock: Option<VirtualClock>,
    net: Option<SimNet>,
    outbound: Option<Arc<dyn Outbound>>,
}

impl Default for SimBuilder {
    fn default() -> Self {
        SimBuilder {
            seed: 0,
            start_ms: DEFAULT_START_MS,
            config: BTreeMap::new(),
            store: None,
            clock: None,
            net: None,
            outbound: None,
        }
    }
}

impl SimBuilder {
    /// The randomness seed (default 0). The same seed and the same calls replay exactly.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Virtual wall time at the start, in ms since the epoch.
    pub fn start_ms(mut self, ms: u64) -> Self {
        self.start_ms = ms;
        self
    }

    /// A `wasi:config` value.
    pub fn config(mut self, key: &str, value: &str) -> Self {
        self.config.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Shares another simulation's store, clock and network: two component hosts over one
    /// store, as two instances of a deployment would be.
    pub fn sharing(mut self, other: &Simulation) -> Self {
        self.store = Some(other.store.clone());
        self.clock = Some(other.clock.clone());
        self.net = Some(other.net.clone());
        self
    }

    /// Sends the component's outgoing requests to `outbound` instead of the simulated
    /// network (e.g. the production sender, to test its SSRF guard behind the component).
    pub fn outbound(mut self, outbound: Arc<dyn Outbound>) -> Self {
        self.outbound = Some(outbound);
        self
    }

    /// Builds the simulation (compiling the component on first use in this process).
    pub fn build(self) -> Result<Simulation> {
        let clock = self
            .clock
            .unwrap_or_else(|| VirtualClock::new(self.start_ms));
        let store = self.store.unwrap_or_default();
        let net = self.net.unwrap_or_else(|| SimNet::new(clock.clone()));
        let guest_log = GuestLog::default();
        let env = HostEnv {
            kv: KvStore::Local(store.clone()),
            config: Arc::new(self.config),
            clock: Some(clock.clocks()),
            outbound: self.outbound.unwrap_or_else(|| Arc::new(net.clone())),
            seed: Some(HostEnv::seeded(self.seed)),
            guest_log: Some(guest_log.clone()),
            metrics: None,
        };
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Simulation {
            runtime: Runtime::embedded()?,
            tokio,
            env,
            clock,
            store,
            net,
            guest_log,
            next_due_ms: None,
            ticks: 0,
        })
    }
}

/// One simulated deployment of the component.
pub struct Simulation {
    runtime: &'static Runtime,
    tokio: tokio::runtime::Runtime,
    env: HostEnv,
    clock: VirtualClock,
    store: Arc<MemoryStore>,
    net: SimNet,
    guest_log: GuestLog,
    next_due_ms: Option<u64>,
    ticks: u64,
}

impl Simulation {
    /// A builder with defaults (seed 0, time [`DEFAULT_START_MS`], no config).
    pub fn builder() -> SimBuilder {
        SimBuilder::default()
    }

    /// A simulation with default settings and this seed.
    pub fn new(seed: u64) -> Result<Self> {
        Self::builder().seed(seed).build()
    }

    /// Virtual wall time, ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The in-memory store (inspect it, inject faults).
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// The simulated network (script endpoints, read what they received).
    pub fn net(&self) -> &SimNet {
        &self.net
    }

    /// Every line the component has logged (its stderr) in this simulation.
    pub fn guest_log(&self) -> String {
        self.guest_log.text()
    }

    /// When the component last said the next attempt is due.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.next_due_ms
    }

    /// How many times `tick` has run.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Sends an HTTP request to the component. Headers are `(name, value)` pairs.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<HttpResponse> {
        let mut builder = http::Request::builder()
            .method(method)
            .uri(format!("http://edgehook.sim{path}"));
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let req = builder.body(Full::new(Bytes::copy_from_slice(body)))?;
        let env = self.env.clone();
        let runtime = self.runtime;
        let response = self.tokio.block_on(runtime.handle(&env, req))?;
        if response.status == 202 {
            // Like `edgehook serve`: a 202 (an event accepted, a delivery replayed) made work
            // due, so the timer wakes and learns when the next attempt is due.
            self.tick()?;
        }
        Ok(response)
    }

    /// Publishes an event through the `events.publish` export.
    pub fn publish(
        &mut self,
        event_type: &str,
        load: &[u8],
    ) -> Result<Result<PublishReceipt, PublishError>> {
        let env = self.env.clone();
        let runtime = self.runtime;
        let result = self
            .tokio
            .block_on(runtime.publish(&env, event_type, load))?;
        if let Ok(receipt) = &result {
            self.note_due(receipt.next_due_ms);
        }
        Ok(result)
    }

    /// Runs `scheduler.tick` now.
    pub fn tick(&mut self) -> Result<TickReport> {
        let env = self.env.clone();
        let runtime = self.runtime;
        let report = self.tokio.block_on(runtime.tick(&env))?;
        self.ticks += 1;
        self.next_due_ms = report.next_due_ms;
        Ok(report)
    }

    /// Moves virtual time forward by `by`, running `tick` at every moment the component said
    /// an attempt is due on the way (and at the end, if due then).
    pub fn advance(&mut self, by: Duration) -> Result<Vec<TickReport>> {
        let target = self.now_ms() + u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let mut reports = Vec::new();
        let mut same_instant = 0u32;
        while let Some(due) = self.next_due_ms.filter(|due| *due <= target) {
            same_instant = if due <= self.now_ms() {
                same_instant + 1
            } else {
                0
            };
            anyhow::ensure!(
                same_instant < MAX_TICKS_AT_ONE_INSTANT,
                "tick keeps reporting work due at {due} without making progress"
            );
            self.clock.advance_to_ms(due);
            reports.push(self.tick()?);
        }
        self.clock.advance_to_ms(target);
        Ok(reports)
    }

    /// Moves virtual time forward by `by` without running `tick`: a host with no timer of
    /// its own (Spin without a CronJob), where only requests make the component run.
    pub fn advance_without_ticking(&mut self, by: Duration) {
        let target = self.now_ms() + u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.clock.advance_to_ms(target);
    }

    fn note_due(&mut self, due: Option<u64>) {
        self.next_due_ms = match (self.next_due_ms, due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}
