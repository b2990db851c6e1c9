//! `serve`'s control socket: a Unix socket in the data directory (`control.sock`, owner
//! only) through which `edgehook backup` asks a running `serve` for a copy of its embedded
//! store. The store is open in one process at a time, so the copy is made by the process
//! that has it open ([`FjallStore::copy_to`]). Being able to open the socket is the
//! authority: it is the data directory's owner's, as the store's files are.
//!
//! One request a connection, one line each way: `backup <absolute path>` →
//! `ok <keys> <bytes>` or `error <message>`.

use anyhow::{Context as _, Result, bail};
use edgehook_runtime::embedded::{Copied, FjallStore};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// The socket's file in the data directory.
pub const SOCKET: &str = "control.sock";

/// The control socket of a running `serve`.
pub struct Control {
    task: tokio::task::JoinHandle<()>,
    path: PathBuf,
}

impl Control {
    /// Listens on `<data_dir>/control.sock` for requests to `store`. If it cannot (a path
    /// too long for a Unix socket, say), only the copy while running is lost: a warning, and
    /// `None`.
    pub fn start(data_dir: &Path, store: FjallStore) -> Option<Control> {
        match listen(data_dir, store) {
            Ok(task) => Some(Control {
                task,
                path: data_dir.join(SOCKET),
            }),
            Err(e) => {
                tracing::warn!(
                    error = %format!("{e:#}"),
                    "no control socket: `edgehook backup` needs serve stopped"
                );
                None
            }
        }
    }

    /// Stops answering, and removes the socket.
    pub fn stop(self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Listens on `<data_dir>/control.sock` (replacing a stale one: the store's lock, held by
/// this process, says no other `serve` uses this data directory) and answers each request
/// with `store`, until the returned task is aborted.
fn listen(data_dir: &Path, store: FjallStore) -> Result<tokio::task::JoinHandle<()>> {
    let path = data_dir.join(SOCKET);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
    }
    let listener =
        UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(answer(conn, store.clone()));
        }
    }))
}

/// Reads one request from `conn` and answers it.
async fn answer(conn: UnixStream, store: FjallStore) {
    let (read, mut write) = conn.into_split();
    let mut line = String::new();
    let reply = match BufReader::new(read).read_line(&mut line).await {
        Ok(_) => match line.trim_end().strip_prefix("backup ") {
            Some(to) => {
                let to = PathBuf::from(to);
                match tokio::task::spawn_blocking(move || store.copy_to(&to)).await {
                    Ok(Ok(c)) => format!("ok {} {}\n", c.keys, c.bytes),
                    Ok(Err(e)) => format!("error {e}\n"),
                    Err(e) => format!("error the copy stopped: {e}\n"),
                }
            }
            None => "error unknown request (backup <absolute path>)\n".to_owned(),
        },
        Err(e) => format!("error {e}\n"),
    };
    let _ = write.write_all(reply.as_bytes()).await;
}

/// Asks the `serve` running on `data_dir` to copy its store to `to` (a new, absolute
/// directory).
pub async fn request_backup(data_dir: &Path, to: &Path) -> Result<Copied> {
    let path = data_dir.join(SOCKET);
    let conn = UnixStream::connect(&path).await.with_context(|| {
        format!(
            "the store is in use, and its server does not answer on {}",
            path.display()
        )
    })?;
    let (read, mut write) = conn.into_split();
    write
        .write_all(format!("backup {}\n", to.display()).as_bytes())
        .await?;
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    let line = line.trim_end();
    if let Some(message) = line.strip_prefix("error ") {
        bail!("the server could not copy its store: {message}");
    }
    let mut fields = line.strip_prefix("ok ").unwrap_or_default().split(' ');
    let mut number = || fields.next().and_then(|n| n.parse::<u64>().ok());
    match (number(), number()) {
        (Some(keys), Some(bytes)) => Ok(Copied { keys, bytes }),
        _ => bail!("the server answered {line:?}"),
    }
}
