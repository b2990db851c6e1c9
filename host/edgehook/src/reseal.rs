//! `edgehook reseal`: seals every stored signing secret under the server's current key
//! (`seal_key`) through the operator API (`POST /internal/v1/secrets/reseal`), a bounded
//! batch a call, with a running count on stderr, until the pass is done; then prints the
//! totals on stdout. Run it after a key rotation (before dropping `seal_previous_key`) or
//! once a key is first set on a store of plain secrets. Interrupted, it can be run again:
//! records already sealed under the current key are left as they are.

use crate::cli::{self, Remote};
use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use std::io::Write as _;

/// What a whole pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// List entries looked at.
    pub scanned: u64,
    /// Records sealed again under the current key.
    pub resealed: u64,
    /// Subscriptions (and clients' notification endpoints) whose secret opens under neither
    /// key.
    pub unreadable: Vec<String>,
    /// Calls made.
    pub batches: u64,
}

impl Totals {
    /// Adds one call's answer (its `data`); the next call's cursor, `None` when done.
    pub fn add(&mut self, data: &Value) -> Result<Option<String>> {
        let count = |field: &str| {
            data[field]
                .as_u64()
                .with_context(|| format!("no {field} in the server's answer"))
        };
        self.scanned += count("scanned")?;
        self.resealed += count("resealed")?;
        self.batches += 1;
        let named = |field: &str| {
            let ids = data[field].as_array().into_iter().flatten();
            ids.filter_map(|id| id.as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        };
        self.unreadable.extend(named("unreadable"));
        let endpoints = named("unreadableNotificationEndpoints").into_iter();
        self.unreadable
            .extend(endpoints.map(|c| format!("the notification endpoint of {c}")));
        Ok(data["nextCursor"].as_str().map(str::to_owned))
    }

    /// The one line of progress: records looked at, re-sealed, unreadable.
    pub fn line(&self) -> String {
        format!(
            "{} looked at, {} re-sealed, {} unreadable ({} calls)",
            self.scanned,
            self.resealed,
            self.unreadable.len(),
            self.batches
        )
    }
}

/// Runs a whole pass, `limit` records a call.
pub async fn run(remote: &Remote, limit: u32) -> Result<()> {
    let headers = [("content-type".to_owned(), "application/json".to_owned())];
    let mut totals = Totals::default();
    let mut cursor: Option<String> = None;
    let mut stderr = std::io::stderr();
    loop {
        let mut body = json!({ "limit": limit });
        if let Some(c) = &cursor {
            body["cursor"] = json!(c);
        }
        let (status, text) = remote
            .call(
                "POST",
                "/internal/v1/secrets/reseal",
                Some(body.to_string().into_bytes()),
                &headers,
            )
            .await?;
        if status != 200 {
            if totals.batches > 0 {
                let _ = writeln!(stderr);
            }
            return cli::print_answer(status, &text, None);
        }
        let answer: Value = serde_json::from_str(&text).context("the server's answer")?;
        cursor = totals.add(&answer["data"])?;
        let _ = write!(stderr, "\r{}", totals.line());
        let _ = stderr.flush();
        if cursor.is_none() {
            break;
        }
    }
    let _ = writeln!(stderr);
    let report = json!({
        "scanned": totals.scanned,
        "resealed": totals.resealed,
        "unreadable": totals.unreadable,
        "batches": totals.batches,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    if !totals.unreadable.is_empty() {
        bail!(
            "{} subscription(s) hold a secret that opens under neither key (listed above): \
             keep seal_previous_key, or have their owners rotate their secrets",
            totals.unreadable.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_each_answer_and_follow_its_cursor() {
        let mut totals = Totals::default();
        let next = totals
            .add(
                &json!({"scanned": 2, "resealed": 1, "unreadable": ["sub_a"],
                         "unreadableNotificationEndpoints": ["acme"],
                         "nextCursor": "0.2", "done": false}),
            )
            .expect("an answer");
        assert_eq!(next.as_deref(), Some("0.2"));
        let next = totals
            .add(&json!({"scanned": 1, "resealed": 1, "unreadable": [],
                         "nextCursor": null, "done": true}))
            .expect("an answer");
        assert_eq!(next, None);
        assert_eq!(
            totals,
            Totals {
                scanned: 3,
                resealed: 2,
                unreadable: vec!["sub_a".into(), "the notification endpoint of acme".into()],
                batches: 2
            }
        );
        assert_eq!(
            totals.line(),
            "3 looked at, 2 re-sealed, 2 unreadable (2 calls)"
        );
        assert!(
            totals.add(&json!({"resealed": 1})).is_err(),
            "a broken answer"
        );
    }
}
