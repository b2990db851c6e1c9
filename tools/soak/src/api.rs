//! The soak's HTTP client of the server: every answer counted by operation and status, and
//! every answer that is not its operation's one expected status described.

use crate::shared::lock;
use bytes::Bytes;
use edgehook_runtime::log::now_ms;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// How long the soak waits for any one answer from the server.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How many problem descriptions are kept to show.
const KEEP_PROBLEMS: usize = 20;

/// What a call was for; each has exactly one expected status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// Operator: issue an API key.
    IssueKey,
    /// Partner: create a subscription (with an `Idempotency-Key`).
    Create,
    /// Partner: the same create again (same key, same body).
    CreateReplay,
    /// Partner: a create with an unknown event type.
    CreateInvalid,
    /// Partner: one page of the list.
    List,
    /// Partner: read one of its own active subscriptions.
    Get,
    /// Partner: read one it just deleted.
    GetDeleted,
    /// Partner: delete one.
    Delete,
    /// Operator: publish an event.
    Publish,
    /// Operator: publish again with the same `Idempotency-Key`.
    PublishReplay,
    /// Operator: read subscriptions and deliveries (the ledger).
    OperatorRead,
}

impl Op {
    /// Every operation, in report order.
    pub const ALL: [Op; 11] = [
        Op::IssueKey,
        Op::Create,
        Op::CreateReplay,
        Op::CreateInvalid,
        Op::List,
        Op::Get,
        Op::GetDeleted,
        Op::Delete,
        Op::Publish,
        Op::PublishReplay,
        Op::OperatorRead,
    ];

    /// How the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Op::IssueKey => "POST keys (operator)",
            Op::Create => "POST /v1/webhooks",
            Op::CreateReplay => "POST /v1/webhooks (idempotent replay)",
            Op::CreateInvalid => "POST /v1/webhooks (invalid)",
            Op::List => "GET /v1/webhooks (page)",
            Op::Get => "GET /v1/webhooks/{id}",
            Op::GetDeleted => "GET /v1/webhooks/{id} (deleted)",
            Op::Delete => "DELETE /v1/webhooks/{id}",
            Op::Publish => "POST /internal/v1/events",
            Op::PublishReplay => "POST /internal/v1/events (replay)",
            Op::OperatorRead => "GET /internal/v1/... (ledger)",
        }
    }

    /// The one status it should get.
    pub fn expected(self) -> u16 {
        match self {
            Op::IssueKey | Op::Create | Op::CreateReplay => 201,
            Op::CreateInvalid => 422,
            Op::List | Op::Get | Op::Delete | Op::OperatorRead => 200,
            Op::GetDeleted => 404,
            Op::Publish | Op::PublishReplay => 202,
        }
    }
}

/// Every answer, counted.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Answers per operation and status.
    pub by_op: BTreeMap<(Op, u16), u64>,
    /// Calls that got no answer (connection error or no answer within 30 s).
    pub transport_errors: u64,
    /// Wrong statuses, wrong answers and transport errors, counted.
    pub problems: u64,
    /// The first few of them.
    pub problem_lines: Vec<String>,
}

impl Stats {
    /// Answers with a status other than their operation's.
    pub fn unexpected(&self) -> u64 {
        self.by_op
            .iter()
            .filter(|((op, status), _)| *status != op.expected())
            .map(|(_, n)| n)
            .sum()
    }

    /// Answers with a 5xx.
    pub fn server_errors(&self) -> u64 {
        self.by_op
            .iter()
            .filter(|((_, status), _)| *status >= 500)
            .map(|(_, n)| n)
            .sum()
    }

    /// Every answer.
    pub fn total(&self) -> u64 {
        self.by_op.values().sum()
    }
}

/// An answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Its status.
    pub status: u16,
    /// Whether it said `Idempotent-Replayed: true`.
    pub replayed: bool,
    /// Its body as JSON (`Null` if it is not).
    pub json: Value,
    /// When the request was sent (ms).
    pub sent_ms: u64,
    /// When the answer was read (ms).
    pub resp_ms: u64,
}

/// A keep-alive HTTP client of the server that counts every answer.
pub struct Api {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    stats: Mutex<Stats>,
}

impl Api {
    /// A client of the server at `addr` (`127.0.0.1:port`).
    pub fn new(addr: &str) -> Api {
        Api {
            base: format!("http://{addr}"),
            client: Client::builder(TokioExecutor::new()).build_http(),
            stats: Mutex::default(),
        }
    }

    /// A copy of the counts.
    pub fn stats(&self) -> Stats {
        lock(&self.stats).clone()
    }

    /// Records something wrong with an answer.
    pub fn problem(&self, what: String) {
        let mut stats = lock(&self.stats);
        stats.problems += 1;
        if stats.problem_lines.len() < KEEP_PROBLEMS {
            stats.problem_lines.push(what);
        }
    }

    /// One call. `None` when no answer came (counted as a transport error); an answer with
    /// a status other than the operation's is counted and described.
    pub async fn call(
        &self,
        op: Op,
        method: &str,
        path: &str,
        bearer: &str,
        headers: &[(&str, &str)],
        body: Option<String>,
    ) -> Option<Reply> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("authorization", format!("Bearer {bearer}"));
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let req = match req.body(Full::new(Bytes::from(body.unwrap_or_default()))) {
            Ok(r) => r,
            Err(e) => {
                self.problem(format!("{}: cannot build the request: {e}", op.name()));
                return None;
            }
        };
        let sent_ms = now_ms();
        let answer = tokio::time::timeout(CALL_TIMEOUT, async {
            let resp = self.client.request(req).await?;
            let status = resp.status().as_u16();
            let replayed = resp
                .headers()
                .get("idempotent-replayed")
                .is_some_and(|v| v == "true");
            let body = resp.into_body().collect().await?.to_bytes();
            Ok::<_, anyhow::Error>((status, replayed, body))
        })
        .await;
        let resp_ms = now_ms();
        let (status, replayed, body) = match answer {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                lock(&self.stats).transport_errors += 1;
                self.problem(format!("{} {path}: no answer: {e:#}", op.name()));
                return None;
            }
            Err(_) => {
                lock(&self.stats).transport_errors += 1;
                self.problem(format!("{} {path}: no answer within 30 s", op.name()));
                return None;
            }
        };
        *lock(&self.stats).by_op.entry((op, status)).or_default() += 1;
        if status != op.expected() {
            self.problem(format!(
                "{} {path}: {status} (expected {}): {}",
                op.name(),
                op.expected(),
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            ));
        }
        Some(Reply {
            status,
            replayed,
            json: serde_json::from_slice(&body).unwrap_or(Value::Null),
            sent_ms,
            resp_ms,
        })
    }
}
