//! A tiny HTTP `CONNECT` proxy on 127.0.0.1 for the tests of `--egress-proxy`: it records
//! every `CONNECT` (the authority asked for, the `Proxy-Authorization` sent), answers with
//! the status the test sets (200 opens the tunnel: it connects and copies both ways), and
//! counts the TCP connections it accepts. It resolves no names: asked for a name, it
//! answers 502, so a sender that leaves DNS to the proxy fails the test.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// One `CONNECT` request the proxy received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// The authority asked for (`127.0.0.1:8443`, `[::1]:443`).
    pub authority: String,
    /// The `Proxy-Authorization` header's value, if one was sent.
    pub authorization: Option<String>,
}

/// A running test proxy (it runs until its runtime ends).
#[derive(Clone)]
pub struct ConnectProxy {
    /// Its port on 127.0.0.1.
    pub port: u16,
    connects: Arc<Mutex<Vec<Connect>>>,
    accepted: Arc<AtomicUsize>,
    answer: Arc<AtomicU16>,
}

impl ConnectProxy {
    /// Starts a proxy on a free port of 127.0.0.1, on the current tokio runtime, answering
    /// 200 to every `CONNECT`.
    pub async fn start() -> ConnectProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let proxy = ConnectProxy {
            port: listener.local_addr().expect("addr").port(),
            connects: Arc::default(),
            accepted: Arc::default(),
            answer: Arc::new(AtomicU16::new(200)),
        };
        let shared = proxy.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                shared.accepted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(shared.clone().serve(client));
            }
        });
        proxy
    }

    /// Its URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Answer every `CONNECT` from now on with `status` (200: open the tunnel).
    pub fn answer_with(&self, status: u16) {
        self.answer.store(status, Ordering::SeqCst);
    }

    /// Every `CONNECT` received so far, in order.
    pub fn connects(&self) -> Vec<Connect> {
        self.connects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// TCP connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    async fn serve(self, mut client: TcpStream) {
        let mut head = Vec::new();
        let end = loop {
            let mut chunk = [0u8; 1024];
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&chunk[..n]),
            }
            if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if head.len() > 16 * 1024 {
                return;
            }
        };
        let text = String::from_utf8_lossy(&head[..end]).into_owned();
        let mut lines = text.split("\r\n");
        let request_line = lines.next().unwrap_or("");
        let mut words = request_line.split(' ');
        let (method, authority) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        if method != "CONNECT" {
            let _ = client
                .write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                .await;
            return;
        }
        let authorization = lines.find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("proxy-authorization")
                .then(|| value.trim().to_owned())
        });
        self.connects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Connect {
                authority: authority.to_owned(),
                authorization,
            });
        let status = self.answer.load(Ordering::SeqCst);
        if status != 200 {
            let answer = format!(
                "HTTP/1.1 {status} Refused by the test proxy\r\nContent-Length: 0\r\n\
                 Connection: close\r\n\r\n"
            );
            let _ = client.write_all(answer.as_bytes()).await;
            return;
        }
        let upstream = match authority.parse::<SocketAddr>() {
            Ok(addr) => TcpStream::connect(addr).await.ok(),
            Err(_) => None, // a name: this proxy resolves none
        };
        let Some(mut upstream) = upstream else {
            let _ = client
                .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                .await;
            return;
        };
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
            || upstream.write_all(&head[end..]).await.is_err()
        {
            return;
        }
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
}
