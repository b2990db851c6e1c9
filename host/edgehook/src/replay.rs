//! `edgehook replay`: starts a replay job through the operator API (`POST
//! /internal/v1/replays`) and follows it (`GET /internal/v1/replays/{id}`) with a progress
//! bar on stderr until it is done, then prints the job on stdout. The job runs in the server
//! on its timer: interrupting the command leaves it running (`--no-wait` returns at once).

use crate::cli::{self, Remote};
use anyhow::{Context as _, Result, anyhow};
use serde_json::{Value, json};
use std::io::Write as _;
use std::time::Duration;

/// How often a followed job is read.
const POLL: Duration = Duration::from_millis(500);

/// A time given on the command line: a duration back from `now_ms` (`90s`, `30m`, `2h`,
/// `7d`) or milliseconds since the Unix epoch.
pub fn parse_time(text: &str, now_ms: u64) -> Result<u64> {
    let text = text.trim();
    let unit = |suffix: char, ms: u64| -> Option<u64> {
        let n: u64 = text.strip_suffix(suffix)?.parse().ok()?;
        Some(now_ms.saturating_sub(n.checked_mul(ms)?))
    };
    unit('s', 1_000)
        .or_else(|| unit('m', 60_000))
        .or_else(|| unit('h', 3_600_000))
        .or_else(|| unit('d', 86_400_000))
        .or_else(|| text.parse::<u64>().ok())
        .ok_or_else(|| {
            anyhow!("{text:?} is not a time: use 90s, 30m, 2h, 7d or milliseconds since the epoch")
        })
}

/// One line of progress: a bar, done/total, failed, state.
pub fn progress_line(job: &Value) -> String {
    let total = job["total"].as_u64().unwrap_or(0);
    let done = job["done"].as_u64().unwrap_or(0);
    let failed = job["failed"].as_u64().unwrap_or(0);
    let state = job["state"].as_str().unwrap_or("?");
    const WIDTH: u64 = 30;
    let filled = match total {
        0 => 0,
        t => ((done + failed) * WIDTH / t).min(WIDTH),
    };
    let bar: String = (0..WIDTH)
        .map(|i| if i < filled { '#' } else { '.' })
        .collect();
    let total = match state {
        "selecting" => format!("{total}+"),
        _ => total.to_string(),
    };
    format!("[{bar}] {done}/{total} replayed, {failed} failed ({state})")
}

/// What to replay.
pub struct Request {
    /// The subscriptions (`sub_...`); none: every subscription's deliveries (or `client`'s).
    pub subscriptions: Vec<String>,
    /// With no subscriptions: only this client's.
    pub client: Option<String>,
    /// Start of the range (ms since the epoch).
    pub since: u64,
    /// End of the range (excluded), if not now.
    pub until: Option<u64>,
    /// Statuses (`failed`, `skipped`, `delivered`, `cancelled`); empty: the server's default.
    pub statuses: Vec<String>,
    /// Event types; empty: all.
    pub event_types: Vec<String>,
}

/// Starts the job and, unless `no_wait`, follows it to its end.
pub async fn run(remote: &Remote, request: Request, no_wait: bool) -> Result<()> {
    let mut body = json!({"since": request.since});
    if !request.subscriptions.is_empty() {
        body["subscriptionIds"] = json!(request.subscriptions);
    }
    if let Some(client) = request.client {
        body["clientId"] = json!(client);
    }
    if let Some(until) = request.until {
        body["until"] = json!(until);
    }
    if !request.statuses.is_empty() {
        body["status"] = json!(request.statuses);
    }
    if !request.event_types.is_empty() {
        body["eventTypes"] = json!(request.event_types);
    }
    let headers = [("content-type".to_owned(), "application/json".to_owned())];
    let (status, text) = remote
        .call(
            "POST",
            "/internal/v1/replays",
            Some(body.to_string().into_bytes()),
            &headers,
        )
        .await?;
    if status != 202 || no_wait {
        return cli::print_answer(status, &text, None);
    }
    let started: Value = serde_json::from_str(&text).context("the server's answer")?;
    let id = started["data"]["id"]
        .as_str()
        .with_context(|| format!("no job id in {text}"))?
        .to_owned();
    let path = format!("/internal/v1/replays/{}", cli::segment(&id));
    let mut stderr = std::io::stderr();
    loop {
        let (status, text) = remote.call("GET", &path, None, &[]).await?;
        if status != 200 {
            return cli::print_answer(status, &text, None);
        }
        let job: Value = serde_json::from_str(&text).context("the server's answer")?;
        let _ = write!(stderr, "\r{}", progress_line(&job["data"]));
        let _ = stderr.flush();
        if !matches!(
            job["data"]["state"].as_str(),
            Some("selecting" | "replaying")
        ) {
            let _ = writeln!(stderr);
            return cli::print_answer(status, &text, None);
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_durations_back_from_now_or_epoch_milliseconds() {
        let now = 1_767_225_600_000;
        assert_eq!(parse_time("90s", now).expect("s"), now - 90_000);
        assert_eq!(parse_time("30m", now).expect("m"), now - 1_800_000);
        assert_eq!(parse_time("2h", now).expect("h"), now - 7_200_000);
        assert_eq!(parse_time(" 7d ", now).expect("d"), now - 604_800_000);
        assert_eq!(
            parse_time("1767225000000", now).expect("ms"),
            1_767_225_000_000
        );
        for bad in ["", "2x", "h", "-2h", "2.5h", "yesterday"] {
            assert!(parse_time(bad, now).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_progress_line_shows_the_share_done() {
        let line =
            progress_line(&json!({"total": 10, "done": 4, "failed": 1, "state": "replaying"}));
        assert_eq!(
            line,
            "[###############...............] 4/10 replayed, 1 failed (replaying)"
        );
        let selecting =
            progress_line(&json!({"total": 3, "done": 0, "failed": 0, "state": "selecting"}));
        assert!(selecting.contains("0/3+"), "{selecting}");
    }
}
