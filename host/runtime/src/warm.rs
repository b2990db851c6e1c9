//! Instances kept between calls: a [`Warm`] runs HTTP requests and ticks on instances of
//! the component that earlier calls of the same [`HostEnv`] ended with, and instantiates
//! only when none is free.
//!
//! The component keeps no state of its own between calls (everything is in the store; it
//! keeps only what the host cannot change under an instance: its settings, its bucket's
//! handle, random bytes drawn ahead), so a call on a used instance does what it would on a
//! fresh one. Creating an instance and resetting its slot afterwards was about a tenth of
//! `serve`'s CPU per event at fan-out 1 (a profile). An instance goes back to the idle ones only when its call
//! ended without a trap, its linear memory never grew past its initial size, it holds no
//! more host resources than after its first call (nothing leaked from a call to the next),
//! and it has served fewer than [`MAX_CALLS`] calls; otherwise it is dropped, as every
//! instance was before. "No more host resources" allows [`LEFT_OVER`] more, for what the
//! guest opens for good in a later call than its first (its stderr stream and that stream's
//! pollable). The `request-options` of every attempt, which wasmtime-wasi-http 48 leaves in
//! the table, are deleted by `crate::bindings::own_request_options`.

use crate::env::HostEnv;
use crate::runtime::{self, HttpResponse, Live, Rest, Runtime, TickReport};
use anyhow::Result;
use bytes::Bytes;
use http_body_util::Full;
use std::sync::{Arc, Mutex, PoisonError};

/// Idle instances kept at most: as many as the calls a busy server has running at once
/// (an instance is held while its response streams out and its attempts wait for their
/// receivers, so 32 connections keep more than 32 instances busy). With 16, a tenth of the
/// calls of a list (50) at 32 connections dropped their instance and the next one made a
/// new one.
pub const KEEP: usize = 64;
/// Calls one instance serves at most before it is dropped.
pub const MAX_CALLS: u32 = 10_000;
/// Host resources an instance may hold beyond what its first call left (module doc).
pub const LEFT_OVER: usize = 8;

/// An instance between calls, with what its first call left in its store.
struct Idle {
    live: Live,
    calls: u32,
    resources: usize,
}

/// The component's instances for one [`HostEnv`], kept between calls.
pub struct Warm {
    runtime: Runtime,
    env: HostEnv,
    idle: Arc<Mutex<Vec<Idle>>>,
}

impl Runtime {
    /// Calls on `env` that reuse the instances earlier ones ended with ([`crate::warm`]).
    pub fn warm(&self, env: HostEnv) -> Warm {
        Warm {
            runtime: self.clone(),
            env,
            idle: Arc::default(),
        }
    }
}

impl Warm {
    /// [`Runtime::handle_detached`] on a kept instance (or a fresh one when none is idle).
    pub async fn handle_detached(
        &self,
        req: http::Request<Full<Bytes>>,
    ) -> Result<(HttpResponse, Rest)> {
        let (live, calls, resources) = self.take().await?;
        let idle = self.idle.clone();
        runtime::respond(live, req, move |live, ok| {
            give_back(&idle, live, ok, calls, resources);
        })
        .await
    }

    /// [`Runtime::tick`] on a kept instance (or a fresh one when none is idle).
    pub async fn tick(&self) -> Result<TickReport> {
        let (mut live, calls, resources) = self.take().await?;
        let outcome = runtime::tick_on(&mut live).await;
        give_back(&self.idle, live, outcome.is_ok(), calls, resources);
        Ok(outcome?)
    }

    /// Idle instances now (tests).
    pub fn idle(&self) -> usize {
        lock(&self.idle).len()
    }

    /// An idle instance, or a fresh one; its calls so far and its resources after the first.
    async fn take(&self) -> Result<(Live, u32, usize)> {
        if let Some(idle) = lock(&self.idle).pop() {
            return Ok((idle.live, idle.calls, idle.resources));
        }
        Ok((self.runtime.instantiate(&self.env).await?, 0, usize::MAX))
    }
}

/// Keeps `live` for a next call if it may serve one (module doc), else drops it.
fn give_back(idle: &Mutex<Vec<Idle>>, mut live: Live, ok: bool, calls: u32, resources: usize) {
    let calls = calls + 1;
    let data = live.store.data_mut();
    let now = data.table.iter_mut().count();
    // The first call sets the count: what the guest keeps open across calls (its stderr).
    let resources = if calls == 1 { now } else { resources };
    let reusable = ok
        && calls < MAX_CALLS
        && now <= resources.saturating_add(LEFT_OVER)
        && data.memory <= runtime::KEEP_RESIDENT_BYTES;
    if reusable {
        let mut idle = lock(idle);
        if idle.len() < KEEP {
            idle.push(Idle {
                live,
                calls,
                resources,
            });
            return;
        }
    }
    // Dropped here, outside the lock: resetting its slot takes a while.
    drop(live);
}

fn lock(idle: &Mutex<Vec<Idle>>) -> std::sync::MutexGuard<'_, Vec<Idle>> {
    idle.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> HostEnv {
        HostEnv::in_memory()
    }

    fn get(path: &str) -> http::Request<Full<Bytes>> {
        http::Request::get(format!("http://localhost{path}"))
            .body(Full::new(Bytes::new()))
            .expect("request")
    }

    async fn call(warm: &Warm, path: &str) -> u16 {
        let (response, rest) = warm.handle_detached(get(path)).await.expect("call");
        rest.finish().await.expect("ended");
        response.status
    }

    #[tokio::test]
    async fn calls_one_after_another_run_on_one_kept_instance() {
        let warm = Runtime::embedded().expect("runtime").warm(env());
        for _ in 0..5 {
            assert_eq!(call(&warm, "/healthz").await, 200);
            assert_eq!(warm.idle(), 1, "the instance is kept for the next call");
        }
        warm.tick().await.expect("tick");
        assert_eq!(warm.idle(), 1, "a tick runs on it too");
        // A kept instance answers as a fresh one: a 404 and a 401 after a 200.
        assert_eq!(call(&warm, "/nowhere").await, 404);
        assert_eq!(call(&warm, "/v1/webhooks").await, 401);
        assert_eq!(warm.idle(), 1);
    }

    /// A kept instance keeps the settings its first call read (docs/design/host.md): the
    /// configuration a host changes under it applies to instances made after the change.
    #[tokio::test]
    async fn a_kept_instance_keeps_the_settings_of_its_first_call() {
        let admin = |token: &str| HostEnv {
            config: Arc::new([("admin_token".to_owned(), token.to_owned())].into()),
            ..env()
        };
        let mint = |token: &str| {
            http::Request::post("http://localhost/internal/v1/clients/c/keys")
                .header("authorization", format!("Bearer {token}"))
                .body(Full::new(Bytes::new()))
                .expect("request")
        };
        async fn status(warm: &Warm, req: http::Request<Full<Bytes>>) -> u16 {
            let (response, rest) = warm.handle_detached(req).await.expect("call");
            rest.finish().await.expect("ended");
            response.status
        }
        let rt = Runtime::embedded().expect("runtime");
        let warm = rt.warm(admin("first"));
        assert_eq!(status(&warm, mint("first")).await, 201);
        // The host's configuration changes under the kept instance.
        lock(&warm.idle)[0].live.store.data_mut().config = admin("second").config;
        assert_eq!(
            status(&warm, mint("first")).await,
            201,
            "its settings are kept"
        );
        assert_eq!(status(&warm, mint("second")).await, 401);
        // An instance made after the change reads the new configuration.
        let fresh = rt.warm(admin("second"));
        assert_eq!(status(&fresh, mint("second")).await, 201);
        assert_eq!(status(&fresh, mint("first")).await, 401);
    }

    /// Reads every delivery whole and answers 200.
    struct Accepts;

    impl crate::outbound::Outbound for Accepts {
        fn send(
            &self,
            request: http::Request<wasmtime_wasi_http::WasiBody>,
            _: Option<wasmtime_wasi_http::RequestOptions>,
        ) -> crate::outbound::OutboundFuture {
            use http_body_util::BodyExt as _;
            Box::pin(async move {
                request.into_body().collect().await?;
                let body = Full::new(Bytes::new())
                    .map_err(|never| match never {})
                    .boxed_unsync();
                Ok(http::Response::new(body))
            })
        }
    }

    /// An instance that sent attempts holds no more host resources than after its first
    /// call: `request-options` handed to `outgoing-handler.handle` are deleted
    /// (`bindings::own_request_options`), so it is kept as long as any other.
    #[tokio::test]
    async fn an_instance_that_sends_leaves_nothing_behind_and_is_kept() {
        let config = [
            ("admin_token", "op"),
            ("allow_private_targets", "true"),
            ("allow_http", "true"),
        ];
        let env = HostEnv {
            config: Arc::new(config.map(|(k, v)| (k.to_owned(), v.to_owned())).into()),
            outbound: Arc::new(Accepts),
            ..env()
        };
        let rt = Runtime::embedded().expect("runtime");
        let json = |method: &str, path: &str, auth: &str, body: &str| {
            http::Request::builder()
                .method(method)
                .uri(format!("http://localhost{path}"))
                .header("authorization", format!("Bearer {auth}"))
                .header("content-type", "application/json")
                .header("x-service-event", "load.created")
                .body(Full::new(Bytes::from(body.to_owned())))
                .expect("request")
        };
        let key = rt
            .handle(&env, json("POST", "/internal/v1/clients/c/keys", "op", ""))
            .await
            .expect("key")
            .data_text("apiKey")
            .expect("apiKey");
        let sub = r#"{"url":"http://127.0.0.1:9/hook","eventTypes":["load.created"]}"#;
        let created = rt
            .handle(&env, json("POST", "/v1/webhooks", &key, sub))
            .await;

        assert_eq!(created.expect("create").status, 201);
        let warm = rt.warm(env);
        let mut left = Vec::new();
        for n in 0..3 {
            let load = format!(r#"{{"id":"L-{n}","status":"ASSIGNED"}}"#);
            let publish = json("POST", "/internal/v1/events", "op", &load);
            let (response, rest) = warm.handle_detached(publish).await.expect("publish");
            assert_eq!(response.status, 202, "{:?}", response.body);
            rest.finish().await.expect("attempt 1 sent");
            let mut idle = lock(&warm.idle);
            assert_eq!(idle.len(), 1, "publish {n}: the instance is kept");
            left.push(idle[0].live.store.data_mut().table.iter_mut().count());
        }
        assert_eq!(left, vec![left[0]; 3], "table entries after each publish");
    }

    /// Whether a fresh instance given back with these figures is kept, with `extra` host
    /// resources pushed into its table.
    async fn kept(ok: bool, calls: u32, resources: usize, memory: usize, extra: usize) -> bool {
        let rt = Runtime::embedded().expect("runtime");
        let mut live = rt.instantiate(&env()).await.expect("instance");
        live.store.data_mut().memory = memory;
        for _ in 0..extra {
            live.store.data_mut().table.push(()).expect("push");
        }
        let idle = Mutex::new(Vec::new());
        give_back(&idle, live, ok, calls, resources);
        idle.into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
            == 1
    }

    /// Each rule of the module doc, on its own, drops the instance instead of keeping it.
    #[tokio::test]
    async fn an_instance_that_trapped_grew_leaked_or_served_enough_is_not_kept() {
        let fine = runtime::KEEP_RESIDENT_BYTES;
        assert!(
            kept(true, 1, 0, fine, 0).await,
            "a call that ended well is kept"
        );
        assert!(!kept(false, 1, 0, fine, 0).await, "a trap");
        assert!(!kept(true, 1, 0, fine + 65_536, 0).await, "a grown memory");
        assert!(
            !kept(true, MAX_CALLS - 1, 0, fine, 0).await,
            "its last call"
        );
        // The first call's count is whatever it left; later calls may leave LEFT_OVER more.
        assert!(
            kept(true, 0, usize::MAX, fine, LEFT_OVER + 1).await,
            "the first call"
        );
        assert!(kept(true, 1, 0, fine, LEFT_OVER).await, "LEFT_OVER more");
        assert!(
            !kept(true, 1, 0, fine, LEFT_OVER + 1).await,
            "more than LEFT_OVER"
        );
    }
}
