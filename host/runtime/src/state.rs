//! The data of one call's `Store`: the WASI and HTTP contexts, the resource table and what
//! [`HostEnv`] connects the instance to. The host side of the imports
//! ([`crate::bindings`], wasmtime-wasi) works on it; [`crate::runtime`] makes a fresh one for
//! every call.

use crate::env::{EventTap, HostEnv, SharedMonotonic, SharedWall};
use crate::outbound::Hooks;
use crate::store::KvStore;
use rand::{Rng as _, SeedableRng, rngs::StdRng};
use std::collections::BTreeMap;
use std::sync::Arc;
use wasmtime::component::ResourceTable;
use wasmtime::{Engine, Store};
use wasmtime_wasi::cli::AsyncStdoutStream;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// The per-call store data.
pub struct State {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    pub(crate) table: ResourceTable,
    pub(crate) kv: KvStore,
    /// The `counters` bucket's store ([`KvStore::counters`]).
    pub(crate) counters: KvStore,
    pub(crate) config: Arc<BTreeMap<String, String>>,
    hooks: Hooks,
    /// The size of the instance's linear memory, in bytes (as the limiter last allowed it).
    pub(crate) memory: usize,
}

impl wasmtime::ResourceLimiter for State {
    /// Any growth the pool allows; the size is kept, so a grown instance is not kept warm.
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.memory = desired;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(true)
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for State {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// The fuel a metered store starts with: far more than any call uses.
pub(crate) const FUEL: u64 = 1 << 50;

/// A fresh store for one call, connected as `env` says.
pub(crate) fn new_store(engine: &Engine, env: &HostEnv) -> Store<State> {
    let mut wasi = WasiCtxBuilder::new();
    match (&env.guest_log, &env.metrics) {
        (Some(log), None) => {
            wasi.stderr(AsyncStdoutStream::new(8192, log.clone()));
        }
        (None, None) => {
            wasi.inherit_stderr();
        }
        // Metrics events are taken off before the log sees them.
        (log, Some(m)) => {
            let tap = EventTap::new(m.clone(), log.clone());
            wasi.stderr(AsyncStdoutStream::new(8192, tap));
        }
    }
    if let Some(clocks) = &env.clock {
        wasi.wall_clock(SharedWall(clocks.wall.clone()))
            .monotonic_clock(SharedMonotonic(clocks.monotonic.clone()));
    }
    if let Some(seed) = &env.seed {
        let mut master = seed.lock().unwrap_or_else(|p| p.into_inner());
        wasi.secure_random(StdRng::seed_from_u64(master.next_u64()))
            .insecure_random(StdRng::seed_from_u64(master.next_u64()))
            .insecure_random_seed(u128::from(master.next_u64()));
    }
    let state = State {
        wasi: wasi.build(),
        http: WasiHttpCtx::new(),
        table: ResourceTable::new(),
        kv: env.kv.clone(),
        counters: env.kv.counters(),
        config: env.config.clone(),
        hooks: Hooks::new(env.outbound.clone()),
        memory: 0,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|state| state as &mut dyn wasmtime::ResourceLimiter);
    // Only a metered engine counts fuel; any other refuses it, and runs unmetered.
    let _ = store.set_fuel(FUEL);
    store
}
