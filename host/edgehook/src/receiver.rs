//! The small HTTP/1.1 server `edgehook listen` receives deliveries on. Keep-alive,
//! `TCP_NODELAY`, each request's body read whole (at most [`BODY_LIMIT`]; past it, 413) before
//! `respond` answers it; a head, or an idle keep-alive connection, gets `HEADER_TIMEOUT`
//! (30 s). (The tests', the benchmark's and the soak's receivers are the test kit's:
//! `edgehook_testkit::receiver`.)

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::time::Duration;
use tokio::net::TcpListener;

/// The largest body read; a delivery is at most 256 KiB.
pub const BODY_LIMIT: usize = 1 << 20;
/// How long a request's head may take, and a keep-alive connection may sit idle.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Answers every request on `listener` with `respond(head, body)`, the body read whole, until
/// accepting fails (its error is returned).
pub async fn serve_on<F, Fut>(listener: TcpListener, respond: F) -> Result<()>
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
                    let Ok(body) = http_body_util::Limited::new(body, BODY_LIMIT)
                        .collect()
                        .await
                    else {
                        let mut toobig = hyper::Response::new(Full::new(Bytes::from_static(
                            b"body too large, or cut short",
                        )));
                        *toobig.status_mut() = http::StatusCode::PAYLOAD_TOO_LARGE;
                        return Ok(toobig);
                    };
                    Ok::<_, std::convert::Infallible>(respond(parts, body.to_bytes()).await)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// [`serve_on`] a free port of 127.0.0.1, in a task of its own. Returns the port; the server
    /// runs until the runtime ends.
    async fn loopback<F, Fut>(respond: F) -> Result<u16>
    where
        F: Fn(http::request::Parts, Bytes) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = hyper::Response<Full<Bytes>>> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        tokio::spawn(serve_on(listener, respond));
        Ok(port)
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_413_without_reaching_respond() {
        let port = loopback(|_, body: Bytes| async move {
            hyper::Response::new(Full::new(Bytes::from(format!("read {}", body.len()))))
        })
        .await
        .expect("receiver");
        let send = |len: usize| async move {
            let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect");
            let head = format!(
                "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
            );
            conn.write_all(head.as_bytes()).await.expect("head");
            // The server may answer and close before the whole body is written.
            let _ = conn.write_all(&vec![b'x'; len]).await;
            let mut got = Vec::new();
            let _ = conn.read_to_end(&mut got).await;
            String::from_utf8_lossy(&got).into_owned()
        };
        let fits = send(BODY_LIMIT).await;
        assert!(
            fits.starts_with("HTTP/1.1 200") && fits.ends_with(&format!("read {BODY_LIMIT}")),
            "{fits}"
        );
        let over = send(BODY_LIMIT + 1).await;
        assert!(over.starts_with("HTTP/1.1 413"), "{over}");
    }
}
