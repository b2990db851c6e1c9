//! A loopback HTTP/1.1 server for the benchmark's baselines and receivers and for the soak's
//! receivers: keep-alive, `TCP_NODELAY`, each request's body read whole before it is answered.

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// Listens on 127.0.0.1 (a free port) and answers every request with `respond(head, body)`,
/// the body read whole. Returns the port; the server runs until the runtime ends.
pub(crate) async fn serve<F, Fut>(respond: F) -> Result<u16>
where
    F: Fn(http::request::Parts, Bytes) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = hyper::Response<Full<Bytes>>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
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
    });
    Ok(port)
}
