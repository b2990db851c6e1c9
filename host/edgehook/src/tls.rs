//! TLS for `serve` (`--tls-cert FILE --tls-key FILE`): rustls with HTTP/2 and HTTP/1.1 offered
//! by ALPN, and the certificate read again on `SIGHUP` ([`Tls::reload`]). A reload swaps the
//! configuration new connections are accepted with; connections already open keep theirs,
//! so none is dropped. A reload that fails (a missing file, a key that does not match) keeps
//! the certificate in use and says why in the log.

use anyhow::{Context as _, Result, anyhow};
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use tokio_rustls::TlsAcceptor;

/// The certificate and key files, and the configuration read from them last.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<ServerConfig>>,
}

impl Tls {
    /// Reads the certificate chain (PEM, the leaf first) and its private key (PEM).
    pub fn load(cert: &Path, key: &Path) -> Result<Tls> {
        Ok(Tls {
            current: RwLock::new(config(cert, key)?),
            cert: cert.to_owned(),
            key: key.to_owned(),
        })
    }

    /// An acceptor with the configuration in use now.
    pub fn acceptor(&self) -> TlsAcceptor {
        let current = self.current.read().unwrap_or_else(|p| p.into_inner());
        TlsAcceptor::from(current.clone())
    }

    /// Reads the files again; on success, new connections use them.
    pub fn reload(&self) -> Result<()> {
        let fresh = config(&self.cert, &self.key)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = fresh;
        Ok(())
    }
}

/// A server configuration from PEM files, offering `h2` and `http/1.1`.
fn config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading the certificate {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading the certificate {}", cert.display()))?;
    if chain.is_empty() {
        return Err(anyhow!("no certificate in {}", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("reading the private key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the certificate and the key do not go together")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
