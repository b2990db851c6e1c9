//! Outgoing HTTP from the component (`wasi:http/outgoing-handler`): the [`Outbound`] trait
//! every sender implements (the production one is [`crate::net::NetOutbound`]; the
//! simulator's scripted network is another), and [`NoNetwork`], which sends nothing.

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

/// An outbound that refuses everything: for hosts that must not send.
pub struct NoNetwork;

impl Outbound for NoNetwork {
    fn send(&self, _: http::Request<WasiBody>, _: Option<RequestOptions>) -> OutboundFuture {
        Box::pin(async { Err(HttpError::HttpRequestDenied) })
    }
}
