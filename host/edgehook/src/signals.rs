//! The signals `edgehook serve` answers: `SIGINT` and `SIGTERM` stop it ([`shutdown`], then
//! a graceful shutdown), `SIGHUP` reads its TLS certificate again ([`reload_on_sighup`]).

use crate::tls::Tls;
use std::sync::Arc;

/// Reads the TLS certificate and key again on every `SIGHUP`: new connections use them,
/// open ones keep theirs. A failed reload keeps the certificate in use and logs why.
pub fn reload_on_sighup(tls: Arc<Tls>) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            return;
        };
        while hangups.recv().await.is_some() {
            match tls.reload() {
                Ok(()) => tracing::info!("tls certificate reloaded"),
                Err(e) => tracing::error!(
                    error = %format!("{e:#}"),
                    "tls certificate reload failed; the one in use stays"
                ),
            }
        }
    });
    #[cfg(not(unix))]
    let _ = tls;
}

/// Returns when the process is asked to stop: `SIGINT` (Ctrl-C) or `SIGTERM`.
pub async fn shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
