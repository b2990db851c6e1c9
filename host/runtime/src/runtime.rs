//! Running the component: one compiled component per process, pre-instantiated on a pooling
//! allocator, and a fresh `Store` for every call (the component is stateless between calls),
//! or one an earlier call ended with ([`crate::warm`]).
//!
//! A [`HostEnv`] says what the component sees: the key-value backend, config values, clocks,
//! randomness and where outgoing HTTP goes. Simulation and `serve` differ only in their
//! `HostEnv`.

use crate::bindings::{self, ServicePre};
use crate::env::HostEnv;
use crate::state::{FUEL, State, new_store};
use anyhow::{Result, anyhow};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use wasmtime::component::{Component, Linker};
use wasmtime::{
    CallHook, Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store,
};
use wasmtime_wasi_http::WasiHttpView;

/// The component built from `component/` by this crate's build script.
pub const COMPONENT_WASM: &[u8] = include_bytes!(env!("EDGEHOOK_COMPONENT_WASM"));

/// The most [`COMPONENT_WASM`] may weigh: 814 KiB (docs/design/building-and-testing.md,
/// "The size budget"). Checked by a test and printed by the benchmarks.
pub const COMPONENT_SIZE_BUDGET: usize = 816 * 1024;

/// The benchmark baseline: a component that answers every request 200 and does nothing else
/// (`bench/empty`, world `edgehook:webhooks/baseline`).
pub const EMPTY_WASM: &[u8] = include_bytes!(env!("EDGEHOOK_EMPTY_WASM"));

/// The key-value conformance probe (`tests/kvprobe`, world `edgehook:webhooks/kvprobe`): an
/// incoming-handler that checks the host's `wasi:keyvalue` against the rules the component
/// relies on (docs/embedding.md, "Key-value contract"). Run it with [`Baseline::with`].
pub const KVPROBE_WASM: &[u8] = include_bytes!(env!("EDGEHOOK_KVPROBE_WASM"));

/// The web portal (`portal/`, world `edgehook:webhooks/portal`): the operator and partner
/// single-page app, static files under `/portal/`, in a component of its own (the service
/// component's size budget holds). It exports only `wasi:http/incoming-handler`, so it runs
/// the baseline's way: [`Baseline::portal`]. `serve` sends `/portal` and `/portal/...` to it,
/// as `spin.toml` does.
pub const PORTAL_WASM: &[u8] = include_bytes!(env!("EDGEHOOK_PORTAL_WASM"));

/// The most [`PORTAL_WASM`] may weigh: 256 KiB, the app's files included (checked by a test).
pub const PORTAL_SIZE_BUDGET: usize = 256 * 1024;

/// Instances the pooling allocator keeps slots for.
pub const POOL_INSTANCES: u32 = 256;
/// Tables one instance of the component takes: its module's and the indirect-call shim's
/// (checked against the embedded guests by a test). The pool holds this many per instance,
/// so all [`POOL_INSTANCES`] can run at once (with one table per instance, the 129th
/// failed to instantiate, and `serve` answered 500 where it means 503).
const TABLES_PER_INSTANCE: u32 = 2;
/// Linear memories one instance takes.
const MEMORIES_PER_INSTANCE: u32 = 1;
/// Core module instances one instance takes (its module, the shim, the fix-up; room for one
/// more).
const CORE_INSTANCES_PER_INSTANCE: u32 = 4;
/// Memory (and table) bytes a slot keeps mapped after its instance ends, reset in place;
/// with `PAGEMAP_SCAN` (Linux 6.7+) only the pages the instance touched are reset. The
/// component's linear memory starts at this size (`component/build.rs`; checked by a test).
pub(crate) const KEEP_RESIDENT_BYTES: usize = 2 << 20;
/// Linear memory one instance may grow to.
const MAX_MEMORY_BYTES: usize = 256 << 20;

/// A response from the component, body collected.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers (lower-case names).
    pub headers: Vec<(String, String)>,
    /// Body bytes.
    pub body: Bytes,
}

impl HttpResponse {
    /// The first value of a header (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// A text field of the envelope's `data` (e.g. a new key's `apiKey`, a new subscription's
    /// `id`), if the body has one.
    pub fn data_text(&self, field: &str) -> Option<String> {
        self.json()["data"][field].as_str().map(str::to_owned)
    }
}

pub use edgehook_component::delivery::TickReport;
pub use edgehook_component::model::events::{PublishError, PublishReceipt};

/// An engine with the pooling allocator, the component compiled in it, and an
/// `InstancePre` linked against every host import.
/// `metered`: the engine counts the guest's work in fuel ([`Runtime::handle_metered`]).
/// `keep_resident`: the memory bytes a slot keeps when its instance ends
/// ([`KEEP_RESIDENT_BYTES`] for instances of one call; 0 for [`Runtime::serving`]'s).
fn link(
    wasm: &[u8],
    metered: bool,
    keep_resident: usize,
) -> Result<(Engine, wasmtime::component::InstancePre<State>)> {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(POOL_INSTANCES)
        .total_core_instances(POOL_INSTANCES * CORE_INSTANCES_PER_INSTANCE)
        .total_memories(POOL_INSTANCES * MEMORIES_PER_INSTANCE)
        .total_tables(POOL_INSTANCES * TABLES_PER_INSTANCE)
        .max_memory_size(MAX_MEMORY_BYTES)
        .pagemap_scan(wasmtime::Enabled::Auto)
        .linear_memory_keep_resident(keep_resident)
        .table_keep_resident(KEEP_RESIDENT_BYTES);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        .consume_fuel(metered);
    // `EDGEHOOK_PERFMAP=1` writes /tmp/perf-<pid>.map so `perf report` names guest functions.
    if std::env::var_os("EDGEHOOK_PERFMAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    let engine = Engine::new(&config)?;
    let component = Component::new(&engine, wasm)
        .map_err(|e| anyhow::Error::from(e).context("compiling the component"))?;
    let mut linker = Linker::<State>::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    bindings::own_request_options(&mut linker)?;
    bindings::add_to_linker(&mut linker)?;
    let pre = linker.instantiate_pre(&component)?;
    Ok((engine, pre))
}

/// The response channel of one incoming request.
type ResponseReceiver = tokio::sync::oneshot::Receiver<
    Result<
        hyper::Response<wasmtime_wasi_http::p2::body::HyperOutgoingBody>,
        wasmtime_wasi_http::p2::bindings::http::types::ErrorCode,
    >,
>;

/// Puts an incoming request and its response outparam into the store's table.
fn incoming(
    store: &mut Store<State>,
    req: http::Request<Full<Bytes>>,
) -> Result<(
    wasmtime::component::Resource<wasmtime_wasi_http::p2::types::HostIncomingRequest>,
    wasmtime::component::Resource<wasmtime_wasi_http::p2::types::HostResponseOutparam>,
    ResponseReceiver,
)> {
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let req = store.data_mut().http().new_incoming_request(
        wasmtime_wasi_http::p2::bindings::http::types::Scheme::Http,
        req,
    )?;
    let out = store.data_mut().http().new_response_outparam(sender)?;
    Ok((req, out, receiver))
}

/// Reads a component's response whole.
async fn collect(
    response: hyper::Response<wasmtime_wasi_http::p2::body::HyperOutgoingBody>,
) -> Result<HttpResponse> {
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| anyhow!("reading the component's response body: {e:?}"))?
        .to_bytes();
    Ok(HttpResponse {
        status: parts.status.as_u16(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
    })
}

/// What an invocation still had to do when its response was complete.
pub enum Rest {
    /// It had ended: how.
    Ended(wasmtime::Result<()>),
    /// It is still running, in this task.
    Running(tokio::task::JoinHandle<wasmtime::Result<()>>),
}

impl Rest {
    /// Waits for the invocation to end; an error if it trapped or its task failed.
    pub async fn finish(self) -> Result<()> {
        match self {
            Rest::Ended(outcome) => outcome.map_err(anyhow::Error::from),
            Rest::Running(task) => task.await?.map_err(anyhow::Error::from),
        }
    }
}

/// The baseline component ([`EMPTY_WASM`]) run exactly the way [`Runtime`] runs ours: same
/// engine configuration, same linker, a fresh store per call.
pub struct Baseline {
    engine: Engine,
    pre: wasmtime_wasi_http::p2::bindings::ProxyPre<State>,
}

impl Baseline {
    /// Compiles and links the baseline component.
    pub fn new() -> Result<Self> {
        Self::build(false)
    }

    /// The baseline in an engine that counts fuel ([`Runtime::metered`]).
    pub fn metered() -> Result<Self> {
        Self::build(true)
    }

    /// Another component run the baseline's way: one that exports only
    /// `wasi:http/incoming-handler` and imports only what the host provides, e.g. the
    /// key-value probe ([`KVPROBE_WASM`]).
    pub fn with(wasm: &[u8]) -> Result<Self> {
        let (engine, pre) = link(wasm, false, KEEP_RESIDENT_BYTES)?;
        let pre = wasmtime_wasi_http::p2::bindings::ProxyPre::new(pre)?;
        Ok(Baseline { engine, pre })
    }

    /// The portal ([`PORTAL_WASM`]), compiled and linked once per process: the host's second
    /// pre-instantiated component, beside [`Runtime::embedded`]. Its engine and pool are its
    /// own; a request gets a fresh instance, as the service's do.
    pub fn portal() -> Result<&'static Baseline> {
        static PORTAL: OnceLock<Result<Baseline, String>> = OnceLock::new();
        PORTAL
            .get_or_init(|| Baseline::with(PORTAL_WASM).map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow!("{e}"))
    }

    fn build(metered: bool) -> Result<Self> {
        let (engine, pre) = link(EMPTY_WASM, metered, KEEP_RESIDENT_BYTES)?;
        let pre = wasmtime_wasi_http::p2::bindings::ProxyPre::new(pre)?;
        Ok(Baseline { engine, pre })
    }

    /// One request through the metered baseline: the response and what it did.
    pub async fn handle_metered(
        &self,
        env: &HostEnv,
        req: http::Request<Full<Bytes>>,
    ) -> Result<(HttpResponse, Work)> {
        let mut store = new_store(&self.engine, env);
        let host_calls = count_host_calls(&mut store);
        let (req, out, receiver) = incoming(&mut store, req)?;
        let proxy = self.pre.instantiate_async(&mut store).await?;
        let call = tokio::spawn(async move {
            let outcome = proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut store, req, out)
                .await;
            (outcome, store)
        });
        metered_end(receiver, call, host_calls).await
    }

    /// One request through the baseline, response collected.
    pub async fn handle(
        &self,
        env: &HostEnv,
        req: http::Request<Full<Bytes>>,
    ) -> Result<HttpResponse> {
        let mut store = new_store(&self.engine, env);
        let (req, out, receiver) = incoming(&mut store, req)?;
        let proxy = self.pre.instantiate_async(&mut store).await?;
        // The guest writes its body while the host reads it: a body larger than the stream's
        // buffer (the portal's files) would wait forever for a reader that waits for the call.
        let call = tokio::spawn(async move {
            proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut store, req, out)
                .await
        });
        let response = match receiver.await {
            Ok(Ok(response)) => collect(response).await?,
            Ok(Err(code)) => return Err(anyhow!("the component answered with error {code:?}")),
            Err(_) => {
                call.await?
                    .map_err(|e| anyhow::Error::from(e).context("the component trapped"))?;
                return Err(anyhow!("the component never set a response"));
            }
        };
        call.await?
            .map_err(|e| anyhow::Error::from(e).context("the component trapped"))?;
        Ok(response)
    }

    /// Instantiates the baseline and drops it at once.
    pub async fn instantiate_only(&self, env: &HostEnv) -> Result<()> {
        let mut store = new_store(&self.engine, env);
        self.pre.instantiate_async(&mut store).await?;
        Ok(())
    }
}

/// What one metered invocation did, counted exactly: the same build doing the same work
/// counts the same on any machine, so builds compare exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// The guest's own work: wasmtime's count of the WebAssembly operators it ran.
    pub fuel: u64,
    /// Calls from the guest into the host: every import (a store operation, a clock read,
    /// a stream write, a resource dropped, ...) and wasmtime's own libcalls (a memory
    /// growing, a table's lazy entry, ...). Each pays the component model's lifting and
    /// lowering, which fuel does not count.
    pub host_calls: u64,
}

/// Counts the store's calls into the host from now on (wasmtime's call hook).
fn count_host_calls(store: &mut Store<State>) -> Arc<AtomicU64> {
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    store.call_hook(move |_, hook| {
        if matches!(hook, CallHook::CallingHost) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    calls
}

/// The end of a metered call: the response, read whole while the invocation runs in `call`,
/// and what the invocation did once it has ended.
async fn metered_end(
    receiver: ResponseReceiver,
    call: tokio::task::JoinHandle<(wasmtime::Result<()>, Store<State>)>,
    host_calls: Arc<AtomicU64>,
) -> Result<(HttpResponse, Work)> {
    let response = match receiver.await {
        Ok(Ok(response)) => collect(response).await?,
        Ok(Err(code)) => return Err(anyhow!("the component answered with error {code:?}")),
        Err(_) => return Err(anyhow!("the component never set a response")),
    };
    let (outcome, store) = call.await?;
    outcome.map_err(|e| anyhow::Error::from(e).context("the component trapped"))?;
    let work = Work {
        fuel: FUEL - store.get_fuel()?,
        host_calls: host_calls.load(Ordering::Relaxed),
    };
    Ok((response, work))
}

/// The compiled component, ready to instantiate (a clone shares it).
#[derive(Clone)]
pub struct Runtime {
    engine: Engine,
    pre: ServicePre<State>,
}

impl Runtime {
    /// Compiles `wasm` and links it against the host's imports.
    pub fn new(wasm: &[u8]) -> Result<Self> {
        Self::build(wasm, false, KEEP_RESIDENT_BYTES)
    }

    /// Compiles `wasm` in an engine that counts the guest's work in fuel (wasmtime's count
    /// of the WebAssembly operators it executes), for [`Runtime::handle_metered`]. Metering
    /// makes the guest slower: this is for measuring, never for serving.
    pub fn metered(wasm: &[u8]) -> Result<Self> {
        Self::build(wasm, true, KEEP_RESIDENT_BYTES)
    }

    fn build(wasm: &[u8], metered: bool, keep_resident: usize) -> Result<Self> {
        let (engine, pre) = link(wasm, metered, keep_resident)?;
        Ok(Runtime {
            engine,
            pre: ServicePre::new(pre)?,
        })
    }

    /// One HTTP request through a [`Runtime::metered`] runtime, run to the end of its
    /// invocation (attempts run after the response included): the response, and what the
    /// invocation did ([`Work`]: the guest's fuel and its calls into the host). Neither
    /// depends on the machine's speed or load: the same build doing the same work counts
    /// the same, so builds compare exactly.
    pub async fn handle_metered(
        &self,
        env: &HostEnv,
        req: http::Request<Full<Bytes>>,
    ) -> Result<(HttpResponse, Work)> {
        let mut store = self.store(env);
        let host_calls = count_host_calls(&mut store);
        let (req, out, receiver) = incoming(&mut store, req)?;
        let instance = self.pre.instantiate_async(&mut store).await?;
        // The body is read while the guest writes it, so the invocation runs in a task.
        let call = tokio::spawn(async move {
            let outcome = instance
                .wasi_http_incoming_handler()
                .call_handle(&mut store, req, out)
                .await;
            (outcome, store)
        });
        metered_end(receiver, call, host_calls).await
    }

    /// Instantiates the component and drops it at once: the fixed cost every call pays.
    pub async fn instantiate_only(&self, env: &HostEnv) -> Result<()> {
        let mut store = self.store(env);
        self.pre.instantiate_async(&mut store).await?;
        Ok(())
    }

    /// The embedded component, compiled once per process, for calls that each take an
    /// instance of their own (the simulator, tests, tools). A server that keeps instances
    /// between calls runs on [`Runtime::serving`].
    pub fn embedded() -> Result<&'static Runtime> {
        static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
        Self::once(&RUNTIME, KEEP_RESIDENT_BYTES)
    }

    /// The embedded component for a server that keeps instances between calls
    /// ([`Runtime::warm`]), compiled once per process: a pool slot hands its memory's pages
    /// back when its instance ends. A kept instance's heap spreads over its memory in its
    /// many calls; kept in place (as [`Runtime::embedded`]'s slots keep theirs, for
    /// instances of one call that touch little), every slot a kept instance ever held stayed
    /// resident, about 1.1 MiB each. Kept instances seldom end, so handing back costs
    /// nothing measurable (alternating runs of the delivery section).
    pub fn serving() -> Result<&'static Runtime> {
        static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
        Self::once(&RUNTIME, 0)
    }

    /// The embedded component compiled into `cell` on first use, its slots keeping
    /// `keep_resident` bytes ([`link`]); a failure is kept too, and returned to every caller.
    fn once(
        cell: &'static OnceLock<Result<Runtime, String>>,
        keep_resident: usize,
    ) -> Result<&'static Runtime> {
        cell.get_or_init(|| {
            Runtime::build(COMPONENT_WASM, false, keep_resident).map_err(|e| format!("{e:#}"))
        })
        .as_ref()
        .map_err(|e| anyhow!("{e}"))
    }

    fn store(&self, env: &HostEnv) -> Store<State> {
        new_store(&self.engine, env)
    }

    /// Sends one HTTP request to the component's `wasi:http/incoming-handler` and collects
    /// the response, then waits for the invocation to end (the component may keep working
    /// after its response is complete, e.g. running attempt 1 of an accepted event).
    pub async fn handle(
        &self,
        env: &HostEnv,
        req: http::Request<Full<Bytes>>,
    ) -> Result<HttpResponse> {
        let (response, rest) = self.handle_detached(env, req).await?;
        rest.finish().await?;
        Ok(response)
    }

    /// Like [`Runtime::handle`], but returns as soon as the response is complete; what the
    /// invocation still has to do is the returned [`Rest`].
    ///
    /// The invocation runs in the caller's task: most calls have ended by the time their
    /// response is complete, and only an invocation still working then (attempt 1 of an
    /// accepted event) is moved to a task of its own. No thread hand-off on the common path.
    pub async fn handle_detached(
        &self,
        env: &HostEnv,
        req: http::Request<Full<Bytes>>,
    ) -> Result<(HttpResponse, Rest)> {
        let live = self.instantiate(env).await?;
        respond(live, req, |_, _| ()).await
    }

    /// Calls the `events.publish` export.
    pub async fn publish(
        &self,
        env: &HostEnv,
        event_type: &str,
        load: &[u8],
    ) -> Result<Result<PublishReceipt, PublishError>> {
        use bindings::events::Error;
        let mut store = self.store(env);
        let instance = self.pre.instantiate_async(&mut store).await?;
        let result = instance
            .edgehook_webhooks_events()
            .call_publish(&mut store, event_type, load)
            .await?;
        Ok(match result {
            Ok(r) => Ok(PublishReceipt {
                event_id: edgehook_component::model::ids::EventId::trusted(r.event_id),
                deliveries: r.deliveries,
                next_due_ms: r.next_due_ms,
                replayed: false,
            }),
            Err(Error::UnknownEventType(t)) => Err(PublishError::UnknownEventType(t)),
            Err(Error::InvalidLoad(m)) => Err(PublishError::InvalidLoad(m)),
            Err(Error::StoreUnavailable(m)) => Err(PublishError::StoreUnavailable(m)),
        })
    }

    /// Calls the `scheduler.tick` export.
    pub async fn tick(&self, env: &HostEnv) -> Result<TickReport> {
        let mut live = self.instantiate(env).await?;
        Ok(tick_on(&mut live).await?)
    }

    /// A fresh store for `env` with the component instantiated in it.
    pub(crate) async fn instantiate(&self, env: &HostEnv) -> Result<Live> {
        let mut store = self.store(env);
        let instance = self.pre.instantiate_async(&mut store).await?;
        Ok(Live { store, instance })
    }
}

/// A store with the component instantiated in it: one call's, or kept for the next
/// ([`crate::warm`]).
pub(crate) struct Live {
    pub(crate) store: Store<State>,
    pub(crate) instance: bindings::Service,
}

/// One HTTP request through `live`'s instance ([`Runtime::handle_detached`]); `end` gets the
/// store and instance back when the invocation has ended, and whether it ended without a
/// trap. An invocation cut off (its future dropped) never reaches `end`.
pub(crate) async fn respond(
    mut live: Live,
    req: http::Request<Full<Bytes>>,
    end: impl FnOnce(Live, bool) + Send + 'static,
) -> Result<(HttpResponse, Rest)> {
    let (req, out, mut receiver) = incoming(&mut live.store, req)?;
    let mut call = Box::pin(async move {
        let outcome = live
            .instance
            .wasi_http_incoming_handler()
            .call_handle(&mut live.store, req, out)
            .await;
        end(live, outcome.is_ok());
        outcome
    });
    // Run the guest until it has set the response head (or ended).
    let (head, mut ended) = tokio::select! {
        biased;
        head = &mut receiver => (head, None),
        outcome = &mut call => (receiver.await, Some(outcome)),
    };
    let response = match head {
        Ok(Ok(resp)) => resp,
        Ok(Err(code)) => return Err(anyhow!("the component answered with error {code:?}")),
        Err(_) => {
            let outcome = match ended {
                Some(outcome) => outcome,
                None => call.await,
            };
            return Err(match outcome {
                Ok(()) => anyhow!("the component never set a response"),
                Err(e) => anyhow::Error::from(e).context("the component trapped"),
            });
        }
    };
    // The guest streams the body after the head: keep running it while reading.
    let body = collect(response);
    tokio::pin!(body);
    let response = match ended {
        Some(_) => body.await?,
        None => tokio::select! {
            biased;
            response = &mut body => response?,
            outcome = &mut call => {
                ended = Some(outcome);
                body.await?
            }
        },
    };
    let rest = match ended {
        Some(outcome) => Rest::Ended(outcome),
        None => Rest::Running(tokio::spawn(call)),
    };
    Ok((response, rest))
}

/// One `scheduler.tick` through `live`'s instance.
pub(crate) async fn tick_on(live: &mut Live) -> wasmtime::Result<TickReport> {
    let r = live
        .instance
        .edgehook_webhooks_scheduler()
        .call_tick(&mut live.store)
        .await?;
    Ok(TickReport {
        attempted: r.attempted,
        succeeded: r.succeeded,
        failed: r.failed,
        next_due_ms: r.next_due_ms,
        // The rest of the core's report reaches a host as the tick's metrics event.
        ..TickReport::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool's sizes per instance cover what every embedded guest takes.
    #[test]
    fn the_pool_has_room_for_what_each_guest_takes() {
        let engine = Engine::default();
        for (name, wasm) in [
            ("component", COMPONENT_WASM),
            ("empty", EMPTY_WASM),
            ("kvprobe", KVPROBE_WASM),
            ("portal", PORTAL_WASM),
        ] {
            let component = Component::new(&engine, wasm).expect("compiles");
            let needs = component.resources_required().expect("known");
            assert!(
                needs.num_tables <= TABLES_PER_INSTANCE,
                "{name}: {} tables",
                needs.num_tables
            );
            assert!(
                needs.num_memories <= MEMORIES_PER_INSTANCE,
                "{name}: {} memories",
                needs.num_memories
            );
        }
    }

    /// The component's linear memory starts at the bytes each pool slot keeps resident
    /// (`component/build.rs`): a request finds the memory it needs without growing it (a
    /// grown memory is shrunk back with `mprotect` for the slot's next instance: a TLB
    /// flush on every core), and the pages it touched are reset in place.
    #[test]
    fn the_components_memory_starts_at_what_a_slot_keeps_resident() {
        let engine = Engine::default();
        let component = Component::new(&engine, COMPONENT_WASM).expect("compiles");
        let pages = component.resources_required().expect("known");
        let initial = pages.max_initial_memory_size.expect("a memory") * 65_536;
        assert_eq!(
            initial, KEEP_RESIDENT_BYTES as u64,
            "initial memory {initial} B"
        );
    }

    /// Every one of the [`POOL_INSTANCES`] slots can hold a live instance at once.
    #[test]
    fn all_the_pools_instances_can_run_at_once() {
        let rt = Runtime::embedded().expect("runtime");
        let env = HostEnv::in_memory();
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio");
        tokio.block_on(async {
            let mut live = Vec::new();
            for n in 0..POOL_INSTANCES {
                let mut store = rt.store(&env);
                let instance = rt.pre.instantiate_async(&mut store).await;
                assert!(instance.is_ok(), "instance {n}: {:?}", instance.err());
                live.push((store, instance));
            }
        });
    }
}
