//! `edgehook subscription update ID [--url URL] [--event-type TYPE]...`: a partner changes
//! its subscription in place through `PATCH /v1/webhooks/{id}` (with its API key): a new
//! delivery URL (checked by the server as at create), new event types (replacing the set),
//! or both; the same id, secret and history. Deliveries already queued go to the URL in
//! force when each attempt is made.

use crate::cli::{self, Remote};
use anyhow::{Result, bail};

/// The command's arguments.
#[derive(clap::Args, Debug)]
pub struct UpdateArgs {
    /// The subscription id (sub_...).
    pub id: String,
    /// The new delivery URL.
    #[arg(long)]
    pub url: Option<String>,
    /// A new event type, repeatable (the set replaces the old one): load.created,
    /// load.updated, load.status_changed.
    #[arg(long = "event-type", value_name = "TYPE")]
    pub event_types: Vec<String>,
    /// The partner's API key (ehk_...).
    #[arg(long, env = "EDGEHOOK_API_KEY", hide_env_values = true)]
    pub key: String,
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080", env = "EDGEHOOK_SERVER")]
    pub server: String,
}

impl UpdateArgs {
    /// The request's path.
    pub fn path(&self) -> String {
        format!("/v1/webhooks/{}", cli::segment(&self.id))
    }

    /// The request's body: the fields given, at least one.
    pub fn body(&self) -> Result<Vec<u8>> {
        let mut body = serde_json::Map::new();
        if let Some(url) = &self.url {
            body.insert("url".to_owned(), url.clone().into());
        }
        if !self.event_types.is_empty() {
            body.insert("eventTypes".to_owned(), self.event_types.clone().into());
        }
        if body.is_empty() {
            bail!("nothing to change: give --url, --event-type, or both");
        }
        Ok(serde_json::Value::Object(body).to_string().into_bytes())
    }
}

/// Sends the change and prints the server's answer (the subscription as it now is).
pub async fn run(args: &UpdateArgs) -> Result<()> {
    let partner = Remote::new(&args.server, &args.key)?;
    let headers = [("content-type".to_owned(), "application/json".to_owned())];
    let (status, text) = partner
        .call("PATCH", &args.path(), Some(args.body()?), &headers)
        .await?;
    cli::print_answer(status, &text, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: Option<&str>, event_types: &[&str]) -> UpdateArgs {
        UpdateArgs {
            id: "sub_1".to_owned(),
            url: url.map(str::to_owned),
            event_types: event_types.iter().map(|t| (*t).to_owned()).collect(),
            key: "ehk_x".to_owned(),
            server: "http://127.0.0.1:8080".to_owned(),
        }
    }

    #[test]
    fn the_body_holds_what_was_given_and_something_must_be() {
        assert_eq!(args(None, &[]).path(), "/v1/webhooks/sub_1");
        let both = args(
            Some("https://h.example.com/x"),
            &["load.created", "load.updated"],
        );
        let body: serde_json::Value =
            serde_json::from_slice(&both.body().expect("body")).expect("json");
        assert_eq!(
            body,
            serde_json::json!({
                "url": "https://h.example.com/x",
                "eventTypes": ["load.created", "load.updated"]
            })
        );
        let only_types = args(None, &["load.updated"]).body().expect("body");
        assert_eq!(only_types, br#"{"eventTypes":["load.updated"]}"#);
        assert!(args(None, &[]).body().is_err());
    }
}
