//! A store that answers over the network (`KvStore::Remote`, as Redis is) is awaited: while
//! its replies are on their way, the runtime's threads serve other requests.

use bytes::Bytes;
use edgehook_component::storage::keys;
use edgehook_runtime::store::{KvBackend, KvFuture, KvStore, MemoryStore, RemoteKv};
use edgehook_runtime::{HostEnv, Runtime};
use http_body_util::Full;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::watch;

use edgehook_testkit::DEADLINE;

/// An in-memory store whose reads of keys under `prefix` wait while the gate is closed, as
/// a slow network would make them wait; each read it holds is reported on `held`.
pub(crate) struct Gated {
    inner: MemoryStore,
    prefix: &'static str,
    open: watch::Receiver<bool>,
    held: std::sync::mpsc::Sender<()>,
}

impl Gated {
    /// A gated store over an empty one, the gate open: its handle, the gate (`false`
    /// closes it), and the reports of the reads it holds.
    pub(crate) fn new(
        prefix: &'static str,
    ) -> (
        Arc<Self>,
        watch::Sender<bool>,
        std::sync::mpsc::Receiver<()>,
    ) {
        let (gate, open) = watch::channel(true);
        let (held, holds) = std::sync::mpsc::channel();
        let store = Gated {
            inner: MemoryStore::new(),
            prefix,
            open,
            held,
        };
        (Arc::new(store), gate, holds)
    }

    async fn pass(&self, keys: &[&str]) {
        if !keys.iter().any(|k| k.starts_with(self.prefix)) {
            return;
        }
        let mut open = self.open.clone();
        if *open.borrow_and_update() {
            return;
        }
        let _ = self.held.send(());
        let _ = open.wait_for(|o| *o).await;
    }
}

impl RemoteKv for Gated {
    fn get<'a>(&'a self, key: &'a str) -> KvFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            self.pass(&[key]).await;
            self.inner.get(key)
        })
    }

    fn set<'a>(&'a self, key: &'a str, value: &'a [u8]) -> KvFuture<'a, ()> {
        Box::pin(async move { self.inner.set(key, value) })
    }

    fn delete<'a>(&'a self, key: &'a str) -> KvFuture<'a, ()> {
        Box::pin(async move { self.inner.delete(key) })
    }

    fn list_keys<'a>(&'a self, cursor: Option<&'a str>, limit: usize) -> KvFuture<'a, Vec<String>> {
        Box::pin(async move { self.inner.list_keys(cursor, limit) })
    }

    fn increment<'a>(&'a self, key: &'a str, delta: i64) -> KvFuture<'a, i64> {
        Box::pin(async move { self.inner.increment(key, delta) })
    }

    fn compare_and_swap<'a>(
        &'a self,
        key: &'a str,
        expected: Option<&'a [u8]>,
        new: &'a [u8],
    ) -> KvFuture<'a, bool> {
        Box::pin(async move {
            self.pass(&[key]).await;
            self.inner.compare_and_swap(key, expected, new)
        })
    }

    fn get_many<'a>(&'a self, keys: &'a [String]) -> KvFuture<'a, Vec<Option<Vec<u8>>>> {
        Box::pin(async move {
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            self.pass(&refs).await;
            self.inner.get_many(keys)
        })
    }

    fn set_many<'a>(&'a self, entries: &'a [(String, Vec<u8>)]) -> KvFuture<'a, ()> {
        Box::pin(async move { self.inner.set_many(entries) })
    }
}

fn request(method: &str, path: &str, token: &str) -> http::Request<Full<Bytes>> {
    edgehook_testkit::http::request(method, &format!("http://test{path}"), token, "")
}

#[test]
fn requests_waiting_on_a_remote_store_hold_no_thread() {
    // Two threads, four requests waiting on the store: a runtime that blocked a thread per
    // waiting store call could neither hold all four nor answer /healthz meanwhile. The test
    // waits on channels with deadlines of its own (not the runtime's timer, which blocked
    // threads would stop), and shuts the runtime down without waiting for such threads.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let outcome =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| four_wait_one_answers(&rt)));
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn four_wait_one_answers(rt: &tokio::runtime::Runtime) {
    let (store, gate, holds) = Gated::new(keys::API_KEY_PREFIX);
    let config: BTreeMap<String, String> = [("admin_token".to_owned(), "t".to_owned())]
        .into_iter()
        .collect();
    let env = HostEnv {
        kv: KvStore::Remote(store),
        config: Arc::new(config),
        ..HostEnv::in_memory()
    };
    let runtime = Runtime::embedded().expect("runtime");
    let issued = rt
        .block_on(runtime.handle(&env, request("POST", "/internal/v1/clients/acme/keys", "t")))
        .expect("issue");
    let key = issued.data_text("apiKey").expect("apiKey");

    gate.send_replace(false);
    let (done, answers) = std::sync::mpsc::channel();
    let spawn = |path: &'static str, token: String| {
        let (env, done) = (env.clone(), done.clone());
        rt.spawn(async move {
            let resp = runtime.handle(&env, request("GET", path, &token)).await;
            let _ = done.send((path, resp.map(|r| r.status).ok()));
        });
    };
    for _ in 0..4 {
        spawn("/v1/webhooks", key.clone());
    }
    for n in 0..4 {
        holds
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("only {n} of 4 requests are waiting on the store"));
    }
    spawn("/healthz", String::new());
    assert_eq!(
        answers.recv_timeout(DEADLINE),
        Ok(("/healthz", Some(200))),
        "/healthz answers while four requests wait on the store"
    );
    gate.send_replace(true);
    for _ in 0..4 {
        assert_eq!(
            answers.recv_timeout(DEADLINE),
            Ok(("/v1/webhooks", Some(200)))
        );
    }
}
