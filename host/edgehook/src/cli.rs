//! Helpers of the operator commands: the admin token and seal key files, input, and a small
//! HTTP client for talking to a running server.

use anyhow::{Context as _, Result, anyhow};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rand::TryRng as _;
use std::io::Read as _;
use std::path::Path;

/// The file in the data directory that holds the operator token.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// Reads the operator token from `<data_dir>/admin-token`.
pub fn read_admin_token(data_dir: &Path) -> Result<String> {
    let path = data_dir.join(ADMIN_TOKEN_FILE);
    let token =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(token.trim().to_owned())
}

/// The file in the data directory that holds the key signing secrets are sealed under
/// (`seal_key`), when none is given. Never copied by `edgehook backup`.
pub const SEAL_KEY_FILE: &str = "seal-key";

/// The operator token in `<data_dir>/admin-token`, created (random, mode 0600) if missing.
/// An empty file (a first start cut short before the token was written) is written anew; an
/// unreadable one is an error that says so.
pub fn admin_token_or_create(data_dir: &Path) -> Result<String> {
    let (token, created) = secret_file_or_create(data_dir, ADMIN_TOKEN_FILE, |bytes| {
        format!("eha_{}", hex::encode(bytes))
    })?;
    if created {
        tracing::info!(
            file = %data_dir.join(ADMIN_TOKEN_FILE).display(),
            "admin token created"
        );
    }
    Ok(token)
}

/// The seal key in `<data_dir>/seal-key` (64 hex digits), created (random, mode 0600) if
/// missing, as the admin token is; whether it was created now.
pub fn seal_key_or_create(data_dir: &Path) -> Result<(String, bool)> {
    secret_file_or_create(data_dir, SEAL_KEY_FILE, hex::encode)
}

/// The `seal_key` `serve` starts with when none is given (`--set seal_key`,
/// `EDGEHOOK_SEAL_KEY`): for the embedded store, the data directory's `seal-key`, made on
/// first start with one warning. A shared store (`shared`: `--kv`) needs the same key on
/// every instance, which no instance can make alone: none (secrets stored unsealed), with a
/// warning.
pub fn seal_key_for_serve(data_dir: &Path, shared: bool) -> Result<Option<String>> {
    if shared {
        tracing::warn!(
            "no seal_key: signing secrets are stored unsealed in the shared store; give every \
             instance the same key (--set seal_key=... or EDGEHOOK_SEAL_KEY, 64 hex digits \
             from openssl rand -hex 32)"
        );
        return Ok(None);
    }
    let (key, created) = seal_key_or_create(data_dir)?;
    if created {
        let file = std::path::absolute(data_dir.join(SEAL_KEY_FILE))?;
        tracing::warn!(
            file = %file.display(),
            "seal key created: signing secrets are sealed under it; keep a copy apart from the \
             store and its backups (losing it means every partner must rotate)"
        );
    }
    Ok(Some(key))
}

/// The text of `<data_dir>/<file>`, or if it is missing or empty a new one made by `make`
/// from 32 random bytes and written there (mode 0600); whether it was made now.
fn secret_file_or_create(
    data_dir: &Path,
    file: &str,
    make: impl Fn([u8; 32]) -> String,
) -> Result<(String, bool)> {
    let path = data_dir.join(file);
    let empty = match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => return Ok((text.trim().to_owned(), false)),
        Ok(_) => true,
        Err(_) if !path.exists() => false,
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let mut bytes = [0u8; 32];
    rand::rngs::SysRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| anyhow!("no randomness for {file}: {e}"))?;
    let token = make(bytes);
    let mut options = std::fs::OpenOptions::new();
    // A new file only if there was none, so two first starts cannot write two tokens.
    if empty {
        options.write(true).truncate(true);
    } else {
        options.write(true).create_new(true);
    }
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    std::io::Write::write_all(&mut file, token.as_bytes())?;
    file.sync_all()?;
    Ok((token, true))
}

/// `edgehook backup`: copies the embedded store of `data_dir` (while `serve` may be running
/// on it) and its admin token file into `to`, a new data directory that `serve --data-dir`
/// starts from once the seal key is put back beside it: the key is never in a backup (a
/// copied backup must not open the secrets it holds). Returns what to tell the operator.
pub fn backup(data_dir: &Path, to: &Path) -> Result<String> {
    let context = || format!("backing up {} to {}", data_dir.display(), to.display());
    let to_store = to.join("store");
    let copied = match edgehook_runtime::embedded::backup(&data_dir.join("store"), &to_store) {
        Ok(copied) => copied,
        // A running `serve` has the store open: it makes the copy.
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            let to_store = std::path::absolute(&to_store)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(crate::control::request_backup(data_dir, &to_store))
                .with_context(context)?
        }
        Err(e) => return Err(e).with_context(context),
    };
    let token = data_dir.join(ADMIN_TOKEN_FILE);
    if token.exists() {
        std::fs::copy(&token, to.join(ADMIN_TOKEN_FILE))
            .with_context(|| format!("copying {}", token.display()))?;
    }
    let sealed = match data_dir.join(SEAL_KEY_FILE).exists() {
        true => format!(
            " (the seal key is not in it: copy {} there from where you keep it, or pass \
             --set seal_key=...)",
            data_dir.join(SEAL_KEY_FILE).display()
        ),
        false => String::new(),
    };
    Ok(format!(
        "backed up {} keys ({} bytes) to {}; start from it with: edgehook serve --data-dir {}{sealed}",
        copied.keys,
        copied.bytes,
        to.display(),
        to.display()
    ))
}

/// Prints a server's answer: the whole (pretty-printed) body, or with `only` just the string
/// `data.<only>` of it (e.g. `apiKey`, for `KEY=$(edgehook keys issue acme --quiet)`). An
/// answer of 400 or more is an error; with `only` its body goes to stderr, so a command
/// substitution never captures it.
pub fn print_answer(status: u16, text: &str, only: Option<&str>) -> Result<()> {
    if status >= 400 {
        if only.is_some() {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
        return Err(anyhow!("the server answered {status}"));
    }
    match only {
        None => println!("{text}"),
        Some(field) => {
            let answer: serde_json::Value = serde_json::from_str(text)
                .with_context(|| format!("the server's answer is not JSON: {text}"))?;
            let value = answer["data"][field]
                .as_str()
                .with_context(|| format!("the server's answer has no data.{field}: {text}"))?;
            println!("{value}");
        }
    }
    Ok(())
}

/// Prints a minted portal link (`POST .../portal-links`'s answer) as a whole URL: `origin`
/// in front of its path; the error answer as [`print_answer`] does.
pub fn print_portal_link(status: u16, text: &str, origin: &str) -> Result<()> {
    if status >= 400 {
        return print_answer(status, text, None);
    }
    let answer: serde_json::Value = serde_json::from_str(text)
        .with_context(|| format!("the server's answer is not JSON: {text}"))?;
    let path = answer["data"]["url"]
        .as_str()
        .with_context(|| format!("the server's answer has no data.url: {text}"))?;
    println!("{}{path}", origin.trim_end_matches('/'));
    eprintln!("usable once, for 15 minutes; the session it opens lasts 12 hours");
    Ok(())
}

/// The path of a client's keys, or (`None`) of the ingest keys.
pub fn keys_path(client: Option<&str>) -> String {
    match client {
        Some(c) => format!("/internal/v1/clients/{}/keys", segment(c)),
        None => "/internal/v1/ingest-keys".to_owned(),
    }
}

/// The runtime the operator commands run their calls on.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// `path` made absolute (against the working directory), for messages.
pub fn absolute(path: &Path) -> std::path::PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

/// Percent-encodes a path segment (ids typed by a person may contain anything).
pub fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The bytes of a file, or of standard input for `None` or `-`.
pub fn read_input(file: Option<&Path>) -> Result<Vec<u8>> {
    match file {
        Some(p) if p != Path::new("-") => {
            std::fs::read(p).with_context(|| format!("reading {}", p.display()))
        }
        _ => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .context("reading standard input")?;
            Ok(buf)
        }
    }
}

/// A running server, as the operator commands see it.
pub struct Remote {
    base: String,
    token: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Remote {
    /// A client for the server at `base` (e.g. `http://127.0.0.1:8080`) with an operator
    /// token.
    pub fn new(base: &str, token: &str) -> Result<Self> {
        if !base.starts_with("http://") {
            return Err(anyhow!("--server must be an http:// URL, got {base:?}"));
        }
        Ok(Remote {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    /// One call; returns the status and the body, pretty-printed when it is JSON.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(String, String)],
    ) -> Result<(u16, String)> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("authorization", format!("Bearer {}", self.token));
        for (n, v) in headers {
            req = req.header(n, v);
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        let resp = self.client.request(req).await.with_context(|| {
            format!("cannot reach {} (is `edgehook serve` running?)", self.base)
        })?;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await?.to_bytes();
        let text = match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(v) => serde_json::to_string_pretty(&v)?,
            Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
        };
        Ok((status, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgehook_testkit::temp_dir;

    #[test]
    fn an_empty_token_file_is_written_anew_and_an_unreadable_one_says_why() {
        let dir = temp_dir("cli-token");
        // A first start cut short after creating the file, before writing it.
        std::fs::write(dir.join(ADMIN_TOKEN_FILE), b"").expect("empty file");
        let token = admin_token_or_create(&dir).expect("a token");
        assert!(token.starts_with("eha_") && token.len() == 68, "{token}");
        assert_eq!(admin_token_or_create(&dir).expect("kept"), token);
        // Unreadable (here: a directory where the file should be).
        let other = temp_dir("cli-token-dir");
        std::fs::create_dir_all(other.join(ADMIN_TOKEN_FILE)).expect("dir");
        let err = format!("{:#}", admin_token_or_create(&other).expect_err("an error"));
        assert!(err.contains("reading"), "the real cause: {err}");
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&other);
    }
}
