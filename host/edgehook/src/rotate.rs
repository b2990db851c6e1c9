//! `edgehook subscription rotate-secret ID [--overlap-seconds N]`: the operator gives any
//! client's subscription a new signing secret (a leaked one, say) through
//! `POST /internal/v1/subscriptions/{id}/rotate-secret`, with the partner's overlap rules:
//! the old secret keeps signing beside the new one for the overlap (24 hours by default, at
//! most 7 days; 0 stops it at once, what a leak usually calls for). The new secret is
//! printed once: hand it to the partner over a channel as safe as the one keys go by.

use crate::cli::{self, Remote};
use anyhow::Result;

/// The command's own arguments (the server and token are the other operator commands').
#[derive(clap::Args, Debug)]
pub struct RotateArgs {
    /// The subscription id (sub_...).
    pub id: String,
    /// How long the old secret keeps signing beside the new one, in seconds (0 to 604800;
    /// 0: it stops at once). Default: the server's, 86400 (24 hours).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=604_800))]
    pub overlap_seconds: Option<u64>,
}

impl RotateArgs {
    /// The request's path.
    pub fn path(&self) -> String {
        format!(
            "/internal/v1/subscriptions/{}/rotate-secret",
            cli::segment(&self.id)
        )
    }

    /// The request's body and headers: none without `--overlap-seconds`.
    pub fn body(&self) -> (Option<Vec<u8>>, Vec<(String, String)>) {
        match self.overlap_seconds {
            None => (None, Vec::new()),
            Some(s) => (
                Some(
                    serde_json::json!({ "overlapSeconds": s })
                        .to_string()
                        .into_bytes(),
                ),
                vec![("content-type".to_owned(), "application/json".to_owned())],
            ),
        }
    }
}

/// Rotates the secret and prints the server's answer (the new secret, once).
pub async fn run(remote: &Remote, args: &RotateArgs) -> Result<()> {
    let (body, headers) = args.body();
    let (status, text) = remote.call("POST", &args.path(), body, &headers).await?;
    cli::print_answer(status, &text, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_has_a_body_only_with_an_overlap() {
        let args = |overlap_seconds| RotateArgs {
            id: "sub_1".to_owned(),
            overlap_seconds,
        };
        assert_eq!(
            args(None).path(),
            "/internal/v1/subscriptions/sub_1/rotate-secret"
        );
        assert_eq!(args(None).body(), (None, Vec::new()));
        let (body, headers) = args(Some(0)).body();
        assert_eq!(body.as_deref(), Some(&br#"{"overlapSeconds":0}"#[..]));
        assert_eq!(headers[0].1, "application/json");
    }
}
