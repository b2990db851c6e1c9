//! Outgoing HTTP from the component (`wasi:http/outgoing-handler`): the [`Outbound`] trait
//! every sender implements (the production one is [`crate::net::NetOutbound`]; the
//! simulator's scripted network is another), [`NoNetwork`], which sends nothing, and
//! [`settle_first`], which sends only once the store has settled.

use crate::store::KvStore;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

/// The future an [`Outbound`] returns.
pub type OutboundFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<WasiBody>, HttpError>> + Send>>;

/// Where the component's outgoing requests go.
pub trait Outbound: Send + Sync + 'static {
    /// Sends one request (its body is still streaming from the guest) and returns the
    /// response, or the `wasi:http` error the guest should see.
    fn send(
        &self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> OutboundFuture;
}

/// The wasmtime-wasi-http hooks that hand every outgoing request to an [`Outbound`].
pub(crate) struct Hooks(Arc<dyn Outbound>);

impl Hooks {
    pub(crate) fn new(outbound: Arc<dyn Outbound>) -> Self {
        Hooks(outbound)
    }
}

type IoFuture = Box<dyn Future<Output = Result<(), HttpError>> + Send>;

impl WasiHttpHooks for Hooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: IoFuture,
    ) -> Box<dyn Future<Output = Result<(http::Response<WasiBody>, IoFuture), HttpError>> + Send>
    {
        let sent = self.0.send(request, options);
        Box::new(async move {
            let response = sent.await?;
            Ok((response, Box::new(async { Ok(()) }) as IoFuture))
        })
    }
}

/// Sends through `inner` once the store has settled ([`KvStore::settle`]): nothing leaves
/// the process before what it reflects is as durable as an answer (`serve --fsync-always`:
/// on disk), so a delivery never goes out for an event, or under a claim, that a power loss
/// could still take. One settle covers every write applied before it: the attempts of a
/// batch share one sync. A failed settle fails the attempt (an internal error, retried as
/// any failed attempt) rather than send it.
pub fn settle_first(kv: KvStore, inner: Arc<dyn Outbound>) -> Arc<dyn Outbound> {
    Arc::new(SettleFirst { kv, inner })
}

struct SettleFirst {
    kv: KvStore,
    inner: Arc<dyn Outbound>,
}

impl Outbound for SettleFirst {
    fn send(
        &self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> OutboundFuture {
        let (kv, inner) = (self.kv.clone(), self.inner.clone());
        Box::pin(async move {
            if let Err(e) = kv.settle().await {
                tracing::error!(error = %e, "store sync before an attempt failed");
                return Err(HttpError::InternalError(Some(format!(
                    "store sync failed: {e}"
                ))));
            }
            inner.send(request, options).await
        })
    }
}

/// An outbound that refuses everything: for hosts that must not send.
pub struct NoNetwork;

impl Outbound for NoNetwork {
    fn send(&self, _: http::Request<WasiBody>, _: Option<RequestOptions>) -> OutboundFuture {
        Box::pin(async { Err(HttpError::HttpRequestDenied) })
    }
}
