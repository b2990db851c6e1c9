//! One small HTTP/1.1 server for receiving requests: `edgehook listen`, and the benchmark's and
//! the soak's loopback baselines and receivers. Keep-alive, `TCP_NODELAY`, each request's body
//! read whole before `respond` answers it.

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Answers every request on `listener` with `respond(head, body)`, the body read whole, until
/// accepting fails (its error is returned).
pub(crate) async fn serve_on<F, Fut>(listener: TcpListener, respond: F) -> Result<()>
where
    F: Fn(http::request::Parts, Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = hyper::Response<Full<Bytes>>> + Send + 'static,
{
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let respond = respond.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let respond = respond.clone();
                async move {
                    let (parts, body) = req.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    Ok::<_, std::convert::Infallible>(respond(parts, body).await)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// [`serve_on`] a free port of 127.0.0.1, in a task of its own. Returns the port; the server
/// runs until the runtime ends.
pub(crate) async fn loopback<F, Fut>(respond: F) -> Result<u16>
where
    F: Fn(http::request::Parts, Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = hyper::Response<Full<Bytes>>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(serve_on(listener, respond));
    Ok(port)
}
