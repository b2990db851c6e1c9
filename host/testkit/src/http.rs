//! A plain-HTTP client for tests: one connection pool, and every exchange bounded by
//! [`DEADLINE`].

use crate::DEADLINE;
use anyhow::{Context as _, Result};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// An HTTP/1.1 client over plain TCP.
#[derive(Clone)]
pub struct HttpClient(Client<HttpConnector, Full<Bytes>>);

impl Default for HttpClient {
    fn default() -> Self {
        HttpClient(Client::builder(TokioExecutor::new()).build_http())
    }
}

impl HttpClient {
    /// A client with a pool of its own.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends `request`: the response's head and its whole body, or why there is none (no
    /// connection, or no whole answer within [`DEADLINE`]).
    pub async fn send(
        &self,
        request: http::Request<Full<Bytes>>,
    ) -> Result<(http::response::Parts, Bytes)> {
        let uri = request.uri().clone();
        let exchange = async {
            let response = self.0.request(request).await?;
            let (head, body) = response.into_parts();
            let body = body.collect().await?.to_bytes();
            Ok::<_, anyhow::Error>((head, body))
        };
        tokio::time::timeout(DEADLINE, exchange)
            .await
            .with_context(|| format!("no answer from {uri} within {DEADLINE:?}"))?
    }

    /// `method url` without a body: the status and the body as text.
    pub async fn call(&self, method: &str, url: &str) -> Result<(u16, String)> {
        let request = http::Request::builder()
            .method(method)
            .uri(url)
            .body(Full::new(Bytes::new()))?;
        let (head, body) = self.send(request).await?;
        Ok((
            head.status.as_u16(),
            String::from_utf8_lossy(&body).into_owned(),
        ))
    }
}

/// A request as the tests and the benchmark send them to the component: a bearer token
/// (`Authorization: Bearer <bearer>`, sent even when empty) and a JSON body.
pub fn request(method: &str, uri: &str, bearer: &str, body: &str) -> http::Request<Full<Bytes>> {
    http::Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {bearer}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("a valid request")
}
